"""The host driver's buffer layout (``platforms/host/driver.py``), without a simulator.

The command words are checked against the format the kernel decodes (``platforms/kernel.py``
constants); results buffers assembled by hand in that format must parse into the right run
records, read-backs and trailer, also when the kernel stopped early.
"""

import json

import numpy as np
import pytest

from ttrain.golden.isa import STORE_IDS
from ttrain.platforms.kernel import (CMD_READ, CMD_RUN, CMD_WRITE, KERR_RANGE, REGISTER_MAP,
                               RUN_FIELDS, RUN_RECORD_WORDS, RUN_TAG, TRAILER_FIELDS,
                               TRAILER_MAGIC, TRAILER_WORDS)
from ttrain.platforms.host.driver import KernelDriver, KernelError, XrtBackend, ctrl_bits

SIZES = {"param": 16, "grad": 16, "act": 32, "scratch": 8}


def _trailer(**fields):
    words = [fields.get(k, 0) for k in TRAILER_FIELDS]
    words[0] = TRAILER_MAGIC
    return words + [0] * (TRAILER_WORDS - len(words))


def _record(index, **fields):
    words = [fields.get(k, 0) for k in RUN_FIELDS]
    words[0] = RUN_TAG | index
    words[RUN_FIELDS.index("index")] = index
    return words + [0] * (RUN_RECORD_WORDS - len(words))


def test_command_words_follow_the_kernel_format():
    drv = KernelDriver(None, SIZES, imem_depth=4)
    x = np.array([1.5, -2.0], dtype=np.float32)
    cmds = drv.commands().write("act", 3, x).run().read("grad", 2, 5)
    assert cmds.words().tolist() == [CMD_WRITE, STORE_IDS["act"], 3, 2,
                                     *x.view(np.uint32).tolist(), CMD_RUN, 0, 0, 0,
                                     CMD_READ, STORE_IDS["grad"], 2, 5]
    assert cmds.result_words() == RUN_RECORD_WORDS + 5 + TRAILER_WORDS
    call = drv.prepare(cmds, np.zeros(32, dtype=np.uint32))
    args = KernelDriver.arguments(call, {"program": 0x1000, "commands": 0x2000,
                                         "results": 0x3000})
    assert list(args) == [r.name for r in REGISTER_MAP if r.kind != "control"]
    assert (args["program_length"], args["command_words"], args["result_words"]) == \
        (2, cmds.words().size, cmds.result_words())
    with pytest.raises(ValueError, match="the kernel holds 4"):
        drv.prepare(cmds, np.zeros(16 * 5, dtype=np.uint32))
    with pytest.raises(ValueError, match="32-bit unsigned"):
        drv.commands().write("act", 0, np.array([-1]))


def test_parse_complete_and_stopped_results():
    drv = KernelDriver(None, SIZES)
    call = drv.prepare(drv.commands().run().read("scratch", 0, 8).run())
    got = np.arange(100, 108)
    words = np.array(_record(0, cycles=77) + got.tolist() + _record(1, error=1, error_code=6)
                     + _trailer(runs=2, result_words_written=40), dtype=np.uint32)
    res = KernelDriver.parse(call, words)
    assert [r["index"] for r in res.runs] == [0, 1] and res.runs[0]["cycles"] == 77
    assert res.reads[0][:2] == ("scratch", 0) and res.reads[0][2].tolist() == got.tolist()
    assert res.image()["scratch"].tolist() == got.tolist()
    with pytest.raises(KernelError, match="run 1: accelerator error code 6"):
        res.raise_for_errors()
    # stopped at the read (a kernel error): the trailer follows the first record
    stopped = np.array(_record(0) + _trailer(kernel_error=KERR_RANGE, error_at=4,
                                             result_words_written=16)
                       + [0xDEADBEEF] * 24, dtype=np.uint32)
    res = KernelDriver.parse(call, stopped)
    assert len(res.runs) == 1 and res.reads == []
    assert res.trailer["kernel_error"] == KERR_RANGE
    with pytest.raises(KernelError, match="kernel error 4 .* at command word 4"):
        res.raise_for_errors()
    with pytest.raises(KernelError, match="no kernel trailer"):
        KernelDriver.parse(call, np.full(48, 0xDEADBEEF, dtype=np.uint32))


def test_from_tree_checks_the_register_map(tmp_path):
    meta = {"store_sizes": SIZES, "imem_depth": 8,
            "registers": [{"name": r.name, "offset": r.offset, "width": r.width}
                          for r in REGISTER_MAP]}
    (tmp_path / "kernel.json").write_text(json.dumps(meta))
    drv = KernelDriver.from_tree(tmp_path, None)
    assert drv.store_sizes == SIZES and drv.imem_depth == 8
    meta["registers"][-1]["offset"] += 4
    (tmp_path / "kernel.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="another register map"):
        KernelDriver.from_tree(tmp_path, None)


def test_ctrl_bits_and_xrt_without_pyxrt():
    assert ctrl_bits(0x86) == {"ap_start": False, "ap_done": True, "ap_idle": True,
                               "ap_ready": False, "auto_restart": True}
    try:
        import pyxrt  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pyxrt"):
            XrtBackend("missing.xclbin")
    else:
        pytest.fail("pyxrt is installed here: this test checks the message without it")
