# The `data` runner profile built without a registry: FROM the base that `scriptgate images build
# --profile data` imports from a Debian rootfs (mmdebstrap, python3 with numpy, pandas, scipy,
# matplotlib, scikit-learn, statsmodels, sympy, networkx, Pillow, requests, bs4, lxml, openpyxl,
# PyYAML, tabulate; sqlite3; DejaVu fonts), plus the supervisor and the plot hook.
ARG BASE
FROM ${BASE}
COPY scriptgate-supervisor /usr/local/bin/scriptgate-supervisor
COPY sitecustomize.py /usr/local/lib/scriptgate/sitecustomize.py
# Matplotlib's font list, built once here: every container starts with a read-only root.
RUN mkdir -p /usr/local/share/scriptgate/mpl \
 && MPLCONFIGDIR=/usr/local/share/scriptgate/mpl MPLBACKEND=Agg python3 -c "import matplotlib.pyplot" \
 && chmod -R a+rX /usr/local/share/scriptgate
USER 65534:65534
WORKDIR /tmp
ENV HOME=/tmp LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 MPLBACKEND=Agg \
    PYTHONPATH=/usr/local/lib/scriptgate
LABEL org.opencontainers.image.title="scriptgate runner (data profile)" \
      org.opencontainers.image.description="One-use sandbox with numpy, pandas, matplotlib and friends; PID 1 is scriptgate-supervisor"
ENTRYPOINT ["/usr/local/bin/scriptgate-supervisor"]
CMD ["python"]
