"""The CUDA device: every sampled config's CUDA C compiles with NVRTC for sm_90 (no GPU needed);
with a GPU, the configs also run and match the numpy interpreter (marked `gpu`)."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from tests.catalogue import catalogue, random_inputs
from tests.conformance import device_buffers, output_error, poison, sample_configs, tolerance
from tunesearch import Tensor
from tunesearch.graph.schedule import create_schedule
from tunesearch.runtime.cuda_driver import open_driver
from tunesearch.runtime.cuda_nvrtc import compile_cubin, compile_ptx, nvrtc_version
from tunesearch.runtime.device import CompileError, DeviceUnavailable, Source
from tunesearch.runtime.interpret import run_kernel
from tunesearch.codegen.gpu import render_gpu
from tunesearch.codegen.gpu_dialects import CUDADialect
from tunesearch.space.spaces import space_for
from tunesearch.space.target import Target

cuda = pytest.importorskip("tunesearch.runtime.cuda")
try:
    NVRTC = nvrtc_version()
except DeviceUnavailable as exc:
    pytest.skip(f"NVRTC is not available: {exc}", allow_module_level=True)

try:
    GPU = cuda.CUDADevice()
except DeviceUnavailable:
    GPU = None

CONFIGS_PER_KERNEL = 50
# an H100/H200-like target, so that the sampled configs are the ones an sm_90 run would see
SM90 = Target("gpu", max_local_size=1024, max_local_dims=(1024, 1024, 64),
              local_memory=48 * 1024, max_registers=255, warp=32, compute_units=132)
# PTX validity does not depend on optimization; NVRTC 12.8+ compiles much faster with this
FAST = ("--Ofast-compile=max",) if tuple(map(int, NVRTC.split("."))) >= (12, 8) else ()


def _dtype_cases():
    half = Tensor(np.linspace(-3, 3, 60, dtype=np.float16).reshape(6, 10), device="reference")
    mask = Tensor(np.arange(60).reshape(6, 10) % 3 == 0, device="reference")
    for name, tensor in (("half_sum", (half * 2 + 1).sum(1)),
                         ("bool_where", mask.where(half, -half)),
                         ("half_max", half.max(1))):
        yield name, create_schedule([tensor.node])[-1].kernel


KERNELS = catalogue() + list(_dtype_cases())


def _batch(kernel, configs) -> str:
    """One source with an entry v<i> per config, so each kernel costs one NVRTC call."""
    return "\n".join(render_gpu(kernel, c, CUDADialect(), f"v{i}")[0]
                     for i, c in enumerate(configs))


@pytest.mark.parametrize("name", [name for name, _ in KERNELS])
def test_every_sampled_config_compiles_to_ptx_for_sm90(name):
    kernel = dict(KERNELS)[name]
    configs = sample_configs(space_for(kernel, SM90), CONFIGS_PER_KERNEL, seed=len(name))
    assert len(configs) >= min(CONFIGS_PER_KERNEL, 10)
    ptx = compile_ptx(_batch(kernel, configs), "sm_90", FAST)
    assert ".target sm_90" in ptx
    entries = set(re.findall(r"\.entry (v\d+)\(", ptx))
    assert entries == {f"v{i}" for i in range(len(configs))}


def test_defaults_build_to_a_cubin_fully_optimized():
    """The device's own path (cubin, ptxas included, which checks shared memory and registers)
    for every catalogue kernel's default config, as one source."""
    parts = []
    for i, (name, kernel) in enumerate(KERNELS):
        parts.append(render_gpu(kernel, space_for(kernel, SM90).default(), CUDADialect(),
                                f"d{i}")[0])
    cubin = compile_cubin("\n".join(parts), "sm_90")
    assert cubin.startswith(b"\x7fELF")


def test_compile_errors_carry_the_log():
    with pytest.raises(CompileError, match="undefined"):
        compile_ptx('extern "C" __global__ void k(float* x) { x[0] = undefined_name; }')


def test_compile_only_device_without_a_gpu():
    device = cuda.CUDADevice(arch="sm_90")
    kernel = dict(KERNELS)["matmul_square"]
    source = device.render(kernel, space_for(kernel, SM90).default())
    assert 'extern "C" __global__' in source.text and source.local_size == (256,)
    assert device.compile(source).startswith(b"cubin\n")
    if GPU is None:
        with pytest.raises(DeviceUnavailable, match="no CUDA device"):
            device.alloc(4, kernel.buffers[0].dtype)
        with pytest.raises(DeviceUnavailable, match="no CUDA device"):
            device.info()


def test_cubins_are_cached_by_digest(tmp_path, monkeypatch):
    """A second compile of a source is read from the cache folder, not compiled again."""
    monkeypatch.setenv("TUNESEARCH_CACHE", str(tmp_path))
    source = Source('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }', "k", "key", 1)
    first = cuda.CUDADevice(arch="sm_90").compile(source)
    cached = list((tmp_path / "cuda").glob("*.cubin"))
    assert len(cached) == 1 and b"cubin\n" + cached[0].read_bytes() == first
    planted = compile_cubin('extern "C" __global__ void planted(float* x) { x[0] = 2; }')
    cached[0].write_bytes(planted)
    assert cuda.CUDADevice(arch="sm_90").compile(source) == b"cubin\n" + planted
    cuda.CUDADevice(arch="sm_80").compile(source)  # another architecture, another entry
    assert len(list((tmp_path / "cuda").glob("*.cubin"))) == 2


@pytest.mark.skipif(GPU is not None, reason="a CUDA device is present")
def test_device_without_a_gpu_is_unavailable():
    with pytest.raises(DeviceUnavailable, match="no CUDA device"):
        cuda.CUDADevice()


def test_unknown_driver_layer_is_refused(monkeypatch):
    monkeypatch.setenv("TUNESEARCH_CUDA_DRIVER", "nonsense")
    with pytest.raises(DeviceUnavailable, match="cuda-python, pycuda"):
        open_driver()


# ---- on a GPU

needs_gpu = pytest.mark.skipif(GPU is None, reason="no CUDA device")


def _run(device, kernel, program, inputs):
    buffers = device_buffers(device, kernel, inputs)
    device.copyin(buffers[0], poison(kernel))  # a config that writes nothing cannot pass
    program(buffers)
    return device.copyout(buffers[0]), buffers


@pytest.mark.gpu
@needs_gpu
def test_gpu_fingerprint_and_limits():
    info = GPU.info()
    fields = info.as_dict()
    for key in ("name", "compute_capability", "driver", "nvrtc", "sm_count", "memory"):
        assert fields[key] not in ("", None, 0), key
    assert info.target.family == "gpu" and info.target.max_local_size >= 256
    assert info.target.local_memory >= 48 * 1024


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("name", [name for name, _ in KERNELS])
def test_gpu_random_configs_match_reference(name):
    kernel = dict(KERNELS)[name]
    configs = sample_configs(space_for(kernel, GPU.info().target), 20, seed=len(name))
    text = _batch(kernel, configs)
    artifact = b"cubin\n" + compile_cubin(text, GPU.arch)
    inputs = random_inputs(kernel, seed=1)
    expected = run_kernel(kernel, inputs, out=poison(kernel))  # a piece leaves the rest
    allowed = tolerance(kernel) * (20 if "half" in name else 1)
    for i, config in enumerate(configs):
        _, global_size, local_size = render_gpu(kernel, config, GPU.dialect, f"v{i}")
        program = GPU.load(artifact, Source(text, f"v{i}", kernel.key, len(kernel.buffers),
                                            global_size, local_size))
        out, buffers = _run(GPU, kernel, program, inputs)
        assert output_error(out, expected) <= allowed, f"{name} {config}"
    seconds = program.timed(buffers)
    assert math.isfinite(seconds) and seconds > 0  # a time the device measured
