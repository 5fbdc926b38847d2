echo before
kill -KILL 1
kill -STOP 1
kill -KILL -1
sleep 1
echo DONE
