"""`ttrain bench step` prints the report bench_step returns, fused-update steps included;
`ttrain bench engine` passes its lane groups on and rejects bad ones."""

import pytest

from ttrain.main import main


def _report(entry):
    return {"config": "tiny", "lanes": 4, "slots": 8, "batch": 1, "seq_len": 8, "positions": 8,
            "entries": [entry], "epoch": {"sentences": 10, "steps": 10,
                                          "seconds_at_250MHz": 1.0, "seconds_at_300MHz": 0.8}}


def test_bench_step_prints_both_breakdowns(monkeypatch, capsys):
    from ttrain.testbench import bench_step
    base = {"step": 0, "cycles": 100, "forward_cycles": 30, "backward_cycles": 70,
            "engine_cycles": 60, "ideal_cycles": 40, "macs": 160, "utilization": 0.4,
            "loss": 1.5}
    for entry, want in (({**base, "update_busy_cycles": 9}, "update unit busy 9"),
                        ({**base, "backward_cycles": 60, "update_cycles": 10}, "update 10)")):
        monkeypatch.setattr(bench_step, "bench_step", lambda *a, e=entry, **k: _report(e))
        assert main(["bench", "step", "--config", "tiny", "--lanes", "4"]) == 0
        out = capsys.readouterr().out
        assert "step 0: 100 cycles (forward 30" in out and want in out, out


def test_bench_engine_passes_the_lane_groups_and_rejects_bad_ones(monkeypatch, capsys):
    from ttrain.testbench import bench_engine
    seen = {}

    def fake(out, **kw):
        seen.update(kw)
        return {"config": {}, "entries": [{"name": "r10.step", "macs": 64, "cycles": 10,
                                            "ideal_cycles": 8, "utilization": 0.8}],
                "total": {}}
    monkeypatch.setattr(bench_engine, "bench_engine", fake)
    assert main(["bench", "engine", "--lanes", "32", "--max-split", "8"]) == 0
    assert seen["lanes"] == 32 and seen["max_split"] == 8
    assert seen["fetch_words"] is None and seen["banks"] is None
    assert main(["bench", "engine", "--lanes", "32", "--fetch-words", "8", "--banks", "16"]) == 0
    assert seen["fetch_words"] == 8 and seen["banks"] == 16
    capsys.readouterr()
    for flag, bad, msg in [("--max-split", b, "--max-split must be a power of two up to "
                            "--lanes (32)") for b in ("3", "64", "0")] + [
            ("--fetch-words", b, "--fetch-words must be a power of two up to --lanes (32)")
            for b in ("6", "64", "0")] + [
            ("--banks", b, "--banks must be a positive power of two") for b in ("12", "0")]:
        assert main(["bench", "engine", "--lanes", "32", flag, bad]) == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err, (flag, bad, err)


def test_bench_step_max_split_is_checked():
    assert main(["bench", "step", "--rule", "zo", "--max-split", "2"]) == 2
    assert main(["bench", "step", "--rule", "lrt", "--fetch-words", "4"]) == 2
    assert main(["bench", "step", "--rule", "zo", "--bank-skew"]) == 2
    assert main(["bench", "step", "--config", "tiny", "--lanes", "8", "--max-split", "16"]) == 2
    assert main(["bench", "step", "--config", "tiny", "--lanes", "8", "--fetch-words", "3"]) == 2
    assert main(["bench", "step", "--rule", "lrt", "--vector-width", "4"]) == 2
    for bad in ("3", "16", "0"):
        assert main(["bench", "step", "--config", "tiny", "--lanes", "8", "--vector-width",
                     bad]) == 2
    assert main(["hw", "--config", "tiny", "--vector-width", "16"]) == 2
    assert main(["bench", "step", "--rule", "lrt", "--special-lanes", "2"]) == 2
    for bad in ("3", "16", "0"):
        assert main(["bench", "step", "--config", "tiny", "--lanes", "8", "--special-lanes",
                     bad]) == 2
    assert main(["bench", "step", "--config", "tiny", "--lanes", "8", "--vector-width", "2",
                 "--special-lanes", "4"]) == 2
    assert main(["hw", "--config", "tiny", "--special-lanes", "16"]) == 2
    assert main(["bench", "step", "--rule", "zo", "--special-full", "1"]) == 2
    for bad in (["--special-lanes", "4", "--special-full", "3"], ["--special-full", "2"]):
        assert main(["bench", "step", "--config", "tiny", "--lanes", "8", *bad]) == 2
    assert main(["hw", "--config", "tiny", "--special-lanes", "3"]) == 2
    for bad in (["--special-lanes", "4", "--special-full", "8"], ["--special-full", "3"]):
        assert main(["hw", "--config", "tiny", *bad]) == 2
    assert main(["bench", "step", "--rule", "zo", "--engine-sums"]) == 2
    assert main(["bench", "step", "--rule", "zo", "--route", "omega"]) == 2
    for bad in (["--lanes", "1"], ["--fetch-words", "4"], ["--row-operands"]):
        assert main(["bench", "step", "--config", "tiny", "--route", "omega-shared",
                     *bad]) == 2
    assert main(["hw", "--config", "tiny", "--route", "omega", "--row-operands"]) == 2
    assert main(["bench", "step", "--rule", "zo", "--vector-reads", "2"]) == 2
    for bad in ("3", "0", "two"):               # argparse's choices: exit 2, one line
        for argv in (["hw", "--config", "tiny"], ["bench", "step", "--config", "tiny"]):
            with pytest.raises(SystemExit) as e:
                main([*argv, "--vector-reads", bad])
            assert e.value.code == 2


def test_hw_special_full(capsys):
    """``ttrain hw --special-lanes 4 --special-full 1``: in hw.json and the summary."""
    import json
    from ttrain.platforms.hw import HwConfig
    assert main(["hw", "--config", "tiny", "--special-lanes", "4", "--special-full", "1",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["special_lanes"], d["special_full"]) == (4, 1)
    assert HwConfig.from_dict(d).accelerator_kwargs()["special_full"] == 1
    assert main(["hw", "--config", "tiny", "--special-lanes", "4", "--special-full", "1"]) == 0
    assert ("4 special-function units side by side (1 with every function, the others "
            "GELU/GELU' only)") in capsys.readouterr().out


def test_hw_vector_reads(capsys):
    """``ttrain hw --vector-reads 2``: in hw.json and the summary; the Accelerator's
    arguments carry it (the vector unit's port reads two vectors a request)."""
    import json
    from ttrain.platforms.hw import HwConfig, preset_hw_config
    assert main(["hw", "--config", "tiny", "--vector-reads", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["vector_reads"] == 2 and HwConfig.from_dict(d).vector_reads == 2
    assert main(["hw", "--config", "tiny", "--vector-reads", "2"]) == 0
    assert "two read vectors a request" in capsys.readouterr().out
    hw = preset_hw_config("tiny", vector_reads=2)
    assert hw.accelerator_kwargs("sim")["vector_reads"] == 2
    assert "vector_reads" not in preset_hw_config("tiny").accelerator_kwargs("sim")
    with pytest.raises(ValueError, match="vector_reads"):
        preset_hw_config("tiny", vector_reads=3)


def test_bench_step_passes_the_order_and_rejects_it_elsewhere(monkeypatch, capsys):
    """--order reaches bench_step (default auto); the zo/lrt programs have no TT layers."""
    from ttrain.testbench import bench_step
    seen = {}

    def fake(*a, **k):
        seen.update(k)
        return _report({"step": 0, "cycles": 100, "forward_cycles": 30, "backward_cycles": 70,
                        "engine_cycles": 60, "ideal_cycles": 40, "macs": 160,
                        "utilization": 0.4, "loss": 1.5, "update_busy_cycles": 9})
    monkeypatch.setattr(bench_step, "bench_step", fake)
    assert main(["bench", "step", "--config", "tiny", "--lanes", "4"]) == 0
    assert seen["order"] == "auto"
    assert main(["bench", "step", "--config", "tiny", "--lanes", "4", "--order", "dp_best"]) == 0
    assert seen["order"] == "dp_best"
    capsys.readouterr()
    for rule in ("zo", "lrt"):
        assert main(["bench", "step", "--rule", rule, "--order", "dp_best"]) == 2
        assert "--order applies to --rule sgd only" in capsys.readouterr().err


def test_bench_step_passes_the_schedule_and_ttm_group_and_rejects_bad_ones(monkeypatch,
                                                                           capsys):
    """--schedule (default interleave) and --ttm-group (default auto) reach bench_step; the
    model row is printed beside the chip's figures; a bad group or either flag with another
    rule is a one-line error."""
    from ttrain.testbench import bench_step
    seen = {}

    def fake(*a, **k):
        seen.update(k)
        rep = _report({"step": 0, "cycles": 100, "forward_cycles": 30, "backward_cycles": 70,
                       "engine_cycles": 60, "ideal_cycles": 40, "macs": 160,
                       "utilization": 0.4, "loss": 1.5, "update_busy_cycles": 9,
                       "model": {"cycles": 95, "engine": 58, "vector": 30, "update": 9}})
        return {**rep, "schedule": k["schedule"]}
    monkeypatch.setattr(bench_step, "bench_step", fake)
    assert main(["bench", "step", "--config", "tiny", "--lanes", "4"]) == 0
    assert (seen["schedule"], seen["ttm_group"]) == ("interleave", "auto")
    out = capsys.readouterr().out
    assert "the compiler's model of the step (issue walk, interleave order): 95 cycles" in out
    assert main(["bench", "step", "--config", "tiny", "--lanes", "4", "--schedule", "program",
                 "--ttm-group", "4"]) == 0
    assert (seen["schedule"], seen["ttm_group"]) == ("program", 4)
    capsys.readouterr()
    for bad in ("0", "two"):
        assert main(["bench", "step", "--config", "tiny", "--ttm-group", bad]) == 2
        assert f"--ttm-group takes auto, fastest or a positive number of rows, not '{bad}'" in \
            capsys.readouterr().err
    for flag in (["--schedule", "program"], ["--ttm-group", "2"]):
        assert main(["bench", "step", "--rule", "zo", *flag]) == 2
        assert "apply to --rule sgd only" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:                 # argparse's own choices check
        main(["bench", "step", "--schedule", "fast"])
    assert e.value.code == 2
    assert "invalid choice: 'fast'" in capsys.readouterr().err


def test_bench_step_model_only_walks_the_step_and_chooses_the_ttm_group(capsys):
    """``--model-only`` builds nothing: the report is the compiler's walk of the step on the
    machine (MACs, ideal = MACs / lanes, utilization), with ``--ttm-group fastest`` the walk
    of every group and the group fastest_ttm_group picks; the same machine by hand gives the
    same figures. Misused, it is a one-line error."""
    import json

    from ttrain.golden.config import get_config
    from ttrain.golden.memory import program_macs
    from ttrain.golden.model_compiler import compile_model
    from ttrain.golden.schedule import fastest_ttm_group
    assert main(["bench", "step", "--config", "tiny", "--lanes", "8", "--model-only",
                 "--ttm-group", "fastest", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["model_only"] and "not a simulation" in rep["label"]
    walks = rep["ttm_group_walks"]
    assert rep["ttm_group"] == fastest_ttm_group(walks) and len(walks) > 1
    chosen = next(w for w in walks if w["group"] == rep["ttm_group"])
    (e,) = rep["entries"]
    cm = compile_model(get_config("tiny"), ttm_group=rep["ttm_group"])
    assert e["macs"] == program_macs(cm.program) and e["ideal_cycles"] == -(-e["macs"] // 8)
    assert e["cycles"] == chosen["cycles"] and rep["store_words"] == chosen["words"]
    assert e["utilization"] == pytest.approx(e["ideal_cycles"] / e["cycles"])
    assert 0 < e["forward_cycles"] < e["cycles"] == e["forward_cycles"] + e["backward_cycles"]
    assert main(["bench", "step", "--config", "tiny", "--lanes", "8", "--model-only"]) == 0
    out = capsys.readouterr().out
    assert "not a simulation" in out and "utilization" in out and "ATIS epoch" in out
    for bad in (["--rule", "zo"], ["--steps", "2"]):
        assert main(["bench", "step", "--config", "tiny", "--model-only", *bad]) == 2
        assert "--model-only walks one sgd step per program" in capsys.readouterr().err


def test_bench_step_special_units_with_fewer_functions(capsys):
    """``--special-full F``: F of the ``--special-lanes`` units have every special function,
    the others GELU and its gradient only; by the compiler's walk the step is no faster than
    with every unit full and no slower than with F units in all, and the report says F."""
    import json

    def walk(*flags):
        assert main(["bench", "step", "--config", "tiny", "--lanes", "8", "--model-only",
                     "--json", *flags]) == 0
        rep = json.loads(capsys.readouterr().out)
        return rep, rep["entries"][0]["cycles"]
    _, all4 = walk("--special-lanes", "4")
    rep, mixed = walk("--special-lanes", "4", "--special-full", "1")
    _, one = walk("--special-lanes", "1")
    assert all4 <= mixed <= one and all4 < one
    assert rep["hw"]["special_full"] == 1 and rep["hw"]["special_lanes"] == 4
