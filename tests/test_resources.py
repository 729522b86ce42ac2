"""``ttrain resources``: store memory map on the U50 and the Yosys logic estimate."""

import json
import math
from pathlib import Path

import pytest
from amaranth.hdl import ClockSignal, Instance, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ttrain.main import main
from ttrain.resources_cmd import format_report
from ttrain.platforms.u50 import U50_CAPACITY
from ttrain.platforms.memory import STORE_CATEGORY, fit_memory, memory_map, plan_report, \
    store_sizes_from_plan
from ttrain.platforms.resources import (_parse_stat, deep_registers, logic_depth,
                                        synth_component)


def test_capacity_figures():
    # AMD DS965 (U50) / DS890 (VU35P): 872K LUTs, 1,743K FFs, 5,952 DSPs, 47.3 Mb BRAM in
    # 36 Kb blocks, 180 Mb URAM in 288 Kb blocks.
    assert U50_CAPACITY["ramb36"] * 36 * 1024 == pytest.approx(47.3e6 * 1.048576, rel=0.01)
    assert U50_CAPACITY["uram288"] * 288 * 1024 == pytest.approx(180e6 * 1.048576, rel=0.01)
    assert U50_CAPACITY["ramb18"] == 2 * U50_CAPACITY["ramb36"]
    assert (U50_CAPACITY["lut"], U50_CAPACITY["ff"], U50_CAPACITY["dsp48e2"]) == \
        (872_000, 1_743_000, 5952)


@pytest.mark.parametrize("config,banks", [("tiny", 8), ("paper-l1", 8), ("paper-l3", 4)])
def test_store_sizes_follow_the_plan(config, banks):
    # --sizes plan: the planner's estimate (ttrain plan's "estimate"), not the compiled map
    onchip = plan_report(config)["estimate"]["onchip_bytes"]
    sizes = store_sizes_from_plan(config, banks)
    assert set(sizes) == set(STORE_CATEGORY)
    for store, cat in STORE_CATEGORY.items():
        need = math.ceil(onchip[cat] / 4)
        assert sizes[store] % banks == 0
        assert need <= sizes[store] < need + banks


def test_memory_map_rules():
    # Rows per bank: 1024 -> one RAMB36; 512 -> one RAMB18; 1536 -> RAMB36 + RAMB18;
    # 4096 rows -> URAM288 under "auto"; 4097 rows of URAM -> 2 per bank.
    sizes = {"param": 8 * 1024, "grad": 8 * 512, "act": 8 * 1536, "scratch": 8 * 4096}
    mm = memory_map(sizes, 8)
    by = {s["name"]: s for s in mm["stores"]}
    assert (by["param"]["ramb36"], by["param"]["ramb18"], by["param"]["uram288"]) == (8, 0, 0)
    assert (by["grad"]["ramb36"], by["grad"]["ramb18"]) == (0, 8)
    assert (by["act"]["ramb36"], by["act"]["ramb18"]) == (8, 8)
    assert (by["scratch"]["style"], by["scratch"]["uram288"]) == ("ultra", 8)
    assert mm["total"]["ramb36"] == 16 and mm["total"]["ramb18"] == 16
    assert mm["total"]["ramb36_equiv"] == 24
    assert mm["total"]["bytes"] == 4 * sum(sizes.values())
    ultra = memory_map({"param": 4 * 4097 + 4 * 3}, 4, "ultra")
    assert ultra["stores"][0]["uram288"] == 8
    block = memory_map({"param": 8 * 4096}, 8, {"param": "block"})
    assert block["stores"][0]["ramb36"] == 32 and block["stores"][0]["uram288"] == 0


def test_memory_map_bad_input():
    with pytest.raises(ValueError, match="multiple of banks"):
        memory_map({"param": 100}, 8)
    with pytest.raises(ValueError, match="power of two"):
        memory_map({"param": 96}, 3)


@pytest.mark.parametrize("config", ["paper-l1", "paper-l2", "paper-l3"])
def test_paper_presets_fit_the_u50(config):
    fit = fit_memory(store_sizes_from_plan(config, 8), 8)
    assert fit["fits"], f"{config} does not fit the U50 by the memory map"
    best = fit["best"]
    assert best["left"]["ramb36_equiv"] >= 0 and best["left"]["uram288"] >= 0
    # The left-over figures are capacity minus the mapped primitives.
    t = best["map"]["total"]
    assert best["left"]["uram288"] == U50_CAPACITY["uram288"] - t["uram288"]
    assert best["left"]["ramb36_equiv"] == U50_CAPACITY["ramb36"] - t["ramb36"] - t["ramb18"] / 2
    # Every word of the plan has a home: primitives x words per primitive >= store words.
    for s in best["map"]["stores"]:
        slots = s["ramb36"] * 1024 + s["ramb18"] * 512 + s["uram288"] * 4096
        assert slots >= s["words"]


def test_paper_l3_needs_a_mixed_mapping():
    fit = fit_memory(store_sizes_from_plan("paper-l3", 8), 8)
    assert not fit["auto"]["fits"]                      # all-URAM default: 800 > 640
    styles = fit["best"]["styles"]
    assert set(styles.values()) == {"block", "ultra"}


def test_fit_reports_no_fit():
    fit = fit_memory({"param": 8 * 4096}, 8,
                     capacity={"ramb36": 10, "ramb18": 20, "uram288": 4})
    assert not fit["fits"] and fit["best"] is None
    fit = fit_memory({"param": 8 * 1024}, 8, reserve={"ramb36_equiv": 1340})
    assert fit["auto"]["left"]["ramb36_equiv"] == 1344 - 1340 - 8


def test_parse_stat():
    text = """
=== top ===

     1234 wires
       42 cells
       10   LUT6
        3   FDRE
        2   DSP48E2
       32   ttrain_ram_block
"""
    assert _parse_stat(text) == {"LUT6": 10, "FDRE": 3, "DSP48E2": 2, "ttrain_ram_block": 32}


def _cell(type_, ins, outs, in_port="I0", out_port="O"):
    conn = {f"{in_port}{i}": [b] for i, b in enumerate(ins)}
    conn[out_port] = outs
    dirs = {p: "input" for p in conn}
    dirs[out_port] = "output"
    return {"type": type_, "connections": conn, "port_directions": dirs}


def test_logic_depth_counts_levels_between_registers():
    # FF(q=2) -> LUT(2->3) -> LUT(3->4) -> CARRY(4->5) -> FF(d=5); a shorter side path
    # FF(q=2) -> LUT(2->6) -> FF; and a second register stage FF(5->7) -> LUT(7->8).
    cells = {
        "ff0": _cell("FDRE", [5], [7], "D", "Q"),
        "ffa": _cell("FDRE", [1], [2], "D", "Q"),
        "l1": _cell("LUT2", [2, 9], [3]),
        "l2": _cell("LUT4", [3], [4]),
        "c1": _cell("CARRY4", [4], [5], "S", "CO"),
        "l3": _cell("LUT1", [2], [6]),
        "l4": _cell("LUT3", [7], [8]),
    }
    netlist = {"modules": {"top": {"cells": cells}}}
    d = logic_depth(netlist)
    assert d["levels"] == 3
    assert d["path"] == ["LUT2", "LUT4", "CARRY4"]
    assert d["nets"] == ["?", "?"]                   # no net names in this netlist
    netlist["modules"]["top"]["netnames"] = {
        "a_q": {"bits": [2], "hide_name": 0}, "$x": {"bits": [2], "hide_name": 1},
        "sum": {"bits": [5], "hide_name": 0}, "acc": {"bits": [7], "hide_name": 0}}
    assert logic_depth(netlist)["nets"] == ["a_q", "acc"]    # source, register it ends in
    assert logic_depth({"modules": {"top": {"cells": {}}}})["levels"] == 0
    with pytest.raises(ValueError, match="not in the netlist"):
        logic_depth(netlist, top="other")


def test_deep_registers_lists_every_register_over_the_limit():
    # ffa(q=2) -> 3 levels -> ff0 (q=7); ffa -> 1 level -> ffb (q=10); ff0 -> 2 levels -> ffc
    cells = {
        "ffa": _cell("FDRE", [1], [2], "D", "Q"),
        "l1": _cell("LUT2", [2], [3]),
        "l2": _cell("LUT4", [3], [4]),
        "c1": _cell("CARRY4", [4], [5], "S", "CO"),
        "ff0": _cell("FDRE", [5], [7], "D", "Q"),
        "l3": _cell("LUT1", [2], [6]),
        "ffb": _cell("FDRE", [6], [10], "D", "Q"),
        "l4": _cell("LUT3", [7], [8]),
        "l5": _cell("LUT3", [8], [9]),
        "ffc": _cell("FDRE", [9], [11], "D", "Q"),
    }
    names = {"a_q": [2], "acc": [7], "b": [10], "c": [11]}
    netlist = {"modules": {"top": {"cells": cells, "netnames": {
        n: {"bits": b, "hide_name": 0} for n, b in names.items()}}}}
    assert deep_registers(netlist, 1) == [(3, "acc", "a_q"), (2, "c", "acc")]
    assert deep_registers(netlist, 0) == [(3, "acc", "a_q"), (2, "c", "acc"), (1, "b", "a_q")]
    assert deep_registers(netlist, 3) == []
    with pytest.raises(ValueError, match="not in the netlist"):
        deep_registers(netlist, 1, top="other")


def test_cli_memory_map_json(capsys):
    assert main(["resources", "--config", "paper-l3", "--no-synth", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["estimate"] is True and rep["fits"] is True and rep["logic"] is None
    assert rep["memory_map"]["auto"]["fits"] is True     # the compiled step fits as mapped by default
    assert rep["memory_map"]["best"]["left"]["uram288"] >= 0


def test_cli_bad_lanes(capsys):
    assert main(["resources", "--config", "tiny", "--lanes", "3", "--no-synth"]) == 2
    assert "power of two" in capsys.readouterr().err


class _Small(wiring.Component):
    """Registered 8-bit adder, registered 16x16 multiplier and one store bank (black box)."""
    a: In(8)
    b: In(8)
    x: In(16)
    y: In(16)
    s: Out(9)
    p: Out(32)
    rd: Out(32)

    def elaborate(self, platform):
        m = Module()
        ra, rb, rx, ry = Signal(8), Signal(8), Signal(16), Signal(16)
        m.d.sync += [ra.eq(self.a), rb.eq(self.b), rx.eq(self.x), ry.eq(self.y),
                     self.s.eq(ra + rb), self.p.eq(rx * ry)]
        m.submodules.bank = Instance(
            "ttrain_ram_block", p_WIDTH=32, p_DEPTH=16, p_ABITS=4, i_clk=ClockSignal("sync"),
            i_ren=1, i_raddr=self.a[:4], o_rdata=self.rd, i_we=0, i_waddr=0, i_wdata=0)
        return m


def test_yosys_flow_on_a_small_design(tmp_path):
    """The synthesis flow of the logic estimate (RTLIL -> synth_xilinx -> counts and logic
    depth) on a design small enough for make test; the accelerator top itself takes ~5 CPU
    minutes at 1 lane (the benchmark in docs/u50.md)."""
    res = synth_component(_Small(), tmp_path / "small")
    assert res["dsp48e2"] == 1                      # the 16x16 multiplier
    assert res["store_banks"] == 1                  # the RAM template stays a black box
    assert res["ramb36"] == res["ramb18"] == res["uram288"] == 0
    assert res["ff"] >= 8 + 8 + 9                   # a, b and the sum at least
    assert res["carry"] >= 1 and res["lut"] >= 8
    assert 2 <= res["logic_levels"] == len(res["critical_path"])
    assert all(t.startswith(("LUT", "MUXF", "CARRY", "INV")) for t in res["critical_path"])
    assert not (tmp_path / "small" / "netlist.json").exists()


def test_cli_tiny_memory_map(capsys):
    assert main(["resources", "--config", "tiny", "--no-synth"]) == 0
    text = capsys.readouterr().out
    assert "ESTIMATES" in text and "fits the U50: yes" in text
    for store in STORE_CATEGORY:
        assert store in text


def test_scaled_estimate_extrapolates_linearly(monkeypatch):
    import ttrain.platforms.resources as rc
    seen = []

    def fake(*, store_sizes, lanes, banks, **kw):
        seen.append((lanes, banks, store_sizes, kw))
        base = {"lut": 1000, "ff": 2000, "dsp48e2": 3, "ramb36": 1, "ramb18": 2,
                "uram288": 0, "carry": 40}
        per_lane = {"lut": 500, "ff": 700, "dsp48e2": 8, "ramb36": 0, "ramb18": 1,
                    "uram288": 0, "carry": 10}
        out = {k: base[k] + per_lane[k] * lanes for k in base}
        out.update(logic_levels=10 + lanes, critical_path=["LUT6"] * (10 + lanes),
                   cached=False, seconds={"convert": 1.0, "synth": 2.0})
        return out
    monkeypatch.setattr(rc, "synth_estimate", fake)
    est = rc.scaled_estimate("tiny", lanes=8)
    assert [(n, b) for n, b, _, _ in seen] == [(1, 1), (2, 2)]
    # the synthesized tops are the preset's hardware configuration: sizes, imem, units
    from ttrain.platforms.hw import preset_hw_config
    hw = preset_hw_config("tiny", lanes=1)
    assert seen[0][2] == hw.stores
    assert (seen[0][3]["imem_depth"], seen[0][3]["special"]) == (hw.imem_depth, True)
    assert (est["lut"], est["ff"], est["dsp48e2"], est["ramb18"]) == \
        (1000 + 500 * 8, 2000 + 700 * 8, 3 + 8 * 8, 2 + 8)
    assert est["logic_levels"] == 12 and est["store_banks"] == 32
    assert est["seconds"] == {"convert": 2.0, "synth": 4.0}
    rep = rc.build_report("tiny", lanes=8)                      # auto -> scaled above 2 lanes
    assert "extrapolated" in rep["logic"]["method"] and rep["total"]["lut"] == 5000
    with pytest.raises(ValueError, match="from_lanes"):
        rc.scaled_estimate("tiny", lanes=8, from_lanes=(2, 1))
    with pytest.raises(ValueError, match="banks = lanes"):
        rc.build_report("tiny", lanes=8, banks=4, synth="scaled")


def test_fit_estimate_recovers_linear_and_quadratic_counts(monkeypatch):
    """``--synth fit``: the tops of FIT_POINTS (max_split = lanes, the 4-lane one also with
    one-lane vector units), DSP/FF fitted over 1, P, V and LUT also over P^2; counts of that
    form are recovered exactly (zero residuals) and extrapolated."""
    import ttrain.platforms.resources as rc
    seen = []

    def fake(*, store_sizes, lanes, banks, max_split=None, vector_width=None, **kw):
        seen.append((lanes, banks, max_split, vector_width))
        P, V = lanes, vector_width
        out = {"dsp48e2": 46 + 6 * P + 21 * V, "ff": 7000 + 2800 * P + 5400 * V,
               "carry": 100 + 10 * P, "lut": 9000 + 900 * P + 1500 * P * P + 9000 * V,
               "ramb36": 2, "ramb18": 4 if P == 8 else 3, "uram288": 0,
               "logic_levels": 10 + P, "critical_path": ["LUT6"] * (10 + P), "cached": True,
               "seconds": {"convert": 1.0, "synth": 2.0}}
        return out
    sf = {"lut": 50_000, "ff": 30_000, "dsp48e2": 100, "carry": 7, "ramb36": 0, "ramb18": 1,
          "uram288": 0, "logic_levels": 20, "critical_path": ["LUT6"] * 20, "cached": True,
          "seconds": {"convert": 1.0, "synth": 5.0}}
    monkeypatch.setattr(rc, "synth_estimate", fake)
    sg = {**sf, "lut": 20_000, "ff": 12_000, "dsp48e2": 40}       # GELU/GELU'-only unit
    monkeypatch.setattr(rc, "special_estimate",
                        lambda functions=None, **kw: sf if functions is None else sg)
    est = rc.fit_estimate("tiny", lanes=256, vector_width=64)      # tiny uses special ops
    assert seen == [(P, P, P, V) for P, V in rc.FIT_POINTS]
    assert est["dsp48e2"] == 46 + 6 * 256 + 21 * 64 + 100           # the special unit once
    assert est["ff"] == 7000 + 2800 * 256 + 5400 * 64 + 30_000
    assert est["lut"] == 9000 + 900 * 256 + 1500 * 256 ** 2 + 9000 * 64 + 50_000
    assert all(abs(r) < 1e-6 for f in est["fit"].values() for r in f["residuals"])
    assert est["ramb18"] == 4 + 1 and est["logic_levels"] == 20 and est["vector_width"] == 64
    assert est["special_unit"]["dsp48e2"] == 100
    rep = rc.build_report("tiny", lanes=256, synth="fit", vector_width=64)
    assert "fitted" in rep["logic"]["method"] and rep["fits"] is False     # LUT far over
    assert rc.fit_estimate("tiny", lanes=16)["vector_width"] == 16        # default = lanes
    four = rc.fit_estimate("tiny", lanes=256, vector_width=64, special_lanes=4)
    assert four["dsp48e2"] == est["dsp48e2"] + 3 * 100 and four["special_lanes"] == 4
    assert four["lut"] == est["lut"] + 3 * 50_000
    rep4 = rc.build_report("tiny", lanes=256, synth="fit", vector_width=64, special_lanes=4)
    assert "added 4 time(s)" in rep4["logic"]["method"]
    # one of the four with every function, three GELU/GELU'-only (HwConfig.special_full)
    mixed = rc.fit_estimate("tiny", lanes=256, vector_width=64, special_lanes=4,
                            special_full=1)
    assert mixed["lut"] == est["lut"] + 3 * 20_000 and mixed["special_full"] == 1
    assert mixed["dsp48e2"] == est["dsp48e2"] + 3 * 40
    assert mixed["special_gelu_unit"]["lut"] == 20_000 and four["special_gelu_unit"] is None
    rep1 = rc.build_report("tiny", lanes=256, synth="fit", vector_width=64, special_lanes=4,
                           special_full=1)
    assert "added 1 time(s), the GELU/GELU'-only unit 3 time(s)" in rep1["logic"]["method"]
    with pytest.raises(ValueError, match="cannot separate"):
        rc.fit_counts([(2, 2, {"dsp48e2": 1}), (4, 4, {"dsp48e2": 2})], 8, 8,
                      terms={"dsp48e2": ("1", "P", "V")})


@pytest.mark.parametrize("argv, needle", [
    (["--lanes", "8", "--vector-width", "3", "--synth", "fit"], "--vector-width must be a "
                                                                  "power of two up to --lanes"),
    (["--lanes", "8", "--vector-width", "16", "--synth", "fit"], "up to --lanes (8)"),
    (["--lanes", "8", "--vector-width", "2", "--synth", "scaled"], "--vector-width applies to "
                                                                     "--synth full, fit or "
                                                                     "composed"),
    (["--lanes", "8", "--banks", "4", "--synth", "fit"], "--synth fit extrapolates tops with "
                                                         "banks = lanes"),
    (["--lanes", "8", "--special-lanes", "16", "--synth", "fit"], "--special-lanes must be a "
                                                                    "power of two up to"),
    (["--lanes", "8", "--special-lanes", "2", "--synth", "scaled"], "--special-lanes applies "
                                                                      "to --synth fit or "
                                                                      "composed"),
    (["--lanes", "8", "--special-lanes", "4", "--special-full", "8", "--synth", "fit"],
     "--special-full must be a power of two up to the 4 special-function unit(s)"),
    (["--lanes", "8", "--special-lanes", "4", "--special-full", "3", "--synth", "fit"],
     "--special-full must be a power of two"),
    (["--lanes", "8", "--special-full", "1", "--synth", "scaled"], "--special-full applies "
                                                                     "to --synth fit or "
                                                                     "composed"),
    (["--lanes", "256", "--special-full", "2", "--synth", "composed"],
     "--synth composed estimates the wide machine"),
    (["--lanes", "128", "--synth", "composed"], "--synth composed estimates the wide machine "
                                                "of `ttrain bench step --lanes 256`"),
    (["--lanes", "256", "--vector-width", "32", "--synth", "composed"], "64 vector lanes, 16 "
                                                                        "special-function"),
    (["--lanes", "256", "--banks", "128"], "(256 lanes and banks"),
])
def test_cli_fit_arguments_are_checked(argv, needle, capsys, monkeypatch):
    import ttrain.platforms.resources as rc
    monkeypatch.setattr(rc, "synth_estimate", lambda **kw: pytest.fail("no synthesis"))
    assert main(["resources", "--config", "tiny", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_composed_machine_report(monkeypatch, tmp_path):
    """``--synth composed`` (the default at 256 lanes) reports the wide machine of
    ``ttrain.platforms.units`` (here with its parts' results faked: the composition itself is
    tests/test_timing.py's) beside the memory map, and it does not fit."""
    import ttrain.platforms.resources as rc
    import ttrain.platforms.units as un
    seen = []

    def fake(name, *, work_dir, timeout, log):
        seen.append((name, Path(work_dir)))
        return {"unit": name, "lut": 2_000_000, "ff": 900_000, "dsp48e2": 1_000, "carry": 0,
                "ramb36": 4, "ramb18": 0, "uram288": 0, "logic_levels": 23,
                "critical_path": ["LUT6"] * 23, "critical_nets": [], "deepest_part": "x",
                "parts": {"engine-256": 1}, "by_part": {"engine-256": {"lut": 2_000_000,
                                                                       "ff": 900_000,
                                                                       "dsp48e2": 1_000}},
                "estimate": True, "seconds": 1.0}
    monkeypatch.setattr(un, "measure", fake)
    rep = rc.build_report("paper-l1", lanes=256, cache_dir=tmp_path / "resources", log=print)
    assert seen == [("machine-256", tmp_path / "timing")]
    assert "composed of separately synthesized parts" in rep["logic"]["method"]
    assert rep["total"]["lut"] == 2_000_000 and rep["fits"] is False
    text = format_report(rep)
    assert "part   1 x engine-256" in text and "in x" in text
