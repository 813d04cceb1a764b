"""Tuning a list of kernels (a schedule, a model) on one device, and saving the winners.

    report = tune_kernels([item.kernel for item in schedule], "cpu", Budget(trials=50),
                          store=Store())
    print(report.to_json())

Each kernel is tuned once however often it appears. Kernels the store already has a result for on
this device are skipped unless retune=True. The default config of every kernel is measured first;
the budget then goes where the run time is: a kernel's share is its default time times its
number of occurrences. A search starts from what the store holds for the kernel on the nearest
other devices and for kernels like it (search/starts.py). Each result is written to the store as
soon as it is final, so Ctrl-C loses nothing already found: the kernel being tuned keeps its best
so far and the run stops.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping

from tunesearch.db import DatabaseError, KernelRecord, ResultRecord, TrialRecord
from tunesearch.errors import ctrl_c_pressed
from tunesearch.graph.kernel import Kernel
from tunesearch.runtime.device import Device, DeviceUnavailable, get_device
from tunesearch.search.measure import DeviceMeasurer, Measurer
from tunesearch.search.messages import DeviceSpec
from tunesearch.search.progress import Progress, RichProgress
from tunesearch.search.results import (Budget, KernelResult, MeasureResult, SearchResult,
                                       TuneError, TuneReport)
from tunesearch.search.samplers import DEFAULT_SAMPLER, SAMPLERS
from tunesearch.search.saving import check_writable, device_record
from tunesearch.search.starts import Starts, find_starts
from tunesearch.search.trust import Stored, stored_result, weigh_claimed
from tunesearch.search.study import search_kernel
from tunesearch.space.config import SPACE_VERSION
from tunesearch.space.spaces import Space, space_for


@dataclass
class _Job:
    kernel: Kernel
    occurrences: int
    space: Space
    default: MeasureResult | None = None
    starts: Starts = Starts()  # winners stored for it elsewhere, to try early (search/starts.py)
    stored: Stored = Stored()  # what the store holds for it (see search/trust.py)

    @property
    def weight(self) -> float:
        return self.occurrences * self.default.time_s if self.default and self.default.ok else 0.0

    @property
    def single(self) -> bool:
        return all(len(p.choices) <= 1 for p in self.space.parameters())


def unique_kernels(kernels: Iterable) -> list[tuple[Kernel, int]]:
    """(kernel, occurrences) by key, in order of first appearance; schedule items are accepted.
    A kernel with an empty output (a zero-size tensor) computes nothing and is left out."""
    counts: dict[str, list] = {}
    for item in kernels:
        kernel = getattr(item, "kernel", item)
        if kernel.buffers[0].size == 0:
            continue
        if kernel.key in counts:
            counts[kernel.key][1] += 1
        else:
            counts[kernel.key] = [kernel, 1]
    return [(kernel, n) for kernel, n in counts.values()]


def open_device(device: str | Device | DeviceSpec) -> Device:
    """The device to tune on; TuneError (one line) where it cannot be used here."""
    if not isinstance(device, (str, DeviceSpec)):
        return device
    try:
        return get_device(device) if isinstance(device, str) else device.open()
    except (DeviceUnavailable, ImportError) as exc:
        name = device if isinstance(device, str) else device.name
        raise TuneError(f"cannot tune on device {name!r}: {exc}") from None


def check_arguments(budget: Budget, sampler: str, device: str | Device | DeviceSpec,
                    n_workers: int = 1) -> Device:
    """The device to tune on, once the budget, the sampler and the number of worker processes
    are known to be good: TuneError (one line) for the first that is not, before any work."""
    problem = budget.problem()
    if problem:
        raise TuneError(problem)
    if sampler not in SAMPLERS:
        raise TuneError(f"unknown sampler {sampler!r}; known samplers: {', '.join(SAMPLERS)}")
    if n_workers < 1:
        raise TuneError(f"--workers must be at least 1, not {n_workers}")
    return open_device(device)


def _result(job: _Job, search: SearchResult | None, status: str) -> KernelResult:
    """What tuning one kernel found (search is None for a one-config space)."""
    kernel, measured = job.kernel, job.default
    if search is not None:
        base = KernelResult(kernel.key, kernel.name, status, job.occurrences,
                            trials=search.measured, failures=search.failures(),
                            sampler=search.sampler, seconds=search.seconds,
                            stopped_by=search.stopped_by)
        best, default = search.best, search.default
    else:
        base = KernelResult(kernel.key, kernel.name, status, job.occurrences,
                            trials=1 if measured else 0, sampler="none",
                            failures={measured.error: 1} if measured and measured.error else {})
        best = default = measured
    if best is None or not best.ok:
        reason = measured.message if measured and measured.error else ""
        return replace(base, status="failed" if status != "interrupted" else status,
                       message=f"no config ran correctly. {reason}".strip())
    default_s = default.time_s if default is not None and default.ok else None
    return replace(base, config=best.config, time_s=best.time_s, spread=best.spread,
                   gflops=kernel.flops / best.time_s / 1e9, gbps=kernel.bytes / best.time_s / 1e9,
                   default_time_s=default_s,
                   speedup=default_s / best.time_s if default_s else None)


def _save(store, device: Device, job: _Job, result: KernelResult,
          search: SearchResult | None) -> KernelResult:
    """Write one kernel's result (and its measured trials) to the store."""
    kernel, info = job.kernel, device.info()
    trials = []
    if search is not None:
        for t in search.trials:
            if t.measured:
                error = f"{t.result.error}: {t.result.message}"[:500] if t.result.error else None
                trials.append(TrialRecord(t.number, json.loads(t.result.config.to_json()),
                                          t.result.time_s, error, t.finished))
    record = ResultRecord(  # 0.0 stands for "unknown": the default config did not run
        config=json.loads(result.config.to_json()), time_s=result.time_s,
        spread=result.spread, gflops=result.gflops, gbps=result.gbps,
        default_time_s=result.default_time_s or 0.0, speedup=result.speedup or 0.0,
        trials=result.trials, sampler=result.sampler)
    saved = store.record(kernel_record(kernel),
                         device_record(info),
                         record, trials=trials, supersede=job.stored.supersede)
    return replace(result, saved=bool(saved))


def kernel_record(kernel: Kernel) -> KernelRecord:
    """The database's record of a kernel."""
    return KernelRecord(kernel.key, kernel.name, kernel.canonical(), kernel.ops_summary(),
                        "x".join(map(str, kernel.domain)), SPACE_VERSION)


def _default(job: _Job, measurer: Measurer) -> MeasureResult:
    default = job.space.default()
    reason = job.space.validate(default)
    if reason:
        return MeasureResult.failed(default, "invalid", f"the default config: {reason}")
    return measurer.measure(job.kernel, [default])[0]


def tune_kernels(kernels: Iterable, device: str | Device, budget: Budget = Budget(),
                 sampler: str = DEFAULT_SAMPLER, seed: int = 0, store=None,
                 progress: bool | Progress = True, retune: bool = False,
                 on_result: Callable[[KernelResult], None] | None = None, *,
                 measurer: Measurer | None = None, storage: str | None = None,
                 model: str = "", constants: Mapping[str, frozenset[int]] | None = None,
                 starts: Mapping[str, Starts] | None = None) -> TuneReport:
    """Tune every unique kernel on device; returns a TuneReport (see the module docstring).

    store: a tunesearch.db.Store to skip known kernels and save winners (None: save nothing).
    progress: True draws with rich on stderr, False is quiet, or a Progress of your own.
    measurer: DeviceMeasurer(device, seed=seed) unless given (e.g. a SimulatedMeasurer).
    storage: an Optuna storage URL for the studies (None: in memory).
    model: a name under which the store remembers these kernels and their occurrences, for
    `tunesearch report` to draw the model (as `run_workers` does).
    constants: by kernel key, the input buffers that hold weights where the kernels run (see
    OnnxModel.constant_inputs); candidates are timed with those packed ahead, as a model's plan
    runs them, so a winner is chosen for the work the model does per call.
    starts: by kernel key, where searches start besides the default, for a caller that holds
    the store while this runs without one (a cluster's node); with a store they are looked up
    here, each just before its kernel's search.
    Raises TuneError, with one line for the user, for an unavailable device, a zero budget or an
    unknown sampler, and DatabaseError for a store that cannot be written, before anything is
    measured. A result the store refuses later is reported with its save_error.
    """
    dev = check_arguments(budget, sampler, device)
    info = dev.info()
    if store is not None:
        check_writable(store, dev)  # refused now, not after the search
    start = time.monotonic()
    view = progress if isinstance(progress, Progress) else \
        RichProgress() if progress else Progress()
    own_measurer = measurer is None
    measurer = measurer or DeviceMeasurer(dev, seed=seed)
    if constants:
        measurer.use_constants(constants)
    jobs = [_Job(kernel, n, space_for(kernel, info.target, (constants or {}).get(kernel.key,
                                                                                 frozenset())))
            for kernel, n in unique_kernels(kernels)]
    if store is not None and model:
        from tunesearch.db.leases import WorkItem, register_model
        register_model(store, model, info.key,
                       [WorkItem(j.kernel.key, j.kernel.name, j.occurrences) for j in jobs])
    results: dict[str, KernelResult] = {}
    notes: list[str] = []
    interrupted = False

    def finish(result: KernelResult) -> None:
        results[result.kernel_key] = result
        view.kernel_done(result)
        if on_result is not None:
            on_result(result)

    try:
        todo = []
        for job in jobs:
            if store is not None and not retune:
                job.stored = stored_result(store, job.kernel, info.key, job.space)
                if job.stored.note:
                    notes.append(job.stored.note)
            if job.stored.skip:
                # the store's result, its config validated by search/trust.py
                finish(KernelResult.from_record(
                    job.kernel, job.occurrences, job.stored.record, job.stored.config,
                    "stored", message="already in the database (retune=True tunes it again)"))
            else:
                todo.append(job)
        for i, job in enumerate(todo):
            view.defaults(i, len(todo), job.kernel.name)
            job.default = _default(job, measurer)
        # the heaviest first: if the run is cut short, the kernels that matter are done
        todo.sort(key=lambda j: -j.weight)
        fallback = max((j.weight for j in todo), default=0.0) or 1.0
        weights = [j.weight or fallback for j in todo]  # a failing default still deserves a search
        trials_left = budget.trials * len(todo) if budget.trials is not None else None
        for i, job in enumerate(todo):
            if ctrl_c_pressed():  # its KeyboardInterrupt may have been dropped (see errors.py)
                interrupted = True
                break
            share = weights[i] / sum(weights[i:])
            if store is not None:  # looked up now: kernels tuned earlier in this run count
                job.starts = find_starts(store, kernel_record(job.kernel), job.space,
                                         device_record(info))
            elif starts:
                job.starts = starts.get(job.kernel.key, Starts())
            result, search = _tune_one(job, i, len(todo), measurer, budget, share, trials_left,
                                       len(todo) - i - 1, start, sampler, seed, storage,
                                       info.key, view)
            if search is not None:
                notes += [n for n in search.notes if n not in notes]
                if trials_left is not None:
                    trials_left = max(0, trials_left - search.measured)
            if job.stored.claimed is not None and result.status != "interrupted":
                result = weigh_claimed(job.kernel, job.stored.claimed, measurer, result)
            if store is not None and result.time_s is not None:
                try:
                    result = _save(store, dev, job, result, search)
                except DatabaseError as exc:
                    result = replace(result, message=f"not saved: {exc}", save_error=str(exc))
            finish(result)
            if result.status == "interrupted":
                interrupted = True
                break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if own_measurer:
            measurer.close()
        for note in notes:
            view.note(note)
        view.close()
    ordered = [results.get(job.kernel.key) or KernelResult(
        job.kernel.key, job.kernel.name, "skipped", job.occurrences,
        message="the run was interrupted before this kernel") for job in jobs]
    return TuneReport(info.key, info.name, tuple(ordered), interrupted,
                      time.monotonic() - start, tuple(notes))


def _tune_one(job: _Job, index: int, total: int, measurer: Measurer, budget: Budget,
              share: float, trials_left: int | None, after: int, start: float, sampler: str,
              seed: int, storage: str | None, device_key: str, view: Progress
              ) -> tuple[KernelResult, SearchResult | None]:
    """Search one kernel with its share of what is left of the budget (`after` kernels are
    still to come, and each keeps a floor of a quarter of the per-kernel trials)."""
    if job.single:
        view.kernel_start(index, total, job.kernel.name, 1, None)
        return _result(job, None, "single"), None
    trials = None
    if trials_left is not None:
        floor = max(1, budget.trials // 4)  # no kernel is left with nothing
        trials = max(floor, round(max(0, trials_left - floor * after) * share))
    seconds = budget.seconds
    if budget.total_seconds is not None:
        left = max(0.0, budget.total_seconds - (time.monotonic() - start))
        seconds = min(seconds, left * share) if seconds is not None else left * share
    default_s = job.default.time_s if job.default and job.default.ok else None
    view.kernel_start(index, total, job.kernel.name, trials, default_s)
    search = search_kernel(
        job.kernel, job.space, measurer, replace(budget, trials=trials, seconds=seconds),
        sampler, seed, storage=storage, device_key=device_key, default_result=job.default,
        on_trial=lambda trial, best, measured: view.trial(measured, best.time_s if best else None),
        first=job.starts.first, starts=job.starts.later)
    status = "interrupted" if search.stopped_by == "interrupted" else "tuned"
    return replace(_result(job, search, status), started_from=job.starts.source), search


def keep_defaults(store, device, kernels: dict, results, constants: dict | None = None
                  ) -> list[str]:
    """Put each result's default config in the database in place of its winner (one that ran
    slower inside its model, search/in_model.py losers); returns the keys done. `kernels`
    maps keys to Kernel objects, `constants` keys to the input buffers that hold weights
    (Model.constant_inputs)."""
    info = device.info()
    done = []
    for r in results:
        kernel = kernels.get(r.kernel_key)
        if kernel is None or not r.default_time_s:
            continue
        default = space_for(kernel, info.target,
                            (constants or {}).get(r.kernel_key, frozenset())).default()
        if r.config == default:
            continue
        t = r.default_time_s
        record = ResultRecord(
            config=json.loads(default.to_json()), time_s=t, spread=0.0,
            gflops=kernel.flops / t / 1e9, gbps=kernel.bytes / t / 1e9, default_time_s=t,
            speedup=1.0, trials=r.trials, sampler=f"{r.sampler}; default kept in the model")
        store.record(kernel_record(kernel),
                     device_record(info), record,
                     supersede=True)
        done.append(kernel.key)
    return done
