
echo "SEEN:hard:$(ulimit -Hn) $(ulimit -Hf) $(ulimit -Hc)"
attempt raise-nofile bash -c 'ulimit -n $((@NOFILE@ * 4))'
attempt raise-fsize bash -c 'ulimit -f unlimited'
attempt raise-core bash -c 'ulimit -c 1024'
echo DONE
