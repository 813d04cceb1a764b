"""The CUDA device: CUDA C from the GPU lowering, compiled by NVRTC, launched through a driver API.

NVRTC comes from the cuda-python wheels (no CUDA toolkit needed) and compiles without a GPU, so
`compile_ptx(text, "sm_90")` works on any machine. Loading and launching go through a thin driver
layer: cuda-python's driver API by default, or pycuda where it is installed
(TUNESEARCH_CUDA_DRIVER=pycuda picks it; it is also the fallback when cuda-python's driver cannot
start). Everything else is shared. Programs are compiled to a cubin for the device's exact
architecture (a cubin loads on any driver of the toolkit's major version, PTX would need a driver
as new as NVRTC); kernel times come from CUDA events.
"""
from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import weakref
from typing import Any

import numpy as np

from tunesearch import settings
from tunesearch.graph.dtypes import DType
from tunesearch.runtime.device import (Buffer, CompileError, DeviceInfo, DeviceUnavailable,
                                       Program, Source)
from tunesearch.runtime.gpu import GPUDevice
from tunesearch.space.dialect_gpu import CUDADialect
from tunesearch.space.target import Target

INSTALL_HINT = 'pip install "tunesearch[cuda]" (cuda-python with NVRTC)'
ARTIFACT_KINDS = (b"cubin\n", b"ptx\n")


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise DeviceUnavailable(f"cuda-python is not installed ({exc}): {INSTALL_HINT}") from None
    return nvrtc


def _check_nvrtc(nvrtc, result) -> Any:
    err, *rest = result
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"NVRTC: {nvrtc.nvrtcGetErrorString(err)[1].decode()}")
    return rest[0] if len(rest) == 1 else rest


@functools.lru_cache(maxsize=None)
def nvrtc_version() -> str:
    """NVRTC's version, e.g. '13.5'; DeviceUnavailable if the library is missing."""
    nvrtc = _nvrtc()
    try:
        major, minor = _check_nvrtc(nvrtc, nvrtc.nvrtcVersion())
    except CompileError as exc:
        raise DeviceUnavailable(f"NVRTC does not work: {exc}") from None
    except Exception as exc:  # the shared library itself is missing (DynamicLibNotFoundError)
        raise DeviceUnavailable(f"the NVRTC library was not found ({exc}): pip install "
                                f"nvidia-cuda-nvrtc, or {INSTALL_HINT}") from None
    return f"{major}.{minor}"


def _compile(text: str, arch: str, kind: str, options=()) -> bytes:
    """NVRTC: CUDA C to PTX (for the virtual architecture of arch) or to a cubin for arch."""
    nvrtc = _nvrtc()
    nvrtc_version()  # a missing library fails here, with its install hint
    target = arch.replace("sm_", "compute_") if kind == "ptx" else arch
    opts = [f"--gpu-architecture={target}".encode(), *[o.encode() for o in options]]
    program = _check_nvrtc(nvrtc, nvrtc.nvrtcCreateProgram(text.encode(), b"kernel.cu", 0, [], []))
    try:
        err, = nvrtc.nvrtcCompileProgram(program, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            size = _check_nvrtc(nvrtc, nvrtc.nvrtcGetProgramLogSize(program))
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(program, log)
            raise CompileError(f"NVRTC failed ({arch}):\n"
                               f"{log.decode(errors='replace').rstrip(chr(0))[-4000:]}")
        get_size, get = (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX) if kind == "ptx" else \
            (nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN)
        out = b" " * _check_nvrtc(nvrtc, get_size(program))
        _check_nvrtc(nvrtc, get(program, out))
        return out
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def compile_ptx(text: str, arch: str = "sm_90", options=()) -> str:
    """PTX for CUDA C text; needs no GPU.

    >>> "entry" in compile_ptx('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }')
    True
    """
    return _compile(text, arch, "ptx", options).rstrip(b"\x00").decode()


def compile_cubin(text: str, arch: str = "sm_90", options=()) -> bytes:
    """A cubin (device code for exactly arch) for CUDA C text; needs no GPU."""
    return _compile(text, arch, "cubin", options)


# ---- the thin driver layer: the only part that differs between cuda-python and pycuda

class CudaDriver:
    """Load, launch, copy and time on device 0 of one driver binding. Handles are ints."""
    name = ""

    def properties(self) -> dict[str, Any]: ...
    def alloc(self, nbytes: int) -> Any: ...
    def htod(self, handle, host: np.ndarray) -> None: ...
    def dtoh(self, host: np.ndarray, handle) -> None: ...
    def module(self, image: bytes) -> Any: ...
    def function(self, module, name: str) -> Any: ...
    def launch(self, function, grid: int, block: int, handles: list) -> None: ...
    def timed(self, function, grid: int, block: int, handles: list) -> float: ...
    def synchronize(self) -> None: ...


class _Allocation:
    """Device memory from cuda-python, freed when the last reference goes."""

    def __init__(self, driver, ptr):
        self.ptr = int(ptr)
        self._free = weakref.finalize(self, driver.cuMemFree, ptr)

    def __int__(self) -> int:
        return self.ptr


class CudaPythonDriver(CudaDriver):
    name = "cuda-python"

    def __init__(self):
        from cuda.bindings import driver
        self.cu = driver
        self._check(driver.cuInit(0))
        self.device = self._check(driver.cuDeviceGet(0))
        self.context = self._check(driver.cuDevicePrimaryCtxRetain(self.device))
        self._bind()

    def _check(self, result):
        err, *rest = result
        if err != self.cu.CUresult.CUDA_SUCCESS:
            name = self.cu.cuGetErrorName(err)[1]
            raise RuntimeError(name.decode() if isinstance(name, bytes) else str(err))
        return rest[0] if len(rest) == 1 else rest

    def _bind(self) -> None:
        # the context is current per thread: make it current wherever we are called from
        self._check(self.cu.cuCtxSetCurrent(self.context))

    def properties(self) -> dict[str, Any]:
        cu, attr = self.cu, self.cu.CUdevice_attribute

        def get(name):
            return self._check(cu.cuDeviceGetAttribute(getattr(attr, f"CU_DEVICE_ATTRIBUTE_{name}"),
                                                       self.device))
        return {"name": self._check(cu.cuDeviceGetName(256, self.device)).split(b"\0")[0].decode(),
                "compute_capability": (get("COMPUTE_CAPABILITY_MAJOR"),
                                       get("COMPUTE_CAPABILITY_MINOR")),
                "driver_version": self._check(cu.cuDriverGetVersion()),
                "sm_count": get("MULTIPROCESSOR_COUNT"),
                "max_threads": get("MAX_THREADS_PER_BLOCK"),
                "max_block": (get("MAX_BLOCK_DIM_X"), get("MAX_BLOCK_DIM_Y"),
                              get("MAX_BLOCK_DIM_Z")),
                "shared_bytes": get("MAX_SHARED_MEMORY_PER_BLOCK"),
                "l2_bytes": get("L2_CACHE_SIZE"),
                "total_memory": self._check(cu.cuDeviceTotalMem(self.device))}

    def alloc(self, nbytes: int):
        self._bind()
        return _Allocation(self.cu, self._check(self.cu.cuMemAlloc(nbytes)))

    def htod(self, handle, host: np.ndarray) -> None:
        self._bind()
        self._check(self.cu.cuMemcpyHtoD(int(handle), host.ctypes.data, host.nbytes))

    def dtoh(self, host: np.ndarray, handle) -> None:
        self._bind()
        self._check(self.cu.cuMemcpyDtoH(host.ctypes.data, int(handle), host.nbytes))

    def module(self, image: bytes):
        self._bind()
        return self._check(self.cu.cuModuleLoadData(image))

    def function(self, module, name: str):
        return self._check(self.cu.cuModuleGetFunction(module, name.encode()))

    def launch(self, function, grid: int, block: int, handles: list) -> None:
        self._bind()
        params = (tuple(int(h) for h in handles), (ctypes.c_void_p,) * len(handles))
        self._check(self.cu.cuLaunchKernel(function, grid, 1, 1, block, 1, 1, 0, 0, params, 0))

    def timed(self, function, grid: int, block: int, handles: list) -> float:
        self._bind()
        start, end = (self._check(self.cu.cuEventCreate(0)) for _ in range(2))
        try:
            self._check(self.cu.cuEventRecord(start, 0))
            self.launch(function, grid, block, handles)
            self._check(self.cu.cuEventRecord(end, 0))
            self._check(self.cu.cuEventSynchronize(end))
            return self._check(self.cu.cuEventElapsedTime(start, end)) * 1e-3
        finally:
            self.cu.cuEventDestroy(start)
            self.cu.cuEventDestroy(end)

    def synchronize(self) -> None:
        self._bind()
        self._check(self.cu.cuCtxSynchronize())


class PyCudaDriver(CudaDriver):
    name = "pycuda"

    def __init__(self):
        import pycuda.driver as cuda
        self.cuda = cuda
        cuda.init()
        self.device = cuda.Device(0)
        self.context = self.device.retain_primary_context()
        self.context.push()
        atexit.register(self.context.pop)

    def properties(self) -> dict[str, Any]:
        d, attr = self.device, self.cuda.device_attribute
        return {"name": d.name(), "compute_capability": d.compute_capability(),
                "driver_version": self.cuda.get_driver_version(),
                "sm_count": d.get_attribute(attr.MULTIPROCESSOR_COUNT),
                "max_threads": d.get_attribute(attr.MAX_THREADS_PER_BLOCK),
                "max_block": (d.get_attribute(attr.MAX_BLOCK_DIM_X),
                              d.get_attribute(attr.MAX_BLOCK_DIM_Y),
                              d.get_attribute(attr.MAX_BLOCK_DIM_Z)),
                "shared_bytes": d.get_attribute(attr.MAX_SHARED_MEMORY_PER_BLOCK),
                "l2_bytes": d.get_attribute(attr.L2_CACHE_SIZE), "total_memory": d.total_memory()}

    def alloc(self, nbytes: int):
        return self.cuda.mem_alloc(nbytes)

    def htod(self, handle, host: np.ndarray) -> None:
        self.cuda.memcpy_htod(handle, host)

    def dtoh(self, host: np.ndarray, handle) -> None:
        self.cuda.memcpy_dtoh(host, handle)

    def module(self, image: bytes):
        return self.cuda.module_from_buffer(image)

    def function(self, module, name: str):
        return module.get_function(name)

    def launch(self, function, grid: int, block: int, handles: list) -> None:
        function(*[np.uintp(int(h)) for h in handles], block=(block, 1, 1), grid=(grid, 1))

    def timed(self, function, grid: int, block: int, handles: list) -> float:
        start, end = self.cuda.Event(), self.cuda.Event()
        start.record()
        self.launch(function, grid, block, handles)
        end.record()
        end.synchronize()
        return start.time_till(end) * 1e-3

    def synchronize(self) -> None:
        self.cuda.Context.synchronize()


# name -> driver layer, tried in this order when TUNESEARCH_CUDA_DRIVER does not pick one
DRIVERS: dict[str, type[CudaDriver]] = {"cuda-python": CudaPythonDriver, "pycuda": PyCudaDriver}


def open_driver() -> CudaDriver:
    """The driver layer named by TUNESEARCH_CUDA_DRIVER, else the first of DRIVERS that starts."""
    wanted = settings.cuda_driver()
    if wanted and wanted not in DRIVERS:
        raise DeviceUnavailable(f"TUNESEARCH_CUDA_DRIVER={wanted!r} is not one of "
                                f"{', '.join(DRIVERS)}")
    errors = []
    for name in [wanted] if wanted else list(DRIVERS):
        try:
            return DRIVERS[name]()
        except Exception as exc:  # an import, a missing libcuda, no device: try the next one
            errors.append(f"{name}: {exc}".strip())
    raise DeviceUnavailable("no CUDA device: " + "; ".join(errors))


class CUDADevice(GPUDevice):
    """A CUDA GPU. `CUDADevice(arch="sm_90")` also works without one, to compile only."""
    name = "cuda"
    nvrtc_options: tuple[str, ...] = ()

    def __init__(self, arch: str | None = None):
        nvrtc_version()
        self.dialect = CUDADialect()
        self._driver: CudaDriver | None = None
        self._modules: dict[str, Any] = {}
        self._no_driver = ""
        try:
            self._driver = open_driver()
        except DeviceUnavailable as exc:
            if arch is None:
                raise
            self._no_driver = str(exc)
        if arch is None:
            major, minor = self._driver.properties()["compute_capability"]
            arch = f"sm_{major}{minor}"
        self.arch = arch

    @property
    def driver(self) -> CudaDriver:
        if self._driver is None:
            raise DeviceUnavailable(self._no_driver or "no CUDA device")
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
        target = Target("gpu", max_local_size=p["max_threads"], max_local_dims=p["max_block"],
                        local_memory=p["shared_bytes"], max_registers=255, warp=32,
                        compute_units=p["sm_count"])
        return DeviceInfo("cuda", p["name"], fingerprint, target)

    # ---- memory
    def alloc(self, size: int, dtype: DType) -> Buffer:
        return Buffer(self.name, size, dtype, self.driver.alloc(max(size * dtype.itemsize, 1)))

    def _to_device(self, handle, host: np.ndarray) -> None:
        self.driver.htod(handle, host)

    def _to_host(self, host: np.ndarray, handle) -> None:
        self.driver.dtoh(host, handle)

    def synchronize(self) -> None:
        self.driver.synchronize()

    # ---- programs
    def compile(self, source: Source) -> bytes:
        """A cubin for this device's architecture (needs NVRTC only, no GPU)."""
        return ARTIFACT_KINDS[0] + compile_cubin(source.text, self.arch, self.nvrtc_options)

    def load(self, artifact: bytes, source: Source) -> Program:
        kind = next((k for k in ARTIFACT_KINDS if artifact.startswith(k)), None)
        if kind is None:
            raise CompileError("not a CUDA artifact")
        image = artifact[len(kind):]
        if kind == b"ptx\n" and not image.endswith(b"\x00"):
            image += b"\x00"
        driver = self.driver
        key = hashlib.sha256(artifact).hexdigest()
        try:
            if key not in self._modules:  # one module serves every entry of a batched source
                self._modules[key] = driver.module(image)
            function = driver.function(self._modules[key], source.entry)
        except RuntimeError as exc:
            raise CompileError(f"the driver could not load {source.entry}: {exc}") from None
        local = source.local_size[0] if source.local_size else 1
        grid = source.global_size[0] // local if source.global_size else 0

        def run(buffers: list[Buffer]) -> None:
            if grid:
                driver.launch(function, grid, local, [b.handle for b in buffers])

        def timed(buffers: list[Buffer]) -> float:
            if not grid:
                return 0.0
            return driver.timed(function, grid, local, [b.handle for b in buffers])

        return Program(run, timed, source)
