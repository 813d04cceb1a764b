"""One worker process: its loop (claim a lease, tune its kernel, finish it, take the next), the
heartbeat that renews the lease meanwhile, and what it does while the database is unreachable
(waits up to `db_wait_s`, with the retry policy of `tunesearch.db`)."""
from __future__ import annotations

import _thread
import sys
import threading
import time
import traceback
from dataclasses import replace
from typing import Callable

from tunesearch.db import (
    DatabaseError, Store, fail_running_trials, is_transient, retry_while_unreachable, study_storage,
)
from tunesearch.db._engine import describe, normalize_url
from tunesearch.db.studies import owner_of_worker
from tunesearch.db.leases import DONE, FAILED, RUNNING, WAITING, Claim, LeaseBoard, worker_id
from tunesearch.search._lifeline import stop_with_parent
from tunesearch.search.measure import Measurer
from tunesearch.search.messages import WorkerReply
from tunesearch.search.planning import WorkerJob
from tunesearch.search.progress import Progress
from tunesearch.search.results import TuneError
from tunesearch.search.study import study_name
from tunesearch.search.tune import open_device, tune_kernels

MAX_ATTEMPTS = 3      # claims of one lease that end in an error before it is marked failed


def where(url: str) -> str:
    """How messages name a database: its URL without the password."""
    return describe(normalize_url(url))


def _detail(job: WorkerJob, err: BaseException) -> str:
    """An error's first line for a message, the database named without its password."""
    text = str(err).splitlines()[0] if str(err).strip() else type(err).__name__
    return text.replace(job.db_url, where(job.db_url))


class WorkerError(TuneError):
    """A worker cannot go on (the database stayed unreachable); the message is one line."""


def _retrying(job: WorkerJob, what: str, action: Callable):
    """action(), retried while the database is unreachable, for db_wait_s; then a WorkerError."""
    try:
        return retry_while_unreachable(action, wait_s=job.db_wait_s)
    except Exception as err:  # noqa: BLE001  (only connection failures were retried)
        if not is_transient(err):
            raise
        raise WorkerError(f"cannot {what}: the database did not answer for "
                          f"{job.db_wait_s:.0f} s ({_detail(job, err)})") from err


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
        self.renewed = time.monotonic()  # the last time the database confirmed the lease
        self._stop = threading.Event()
        self._interrupt = threading.current_thread() is threading.main_thread()
        self._thread = threading.Thread(target=self._run, name="lease-heartbeat", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

    def stale(self) -> bool:
        """Whether another worker may hold the lease now: renewal refused, or not confirmed
        for longer than its time to live (this worker was cut off from the database)."""
        return self.lost.is_set() or \
            time.monotonic() - self.renewed > self.board.ttl.total_seconds()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                held = self.board.renew(self.claim, self.counter.value)
            except Exception:  # noqa: BLE001  (the database is away; the lease holds its TTL)
                continue
            if held:
                self.renewed = time.monotonic()
            else:
                self.lost.set()
                if self._interrupt and not self._stop.is_set():
                    _thread.interrupt_main()
                return


class _LeaseStore:
    """The worker's store while it tunes one lease: a result it saves after its lease went
    stale is kept as unverified (a claim the next search re-times), never as a verified
    winner, since a worker that took the lease over may be measuring the same kernel."""

    def __init__(self, store: Store, beat: _Heartbeat):
        self._store, self._beat = store, beat

    def __getattr__(self, name: str):
        return getattr(self._store, name)

    def record(self, kernel, device, result, **kwargs):
        if self._beat.stale():
            result = replace(result, verified=False)
        return self._store.record(kernel, device, result, **kwargs)


class _Worker:
    """The loop of one worker: claim, tune, finish, until nothing is left."""

    def __init__(self, job: WorkerJob, name: str):
        self.job, self.name = job, name
        self.device = open_device(job.device)
        self.device_key = self.device.info().key
        self.kernels = {kernel.key: kernel for kernel in job.kernels}
        self.store = _retrying(job, f"open {where(job.db_url)}", lambda: Store(job.db_url))
        self.board = LeaseBoard(self.store, ttl_s=job.ttl_s)
        self.storage = None
        self.errors: dict[int, int] = {}  # lease id -> claims that ended in an error
        self.finished: set[int] = set()   # claims given back (or lost), never twice

    def run(self) -> int:
        """Tune until no lease of these kernels is waiting or running; returns leases done."""
        measurer = self.job.measurer(self.device, self.job.seed, self.job.n_workers)
        try:
            return self._loop(measurer)
        except BaseException:  # stopped (Ctrl-C, the parent's death) or failed: hold nothing
            self._release_held()
            raise
        finally:
            measurer.close()
            self.store.close()
            if self.storage is not None:
                self.storage.engine.dispose()

    def _loop(self, measurer: Measurer) -> int:
        done = 0
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
            try:
                done += self._tune(claim, measurer) == DONE
            except KeyboardInterrupt:  # stopped before the tuning began: give it back
                if claim.claim_id not in self.finished:
                    self._finish(claim, WAITING, claim.trials, "interrupted")
                raise
        return done

    def _release_held(self) -> None:
        """Give back whatever lease this worker still holds as it stops, through a connection
        of its own: the interrupt may have landed inside a database call of the worker's store
        (a claim committed but not returned, a finish under way), which leaves that lease
        running, and that store in no state to be used again."""
        try:
            store = Store(self.job.db_url)
        except Exception:  # noqa: BLE001  (the database is away: the leases expire)
            return
        try:
            LeaseBoard(store, ttl_s=self.job.ttl_s).release_worker(self.name, "interrupted")
        except Exception as err:  # noqa: BLE001  (the leases expire after their TTL)
            print(f"tunesearch worker: its leases stay until they expire: "
                  f"{_detail(self.job, err)}", file=sys.stderr)
        finally:
            store.close()

    def _finish(self, claim: Claim, state: str, trials: int, message: str = "") -> str:
        self.finished.add(claim.claim_id)
        _retrying(self.job, "finish a lease", lambda: self.board.finish(
            claim, state, trials=trials, message=message))
        return state

    def _tune(self, claim: Claim, measurer: Measurer) -> str:
        """Tune the kernel of one claim; returns the state the lease was left in."""
        job, kernel = self.job, self.kernels[claim.kernel_key]
        if self.storage is None:
            self.storage = _retrying(job, "open the studies", lambda: study_storage(job.db_url))
        if claim.taken_over:  # the dead worker's open trials are closed, and only those
            owner = None if claim.slots == 1 else owner_of_worker(claim.previous_worker or "")
            _retrying(job, "close a dead worker's trials", lambda: fail_running_trials(
                self.storage, study_name(kernel, claim.device_key), owner))
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
                                      job.seed + claim.slot, store=_LeaseStore(self.store, beat),
                                      progress=counter,
                                      retune=True, measurer=measurer, storage=self.storage,
                                      constants=job.constants)
        except KeyboardInterrupt:
            if not beat.lost.is_set():
                self._finish(claim, WAITING, counter.value, "interrupted")
                raise
            self.finished.add(claim.claim_id)
            return RUNNING  # lost: the worker that took the lease over finishes it
        except TuneError:
            self._finish(claim, WAITING, counter.value)
            raise
        except Exception as err:  # noqa: BLE001  (failures are data: the lease records them)
            message = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            if is_transient(err):
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


def run_worker(job: WorkerJob, name: str | None = None) -> int:
    """Claim and tune leases in this process until none is left (what each spawned process
    does); returns the leases it finished."""
    return _Worker(job, name or worker_id()).run()


def _worker_main(job: WorkerJob, conn, parent: int | None = None) -> None:
    """The entry point of a spawned worker: sends one WorkerReply on its own pipe, then exits.
    parent: the pid of the tune that started it; the worker stops when that process is gone."""
    stop_with_parent(parent)
    try:
        done = run_worker(job)
    except KeyboardInterrupt:
        _reply(conn, WorkerReply("interrupted"))
        sys.exit(130)
    except (TuneError, DatabaseError) as err:
        print(f"tunesearch worker: error: {err}", file=sys.stderr)
        _reply(conn, WorkerReply("error", message=str(err)))
        sys.exit(3)
    except BaseException as err:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        _reply(conn, WorkerReply("error", message=f"{type(err).__name__}: {err}"))
        sys.exit(1)
    _reply(conn, WorkerReply("ok", leases_done=done))


def _reply(conn, reply: WorkerReply) -> None:
    try:
        conn.send(reply)
    except OSError:  # the parent is gone: nobody to tell
        pass
