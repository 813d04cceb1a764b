"""One measurement at a time per physical device, across every process of this machine.

    with measuring_lock(DeviceSpec.of("cpu")):
        ...                                  # time candidates; nobody else times on this CPU

Workers of `tune --workers N` (and separate `tune` commands) compile in parallel but must not
time candidates at the same moment on the same cores or the same GPU: each would pick its
winner on the others' noise. The lock is an exclusive `flock` on a file in the cache folder,
named after the physical device (`physical_device`): the kernel releases it when its holder
dies, so a killed worker never leaves a device locked. Where `fcntl` does not exist (Windows)
the lock does nothing.
"""
from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Callable

try:
    import fcntl
except ImportError:  # not POSIX: measurements are not serialized there
    fcntl = None

from tunesearch import settings
from tunesearch.search.messages import DeviceSpec


def _host(spec: DeviceSpec) -> str:
    # every thread of a CPU kernel uses the machine's cores: the machine is one device
    return "host"


def _cuda(spec: DeviceSpec) -> str:
    # tunesearch opens the first visible CUDA device; its identity is what CUDA_VISIBLE_DEVICES
    # names first (an ordinal or a GPU-UUID), ordinal 0 without it
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return f"cuda-{visible or '0'}"


def _opencl(spec: DeviceSpec) -> str:
    # PoCL runs on the host's cores, so it shares the CPU's lock; a GPU is its own device
    try:
        device = spec.open().device
        cl = __import__("pyopencl")
        if not device.type & cl.device_type.GPU:
            return "host"
        bus = getattr(device, "pci_bus_id_nv", None) or getattr(device, "topology_amd", None)
        return f"opencl-{device.vendor}-{device.name}-{bus or 0}"
    except Exception:  # noqa: BLE001  (a device that cannot be asked: the safest, the host)
        return "host"


# by a device's base name; a backend not listed times on the host (the cautious choice)
PHYSICAL: dict[str, Callable[[DeviceSpec], str]] = {
    "cpu": _host, "reference": _host, "cuda": _cuda, "opencl": _opencl,
}


def physical_device(spec: DeviceSpec) -> str:
    """The identity of the hardware a device times on: 'host' for the CPU (and OpenCL on it),
    'cuda-0' or 'cuda-GPU-<uuid>' for the CUDA device this process uses."""
    identify = PHYSICAL.get(spec.name.split(":")[0].lower(), _host)
    return identify(spec)


def lock_folder() -> Path:
    """Where the lock files live: `locks/` in the cache folder (TUNESEARCH_CACHE)."""
    return settings.cache_dir() / "locks"


class DeviceLock:
    """An exclusive lock on one physical device, shared by every process of the machine that
    uses the same lock folder. Reentrant within a process (a retime inside a measurement)."""

    def __init__(self, identity: str, folder: Path | None = None):
        self.identity = identity
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", identity)[:120]
        self.path = (folder or lock_folder()) / f"measure-{safe}.lock"
        self._fd: int | None = None
        self._depth = 0
        self._guard = threading.RLock()  # threads of one process share its file descriptor

    def __enter__(self) -> DeviceLock:
        self._guard.acquire()
        if self._depth == 0 and fcntl is not None:
            if self._fd is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            except BaseException:
                self._guard.release()
                raise
        self._depth += 1
        return self

    def __exit__(self, *exc_info) -> None:
        self._depth -= 1
        if self._depth == 0 and fcntl is not None and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._guard.release()

    def close(self) -> None:
        if self._fd is not None and self._depth == 0:
            os.close(self._fd)
            self._fd = None


def measuring_lock(spec: DeviceSpec, folder: Path | None = None) -> DeviceLock:
    """The lock to hold while timing candidates of `spec` (see the module docstring)."""
    return DeviceLock(physical_device(spec), folder)
