"""Planning a run with worker processes: the leases to register for a list of kernels
(`plan_work`) and the job each worker process is sent (`WorkerJob`), with its defaults."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from tunesearch.db.leases import DEFAULT_TTL_S, WorkItem
from tunesearch.graph.kernel import Kernel
from tunesearch.runtime.device import Device
from tunesearch.search._spawn import machine_cores
from tunesearch.search.measure import DeviceMeasurer, Measurer
from tunesearch.search.messages import DeviceSpec
from tunesearch.search.results import Budget
from tunesearch.search.tune import unique_kernels

DB_WAIT_S = 60.0      # how long a worker waits for an unreachable database before it stops
POLL_S = 1.0          # how often an idle worker looks for a lease that expired
SPLIT_SHARE = 0.5     # a kernel with more than this share of the model's time gets N leases

# (device, seed, workers on this machine) -> the measurer one worker uses for all its kernels
MeasurerFactory = Callable[[Device, int, int], Measurer]


def default_measurer(device: Device, seed: int, n_workers: int) -> Measurer:
    """Real measurements, the machine's compile processes shared out between the workers."""
    return DeviceMeasurer(device, seed=seed, compile_workers=max(1, machine_cores() // n_workers))


def plan_work(kernels: Iterable, budget: Budget, n_workers: int,
              weights: Mapping[str, float] | None = None,
              split_share: float = SPLIT_SHARE) -> list[tuple[Kernel, WorkItem]]:
    """The leases to register: one per unique kernel, or `n_workers` for a kernel whose share
    of the model's time exceeds `split_share`, each with its share of the trials.

    weights: seconds per occurrence of each kernel key (the default configs' times, e.g. from a
    profile); without them every occurrence counts the same. As in `tune_kernels`, trials times
    the number of kernels is shared out by time, with a floor of a quarter of the trials each.
    """
    unique = unique_kernels(kernels)
    raw = {kernel.key: occurrences * (weights.get(kernel.key, 0.0) if weights else 1.0)
           for kernel, occurrences in unique}
    total = sum(raw.values()) or 1.0
    planned = []
    for kernel, occurrences in unique:
        share = raw[kernel.key] / total
        slots = n_workers if n_workers > 1 and share > split_share else 1
        trials = 0
        if budget.trials is not None:
            per_kernel = max(max(1, budget.trials // 4), round(budget.trials * len(unique) * share))
            trials = -(-per_kernel // slots)
        planned.append((kernel, WorkItem(kernel.key, kernel.name, occurrences, share, slots,
                                         trials)))
    return planned


@dataclass(frozen=True)
class WorkerJob:
    """Everything a worker process needs; sent to it pickled (its reply: WorkerReply)."""
    db_url: str
    device: DeviceSpec
    kernels: tuple[Kernel, ...]
    budget: Budget
    sampler: str
    seed: int
    n_workers: int = 1
    ttl_s: float = DEFAULT_TTL_S
    heartbeat_s: float = DEFAULT_TTL_S / 3
    db_wait_s: float = DB_WAIT_S
    poll_s: float = POLL_S
    deadline: float | None = None  # time.time() after which no new lease is claimed
    measurer: MeasurerFactory = default_measurer
    constants: Mapping[str, frozenset[int]] = field(default_factory=dict)  # see tune_kernels
