"""The cost of the runtime's database lookup per kernel, and a second `tune` of the same model
(all hits) against the first. Prints a markdown table.

    python scripts/bench_db.py [--trials 10]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from tunesearch.db import DeviceRecord, KernelRecord, ResultRecord, Store  # noqa: E402


def lookup_cost(url: str, n_kernels: int = 500) -> tuple[float, float]:
    store = Store(url)
    device = DeviceRecord("cpu-bench", "cpu", "bench", {"backend": "cpu"})
    for i in range(n_kernels):
        store.record(KernelRecord(f"k_{i:020d}", f"r_{i}", "", "", "", 1), device,
                     ResultRecord(config={"knobs": {"unroll": 2}}, time_s=1e-5, spread=0.0,
                                  gflops=1.0, gbps=1.0, default_time_s=2e-5, speedup=2.0,
                                  trials=10, sampler="tpe"))
    times = []
    for i in range(n_kernels):
        start = time.perf_counter()
        store.lookup(f"k_{i:020d}", "cpu-bench")
        times.append(time.perf_counter() - start)
    miss = []
    for i in range(200):
        start = time.perf_counter()
        store.lookup(f"k_missing{i}", "cpu-bench")
        miss.append(time.perf_counter() - start)
    return statistics.median(times), statistics.median(miss)


def tune_twice(url: str, trials: int) -> tuple[float, float]:
    env = dict(os.environ, TUNESEARCH_DB=url)
    walls = []
    for _ in range(2):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "tunesearch", "tune", "example:tiny_cnn",
                        "--trials", str(trials), "--quiet", "--repeat", "3"], env=env,
                       check=True, capture_output=True)
        walls.append(time.perf_counter() - start)
    return walls[0], walls[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        hit, miss = lookup_cost(f"sqlite:///{tmp}/lookup.db")
        first, second = tune_twice(f"sqlite:///{tmp}/tune.db", args.trials)
    print("| measure | value |")
    print("|---|---|")
    print(f"| SQLite lookup, hit (median of 500, first use in a process) | {hit * 1e6:.0f} us |")
    print(f"| SQLite lookup, miss | {miss * 1e6:.0f} us |")
    print("| later uses in the same process | cached in memory, one dict lookup |")
    print(f"| `tunesearch tune example:tiny_cnn --trials {args.trials}`, empty database "
          f"| {first:.1f} s |")
    print(f"| the same command again (every kernel a hit) | {second:.1f} s "
          f"({first / second:.1f}x faster) |")


if __name__ == "__main__":
    main()
