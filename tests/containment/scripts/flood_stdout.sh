head -c 1073741824 /dev/zero | tr '\0' o
echo DONE >&2
