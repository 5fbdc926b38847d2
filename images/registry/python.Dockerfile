# Runner image for people with a registry: Python on the official slim image.
# Build from the repository root after `scripts/prepare.sh --release` (which links the supervisor
# statically; a plain `cargo build --release --workspace` links it against glibc):
#   docker build -f images/registry/python.Dockerfile -t scriptgate-python:latest target/release
# then set sandbox.python_image = "scriptgate-python:latest".
# A statically linked supervisor runs on any base; one from `cargo build` needs glibc (not Alpine).
FROM python:3.12-slim
COPY scriptgate-supervisor /usr/local/bin/scriptgate-supervisor
USER 65534:65534
WORKDIR /tmp
ENV HOME=/tmp LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1
ENTRYPOINT ["/usr/local/bin/scriptgate-supervisor"]
CMD ["python"]
