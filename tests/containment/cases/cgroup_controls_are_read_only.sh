
echo "SEEN:memory:$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)"
echo "SEEN:pids:$(cat /sys/fs/cgroup/pids/pids.max)"
attempt raise-memory bash -c 'echo 9223372036854771712 > /sys/fs/cgroup/memory/memory.limit_in_bytes'
attempt raise-pids bash -c 'echo max > /sys/fs/cgroup/pids/pids.max'
attempt raise-cpu bash -c 'echo -1 > /sys/fs/cgroup/cpu/cpu.cfs_quota_us'
attempt move-procs bash -c 'echo $$ > /sys/fs/cgroup/memory/cgroup.procs'
attempt notify-on-release bash -c 'echo 1 > /sys/fs/cgroup/memory/notify_on_release'
attempt release-agent bash -c 'echo /tmp/x > /sys/fs/cgroup/memory/release_agent'
attempt child-cgroup mkdir /sys/fs/cgroup/memory/escape
attempt devices-allow bash -c 'echo a > /sys/fs/cgroup/devices/devices.allow'
echo DONE
