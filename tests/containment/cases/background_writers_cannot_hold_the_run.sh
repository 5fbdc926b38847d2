
setsid bash -c 'while :; do echo spam; done' &
setsid bash -c 'exec 1>&2; while :; do echo spam; done' &
sleep 0.5
echo DONE
exit 0
