"""The CUDA device against a stand-in driver library (standin_cuda.c): launches, copies, timing,
errors, frees, module unloading and the processes of a search, through the real cuda-python
bindings (and a pycuda stand-in over the same library), without a GPU. The stand-in checks each
call as the driver does but computes nothing, so results are checked on a GPU (test_cuda.py)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.runtime import standin
from tunesearch.runtime.cuda_driver import check_versions
from tunesearch.runtime.cuda_nvrtc import nvrtc_version
from tunesearch.runtime.device import DeviceUnavailable, Source

cuda = pytest.importorskip("tunesearch.runtime.cuda")
try:
    NVRTC = nvrtc_version()
except DeviceUnavailable as exc:
    pytest.skip(f"NVRTC is not available: {exc}", allow_module_level=True)

NVRTC_MAJOR = int(NVRTC.split(".")[0])
LAYERS = [pytest.param(False, id="cuda-python"), pytest.param(True, id="pycuda")]


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    folder = standin.build(tmp_path_factory.mktemp("standin-cuda"))
    if folder is None:
        pytest.skip("no C compiler to build the stand-in driver library")
    return folder


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "calls.log"
    path.write_text("")
    return path


# ---- 1. the driver's version against NVRTC's

def test_versions_that_fit_and_that_do_not():
    check_versions(13000, "13.0")
    check_versions(13020, "12.8")  # an older NVRTC's cubins load on a newer driver
    with pytest.raises(DeviceUnavailable, match=r"CUDA 12\.9 but NVRTC is 13\.5.*R580.*cuda12"):
        check_versions(12090, "13.5")
    with pytest.raises(DeviceUnavailable, match=r"CUDA 11\.8 .*NVRTC of CUDA 11"):
        check_versions(11080, "12.4")


@pytest.mark.parametrize("pycuda", LAYERS)
def test_a_driver_older_than_nvrtc_is_refused_before_any_context(library, log, pycuda):
    old = f"{NVRTC_MAJOR - 1}080"
    seen = standin.run(library, "start", version=old, log=log, pycuda=pycuda)
    assert seen["info"] is None and seen["contexts"] == 0
    assert f"CUDA {NVRTC_MAJOR - 1}.8 but NVRTC is {NVRTC}" in seen["error"]
    assert "upgrade the driver" in seen["error"]
    fits = standin.run(library, "start", version=f"{NVRTC_MAJOR}000", log=log, pycuda=pycuda)
    assert fits["error"] is None and fits["info"]["name"] == "Standin GPU"
    assert fits["info"]["arch"] == "sm_90" and fits["info"]["driver"] == NVRTC_MAJOR * 1000


@pytest.mark.parametrize("pycuda", LAYERS)
def test_copies_and_launch_reach_the_driver_intact(library, pycuda):
    seen = standin.run(library, "copies", pycuda=pycuda)
    assert seen["out"] == np.arange(256, dtype=np.float32).tolist() and seen["launches"] == 1


# ---- 2. event timing without host overhead

@pytest.mark.parametrize("pycuda", LAYERS)
def test_timing_counts_kernel_time_only(library, pycuda):
    """The stand-in's simulated GPU runs each launch for 50 ms; host work between the start
    event and the launch would add to the time, launches kept back to back do not."""
    seen = standin.run(library, "timing", 5, kernel_ms=50, pycuda=pycuda)
    assert seen["timed"] == [pytest.approx(0.05, rel=1e-6)] * 2
    assert seen["timed_launches"] == 4  # each: one launch to keep the stream busy, one timed
    assert seen["per_launch"] == pytest.approx(0.05, rel=1e-6)
    assert seen["launches"] == 6


def test_launches_per_measurement_cover_the_timed_span():
    assert cuda.launches_per_measurement(None) == 1
    assert cuda.launches_per_measurement(1e-3) == 1
    assert cuda.launches_per_measurement(cuda.TIMED_SPAN_S / 4) == 4
    assert cuda.launches_per_measurement(1e-9) == cuda.MAX_TIMED_LAUNCHES


# ---- 3. a faulting kernel: the context is lost, the runner process restarts

@pytest.mark.parametrize("pycuda", LAYERS)
@pytest.mark.parametrize("kind", ["standin_illegal_address", "standin_launch_failed"])
def test_a_faulting_kernel_loses_the_device(library, kind, pycuda):
    seen = standin.run(library, "fault", kind, pycuda=pycuda)
    assert all(s is not None and s.startswith("DeviceLost") for s in seen["seen"]), seen


def test_the_runner_restarts_after_a_fault(library):
    seen = standin.run(library, "runner_restart")
    good, faulted, again = seen["replies"]
    assert good["error"] is None and again["error"] is None, seen
    assert faulted["error"] == "crash" and "ILLEGAL_ADDRESS" in faulted["message"]
    assert faulted["restart"] and not good["restart"]  # the process lost its device and ended
    assert seen["restarts"] == 1


# ---- 4. compile processes never open the GPU

def test_compile_workers_make_no_context(library, log):
    seen = standin.run(library, "compile_pool", log=log)
    assert seen["kinds"] == ["ok", "ok"], seen["errors"]
    assert seen["context_pids"] == [seen["me"]]  # the tuner's process only


def test_a_compiling_device_takes_its_architecture_and_opens_nothing():
    settings = {"arch": "sm_80"}
    device = cuda.CUDADevice.for_compiling(**settings)
    assert device.arch == "sm_80" and device.compile_settings() == settings
    kernel_text = 'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }'
    assert device.compile(Source(kernel_text, "k", "key", 1)).startswith(b"cubin\n\x7fELF")
    assert device._driver is None


# ---- 5. load failures are compile errors, under either driver layer

@pytest.mark.parametrize("pycuda", LAYERS)
def test_load_failures_are_compile_errors(library, pycuda):
    seen = standin.run(library, "load_errors", pycuda=pycuda)
    assert seen["driver"] == ("pycuda" if pycuda else "cuda-python")
    assert seen["other_arch"].startswith("CompileError") and "copy" in seen["other_arch"]
    assert seen["missing_entry"].startswith("CompileError") and "absent" in seen["missing_entry"]


# ---- 6. frees and loads bind the context, whichever thread they run on

@pytest.mark.parametrize("pycuda", LAYERS)
def test_frees_and_loads_on_another_thread(library, pycuda):
    seen = standin.run(library, "threads", pycuda=pycuda)
    assert seen["thread_run"] == "ok"
    assert seen["allocated"] == 2 and seen["left"] == 0 and seen["warnings"] == []


def test_a_failed_free_is_reported(library):
    seen = standin.run(library, "fault", "standin_illegal_address")
    assert seen["warnings"] and all("free failed" in w and "ILLEGAL_ADDRESS" in w
                                    for w in seen["warnings"])


# ---- 7. modules are unloaded

@pytest.mark.parametrize("pycuda", LAYERS)
def test_modules_past_the_kept_ones_are_unloaded(library, pycuda):
    """Five modules on a device that keeps two: the first stays while its program lives."""
    seen = standin.run(library, "modules", 2, 5, pycuda=pycuda)
    assert seen["during"]["modules"] == 3 and seen["during"]["unloads"] == 2
    assert seen["after"]["launches"] == 1  # the first program still ran: its module was loaded
    assert seen["after"]["modules"] == 2 and seen["after"]["unloads"] == 3


# ---- 8. the benchmark script

def _bench(library, *args, **settings):
    return subprocess.run([sys.executable, str(standin.REPO / "scripts" / "bench_cuda.py"), *args],
                          env=standin.environment(library, **settings), capture_output=True,
                          text=True, timeout=600, cwd=standin.REPO)


def test_bench_stops_with_one_line_on_a_driver_too_old(library):
    done = _bench(library, version=f"{NVRTC_MAJOR - 1}080")
    assert done.returncode == 2
    assert done.stdout.splitlines()[0].startswith(f"CUDA driver {NVRTC_MAJOR - 1}.8")
    assert f"NVRTC {NVRTC}" in done.stdout.splitlines()[0]
    assert len(done.stderr.strip().splitlines()) == 1 and "upgrade the driver" in done.stderr


def test_bench_without_torch_or_cupy_checks_against_numpy(library):
    for peer in ("torch", "cupy"):
        try:
            __import__(peer)
            pytest.skip(f"{peer} is installed here")
        except ImportError:
            pass
    done = _bench(library, "--sizes", "64", "--sweep", "0", "--grid", "0", "--verify", "-1",
                  "--repeat", "1", "--others", "")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"CUDA driver {NVRTC_MAJOR}.0") and f"NVRTC {NVRTC}" in lines[0]
    assert any("cuBLAS: not measured" in line and "numpy" in line for line in lines), done.stdout
    # the stand-in computes nothing, so numpy's product tells every config it is wrong
    assert sum(line.rstrip().endswith("|     wrong |") for line in lines) == 2, done.stdout
    assert any(line.startswith("launch floor: ") for line in lines), done.stdout
