#!/usr/bin/env bash
# Test-only tools: a Python virtualenv with the real clients of tests/py/requirements.txt (the MCP
# SDK, openapi-python-client, schemathesis) and Debian's docker-compose for the sidecar test.
# Quick when current: the venv is rebuilt only when requirements.txt changes.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[test-deps] %s\n' "$*" >&2; }

venv=target/py-env
stamp="$venv/.requirements.sha256"
want=$(sha256sum tests/py/requirements.txt | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "creating $venv from tests/py/requirements.txt"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/py/requirements.txt
  echo "$want" >"$stamp"
fi

if ! command -v docker-compose >/dev/null 2>&1; then
  log "installing docker-compose (Debian's v1, for the sidecar test)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker-compose >/dev/null
fi
