
attempt gateway-docker-api bash -c 'exec 3<>/dev/tcp/@GATEWAY@/2375'
attempt gateway-ssh bash -c 'exec 3<>/dev/tcp/@GATEWAY@/22'
attempt gateway-service bash -c 'exec 3<>/dev/tcp/@GATEWAY@/@PORT@'
attempt loopback-service bash -c 'exec 3<>/dev/tcp/127.0.0.1/@PORT@'
if [ -n "@HOSTADDR@" ]; then attempt host-service bash -c 'exec 3<>/dev/tcp/@HOSTADDR@/@PORT@'; fi
echo DONE
