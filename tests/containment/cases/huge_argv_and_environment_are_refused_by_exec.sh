
big=$(head -c 3000000 /dev/zero | tr '\0' a)
one=$(head -c 200000 /dev/zero | tr '\0' a)
attempt argv-3mb /bin/true $big
attempt arg-200kb /bin/true "$one"
attempt env-200kb env "HUGE=$one" /bin/true
words=$(printf 'w %.0s' $(seq 1 300000))
attempt argv-300k-words /bin/true $words
echo "SEEN:script-len:${#big}"
echo DONE
