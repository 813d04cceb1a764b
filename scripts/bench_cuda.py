"""CUDA check and benchmark for a machine with an NVIDIA GPU, in one run.

    PYTHONPATH=. python scripts/bench_cuda.py                  # verify, then matmul 1024 and 4096
    PYTHONPATH=. python scripts/bench_cuda.py --sizes 1024 --sweep 24 --verify 8

0. Prints the CUDA driver's and NVRTC's versions, and stops with one line (exit 2) when the
   device cannot start, e.g. a driver older than NVRTC's CUDA version.
1. Verifies catalogue kernels on the GPU: the default, the naive and --verify random valid configs
   of each, against the numpy interpreter.
2. Times fp32 matmul at each size: the naive config, the heuristic default and the best of a
   sweep (a hand-picked grid of register blocks, work-groups and tiles plus random valid configs),
   each checked against cuBLAS's result before its time counts, and cuBLAS itself (through PyTorch
   with TF32 off, else CuPy) measured in the same run, the same way. Without either, results are
   checked against numpy and the cuBLAS column is left out. Times are CUDA-event times per launch
   of back-to-back launches after warm-up, median of --repeat. Prints a table with ratios to cuBLAS.
3. Times one launch of a tiny kernel back to back (the floor under small kernels' times),
   next to PyTorch's or CuPy's.
4. Times a softmax and a row sum (the default config of each kernel of their schedules) against
   PyTorch or CuPy, checked against numpy.
"""
from __future__ import annotations

import argparse
import functools
import multiprocessing
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tunesearch import Tensor  # noqa: E402
from tunesearch.graph.schedule import create_schedule  # noqa: E402
from tunesearch.runtime.cuda import CUDADevice, launches_per_measurement  # noqa: E402
from tunesearch.runtime.cuda_driver import driver_version, version_text  # noqa: E402
from tunesearch.runtime.cuda_nvrtc import compile_cubin, nvrtc_version  # noqa: E402
from tunesearch.runtime.device import (DeviceLost, DeviceUnavailable, Source,  # noqa: E402
                                       get_device)
from tunesearch.runtime.interpret import run_kernel  # noqa: E402
from tunesearch.codegen.gpu import render_gpu  # noqa: E402
from tunesearch.space.config import Config  # noqa: E402
from tunesearch.space.spaces import space_for  # noqa: E402


def sample(space, count: int, seed: int) -> list[Config]:
    """Distinct random valid configs of a space."""
    rng, out = random.Random(seed), []
    params = space.parameters()
    for _ in range(count * 200):
        if len(out) >= count:
            break
        values = {}
        for p in params:
            if p.when is None or values.get(p.when[0]) in p.when[1]:
                values[p.name] = rng.choice(p.choices)
        config = space.config_from(values)
        if config not in out and space.validate(config) is None:
            out.append(config)
    return out


def batch(kernel, configs, device) -> tuple[str, list[Source]]:
    """One source with an entry per config, and the Source of each entry."""
    parts, sources = [], []
    for i, config in enumerate(configs):
        text, global_size, local_size = render_gpu(kernel, config, device.dialect, f"v{i}")
        parts.append(text)
        sources.append((f"v{i}", global_size, local_size))
    whole = "\n".join(parts)
    return whole, [Source(whole, e, kernel.key, len(kernel.buffers), g, l) for e, g, l in sources]


def compile_all(texts: list[str], arch: str) -> list[bytes]:
    """NVRTC in parallel processes: one cubin per text."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(16, len(texts)) or 1, mp_context=context) as pool:
        return [b"cubin\n" + c for c in pool.map(compile_cubin, texts, [arch] * len(texts))]


def verify(device, count: int) -> bool:
    """Catalogue kernels: default, naive and random configs against the interpreter."""
    from tests.catalogue import catalogue, random_inputs
    from tests.conformance import output_error, tolerance
    kernels = catalogue()
    plans = []
    for name, kernel in kernels:
        space = space_for(kernel, device.info().target)
        configs = [space.default(), space.naive()]
        configs += [c for c in sample(space, count, len(name)) if c not in configs]
        plans.append((name, kernel, configs, *batch(kernel, configs, device)))
    start = time.perf_counter()
    artifacts = compile_all([p[3] for p in plans], device.arch)
    print(f"compiled {sum(len(p[2]) for p in plans)} configs of {len(plans)} kernels "
          f"in {time.perf_counter() - start:.1f}s")
    ok = True
    for (name, kernel, configs, _, sources), artifact in zip(plans, artifacts):
        inputs = random_inputs(kernel, seed=1)
        poison = np.full(kernel.buffers[0].size, np.nan if kernel.buffers[0].dtype.is_float
                         else 77, kernel.buffers[0].dtype.np)
        try:  # a piece of a concatenation leaves the rest of its buffer as it was
            expected = run_kernel(kernel, inputs, out=poison.copy())
        except Exception as exc:  # a reference failure is reported, not hidden
            print(f"  {name:24s} reference failed: {exc}")
            ok = False
            continue
        buffers = [device.alloc(kernel.buffers[0].size, kernel.buffers[0].dtype)]
        buffers += [device.from_numpy(a, s.dtype) for a, s in zip(inputs, kernel.buffers[1:])]
        bad = []
        for config, source in zip(configs, sources):
            device.copyin(buffers[0], poison)  # a config that writes nothing must not pass
            device.load(artifact, source)(buffers)
            err = output_error(device.copyout(buffers[0]), expected)
            if not err <= tolerance(kernel):
                bad.append(f"{config} ({err:.1e})")
        ok &= not bad
        print(f"  {name:24s} {len(configs) - len(bad)}/{len(configs)} match"
              + (f"; first bad: {bad[0]}" if bad else ""))
    return ok


def matmul_kernel(n: int):
    a = Tensor(np.zeros((n, n), np.float32), device="reference")
    b = Tensor(np.zeros((n, n), np.float32), device="reference")
    return create_schedule([(a @ b).node])[-1].kernel


def grid_configs(space) -> list[Config]:
    """Hand-picked candidates in the region where fast SGEMM kernels live."""
    base = space.default()
    out = []
    for local in ((16, 16), (8, 32), (16, 8), (8, 16), (32, 8)):
        for upcast in ((4, 4), (8, 4), (4, 8), (8, 8), (2, 8)):
            for ktile in (8, 16, 32):
                config = base.replace(local=local, upcast=upcast, ktile=ktile, unroll=4,
                                      stage=(1, 2), group=1)
                if space.validate(config) is None:
                    out.append(config)
    return out


class Peer:
    """cuBLAS through PyTorch (TF32 off) or CuPy: the result to check against and its time.
    Without either, the result is numpy's and there is no time (`seconds` is None)."""

    def __init__(self, a: np.ndarray, b: np.ndarray, repeat: int):
        self.name, self.seconds = "numpy (no cuBLAS)", None
        runner = gpu_runner(lambda lib, x, y: lib.matmul(x, y), a, b)
        if runner is None:
            self.result = a @ b
            return
        self.name, self.result, self.seconds = runner("cuBLAS", repeat)


def gpu_runner(work, *arrays: np.ndarray):
    """work(lib, *arrays) run on the GPU through PyTorch (TF32 off), else CuPy; None with
    neither. The arrays are copied to the GPU once, so that only the work is timed. The runner
    returns (name, result as numpy, median seconds of repeat CUDA-event timings)."""
    try:
        import torch

        class Torch:
            asarray = staticmethod(lambda x: torch.from_numpy(x).cuda())
            matmul = staticmethod(lambda x, y: x @ y)
            softmax = staticmethod(lambda x: torch.softmax(x, -1))
            rowsum = staticmethod(lambda x: x.sum(-1))
        torch.backends.cuda.matmul.allow_tf32 = False
        lib, version, sync = Torch, f"torch {torch.__version__}", torch.cuda.synchronize
        event = functools.partial(torch.cuda.Event, enable_timing=True)
        elapsed = (lambda start, end: start.elapsed_time(end))
        to_numpy = (lambda x: x.cpu().numpy())
    except ImportError:
        try:
            import cupy
        except ImportError:
            return None

        class CuPy:
            asarray, matmul = staticmethod(cupy.asarray), staticmethod(cupy.matmul)
            softmax = staticmethod(lambda x: (lambda e: e / e.sum(-1, keepdims=True))(
                cupy.exp(x - x.max(-1, keepdims=True))))
            rowsum = staticmethod(lambda x: x.sum(-1))
        lib, version, sync = CuPy, f"cupy {cupy.__version__}", cupy.cuda.Device().synchronize
        event, elapsed, to_numpy = cupy.cuda.Event, cupy.cuda.get_elapsed_time, cupy.asnumpy

    on_gpu = [lib.asarray(a) for a in arrays]

    def run(label: str, repeat: int):
        result = to_numpy(work(lib, *on_gpu))
        for _ in range(3):
            work(lib, *on_gpu)
        sync()
        count = 1

        def timed():  # as the CUDA device times its kernels: back to back, the stream kept busy
            start, end = event(), event()
            work(lib, *on_gpu)
            start.record()
            for _ in range(count):
                work(lib, *on_gpu)
            end.record()
            end.synchronize()
            return elapsed(start, end) * 1e-3 / count
        count = launches_per_measurement(timed())
        return f"{label} via {version}", result, statistics.median(timed() for _ in range(repeat))
    return run


def bench_matmul(device, n: int, sweep: int, repeat: int, grid: int = -1) -> list[tuple]:
    from tests.conformance import output_error
    kernel = matmul_kernel(n)
    space = space_for(kernel, device.info().target)
    rng = np.random.default_rng(n)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    peer = Peer(a, b, repeat)
    if peer.seconds is None:
        print(f"matmul {n}: cuBLAS: not measured (neither PyTorch nor CuPy is installed); "
              "results are checked against numpy")
    named = [("naive", space.naive()), ("default", space.default())]
    hand_picked = grid_configs(space)[:grid] if grid >= 0 else grid_configs(space)
    candidates = [c for c in hand_picked + sample(space, sweep, n)
                  if c not in (space.naive(), space.default())]
    configs = [c for _, c in named] + candidates
    sources = [Source(*_rendered(kernel, c, device)) for c in configs]
    start = time.perf_counter()
    artifacts = compile_all([s.text for s in sources], device.arch)
    print(f"matmul {n}: compiled {len(configs)} configs in {time.perf_counter() - start:.1f}s")
    dtype = kernel.buffers[0].dtype
    buffers = [device.alloc(n * n, dtype), device.from_numpy(a, dtype), device.from_numpy(b, dtype)]
    results = []
    for config, artifact, source in zip(configs, artifacts, sources):
        program = device.load(artifact, source)
        device.copyin(buffers[0], np.full(n * n, np.nan, np.float32))
        program(buffers)
        err = output_error(device.copyout(buffers[0]), peer.result.reshape(-1))
        if not err <= 1e-4:
            results.append((config, None, err))
            continue
        for _ in range(3):
            program.timed(buffers)
        results.append((config, statistics.median(program.timed(buffers) for _ in range(repeat)),
                        err))
    flops = 2.0 * n ** 3
    rows = [(peer.name, peer.seconds, 1.0, "")] if peer.seconds else []
    for label, config in named:
        seconds = next(r[1] for r in results if r[0] == config)
        rows.append((label, seconds, None, str(config)))
    timed_ok = [r for r in results if r[1] is not None]
    if timed_ok:
        best = min(timed_ok, key=lambda r: r[1])
        rows.append((f"best of sweep ({len(results)})", best[1], None, str(best[0])))
    wrong = [r for r in results if r[1] is None]
    print(f"{'matmul ' + str(n):>12} | {'variant':34s} | {'ms':>9} | {'TFLOPS':>7} | "
          f"{'x cuBLAS':>8} | config")
    for label, seconds, _, config in rows:
        if seconds is None:
            print(f"{'':>12} | {label:34s} | {'wrong':>9} |")
            continue
        ratio = f"{peer.seconds / seconds:8.2f}" if peer.seconds else f"{'-':>8}"
        print(f"{'':>12} | {label:34s} | {seconds * 1e3:9.3f} | {flops / seconds / 1e12:7.2f} | "
              f"{ratio} | {config}")
    if wrong:
        print(f"  {len(wrong)} configs gave wrong results, e.g. {wrong[0][0]} ({wrong[0][2]:.1e})")
    return rows


def _rendered(kernel, config, device) -> tuple:
    text, global_size, local_size = render_gpu(kernel, config, device.dialect, "v0")
    return text, "v0", kernel.key, len(kernel.buffers), global_size, local_size


# name -> (the Tensor computation, numpy's answer, the peer's call); inputs are (rows, 4096) fp32
OTHERS = {
    "softmax": (lambda t: t.softmax(-1),
                lambda x: (lambda e: e / e.sum(-1, keepdims=True))(np.exp(x - x.max(-1,
                                                                                keepdims=True))),
                lambda lib, x: lib.softmax(x)),
    "rowsum": (lambda t: t.sum(-1), lambda x: x.sum(-1), lambda lib, x: lib.rowsum(x)),
}


def bench_other(device, name: str, rows: int, repeat: int) -> None:
    """One computation's kernels at their default configs, in schedule order, checked against
    numpy; its time is the sum of its kernels' medians, next to PyTorch's or CuPy's."""
    from tests.conformance import output_error
    build, reference, peer_call = OTHERS[name]
    x = np.random.default_rng(rows).standard_normal((rows, 4096), dtype=np.float32)
    items = create_schedule([build(Tensor(x, device="reference")).node])
    host = get_device("reference")
    realized = {}
    total = 0.0
    for item in items:
        kernel = item.kernel
        program = device.build(kernel, space_for(kernel, device.info().target).default())
        buffers = [device.alloc(kernel.buffers[0].size, kernel.buffers[0].dtype)]
        for node, spec in zip(item.inputs, kernel.buffers[1:]):
            if id(node) not in realized:  # a leaf, realized by the reference device
                realized[id(node)] = device.from_numpy(host.copyout(node.realized), spec.dtype)
            buffers.append(realized[id(node)])
        program(buffers)
        for _ in range(3):
            program.timed(buffers)
        total += statistics.median(program.timed(buffers) for _ in range(repeat))
        realized[id(item.out)] = buffers[0]
    out = device.copyout(realized[id(items[-1].out)])
    expected = reference(x.astype(np.float64)).astype(np.float32).reshape(-1)
    err = output_error(out[:expected.size], expected)
    runner = gpu_runner(lambda lib, on_gpu: peer_call(lib, on_gpu), x)
    peer = runner(name, repeat) if runner else None
    gbs = x.nbytes / total / 1e9
    line = (f"{name} {rows}x4096: {len(items)} kernels, {total * 1e3:.3f} ms ({gbs:.1f} GB/s "
            f"of input), error {err:.1e}" + (" WRONG" if not err <= 1e-3 else ""))
    if peer:
        line += f"; {peer[0]} {peer[2] * 1e3:.3f} ms: x{peer[2] / total:.2f}"
    else:
        line += "; no PyTorch or CuPy to compare with"
    print(line)


def bench_launch(device, repeat: int) -> None:
    """The time of one launch of a 32-element kernel, back to back as the device times
    kernels and a model runs them: the floor under every small kernel's measured time, next to
    PyTorch's or CuPy's `x += 1` launched the same way."""
    items = create_schedule([(Tensor(np.zeros(32, np.float32), device="reference") + 1).node])
    kernel = items[-1].kernel
    program = device.build(kernel, space_for(kernel, device.info().target).default())
    buffers = [device.alloc(32, kernel.buffers[0].dtype), device.alloc(32, kernel.buffers[0].dtype)]
    for _ in range(3):  # the count of back-to-back launches settles at its largest
        program.timed(buffers)
    seconds = statistics.median(program.timed(buffers) for _ in range(repeat))
    runner = gpu_runner(lambda lib, x: x.__iadd__(1), np.zeros(32, np.float32))
    peer = runner("x += 1", repeat) if runner else None
    print(f"launch floor: {seconds * 1e6:.2f} us per launch" +
          (f"; {peer[0]} {peer[2] * 1e6:.2f} us" if peer else ""))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1024, 4096])
    parser.add_argument("--sweep", type=int, default=40, help="random configs besides the grid")
    parser.add_argument("--grid", type=int, default=-1,
                        help="hand-picked matmul configs to time (default: all)")
    parser.add_argument("--verify", type=int, default=20,
                        help="random configs per kernel (-1: no verification)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--others", default="softmax,rowsum",
                        help=f"comma-separated, of {', '.join(OTHERS)} ('' for none)")
    parser.add_argument("--rows", type=int, default=4096, help="rows of the others' input")
    parser.add_argument("--no-launch", action="store_true", help="skip the launch floor")
    args = parser.parse_args(argv)
    others = [name for name in args.others.split(",") if name]
    if set(others) - set(OTHERS):
        parser.error(f"--others: unknown {', '.join(sorted(set(others) - set(OTHERS)))}")
    version = driver_version()
    try:
        nvrtc = nvrtc_version()
    except DeviceUnavailable as exc:
        nvrtc = f"unavailable ({exc})"
    print(f"CUDA driver {version_text(version) + f' ({version})' if version else 'not found'}, "
          f"NVRTC {nvrtc}", flush=True)
    try:
        device = CUDADevice()
        info = device.info()
    except DeviceUnavailable as exc:
        print(f"bench_cuda: {exc}", file=sys.stderr)
        return 2
    print(f"{time.strftime('%Y-%m-%d')} {info.name}: " +
          ", ".join(f"{k}={v}" for k, v in info.fingerprint if k not in ("backend", "name")))
    try:
        ok = verify(device, args.verify) if args.verify >= 0 else True
        if not args.no_launch:
            bench_launch(device, args.repeat)
        for n in args.sizes:
            bench_matmul(device, n, args.sweep, args.repeat, args.grid)
        for name in others:
            bench_other(device, name, args.rows, args.repeat)
    except DeviceLost as exc:  # a kernel faulted: nothing more runs in this process
        print(f"bench_cuda: {exc}", file=sys.stderr)
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
