#!/usr/bin/env bash
# Shared set-up for scripts/serve and scripts/test: a Docker engine, mmdebstrap, the workspace built
# with the given cargo profile flags, and the runner images (built offline, quick when current).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[prepare] %s\n' "$*" >&2; }

scripts/ensure-docker.sh

if ! command -v mmdebstrap >/dev/null 2>&1; then
  log "installing mmdebstrap (builds the runner image's rootfs from Debian packages)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq mmdebstrap >/dev/null
fi

profile_dir=debug
cargo_flags=()
if [ "${1:-}" = "--release" ]; then
  profile_dir=release
  cargo_flags=(--release)
fi
log "building the workspace (${profile_dir})"
cargo build --workspace --locked "${cargo_flags[@]}"
# The supervisor statically linked (it runs in any image, and as a standalone agent). crt-static
# is given to the final link only: the rest of the workspace (proc macros included) stays as is.
log "linking the supervisor statically"
cargo rustc -p scriptgate-supervisor --bin scriptgate-supervisor --locked "${cargo_flags[@]}" \
  -- -C target-feature=+crt-static

log "building the runner images (minimal and the data profile; quick when current)"
"target/${profile_dir}/scriptgate" images build
