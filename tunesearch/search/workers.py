"""Tuning with several worker processes, on this machine and on others, into one database.

    report = run_workers(kernels, "cpu", Budget(trials=40), db_url="postgresql://db/ts",
                         n_workers=4, model="resnet50")

The kernels are registered as leases in the database (`tunesearch.db.leases`), then N processes
are spawned; each claims the heaviest kernel nobody holds, tunes it with `tune_kernels`
(renewing its lease from a background thread), marks it done, and takes the next, until no
kernel is waiting or running. The same call on another machine with the same device key joins
the same work. The Optuna studies live beside the database (`study_storage`), so a worker that
takes over the kernel of a dead worker (its lease expired) continues that study from the trials
already stored, and a kernel that dominates the model (more than `split_share` of its time) gets
one lease per worker, all adding trials to its one study.

When the database goes away (a server restart), workers retry for `db_wait_s` and go on, or
stop with one clear line; what was committed stays, and a lease released or left to expire is
taken up again. Workers on one machine share its cores: their timings are noisier than one
tuner's, so give each worker a core or two.
"""
from __future__ import annotations

import _thread
import multiprocessing
import sys
import threading
import time
import traceback
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping

import optuna
from optuna.trial import TrialState
from rich.console import Console
from sqlalchemy import event
from sqlalchemy import exc as sa_exc

from tunesearch.db import DatabaseError, Store, default_url
from tunesearch.db.leases import (
    DEFAULT_TTL_S, DONE, FAILED, RUNNING, WAITING, Claim, LeaseBoard, WorkItem,
    ensure_studies_schema, studies_url, worker_id,
)
from tunesearch.graph.kernel import Kernel
from tunesearch.runtime.device import Device
from tunesearch.search.measure import DeviceMeasurer, Measurer
from tunesearch.search.progress import Progress, describe
from tunesearch.search.results import Budget, KernelResult, TuneError, TuneReport
from tunesearch.search.runner import machine_cores
from tunesearch.search.samplers import DEFAULT_SAMPLER, SAMPLERS
from tunesearch.search.study import study_name
from tunesearch.search.tune import _device, tune_kernels, unique_kernels
from tunesearch.space.config import Config, ConfigError

DB_WAIT_S = 60.0      # how long a worker waits for an unreachable database before it stops
POLL_S = 1.0          # how often an idle worker looks for a lease that expired
SPLIT_SHARE = 0.5     # a kernel with more than this share of the model's time gets N leases
MAX_ATTEMPTS = 3      # claims of one lease that end in an error before it is marked failed
_SPAWN = multiprocessing.get_context("spawn")

# (device, seed, workers on this machine) -> the measurer one worker uses for all its kernels
MeasurerFactory = Callable[[Device, int, int], Measurer]


class WorkerError(TuneError):
    """A worker cannot go on (the database stayed unreachable); the message is one line."""


def default_measurer(device: Device, seed: int, n_workers: int) -> Measurer:
    """Real measurements, the machine's compile processes shared out between the workers."""
    return DeviceMeasurer(device, seed=seed, compile_workers=max(1, machine_cores() // n_workers))


# -- the studies' storage --------------------------------------------------------------------

def _serialize_sqlite(engine) -> None:
    """SQLite for several processes: WAL, a long busy timeout, and BEGIN IMMEDIATE, so that a
    transaction that reads then writes queues for the lock instead of failing when it upgrades.
    synchronous=NORMAL: Optuna commits once per parameter, and a crashed process loses nothing
    committed in WAL mode without an fsync per commit (only a power cut may)."""
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None
        dbapi_connection.execute("PRAGMA busy_timeout = 60000")
        dbapi_connection.execute("PRAGMA journal_mode = WAL")
        dbapi_connection.execute("PRAGMA synchronous = NORMAL")

    @event.listens_for(engine, "begin")
    def _on_begin(connection):
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections opened before the events were installed go


def study_storage(db_url: str | None = None) -> optuna.storages.RDBStorage:
    """The Optuna storage of the studies that belong to database `db_url` (default: the
    default database): see `tunesearch.db.leases.studies_url` for where they are."""
    db_url = db_url or default_url()
    url = studies_url(db_url)
    if url.startswith("postgresql"):
        with Store(db_url) as store:
            ensure_studies_schema(store)
    sqlite = url.startswith("sqlite")
    engine_kwargs: dict = {"pool_pre_ping": True}
    if sqlite:
        engine_kwargs["connect_args"] = {"timeout": 60}
    for attempt in range(3):  # first use by several processes at once: one creates the tables
        try:
            storage = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
            break
        except Exception:  # noqa: BLE001  (optuna raises a variety here; the last one counts)
            if attempt == 2:
                raise
            time.sleep(0.5 * (attempt + 1))
    if sqlite:
        _serialize_sqlite(storage.engine)
    return storage


def _fail_running_trials(storage, name: str) -> None:
    """Close the trials a dead worker left RUNNING in a study, so none stays open forever."""
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)


# -- planning --------------------------------------------------------------------------------

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


# -- one worker ------------------------------------------------------------------------------

@dataclass(frozen=True)
class WorkerJob:
    """Everything a worker process needs; sent to it pickled."""
    db_url: str
    device: str | Device
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


def _transient(err: BaseException) -> bool:
    """True when err (or what caused it) is the database connection failing: worth a wait."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, (sa_exc.OperationalError, sa_exc.InterfaceError,
                            sa_exc.DisconnectionError)):
            return True
        if type(err).__name__ == "OperationalError":  # a driver's own (psycopg, sqlite3)
            return True
        err = err.__cause__ or err.__context__
    return False


def _retrying(job: WorkerJob, what: str, action: Callable):
    """action(), retried with backoff while the database is unreachable, for db_wait_s."""
    deadline, delay = time.monotonic() + job.db_wait_s, 0.25
    while True:
        try:
            return action()
        except Exception as err:  # noqa: BLE001  (only connection failures are retried)
            if not _transient(err):
                raise
            if time.monotonic() >= deadline:
                raise WorkerError(f"cannot {what}: the database did not answer for "
                                  f"{job.db_wait_s:.0f} s ({str(err).splitlines()[0]})") from err
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


class _TrialCounter(Progress):
    """Counts the trials measured for a lease, so the heartbeat can record them."""

    def __init__(self, base: int):
        self.base = self.value = base

    def trial(self, measured: int, best_s: float | None) -> None:
        self.value = self.base + measured


class _Heartbeat:
    """Renews a lease every few seconds while the main thread tunes. A renewal refused (the
    lease expired and another worker took it) stops the tuning with a KeyboardInterrupt in the
    main thread; a database that does not answer is tried again at the next beat."""

    def __init__(self, board: LeaseBoard, claim: Claim, counter: _TrialCounter, every_s: float):
        self.board, self.claim, self.counter, self.every_s = board, claim, counter, every_s
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._interrupt = threading.current_thread() is threading.main_thread()
        self._thread = threading.Thread(target=self._run, name="lease-heartbeat", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                held = self.board.renew(self.claim, self.counter.value)
            except Exception:  # noqa: BLE001  (the database is away; the lease holds its TTL)
                continue
            if not held:
                self.lost.set()
                if self._interrupt and not self._stop.is_set():
                    _thread.interrupt_main()
                return


class _Worker:
    """The loop of one worker: claim, tune, finish, until nothing is left."""

    def __init__(self, job: WorkerJob, name: str):
        self.job, self.name = job, name
        self.device = _device(job.device)
        self.device_key = self.device.info().key
        self.kernels = {kernel.key: kernel for kernel in job.kernels}
        self.store = _retrying(job, f"open {job.db_url}", lambda: Store(job.db_url))
        self.board = LeaseBoard(self.store, ttl_s=job.ttl_s)
        self.storage = None
        self.errors: dict[int, int] = {}  # lease id -> claims that ended in an error

    def run(self) -> int:
        """Tune until no lease of these kernels is waiting or running; returns leases done."""
        done = 0
        measurer = self.job.measurer(self.device, self.job.seed, self.job.n_workers)
        try:
            while self.job.deadline is None or time.time() < self.job.deadline:
                claim = _retrying(self.job, "claim a kernel", lambda: self.board.claim(
                    self.name, self.device_key, self.kernels))
                if claim is None:
                    left = _retrying(self.job, "read the leases", lambda: self.board.pending(
                        self.device_key, self.kernels))
                    if left == 0:
                        break
                    time.sleep(self.job.poll_s)  # others hold the rest; one may die
                    continue
                done += self._tune(claim, measurer) == DONE
        finally:
            measurer.close()
            self.store.close()
            if self.storage is not None:
                self.storage.engine.dispose()
        return done

    def _finish(self, claim: Claim, state: str, trials: int, message: str = "") -> str:
        _retrying(self.job, "finish a lease", lambda: self.board.finish(
            claim, state, trials=trials, message=message))
        return state

    def _tune(self, claim: Claim, measurer: Measurer) -> str:
        """Tune the kernel of one claim; returns the state the lease was left in."""
        job, kernel = self.job, self.kernels[claim.kernel_key]
        if self.storage is None:
            self.storage = _retrying(job, "open the studies", lambda: study_storage(job.db_url))
        if claim.taken_over and claim.slots == 1:  # the dead worker's open trials are closed
            _retrying(job, "close a dead worker's trials", lambda: _fail_running_trials(
                self.storage, study_name(kernel, claim.device_key)))
        trials = None
        if job.budget.trials is not None:  # the trials its earlier holders measured count
            trials = max(1, claim.budget - claim.trials) if claim.budget else job.budget.trials
        seconds = job.budget.seconds
        if job.deadline is not None:
            left = max(1.0, job.deadline - time.time())
            seconds = min(seconds, left) if seconds is not None else left
        budget = replace(job.budget, trials=trials, seconds=seconds, total_seconds=None)
        counter = _TrialCounter(claim.trials)
        beat = _Heartbeat(self.board, claim, counter, job.heartbeat_s)
        try:
            with beat:
                report = tune_kernels([kernel], self.device, budget, job.sampler,
                                      job.seed + claim.slot, store=self.store, progress=counter,
                                      retune=True, measurer=measurer, storage=self.storage)
        except KeyboardInterrupt:
            if not beat.lost.is_set():
                self._finish(claim, WAITING, counter.value, "interrupted")
                raise
            return RUNNING  # lost: the worker that took the lease over finishes it
        except TuneError:
            self._finish(claim, WAITING, counter.value)
            raise
        except Exception as err:  # noqa: BLE001  (failures are data: the lease records them)
            message = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            if _transient(err):
                self.storage = None  # a fresh connection pool once the database is back
                return self._retry_later(claim, counter.value, message)
            traceback.print_exc(file=sys.stderr)
            return self._finish(claim, FAILED, counter.value, message)
        if beat.lost.is_set():
            return RUNNING
        if report.interrupted:
            self._finish(claim, WAITING, counter.value, "interrupted")
            raise KeyboardInterrupt
        [result] = report.results
        stored = _retrying(job, "read a result", lambda: self.store.lookup(
            kernel.key, claim.device_key))
        if stored is not None:
            return self._finish(claim, DONE, counter.value)
        if result.status == "failed":
            return self._finish(claim, FAILED, counter.value, result.message)
        return self._retry_later(claim, counter.value, result.message or "not saved")

    def _retry_later(self, claim: Claim, trials: int, message: str) -> str:
        """Release a lease after an error so any worker can continue it, a few times at most."""
        self.errors[claim.lease_id] = self.errors.get(claim.lease_id, 0) + 1
        state = FAILED if self.errors[claim.lease_id] >= MAX_ATTEMPTS else WAITING
        return self._finish(claim, state, trials, message)


def work(job: WorkerJob, name: str | None = None) -> int:
    """Run one worker in this process (what each spawned process does); returns leases done."""
    return _Worker(job, name or worker_id()).run()


def _worker_main(job: WorkerJob, conn) -> None:
    """The entry point of a spawned worker: reports one message on its own pipe, then exits."""
    try:
        done = work(job)
    except KeyboardInterrupt:
        conn.send(("interrupted", ""))
        sys.exit(130)
    except (TuneError, DatabaseError) as err:
        print(f"tunesearch worker: error: {err}", file=sys.stderr)
        conn.send(("error", str(err)))
        sys.exit(3)
    except BaseException as err:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        conn.send(("error", f"{type(err).__name__}: {err}"))
        sys.exit(1)
    conn.send(("ok", done))


# -- the processes on this machine -----------------------------------------------------------

class _Watch:
    """Prints a line on stderr for each kernel as it is done, by whichever worker."""

    def __init__(self, board: LeaseBoard, device_key: str, kernels: dict[str, Kernel],
                 show: bool):
        self.board, self.device_key, self.kernels = board, device_key, kernels
        self.console = Console(stderr=True, highlight=False) if show else None
        self.reported: set[str] = set()

    def poll(self) -> None:
        if self.console is None:
            return
        try:
            self._poll()
        except DatabaseError:
            pass  # the workers wait for the database; so does the display

    def _poll(self) -> None:
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
    return replace(base, status=status, config=config, time_s=record.time_s,
                   spread=record.spread, gflops=record.gflops, gbps=record.gbps,
                   default_time_s=record.default_time_s or None, speedup=record.speedup or None,
                   trials=record.trials, sampler=record.sampler, saved=status != "stored",
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
                measurer: MeasurerFactory | None = None) -> TuneReport:
    """Tune kernels with `n_workers` spawned processes sharing the database `db_url` (see the
    module docstring); returns the TuneReport of every unique kernel, read from the database.

    model names the run for `tunesearch status`; weights (seconds per occurrence, by kernel key)
    decide the order, the trials per kernel and which kernels get a lease per worker. ttl_s is
    how long a dead worker's kernel stays locked; heartbeat_s (default ttl_s / 3) how often a
    lease is renewed. measurer(device, seed, n_workers) makes each worker's measurer (default:
    real measurements). Raises TuneError before anything runs for a bad budget, sampler or
    device, and when every worker stopped with an error before the work was done.
    """
    problem = budget.problem()
    if problem:
        raise TuneError(problem)
    if sampler not in SAMPLERS:
        raise TuneError(f"unknown sampler {sampler!r}; known samplers: {', '.join(SAMPLERS)}")
    if n_workers < 1:
        raise TuneError(f"--workers must be at least 1, not {n_workers}")
    dev = _device(device)
    info = dev.info()
    start = time.monotonic()
    store = Store(db_url)
    if store.readonly:
        raise TuneError(f"cannot save: database {store.where} is read-only")
    try:
        planned = plan_work(kernels, budget, n_workers, weights, split_share)
        board = LeaseBoard(store, ttl_s=ttl_s)
        board.register(model, info.key, [item for _, item in planned], retune=retune)
        # the studies' tables exist before the workers race to create them
        study_storage(store.url).engine.dispose()
        deadline = time.time() + budget.total_seconds if budget.total_seconds else None
        job = WorkerJob(store.url, device, tuple(kernel for kernel, _ in planned), budget,
                        sampler, seed, n_workers, ttl_s, heartbeat_s or ttl_s / 3, db_wait_s,
                        min(POLL_S, ttl_s / 4), deadline, measurer or default_measurer)
        watch = _Watch(board, info.key, {k.key: k for k, _ in planned}, progress)
        interrupted, replies = False, {}
        processes = []
        for _ in range(n_workers):
            receive, send = _SPAWN.Pipe(duplex=False)
            process = _SPAWN.Process(target=_worker_main, args=(job, send), daemon=False)
            process.start()
            send.close()
            processes.append((process, receive))
        try:
            while any(process.is_alive() for process, _ in processes):
                for process, receive in processes:
                    if process.pid not in replies and receive.poll():
                        replies[process.pid] = _receive(receive)
                watch.poll()
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
        watch.poll()
        notes, errors = _exits(processes, replies)
        report = _report(board, planned, dev, interrupted or any(
            kind == "interrupted" for kind, _ in replies.values()), time.monotonic() - start,
            notes)
    finally:
        store.close()
    unfinished = [r for r in report.results if r.status == "skipped"]
    if errors and unfinished and not report.interrupted and len(errors) == n_workers:
        raise WorkerError(f"every worker stopped, {len(unfinished)} kernel(s) not tuned: "
                          f"{errors[0]}")
    return report


def _receive(receive) -> tuple[str, object]:
    try:
        return receive.recv()
    except (EOFError, OSError):  # it exited without a word: killed
        return ("died", "")


def _exits(processes, replies) -> tuple[list[str], list[str]]:
    """Notes about workers that did not end well, and the error messages among them."""
    notes, errors = [], []
    for process, _ in processes:
        kind, detail = replies.get(process.pid, ("died", ""))
        if kind == "ok":
            continue
        if kind == "error":
            errors.append(str(detail))
            notes.append(f"worker {process.pid} stopped: {detail}")
        elif kind == "died":
            code = process.exitcode
            how = f"signal {-code}" if code is not None and code < 0 else f"exit status {code}"
            notes.append(f"worker {process.pid} died ({how}); a lease it held expires and is "
                         "taken over")
            errors.append(f"worker {process.pid} died ({how})")
    return notes, errors
