# Runner image for people with a registry: Bash (plus python3 for inline one-liners) on Debian slim.
# Build from the repository root after `scripts/prepare.sh --release` (which links the supervisor
# statically; a plain `cargo build --release --workspace` links it against glibc):
#   docker build -f images/registry/bash.Dockerfile -t scriptgate-bash:latest target/release
# then set sandbox.bash_image = "scriptgate-bash:latest".
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends python3 jq gawk bc procps \
    && rm -rf /var/lib/apt/lists/*
COPY scriptgate-supervisor /usr/local/bin/scriptgate-supervisor
USER 65534:65534
WORKDIR /tmp
ENV HOME=/tmp LANG=C.UTF-8
ENTRYPOINT ["/usr/local/bin/scriptgate-supervisor"]
CMD ["bash"]
