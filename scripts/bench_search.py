"""How fast the search finds good configs, and what a real tuning run of matmul 1024 reaches.

    python scripts/bench_search.py                 # both parts, about 10 minutes the first time
    python scripts/bench_search.py --no-matmul     # the sampler comparison only

1. Search efficiency. Kernels whose space is small enough to sweep (on one thread) are measured
   once, every valid config, for real (kept in the cache folder: later runs reuse the sweep).
   Then every sampler searches each space on a simulated measurer fed by that sweep, and we count
   the trials it needs to reach 95% of the exhaustive best (median over seeds). The bar: at most
   a tenth of the space.
2. The bar for real tuning: matmul 1024 tuned from an empty database and an empty compile
   cache, on all cores, reaches at least 0.9x numpy/OpenBLAS (same thread count) within 60 s of
   wall time. numpy and the tuned kernel are each timed in a block of runs of their own (their
   worker threads keep spinning after a call and would steal the other core).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tunesearch import Tensor  # noqa: E402
from tunesearch import settings  # noqa: E402
from tunesearch.graph.dtypes import dtypes  # noqa: E402
from tunesearch.graph.schedule import create_schedule  # noqa: E402
from tunesearch.runtime.cpu import CPUDevice  # noqa: E402
from tunesearch.search import (Budget, DeviceMeasurer, SimulatedMeasurer,  # noqa: E402
                               sampler_names, search_kernel, tune_kernels)
from tunesearch.space.config import Config  # noqa: E402
from tunesearch.space.space import space_for  # noqa: E402

TARGET = 0.95


def kernel_of(tensor):
    [item] = create_schedule([tensor.node])
    return item.kernel


def ones(*shape):
    return Tensor(np.ones(shape, np.float32), device="reference")


def sweepable():
    return [("add 1024x1024", kernel_of(ones(1024, 1024) + ones(1024, 1024))),
            ("sum rows 1024x1024", kernel_of(ones(1024, 1024).sum(1))),
            ("sum columns 1024x1024", kernel_of(ones(1024, 1024).sum(0)))]


def sweep(kernel, device, cache: Path) -> dict[Config, float | None]:
    """Every valid config's time (None where it failed), measured once and cached."""
    key = f"{kernel.key}@{device.info().key}"
    saved = json.loads(cache.read_text()) if cache.exists() else {}
    if key not in saved:
        space = space_for(kernel, device.info().target)
        configs = list(space.enumerate())
        print(f"  sweeping {kernel.name}: {len(configs)} configs", file=sys.stderr, flush=True)
        with DeviceMeasurer(device) as measurer:
            results = measurer.measure(kernel, configs)
        saved[key] = {r.config.to_json(): r.time_s for r in results}
        cache.write_text(json.dumps(saved))
    return {Config.from_json(text): t for text, t in saved[key].items()}


def trials_to_target(kernel, space, table, sampler: str, seed: int) -> tuple[float, str]:
    """Configs measured until one ran within 95% of the best (inf: never), and the sampler
    that really ran (a fallback when an optional dependency is missing)."""
    best = min(t for t in table.values() if t is not None)
    budget = Budget(trials=None, target_s=best / TARGET)
    result = search_kernel(kernel, space, SimulatedMeasurer(table), budget, sampler, seed,
                           finalists=0)
    return (result.measured if result.stopped_by == "target" else math.inf), result.sampler


def efficiency(seeds: int, cache: Path) -> list[str]:
    os.environ["TUNESEARCH_THREADS"] = "1"
    device = CPUDevice()
    names = sampler_names()
    rows = ["| kernel | valid configs | default / best | " + " | ".join(names) + " |",
            "|---" * (3 + len(names)) + "|"]
    for label, kernel in sweepable():
        table = sweep(kernel, device, cache)
        space = space_for(kernel, device.info().target)
        times = [t for t in table.values() if t is not None]
        default = table.get(space.default())
        cells = []
        for name in names:
            runs = [trials_to_target(kernel, space, table, name, seed) for seed in range(seeds)]
            needed = statistics.median(n for n, _ in runs)
            ran = runs[0][1]
            cell = f"{needed:g} ({needed / len(table):.1%})" if math.isfinite(needed) else \
                "not reached"
            cells.append(cell + (f", ran {ran}" if ran != name else ""))
        ratio = f"{default / min(times):.2f}x" if default else "failed"
        rows.append(f"| {label} | {len(table)} | {ratio} | " + " | ".join(cells) + " |")
    return rows


def median_time(run, repeats: int = 30) -> float:
    for _ in range(3):
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_run(seconds: float) -> list[str]:
    cores = os.cpu_count() or 1
    os.environ["TUNESEARCH_THREADS"] = str(cores)
    os.environ["TUNESEARCH_CACHE"] = tempfile.mkdtemp(prefix="tunesearch-bench-")  # no compiles
    from tunesearch.db import Store
    device = CPUDevice()
    n = 1024
    kernel = kernel_of(ones(n, n) @ ones(n, n))
    start = time.perf_counter()
    with Store(settings.cache_dir() / "bench.db") as store:  # an empty database
        report = tune_kernels([kernel], device, Budget(trials=None, total_seconds=seconds * 0.75),
                              store=store, progress=True)
    wall = time.perf_counter() - start
    [result] = report.results
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    numpy_s = median_time(lambda: a @ b)
    time.sleep(1.0)  # let OpenBLAS's threads go idle
    program = device.build(kernel, result.config)
    buffers = [device.alloc(n * n, dtypes.float32), device.from_numpy(a, dtypes.float32),
               device.from_numpy(b, dtypes.float32)]
    tuned_s = median_time(lambda: program(buffers))
    assert np.allclose(device.copyout(buffers[0]).reshape(n, n), a @ b, rtol=1e-3, atol=1e-3)
    default_program = device.build(kernel, space_for(kernel, device.info().target).default())
    default_s = median_time(lambda: default_program(buffers))
    flops = kernel.flops / 1e9
    failures = ", ".join(f"{v} {k}" for k, v in result.failures.items()) or "no failures"
    return [
        "| matmul 1024, CPU, " + f"{cores} threads | value |", "|---|---|",
        f"| tuning wall time (from empty database and compile cache) | {wall:.1f} s |",
        f"| trials measured | {result.trials} ({failures}) |",
        f"| winning config | `{result.config}` |",
        f"| tuned kernel | {flops / tuned_s:.1f} GFLOPS ({tuned_s * 1e3:.2f} ms) |",
        f"| heuristic default | {flops / default_s:.1f} GFLOPS ({default_s * 1e3:.2f} ms) |",
        f"| numpy / OpenBLAS | {flops / numpy_s:.1f} GFLOPS ({numpy_s * 1e3:.2f} ms) |",
        f"| tuned / OpenBLAS | **{numpy_s / tuned_s:.2f}x** (bar: >= 0.9x within 60 s) |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=7, help="seeds per sampler (median taken)")
    parser.add_argument("--seconds", type=float, default=60.0, help="wall time for matmul 1024")
    parser.add_argument("--no-sweep", action="store_true", help="skip the sampler comparison")
    parser.add_argument("--no-matmul", action="store_true", help="skip the matmul 1024 run")
    parser.add_argument("--sweep-cache", type=Path, default=settings.cache_dir() / "sweeps.json")
    args = parser.parse_args()
    lines = []
    if not args.no_sweep:
        lines += [f"Trials to reach {TARGET:.0%} of the exhaustive best (median of {args.seeds} "
                  "seeds; share of the space). Bar: <= 10%.", ""] + efficiency(args.seeds,
                                                                                args.sweep_cache)
    if not args.no_matmul:
        lines += [""] + matmul_run(args.seconds)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
