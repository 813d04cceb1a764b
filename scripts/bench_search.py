"""How fast the search finds good configs, and what real tuning runs of matmuls reach.

    python scripts/bench_search.py                 # all parts, about 30 minutes the first time
    python scripts/bench_search.py --no-matmul     # the sampler comparisons only
    python scripts/bench_search.py --isa avx2      # code and OpenBLAS for x86-64-v3

1. Search efficiency. Kernels whose space is small enough to sweep (on one thread) are measured
   once, every valid config, for real (kept in the cache folder: later runs reuse the sweep).
   Then every sampler searches each space on a simulated measurer fed by that sweep, and we count
   the trials it needs to reach 95% of the exhaustive best (median over seeds). The bar: at most
   a tenth of the space.
2. Search efficiency where it matters: matmul 1024 and a 3x3 convolution of resnet50. The
   reference best is the best of a real sweep of the register-block x packing x k-tile grid
   (blocks that fit the register file by the target model; the other knobs as the default).
   Each sampler then searches with real measurements (every config measured once for real and
   cached, so seeds share them) until a config reaches 95% of the reference: trials and seconds
   of measuring (compile included) that took, median over seeds, and what each phase bought
   (the default alone, then the default's neighbourhood, then the sampler). The bar: <= 24
   trials.
3. Real tuning: matmul 1024 tuned from an empty database and an empty compile cache reaches
   at least 0.95x numpy/OpenBLAS (same thread count) within 60 s of wall time, the other shapes
   (--shapes) 0.9x, at one and at all threads (--threads). numpy and the tuned kernel are each
   timed in a block of runs of their own (their worker threads keep spinning after a call and
   would steal the other core).
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import isa_level  # noqa: E402

isa_level.apply()  # before numpy loads OpenBLAS

import numpy as np  # noqa: E402

from tunesearch import Tensor  # noqa: E402
from tunesearch import settings  # noqa: E402
from tunesearch.graph.dtypes import dtypes  # noqa: E402
from tunesearch.graph.schedule import create_schedule  # noqa: E402
from tunesearch.runtime.cpu import CPUDevice  # noqa: E402
from tunesearch.search import (Budget, DeviceMeasurer, SimulatedMeasurer,  # noqa: E402
                               sampler_names, search_kernel, tune_kernels)
from tunesearch.search.measure import Measurer  # noqa: E402
from tunesearch.space.config import Config  # noqa: E402
from tunesearch.space.spaces import space_for  # noqa: E402

TARGET = 0.95
ROUNDS = 3  # rounds of blocks the closing figures of a tuning run are timed in


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


class CachedMeasurer(Measurer):
    """Real measurements, each config measured once and kept (with what measuring it cost) in
    a JSON file, so searches with several seeds and samplers share them."""

    def __init__(self, measurer: Measurer, kernel, device, cache: Path):
        self.inner, self.cache = measurer, cache
        self.batch_size = measurer.batch_size
        self.key = f"{kernel.key}@{device.info().key}"
        saved = json.loads(cache.read_text()) if cache.exists() else {}
        self.table: dict[Config, tuple[float | None, float]] = {
            Config.from_json(c): (t, cost) for c, (t, cost) in saved.get(self.key, {}).items()}

    def _save(self) -> None:
        saved = json.loads(self.cache.read_text()) if self.cache.exists() else {}
        saved[self.key] = {c.to_json(): list(v) for c, v in self.table.items()}
        self.cache.write_text(json.dumps(saved))

    def ensure(self, kernel, configs: list[Config]) -> None:
        new = [c for c in dict.fromkeys(configs) if c not in self.table]
        for i in range(0, len(new), 8):
            batch = new[i:i + 8]
            start = time.perf_counter()
            results = self.inner.measure(kernel, batch)
            cost = (time.perf_counter() - start) / len(batch)
            for r in results:
                self.table[r.config] = (r.time_s if r.ok else None, cost)
            self._save()

    def measure(self, kernel, configs):
        self.ensure(kernel, configs)
        return SimulatedMeasurer(lambda c: self.table[c][0]).measure(kernel, configs)

    def retime(self, kernel, configs):
        return self.measure(kernel, configs)


def grid(space) -> list[Config]:
    """Register blocks (that fit the register file) x packing x k tile, other knobs as the
    default's."""
    import itertools
    from tunesearch.space import cpu_model
    from tunesearch.space.cpu_space import KTILES
    from tunesearch.space.kernel_shape import gemm_axes, packable, subsets
    k, base, target = space.kernel, space.default(), space.target
    row, col, _ = gemm_axes(k)
    blocks = cpu_model.blocks_that_fit(target, (2, 3, 4, 5, 6, 8, 12), range(1, 7))
    ktiles = [0] + [t for t in KTILES if t < k.domain[k.n_out] and t <= 512]
    out = []
    for (ur, uc), pack, ktile in itertools.product(blocks, subsets(packable(k)), ktiles):
        upcast = list(base.get("upcast"))
        upcast[row], upcast[col] = min(ur, k.domain[row]), min(uc, k.domain[col])
        config = base.replace(upcast=tuple(upcast), pack=pack, ktile=ktile)
        if space.validate(config) is None:
            out.append(config)
    return list(dict.fromkeys(out))


def resnet_conv():
    """resnet50's 3x3 convolution of layer 2: 128 channels in and out at 28x28, padding 1."""
    x = Tensor(np.ones((1, 128, 28, 28), np.float32), device="reference")
    w = Tensor(np.ones((128, 128, 3, 3), np.float32), device="reference")
    items = create_schedule([x.conv2d(w, padding=1).node])
    return max((item.kernel for item in items), key=lambda kern: kern.flops)


def phase_best(result, table, count: int) -> float | None:
    """The best time among the first count configs the search measured."""
    times = [table[t.result.config][0] for t in result.trials if t.measured][:count]
    times = [t for t in times if t is not None]
    return min(times) if times else None


def grid_efficiency(seeds: int, cache: Path, samplers: list[str]) -> list[str]:
    os.environ["TUNESEARCH_THREADS"] = "1"
    device = CPUDevice()
    rows = ["| kernel | grid configs | grid best | default / best | after neighbourhood "
            "| sampler | trials to 95% | seconds to 95% | reached |",
            "|---|---|---|---|---|---|---|---|---|"]
    with DeviceMeasurer(device) as measurer:
        for label, kernel in (("matmul 1024", kernel_of(ones(1024, 1024) @ ones(1024, 1024))),
                              ("resnet50 conv 3x3 128ch 28x28", resnet_conv())):
            space = space_for(kernel, device.info().target)
            memo = CachedMeasurer(measurer, kernel, device, cache)
            configs = grid(space)
            print(f"  {label}: sweeping {len(configs)} grid configs", file=sys.stderr,
                  flush=True)
            memo.ensure(kernel, configs)
            best = min(memo.table[c][0] for c in configs if memo.table[c][0] is not None)
            default_t = memo.measure(kernel, [space.default()])[0].time_s
            near = 1 + len(space.neighbours(space.default()))
            for sampler in samplers:
                trials, seconds, reached, after_near = [], [], 0, []
                for seed in range(seeds):
                    budget = Budget(trials=60, target_s=best / TARGET)
                    result = search_kernel(kernel, space, memo, budget, sampler, seed,
                                           finalists=0)
                    measured = [t.result.config for t in result.trials if t.measured]
                    ok = result.stopped_by == "target"
                    reached += ok
                    trials.append(result.measured if ok else math.inf)
                    seconds.append(sum(memo.table[c][1] for c in measured) if ok else math.inf)
                    after = phase_best(result, memo.table, near)
                    after_near.append(best / after if after else 0.0)
                med_trials, med_seconds = statistics.median(trials), statistics.median(seconds)
                rows.append(
                    f"| {label} | {len(configs)} | {kernel.flops / best / 1e9:.1f} GFLOPS | "
                    f"{best / default_t:.2f}x | {statistics.median(after_near):.2f}x | "
                    f"{sampler} | {med_trials:g} | "
                    f"{med_seconds:.0f} s | {reached}/{seeds} |")
                print(rows[-1], file=sys.stderr, flush=True)
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


SHAPES = {"1024": (1024, 1024, 1024), "512": (512, 512, 512), "1000": (1000, 1000, 1000),
          "257x4099x511": (257, 511, 4099), "64x4096x4096": (64, 4096, 4096)}


def matmul_run(seconds: float, shape: str, threads: int) -> str:
    """Tune one matmul from an empty database and compile cache within `seconds` of wall time;
    one table row: the shape, threads, wall time, trials, tuned / default / OpenBLAS."""
    from threadpoolctl import threadpool_limits
    os.environ["TUNESEARCH_THREADS"] = str(threads)
    os.environ["TUNESEARCH_CACHE"] = tempfile.mkdtemp(prefix="tunesearch-bench-")  # no compiles
    from tunesearch.db import Store
    from tunesearch.runtime import device as device_registry
    device_registry._instances.pop("cpu", None)  # a device for this thread count
    device = CPUDevice()
    m, k, n = SHAPES[shape]
    kernel = kernel_of(ones(m, k) @ ones(k, n))
    start = time.perf_counter()
    with Store(settings.cache_dir() / "bench.db") as store:  # an empty database
        report = tune_kernels([kernel], device, Budget(trials=None, total_seconds=seconds * 0.75),
                              store=store, progress=True)
    wall = time.perf_counter() - start
    [result] = report.results
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    program = device.build(kernel, result.config)
    buffers = [device.alloc(m * n, dtypes.float32), device.from_numpy(a, dtypes.float32),
               device.from_numpy(b, dtypes.float32)]
    program(buffers)
    assert np.allclose(device.copyout(buffers[0]).reshape(m, n), a @ b, rtol=1e-3, atol=1e-3)
    default_program = device.build(kernel, space_for(kernel, device.info().target).default())
    # numpy, the tuned config and the default in rounds of one block each, the order turned
    # each round (a block's stall spoils one round, not the figure, and the block after
    # numpy's, which OpenBLAS's spinning threads may slow, is each side's once): the median
    # round of each
    def numpy_block() -> float:
        with threadpool_limits(limits=threads):
            seconds = median_time(lambda: a @ b)
        time.sleep(1.0)  # let OpenBLAS's threads go idle
        return seconds
    blocks = {"numpy": numpy_block, "tuned": lambda: median_time(lambda: program(buffers)),
              "default": lambda: median_time(lambda: default_program(buffers))}
    times: dict[str, list[float]] = {side: [] for side in blocks}
    sides = list(blocks)
    for turn in range(ROUNDS):
        for side in sides[turn % 3:] + sides[:turn % 3]:
            times[side].append(blocks[side]())
    numpy_s, tuned_s, default_s = (statistics.median(times[side])
                                   for side in ("numpy", "tuned", "default"))
    failures = ", ".join(f"{v} {k}" for k, v in result.failures.items()) or "no failures"
    gflops = kernel.flops / 1e9
    return (f"| {shape} | {threads} | {wall:.1f} s | {result.trials} ({failures}) | "
            f"{gflops / tuned_s:.1f} | {gflops / default_s:.1f} | {gflops / numpy_s:.1f} | "
            f"**{numpy_s / tuned_s:.2f}x** | `{result.config}` |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=7, help="seeds per sampler (median taken)")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="wall time for each matmul tuned")
    parser.add_argument("--no-sweep", action="store_true", help="skip the sampler comparison")
    parser.add_argument("--no-matmul", action="store_true", help="skip the matmul tuning runs")
    parser.add_argument("--no-grid", action="store_true",
                        help="skip the matmul and convolution search efficiency")
    parser.add_argument("--samplers", default="tpe,random",
                        help="samplers for the matmul and convolution search efficiency")
    parser.add_argument("--isa", default="native", help="native, avx512, avx2 or sse4")
    parser.add_argument("--shapes", default="1024", help=f"matmuls to tune: {','.join(SHAPES)}")
    parser.add_argument("--threads", nargs="*", type=int, default=[1, os.cpu_count() or 1])
    parser.add_argument("--sweep-cache", type=Path, default=settings.cache_dir() / "sweeps.json")
    args = parser.parse_args()
    lines = [isa_level.describe(), ""]
    if not args.no_sweep:
        lines += [f"Trials to reach {TARGET:.0%} of the exhaustive best (median of {args.seeds} "
                  "seeds; share of the space). Bar: <= 10%.", ""] + efficiency(args.seeds,
                                                                                args.sweep_cache)
    if not args.no_grid:
        lines += ["", f"Search efficiency against the best of a real grid sweep: trials and "
                  f"seconds until a config reaches {TARGET:.0%} of it (median of {args.seeds} "
                  "seeds; 60 trials at most). Bar: <= 24 trials.", ""]
        lines += grid_efficiency(args.seeds, args.sweep_cache.with_name("grid_sweeps.json"),
                                 args.samplers.split(","))
    if not args.no_matmul:
        lines += ["", f"Tuned from an empty database and compile cache, {args.seconds:g} s of "
                  "wall time each (bars: matmul 1024 >= 0.95x OpenBLAS, the others >= 0.9x).",
                  "", "| matmul | threads | tuning wall time | trials | tuned GFLOPS | default "
                  "GFLOPS | OpenBLAS GFLOPS | tuned / OpenBLAS | winner |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for threads in args.threads:
            for shape in args.shapes.split(","):
                lines.append(matmul_run(args.seconds, shape, threads))
                print(lines[-1], file=sys.stderr, flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
