"""One host protocol (platforms/protocol.py) for the Vitis kernel and the simulated top."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ttrain.platforms import kernel, protocol
from ttrain.platforms.host import driver
from ttrain.platforms.sim import top

DRIVER_V = Path(top.__file__).with_name("top_driver_tb.v")


def test_one_definition_of_every_code():
    """The kernel, the card driver and the simulation session use the protocol's own objects."""
    for name in ("CMD_WRITE", "CMD_READ", "CMD_RUN", "HEADER_WORDS", "RUN_RECORD_WORDS",
                 "RUN_TAG", "RUN_FIELDS", "TRAILER_FIELDS", "KERNEL_ERRORS"):
        assert getattr(kernel, name) is getattr(protocol, name), name
    for name in ("CMD_WRITE", "CMD_READ", "CMD_RUN", "RUN_FIELDS", "RUN_TAG"):
        assert getattr(driver, name) is getattr(protocol, name), name
    assert protocol.RECORD_FIELDS[:len(protocol.RUN_FIELDS)] == protocol.RUN_FIELDS
    sim_only = [protocol.CMD_CHECK, protocol.CMD_RUN_EXPECT, protocol.CMD_IMEM]
    assert all(c & protocol.SIM_ONLY for c in sim_only)
    assert not any(c & protocol.SIM_ONLY for c in (protocol.CMD_WRITE, protocol.CMD_READ,
                                                   protocol.CMD_RUN))


def test_verilog_driver_defaults_are_the_protocol():
    """build_top passes the codes as parameters; the driver's defaults cannot drift either."""
    text = DRIVER_V.read_text()
    for name in ("CMD_WRITE", "CMD_CHECK", "CMD_RUN_EXPECT", "CMD_IMEM", "RUN_TAG"):
        m = re.search(rf"parameter \[31:0\] {name} = 32'h([0-9A-Fa-f]+)", text)
        assert m and int(m.group(1), 16) == getattr(protocol, name), name


def test_session_commands_use_protocol_headers():
    s = top.TopSession()
    s.write("act", 5, np.arange(3, dtype=np.uint32))
    s.program(np.zeros(16, np.uint32))
    s.run("r", expect_at=[("act", 5, np.arange(3, dtype=np.uint32))], pc=2, max_cycles=99)
    rom = s.rom().tolist()
    hdr = protocol.HEADER_WORDS
    assert rom[:hdr] == protocol.header(protocol.CMD_WRITE, 2, 5, 3)
    at = hdr + 3
    assert rom[at:at + hdr] == protocol.header(protocol.CMD_IMEM, count=16)
    at += hdr + 16
    assert rom[at:at + hdr + 4] == protocol.header(protocol.CMD_RUN_EXPECT, count=1) + [0, 0, 2,
                                                                                         99]
    at += hdr + 4
    assert rom[at:at + hdr] == protocol.header(protocol.CMD_CHECK, 2, 5, 3)
    assert rom[-hdr:] == protocol.header(protocol.CMD_END)


def test_run_records_parse_alike():
    words = [protocol.RUN_TAG | 3, 1, 6, 9, 100] + [0] * 6 + [3, 1, 0, 0, 0]
    rec = protocol.parse_record(words)
    assert (rec["tag"] & 0xFF, rec["error"], rec["error_code"], rec["error_pc"],
            rec["index"], rec["status_ok"]) == (3, 1, 6, 9, 3, 1)
    with pytest.raises(ValueError, match="not a run record"):
        protocol.parse_record([0] * 16)


@pytest.mark.parametrize("args,flag", [(["--lanes", "3"], "--lanes"),
                                       (["--hbm-bank", "99"], "--hbm-bank"),
                                       (["--imem-depth", "100"], "--imem-depth"),
                                       (["--clock-mhz", "5"], "--clock-mhz")])
def test_xo_rejects_bad_flags_at_once(tmp_path, args, flag):
    """`ttrain xo` checks every flag before the minute-long conversion and writes nothing."""
    out = tmp_path / "tree"
    res = subprocess.run([sys.executable, "-m", "ttrain", "xo", "--config", "tiny", "--out",
                          str(out), "--no-run", *args], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 2 and flag in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not out.exists()
