# The service image for people with a registry: built from source on public images, so it needs
# neither Rust nor mmdebstrap on the host. From the repository root (.dockerignore leaves target/
# out of the context):
#   docker build -f images/registry/service.Dockerfile -t scriptgate-service:latest .
# docker-compose.yml then uses this image as it is (`docker-compose up -d` builds only when the
# image is missing). The runners still come from `scriptgate images build` or the Dockerfiles next
# to this one. Not exercised by the tests (they run without a registry).
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin scriptgate

FROM debian:bookworm-slim
COPY --from=build /src/target/release/scriptgate /usr/local/bin/scriptgate
WORKDIR /data
ENV SCRIPTGATE_LISTEN=0.0.0.0:8080 SCRIPTGATE_DATA_DIR=/data LANG=C.UTF-8
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
  CMD ["/usr/local/bin/scriptgate", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/scriptgate"]
CMD ["serve"]
