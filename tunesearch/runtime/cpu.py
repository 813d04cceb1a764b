"""The CPU device: C from the lowering, the system C compiler, a thread pool of its own
(cpu_pool.py), ctypes.

Compiled objects are cached on disk under the cache folder, keyed by the source, the compiler and
its flags, so a kernel is compiled once per machine.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

from tunesearch import settings
from tunesearch.graph.dtypes import DType
from tunesearch.graph.kernel import Kernel
from tunesearch.runtime import host_cpu
from tunesearch.runtime.cpu_pool import POOL_SOURCE
from tunesearch.runtime.device import (Buffer, CompileError, Device, DeviceInfo, DeviceUnavailable,
                                       Program, Source)
from tunesearch.codegen.c import render_c
from tunesearch.codegen.panels import pack_panel, prepack_layouts
from tunesearch.space.config import Config
from tunesearch.space.target import Target

# the ISA flags (-march...) come from the target model: see host_cpu.compile_flags.
# -fno-trapping-math: nothing reads the floating-point exception flags, and without it GCC may
# not compute both sides of a select (a clamp before exp2, a mask) in vector lanes; results are
# the same bit for bit. -fopenmp: the `omp simd` loops (parallel loops run on cpu_pool.py).
FLAGS = ["-O3", "-fopenmp", "-fno-trapping-math", "-fPIC", "-shared", "-std=gnu11", "-w"]


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


class CPUDevice(Device):
    name = "cpu"
    host_memory = True

    def __init__(self):
        compiler()  # fail early, with the install hint
        self.threads = settings.cpu_threads()
        try:
            self.isa_name, self.isa = host_cpu.resolve_level(settings.cpu_isa())
        except host_cpu.IsaError as exc:
            raise DeviceUnavailable(str(exc)) from None
        self.flags = FLAGS + host_cpu.compile_flags(self.isa_name, self.isa,
                                                    compiler()[0])
        self._dir = settings.cache_dir() / "cpu"
        self._dir.mkdir(parents=True, exist_ok=True)
        self._pool_path = _compile(self._dir, Source(POOL_SOURCE, "ts_parallel", "pool"),
                                   FLAGS + ["-pthread"], [])
        self._pool = _pool_at(str(self._pool_path))
        self._pool.ts_pool_configure(self.threads, settings.omp_spin())

    @functools.cache
    def info(self) -> DeviceInfo:
        cpu = host_cpu.cpuinfo()
        target = self.target()
        model = {"isa": self.isa_name if self.isa_name != "native"
                 else f"native ({target.isa})",
                 "vector_bytes": target.vector_bytes, "vector_registers": target.vector_registers,
                 "fma_units": target.fma_units, "l1d": target.l1d.size, "l2": target.l2.size,
                 "l3": target.l3.size, "cores": target.cores}
        fingerprint = (("backend", "cpu"), ("name", cpu["model"]), ("vendor", cpu["vendor"]),
                       ("compiler", compiler()[1]), ("flags", " ".join(self.flags)),
                       ("threads", self.threads), ("machine", platform.machine()),
                       *sorted(model.items()))
        return DeviceInfo("cpu", cpu["model"], fingerprint, target)

    def target(self) -> Target:
        """The model of this CPU at the chosen ISA level (see runtime/host_cpu.py)."""
        return host_cpu.target_for(self.space_family, self.isa, self.threads,
                                   self._fork_join_seconds())

    @functools.cache
    def _fork_join_seconds(self) -> float:
        """What a parallel loop costs to start and end here and now: the best of a few
        measurements, rounded to the nearest power of two microseconds (in log scale), so a
        machine gives the same figure every time. On a loaded machine threads wake late and
        the figure grows, so fewer kernels are worth sharing out: that is the point of
        measuring it."""
        if self.threads <= 1:
            return 0.0
        self._pool.ts_fork_join(self.threads, 20)  # the threads start
        best = min(self._pool.ts_fork_join(self.threads, 40) for _ in range(5))
        return 2.0 ** round(math.log2(max(best, 1e-6) * 1e6)) * 1e-6

    def alloc(self, size: int, dtype: DType) -> Buffer:
        array = aligned_empty(max(size, 1), dtype.np)
        return Buffer(self.name, size, dtype, array, array.ctypes.data)

    def part(self, buffer: Buffer, size: int) -> Buffer:
        return Buffer(self.name, size, buffer.dtype, buffer.handle[:max(size, 1)],
                      buffer.address)

    def copyin(self, buffer: Buffer, array: np.ndarray) -> None:
        buffer.handle[:buffer.size] = array.reshape(-1)

    def copyout(self, buffer: Buffer) -> np.ndarray:
        return buffer.handle[:buffer.size].copy()

    def render(self, kernel: Kernel, config: Config,
               prepacked: frozenset[int] = frozenset()) -> Source:
        name = kernel.name
        return Source(render_c(kernel, config, name, self.isa.vector_bytes, prepacked,
                               self.target().l2.size), name,
                      kernel.key, len(kernel.buffers))

    def prepack_layouts(self, kernel: Kernel, config: Config,
                        constants: frozenset[int]) -> dict[int, tuple[int, ...]]:
        return prepack_layouts(kernel, config, constants)

    def prepack(self, kernel: Kernel, config: Config, index: int,
                values: np.ndarray) -> np.ndarray | None:
        return pack_panel(kernel, config, index, values)

    def compile(self, source: Source) -> bytes:
        # a kernel with shared loops links the thread pool's library by its path, so every
        # kernel of a process runs on the one pool
        pool = [str(self._pool_path)] if "ts_parallel(" in source.text else []
        return str(_compile(self._dir, source, self.flags, pool)).encode()

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

        return Program(run, timed, source, entry=ctypes.cast(fn, ctypes.c_void_p).value)

    def evict(self, buffers: list[Buffer]) -> bool:
        lib, line = self._evictor()
        done = all([lib.ts_evict(_address(b), b.size * b.dtype.itemsize, line)
                    for b in buffers])
        # the pool's workers may have gone to sleep meanwhile: woken here, the next launch
        # finds them spinning, as a model's kernel does just after the kernel before it
        if self.threads > 1:
            self._pool.ts_fork_join(self.threads, 1)
        return done

    @functools.cache
    def _evictor(self) -> tuple[ctypes.CDLL, int]:
        """The library of ts_evict, and the step it flushes by: the smallest line of the CPUs
        this runs on (64 bytes: x86, most ARM cores), which reaches every line of a CPU with
        longer ones too."""
        path = self.compile(Source(_EVICT_SOURCE, "ts_evict", "evict")).decode()
        return _evict_library_at(path), min(self.target().l1d.line, 64)

    def sequence(self, steps: list[tuple[Program, list[Buffer]]]) -> Callable[[], None]:
        """One C call runs every kernel of the sequence: the entries and the buffer addresses
        are packed once into arrays a small C loop walks (a ctypes call per kernel costs a few
        microseconds, as much as a small kernel)."""
        if not steps or any(p.entry is None or len(b) > MAX_CHAINED_ARGS for p, b in steps):
            return super().sequence(steps)
        chain = _chain_library(self)
        entries = (ctypes.c_void_p * len(steps))(*[p.entry for p, _ in steps])
        counts = (ctypes.c_int * len(steps))(*[len(b) for _, b in steps])
        addresses = [_address(b) for _, buffers in steps for b in buffers]
        args = (ctypes.c_void_p * max(1, len(addresses)))(*addresses)
        run, n = chain.run_chain, len(steps)
        launch = functools.partial(run, n, entries, counts, args)
        slots: dict[int, list[int]] = {}
        for i, buffer in enumerate(b for _, buffers in steps for b in buffers):
            slots.setdefault(buffer.serial, []).append(i)

        def rebind(buffer: Buffer, array: np.ndarray | None = None) -> None:
            """Point the kernels that read or write `buffer` at `array` (C-contiguous,
            aligned, its size and dtype) instead; None points them back at the buffer. A
            model's input so needs no copy into its buffer, nor its output out of one."""
            address = _address(buffer) if array is None else array.ctypes.data
            for i in slots.get(buffer.serial, ()):
                args[i] = address
        launch.keep = (entries, counts, args)  # the arrays live as long as the function
        launch.rebind = rebind
        return launch


def _compile(folder: Path, source: Source, flags: list[str], libraries: list[str]) -> Path:
    """The shared library of a source, compiled once per machine into folder: keyed by the
    source, the compiler, its flags and the libraries it links."""
    cc, version = compiler()
    digest = hashlib.sha256("\n".join([source.text, version, *flags, *libraries])
                            .encode()).hexdigest()
    path = folder / f"{digest[:32]}.so"
    if not path.exists():
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            src, obj = Path(tmp) / "k.c", Path(tmp) / "k.so"
            src.write_text(source.text)
            proc = subprocess.run([cc, *flags, str(src), "-o", str(obj), "-lm", *libraries],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise CompileError(f"{cc} failed on {source.entry}:\n{proc.stderr[-4000:]}")
            os.replace(obj, path)  # atomic: concurrent compilers never see half a file
    return path


@functools.lru_cache(maxsize=None)
def _pool_at(path: str) -> ctypes.CDLL:
    """The thread pool (cpu_pool.py) loaded; kernels link it by this path, so a process holds
    one pool."""
    lib = ctypes.CDLL(path)
    lib.ts_pool_configure.restype = None
    lib.ts_pool_configure.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.ts_fork_join.restype = ctypes.c_double
    lib.ts_fork_join.argtypes = [ctypes.c_int, ctypes.c_int]
    return lib


MAX_CHAINED_ARGS = 16
_CHAIN_SOURCE = """
typedef void (*k1)(void*);
#define P(i) a[i]
void run_chain(int n, void** entries, const int* counts, void** args) {
  void** a = args;
  for (int i = 0; i < n; i++) {
    void* f = entries[i];
    switch (counts[i]) {
""" + "".join(
    f"      case {n}: ((void (*)({', '.join(['void*'] * n)}))f)"
    f"({', '.join(f'P({i})' for i in range(n))}); break;\n"
    for n in range(1, MAX_CHAINED_ARGS + 1)) + """    }
    a += counts[i];
  }
}
"""


@functools.lru_cache(maxsize=None)
def _chain_library_at(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    lib.run_chain.restype = None
    lib.run_chain.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    return lib


# cache lines out of every level, to memory: clflush on x86-64 (SSE2, every such CPU), `dc civac`
# on AArch64 (Linux lets user code run it); elsewhere nothing, and the call says so
_EVICT_SOURCE = """
int ts_evict(const char* p, long bytes, int line) {
  const char* end = p + bytes;
#if defined(__x86_64__) || defined(__i386__)
  for (; p < end; p += line) __builtin_ia32_clflush(p);
  __builtin_ia32_mfence();
  return 1;
#elif defined(__aarch64__)
  for (; p < end; p += line) __asm__ volatile("dc civac, %0" : : "r"(p) : "memory");
  __asm__ volatile("dsb ish" : : : "memory");
  return 1;
#else
  (void)end; (void)line;
  return 0;
#endif
}
"""


@functools.lru_cache(maxsize=None)
def _evict_library_at(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    lib.ts_evict.restype = ctypes.c_int
    lib.ts_evict.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_int]
    return lib


def _chain_library(device: "CPUDevice") -> ctypes.CDLL:
    source = Source(_CHAIN_SOURCE, "run_chain", "chain")
    return _chain_library_at(device.compile(source).decode())


ALIGN = 128  # bytes: a cache line on x86 (64) and on the ARM cores with 128-byte lines


def aligned_empty(size: int, dtype) -> np.ndarray:
    """An array that starts on a cache line (numpy aligns to 16 bytes): a vector block of a
    line's width then loads and stores one line, not two, and rows whose stride is a whole
    number of lines all start on one."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(size * itemsize + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + size * itemsize].view(dtype)


def _address(buffer: Buffer) -> int:
    return buffer.handle.ctypes.data if buffer.address is None else buffer.address
