import os

os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
