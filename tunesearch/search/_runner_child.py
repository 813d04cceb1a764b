"""The runner process: runs candidates so that one which crashes or hangs takes only it down.

It is started (spawned, not forked: the tuner has threads) by runner.Runner, keeps the current
kernel's inputs on the device between trials, and answers one message at a time over a pipe:

    ("setup", kernel_key, buffer_specs, inputs, fill, guard)  ->  ("ready",)
    ("run", artifact, source, timing)                         ->  ("done", first, times, guard_ok,
                                                                   last_if_changed)
                                                              or  ("error", kind, message)
                                                              or  ("error", kind, message, RESTART)

A reply that ends in RESTART comes from a process that has lost its device (a GPU kernel faulted
and left its context unusable, so every later candidate would fail too): it exits after sending
it, and the runner starts a new one for the next candidate.

`fill` is what the output holds before the first run (it differs from the reference everywhere,
so unwritten elements show up); `guard` is a canary written past the output's end, so a write
out of bounds is seen even when it does not crash.
"""
from __future__ import annotations

import signal
import time
import traceback
from dataclasses import dataclass

import numpy as np

from tunesearch.graph.dtypes import dtypes
from tunesearch.runtime.device import DeviceLost

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

    def __init__(self, device_name: str):
        from tunesearch.runtime.device import get_device
        self.device = get_device(device_name)
        self.buffers: list = []
        self.size = 0
        self.prefill: np.ndarray | None = None
        self.programs: dict[tuple[bytes, str], object] = {}

    def setup(self, buffer_specs, inputs, fill, guard) -> None:
        self.buffers = []  # drop the previous kernel's buffers first: they may be large
        out_dtype = dtypes.by_name(buffer_specs[0][1])
        self.size = buffer_specs[0][0]
        self.prefill = np.concatenate([fill, guard]).astype(out_dtype.np)
        out = self.device.alloc(self.prefill.size, out_dtype)
        ins = [self.device.from_numpy(array, dtypes.by_name(name))
               for array, (_, name) in zip(inputs, buffer_specs[1:])]
        self.buffers = [out, *ins]

    def run(self, artifact: bytes, source, timing: Timing):
        key = (artifact, source.entry)  # one artifact may hold several entries
        program = self.programs.get(key)
        if program is None:
            if len(self.programs) >= self.MAX_PROGRAMS:
                self.programs.clear()
            program = self.programs[key] = self.device.load(artifact, source)
        out = self.buffers[0]
        self.device.copyin(out, self.prefill)
        start = time.perf_counter()
        program.run(self.buffers)
        self.device.synchronize()
        cold = time.perf_counter() - start
        full = self.device.copyout(out)
        first = full[:self.size].copy()
        guard_ok = bool(np.array_equal(full[self.size:], self.prefill[self.size:], equal_nan=True))
        if timing.cutoff_s is not None and cold > timing.cutoff_s:
            return first, [cold], guard_ok, None  # far too slow to be worth timing carefully
        for _ in range(timing.warmup):
            program.run(self.buffers)
        times: list[float] = []
        total = 0.0
        while len(times) < timing.max_repeats:
            elapsed = float(program.timed(self.buffers))
            times.append(elapsed)
            total += elapsed
            if len(times) >= timing.min_repeats and total >= timing.min_time_s:
                break
            if timing.cutoff_s is not None and elapsed > timing.cutoff_s:
                break
        self.device.synchronize()
        last = self.device.copyout(out)[:self.size]
        changed = None if np.array_equal(last, first, equal_nan=True) else last.copy()
        return first, times, guard_ok, changed


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
