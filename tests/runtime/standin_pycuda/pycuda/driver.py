"""A stand-in for pycuda.driver over the stand-in CUDA driver library (standin_cuda.c), for tests
on machines without pycuda: the calls tunesearch's pycuda layer makes, with pycuda's error classes
and the way pycuda sorts CUDA's errors into them (launch failures are LaunchError, out of memory
is MemoryError, a few are RuntimeError, the rest LogicError; the message is "<call> failed: <the
driver's text>"). Like pycuda, objects free and unload themselves when they go, pushing their
context where none is current."""
from __future__ import annotations

import builtins
import ctypes
import weakref

import numpy as np

_lib = ctypes.CDLL("libcuda.so.1")
_u64, _ptr = ctypes.c_uint64, ctypes.c_void_p


class Error(Exception):
    pass


class LogicError(Error):
    pass


class LaunchError(Error):
    pass


class MemoryError(Error):  # noqa: A001  (pycuda's own name)
    pass


class RuntimeError(Error):  # noqa: A001  (pycuda's own name)
    pass


_LAUNCH, _MEMORY, _RUNTIME = {701, 702, 703, 719}, {2}, {100, 209, 214, 301, 600}


def _call(routine: str, *args) -> None:
    code = getattr(_lib, routine)(*args)
    if code:
        text = ctypes.c_char_p()
        _lib.cuGetErrorString(code, ctypes.byref(text))
        kind = LaunchError if code in _LAUNCH else MemoryError if code in _MEMORY else \
            RuntimeError if code in _RUNTIME else LogicError
        raise kind(f"{routine} failed: {text.value.decode() if text.value else code}")


class device_attribute:  # noqa: N801
    MAX_THREADS_PER_BLOCK, MAX_BLOCK_DIM_X, MAX_BLOCK_DIM_Y, MAX_BLOCK_DIM_Z = 1, 2, 3, 4
    MAX_SHARED_MEMORY_PER_BLOCK, MULTIPROCESSOR_COUNT, L2_CACHE_SIZE = 8, 16, 38
    COMPUTE_CAPABILITY_MAJOR, COMPUTE_CAPABILITY_MINOR = 75, 76


def init(flags: int = 0) -> None:
    _call("cuInit", ctypes.c_uint(flags))


def get_driver_version() -> int:
    version = ctypes.c_int()
    _call("cuDriverGetVersion", ctypes.byref(version))
    return version.value


class Context:
    def __init__(self, handle: int):
        self.handle = handle

    def push(self) -> None:
        _call("cuCtxPushCurrent", _ptr(self.handle))

    @staticmethod
    def pop() -> None:
        _call("cuCtxPopCurrent", ctypes.byref(_ptr()))

    @staticmethod
    def get_current() -> Context | None:
        handle = _ptr()
        _call("cuCtxGetCurrent", ctypes.byref(handle))
        return Context(handle.value) if handle.value else None

    @staticmethod
    def synchronize() -> None:
        _call("cuCtxSynchronize")


class _Scoped:
    """The context made current for a clean-up, and popped again after it."""
    primary: int = 0

    def __enter__(self):
        self.pushed = Context.get_current() is None
        if self.pushed:
            Context(self.primary).push()

    def __exit__(self, *exc):
        if self.pushed:
            Context.pop()


class Device:
    def __init__(self, ordinal: int):
        handle = ctypes.c_int()
        _call("cuDeviceGet", ctypes.byref(handle), ordinal)
        self.handle = handle.value

    def name(self) -> str:
        text = ctypes.create_string_buffer(256)
        _call("cuDeviceGetName", text, 256, self.handle)
        return text.value.decode()

    def get_attribute(self, attribute: int) -> int:
        value = ctypes.c_int()
        _call("cuDeviceGetAttribute", ctypes.byref(value), attribute, self.handle)
        return value.value

    def compute_capability(self) -> tuple[int, int]:
        return (self.get_attribute(device_attribute.COMPUTE_CAPABILITY_MAJOR),
                self.get_attribute(device_attribute.COMPUTE_CAPABILITY_MINOR))

    def total_memory(self) -> int:
        size = ctypes.c_size_t()
        _call("cuDeviceTotalMem", ctypes.byref(size), self.handle)
        return size.value

    def retain_primary_context(self) -> Context:
        handle = _ptr()
        _call("cuDevicePrimaryCtxRetain", ctypes.byref(handle), self.handle)
        _Scoped.primary = handle.value
        return Context(handle.value)


def _clean_up(routine: str, handle) -> None:
    try:
        with _Scoped():
            _call(routine, handle)
    except Error as exc:
        print(f"PyCUDA WARNING: a clean-up operation failed: {exc}")


class DeviceAllocation:
    def __init__(self, ptr: int):
        self.ptr = ptr
        weakref.finalize(self, _clean_up, "cuMemFree", _u64(ptr))

    def __int__(self) -> int:
        return self.ptr


def mem_alloc(nbytes: int) -> DeviceAllocation:
    ptr = _u64()
    _call("cuMemAlloc", ctypes.byref(ptr), ctypes.c_size_t(nbytes))
    return DeviceAllocation(ptr.value)


def memcpy_htod(dest, src: np.ndarray) -> None:
    _call("cuMemcpyHtoD", _u64(int(dest)), _ptr(src.ctypes.data), ctypes.c_size_t(src.nbytes))


def memcpy_dtoh(dest: np.ndarray, src) -> None:
    _call("cuMemcpyDtoH", _ptr(dest.ctypes.data), _u64(int(src)), ctypes.c_size_t(dest.nbytes))


class Function:
    def __init__(self, module: Module, handle: int):
        self.module, self.handle, self.arg_format = module, handle, ""

    def prepare(self, arg_format: str) -> Function:
        if set(arg_format) - {"P"}:
            raise builtins.RuntimeError("only pointer arguments are stood in for")
        self.arg_format = arg_format
        return self

    def prepared_call(self, grid, block, *args) -> None:
        if len(args) != len(self.arg_format):
            raise TypeError(f"{len(self.arg_format)} arguments were prepared, {len(args)} given")
        values = (_u64 * len(args))(*[int(a) for a in args])
        params = (_ptr * len(args))(*[ctypes.addressof(values) + 8 * i for i in range(len(args))])
        grid = tuple(grid) + (1,) * (3 - len(grid))
        block = tuple(block) + (1,) * (3 - len(block))
        _call("cuLaunchKernel", _ptr(self.handle), *map(ctypes.c_uint, grid),
              *map(ctypes.c_uint, block), ctypes.c_uint(0), _ptr(), params, _ptr())


class Module:
    def __init__(self, handle: int):
        self.handle = handle
        weakref.finalize(self, _clean_up, "cuModuleUnload", _ptr(handle))

    def get_function(self, name: str) -> Function:
        handle = _ptr()
        _call("cuModuleGetFunction", ctypes.byref(handle), _ptr(self.handle), name.encode())
        return Function(self, handle.value)


def module_from_buffer(image: bytes) -> Module:
    handle = _ptr()
    _call("cuModuleLoadData", ctypes.byref(handle), ctypes.c_char_p(bytes(image)))
    return Module(handle.value)


class Event:
    def __init__(self, flags: int = 0):
        handle = _ptr()
        _call("cuEventCreate", ctypes.byref(handle), ctypes.c_uint(flags))
        self.handle = handle.value

    def record(self, stream=None) -> Event:
        _call("cuEventRecord", _ptr(self.handle), _ptr())
        return self

    def synchronize(self) -> Event:
        _call("cuEventSynchronize", _ptr(self.handle))
        return self

    def time_till(self, end: Event) -> float:
        ms = ctypes.c_float()
        _call("cuEventElapsedTime", ctypes.byref(ms), _ptr(self.handle), _ptr(end.handle))
        return ms.value
