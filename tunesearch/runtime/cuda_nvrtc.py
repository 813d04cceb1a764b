"""NVRTC: CUDA C to PTX or to a cubin for one architecture, with no GPU needed.

NVRTC comes from the cuda-python wheels (no CUDA toolkit needed), so `compile_ptx(text, "sm_90")`
works on any machine. Cubins are cached on disk by a digest of the source, the architecture,
NVRTC's version and the options (`cached_cubin`).
"""
from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from typing import Any

from tunesearch import settings
from tunesearch.runtime.device import CompileError, DeviceUnavailable

INSTALL_HINT = 'pip install "tunesearch[cuda]" (cuda-python with NVRTC)'


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


def cached_cubin(text: str, arch: str, options=()) -> bytes:
    """compile_cubin through a cache on disk, keyed by a digest of the source, the architecture,
    NVRTC's version and the options: the compile pool and a model plan's parallel pre-compile
    fill it, and the process that loads the program then finds its cubin there."""
    key = "\n".join([text, arch, nvrtc_version(), *options])
    folder = settings.cache_dir() / "cuda"
    path = folder / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.cubin"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    cubin = compile_cubin(text, arch, options)
    folder.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=folder, suffix=".part")
    with os.fdopen(handle, "wb") as out:
        out.write(cubin)
    os.replace(partial, path)  # atomic: concurrent compilers never see half a file
    return cubin
