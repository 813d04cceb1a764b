"""The thin driver layer of the CUDA device: load, launch, copy and time on device 0 through
cuda-python's driver API or through pycuda, the only part that differs between the two
(TUNESEARCH_CUDA_DRIVER picks one; otherwise the first of DRIVERS that starts). A cubin loads on
a driver of NVRTC's CUDA major version or newer, which a driver layer checks when it starts.
"""
from __future__ import annotations

import atexit
import ctypes
import warnings
import weakref
from typing import Any, Callable

import numpy as np

from tunesearch import settings
from tunesearch.runtime.cuda_nvrtc import nvrtc_version
from tunesearch.runtime.device import DeviceLost, DeviceUnavailable

# the errors after which a CUDA context runs nothing more: only a new process recovers
STICKY_ERRORS = {
    700: ("CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"),
    702: ("CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"),
    714: ("CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error"),
    715: ("CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"),
    716: ("CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"),
    717: ("CUDA_ERROR_INVALID_ADDRESS_SPACE", "operation not supported on global/shared address"),
    718: ("CUDA_ERROR_INVALID_PC", "invalid program counter"),
    719: ("CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"),
}


def version_text(driver_version: int) -> str:
    """cuDriverGetVersion's number as CUDA's version: 12080 -> '12.8'."""
    return f"{driver_version // 1000}.{driver_version % 1000 // 10}"


def check_versions(driver_version: int, nvrtc: str) -> None:
    """DeviceUnavailable, with the fix, when the driver cannot load NVRTC's cubins: a cubin
    needs a driver of NVRTC's CUDA major version or newer."""
    driver_major, nvrtc_major = driver_version // 1000, int(nvrtc.split(".")[0])
    if driver_major >= nvrtc_major:
        return
    needed = " (R580 or newer)" if nvrtc_major == 13 else ""
    other = ('pip install "tunesearch[cuda12]" (cuda-python and NVRTC 12)' if driver_major == 12
             else f"install cuda-python and NVRTC of CUDA {driver_major}")
    raise DeviceUnavailable(
        f"the NVIDIA driver runs CUDA {version_text(driver_version)} but NVRTC is {nvrtc}, whose "
        f"cubins need a CUDA {nvrtc_major} driver{needed}: upgrade the driver, or {other}")


def _sticky_error(text: str) -> bool:
    return any(name in text or message in text for name, message in STICKY_ERRORS.values())


class CudaDriver:
    """Load, launch, copy and time on device 0 of one driver binding."""
    name = ""
    version = 0  # cuDriverGetVersion

    def bind(self) -> None:
        """Make the device's context current on the calling thread."""

    def properties(self) -> dict[str, Any]: ...
    def alloc(self, nbytes: int) -> Any: ...
    def free(self, ptr) -> None: ...  # binds the context; raises when the driver refuses
    def htod(self, handle, host: np.ndarray) -> None: ...
    def dtoh(self, host: np.ndarray, handle) -> None: ...
    def module(self, image: bytes) -> Any: ...
    def unload(self, module) -> None: ...
    def function(self, module, name: str) -> Any: ...

    def launcher(self, function, grid: int, block: int, pointers: tuple[int, ...]
                 ) -> Callable[[], None]:
        """A launch of function with its arguments packed once; call it with the context bound."""

    def timed(self, launch: Callable[[], None], count: int) -> float:
        """Seconds per launch of count back-to-back launches, measured by CUDA events."""

    def synchronize(self) -> None: ...


class DriverResource:
    """A driver object (device memory, a module) released through the driver when the last
    reference goes, from whichever thread that is; a failure is reported as a warning."""

    def __init__(self, driver, handle, release: str):
        self.handle = handle
        self.ptr = int(handle) if release == "free" else 0
        self._finalizer = weakref.finalize(self, _release, driver, release, handle)
        self._finalizer.atexit = False  # at exit the driver tears the context down itself

    def __int__(self) -> int:
        return self.ptr


def _release(driver, release: str, handle) -> None:
    try:
        getattr(driver, release)(handle)
    except Exception as exc:  # noqa: BLE001  (called by the garbage collector: say it, go on)
        warnings.warn(f"CUDA {release} failed: {exc}", RuntimeWarning, stacklevel=2)


class CudaPythonDriver(CudaDriver):
    name = "cuda-python"

    def __init__(self):
        from cuda.bindings import driver
        self.cu = driver
        self._check(driver.cuInit(0))
        self.version = self._check(driver.cuDriverGetVersion())
        check_versions(self.version, nvrtc_version())
        self.device = self._check(driver.cuDeviceGet(0))
        self.context = self._check(driver.cuDevicePrimaryCtxRetain(self.device))
        self._events = None
        self.bind()

    def _check(self, result):
        err, *rest = result
        if err != self.cu.CUresult.CUDA_SUCCESS:
            name = self.cu.cuGetErrorName(err)[1]
            name = name.decode() if isinstance(name, bytes) else str(err)
            if int(err) in STICKY_ERRORS:
                raise DeviceLost(f"{name}: the CUDA context is lost")
            raise RuntimeError(name)
        return rest[0] if len(rest) == 1 else rest

    def bind(self) -> None:
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
                "driver_version": self.version,
                "sm_count": get("MULTIPROCESSOR_COUNT"),
                "max_threads": get("MAX_THREADS_PER_BLOCK"),
                "max_block": (get("MAX_BLOCK_DIM_X"), get("MAX_BLOCK_DIM_Y"),
                              get("MAX_BLOCK_DIM_Z")),
                "shared_bytes": get("MAX_SHARED_MEMORY_PER_BLOCK"),
                "l2_bytes": get("L2_CACHE_SIZE"),
                "total_memory": self._check(cu.cuDeviceTotalMem(self.device))}

    def alloc(self, nbytes: int):
        self.bind()
        return DriverResource(self, self._check(self.cu.cuMemAlloc(nbytes)), "free")

    def free(self, ptr) -> None:
        self.bind()
        self._check(self.cu.cuMemFree(ptr))

    def htod(self, handle, host: np.ndarray) -> None:
        self.bind()
        self._check(self.cu.cuMemcpyHtoD(int(handle), host.ctypes.data, host.nbytes))

    def dtoh(self, host: np.ndarray, handle) -> None:
        self.bind()
        self._check(self.cu.cuMemcpyDtoH(host.ctypes.data, int(handle), host.nbytes))

    def module(self, image: bytes):
        self.bind()
        return self._check(self.cu.cuModuleLoadData(image))

    def unload(self, module) -> None:
        self.bind()
        self._check(self.cu.cuModuleUnload(module))

    def function(self, module, name: str):
        self.bind()
        return self._check(self.cu.cuModuleGetFunction(module, name.encode()))

    def launcher(self, function, grid, block, pointers):
        # kernelParams is an array of pointers to the argument values: built once, passed by
        # address, so a launch packs nothing
        values = (ctypes.c_uint64 * len(pointers))(*pointers)
        params = (ctypes.c_void_p * len(pointers))(
            *[ctypes.addressof(values) + i * 8 for i in range(len(pointers))])
        address = ctypes.addressof(params)
        launch_kernel, check = self.cu.cuLaunchKernel, self._check

        def launch() -> None:
            check(launch_kernel(function, grid, 1, 1, block, 1, 1, 0, 0, address, 0))
        launch.packed = (values, params)  # alive as long as the launch
        return launch

    def timed(self, launch, count):
        self.bind()
        if self._events is None:
            self._events = tuple(self._check(self.cu.cuEventCreate(0)) for _ in range(2))
        start, end = self._events
        launch()  # the stream is busy while the start event and the timed launches are queued
        self._check(self.cu.cuEventRecord(start, 0))
        for _ in range(count):
            launch()
        self._check(self.cu.cuEventRecord(end, 0))
        self._check(self.cu.cuEventSynchronize(end))
        return self._check(self.cu.cuEventElapsedTime(start, end)) * 1e-3 / count

    def synchronize(self) -> None:
        self.bind()
        self._check(self.cu.cuCtxSynchronize())


class PyCudaDriver(CudaDriver):
    name = "pycuda"

    def __init__(self):
        import pycuda.driver as cuda
        self.cuda = cuda
        cuda.init()
        self.version = cuda.get_driver_version()
        check_versions(self.version, nvrtc_version())
        self.device = cuda.Device(0)
        self.context = self.device.retain_primary_context()
        self.context.push()
        self._events = None
        atexit.register(self.context.pop)

    def _call(self, work: Callable[[], Any]) -> Any:
        """Run work; pycuda's errors become DeviceLost (a lost context) or RuntimeError."""
        try:
            return work()
        except self.cuda.Error as exc:
            if isinstance(exc, self.cuda.LaunchError) or _sticky_error(str(exc)):
                raise DeviceLost(f"{exc}: the CUDA context is lost") from None
            raise RuntimeError(str(exc)) from None

    def bind(self) -> None:
        if self.cuda.Context.get_current() is None:  # a thread of its own: push the context
            self.context.push()

    def properties(self) -> dict[str, Any]:
        d, attr = self.device, self.cuda.device_attribute
        return {"name": d.name(), "compute_capability": d.compute_capability(),
                "driver_version": self.version,
                "sm_count": d.get_attribute(attr.MULTIPROCESSOR_COUNT),
                "max_threads": d.get_attribute(attr.MAX_THREADS_PER_BLOCK),
                "max_block": (d.get_attribute(attr.MAX_BLOCK_DIM_X),
                              d.get_attribute(attr.MAX_BLOCK_DIM_Y),
                              d.get_attribute(attr.MAX_BLOCK_DIM_Z)),
                "shared_bytes": d.get_attribute(attr.MAX_SHARED_MEMORY_PER_BLOCK),
                "l2_bytes": d.get_attribute(attr.L2_CACHE_SIZE), "total_memory": d.total_memory()}

    def alloc(self, nbytes: int):
        self.bind()  # pycuda frees its allocations itself, in their context
        return self._call(lambda: self.cuda.mem_alloc(nbytes))

    def htod(self, handle, host: np.ndarray) -> None:
        self.bind()
        self._call(lambda: self.cuda.memcpy_htod(handle, host))

    def dtoh(self, host: np.ndarray, handle) -> None:
        self.bind()
        self._call(lambda: self.cuda.memcpy_dtoh(host, handle))

    def module(self, image: bytes):
        self.bind()
        return self._call(lambda: self.cuda.module_from_buffer(image))

    def unload(self, module) -> None:
        pass  # pycuda unloads a module when its object goes, which the caller's reference was

    def function(self, module, name: str):
        self.bind()
        return self._call(lambda: module.get_function(name))

    def launcher(self, function, grid, block, pointers):
        function.prepare("P" * len(pointers))
        grid_shape, block_shape = (grid, 1), (block, 1, 1)

        def launch() -> None:
            self._call(lambda: function.prepared_call(grid_shape, block_shape, *pointers))
        return launch

    def timed(self, launch, count):
        self.bind()
        if self._events is None:
            self._events = (self.cuda.Event(), self.cuda.Event())
        start, end = self._events
        launch()  # the stream is busy while the start event and the timed launches are queued
        self._call(start.record)
        for _ in range(count):
            launch()
        self._call(end.record)
        self._call(end.synchronize)
        return self._call(lambda: start.time_till(end)) * 1e-3 / count

    def synchronize(self) -> None:
        self.bind()
        self._call(self.cuda.Context.synchronize)


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
        except DeviceUnavailable:  # the driver is too old for NVRTC: another layer is too
            raise
        except Exception as exc:  # an import, a missing libcuda, no device: try the next one
            errors.append(f"{name}: {exc}".strip())
    raise DeviceUnavailable("no CUDA device: " + "; ".join(errors))


def driver_version() -> int | None:
    """The installed driver's cuDriverGetVersion (12080 is CUDA 12.8), without starting it;
    None when there is no driver library or no binding to ask it through."""
    try:
        from cuda.bindings import driver
        err, version = driver.cuDriverGetVersion()
        return int(version) if err == driver.CUresult.CUDA_SUCCESS else None
    except Exception:  # noqa: BLE001  (no cuda-python, or no libcuda.so.1)
        pass
    try:
        import pycuda.driver
        return int(pycuda.driver.get_driver_version())
    except Exception:  # noqa: BLE001
        return None
