"""The one hardware configuration (platforms/hw.py): every build runs its programs, and every
artefact of the same preset and flags records the same hw.json."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ttrain.golden.config import get_config
from ttrain.golden.contract import View
from ttrain.golden.isa import Elementwise, End, Program, vector_cycles
from ttrain.golden.model_compiler import chip_model_config, compile_model
from ttrain.platforms.hw import (HW_JSON, HwConfig, hw_config, preset_hw_config,
                                 program_needs_special, read_hw_json)

ROOT = Path(__file__).resolve().parent.parent


def _runs(hw, program):
    """``hw`` holds ``program``: stores >= its memory map, imem >= it, the units it needs."""
    assert all(hw.stores[s] >= w for s, w in program.store_sizes.items())
    assert all(w % hw.banks == 0 for w in hw.stores.values())
    assert hw.imem_depth >= len(program.instructions)
    assert hw.special or not program_needs_special(program)


def test_every_fusesoc_target_runs_its_compiled_step():
    """The ttrain.core targets (FuseSoC generator parameters) hold their preset's training step."""
    core = yaml.safe_load((ROOT / "ttrain.core").read_text())
    seen = set()
    for gen in core["generate"].values():
        params = gen["parameters"]
        hw = preset_hw_config(params["config"], lanes=params.get("lanes"),
                              imem_depth=params.get("imem_depth"))
        program = compile_model(chip_model_config(get_config(params["config"]))[0]).program
        _runs(hw, program)
        assert hw.special and hw.fits_u50, params
        seen.add(params["config"])
    assert {"tiny", "paper-l1", "paper-l2", "paper-l3"} <= seen


def test_defaults_and_explicit_flags_give_the_same_file():
    a = preset_hw_config("tiny")
    b = preset_hw_config("tiny", lanes=8, banks=8, slots=16)
    assert a == b and a.to_json() == b.to_json()
    assert HwConfig.from_dict(json.loads(a.to_json())) == a
    w = preset_hw_config("tiny", fetch_words=4)
    assert w.fetch_words == 4 and w.accelerator_kwargs()["fetch_words"] == 4
    assert HwConfig.from_dict(json.loads(w.to_json())) == w and w != a
    assert a.fetch_words == 0 and "fetch_words" not in a.accelerator_kwargs()
    k = preset_hw_config("tiny", bank_skew=True)
    assert k.bank_skew and k.accelerator_kwargs()["bank_skew"] is True and k != a
    assert HwConfig.from_dict(json.loads(k.to_json())) == k
    assert not a.bank_skew and "bank_skew" not in a.accelerator_kwargs()
    v = preset_hw_config("tiny", vector_width=2)
    assert v.vector_width == 2 and v.vector_lanes == 2 and v != a
    assert v.accelerator_kwargs()["vector_width"] == 2
    assert HwConfig.from_dict(json.loads(v.to_json())) == v
    assert a.vector_width == 0 and a.vector_lanes == 8 and "vector_width" not in \
        a.accelerator_kwargs()
    r = preset_hw_config("tiny", row_operands=True)
    assert r.row_operands and r.accelerator_kwargs()["row_operands"] is True and r != a
    assert HwConfig.from_dict(json.loads(r.to_json())) == r
    assert not a.row_operands and "row_operands" not in a.accelerator_kwargs()
    sp = preset_hw_config("tiny", special_lanes=4)
    assert sp.special_lanes == 4 and sp.accelerator_kwargs()["special_lanes"] == 4 and sp != a
    assert HwConfig.from_dict(json.loads(sp.to_json())) == sp
    assert a.special_lanes == 1 and "special_lanes" not in a.accelerator_kwargs()
    # 4 units, 2 with every function (the others GELU and its gradient): the vector unit's
    # kwargs and the cycle model follow; all 4 full is the default
    sf = preset_hw_config("tiny", special_lanes=4, special_full=2)
    assert sf.special_full == 2 and sf.accelerator_kwargs()["special_full"] == 2 and sf != sp
    assert HwConfig.from_dict(json.loads(sf.to_json())) == sf
    assert preset_hw_config("tiny", special_lanes=4, special_full=4) == sp
    assert sp.special_full == 0 and "special_full" not in sp.accelerator_kwargs()
    lat = {"gelu_grad": 10, "exp": 10}
    for op, lanes in (("gelu_grad", 4), ("exp", 2)):
        ins = Elementwise(op, 1, 64, View("act", 0, 64, 1), View("act", 64, 64, 1))
        assert vector_cycles(ins, 8, 4, lat, special_full=2)[1] == \
            vector_cycles(ins, 8, lanes, lat)[1], op
    for route in ("omega", "omega-shared"):
        o = preset_hw_config("tiny", route=route)
        assert o.route == route and o.accelerator_kwargs()["route"] == route and o != a
        assert HwConfig.from_dict(json.loads(o.to_json())) == o
    assert a.route == "arbiter" and "route" not in a.accelerator_kwargs()
    assert preset_hw_config("tiny", route="arbiter") == a
    old = json.loads(a.to_json())
    del old["fetch_words"], old["bank_skew"], old["vector_width"]   # a file from before them
    del old["row_operands"], old["special_lanes"], old["route"]
    assert HwConfig.from_dict(old) == a
    c = preset_hw_config("tiny", lanes=4)
    assert c != a and c.lanes == c.banks == 4 and c.units == ("engine", "vector", "update",
                                                               "special")


def test_units_follow_the_programs():
    tiny = compile_model(get_config("tiny"))
    plain = Program([End()], {"act": 100})
    hw = hw_config({"end": plain})
    assert not hw.special and hw.stores["act"] == 104 and hw.imem_depth == 64
    assert hw_config({"end": plain}, special=True).special
    with pytest.raises(ValueError, match="special=False, but a program uses"):
        hw_config({"tiny": tiny}, special=False)
    with pytest.raises(ValueError, match="special_lanes 2 needs the special-function unit"):
        hw_config({"end": plain}, special_lanes=2)


@pytest.mark.parametrize("kw,match", [
    ({"lanes": 3}, "lanes must be a positive power of two"),
    ({"banks": 0}, "banks must be a positive power of two"),
    ({"imem_depth": 256}, r"cannot hold the \d+-instruction program"),
    ({"imem_depth": 600}, "imem_depth must be a positive power of two"),
    ({"clock_mhz": 0}, "clock_mhz must be"),
    ({"store_style": {"act": "ultra"}}, "store_style must map every store"),
    ({"fetch_words": 6}, "fetch_words must be a positive power of two"),
    ({"fetch_words": 16}, "fetch_words 16 is above the 8 lanes"),
    ({"bank_skew": 1}, "bank_skew must be True or False"),
    ({"row_operands": "yes"}, "row_operands must be True or False"),
    ({"row_operands": True, "lanes": 1}, "row_operands needs at least 2 banks"),
    ({"vector_width": 3}, "vector_width must be a positive power of two"),
    ({"vector_width": 16}, "vector_width 16 is above the 8 banks"),
    ({"special_lanes": 3}, "special_lanes must be a positive power of two"),
    ({"special_lanes": 16}, "special_lanes 16 is above the vector unit's 8 lanes"),
    ({"special_lanes": 4, "vector_width": 2}, "special_lanes 4 is above the vector unit's 2"),
    ({"special_lanes": 4, "special_full": 3}, "special_full must be a positive power of two"),
    ({"special_lanes": 2, "special_full": 4}, "special_full 4 is above the 2 special-function"),
    ({"route": "mesh"}, "route must be one of arbiter, omega, omega-shared"),
    ({"route": "omega", "lanes": 1}, "route 'omega' cannot have 1 bank"),
    ({"route": "omega-shared", "fetch_words": 4}, "cannot have fetch_words 4"),
    ({"route": "omega", "row_operands": True}, "cannot have row_operands"),
])
def test_bad_overrides_name_what_to_change(kw, match):
    with pytest.raises(ValueError, match=match):
        preset_hw_config("tiny", **kw)


def test_bad_hw_json_is_a_clear_error(tmp_path):
    for text in ("", "{", json.dumps({"format": 99}), "\x80\x81"):
        (tmp_path / HW_JSON).write_bytes(text.encode("latin-1"))
        with pytest.raises(ValueError, match=str(tmp_path / HW_JSON)):
            read_hw_json(tmp_path)


def test_cli_hw_prints_the_configuration():
    res = subprocess.run([sys.executable, "-m", "ttrain", "hw", "--config", "tiny", "--lanes",
                          "4", "--json"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert HwConfig.from_dict(json.loads(res.stdout)) == preset_hw_config("tiny", lanes=4)
    bad = subprocess.run([sys.executable, "-m", "ttrain", "hw", "--config", "tiny", "--lanes",
                          "3"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--lanes" in bad.stderr and "Traceback" not in bad.stderr


def test_verilator_build_records_its_configuration():
    """The shared top of the Verilator tests records the HwConfig it was built from."""
    from shared_top import shared_top
    top = shared_top()
    assert read_hw_json(top.build.build_dir) == top.hw
    assert top.config == top.hw.accelerator_kwargs("sim")


def test_demo_and_train_builds_record_the_presets_configuration():
    """The simulated chip of `ttrain demo`/`train --engine rtl` (build_model_top of the
    preset's step on the built-in data) is `ttrain hw` of the preset with the same flags, and
    the FuseSoC/xo path (preset_hw_config) gives the same file."""
    from ttrain.golden.data import generate_dataset
    from ttrain.platforms.host.chip import chip_config
    base = get_config("tiny")
    ds = generate_dataset(seed=0, seq_len=base.seq_len, vocab_size=base.vocab)
    cfg, _ = chip_config(base, ds)
    cm = compile_model(cfg)
    demo_hw = hw_config({cm.cfg.name: cm}, config=cm.cfg.name, lanes=4, slots=8)
    assert demo_hw.to_json() == preset_hw_config("tiny", lanes=4, slots=8).to_json()
