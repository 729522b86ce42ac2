"""Sub-commands of ``ttrain``; each lives in its own module with a ``register(sub)``."""

import importlib

# Each module adds its sub-parser(s) and sets ``func`` on them.
MODULES = ["plan_cmd", "train_cmd", "demo_cmd", "verilog_cmd", "bench_cmd", "resources_cmd", "xo_cmd"]


def register(sub):
    for name in MODULES:
        importlib.import_module(f".{name}", __package__).register(sub)
