
setsid nohup bash -c 'exec -a @MARKER@ sleep 600' >/dev/null 2>&1 &
( setsid bash -c 'trap "" HUP TERM INT; exec -a @MARKER@ sleep 600' >/dev/null 2>&1 & )
nohup python3 -c 'import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["@MARKER@", "600"])' >/dev/null 2>&1 &
sleep 2
n=0
for f in /proc/[0-9]*/cmdline; do
  IFS= read -r -d '' argv0 <"$f" 2>/dev/null
  if [ "$argv0" = @MARKER@ ]; then n=$((n + 1)); fi
done
echo "SEEN:daemons:$n"
echo DONE
