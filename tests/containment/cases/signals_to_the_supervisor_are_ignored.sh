
for s in KILL TERM INT HUP QUIT STOP SEGV BUS USR1 USR2 ABRT ALRM; do
  kill -s "$s" 1 && echo "SEEN:sent:$s"
done
sleep 300 &
sleeper=$!
kill -9 -1
wait "$sleeper"
echo "SEEN:sleeper:$?"
echo DONE
