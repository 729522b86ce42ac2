# ttrain — two commands do everything on a fresh machine:
#   make demo    run the main job on the built-in default (creates .venv on first use)
#   make test    run the test suite                        (creates .venv on first use)
# `make help` lists the other targets.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
CONFIG ?= tiny
export AMARANTH_USE_YOSYS := builtin
export PYTHONWARNINGS := ignore::DeprecationWarning:pkg_resources

.PHONY: help env demo test test-fast plan-paper verilog bench-fp32 bench-engine bench-layer bench-step resources-paper xo bitstream train-atis train-chip clean distclean

help:  ## list targets
	@grep -E '^[a-z0-9-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/' | expand -t 18

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

env: $(STAMP)  ## create the virtual environment and install ttrain into it

demo: $(STAMP)  ## main job: watch the demo preset learn on the simulated accelerator, bit-exact (<10 min)
	$(VENV)/bin/ttrain demo --config demo --json build/demo.json --plot build/demo-loss.png

test: $(STAMP)  ## full test suite (golden self-tests, Amaranth simulator, cocotb/Verilator)
	$(PY) -m pytest -n 2 --dist loadgroup --no-loadscope-reorder -q --durations=10 tests

test-fast: $(STAMP)  ## golden and Amaranth-simulator tests only (no Verilator builds)
	$(PY) -m pytest -n 2 -q tests -k "not verilator"

plan-paper: $(STAMP)  ## memory and MAC plans of the paper-size presets
	for c in paper-l1 paper-l2 paper-l3 paper-l1-r10; do $(VENV)/bin/ttrain plan --config $$c; done

verilog: $(STAMP)  ## export every reusable RTL unit (Verilog + port map) into build/verilog, linted
	$(VENV)/bin/ttrain verilog --unit all --out build/verilog --lint

bench-fp32: $(STAMP)  ## one million random pairs per FP32 unit under Verilator
	$(VENV)/bin/ttrain bench fp32

bench-engine: $(STAMP)  ## TT-linear training step of the paper layer on the engine (Verilator)
	$(VENV)/bin/ttrain bench engine --out build/bench-engine.json

resources-paper: $(STAMP)  ## U50 memory map + Yosys logic estimate of paper-l1/l2/l3 (long)
	for c in paper-l1 paper-l2 paper-l3; do $(VENV)/bin/ttrain resources --config $$c || exit 1; done

xo: $(STAMP)  ## Vitis RTL kernel tree of CONFIG (+ .xo when vivado is on PATH)
	$(VENV)/bin/ttrain xo --config $(CONFIG) --out build/u50/$(CONFIG)/xo

bitstream: $(STAMP)  ## U50 .xclbin of CONFIG (package_xo + v++ --link when on PATH, else the ready tree)
	$(VENV)/bin/ttrain bitstream --config $(CONFIG) --out build/u50/$(CONFIG)/bitstream

bench-layer: $(STAMP)  ## 3 compiled training steps of the paper layer on the accelerator top (Verilator)
	$(VENV)/bin/ttrain bench layer --out build/bench-layer.json

bench-step: $(STAMP)  ## one whole training step of paper-l1 on the accelerator top: cycles, breakdown (long)
	$(VENV)/bin/ttrain bench step --config paper-l1 --out build/bench-step.json

train-chip: $(STAMP)  ## train tiny on the simulated chip, 3 epochs (~3 h of simulation), then in golden
	$(VENV)/bin/ttrain train --config tiny --engine rtl --compare

train-atis: $(STAMP)  ## train the small preset on ATIS (../shared/data/atis)
	$(VENV)/bin/ttrain train --config small --data ../shared/data/atis

clean:  ## remove build outputs
	rm -rf build sim_build runs .pytest_cache

distclean: clean  ## also remove the virtual environment
	rm -rf $(VENV)
