"""The OpenCL device (PoCL on machines without a GPU): every catalogue kernel under many random
valid configs matches the numpy interpreter, and the device's own interface works."""
from __future__ import annotations

import math
import multiprocessing
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

pytest.importorskip("pyopencl")

from tests.catalogue import catalogue, random_inputs  # noqa: E402
from tests.conformance import (device_buffers, output_error, poison, sample_configs,  # noqa: E402
                               tolerance)
from tunesearch import Tensor  # noqa: E402
from tunesearch.graph.dtypes import dtypes  # noqa: E402
from tunesearch.graph.schedule import create_schedule  # noqa: E402
from tunesearch.runtime.device import CompileError, DeviceUnavailable, Source, get_device  # noqa
from tunesearch.runtime.interpret import run_kernel  # noqa: E402
from tunesearch.codegen.gpu import render_gpu  # noqa: E402
from tunesearch.space.config import Config  # noqa: E402
from tunesearch.space.spaces import space_for  # noqa: E402

try:
    DEVICE = get_device("opencl")
    DEVICE.info()
except DeviceUnavailable as exc:
    pytest.skip(f"no OpenCL device: {exc}", allow_module_level=True)

CONFIGS_PER_KERNEL = 50
EXTRA_CONFIGS = 16  # for the dtype cases beyond the catalogue
# PoCL compiles each kernel when it is first launched; without optimization that is several times
# faster, and the generated code is the same. The device tests below build fully optimized.
FAST_BUILD = ("-cl-opt-disable",)


def _dtype_cases():
    """float16 storage and bool buffers, which the catalogue does not cover."""
    half = Tensor(np.linspace(-3, 3, 60, dtype=np.float16).reshape(6, 10), device="reference")
    mask = Tensor(np.arange(60).reshape(6, 10) % 3 == 0, device="reference")
    for name, tensor in (("half_sum", (half * 2 + 1).sum(1)),
                         ("bool_where", mask.where(half, -half)),
                         ("half_compare", half > 0.5)):
        yield name, create_schedule([tensor.node])[-1].kernel


EXTRAS = list(_dtype_cases())
KERNELS = catalogue() + EXTRAS


def _allowed(kernel) -> float:
    return tolerance(kernel) * (20 if kernel.buffers[0].dtype is dtypes.float16 or any(
        b.dtype is dtypes.float16 for b in kernel.buffers) else 1)


def _check_kernel(name: str, configs: list[str]) -> list[str]:
    """In a worker process: one program with an entry per config; run each, report mismatches."""
    device = get_device("opencl")
    device.build_options = FAST_BUILD
    kernel = dict(KERNELS)[name]
    parts, launches = [], []
    for i, text in enumerate(configs):
        source, global_size, local_size = render_gpu(kernel, Config.from_json(text),
                                                     device.dialect, f"v{i}")
        parts.append(source)
        launches.append((global_size, local_size))
    whole = "\n".join(parts)
    artifact = device.compile(Source(whole, "v0", kernel.key, len(kernel.buffers)))
    inputs = random_inputs(kernel, seed=1)
    expected = run_kernel(kernel, inputs, out=poison(kernel))  # a piece leaves the rest
    buffers = device_buffers(device, kernel, inputs)
    failures = []
    for i, (text, (global_size, local_size)) in enumerate(zip(configs, launches)):
        program = device.load(artifact, Source(whole, f"v{i}", kernel.key, len(kernel.buffers),
                                               global_size, local_size))
        device.copyin(buffers[0], poison(kernel))
        program(buffers)
        err = output_error(device.copyout(buffers[0]), expected)
        if not err <= _allowed(kernel):
            failures.append(f"{Config.from_json(text)}: error {err:.2e}")
    return failures


@pytest.fixture(scope="module")
def conformance():
    """Every kernel's configs, checked in worker processes: PoCL compiles one kernel at a time
    per process, and compiling dominates (about 0.1 s of CPU per config)."""
    target = DEVICE.info().target
    extras = {name for name, _ in EXTRAS}
    jobs = {name: [c.to_json() for c in sample_configs(
                space_for(kernel, target), EXTRA_CONFIGS if name in extras else CONFIGS_PER_KERNEL,
                seed=len(name))]
            for name, kernel in KERNELS}
    context = multiprocessing.get_context("spawn")
    workers = max(1, min(4, os.cpu_count() or 1))
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {name: pool.submit(_check_kernel, name, configs)
                   for name, configs in jobs.items()}
    return {name: (len(jobs[name]), future) for name, future in futures.items()}


@pytest.mark.parametrize("name", [name for name, _ in KERNELS])
def test_random_configs_match_reference(conformance, name):
    count, future = conformance[name]
    failures = future.result()
    assert count >= 10, "space too small to sample"
    assert not failures, f"{len(failures)} of {count} configs of {name} differ:\n" + \
        "\n".join(failures[:5])


# ---- the device interface

def test_fingerprint_and_limits_come_from_the_device():
    info = DEVICE.info()
    fields = info.as_dict()
    for key in ("backend", "name", "vendor", "driver", "version", "opencl_c", "compute_units",
                "max_work_group", "local_memory", "platform"):
        assert key in fields and fields[key] != "", key
    d = DEVICE.device
    assert info.backend == "opencl" and info.key.startswith("opencl-")
    assert info.key == DEVICE.info().key
    target = info.target
    assert target.family == "gpu"
    assert target.max_local_size == d.max_work_group_size
    assert target.local_memory == d.local_mem_size
    assert target.max_local_dims == tuple(d.max_work_item_sizes)
    assert target.compute_units == d.max_compute_units


@pytest.mark.parametrize("name", ["matmul_prime", "sum_all", "fma_3d_odd"])
def test_default_config_fully_optimized_matches_reference(name):
    kernel = dict(KERNELS)[name]
    config = space_for(kernel, DEVICE.info().target).default()
    program = DEVICE.build(kernel, config)
    inputs = random_inputs(kernel, seed=2)
    buffers = device_buffers(DEVICE, kernel, inputs)
    program(buffers)
    assert output_error(DEVICE.copyout(buffers[0]), run_kernel(kernel, inputs)) <= tolerance(kernel)
    seconds = program.timed(buffers)
    assert math.isfinite(seconds) and seconds > 0  # a time the device measured


def _compile_elsewhere(name: str, config: str) -> bytes:
    device = get_device("opencl")
    kernel = dict(KERNELS)[name]
    return device.compile(device.render(kernel, Config.from_json(config)))


def test_artifact_compiled_in_another_process_loads_here():
    kernel = dict(KERNELS)["sum_last_axis"]
    config = space_for(kernel, DEVICE.info().target).default()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        artifact = pool.submit(_compile_elsewhere, "sum_last_axis", config.to_json()).result()
    assert isinstance(artifact, bytes) and artifact
    program = DEVICE.load(artifact, DEVICE.render(kernel, config))
    inputs = random_inputs(kernel, seed=3)
    buffers = [DEVICE.alloc(kernel.buffers[0].size, kernel.buffers[0].dtype),
               DEVICE.from_numpy(inputs[0], kernel.buffers[1].dtype)]
    program(buffers)
    assert output_error(DEVICE.copyout(buffers[0]), run_kernel(kernel, inputs)) <= tolerance(kernel)


def test_build_errors_raise_compile_error_with_the_log():
    source = Source("__kernel void broken(__global float* x) { x[0] = y; }", "broken", "k", 1,
                    (1,), (1,))
    with pytest.raises(CompileError, match="broken"):
        DEVICE.compile(source)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.bool, dtypes.float16])
def test_copy_round_trip(dtype):
    data = (np.arange(37) % 5).astype(dtype.np)
    buffer = DEVICE.from_numpy(data, dtype)
    assert np.array_equal(DEVICE.copyout(buffer), data)


def test_missing_pyopencl_names_the_extra(monkeypatch):
    from tunesearch.runtime import opencl
    monkeypatch.setitem(sys.modules, "pyopencl", None)
    with pytest.raises(DeviceUnavailable, match=r"tunesearch\[opencl\]"):
        opencl._import_pyopencl()


def test_a_stale_icd_setting_does_not_hide_pocl():
    """The ICD loader finds no platform when OCL_ICD_VENDORS names a missing folder; the device
    drops such a setting, so `--device opencl` still works."""
    env = dict(os.environ, OCL_ICD_VENDORS="/nonexistent/vendors")
    code = ("from tunesearch.runtime.device import get_device; "
            "print(get_device('opencl').info().key)")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                              os.path.abspath(__file__)))))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == DEVICE.info().key
