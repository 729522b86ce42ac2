"""Host driver of the Vitis kernel (:mod:`ttrain.platforms.kernel`): one class for simulation and card.

Part of the host runtime (:mod:`ttrain.platforms.host`): library code, not a test helper.

Commands and records are those of the one host protocol, :mod:`ttrain.platforms.protocol`.

:class:`KernelDriver` owns the register map (:data:`ttrain.platforms.kernel.REGISTER_MAP`) and the
buffer layout: it turns store writes, runs and read-backs into a command buffer
(:class:`CommandList`), starts the kernel through a *backend*, and parses the results buffer
into run records, the words read back and the trailer (:class:`KernelResult`). Backends:

:class:`ttrain.testbench.kernel.CocotbBackend` (test-only, in the testbench)
    The cocotb testbench (``tests/cocotb/tb_kernel.py``): buffers in a cocotbext-axi
    ``AxiRam`` on ``m_axi_gmem``, registers written with an ``AxiLiteMaster`` on
    ``s_axi_control`` exactly as XRT does for an ``ap_ctrl_hs`` kernel (arguments at their
    offsets, ``GIE``/``IER``, ``ap_start``), completion by the ``interrupt`` line, then ``ISR``
    cleared. Its methods are coroutines: use :meth:`KernelDriver.invoke_async`.
:class:`XrtBackend`
    An Alveo card through ``pyxrt`` (imported only when this backend is created): buffer
    objects in the kernel's memory bank, ``xrt.kernel`` called with the arguments in
    :data:`~ttrain.platforms.kernel.KERNEL_ARGS` order. Use :meth:`KernelDriver.invoke`.

Typical use (the same on both backends)::

    drv = KernelDriver(backend, store_sizes)
    cmds = drv.commands().write_image(image).run().read_image()
    res = drv.invoke(cmds, program=compiled.program.words())
    res.raise_for_errors(); res.image()           # {store: words} after the run
"""

from dataclasses import dataclass, field

import numpy as np

from ...golden.isa import STORE_IDS
from ..kernel import KERNEL_ARGS, KERNEL_NAME
from ..protocol import (CMD_READ, CMD_RUN, CMD_WRITE, KERNEL_ERRORS, RUN_FIELDS,
                        RUN_RECORD_WORDS, RUN_TAG, TRAILER_FIELDS, TRAILER_MAGIC, TRAILER_WORDS)

__all__ = ["KernelDriver", "CommandList", "KernelResult", "KernelError", "XrtBackend",
           "ctrl_bits"]

INSTRUCTION_WORDS = 16


class KernelError(RuntimeError):
    """The kernel reported a command error, or a run ended with an accelerator error."""


def ctrl_bits(value):
    """Decode a ``CTRL`` register value into ``{"ap_start", "ap_done", "ap_idle", "ap_ready",
    "auto_restart"}`` (bools)."""
    value = int(value)
    return {"ap_start": bool(value & 1), "ap_done": bool(value & 2), "ap_idle": bool(value & 4),
            "ap_ready": bool(value & 8), "auto_restart": bool(value & 0x80)}


def _words(words, what):
    arr = np.asarray(words)
    if arr.dtype == np.float32:
        arr = arr.view(np.uint32)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a 1-D array of 32-bit words, got shape {arr.shape}")
    if arr.size and (arr.dtype.kind not in "ui" or arr.min() < 0 or int(arr.max()) >> 32):
        raise ValueError(f"{what} must hold 32-bit unsigned words (uint32 or float32 bits)")
    return arr.astype(np.uint32)


class CommandList:
    """A command buffer being built (methods return ``self`` so calls chain).

    Parameters
    ----------
    store_sizes : dict
        Words of each store of the kernel (commands are checked against them here, so the
        kernel's own range check never has to fire).
    """

    def __init__(self, store_sizes):
        self._sizes = dict(store_sizes)
        self._parts = []
        self.layout = []          # results layout: ("run", index) / ("read", store, addr, n)
        self.runs = 0

    def _check(self, store, addr, count):
        if store not in STORE_IDS:
            raise ValueError(f"store must be one of {sorted(STORE_IDS)}, not {store!r}")
        if isinstance(addr, bool) or not isinstance(addr, (int, np.integer)) or addr < 0:
            raise ValueError(f"addr must be a non-negative int, not {addr!r}")
        if addr + count > self._sizes[store]:
            raise ValueError(f"{store}[{addr}:{addr + count}] reaches past the store's "
                             f"{self._sizes[store]} words: build the kernel with larger "
                             f"store_sizes or use a smaller range")

    def write(self, store, addr, words):
        """Write ``words`` into ``store`` from word ``addr``."""
        words = _words(words, "words")
        self._check(store, addr, words.size)
        self._parts.append(np.array([CMD_WRITE, STORE_IDS[store], addr, words.size],
                                    dtype=np.uint32))
        self._parts.append(words)
        return self

    def write_image(self, image):
        """Write every store of ``image`` (``{store: words}``) from word 0."""
        for name, words in image.items():
            self.write(name, 0, words)
        return self

    def run(self):
        """Run the loaded program once (a 16-word record in the results)."""
        self._parts.append(np.array([CMD_RUN, 0, 0, 0], dtype=np.uint32))
        self.layout.append(("run", self.runs))
        self.runs += 1
        return self

    def read(self, store, addr, count):
        """Read ``count`` words of ``store`` from ``addr`` into the results."""
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
            raise ValueError(f"count must be a non-negative int, not {count!r}")
        self._check(store, addr, count)
        self._parts.append(np.array([CMD_READ, STORE_IDS[store], addr, count],
                                    dtype=np.uint32))
        self.layout.append(("read", store, int(addr), int(count)))
        return self

    def read_image(self, stores=None):
        """Read whole stores (all four by default) into the results."""
        for name in stores or STORE_IDS:
            self.read(name, 0, self._sizes[name])
        return self

    def raw(self, words):
        """Append raw command words (to test the kernel's checks; no layout entry)."""
        self._parts.append(_words(words, "words"))
        return self

    def words(self):
        """The command buffer (uint32 array)."""
        if not self._parts:
            return np.zeros(0, dtype=np.uint32)
        return np.concatenate(self._parts)

    def result_words(self):
        """Words the results buffer needs (records, read-backs and the trailer)."""
        return sum(RUN_RECORD_WORDS if e[0] == "run" else e[3] for e in self.layout) \
            + TRAILER_WORDS


@dataclass
class KernelResult:
    """A parsed results buffer.

    Attributes
    ----------
    runs : list of dict
        One :data:`~ttrain.platforms.kernel.RUN_FIELDS` dict per RUN, in order.
    reads : list of (store, addr, numpy.ndarray)
        The words of every READ, in order.
    trailer : dict
        :data:`~ttrain.platforms.kernel.TRAILER_FIELDS` (``kernel_error`` 0 = every command done).
    raw : numpy.ndarray
        The whole results buffer.
    """
    runs: list = field(default_factory=list)
    reads: list = field(default_factory=list)
    trailer: dict = field(default_factory=dict)
    raw: np.ndarray = None

    def image(self):
        """``{store: words}`` of the reads that start at word 0 (the last read of a store
        wins)."""
        return {s: w for s, a, w in self.reads if a == 0}

    def raise_for_errors(self):
        """Raise :class:`KernelError` if the kernel stopped on a command or a run failed."""
        code = self.trailer.get("kernel_error")
        if code:
            raise KernelError(f"kernel error {code} ({KERNEL_ERRORS.get(code, '?')}) at command "
                              f"word {self.trailer['error_at']}")
        for r in self.runs:
            if r["error"] or r["engine_error"]:
                raise KernelError(f"run {r['index']}: accelerator error code "
                                  f"{r['error_code']} at pc {r['error_pc']}")


@dataclass(frozen=True)
class _Call:
    program: np.ndarray
    commands: np.ndarray
    result_words: int
    layout: tuple


class KernelDriver:
    """The host side of :class:`ttrain.platforms.kernel.VitisKernel`.

    Parameters
    ----------
    backend : CocotbBackend, XrtBackend or compatible
        Provides ``buffer(words)``, ``alloc(n)``, ``read(handle, n)`` and ``call(args)`` (the
        last three may be coroutines, see :meth:`invoke_async`).
    store_sizes : dict
        The kernel's store sizes (``VitisKernel(...).accelerator.store_sizes``).
    imem_depth : int or None
        Instructions the kernel's instruction memory holds (checked before a call).
    """

    def __init__(self, backend, store_sizes, imem_depth=None):
        if not isinstance(store_sizes, dict) or set(store_sizes) != set(STORE_IDS):
            raise ValueError(f"store_sizes must give the words of every store "
                             f"{sorted(STORE_IDS)}, not {store_sizes!r}")
        self.backend = backend
        self.store_sizes = dict(store_sizes)
        self.imem_depth = imem_depth

    @classmethod
    def from_tree(cls, tree, backend):
        """A driver for the kernel of a ``ttrain xo`` / ``ttrain bitstream`` tree (its
        ``kernel.json``: store sizes, instruction memory depth, register map). Raises
        :class:`ValueError` if the tree's register map is not this package's."""
        import json
        from pathlib import Path

        from ..kernel import REGISTER_MAP
        meta = json.loads((Path(tree) / "kernel.json").read_text())
        regs = [(r["name"], r["offset"], r["width"]) for r in meta["registers"]]
        if regs != [(r.name, r.offset, r.width) for r in REGISTER_MAP]:
            raise ValueError(f"{tree}: the kernel was built with another register map; "
                             f"regenerate it with this ttrain (`ttrain xo`)")
        return cls(backend, meta["store_sizes"], imem_depth=meta["imem_depth"])

    def commands(self):
        """A new :class:`CommandList` for this kernel's stores."""
        return CommandList(self.store_sizes)

    def prepare(self, commands, program=None, result_words=None):
        """Check and freeze one invocation (program words or ``None`` to keep the loaded one)."""
        if not isinstance(commands, CommandList):
            raise TypeError(f"commands must be a CommandList (KernelDriver.commands()), not "
                            f"{commands!r}")
        prog = np.zeros(0, dtype=np.uint32) if program is None else _words(program, "program")
        if prog.size % INSTRUCTION_WORDS:
            raise ValueError(f"a program is a multiple of {INSTRUCTION_WORDS} words, got "
                             f"{prog.size}")
        if self.imem_depth is not None and prog.size // INSTRUCTION_WORDS > self.imem_depth:
            raise ValueError(f"the program has {prog.size // INSTRUCTION_WORDS} instructions; "
                             f"the kernel holds {self.imem_depth}: rebuild it with a larger "
                             f"imem_depth")
        need = commands.result_words()
        rw = need if result_words is None else int(result_words)
        return _Call(prog, commands.words(), rw, tuple(commands.layout))

    @staticmethod
    def arguments(call, addresses):
        """``{arg name: value}`` in :data:`KERNEL_ARGS` order (``addresses``: the program,
        commands and results buffer handles or addresses)."""
        values = {"program": addresses["program"], "commands": addresses["commands"],
                  "results": addresses["results"],
                  "program_length": call.program.size // INSTRUCTION_WORDS,
                  "command_words": call.commands.size, "result_words": call.result_words}
        return {a.name: values[a.name] for a in KERNEL_ARGS}

    @staticmethod
    def parse(call, words):
        """Parse a results buffer of ``call`` into a :class:`KernelResult`.

        The trailer sits right after the last record the kernel wrote (its
        ``result_words_written`` field is its own position): at the end of the layout when
        every command ran, earlier when the kernel stopped on a command error.
        """
        words = np.asarray(words, dtype=np.uint32)
        res = KernelResult(raw=words)

        def trailer_at(p):
            if 0 <= p and p + TRAILER_WORDS <= words.size and words[p] == TRAILER_MAGIC \
                    and int(words[p + TRAILER_FIELDS.index("result_words_written")]) == p:
                return dict(zip(TRAILER_FIELDS, (int(x) for x in words[p:p + TRAILER_WORDS])))
            return None
        end = sum(RUN_RECORD_WORDS if e[0] == "run" else e[3] for e in call.layout)
        trailer = trailer_at(end)
        if trailer is None:
            found = [p for p in np.flatnonzero(words == TRAILER_MAGIC) if trailer_at(int(p))]
            if not found:
                raise KernelError(f"no kernel trailer (magic {TRAILER_MAGIC:#x}) in the "
                                  f"results: the kernel did not finish, or the results buffer "
                                  f"is too small")
            end = int(found[0])
            trailer = trailer_at(end)
        res.trailer = trailer
        pos = 0
        for entry in call.layout:
            n = RUN_RECORD_WORDS if entry[0] == "run" else entry[3]
            if pos + n > end:
                break                              # the kernel stopped before this command
            if entry[0] == "run":
                rec = words[pos:pos + RUN_RECORD_WORDS]
                if (int(rec[0]) & ~0xFF) != RUN_TAG:
                    raise KernelError(f"results word {pos}: expected a RUN record (tag "
                                      f"{RUN_TAG:#x}), found {int(rec[0]):#x}")
                res.runs.append(dict(zip(RUN_FIELDS, (int(x) for x in rec))))
            else:
                _, store, addr, _ = entry
                res.reads.append((store, addr, words[pos:pos + n].copy()))
            pos += n
        return res

    def _handles(self, call):
        b = self.backend
        return {"program": b.buffer(call.program if call.program.size else
                                    np.zeros(INSTRUCTION_WORDS, dtype=np.uint32)),
                "commands": b.buffer(call.commands if call.commands.size else
                                     np.zeros(1, dtype=np.uint32)),
                "results": b.alloc(call.result_words)}

    def invoke(self, commands, program=None, result_words=None):
        """Run one kernel invocation on a synchronous backend; return a :class:`KernelResult`."""
        call = self.prepare(commands, program, result_words)
        handles = self._handles(call)
        self.backend.call(self.arguments(call, handles))
        return self.parse(call, self.backend.read(handles["results"], call.result_words))

    async def invoke_async(self, commands, program=None, result_words=None):
        """:meth:`invoke` for a backend whose ``call`` is a coroutine (cocotb)."""
        return self.parse(*(await self.run_call_async(
            self.prepare(commands, program, result_words))))

    async def run_call_async(self, call):
        """Run a :meth:`prepare`-d invocation on an async backend; return ``(call, results
        words)`` (for :meth:`parse`)."""
        handles = self._handles(call)
        await self.backend.call(self.arguments(call, handles))
        return call, self.backend.read(handles["results"], call.result_words)


class XrtBackend:
    """An Alveo card through XRT's Python binding ``pyxrt``.

    Parameters
    ----------
    xclbin : path-like
        The linked ``.xclbin`` (``ttrain bitstream``).
    device_index : int
        XRT device index (``xbutil examine``).
    kernel_name : str
        Kernel name in the xclbin (:data:`~ttrain.platforms.kernel.KERNEL_NAME`).
    """

    def __init__(self, xclbin, device_index=0, kernel_name=KERNEL_NAME):
        try:
            import pyxrt
        except ImportError:
            raise ImportError("XrtBackend needs XRT's Python binding pyxrt: install XRT and "
                              "`source /opt/xilinx/xrt/setup.sh` (it puts pyxrt on "
                              "PYTHONPATH); simulation needs no XRT (CocotbBackend)") from None
        self._xrt = pyxrt
        self.device = pyxrt.device(device_index)
        self.uuid = self.device.load_xclbin(str(xclbin))
        self.kernel = pyxrt.kernel(self.device, self.uuid, kernel_name)
        self._group = {a.name: self.kernel.group_id(i) for i, a in enumerate(KERNEL_ARGS)
                       if a.kind == "pointer"}

    def _bo(self, nbytes, arg):
        return self._xrt.bo(self.device, max(nbytes, 4), self._xrt.bo.normal,
                            self._group[arg])

    def buffer(self, words, arg="commands"):
        words = np.ascontiguousarray(words, dtype="<u4")
        bo = self._bo(words.nbytes, arg)
        bo.write(words.tobytes(), 0)
        bo.sync(self._xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)
        return bo

    def alloc(self, n):
        return self._bo(4 * n, "results")

    def read(self, bo, n):
        bo.sync(self._xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE)
        return np.frombuffer(bytes(bo.read(4 * n, 0)), dtype="<u4").copy()

    def call(self, args):
        run = self.kernel(*[args[a.name] for a in KERNEL_ARGS])
        run.wait()
