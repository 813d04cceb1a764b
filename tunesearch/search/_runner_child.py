"""The runner process: runs candidates so that one which crashes or hangs takes only it down.

It is started (spawned, not forked: the tuner has threads) by runner.ProcessRunner with the
DeviceSpec it rebuilds its device from, keeps the current kernel's inputs on the device between
trials, and answers one message at a time over a pipe (the messages are search/messages.py's):

    (on start)                           ->  Ready()      or  RunResult(error="crash", ...)
    RunSetup(kernel_key, buffer_specs, inputs, fill, guard, kernel)
                                         ->  Ready()      or  RunResult(error="crash", ...)
    RunRequest(artifact, source, timing, timeout_s, config, layouts)
                                         ->  RunResult(first, times, violation, changed)
                                         or  RunResult(error="crash", message[, restart=True])
    StopRequest()                        ->  (the process ends)

A RunResult with restart=True comes from a process that has lost its device (a GPU kernel
faulted and left its context unusable, so every later candidate would fail too): it exits after
sending it, and the runner starts a new one for the next candidate. The hard limit (timeout_s)
is the parent's to enforce: it kills a process that does not answer in time.

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
`cold` names the inputs (panels, where packed) pushed out of the caches before each timed run.
"""
from __future__ import annotations

import signal
import time
import traceback

import numpy as np

from tunesearch.graph.dtypes import dtypes
from tunesearch.runtime.device import DeviceLost
from tunesearch.search._guarded import GuardedArray
from tunesearch.search._lifeline import exit_with_parent
from tunesearch.search.messages import (DeviceSpec, Ready, RunRequest, RunResult, RunSetup,
                                        StopRequest)

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

    def __init__(self, device: DeviceSpec):
        self.device = device.open()
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

    def setup(self, request: RunSetup) -> None:
        self.buffers, self.output, self.panels = [], None, {}  # the previous kernel's go first
        inputs, fill, guard = request.inputs, request.fill, request.guard
        self.kernel, self.values = request.kernel, list(inputs)
        out_dtype = dtypes.by_name(request.buffer_specs[0][1])
        self.size = request.buffer_specs[0][0]
        in_dtypes = [dtypes.by_name(name) for _, name in request.buffer_specs[1:]]
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

    def run(self, request: RunRequest) -> RunResult:
        key = (request.artifact, request.source.entry)  # one artifact may hold several entries
        program = self.programs.get(key)
        if program is None:
            if len(self.programs) >= self.MAX_PROGRAMS:
                self.programs.clear()
            program = self.programs[key] = self.device.load(request.artifact, request.source)
        buffers = list(self.buffers)  # the output stays buffers[0]; panels replace inputs
        for index, layout in request.layouts.items():
            buffers[index] = self._panel(request.config, index, layout)
        timing = request.timing
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
            return RunResult(first, (cold,), violation)
        if timing.cutoff_s is not None and cold > timing.cutoff_s:
            # far too slow to be worth timing carefully; run once more all the same, so that an
            # output that changes from run to run shows here too
            program.run(buffers)
            self.device.synchronize()
            return RunResult(first, (cold,), self.violation(self.device.copyout(out)),
                             self._changed(first))
        for _ in range(timing.warmup):
            program.run(buffers)
        from_memory = [buffers[i] for i in request.cold]
        times: list[float] = []
        total = 0.0
        while len(times) < timing.max_repeats:
            if from_memory:
                self.device.evict(from_memory)
            elapsed = float(program.timed(buffers))
            times.append(elapsed)
            total += elapsed
            if len(times) >= timing.min_repeats and total >= timing.min_time_s:
                break
            if timing.cutoff_s is not None and elapsed > timing.cutoff_s:
                break
        self.device.synchronize()
        return RunResult(first, tuple(times), self.violation(self.device.copyout(out)),
                         self._changed(first))

    def _changed(self, first: np.ndarray) -> np.ndarray | None:
        """The output now, where it differs from the first run's."""
        last = self.device.copyout(self.buffers[0])[:self.size]
        return None if np.array_equal(last, first, equal_nan=True) else last.copy()


def serve(conn, device: DeviceSpec) -> None:
    """The main loop of the runner process (the target of the spawned process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the tuner's to handle
    exit_with_parent()  # a tuner killed outright leaves no runner process timing on
    try:
        session = _Session(device)
    except Exception as exc:  # noqa: BLE001  (reported to the parent, which says why)
        conn.send(RunResult.failed("crash", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(Ready())
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if isinstance(message, RunSetup):
                session.setup(message)
                conn.send(Ready())
            elif isinstance(message, RunRequest):
                conn.send(session.run(message))
            elif isinstance(message, StopRequest):
                return
        except DeviceLost as exc:  # nothing more can run here: say why, and end the process
            conn.send(RunResult.failed("crash", f"{exc}; the runner process restarts",
                                       restart=True))
            return
        except Exception as exc:  # noqa: BLE001  (a failing candidate is data for the parent)
            detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
            conn.send(RunResult.failed("crash", detail))
