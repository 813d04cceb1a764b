"""Run by test_cluster_actors.py inside a network namespace: a local Ray with `units` measuring
actors tunes three kernels with a measurer that kills its actor on the first kernel, once
(`dies`), that stalls on the second kernel until the run is interrupted (`stalls`), or that
times the first kernel's winner on another device (stored before the run) fastest (`starts`).

    python -m tests.search.cluster_run UNITS DB_URL OUT.json RAY_DIR [dies|stalls|starts]
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
FAST_CONFIG = "TUNESEARCH_TEST_FAST_CONFIG"


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


def _fast_time(device_key: str, config) -> float:
    """Made-up times, the config in FAST_CONFIG ten times faster than any other."""
    fast = config.to_json() == os.environ[FAST_CONFIG]
    return _made_up_time(device_key, config) / (10 if fast else 1)


def prefers_stored(device, seed: int, n_workers: int) -> SimulatedMeasurer:
    return SimulatedMeasurer(functools.partial(_fast_time, device.info().key))


def _store_elsewhere(store, kernel) -> str:
    """A winner of `kernel` on another CPU device (this one at another ISA level), a config
    neither the default nor one of its neighbours; returns it as JSON."""
    from tunesearch.db import DeviceRecord, ResultRecord
    from tunesearch.runtime.device import get_device
    from tunesearch.search.tune import kernel_record
    from tunesearch.space.spaces import space_for
    info = get_device("cpu").info()
    space = space_for(kernel, info.target)
    early = {space.default(), *space.neighbours(space.default())}
    far = next(c for c in space.enumerate() if c not in early and space.adapt(c) == c and
               space.validate(c) is None)
    store.record(kernel_record(kernel),
                 DeviceRecord("cpu-elsewhere", "cpu", info.name, dict(info.as_dict(), isa="sse4")),
                 ResultRecord(config=json.loads(far.to_json()), time_s=1e-3, spread=0.0,
                              gflops=1.0, gbps=1.0, default_time_s=2e-3, speedup=2.0, trials=10,
                              sampler="tpe"))
    return far.to_json()


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
    if mode == "starts":
        with Store(db_url) as store:
            os.environ[FAST_CONFIG] = _store_elsewhere(store, kernels[0])
    measurer = {"dies": dies_once, "stalls": stalls, "starts": prefers_stored}[mode]
    ray.init(num_cpus=2, resources={"tunesearch-cpu": units}, include_dashboard=False,
             _temp_dir=ray_dir, log_to_driver=False, configure_logging=False)
    try:
        with Store(db_url) as store:
            report = run_cluster(kernels, "cpu", Budget(trials=4), store, "local",
                                 progress=False, model="three",
                                 measurer=measurer)
            found = [store.lookup(k.key, report.device_key) for k in kernels]
            stored = [r is not None for r in found]
            _, rows = LeaseBoard(store).leases(report.device_key)  # what tunesearch status shows
            leases = {row.kernel_key: row.state for row in rows}
    finally:
        ray.shutdown()
    Path(out).write_text(json.dumps({
        "statuses": [r.status for r in report.results], "stored": stored,
        "leases": [leases.get(k.key) for k in kernels],
        "notes": list(report.notes), "died": Path(os.environ[DIE_MARKER]).exists(),
        "interrupted": report.interrupted,
        "started_from": [r.started_from for r in report.results],
        "fast_config_won": bool(found[0]) and
        json.dumps(found[0].config, sort_keys=True) ==
        json.dumps(json.loads(os.environ.get(FAST_CONFIG, "null")), sort_keys=True)}))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], *sys.argv[5:])
