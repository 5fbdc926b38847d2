
# Up to twice its size, in 8 MiB files.
i=0
while [ "$i" -lt $((@SHM_MIB@ / 4 + 1)) ] && head -c 8388608 /dev/zero 2>/tmp/err >"/dev/shm/fill$i"; do
  i=$((i + 1))
done
if [ "$i" -ge $((@SHM_MIB@ / 4 + 1)) ]; then echo "ESCAPED:shm-fill:$((i * 8)) MiB written"; fi
echo "BLOCKED:shm-fill:$(errname "$(cat /tmp/err)")"
echo "SEEN:shm-bytes:$(cat /dev/shm/fill* | wc -c)"
rm -f /dev/shm/fill*
echo DONE
