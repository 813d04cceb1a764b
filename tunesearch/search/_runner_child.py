"""The runner process: runs candidates so that one which crashes or hangs takes only it down.

It is started (spawned, not forked: the tuner has threads) by runner.Runner, keeps the current
kernel's inputs on the device between trials, and answers one message at a time over a pipe:

    ("setup", kernel_key, buffer_specs, inputs, fill, guard, kernel)  ->  ("ready",)
    ("run", artifact, source, timing, config, layouts)  ->  ("done", first, times, violation,
                                                              last_if_changed)
                                                        or  ("error", kind, message)
                                                        or  ("error", kind, message, RESTART)

A reply that ends in RESTART comes from a process that has lost its device (a GPU kernel faulted
and left its context unusable, so every later candidate would fail too): it exits after sending
it, and the runner starts a new one for the next candidate.

`fill` is what the output holds before the first run (it differs from the reference everywhere,
so unwritten elements show up). A candidate must touch only its own buffers, and write only its
output. On a device whose buffers are host memory (the CPU) every buffer lies against
inaccessible guard pages, inputs read-only, with a canary in front of the output
(search/_guarded.py): a stray access faults, and the process dies with the candidate. Elsewhere
`guard` is a canary written past the output's end and the inputs are compared after the first
run (and put back). `violation` says which rule a candidate broke without faulting, or is None.

`layouts` names the inputs the program reads packed ahead ({buffer index: layout key}, see
Device.prepack_layouts), as a model's plan runs a kernel whose weights never change: the process
packs those inputs for config (once per layout, kept while the kernel is) and passes the panels
in their place, so a candidate is timed without the packing the plan does not do per call.
"""
from __future__ import annotations

import signal
import time
import traceback
from dataclasses import dataclass

import numpy as np

from tunesearch.graph.dtypes import dtypes
from tunesearch.runtime.device import DeviceLost
from tunesearch.search._guarded import GuardedArray

RESTART = "restart"


@dataclass(frozen=True)
class Timing:
    """How a candidate is timed: warm-up runs, then repeats until min_time_s of measured time
    (at least min_repeats, at most max_repeats); one run slower than cutoff_s ends it early."""
    warmup: int = 1
    min_time_s: float = 0.05
    min_repeats: int = 3
    max_repeats: int = 200
    cutoff_s: float | None = None


def guard_values(dtype_name: str, count: int) -> np.ndarray:
    """The canary written after the output: values no kernel is likely to write."""
    dtype = dtypes.by_name(dtype_name)
    if dtype.is_float:
        return np.full(count, -1.2345e4 if dtype.name == "float16" else -1.2345e30, dtype.np)
    if dtype.name == "bool":
        return np.zeros(count, np.bool_)
    return np.full(count, -0x2BADBEEF, dtype.np)


class _Session:
    """The device, the current kernel's buffers, and the programs loaded so far."""

    MAX_PROGRAMS = 256
    MAX_PANELS = 8

    def __init__(self, device_name: str):
        from tunesearch.runtime.device import get_device
        self.device = get_device(device_name)
        self.guarded = bool(getattr(self.device, "host_memory", False))
        self.buffers: list = []
        self.size = 0
        self.prefill: np.ndarray | None = None
        self.output: GuardedArray | None = None  # the guarded output (host memory only)
        self.inputs: list[np.ndarray] = []  # what the inputs hold (checked where not sealed)
        self.programs: dict[tuple[bytes, str], object] = {}
        self.kernel = None
        self.values: list[np.ndarray] = []  # the inputs' values, which panels are packed from
        self.panels: dict[tuple, object] = {}  # (buffer index, layout) -> its panel's buffer

    def setup(self, buffer_specs, inputs, fill, guard, kernel=None) -> None:
        self.buffers, self.output, self.panels = [], None, {}  # the previous kernel's go first
        self.kernel, self.values = kernel, list(inputs)
        out_dtype = dtypes.by_name(buffer_specs[0][1])
        self.size = buffer_specs[0][0]
        in_dtypes = [dtypes.by_name(name) for _, name in buffer_specs[1:]]
        if self.guarded:
            self.prefill = np.asarray(fill, out_dtype.np)
            self.output = GuardedArray(self.size, out_dtype.np)
            out = self._host_buffer(self.output, out_dtype)
            ins = []
            for array, dtype in zip(inputs, in_dtypes):
                sealed = GuardedArray(array.size, dtype.np)
                sealed.array[...] = np.asarray(array, dtype.np).reshape(-1)
                sealed.read_only()
                ins.append(self._host_buffer(sealed, dtype))
            self.inputs = []
        else:
            self.prefill = np.concatenate([fill, guard]).astype(out_dtype.np)
            out = self.device.alloc(self.prefill.size, out_dtype)
            ins = [self.device.from_numpy(array, dtype) for array, dtype in zip(inputs, in_dtypes)]
            self.inputs = [np.asarray(array, dtype.np).reshape(-1)
                           for array, dtype in zip(inputs, in_dtypes)]
        self.buffers = [out, *ins]

    def _host_buffer(self, guarded: GuardedArray, dtype):
        from tunesearch.runtime.device import Buffer
        # the buffer keeps the guarded mapping alive as long as the array is referenced
        return Buffer(self.device.name, guarded.array.size, dtype, guarded.array,
                      guarded.address)

    def violation(self, full: np.ndarray) -> str | None:
        """Which rule the last runs broke without faulting, or None; inputs a candidate wrote
        are put back, so the next candidate starts from the same values."""
        if self.guarded:
            if not self.output.canary_intact():
                return "wrote before the start of its output (the canary in front changed)"
            return None
        if not np.array_equal(full[self.size:], self.prefill[self.size:], equal_nan=True):
            return "wrote past the end of its output (the canary after it changed)"
        for index, (buffer, original) in enumerate(zip(self.buffers[1:], self.inputs), 1):
            if not np.array_equal(self.device.copyout(buffer)[:original.size], original,
                                  equal_nan=True):
                self.device.copyin(buffer, original)
                return f"wrote into its input buffer {index}"
        return None

    def _panel(self, config, index: int, layout):
        """The buffer of input `index` packed as config reads it, made once per layout."""
        key = (index, layout)
        if key not in self.panels:
            if len(self.panels) >= self.MAX_PANELS:
                self.panels.clear()
            dtype = self.kernel.buffers[index].dtype
            panel = self.device.prepack(self.kernel, config, index,
                                        np.asarray(self.values[index - 1], dtype.np).reshape(-1))
            if self.guarded:
                sealed = GuardedArray(panel.size, dtype.np)
                sealed.array[...] = panel
                sealed.read_only()
                self.panels[key] = self._host_buffer(sealed, dtype)
            else:
                self.panels[key] = self.device.from_numpy(panel, dtype)
        return self.panels[key]

    def run(self, artifact: bytes, source, timing: Timing, config=None, layouts=None):
        key = (artifact, source.entry)  # one artifact may hold several entries
        program = self.programs.get(key)
        if program is None:
            if len(self.programs) >= self.MAX_PROGRAMS:
                self.programs.clear()
            program = self.programs[key] = self.device.load(artifact, source)
        buffers = list(self.buffers)  # the output stays buffers[0]; panels replace inputs
        for index, layout in (layouts or {}).items():
            buffers[index] = self._panel(config, index, layout)
        out = buffers[0]
        self.device.copyin(out, self.prefill)
        if self.output is not None:
            self.output.reset_canary()
        start = time.perf_counter()
        program.run(buffers)
        self.device.synchronize()
        cold = time.perf_counter() - start
        full = self.device.copyout(out)
        first = full[:self.size].copy()
        violation = self.violation(full)
        if violation is not None:
            return first, [cold], violation, None
        if timing.cutoff_s is not None and cold > timing.cutoff_s:
            # far too slow to be worth timing carefully; run once more all the same, so that an
            # output that changes from run to run shows here too
            program.run(buffers)
            self.device.synchronize()
            return first, [cold], self.violation(self.device.copyout(out)), self._changed(first)
        for _ in range(timing.warmup):
            program.run(buffers)
        times: list[float] = []
        total = 0.0
        while len(times) < timing.max_repeats:
            elapsed = float(program.timed(buffers))
            times.append(elapsed)
            total += elapsed
            if len(times) >= timing.min_repeats and total >= timing.min_time_s:
                break
            if timing.cutoff_s is not None and elapsed > timing.cutoff_s:
                break
        self.device.synchronize()
        return first, times, self.violation(self.device.copyout(out)), self._changed(first)

    def _changed(self, first: np.ndarray) -> np.ndarray | None:
        """The output now, where it differs from the first run's."""
        last = self.device.copyout(self.buffers[0])[:self.size]
        return None if np.array_equal(last, first, equal_nan=True) else last.copy()


def register_devices(registry: dict[str, str]) -> None:
    """Devices registered at run time in the parent (tests, plugins) exist here too."""
    from tunesearch.runtime import device
    for name, spec in registry.items():
        device.DEVICES.setdefault(name, spec)


def serve(conn, device_name: str, registry: dict[str, str]) -> None:
    """The main loop of the runner process (the target of the spawned process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the tuner's to handle
    try:
        register_devices(registry)
        session = _Session(device_name)
    except Exception as exc:  # noqa: BLE001  (reported to the parent, which says why)
        conn.send(("error", "crash", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready",))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if message[0] == "setup":
                session.setup(*message[2:])
                conn.send(("ready",))
            elif message[0] == "run":
                conn.send(("done", *session.run(*message[1:])))
            elif message[0] == "stop":
                return
        except DeviceLost as exc:  # nothing more can run here: say why, and end the process
            conn.send(("error", "crash", f"{exc}; the runner process restarts", RESTART))
            return
        except Exception as exc:  # noqa: BLE001  (a failing candidate is data for the parent)
            detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
            conn.send(("error", "crash", detail))


def spawnable(device_name: str) -> dict[str, str]:
    """The registry entries a fresh process needs to build device_name."""
    from tunesearch.runtime import device
    base = device_name.split(":")[0].lower()
    return {base: device.DEVICES[base]} if base in device.DEVICES else {}
