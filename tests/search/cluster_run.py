"""Run by test_cluster_actors.py inside a network namespace: a local Ray with `units` measuring
actors tunes three kernels with a measurer that kills its actor on the first kernel, once
(`dies`), or that stalls on the second kernel until the run is interrupted (`stalls`).

    python -m tests.search.cluster_run UNITS DB_URL OUT.json RAY_DIR [dies|stalls]
"""
from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path

from tests.search.kernels import add, matmul
from tunesearch.search.measure import SimulatedMeasurer

DIE_KERNEL, DIE_MARKER = "TUNESEARCH_TEST_DIE_KERNEL", "TUNESEARCH_TEST_DIE_MARKER"
STALL_KERNEL = "TUNESEARCH_TEST_STALL_KERNEL"


def _made_up_time(device_key: str, config) -> float:
    return 1e-3 * (1 + len(config.to_json()) % 7)


class _DiesOnce(SimulatedMeasurer):
    """Made-up times; the actor's process ends the first time it is asked for DIE_KERNEL."""

    def measure(self, kernel, configs):
        marker = Path(os.environ[DIE_MARKER])
        if kernel.key == os.environ[DIE_KERNEL] and not marker.exists():
            marker.touch()
            os._exit(1)  # as a node that loses power: no word to the driver
        return super().measure(kernel, configs)


def dies_once(device, seed: int, n_workers: int) -> SimulatedMeasurer:
    return _DiesOnce(functools.partial(_made_up_time, device.info().key))


class _Stalls(SimulatedMeasurer):
    """Made-up times; the second kernel's search waits (with a marker file) until stopped."""

    def measure(self, kernel, configs):
        if kernel.key == os.environ[STALL_KERNEL]:
            Path(os.environ[DIE_MARKER]).touch()
            time.sleep(600)
        return super().measure(kernel, configs)


def stalls(device, seed: int, n_workers: int) -> SimulatedMeasurer:
    return _Stalls(functools.partial(_made_up_time, device.info().key))


def main(units: int, db_url: str, out: str, ray_dir: str, mode: str = "dies") -> None:
    import ray

    from tunesearch.db import Store
    from tunesearch.db.leases import LeaseBoard
    from tunesearch.search import Budget
    from tunesearch.search.cluster import run_cluster
    kernels = [matmul(16, 16, 16), add(64), add(32, 8)]
    os.environ[DIE_KERNEL] = kernels[0].key  # before Ray starts: its workers inherit it
    os.environ[STALL_KERNEL] = kernels[1].key
    os.environ[DIE_MARKER] = str(Path(out).with_suffix(".died"))
    ray.init(num_cpus=2, resources={"tunesearch-cpu": units}, include_dashboard=False,
             _temp_dir=ray_dir, log_to_driver=False, configure_logging=False)
    try:
        with Store(db_url) as store:
            report = run_cluster(kernels, "cpu", Budget(trials=4), store, "local",
                                 progress=False, model="three",
                                 measurer=dies_once if mode == "dies" else stalls)
            stored = [store.lookup(k.key, report.device_key) is not None for k in kernels]
            _, rows = LeaseBoard(store).leases(report.device_key)  # what tunesearch status shows
            leases = {row.kernel_key: row.state for row in rows}
    finally:
        ray.shutdown()
    Path(out).write_text(json.dumps({
        "statuses": [r.status for r in report.results], "stored": stored,
        "leases": [leases.get(k.key) for k in kernels],
        "notes": list(report.notes), "died": Path(os.environ[DIE_MARKER]).exists(),
        "interrupted": report.interrupted}))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], *sys.argv[5:])
