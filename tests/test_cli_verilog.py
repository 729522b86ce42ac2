"""``ttrain verilog``: standalone Verilog + port map for each reusable unit, lint clean."""

import json

import pytest

from ttrain.main import main
from ttrain.verilog_cmd import UNIT_NAMES, export_unit


def test_export_fp32_add_with_port_map_and_lint(tmp_path):
    written = export_unit("fp32_add", tmp_path, lint=True)
    names = sorted(p.name for p in written)
    assert names == ["ttrain_fp32_add.ports.json", "ttrain_fp32_add.v"]
    verilog = (tmp_path / "ttrain_fp32_add.v").read_text()
    assert "module ttrain_fp32_add(" in verilog.replace(" (", "(")
    meta = json.loads((tmp_path / "ttrain_fp32_add.ports.json").read_text())
    ports = {p["name"]: (p["direction"], p["width"]) for p in meta["ports"]}
    assert ports == {"clk": ("input", 1), "rst": ("input", 1),
                     "i__payload": ("input", 64), "i__valid": ("input", 1),
                     "o__payload": ("output", 32), "o__valid": ("output", 1)}
    # Every listed port is a port of the emitted module.
    header = verilog[verilog.index("module ttrain_fp32_add"):verilog.index(");")]
    for name in ports:
        assert name in header


@pytest.mark.parametrize("unit", ["store", "update", "sweeper"])
def test_export_units_with_templates(unit, tmp_path):
    written = export_unit(unit, tmp_path, lanes=4, depth=256)
    meta = json.loads(next(p for p in written if p.suffix == ".json").read_text())
    assert meta["unit"] == unit
    for f in meta["files"]:
        assert (tmp_path / f).is_file()
    assert {"clk", "rst"} <= {p["name"] for p in meta["ports"]}


def test_cli_rejects_bad_arguments(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["verilog", "--unit", "nope", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert main(["verilog", "--unit", "store", "--depth", "100", "--lanes", "8",
                 "--out", str(tmp_path)]) == 2
    assert "multiple of banks" in capsys.readouterr().err
    assert main(["verilog", "--unit", "fp32_mul", "--lanes", "0", "--out", str(tmp_path)]) == 2


def test_unit_list_is_complete():
    from ttrain.verilog_cmd import _units
    assert set(UNIT_NAMES) == set(_units())
