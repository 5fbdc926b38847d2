# The `data` runner profile built without a registry: FROM the base that `scriptgate images build
# --profile data` imports from a Debian rootfs (mmdebstrap, python3 with numpy, pandas, scipy,
# matplotlib, scikit-learn, statsmodels, sympy, networkx, Pillow, requests, bs4, lxml, openpyxl,
# PyYAML, tabulate; sqlite3; curl; DejaVu fonts), plus the supervisor and the plot hook.
ARG BASE
FROM ${BASE}
COPY scriptgate-supervisor /usr/local/bin/scriptgate-supervisor
COPY scriptgate_plots.py /usr/local/lib/scriptgate/scriptgate_plots.py
# Imported at every interpreter start through a .pth file (Python runs with -I: no PYTHONPATH).
RUN site="$(python3 -c 'import site; print(site.getsitepackages()[0])')" \
 && mkdir -p "$site" \
 && cp /usr/local/lib/scriptgate/scriptgate_plots.py "$site/" \
 && echo "import scriptgate_plots" > "$site/scriptgate-plots.pth"
# Matplotlib's font list, built once here: every container starts with a read-only root.
RUN mkdir -p /usr/local/share/scriptgate/mpl \
 && MPLCONFIGDIR=/usr/local/share/scriptgate/mpl MPLBACKEND=Agg python3 -c "import matplotlib.pyplot" \
 && chmod -R a+rX /usr/local/share/scriptgate
USER 65534:65534
WORKDIR /tmp
ENV HOME=/tmp LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 MPLBACKEND=Agg
LABEL org.opencontainers.image.title="scriptgate runner (data profile)" \
      org.opencontainers.image.description="One-use sandbox with numpy, pandas, matplotlib and friends; PID 1 is scriptgate-supervisor"
ENTRYPOINT ["/usr/local/bin/scriptgate-supervisor"]
CMD ["python"]
