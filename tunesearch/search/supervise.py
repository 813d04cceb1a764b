"""Tuning with several worker processes, on this machine and on others, into one database:
`run_workers` spawns the processes on this machine, watches them, and reads the report back.

    report = run_workers(kernels, "cpu", Budget(trials=40), db_url="postgresql://db/ts",
                         n_workers=4, model="resnet50")

The kernels are registered as leases in the database (`tunesearch.db.leases`), then N processes
are spawned; each claims the heaviest kernel nobody holds, tunes it with `tune_kernels`
(renewing its lease from a background thread), marks it done, and takes the next, until no
kernel is waiting or running. The same call on another machine with the same device key joins
the same work. The Optuna studies live beside the database (`tunesearch.db.study_storage`), so
a worker that takes over the kernel of a dead worker (its lease expired) continues that study
from the trials already stored, and a kernel that dominates the model (more than `split_share`
of its time) gets one lease per worker, all adding trials to its one study.

When the database goes away (a server restart), workers retry for `db_wait_s` and go on, or
stop with one clear line; what was committed stays, and a lease released or left to expire is
taken up again. Workers on one machine share its cores: their timings are noisier than one
tuner's, so give each worker a core or two.

planning.py plans the leases and the job sent to each worker (WorkerJob, its device a
DeviceSpec); worker.py is one worker's loop, which ends with one WorkerReply (messages.py) on its
pipe; `tunesearch.db.studies` says where the studies live.
"""
from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Iterable, Mapping

from rich.console import Console

from tunesearch.db import DatabaseError, Store, study_storage
from tunesearch.db.leases import DEFAULT_TTL_S, DONE, FAILED, RUNNING, LeaseBoard
from tunesearch.graph.kernel import Kernel
from tunesearch.runtime.device import Device, get_device
from tunesearch.search._spawn import SPAWN
from tunesearch.search.capacity import check_workers
from tunesearch.search.messages import DeviceSpec, WorkerReply
from tunesearch.search.planning import (
    DB_WAIT_S, POLL_S, SPLIT_SHARE, MeasurerFactory, WorkerJob, default_measurer, plan_work,
)
from tunesearch.search.progress import describe
from tunesearch.search.results import Budget, KernelResult, TuneError, TuneReport
from tunesearch.search.samplers import DEFAULT_SAMPLER
from tunesearch.search.tune import check_arguments, unique_kernels
from tunesearch.search.worker import WorkerError, _worker_main
from tunesearch.space.config import Config, ConfigError


PRINT_EVERY_S = 2.0  # the finished kernels are read this often: the leases of every model


class _FinishedKernelPrinter:
    """Prints a line on stderr for each kernel as it is done, by whichever worker."""

    def __init__(self, board: LeaseBoard, device_key: str, kernels: dict[str, Kernel],
                 show: bool):
        self.board, self.device_key, self.kernels = board, device_key, kernels
        self.console = Console(stderr=True, highlight=False) if show else None
        self.reported: set[str] = set()

    def print_newly_finished(self) -> None:
        if self.console is None:
            return
        try:
            self._print_newly_finished()
        except DatabaseError:
            pass  # the workers wait for the database; so does the display

    def _print_newly_finished(self) -> None:
        _, rows = self.board.leases(self.device_key)
        leases: dict[str, list] = {}
        for row in rows:
            if row.kernel_key in self.kernels:
                leases.setdefault(row.kernel_key, []).append(row)
        states = {key: [row.state for row in rows] for key, rows in leases.items()}
        finished = {key for key, s in states.items() if all(x in (DONE, FAILED) for x in s)}
        running = sum(RUNNING in s for s in states.values())
        for key in sorted(finished - self.reported, key=list(self.kernels).index):
            self.reported.add(key)
            message = next((row.message for row in leases[key] if row.message), "")
            result = _kernel_result(self.board.store, self.kernels[key], 1, self.device_key,
                                    states[key], message)
            self.console.print(f"[{len(self.reported)}/{len(self.kernels)} done, {running} "
                               f"running] {describe(result)}", markup=False)


def _kernel_result(store: Store, kernel: Kernel, occurrences: int, device_key: str,
                   states: list[str], message: str) -> KernelResult:
    """What the database says about one kernel of this run."""
    base = KernelResult(kernel.key, kernel.name, "skipped", occurrences)
    record = store.lookup(kernel.key, device_key)
    if record is None:
        if states and all(state == FAILED for state in states):
            # a winner the database refused (tune_kernels' message) is counted as not saved
            saving = message if message.startswith("not saved:") else ""
            return replace(base, status="failed", message=message or "no config ran correctly",
                           save_error=saving.removeprefix("not saved:").strip())
        return replace(base, message=f"not finished: {', '.join(sorted(set(states)))}")
    try:
        config = Config.from_json(record.config)
    except ConfigError:
        config = None
    status = "stored" if message == "already in the database" else "tuned"
    if any(state not in (DONE, FAILED) for state in states):
        status, message = "interrupted", "the best so far; the next run continues its study"
    return KernelResult.from_record(kernel, occurrences, record, config, status,
                                    saved=status != "stored",
                                    message=message if status != "tuned" else "")


def _report(board: LeaseBoard, planned, device, interrupted: bool, seconds: float,
            notes: list[str]) -> TuneReport:
    info = device.info()
    _, rows = board.leases(info.key)
    by_kernel: dict[str, list] = {}
    for row in rows:
        by_kernel.setdefault(row.kernel_key, []).append(row)
    results = []
    for kernel, item in planned:
        leases = by_kernel.get(kernel.key, [])
        message = next((row.message for row in leases if row.message), "")
        results.append(_kernel_result(board.store, kernel, item.occurrences, info.key,
                                      [row.state for row in leases], message))
    return TuneReport(info.key, info.name, tuple(results), interrupted, seconds, tuple(notes))


def run_workers(kernels: Iterable, device: str | Device, budget: Budget = Budget(),
                sampler: str = DEFAULT_SAMPLER, seed: int = 0, db_url: str | None = None,
                n_workers: int = 2, *, model: str = "", retune: bool = False,
                weights: Mapping[str, float] | None = None, split_share: float = SPLIT_SHARE,
                ttl_s: float = DEFAULT_TTL_S, heartbeat_s: float | None = None,
                db_wait_s: float = DB_WAIT_S, progress: bool = True,
                measurer: MeasurerFactory | None = None,
                constants: Mapping[str, frozenset[int]] | None = None) -> TuneReport:
    """Tune kernels with `n_workers` spawned processes sharing the database `db_url` (see the
    module docstring); returns the TuneReport of every unique kernel, read from the database.

    model names the run for `tunesearch status`; weights (seconds per occurrence, by kernel key)
    decide the order, the trials per kernel and which kernels get a lease per worker. ttl_s is
    how long a dead worker's kernel stays locked; heartbeat_s (default ttl_s / 3) how often a
    lease is renewed. measurer(device, seed, n_workers) makes each worker's measurer (default:
    real measurements). constants: as for `tune_kernels`. Raises TuneError before anything
    runs for a bad budget, sampler, number of workers or device (the checks `tune_kernels`
    makes), and when every worker stopped with an error before the work was done.
    """
    dev = check_arguments(budget, sampler, device, n_workers)
    info = dev.info()
    start = time.monotonic()
    store = Store(db_url)
    if store.readonly:
        raise TuneError(f"cannot save: database {store.where} is read-only")
    try:
        check_workers(n_workers, store)
        planned = plan_work(kernels, budget, n_workers, weights, split_share)
        board = LeaseBoard(store, ttl_s=ttl_s)
        board.register(model, info.key, [item for _, item in planned], retune=retune)
        # the studies' tables exist before the workers race to create them
        study_storage(store.url).engine.dispose()
        deadline = time.time() + budget.total_seconds if budget.total_seconds else None
        job = WorkerJob(store.url, DeviceSpec.of(device), tuple(k for k, _ in planned),
                        budget, sampler, seed, n_workers, ttl_s, heartbeat_s or ttl_s / 3,
                        db_wait_s, min(POLL_S, ttl_s / 4), deadline,
                        measurer or default_measurer, dict(constants or {}))
        printer = _FinishedKernelPrinter(board, info.key, {k.key: k for k, _ in planned},
                                         progress)
        interrupted, replies = False, {}
        processes = []
        for _ in range(n_workers):
            receive, send = SPAWN.Pipe(duplex=False)
            process = SPAWN.Process(target=_worker_main, args=(job, send, os.getpid()),
                                    daemon=False)
            process.start()
            send.close()
            processes.append((process, receive))
        shown = time.monotonic()
        try:
            while any(process.is_alive() for process, _ in processes):
                for process, receive in processes:
                    if process.pid not in replies and receive.poll():
                        replies[process.pid] = _receive(receive)
                if time.monotonic() - shown >= PRINT_EVERY_S:
                    printer.print_newly_finished()
                    shown = time.monotonic()
                time.sleep(0.25)
        except KeyboardInterrupt:  # the workers got it too: they save and release their leases
            interrupted = True
            for process, _ in processes:
                process.join(timeout=30)
        for process, receive in processes:
            if process.is_alive():
                process.terminate()
                process.join()
            if process.pid not in replies and receive.poll():
                replies[process.pid] = _receive(receive)
        printer.print_newly_finished()
        notes, errors = _exits(processes, replies)
        report = _report(board, planned, dev, interrupted or any(
            reply.outcome == "interrupted" for reply in replies.values()),
            time.monotonic() - start, notes)
    finally:
        store.close()
    unfinished = [r for r in report.results if r.status == "skipped"]
    if errors and unfinished and not report.interrupted and len(errors) == n_workers:
        raise WorkerError(f"every worker stopped, {len(unfinished)} kernel(s) not tuned: "
                          f"{errors[0]}")
    return report


def open_leases(store: Store, device: str | Device, kernels: Iterable) -> int:
    """Leases of these kernels on this device that are waiting or running in the store: work
    that `tune` on other machines started, which a `tune --workers 1` joins instead of tuning
    every kernel again on its own."""
    key = (get_device(device) if isinstance(device, str) else device).info().key
    keys = [kernel.key for kernel, _ in unique_kernels(kernels)]
    try:
        return LeaseBoard(store).pending(key, keys) if keys else 0
    except DatabaseError:
        return 0


def _receive(receive) -> WorkerReply:
    try:
        return receive.recv()
    except (EOFError, OSError):  # it exited without a word: killed
        return WorkerReply("died")


def _exits(processes, replies: dict[int, WorkerReply]) -> tuple[list[str], list[str]]:
    """Notes about workers that did not end well, and the error messages among them."""
    notes, errors = [], []
    for process, _ in processes:
        reply = replies.get(process.pid, WorkerReply("died"))
        if reply.outcome == "ok":
            continue
        if reply.outcome == "error":
            errors.append(reply.message)
            notes.append(f"worker {process.pid} stopped: {reply.message}")
        elif reply.outcome == "died":
            code = process.exitcode
            how = f"signal {-code}" if code is not None and code < 0 else f"exit status {code}"
            notes.append(f"worker {process.pid} died ({how}); a lease it held expires and is "
                         "taken over")
            errors.append(f"worker {process.pid} died ({how})")
    return notes, errors
