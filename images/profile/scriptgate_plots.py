# Loaded by every Python interpreter of a plotting profile (a .pth file in site-packages imports it;
# the supervisor runs Python with -I, which ignores PYTHONPATH but still reads .pth files).
# 1. Matplotlib gets a writable config dir under /tmp seeded with the font list built into the image
#    (the root is read-only, and rebuilding the list would cost every run hundreds of ms).
# 2. When SCRIPTGATE_PLOT_DIR is set, every plt.show() and every figure still open when the script
#    ends is saved there as PNG, numbered in order; the supervisor returns them as artifacts.
import os


def _scriptgate_mpl_cache():
    prebuilt = "/usr/local/share/scriptgate/mpl"
    target = os.path.join(os.environ.get("TMPDIR", "/tmp"), ".matplotlib")
    os.environ.setdefault("MPLCONFIGDIR", target)
    try:
        os.makedirs(target, exist_ok=True)
        for name in os.listdir(prebuilt):
            if name.endswith(".json") and not os.path.exists(os.path.join(target, name)):
                with open(os.path.join(prebuilt, name), "rb") as src:
                    data = src.read()
                with open(os.path.join(target, name), "wb") as dst:
                    dst.write(data)
    except OSError:
        pass


def _scriptgate_plots():
    out = os.environ.get("SCRIPTGATE_PLOT_DIR")
    if not out:
        return
    import atexit
    import sys

    state = {"n": 0}

    def save_open(close):
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        for num in plt.get_fignums():
            fig = plt.figure(num)
            state["n"] += 1
            try:
                os.makedirs(out, exist_ok=True)
                fig.savefig(os.path.join(out, "figure-%03d.png" % state["n"]), format="png")
            except Exception as e:  # a broken figure must not hide the script's own result
                print("scriptgate: could not save figure %d: %s" % (num, e), file=sys.stderr)
            if close:
                plt.close(fig)

    class _Finder:
        """Wraps pyplot.show once pyplot is imported (whenever the script imports it)."""

        def find_spec(self, name, path=None, target=None):
            if name != "matplotlib.pyplot":
                return None
            sys.meta_path.remove(self)
            import importlib.util

            spec = importlib.util.find_spec(name)
            loader = spec.loader
            original_exec = loader.exec_module

            def exec_module(module):
                original_exec(module)
                module.show = lambda *a, **k: save_open(True)
                # After pyplot's own exit handler, so this one runs first (atexit is LIFO) and
                # still finds the open figures.
                atexit.register(save_open, False)

            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _Finder())


_scriptgate_mpl_cache()
_scriptgate_plots()
