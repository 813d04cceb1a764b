"""What the per-device measuring lock does to the times several workers see: N processes time
the same matmul's default config at once, with the lock and without it, against one process
alone. Prints a markdown table of each setting's median time over the one-process median.

    python scripts/bench_device_lock.py [--processes 2] [--rounds 10] [--size 384]
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from tunesearch import Tensor  # noqa: E402
from tunesearch.graph.schedule import create_schedule  # noqa: E402
from tunesearch.runtime.device import get_device  # noqa: E402
from tunesearch.search import DeviceMeasurer  # noqa: E402
from tunesearch.search.device_lock import DeviceLock  # noqa: E402
from tunesearch.search.messages import Timing  # noqa: E402
from tunesearch.space.spaces import space_for  # noqa: E402

SPAWN = multiprocessing.get_context("spawn")


class _NoLock:
    """Stands in for the lock: every process times whenever it likes (the old behaviour)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        pass

    def close(self) -> None:
        pass


def _matmul(n: int):
    import numpy as np
    a = Tensor(np.ones((n, n), np.float32), device="reference")
    [item] = create_schedule([(a @ a).node])
    return item.kernel


def _time(size: int, rounds: int, folder: str | None, barrier, out) -> None:
    kernel = _matmul(size)
    config = space_for(kernel, get_device("cpu").info().target).default()
    lock = DeviceLock("host", Path(folder)) if folder else _NoLock()
    timing = Timing(warmup=1, min_time_s=0.2, min_repeats=5)
    with DeviceMeasurer("cpu", compile_workers=1, lock=lock, final_timing=timing) as measurer:
        measurer.measure(kernel, [config])  # compiled and loaded before the others start
        barrier.wait()
        times = [measurer.retime(kernel, [config])[0].time_s for _ in range(rounds)]
    out.put(statistics.median(times))


def _run(processes: int, size: int, rounds: int, folder: str | None) -> float:
    barrier, out = SPAWN.Barrier(processes), SPAWN.Queue()
    workers = [SPAWN.Process(target=_time, args=(size, rounds, folder, barrier, out))
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    medians = [out.get() for _ in workers]
    for worker in workers:
        worker.join()
    return statistics.median(medians)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--size", type=int, default=384)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="tunesearch-lock-")
    alone = _run(1, args.size, args.rounds, folder)
    locked = _run(args.processes, args.size, args.rounds, folder)
    unlocked = _run(args.processes, args.size, args.rounds, None)
    print(f"| matmul {args.size} default config, median time | ratio to one process |")
    print("|---|---|")
    print(f"| one process: {alone * 1e3:.3f} ms | 1.00 |")
    print(f"| {args.processes} processes with the device lock | {locked / alone:.2f} |")
    print(f"| {args.processes} processes without it | {unlocked / alone:.2f} |")


if __name__ == "__main__":
    main()
