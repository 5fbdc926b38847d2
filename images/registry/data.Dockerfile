# The `data` runner profile for people with a registry: Debian bookworm's Python stack (the same
# packages `scriptgate images build --profile data` installs offline).
# Build from the repository root after `scripts/prepare.sh --release` (which links the supervisor
# statically; a plain `cargo build --release --workspace` links it against glibc):
#   cp images/profile/scriptgate_plots.py target/release/
#   docker build -f images/registry/data.Dockerfile -t scriptgate-runner-data:latest target/release
# `GET /v1/profiles` reports package versions from the `scriptgate.profile.info` label that
# `scriptgate images build` records; images built this way report only their name and languages.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 bash jq gawk bc procps \
      python3-numpy python3-pandas python3-scipy python3-matplotlib python3-sklearn \
      python3-statsmodels python3-sympy python3-networkx python3-pil python3-requests \
      python3-bs4 python3-lxml python3-openpyxl python3-yaml python3-tabulate \
      sqlite3 fonts-dejavu-core curl ca-certificates \
 && rm -rf /var/lib/apt/lists/* /usr/share/doc /usr/share/man
COPY scriptgate-supervisor /usr/local/bin/scriptgate-supervisor
COPY scriptgate_plots.py /usr/local/lib/scriptgate/scriptgate_plots.py
# Imported at every interpreter start through a .pth file (Python runs with -I: no PYTHONPATH).
RUN site="$(python3 -c 'import site; print(site.getsitepackages()[0])')" \
 && mkdir -p "$site" \
 && cp /usr/local/lib/scriptgate/scriptgate_plots.py "$site/" \
 && echo "import scriptgate_plots" > "$site/scriptgate-plots.pth"
RUN mkdir -p /usr/local/share/scriptgate/mpl \
 && MPLCONFIGDIR=/usr/local/share/scriptgate/mpl MPLBACKEND=Agg python3 -c "import matplotlib.pyplot" \
 && chmod -R a+rX /usr/local/share/scriptgate
USER 65534:65534
WORKDIR /tmp
ENV HOME=/tmp LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 MPLBACKEND=Agg
ENTRYPOINT ["/usr/local/bin/scriptgate-supervisor"]
CMD ["python"]
