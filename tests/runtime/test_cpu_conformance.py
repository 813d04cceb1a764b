"""Every catalogue kernel, under many random valid CPU configs, matches the numpy interpreter."""
from __future__ import annotations

import ctypes
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.catalogue import catalogue, random_inputs
from tests.conformance import sample_configs, tolerance
from tunesearch.runtime.cpu import FLAGS, compiler
from tunesearch.runtime.device import get_device
from tunesearch.runtime.interpret import run_kernel
from tunesearch.space.lower_cpu import HEADER, render_cpu
from tunesearch.space.space import space_for

CONFIGS_PER_KERNEL = 50
KERNELS = catalogue()


def _build(kernel, configs, tmp_path):
    """One shared object with a function per config, so each kernel compiles once."""
    parts = [HEADER]
    for i, config in enumerate(configs):
        parts.append(render_cpu(kernel, config, f"v{i}").replace(HEADER, ""))
    src = tmp_path / f"{kernel.name}.c"
    lib = tmp_path / f"{kernel.name}.so"
    src.write_text("\n".join(parts))
    # -O1 keeps 50 variants per kernel affordable; test_default_configs_at_o3 covers -O3
    flags = ["-O1" if f == "-O3" else f for f in FLAGS]
    proc = subprocess.run([compiler()[0], *flags, str(src), "-o", str(lib), "-lm"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return ctypes.CDLL(str(lib))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("conformance")
    target = get_device("cpu").info().target
    jobs = []
    for name, kernel in KERNELS:
        configs = sample_configs(space_for(kernel, target), CONFIGS_PER_KERNEL, seed=len(name))
        jobs.append((name, kernel, configs))
    with ThreadPoolExecutor(max_workers=2) as pool:
        libs = list(pool.map(lambda job: _build(job[1], job[2], tmp), jobs))
    return {name: (kernel, configs, lib) for (name, kernel, configs), lib in zip(jobs, libs)}


def test_catalogue_is_large_enough():
    assert len({name.split(".")[0] for name, _ in KERNELS}) >= 15


@pytest.mark.parametrize("name", [name for name, _ in KERNELS])
def test_random_configs_match_reference(built, name):
    kernel, configs, lib = built[name]
    assert len(configs) >= min(CONFIGS_PER_KERNEL, 10), "space too small to sample"
    inputs = random_inputs(kernel, seed=1)
    expected = run_kernel(kernel, inputs)
    scale = max(1.0, float(np.abs(expected).max()))
    for i, config in enumerate(configs):
        out = np.full(kernel.buffers[0].size, np.nan, kernel.buffers[0].dtype.np)
        fn = getattr(lib, f"v{i}")
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p] * len(kernel.buffers)
        fn(out.ctypes.data, *[a.ctypes.data for a in inputs])
        err = float(np.abs(out.astype(np.float64) - expected).max()) / scale
        assert err <= tolerance(kernel), f"{name} config {config}: error {err:.2e}"
