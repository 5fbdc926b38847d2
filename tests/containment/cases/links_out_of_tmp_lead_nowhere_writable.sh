
ln -s / /tmp/root
attempt symlink-root bash -c 'echo x > /tmp/root/var/tmp/pwned'
attempt symlink-etc bash -c 'echo x >> /tmp/root/etc/passwd'
ln -s /etc/passwd /tmp/passwd
attempt symlink-passwd bash -c 'echo x >> /tmp/passwd'
attempt hardlink-passwd ln /etc/passwd /tmp/passwd.hard
attempt hardlink-bash ln /bin/bash /tmp/bash.hard
attempt proc-self-root bash -c 'echo x > /proc/self/root/var/tmp/pwned'
attempt proc-1-root bash -c 'echo x > /proc/1/root/tmp/pwned'
mkdir /tmp/dir
attempt move-out mv /tmp/dir /var/tmp/dir
attempt copy-out cp /tmp/root/etc/hostname /run/lock/hostname
echo DONE
