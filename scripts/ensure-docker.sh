#!/usr/bin/env bash
# Makes a Docker engine available: installs docker.io and starts dockerd when `docker info` fails.
# On a machine where it starts the engine itself, it also installs gVisor's runsc when the package
# is available (best effort) and registers it, so the gVisor tests run; nothing requires it.
set -euo pipefail

log() { printf '[ensure-docker] %s\n' "$*" >&2; }

if docker info >/dev/null 2>&1; then
  log "engine already reachable"
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
  log "installing docker.io"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io >/dev/null
fi

if ! command -v runsc >/dev/null 2>&1 && [ ! -f /etc/docker/daemon.json ]; then
  log "installing runsc (gVisor), optional"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runsc >/dev/null 2>&1 \
    || log "runsc is not available here; the gVisor tests will be skipped"
fi

if [ ! -f /etc/docker/daemon.json ]; then
  mkdir -p /etc/docker
  if command -v runsc >/dev/null 2>&1; then
    cat >/etc/docker/daemon.json <<JSON
{"runtimes": {"runsc": {"path": "$(command -v runsc)", "runtimeArgs": ["--network=none"]}}}
JSON
  else
    echo '{}' >/etc/docker/daemon.json
  fi
fi

log "starting dockerd"
nohup dockerd >/var/log/dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    log "engine up: $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})')"
    exit 0
  fi
  sleep 0.5
done
log "dockerd did not come up; last log lines:"
tail -n 30 /var/log/dockerd.log >&2 || true
exit 1
