"""Shared helpers for device conformance: random valid configs of a kernel's space, k-tiled ones,
the CPU library of many configs, a kernel's buffers on a device, and the measure of an output's
error."""
from __future__ import annotations

import ctypes
import random
import subprocess
from pathlib import Path

import numpy as np

from tunesearch.graph.kernel import Kernel
from tunesearch.space.config import Config
from tunesearch.space.spaces import Space


def sample_configs(space: Space, count: int, seed: int = 0, tries: int = 4000) -> list[Config]:
    """Up to count distinct valid configs, the default and naive ones first."""
    rng = random.Random(seed)
    out: list[Config] = []
    for config in (space.default(), space.naive()):
        if space.validate(config) is None and config not in out:
            out.append(config)
    params = space.parameters()
    for _ in range(tries):
        if len(out) >= count:
            break
        values = {}
        for p in params:
            if p.when is not None and values.get(p.when[0]) not in p.when[1]:
                continue
            values[p.name] = rng.choice(p.choices)
        config = space.config_from(values)
        if config not in out and space.validate(config) is None:
            out.append(config)
    return out


def device_buffers(device, kernel: Kernel, inputs: list[np.ndarray]) -> list:
    """The kernel's buffers on device: its output (contents undefined), then its inputs."""
    out = kernel.buffers[0]
    buffers = [device.alloc(out.size, out.dtype)]
    return buffers + [device.from_numpy(a, spec.dtype)
                      for a, spec in zip(inputs, kernel.buffers[1:])]


def poison(kernel: Kernel) -> np.ndarray:
    """Output contents that no kernel computes (NaN, or 77 for integers): copied in before a
    run, a config that writes nothing fails."""
    out = kernel.buffers[0]
    return np.full(out.size, np.nan if out.dtype.is_float else 77, out.dtype.np)


def output_error(got: np.ndarray, want: np.ndarray) -> float:
    """Largest difference relative to the expected output's scale (at least 1). Equal values,
    infinities included, and NaN on both sides agree; NaN on one side only is an infinite error."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    diff = np.where(same, 0.0, np.abs(got - want))
    if np.isnan(diff).any():
        return float("inf")
    finite = want[np.isfinite(want)]
    scale = max(1.0, float(np.abs(finite).max())) if finite.size else 1.0
    return float(diff.max()) / scale if diff.size else 0.0


def tolerance(kernel: Kernel) -> float:
    """Relative error allowed: float32 sums reassociate, so it grows with the reduce length."""
    reduce_len = 1
    for size in kernel.domain[kernel.n_out:]:
        reduce_len *= size
    return 1e-5 * max(8.0, reduce_len ** 0.5 * 4)


def k_tiled_configs(kernel: Kernel, count: int, seed: int) -> list[Config]:
    """Sampled CPU configs with the first reduce axis cut into tiles of 1, 2 and about half of
    it, so that tiles with a remainder, panels refilled per tile and partial results kept
    between tiles are all exercised (the sampled tiles of small kernels are rarely shorter)."""
    from tunesearch.runtime.device import get_device
    from tunesearch.space.spaces import space_for
    space = space_for(kernel, get_device("cpu").info().target)
    size = kernel.domain[kernel.n_out]
    out = []
    for i, config in enumerate(sample_configs(space, count, seed=seed)):
        tiled = config.replace(ktile=(1, 2, size // 2 + 1)[i % 3])
        if space.validate(tiled) is None and tiled not in out:
            out.append(tiled)
    return out


def build_cpu_library(kernel: Kernel, configs: list[Config], folder: Path,
                      opt: str = "-O0", level: str | None = None) -> ctypes.CDLL:
    """One shared object with a function v{i} per config, so each kernel compiles once. The
    many configs compile at -O0 (what is checked is the loop nest the lowering writes); a few
    compile at -O3 with vectorization, as the device does."""
    from tunesearch.runtime.cpu import compiler
    from tunesearch.codegen.c import render_c
    from tunesearch.codegen.c_support import HEADER
    parts = [HEADER]
    for i, config in enumerate(configs):
        parts.append(render_c(kernel, config, f"v{i}", level_target(level).vector_bytes)
                     .replace(HEADER, ""))
    src = folder / f"{kernel.key}{opt}{level or ''}.c"
    lib = folder / f"{kernel.key}{opt}{level or ''}.so"
    src.write_text("\n".join(parts))
    flags = [opt if f == "-O3" else f for f in level_flags(level)]
    from tunesearch.runtime.device import get_device
    pool = str(get_device("cpu")._pool_path)  # the thread pool shared loops run on, by path
    proc = subprocess.run([compiler()[0], *flags, str(src), "-o", str(lib), "-lm", pool],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return ctypes.CDLL(str(lib))


def call_config(lib: ctypes.CDLL, i: int, kernel: Kernel, out: np.ndarray,
                inputs: list[np.ndarray]) -> None:
    """Run config i of a build_cpu_library library on host arrays."""
    fn = getattr(lib, f"v{i}")
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * len(kernel.buffers)
    fn(out.ctypes.data, *[a.ctypes.data for a in inputs])


def level_flags(level: str | None = None) -> list[str]:
    """The CPU device's compile flags for an ISA level (None: the device's own level)."""
    from tunesearch.runtime import host_cpu
    from tunesearch.runtime.cpu import FLAGS
    from tunesearch.runtime.device import get_device
    if level is None:
        return list(get_device("cpu").flags)
    from tunesearch.runtime.cpu import compiler
    return FLAGS + host_cpu.compile_flags(*host_cpu.resolve_level(level), compiler()[0])


def level_target(level: str | None = None):
    """The CPU target model for an ISA level (None: the device's own level)."""
    from tunesearch.runtime import host_cpu
    from tunesearch.runtime.device import get_device
    device = get_device("cpu")
    if level is None:
        return device.info().target
    return host_cpu.target_for(device.space_family, host_cpu.resolve_level(level)[1],
                               device.threads)
