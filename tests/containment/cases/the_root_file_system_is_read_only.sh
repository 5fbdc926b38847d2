
attempt root bash -c 'echo x > /pwned'
attempt usr-bin touch /usr/bin/pwned
attempt etc-new bash -c 'echo x > /etc/pwned'
# World-writable directories on the image: only the read-only mount stops these.
attempt var-tmp bash -c 'echo x > /var/tmp/pwned'
attempt run-lock bash -c 'echo x > /run/lock/pwned'
attempt etc-passwd bash -c 'echo "pwn::0:0::/:/bin/sh" >> /etc/passwd'
attempt etc-hosts bash -c 'echo "1.2.3.4 example.com" >> /etc/hosts'
attempt etc-resolv bash -c 'echo "nameserver 1.2.3.4" >> /etc/resolv.conf'
attempt rm-sh rm -f /bin/sh
attempt chmod-bin chmod 777 /usr/bin
echo DONE
