"""Scenarios run on the stand-in CUDA driver library, each in a process of its own (standin.py
starts them): each drives the real CUDA device and returns what it saw, as JSON, for a test to
check. The stand-in checks every call as the driver does; its kernels compute nothing."""
from __future__ import annotations

import ctypes
import gc
import os
import threading
import warnings
from collections import Counter

import numpy as np

from tunesearch.graph.dtypes import dtypes
from tunesearch.runtime import cuda
from tunesearch.runtime.cuda_nvrtc import compile_cubin
from tunesearch.runtime.device import CompileError, DeviceLost, DeviceUnavailable, Source

SIZE, BLOCK = 256, 128
COPY = ('extern "C" __global__ void {name}(float* out, const float* a) '
        '{{ int i = blockIdx.x * blockDim.x + threadIdx.x; out[i] = a[i]; }}\n')


def counts() -> dict[str, int]:
    """The stand-in's own counters (the library this process has already loaded)."""
    lib = ctypes.CDLL("libcuda.so.1")
    return {"allocations": lib.standin_live_allocations(), "modules": lib.standin_live_modules(),
            "launches": lib.standin_launches(), "unloads": lib.standin_unloads()}


def calls(name: str) -> Counter:
    """How often each process made the call `name`, from the stand-in's log."""
    with open(os.environ["STANDIN_CUDA_LOG"]) as log:
        return Counter(int(line.split()[0]) for line in log if line.split()[1] == name)


def build(device, *names: str, arch: str = "sm_90") -> dict[str, object]:
    """One cubin with a copy kernel per name, and a loaded program for each."""
    text = "".join(COPY.format(name=n) for n in names)
    artifact = b"cubin\n" + compile_cubin(text, arch)
    return {n: device.load(artifact, Source(text, n, "key", 2, (SIZE,), (BLOCK,))) for n in names}


def buffers(device) -> list:
    return [device.alloc(SIZE, dtypes.float32),
            device.from_numpy(np.arange(SIZE, dtype=np.float32), dtypes.float32)]


def start() -> dict:
    """Open the device: its fingerprint, or why it is unavailable, and the contexts created."""
    try:
        info = cuda.CUDADevice().info().as_dict()
        error = None
    except DeviceUnavailable as exc:
        info, error = None, str(exc)
    return {"info": info, "error": error, "contexts": sum(calls("cuDevicePrimaryCtxRetain")
                                                          .values())}


def copies() -> dict:
    """A copy kernel's launch and the copies around it: what the device reads back."""
    device = cuda.CUDADevice()
    program = build(device, "copy")["copy"]
    bufs = buffers(device)
    program(bufs)
    return {"out": device.copyout(bufs[1]).tolist(), "launches": counts()["launches"]}


def timing(count: int) -> dict:
    """Program.timed twice, then count launches timed back to back by the driver layer."""
    device = cuda.CUDADevice()
    program = build(device, "copy")["copy"]
    bufs = buffers(device)
    before = counts()["launches"]
    timed = [program.timed(bufs), program.timed(bufs)]
    after_timed = counts()["launches"]
    function = device.driver.function(program.module.handle, "copy")
    launch = device.driver.launcher(function, SIZE // BLOCK, BLOCK, (bufs[0].address,
                                                                     bufs[1].address))
    per_launch = device.driver.timed(launch, count)
    return {"timed": timed, "timed_launches": after_timed - before, "per_launch": per_launch,
            "launches": counts()["launches"] - after_timed}


def fault(kind: str) -> dict:
    """A kernel that faults: the error at the next synchronizing call, and after it."""
    device = cuda.CUDADevice()
    programs = build(device, "copy", kind)
    bufs = buffers(device)
    programs[kind](bufs)
    seen = []
    steps = (device.synchronize, lambda: programs["copy"](bufs), lambda: device.copyout(bufs[0]))
    for step in steps:
        try:
            step()
            seen.append(None)
        except DeviceLost as exc:
            seen.append(f"DeviceLost: {exc}")
        except Exception as exc:  # noqa: BLE001
            seen.append(f"{type(exc).__name__}: {exc}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bufs.clear()
        gc.collect()
    return {"seen": seen, "warnings": [str(w.message) for w in caught]}


def runner_restart() -> dict:
    """Candidates in the runner process: good, faulting, good again."""
    from tunesearch.search._runner_child import guard_values
    from tunesearch.search.messages import DeviceSpec, RunRequest, RunSetup, Timing
    from tunesearch.search.runner import ProcessRunner
    names = ("good", "standin_illegal_address")
    text = "".join(COPY.format(name=n) for n in names)
    artifact = b"cubin\n" + compile_cubin(text, "sm_90")
    sources = {n: Source(text, n, "key", 2, (SIZE,), (BLOCK,)) for n in names}
    runner = ProcessRunner(DeviceSpec.of("cuda"))
    runner.load(RunSetup("key", ((SIZE, "float32"), (SIZE, "float32")),
                         (np.arange(SIZE, dtype=np.float32),), np.full(SIZE, -7.0, np.float32),
                         guard_values("float32", 64)))
    timing = Timing(warmup=0, min_time_s=0.0, min_repeats=1, max_repeats=1)
    replies = []
    for name in ("good", "standin_illegal_address", "good"):
        result = runner.run(RunRequest(artifact, sources[name], timing, timeout_s=60))
        replies.append({"error": result.error, "message": result.message,
                        "restart": result.restart})
    runner.close()
    return {"replies": replies, "restarts": runner.restarts}


def compile_pool() -> dict:
    """A kernel's configs through the compile pool: results, and which processes made contexts."""
    from tests.catalogue import catalogue
    from tunesearch.runtime.device import get_device
    from tunesearch.search.builder import ProcessPoolBuilder
    from tunesearch.search.messages import DeviceSpec
    from tunesearch.space.spaces import space_for
    kernel = dict(catalogue())["matmul_square"]
    space = space_for(kernel, get_device("cuda").info().target)
    builder = ProcessPoolBuilder(DeviceSpec.of("cuda"), workers=2)
    try:
        results = builder.build(kernel, [space.default(), space.naive()])
    finally:
        builder.close()
    contexts = calls("cuDevicePrimaryCtxRetain")
    return {"kinds": [r.error or "ok" for r in results],
            "errors": [r.message for r in results if not r.ok],
            "me": os.getpid(), "context_pids": sorted(contexts)}


def load_errors() -> dict:
    """What loading reports for a cubin of another architecture and for a missing entry."""
    device = cuda.CUDADevice()
    out = {"driver": device.driver.name}
    for case, load in (("other_arch", lambda: build(device, "copy", arch="sm_80")),
                       ("missing_entry", lambda: device.load(
                           b"cubin\n" + compile_cubin(COPY.format(name="copy"), "sm_90"),
                           Source("", "absent", "key", 2, (SIZE,), (BLOCK,))))):
        try:
            load()
            out[case] = None
        except CompileError as exc:
            out[case] = f"CompileError: {exc}"
        except Exception as exc:  # noqa: BLE001
            out[case] = f"{type(exc).__name__}: {exc}"
    return out


def threads() -> dict:
    """A program loaded and run, and buffers freed, on a thread where no context was current;
    its artifact's module was loaded on the main thread."""
    device = cuda.CUDADevice()
    text = COPY.format(name="first") + COPY.format(name="second")
    artifact = b"cubin\n" + compile_cubin(text, "sm_90")
    first = device.load(artifact, Source(text, "first", "key", 2, (SIZE,), (BLOCK,)))
    bufs = buffers(device)
    allocated = counts()["allocations"]
    out: dict = {}

    def elsewhere():
        try:
            second = device.load(artifact, Source(text, "second", "key", 2, (SIZE,), (BLOCK,)))
            second(bufs)
            first(bufs)
            device.synchronize()
            out["thread_run"] = "ok"
        except Exception as exc:  # noqa: BLE001
            out["thread_run"] = f"{type(exc).__name__}: {exc}"
        bufs.clear()
        gc.collect()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        worker = threading.Thread(target=elsewhere)
        worker.start()
        worker.join()
        gc.collect()
    out.update(allocated=allocated, left=counts()["allocations"],
               warnings=[str(w.message) for w in caught])
    return out


def modules(kept: int, loaded: int) -> dict:
    """`loaded` distinct modules on a device that keeps `kept`, the first program kept alive."""
    device = cuda.CUDADevice()
    device.modules_kept = kept
    bufs = buffers(device)
    first = build(device, "k0")["k0"]
    for i in range(1, loaded):
        build(device, f"k{i}")
    gc.collect()
    during = counts()
    first(bufs)
    device.synchronize()
    del first
    gc.collect()
    return {"during": during, "after": counts()}
