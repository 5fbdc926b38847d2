
n = 2 * os.cpu_count()
for _ in range(n):
    if os.fork() == 0:
        while True:
            pass
seen("burners", n)
while True:
    pass
