"""`ttrain bench step` prints the report bench_step returns, fused-update steps included."""

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
