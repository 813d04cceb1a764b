"""What crosses between the tuner's processes, as frozen dataclasses read by field.

    DeviceSpec.of("cpu")               # a device as a spawned process rebuilds it
    BuildResult(source, artifact, seconds, layouts) or BuildResult.failed("compile", message)
    RunSetup(...), RunRequest(...)     # to the runner process; it answers Ready() or a RunResult
    WorkerReply("ok", leases_done=3)   # a worker process's last word to run_workers

Failures are data: a config that does not compile is a BuildResult with an error, a candidate
that crashes or hangs a RunResult with one, a worker that stopped a WorkerReply saying why. The
compile processes, the runner process (see _runner_child.py for its protocol) and the worker
processes all import this module, so it imports nothing heavy (no Optuna, SQLAlchemy or rich).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping

import numpy as np

from tunesearch.graph.kernel import Kernel
from tunesearch.runtime.device import (DEVICES, Device, Source, get_device, registered_class,
                                       use_for_compiling)
from tunesearch.space.config import Config


@dataclass(frozen=True)
class DeviceSpec:
    """A device as another process rebuilds it.

    name: what get_device opens it by. entry: the registry's entry for the name in this process
    (runtime.device.DEVICES; None for a name not registered), registered again in the spawned
    process, so that devices registered at run time (tests, plugins) exist there too.
    device_class: "module:Class" of a device that is not the one registered under its name (one
    that stands in for a registered device under another key): the process builds that class.
    """
    name: str
    entry: Hashable | None = None
    device_class: str | None = None

    @classmethod
    def of(cls, device: str | Device | DeviceSpec) -> DeviceSpec:
        if isinstance(device, DeviceSpec):
            return device
        name = device if isinstance(device, str) else device.name
        base = name.split(":")[0].lower()
        entry = DEVICES.get(base)
        if isinstance(device, str) or entry is not None and type(device) is registered_class(base):
            return cls(name, entry)
        kind = type(device)
        return cls(name, entry, f"{kind.__module__}:{kind.__qualname__}")

    def register(self) -> None:
        """Make the name known in this process (a spawned one) as it is in the parent, unless
        this process registers another device under it."""
        if self.entry is not None:
            DEVICES.setdefault(self.name.split(":")[0].lower(), self.entry)

    def open(self) -> Device:
        """The device in this process (one instance per process). Raises as get_device does."""
        self.register()
        if self.device_class is None:
            return get_device(self.name)
        if self not in _own_class:
            _own_class[self] = self._class()()
        return _own_class[self]

    def use_for_compiling(self, settings: dict[str, Any]) -> None:
        """Make open() in this process a device that only compiles, built from the
        compile_settings() of the real one (a compile process never opens the device)."""
        self.register()
        if self.device_class is None:
            use_for_compiling(self.name, settings)
        elif self not in _own_class:
            _own_class[self] = self._class().for_compiling(**settings)

    def _class(self) -> type[Device]:
        module, name = self.device_class.split(":")
        return getattr(importlib.import_module(module), name)


_own_class: dict[DeviceSpec, Device] = {}  # the devices opened from their device_class


@dataclass(frozen=True)
class BuildResult:
    """One config rendered and compiled, or why not (errors are data).

    layouts: the constant inputs the program reads packed ahead ({buffer index: layout key},
    see Device.prepack_layouts); the runner packs them for the config. seconds: compile time.
    """
    source: Source | None = None
    artifact: bytes | None = None
    seconds: float = 0.0
    layouts: Mapping[int, Hashable] = field(default_factory=dict)
    error: str | None = None  # "compile" (one of results.ERROR_KINDS)
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    @staticmethod
    def failed(error: str, message: str) -> BuildResult:
        return BuildResult(error=error, message=message)


@dataclass(frozen=True)
class Timing:
    """How a candidate is timed: warm-up runs, then repeats until min_time_s of measured time
    (at least min_repeats, at most max_repeats); one run slower than cutoff_s ends it early."""
    warmup: int = 1
    min_time_s: float = 0.05
    min_repeats: int = 3
    max_repeats: int = 200
    cutoff_s: float | None = None


@dataclass(frozen=True)
class RunSetup:
    """The kernel the next runs are for: sent once, its buffers kept by the runner process.

    buffer_specs: (elements, dtype name) per buffer, the output first; inputs: the inputs'
    values; fill: what the output holds before a run; guard: the canary written past its end
    (where buffers are not guarded by pages); kernel: needed only for runs with layouts.
    """
    kernel_key: str
    buffer_specs: tuple[tuple[int, str], ...]
    inputs: tuple[np.ndarray, ...]
    fill: np.ndarray
    guard: np.ndarray
    kernel: Kernel | None = None


@dataclass(frozen=True)
class RunRequest:
    """One candidate to run on the kernel set up last. timeout_s is the hard limit the parent
    enforces (it kills the process); layouts: the inputs read packed ahead (BuildResult);
    cold: the inputs pushed out of the caches before each timed run (Device.evict), a large
    model's weights, which its kernels read from memory."""
    artifact: bytes
    source: Source
    timing: Timing
    timeout_s: float
    config: Config | None = None
    layouts: Mapping[int, Hashable] = field(default_factory=dict)
    cold: tuple[int, ...] = ()


@dataclass(frozen=True)
class StopRequest:
    """Asks the runner process to end."""


@dataclass(frozen=True)
class Ready:
    """The runner process has started, or has set up a kernel."""


@dataclass(frozen=True)
class RunResult:
    """What running one candidate gave, or why it did not run (errors are data).

    first: the output after the first run; times: the seconds of the timed runs; violation:
    which rule the candidate broke without faulting (it wrote outside its output), or None;
    changed: the output after the last run where it differs from the first, or None. error:
    "crash" or "timeout" (see results.ERROR_KINDS); restart: the runner process lost its device
    (a GPU kernel faulted) and ends, so the next candidate needs a new one.
    """
    first: np.ndarray | None = None
    times: tuple[float, ...] = ()
    violation: str | None = None
    changed: np.ndarray | None = None
    error: str | None = None
    message: str = ""
    restart: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    @staticmethod
    def failed(error: str, message: str, restart: bool = False) -> RunResult:
        return RunResult(error=error, message=message, restart=restart)


@dataclass(frozen=True)
class WorkerReply:
    """A worker process's one message before it exits: how it ended.

    outcome: "ok" (no work left; leases_done says how many it finished), "interrupted"
    (Ctrl-C), "error" (message says why it stopped) or "died" (it exited without a word:
    written by the parent, never sent).
    """
    outcome: str
    leases_done: int = 0
    message: str = ""
