"""The CUDA device: CUDA C from the GPU renderer, compiled by NVRTC, launched through a driver API.

NVRTC (cuda_nvrtc.py) comes from the cuda-python wheels (no CUDA toolkit needed) and compiles
without a GPU, so `compile_ptx(text, "sm_90")` works on any machine. Loading and launching go
through a thin driver layer (cuda_driver.py): cuda-python's driver API by default, or pycuda where
it is installed (TUNESEARCH_CUDA_DRIVER=pycuda picks it; it is also the fallback when
cuda-python's driver cannot start). Everything else is shared, here. Programs are compiled to a
cubin for the device's exact architecture and cached on disk by digest; a cubin loads on a driver
of NVRTC's CUDA major version or newer, which the device checks when it starts. Kernel times come
from CUDA events around back-to-back launches, with the stream kept busy, so host work is not
counted.
"""
from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from tunesearch.graph.dtypes import DType
from tunesearch.runtime.cuda_driver import CudaDriver, DriverResource, open_driver
from tunesearch.runtime.cuda_nvrtc import cached_cubin, nvrtc_version
from tunesearch.runtime.device import (Buffer, CompileError, DeviceInfo, DeviceLost,
                                       DeviceUnavailable, Program, Source)
from tunesearch.runtime.gpu import GPUDevice
from tunesearch.codegen.gpu_dialects import CUDADialect
from tunesearch.space.target import Target

ARTIFACT_KINDS = (b"cubin\n", b"ptx\n")
TIMED_SPAN_S = 2e-4   # back-to-back launches in one timed call cover about this much GPU time
MAX_TIMED_LAUNCHES = 20


def launches_per_measurement(previous_s: float | None) -> int:
    """Back-to-back launches in one timed call: enough to cover TIMED_SPAN_S of GPU time, so
    that a small kernel's time is not the gaps between host calls."""
    if not previous_s or previous_s <= 0:
        return 1
    return max(1, min(MAX_TIMED_LAUNCHES, round(TIMED_SPAN_S / previous_s)))


class CUDADevice(GPUDevice):
    """A CUDA GPU. `CUDADevice(arch="sm_90")` also works without one, to compile only: its
    driver is opened on first use, so a compile process never opens the GPU."""
    name = "cuda"
    nvrtc_options: tuple[str, ...] = ()
    modules_kept = 32  # loaded modules kept for reuse, most recently used; programs keep theirs

    def __init__(self, arch: str | None = None):
        nvrtc_version()
        self.dialect = CUDADialect()
        self._driver: CudaDriver | None = None
        self._no_driver = ""
        self._modules: OrderedDict[str, DriverResource] = OrderedDict()
        self._arch = arch
        if arch is None:  # a device to run on: open the driver now, to fail early and clearly
            self._arch = self._architecture()

    def compile_settings(self) -> dict[str, Any]:
        return {"arch": self.arch}

    @classmethod
    def for_compiling(cls, arch: str | None = None, **_: Any) -> CUDADevice:
        return cls(arch=arch)

    @property
    def arch(self) -> str:
        return self._arch or self._architecture()

    def _architecture(self) -> str:
        major, minor = self.driver.properties()["compute_capability"]
        return f"sm_{major}{minor}"

    @property
    def driver(self) -> CudaDriver:
        if self._driver is None:
            if self._no_driver:
                raise DeviceUnavailable(self._no_driver)
            try:
                self._driver = open_driver()
            except DeviceUnavailable as exc:
                self._no_driver = str(exc)
                raise
        return self._driver

    @functools.cache
    def info(self) -> DeviceInfo:
        p = self.driver.properties()
        major, minor = p["compute_capability"]
        fingerprint = (
            ("backend", "cuda"), ("name", p["name"]), ("compute_capability", f"{major}.{minor}"),
            ("arch", self.arch), ("driver", p["driver_version"]), ("nvrtc", nvrtc_version()),
            ("sm_count", p["sm_count"]), ("memory", p["total_memory"]), ("l2", p["l2_bytes"]),
            ("nvrtc_options", " ".join(self.nvrtc_options)))
        target = Target(self.space_family, max_local_size=p["max_threads"],
                        max_local_dims=p["max_block"], local_memory=p["shared_bytes"],
                        max_registers=255, warp=32, compute_units=p["sm_count"])
        return DeviceInfo("cuda", p["name"], fingerprint, target)

    # ---- memory
    def alloc(self, size: int, dtype: DType) -> Buffer:
        handle = self.driver.alloc(max(size * dtype.itemsize, 1))
        return Buffer(self.name, size, dtype, handle, int(handle))

    def _to_device(self, handle, host: np.ndarray) -> None:
        self.driver.htod(handle, host)

    def _to_host(self, host: np.ndarray, handle) -> None:
        self.driver.dtoh(host, handle)

    def synchronize(self) -> None:
        self.driver.synchronize()

    # ---- programs
    def compile(self, source: Source) -> bytes:
        """A cubin for this device's architecture (needs NVRTC only, no GPU), from the cache
        on disk when this source was compiled before."""
        return ARTIFACT_KINDS[0] + cached_cubin(source.text, self.arch, self.nvrtc_options)

    def _module(self, artifact: bytes) -> DriverResource:
        """The loaded module of an artifact: one serves every entry of a batched source."""
        key = hashlib.sha256(artifact).hexdigest()
        loaded = self._modules.get(key)
        if loaded is None:
            kind = next((k for k in ARTIFACT_KINDS if artifact.startswith(k)), None)
            if kind is None:
                raise CompileError("not a CUDA artifact")
            image = artifact[len(kind):]
            if kind == b"ptx\n" and not image.endswith(b"\x00"):
                image += b"\x00"
            loaded = self._modules[key] = DriverResource(self.driver,
                                                         self.driver.module(image), "unload")
            while len(self._modules) > self.modules_kept:
                self._modules.popitem(last=False)  # unloaded once its programs are gone too
        self._modules.move_to_end(key)
        return loaded

    def load(self, artifact: bytes, source: Source) -> Program:
        driver = self.driver
        try:
            loaded = self._module(artifact)
            function = driver.function(loaded.handle, source.entry)
        except (DeviceLost, CompileError):
            raise
        except RuntimeError as exc:
            raise CompileError(f"the driver could not load {source.entry}: {exc}") from None
        local = source.local_size[0] if source.local_size else 1
        grid = source.global_size[0] // local if source.global_size else 0
        packed: dict[str, Any] = {}  # the launch for the last buffers, arguments packed once

        def launch_for(buffers: list[Buffer]) -> Callable[[], None]:
            pointers = tuple(b.address for b in buffers)
            if packed.get("pointers") != pointers:
                packed["launch"] = driver.launcher(function, grid, local, pointers)
                packed["pointers"] = pointers
            return packed["launch"]

        def run(buffers: list[Buffer]) -> None:
            if grid:
                driver.bind()
                launch_for(buffers)()

        def timed(buffers: list[Buffer]) -> float:
            if not grid:
                return 0.0
            seconds = driver.timed(launch_for(buffers),
                                   launches_per_measurement(packed.get("seconds")))
            packed["seconds"] = seconds
            return seconds

        program = Program(run, timed, source)
        program.module = loaded  # the module stays loaded while the program lives
        return program
