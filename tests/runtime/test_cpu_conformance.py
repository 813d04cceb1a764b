"""Every catalogue kernel, under many random valid CPU configs, matches the numpy interpreter."""
from __future__ import annotations

import ctypes
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.catalogue import catalogue, random_inputs
from tests.conformance import output_error, sample_configs, tolerance
from tunesearch.runtime.cpu import FLAGS, compiler
from tunesearch.runtime.device import get_device
from tunesearch.runtime.interpret import run_kernel
from tunesearch.space.lower_cpu import HEADER, render_cpu
from tunesearch.space.space import space_for

CONFIGS_PER_KERNEL = 50
KERNELS = catalogue()


def _build(kernel, configs, tmp_path, opt="-O0"):
    """One shared object with a function per config, so each kernel compiles once. The many
    configs compile at -O0 (what is checked is the loop nest the lowering writes); a few compile
    at -O3 with vectorization, as the device does, in test_configs_at_o3."""
    parts = [HEADER]
    for i, config in enumerate(configs):
        parts.append(render_cpu(kernel, config, f"v{i}").replace(HEADER, ""))
    src = tmp_path / f"{kernel.key}{opt}.c"
    lib = tmp_path / f"{kernel.key}{opt}.so"
    src.write_text("\n".join(parts))
    flags = [opt if f == "-O3" else f for f in FLAGS]
    proc = subprocess.run([compiler()[0], *flags, str(src), "-o", str(lib), "-lm"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return ctypes.CDLL(str(lib))


def _build_all(tmp, count, opt):
    target = get_device("cpu").info().target
    jobs = []
    for name, kernel in KERNELS:
        configs = sample_configs(space_for(kernel, target), count, seed=len(name))
        jobs.append((name, kernel, configs))
    with ThreadPoolExecutor(max_workers=2) as pool:
        libs = list(pool.map(lambda job: _build(job[1], job[2], tmp, opt), jobs))
    return {name: (kernel, configs, lib) for (name, kernel, configs), lib in zip(jobs, libs)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return _build_all(tmp_path_factory.mktemp("conformance"), CONFIGS_PER_KERNEL, "-O0")


@pytest.fixture(scope="module")
def built_o3(tmp_path_factory):
    return _build_all(tmp_path_factory.mktemp("conformance_o3"), 4, "-O3")


def test_catalogue_is_large_enough():
    assert len({name.split(".")[0] for name, _ in KERNELS}) >= 15


@pytest.mark.parametrize("name", [name for name, _ in KERNELS])
def test_random_configs_match_reference(built, name):
    kernel, configs, lib = built[name]
    assert len(configs) >= min(CONFIGS_PER_KERNEL, 10), "space too small to sample"
    _check(name, kernel, configs, lib)


@pytest.mark.parametrize("name", [name for name, _ in KERNELS])
def test_configs_at_o3(built_o3, name):
    kernel, configs, lib = built_o3[name]
    _check(name, kernel, configs, lib)


def _check(name, kernel, configs, lib):
    inputs = random_inputs(kernel, seed=1)
    expected = run_kernel(kernel, inputs)
    for i, config in enumerate(configs):
        dtype = kernel.buffers[0].dtype
        out = np.full(kernel.buffers[0].size, np.nan if dtype.is_float else -12345, dtype.np)
        fn = getattr(lib, f"v{i}")
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p] * len(kernel.buffers)
        fn(out.ctypes.data, *[a.ctypes.data for a in inputs])
        err = output_error(out, expected)
        assert err <= tolerance(kernel), f"{name} config {config}: error {err:.2e}"


def _k_tiled(kernel, count: int, seed: int):
    """Sampled configs with the first reduce axis cut into tiles of 1, 2 and about half of it,
    so that tiles with a remainder, packed panels refilled per tile and partial results kept
    between tiles are all exercised (the sampled tiles of small kernels are rarely shorter)."""
    space = space_for(kernel, get_device("cpu").info().target)
    size = kernel.domain[kernel.n_out]
    out = []
    for i, config in enumerate(sample_configs(space, count, seed=seed)):
        tiled = config.replace(ktile=(1, 2, size // 2 + 1)[i % 3])
        if space.validate(tiled) is None and tiled not in out:
            out.append(tiled)
    return out


TILED = [(name, kernel) for name, kernel in KERNELS
         if kernel.n_reduce and kernel.domain[kernel.n_out] >= 3]


@pytest.mark.parametrize("name,kernel", TILED, ids=[name for name, _ in TILED])
def test_k_tiled_configs_match_reference(tmp_path, name, kernel):
    configs = _k_tiled(kernel, 12, seed=len(name))
    assert len(configs) >= 6 and any(c.get("pack") for c in configs), configs
    _check(name, kernel, configs, _build(kernel, configs, tmp_path))
