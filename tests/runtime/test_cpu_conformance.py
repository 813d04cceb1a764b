"""Every catalogue kernel, under many random valid CPU configs, matches the numpy interpreter."""
from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.catalogue import catalogue, random_inputs
from tests.conformance import (build_cpu_library, call_config, k_tiled_configs, level_target,
                               output_error, sample_configs, tolerance)
from tunesearch.runtime.host_cpu import supported_levels
from tunesearch.runtime.interpret import run_kernel
from tunesearch.space.spaces import space_for

CONFIGS_PER_KERNEL = 50
KERNELS = catalogue()


# every ISA level this machine runs: the code and the model of a smaller machine are checked here
LEVELS = supported_levels()


def _build_all(tmp, count, opt, level=None):
    target = level_target(level)
    jobs = []
    for name, kernel in KERNELS:
        configs = sample_configs(space_for(kernel, target), count, seed=len(name))
        jobs.append((name, kernel, configs))
    with ThreadPoolExecutor(max_workers=2) as pool:
        libs = list(pool.map(lambda job: build_cpu_library(job[1], job[2], tmp, opt, level),
                             jobs))
    return {name: (kernel, configs, lib) for (name, kernel, configs), lib in zip(jobs, libs)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return _build_all(tmp_path_factory.mktemp("conformance"), CONFIGS_PER_KERNEL, "-O0")


@pytest.fixture(scope="module", params=LEVELS)
def built_o3(tmp_path_factory, request):
    return _build_all(tmp_path_factory.mktemp("conformance_o3"), 4, "-O3", request.param)


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
    dtype = kernel.buffers[0].dtype
    fill = np.full(kernel.buffers[0].size, np.nan if dtype.is_float else -12345, dtype.np)
    # a piece of a concatenation leaves the rest of its buffer as it was
    expected = run_kernel(kernel, inputs, out=fill.copy())
    for i, config in enumerate(configs):
        out = fill.copy()
        call_config(lib, i, kernel, out, inputs)
        err = output_error(out, expected)
        assert err <= tolerance(kernel), f"{name} config {config}: error {err:.2e}"


TILED = [(name, kernel) for name, kernel in KERNELS
         if kernel.n_reduce and kernel.domain[kernel.n_out] >= 3]


@pytest.mark.parametrize("name,kernel", TILED, ids=[name for name, _ in TILED])
def test_k_tiled_configs_match_reference(tmp_path, name, kernel):
    configs = k_tiled_configs(kernel, 12, seed=len(name))
    assert len(configs) >= 6 and any(c.get("pack") for c in configs), configs
    _check(name, kernel, configs, build_cpu_library(kernel, configs, tmp_path))


@pytest.mark.parametrize("level", LEVELS)
def test_reads_and_writes_stay_inside_the_buffers(level):
    """Every buffer placed against an inaccessible page, after its end and then before its
    start: a config that reads or writes past either edge (a tail block computing whole
    register blocks from an operand that is not in a padded panel, say) crashes the child.
    Under every ISA level the machine runs, since the vectorizer widens reads per level."""
    env = {**os.environ, "TUNESEARCH_CPU_ISA": level}
    o3_only = [] if level == "native" else ["--o3-only"]  # -O0 code is alike on every level
    proc = subprocess.run([sys.executable, "-m", "tests.guard_pages", *o3_only],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    assert "configs checked" in proc.stdout
