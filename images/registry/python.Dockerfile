# Runner image for people with a registry: Python on the official slim image.
# Build from the repository root after `cargo build --release --workspace`:
#   docker build -f images/registry/python.Dockerfile -t scriptgate-python:latest target/release
# then set sandbox.python_image = "scriptgate-python:latest".
# The supervisor links glibc dynamically: use a glibc base (Debian/Ubuntu), not Alpine.
FROM python:3.12-slim
COPY scriptgate-supervisor /usr/local/bin/scriptgate-supervisor
USER 65534:65534
WORKDIR /tmp
ENV HOME=/tmp LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1
ENTRYPOINT ["/usr/local/bin/scriptgate-supervisor"]
CMD ["python"]
