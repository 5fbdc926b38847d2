import sys
chunk = 'e' * (1 << 20)
for _ in range(1024):
    sys.stderr.write(chunk)
print('DONE')
