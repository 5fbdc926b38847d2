# Prints what a runner image holds, as JSON: run once by `scriptgate images build` right after the
# image is built, and recorded as the image's `scriptgate.profile.info` label.
import importlib.metadata as md
import json
import platform
import sqlite3

DISTRIBUTIONS = [
    "numpy", "pandas", "scipy", "matplotlib", "scikit-learn", "statsmodels", "sympy",
    "networkx", "Pillow", "requests", "beautifulsoup4", "lxml", "openpyxl", "PyYAML", "tabulate",
]
packages = {}
for name in DISTRIBUTIONS:
    try:
        packages[name] = md.version(name)
    except md.PackageNotFoundError:
        pass
print(json.dumps({
    "python_version": platform.python_version(),
    "sqlite_version": sqlite3.sqlite_version,
    "packages": packages,
}, sort_keys=True))
