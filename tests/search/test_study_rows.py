"""The Optuna studies in a real database: trials a killed process left RUNNING are failed by the
next search of their study, those of a live process are not, and rows Optuna cannot read back
leave the search going (in memory) instead of failing inside Optuna."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import optuna
import pytest
from optuna.trial import TrialState

from tests.db.conftest import pg_url  # noqa: F401  (a fixture)
from tests.search.kernels import add
from tunesearch.db import Store, studies_url, study_storage
from tunesearch.search import Budget, SimulatedMeasurer, search_kernel, study_name
from tunesearch.space.spaces import space_for
from tunesearch.space.target import Target

ROOT = Path(__file__).parents[2]
DEVICE_KEY = "test-device"
HEARTBEAT_S, GRACE_S = 1, 2

# a search whose first measurement never returns: its trial stays open, with heartbeats
HANGING_SEARCH = f"""
import sys, time
from tests.search.kernels import add
from tunesearch.db import study_storage
from tunesearch.search import Budget, SimulatedMeasurer, search_kernel
from tunesearch.space.spaces import space_for
from tunesearch.space.target import Target

def hang(config):
    print("measuring", flush=True)
    time.sleep(600)

kernel = add(8, 8)
search_kernel(kernel, space_for(kernel, Target("cpu", threads=1)), SimulatedMeasurer(hang),
              Budget(trials=20), "random", device_key={DEVICE_KEY!r},
              storage=study_storage(sys.argv[1], heartbeat_s={HEARTBEAT_S}, grace_s={GRACE_S}))
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.db'}"
    return request.getfixturevalue("pg_url")


def _kernel_and_space():
    kernel = add(8, 8)
    return kernel, space_for(kernel, Target("cpu", threads=1))


def _states(url: str) -> dict[int, TrialState]:
    """Trial number -> state, as Optuna itself reads the study back."""
    kernel, _ = _kernel_and_space()
    study = optuna.load_study(study_name=study_name(kernel, DEVICE_KEY),
                              storage=studies_url(url))
    return {trial.number: trial.state for trial in study.get_trials(deepcopy=False)}


def _search(url: str, trials: int = 3, grace_s: int = GRACE_S):
    kernel, space = _kernel_and_space()
    return search_kernel(kernel, space, SimulatedMeasurer(lambda config: 1e-3),
                         Budget(trials=trials), "random", seed=1, device_key=DEVICE_KEY,
                         storage=study_storage(url, heartbeat_s=HEARTBEAT_S, grace_s=grace_s))


def _hanging_search(url: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.Popen([sys.executable, "-c", HANGING_SEARCH, url], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_only_the_trials_of_a_dead_process_are_failed(url):
    """Through the heartbeat: what a process of another machine sharing the database sees."""
    Store(url).close()
    child = _hanging_search(url)
    try:
        assert child.stdout.readline().strip() == "measuring", child.stderr.read()[-3000:]
        [open_trial] = [n for n, state in _states(url).items() if state == TrialState.RUNNING]
        time.sleep(2 * GRACE_S)  # longer than the grace period: only a heartbeat keeps it
        _search(url)
        assert _states(url)[open_trial] == TrialState.RUNNING  # alive: left alone
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        time.sleep(2 * GRACE_S)
        elsewhere = {"boot": None, "pid_namespace": None, "pid": 1, "host": "elsewhere"}
        with mock.patch("tunesearch.search.resume.this_process", return_value=elsewhere):
            result = _search(url)  # as on another machine: only the heartbeat can tell
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=60)
    states = _states(url)
    assert states[open_trial] == TrialState.FAIL
    assert TrialState.RUNNING not in states.values()
    assert result.best is not None and result.measured == 3


def test_the_trials_of_a_process_killed_on_this_machine_are_failed_at_once(tmp_path):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    Store(url).close()
    child = _hanging_search(url)
    try:
        assert child.stdout.readline().strip() == "measuring", child.stderr.read()[-3000:]
        [open_trial] = [n for n, state in _states(url).items() if state == TrialState.RUNNING]
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        # its heartbeat is fresh, and would be for ten minutes: the process is what is gone
        _search(url, grace_s=600)
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=60)
    states = _states(url)
    assert states[open_trial] == TrialState.FAIL
    assert TrialState.RUNNING not in states.values()


def test_a_trial_that_never_named_its_process_is_failed_once_older_than_the_grace(tmp_path):
    """As a process killed between asking a trial and naming itself leaves it, or a tunesearch
    from before heartbeats: Optuna's own ask, nothing more."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    Store(url).close()
    _search(url, trials=1)
    kernel, _ = _kernel_and_space()
    bare = optuna.load_study(study_name=study_name(kernel, DEVICE_KEY), storage=studies_url(url))
    orphan = bare.ask().number
    _search(url, trials=1)
    assert _states(url)[orphan] == TrialState.RUNNING  # younger than the grace period
    time.sleep(2 * GRACE_S)
    _search(url, trials=1)
    assert _states(url)[orphan] == TrialState.FAIL


def _rows(path) -> list[str]:
    """Every row of a SQLite file, as SQL: what its connections see, the write-ahead log's
    pages included (the file's bytes change when the log is copied back, rows or not)."""
    with sqlite3.connect(path) as connection:
        rows = list(connection.iterdump())
    connection.close()
    return rows


def test_a_study_row_optuna_cannot_read_back_leaves_the_search_going(tmp_path):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    Store(url).close()
    first = _search(url, trials=4)
    assert first.measured == 4
    studies = tmp_path / "results.studies.db"
    with sqlite3.connect(studies) as connection:  # a categorical index of 1e300, and a NaN
        changed = connection.execute(
            "UPDATE trial_params SET param_value = 1e300 WHERE param_id = "
            "(SELECT min(param_id) FROM trial_params WHERE distribution_json LIKE "
            "'%CategoricalDistribution%')").rowcount
    connection.close()
    assert changed == 1
    with pytest.raises(Exception):  # Optuna itself cannot read the study back any more
        _states(url)
    before = _rows(studies)
    with pytest.warns(UserWarning, match=r"holds 1 trial\(s\) that do not read back"):
        again = _search(url, trials=3)
    assert again.best is not None and again.measured >= 1
    assert _rows(studies) == before  # the damaged rows are left as they are
