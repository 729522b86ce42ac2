"""Sub-commands of ``ttrain``; each lives in its own module with a ``register(sub)``.

Also the checks every command applies to its flags before any long work. Each raises
ValueError with a one-line message that names the flag and says what to give instead;
:func:`ttrain.main.main` turns it into ``ttrain COMMAND: error: ...`` and exit code 2.
"""

import importlib
import math
import os

# Each module adds its sub-parser(s) and sets ``func`` on them.
MODULES = ["plan_cmd", "train_cmd", "eval_cmd", "demo_cmd", "verilog_cmd", "bench_cmd",
           "resources_cmd", "xo_cmd", "hw_cmd", "debug_cmd"]


def register(sub):
    for name in MODULES:
        importlib.import_module(f".{name}", __package__).register(sub)


def check_int(flag, value, low, high=None):
    """``value`` of ``flag`` must be an integer in ``low..high`` (``high`` None: no bound)."""
    if value is None:
        return
    if high is None and value < low:
        raise ValueError(f"{flag} must be at least {low}, got {value}")
    if high is not None and not low <= value <= high:
        raise ValueError(f"{flag} must be in {low}..{high}, got {value}")


def check_seed(flag, value):
    """A seed is a non-negative integer (NumPy's generators reject negative seeds)."""
    if value is not None and value < 0:
        raise ValueError(f"{flag} must be a non-negative integer, got {value}")


def check_positive_float(flag, value, what="positive"):
    """``value`` of ``flag`` must be a finite number > 0 (argparse's float accepts inf, nan)."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ValueError(f"{flag} must be {what} (a finite number > 0), got {value}")


def _first_existing(path):
    """Return the nearest existing ancestor of ``path`` (``path`` itself if it exists)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def check_output_dir(flag, path):
    """``path`` must be a writable directory, or creatable as one (checked before any work)."""
    if path is None:
        return
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{flag} {path} is an existing file, not a directory: pass a directory "
                         f"(it is created if missing)")
    _check_creatable(flag, path)


def check_output_file(flag, path):
    """``path`` must be a file that can be written (not a directory; its folder creatable)."""
    if path is None:
        return
    if os.path.isdir(path):
        raise ValueError(f"{flag} {path} is a directory: pass a file name")
    _check_creatable(flag, os.path.dirname(os.path.abspath(path)))


def _check_creatable(flag, directory):
    base = _first_existing(directory)
    if not os.path.isdir(base):
        raise ValueError(f"{flag} {directory}: {base} is a file, so no directory can be made "
                         f"there: pass another path")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {directory}: {base} is not writable: pass another path")


def warn(command, lines):
    """Print each of ``lines`` as ``ttrain COMMAND: warning: ...`` on stderr."""
    import sys
    for line in lines:
        print(f"ttrain {command}: warning: {line}", file=sys.stderr)
