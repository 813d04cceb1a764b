"""CPU kernels against numpy/OpenBLAS, in one run: the naive config, the heuristic default, and
the best of a sweep over a slice of the space, each as time, GFLOPS or GB/s, and a ratio to numpy
at the same thread count.

On two cores OpenMP and OpenBLAS worker threads keep spinning after a call and steal the other
core, so each side is timed in its own block of runs (never interleaved call by call); the median
of the block is taken. numpy, the default and the best config are then timed in three rounds of
such blocks and the median round is reported, so one disturbed block does not make the figure.

    python scripts/bench_kernels.py                 # every case, 1 and all threads
    python scripts/bench_kernels.py --cases matmul_1024 --threads 1
    python scripts/bench_kernels.py --isa avx2      # code and OpenBLAS for x86-64-v3
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import isa_level  # noqa: E402

isa_level.apply()  # before numpy loads OpenBLAS

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from tunesearch import Tensor  # noqa: E402
from tunesearch.graph.schedule import create_schedule  # noqa: E402
from tunesearch.runtime.device import get_device  # noqa: E402
from tunesearch.space.config import Config  # noqa: E402
from tunesearch.space.kernel_shape import packable  # noqa: E402
from tunesearch.space.spaces import space_for  # noqa: E402

RNG = np.random.default_rng(0)
ROUNDS = 3


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def matmul_case(m, k, n):
    a, b = rand(m, k), rand(k, n)
    return (lambda: Tensor(a) @ Tensor(b)), (lambda: a @ b), 2 * m * n * k, "GFLOPS"


def rowsum_case(n):
    x = rand(n, n)
    return (lambda: Tensor(x).sum(1)), (lambda: x.sum(1)), n * n * 4, "GB/s"


def fma_case(n):
    a, b, c = rand(n), rand(n), rand(n)
    return (lambda: Tensor(a) * Tensor(b) + Tensor(c)), (lambda: a * b + c), 16 * n, "GB/s"


CASES = {
    "matmul_512": lambda: matmul_case(512, 512, 512),
    "matmul_1024": lambda: matmul_case(1024, 1024, 1024),
    "matmul_1000": lambda: matmul_case(1000, 1000, 1000),
    "matmul_257x4099x511": lambda: matmul_case(257, 511, 4099),
    "matmul_64x4096x4096": lambda: matmul_case(64, 4096, 4096),
    "rowsum_4096": lambda: rowsum_case(4096),
    "fma_16M": lambda: fma_case(16 * 1024 * 1024),
}


def median_time(fn, min_time=0.3, min_reps=5, max_reps=200) -> float:
    fn()
    fn()
    times, start = [], time.perf_counter()
    while len(times) < min_reps or (time.perf_counter() - start < min_time and
                                    len(times) < max_reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def sweep_configs(space, threads: int):
    """A slice of the space around the shapes that matter: register blocks that fit the
    target's register file (by its model), packing of none, the default's or all operands, no
    k tile or the model's, both block loop orders; split and blocks for reductions; the
    default's neighbours."""
    from tunesearch.space import cpu_matmul, cpu_model
    from tunesearch.space.kernel_shape import gemm_axes
    k = space.kernel
    base = space.default()
    target = space.target
    out = {base, *space.neighbours(base)}
    n_out = k.n_out
    real = [a for a in range(n_out) if k.domain[a] > 1]
    gemm = gemm_axes(k) if k.n_reduce else None
    if gemm is not None:
        row, col, _ = gemm
        blocks = cpu_model.blocks_that_fit(target, (4, 6, 8), range(1, 5))
        packs = {(), base.get("pack"), packable(k)}
        ktiles = {0, cpu_matmul.model_ktile(k, target, base)}
        for (ur, uc), order_first, pack, ktile in itertools.product(
                blocks, (row, col), packs, ktiles):
            upcast = list(base.get("upcast"))
            upcast[row], upcast[col] = min(ur, k.domain[row]), min(uc, k.domain[col])
            order = tuple([order_first, col if order_first == row else row] +
                          [a for a in base.get("order") if a not in (row, col)])
            out.add(base.replace(upcast=tuple(upcast), unroll=4, order=order, pack=pack,
                                 ktile=ktile if ktile < k.domain[n_out] else 0))
    elif k.n_reduce:
        for split, ur, unroll in itertools.product((4, 8, 16, 32), (1, 2, 4, 8), (1, 2, 4)):
            upcast = [1] * n_out
            if real:
                upcast[real[-1]] = min(ur, k.domain[real[-1]])
            out.add(base.replace(split=split, upcast=tuple(upcast), unroll=unroll))
    else:
        for u in (8, 16, 32, 64, 128):
            upcast = [1] * n_out
            upcast[-1] = min(u, k.domain[-1])
            out.add(base.replace(upcast=tuple(upcast)))
    configs = []
    for config in out:
        parallel = (config.get("parallel") or 1) if threads > 1 else 0
        config = config.replace(parallel=parallel, threads=threads if parallel else 1)
        if space.validate(config) is None:
            configs.append(config)
    return configs


def bench_case(name: str, threads: int, sweep: bool) -> dict:
    make, numpy_fn, work, unit = CASES[name]()
    device = get_device("cpu")
    t = make()
    item = create_schedule([t.node])[-1]
    kernel = item.kernel
    for dep in create_schedule([t.node])[:-1]:
        raise RuntimeError(f"{name}: expected one kernel, got a dependency {dep.kernel.name}")
    inputs = [node.realized for node in item.inputs]
    out = device.alloc(kernel.buffers[0].size, kernel.buffers[0].dtype)
    buffers = [out] + inputs
    # the device was made for the first thread count asked for; the space is for this one
    space = space_for(kernel, dataclasses.replace(device.info().target, threads=threads))

    def numpy_time() -> float:
        with threadpool_limits(limits=threads):
            return median_time(numpy_fn)

    def measure(config: Config) -> float:
        program = device.build(kernel, config)
        return median_time(lambda: program.run(buffers), min_time=0.2, min_reps=3)

    naive = space.naive()
    default = space.default()  # the space is for this thread count
    naive_s = measure(naive) if work < 4e9 or kernel.n_reduce == 0 else float("nan")
    best_s, best = measure(default), default
    if sweep:
        for config in sweep_configs(space, threads):
            s = measure(config)
            if s < best_s:
                best_s, best = s, config
    # the figures: rounds of numpy, default and best, each its own block; medians of the rounds
    rounds = []
    for _ in range(ROUNDS):
        numpy_round, default_round = numpy_time(), measure(default)
        rounds.append((numpy_round, default_round,
                       default_round if best == default else measure(best)))
    numpy_s, default_s, best_s = (statistics.median(r[i] for r in rounds) for i in range(3))
    return {"case": name, "threads": threads, "unit": unit, "work": work, "numpy_s": numpy_s,
            "naive_s": naive_s, "default_s": default_s, "best_s": best_s, "best": str(best)}


def rate(row, seconds) -> str:
    if seconds != seconds:  # nan: not measured
        return "-"
    return f"{row['work'] / seconds / 1e9:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument("--threads", nargs="*", type=int, default=[1, os.cpu_count() or 1])
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--isa", default="native", help="native, avx512, avx2 or sse4")
    args = parser.parse_args()
    print(isa_level.describe() + "\n")
    print(f"Each side is timed in a block of runs of its own (never interleaved call by call: "
          f"OpenMP and OpenBLAS threads keep spinning after a call), median of the block; numpy, "
          f"the default and the best are timed in {ROUNDS} rounds of blocks, median round shown.\n")
    print("| case | threads | unit | numpy | naive | default | best of sweep | default/numpy "
          "| best/numpy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for threads in args.threads:
        os.environ["TUNESEARCH_THREADS"] = str(threads)
        for name in args.cases:
            row = bench_case(name, threads, not args.no_sweep)
            print(f"| {name} | {threads} | {row['unit']} | {rate(row, row['numpy_s'])} | "
                  f"{rate(row, row['naive_s'])} | {rate(row, row['default_s'])} | "
                  f"{rate(row, row['best_s'])} | {row['numpy_s'] / row['default_s']:.2f}x | "
                  f"{row['numpy_s'] / row['best_s']:.2f}x |", flush=True)
            print(f"<!-- best {name} t{threads}: {row['best']} -->", flush=True)


if __name__ == "__main__":
    main()
