"""Resuming a kernel's Optuna study from its database: rows read as data, trials of dead
processes closed, and heartbeats for the trials this process has open.

    study, history, storage = open_study(name, storage, sampler)
    beats = TrialHeartbeats(storage)
    trial = beats.ask(study); beats.start()
    ...
    study.tell(trial, value); beats.discard(trial); beats.stop()

A study row that Optuna cannot read back (a parameter value far outside its distribution, say)
would make every ask fail inside Optuna; such a study is searched in memory instead, from the
trials that read back, with a warning, and its rows are left as they are.

A trial stays RUNNING in the database when the process that asked it dies (SIGKILL, a crash, a
lost machine). Each open trial gets a heartbeat in the database (Optuna's, recorded by a thread
of this process) and names its process; opening a study fails the trials whose heartbeat stopped
more than the storage's grace period ago, at once those of a process of this machine (the same
Linux boot and pid namespace) that no longer exists, and those that started longer than the
grace period ago without naming a process (one killed between asking and naming, or a
tunesearch from before heartbeats). Trials of live processes, on this machine or any other
sharing the database, are never touched.
"""
from __future__ import annotations

import os
import socket
import threading
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path

import optuna
from optuna.exceptions import ExperimentalWarning
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy import exc as sa_exc

# Optuna's heartbeat is meant for study.optimize, and warns on every ask of a study with one; this
# is ask/tell with its own heartbeat thread. Set once here: silencing a warning around each call
# is not safe while other threads run.
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
warnings.filterwarnings("ignore", category=ExperimentalWarning, message=r".*fail_stale_trials")

# what Optuna raises while building a trial from a row that holds what it never writes
DAMAGED_ROW = (ArithmeticError, LookupError, TypeError, ValueError, sa_exc.InvalidRequestError)


OWNER_ATTR = "tunesearch_process"  # system attribute of a trial: the process that asked it


def this_process() -> dict:
    """This process as another process of this machine can check that it is gone: the kernel's
    boot id, the pid namespace and the pid (Linux; elsewhere boot and namespace are None, and
    only the heartbeat tells), with the host name for people reading the study."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        boot = namespace = None
    return {"boot": boot, "pid_namespace": namespace, "pid": os.getpid(),
            "host": socket.gethostname()}


def is_gone(owner: object) -> bool:
    """Whether the process `owner` (a trial's OWNER_ATTR) is known to have ended: it ran on this
    machine, in this pid namespace, and no process has its pid. Anything unsure is alive: a
    process of another machine, a pid taken again (the pid of this very process included)."""
    me = this_process()
    if me["boot"] is None or not isinstance(owner, dict) or \
            (owner.get("boot"), owner.get("pid_namespace")) != (me["boot"], me["pid_namespace"]):
        return False
    pid = owner.get("pid")
    if type(pid) is not int or pid <= 0 or pid == me["pid"]:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # there, but another user's
        return False
    return False


def _fail_trials_of_gone_processes(study: optuna.Study, grace_s: float) -> None:
    try:
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    except DAMAGED_ROW:
        return  # open_study reads the study row by row
    for trial in running:
        owner = trial.system_attrs.get(OWNER_ATTR)
        if owner is None and trial.datetime_start is not None:
            # Optuna stamps a start with the asking machine's clock, without a zone
            now = datetime.now(trial.datetime_start.tzinfo and timezone.utc)
            gone = now - trial.datetime_start > timedelta(seconds=grace_s)
        else:
            gone = is_gone(owner)
        if gone:
            study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)


def rdb_storage(storage: str | BaseStorage | None) -> BaseStorage | None:
    """The storage object for `storage` (an Optuna URL is opened once, so that its rows and its
    heartbeats go through one storage)."""
    return RDBStorage(storage) if isinstance(storage, str) else storage


def _heartbeat_interval(storage: BaseStorage | None) -> int | None:
    getter = getattr(storage, "get_heartbeat_interval", None)
    return getter() if getter is not None else None


def open_study(name: str, storage: BaseStorage | None, sampler: optuna.samplers.BaseSampler
               ) -> tuple[optuna.Study, list[FrozenTrial], BaseStorage | None]:
    """The study `name` (created if new), its trials, after the trials of dead processes
    are failed, and the storage its new trials go to: None for a study whose rows do not read
    back (see the module docstring), searched in memory, whose trials then have no heartbeat in
    the database (their ids are the memory study's, not rows of it)."""
    study = optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                direction="minimize", load_if_exists=True)
    interval = _heartbeat_interval(storage)
    if interval:
        optuna.storages.fail_stale_trials(study)
        _fail_trials_of_gone_processes(study, getattr(storage, "grace_period", None) or
                                       2 * interval)
    try:
        return study, study.get_trials(deepcopy=False), storage
    except DAMAGED_ROW:
        pass
    readable, damaged = _readable_trials(storage, name)
    memory = optuna.create_study(study_name=name, sampler=sampler, direction="minimize")
    for trial in readable:
        if trial.state.is_finished():
            try:
                memory.add_trial(trial)
            except DAMAGED_ROW:  # a row that reads back but is not a trial Optuna accepts
                damaged += 1
    warnings.warn(f"the Optuna study {name} holds {damaged} trial(s) that do not read back "
                  "(rows Optuna never wrote): they are left out, and this search keeps its "
                  "trials in memory (its result is saved as always)", stacklevel=2)
    return memory, memory.get_trials(deepcopy=False), None


def _readable_trials(storage: BaseStorage, name: str) -> tuple[list[FrozenTrial], int]:
    """The trials of study `name` that read back one by one, and how many do not."""
    study_id = storage.get_study_id_from_name(name)
    readable, damaged, number = [], 0, 0
    while True:
        try:
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
        except KeyError:
            break
        except DAMAGED_ROW:
            trial_id = None
        number += 1
        try:
            if trial_id is None:
                raise ValueError(f"trial number {number - 1} is not one row")
            readable.append(storage.get_trial(trial_id))
        except DAMAGED_ROW:
            damaged += 1
    return readable, damaged


class TrialHeartbeats:
    """Records a heartbeat for every open trial of this process: once when it is added, then
    every heartbeat interval of the storage from a thread, until it is discarded. A storage
    without heartbeats (in memory, or opened without an interval) makes this do nothing."""

    def __init__(self, storage: BaseStorage | None):
        self.interval = _heartbeat_interval(storage)
        self.storage = storage if self.interval else None
        self._open: dict[int, None] = {}
        self._owner = this_process()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trial-heartbeat", daemon=True)

    def start(self) -> None:
        """Beat from a thread from now on (a trial added before has had its first beat)."""
        if self.storage is not None and not self._thread.is_alive():
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def ask(self, study: optuna.Study) -> optuna.Trial:
        """study.ask(), the new trial added."""
        trial = study.ask()
        self.add(trial)
        return trial

    def add(self, trial: optuna.Trial) -> None:
        if self.storage is not None:
            self._open[trial._trial_id] = None
            try:  # named first: on this machine that is what tells at once that it is gone
                self.storage.set_trial_system_attr(trial._trial_id, OWNER_ATTR, self._owner)
            except Exception:  # noqa: BLE001  (then its age and heartbeat tell)
                pass
            self._beat(trial._trial_id)

    def discard(self, trial: optuna.Trial) -> None:
        self._open.pop(trial._trial_id, None)

    def _beat(self, trial_id: int) -> None:
        try:
            self.storage.record_heartbeat(trial_id)
        except Exception:  # noqa: BLE001  (a database away for a moment: the next beat counts)
            pass

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for trial_id in list(self._open):
                self._beat(trial_id)
