"""The CPU device: C from the lowering, the system C compiler, OpenMP, ctypes.

Compiled objects are cached on disk under the cache folder, keyed by the source, the compiler and
its flags, so a kernel is compiled once per machine.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from tunesearch import settings
from tunesearch.graph.dtypes import DType
from tunesearch.graph.kernel import Kernel
from tunesearch.runtime.device import (Buffer, CompileError, Device, DeviceInfo, DeviceUnavailable,
                                       Program, Source)
from tunesearch.space.config import Config
from tunesearch.space.lower_cpu import render_cpu
from tunesearch.space.target import Target

FLAGS = ["-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=gnu11", "-w"]


@functools.lru_cache(maxsize=None)
def compiler() -> tuple[str, str]:
    """The C compiler's path and its version line."""
    cc = os.environ.get("CC", "cc")
    path = shutil.which(cc)
    if path is None:
        raise DeviceUnavailable(f"no C compiler {cc!r} found: install gcc "
                                "(Debian/Ubuntu: apt-get install gcc) or set CC")
    out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    return path, out.splitlines()[0] if out else cc


@functools.lru_cache(maxsize=None)
def _cpuinfo() -> dict[str, str]:
    info = {"model": platform.processor() or platform.machine(), "vendor": "", "flags": ""}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key == "model name" and info["model"] in ("", platform.machine()):
                info["model"] = value
            elif key == "vendor_id" and not info["vendor"]:
                info["vendor"] = value
            elif key == "flags" and not info["flags"]:
                info["flags"] = value
    except OSError:
        pass
    return info


def _isa(flags: str) -> str:
    wanted = ["avx512f", "avx512bw", "avx512vl", "avx2", "fma", "avx", "sse4_2", "neon", "asimd"]
    have = set(flags.split())
    return " ".join(f for f in wanted if f in have) or platform.machine()


class CPUDevice(Device):
    name = "cpu"
    host_memory = True

    def __init__(self):
        compiler()  # fail early, with the install hint
        self.threads = settings.cpu_threads()
        self._dir = settings.cache_dir() / "cpu"
        self._dir.mkdir(parents=True, exist_ok=True)

    @functools.cache
    def info(self) -> DeviceInfo:
        cpu = _cpuinfo()
        isa = _isa(cpu["flags"])
        vector = 64 if "avx512f" in isa else 32 if "avx" in isa else 16
        fingerprint = (("backend", "cpu"), ("name", cpu["model"]), ("vendor", cpu["vendor"]),
                       ("compiler", compiler()[1]), ("flags", " ".join(FLAGS)), ("isa", isa),
                       ("threads", self.threads), ("machine", platform.machine()))
        target = Target("cpu", threads=self.threads, vector_bytes=vector)
        return DeviceInfo("cpu", cpu["model"], fingerprint, target)

    def alloc(self, size: int, dtype: DType) -> Buffer:
        array = np.empty(max(size, 1), dtype.np)
        return Buffer(self.name, size, dtype, array, array.ctypes.data)

    def copyin(self, buffer: Buffer, array: np.ndarray) -> None:
        buffer.handle[:buffer.size] = array.reshape(-1)

    def copyout(self, buffer: Buffer) -> np.ndarray:
        return buffer.handle[:buffer.size].copy()

    def render(self, kernel: Kernel, config: Config) -> Source:
        name = kernel.name
        return Source(render_cpu(kernel, config, name), name, kernel.key, len(kernel.buffers))

    def compile(self, source: Source) -> bytes:
        cc, version = compiler()
        digest = hashlib.sha256("\n".join([source.text, version, *FLAGS]).encode()).hexdigest()
        path = self._dir / f"{digest[:32]}.so"
        if not path.exists():
            with tempfile.TemporaryDirectory(dir=self._dir) as tmp:
                src, obj = Path(tmp) / "k.c", Path(tmp) / "k.so"
                src.write_text(source.text)
                proc = subprocess.run([cc, *FLAGS, str(src), "-o", str(obj), "-lm"],
                                      capture_output=True, text=True)
                if proc.returncode != 0:
                    raise CompileError(f"{cc} failed on {source.entry}:\n{proc.stderr[-4000:]}")
                os.replace(obj, path)  # atomic: concurrent compilers never see half a file
        return str(path).encode()

    def load(self, artifact: bytes, source: Source) -> Program:
        lib = ctypes.CDLL(artifact.decode())
        fn = getattr(lib, source.entry)
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p] * source.n_buffers

        def run(buffers: list[Buffer]) -> None:
            fn(*[_address(b) for b in buffers])

        def timed(buffers: list[Buffer]) -> float:
            args = [ctypes.c_void_p(_address(b)) for b in buffers]
            start = time.perf_counter()
            fn(*args)
            return time.perf_counter() - start

        return Program(run, timed, source)


def _address(buffer: Buffer) -> int:
    return buffer.handle.ctypes.data if buffer.address is None else buffer.address
