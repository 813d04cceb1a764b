"""The shared-database path's smaller faults: no password in a worker's message, a refused
password not waited for, a dead worker's open trials closed and no one else's, a stale worker's
result not stored as verified, a lone `tune` joining the leases others registered.

Databases (SQLite files, Optuna's storage) and lease boards are real; so are the driver's
exceptions the classification is checked on."""
from __future__ import annotations

import socket
import time
import uuid

import optuna
import psycopg
import pytest
from optuna.trial import TrialState
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

from tests.search.kernels import add, matmul
from tunesearch.db import DeviceRecord, ResultRecord, Store, is_transient, study_storage
from tunesearch.db.leases import DONE, LeaseBoard, WorkItem
from tunesearch.db.studies import OWNER_ATTR, fail_running_trials, owner_of_worker
from tunesearch.runtime.device import get_device
from tunesearch.search import Budget
from tunesearch.search.capacity import check_workers, free_connections
from tunesearch.search.messages import DeviceSpec
from tunesearch.search.planning import WorkerJob
from tunesearch.search.results import TuneError
from tunesearch.search.supervise import open_leases
from tunesearch.search.tune import kernel_record
from tunesearch.search.worker import WorkerError, _Heartbeat, _LeaseStore, _TrialCounter, \
    run_worker


def _wrapped(message: str) -> sa_exc.OperationalError:
    """A driver error as SQLAlchemy raises it, from psycopg's own exception class."""
    return sa_exc.OperationalError("connect", {}, psycopg.OperationalError(message))


def test_a_refused_password_is_not_waited_for_but_a_server_away_is():
    refused = _wrapped('connection failed: connection to server at "127.0.0.1", port 5432 '
                       'failed: FATAL:  password authentication failed for user "tuner"')
    no_database = _wrapped('connection failed: FATAL:  database "tune" does not exist')
    away = _wrapped('connection failed: connection to server at "127.0.0.1", port 5432 '
                    'failed: Connection refused')
    assert not is_transient(refused) and not is_transient(no_database)
    assert is_transient(away)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_workers_message_never_shows_the_password():
    url = f"postgresql+psycopg://tuner:s3cret-pw@127.0.0.1:{_closed_port()}/tune"
    job = WorkerJob(url, DeviceSpec.of("cpu"), (add(8),), Budget(trials=1), "tpe", 0,
                    db_wait_s=1.0)
    with pytest.raises(WorkerError) as caught:
        run_worker(job)
    assert "s3cret-pw" not in str(caught.value)
    assert "127.0.0.1" in str(caught.value)  # it still says which database


def test_a_dead_workers_open_trials_are_closed_and_a_live_ones_are_not(tmp_path):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    Store(url).close()
    storage = study_storage(url)
    study = optuna.create_study(study_name="k@d", storage=storage)
    dead, live = study.ask(), study.ask()
    dead.set_user_attr(OWNER_ATTR, "host-a:101")
    live.set_user_attr(OWNER_ATTR, "host-b:202")
    fail_running_trials(storage, "k@d", owner_of_worker("host-a:101:9f3e"))
    states = {t.number: t.state for t in study.get_trials()}
    assert states == {dead.number: TrialState.FAIL, live.number: TrialState.RUNNING}


def test_a_lease_taken_over_names_its_previous_holder(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    board = LeaseBoard(store, ttl_s=0.2)
    board.register("m", "cpu-x", [WorkItem("k1", "k1", slots=2)])
    first = board.claim("host-a:101:aaaa", "cpu-x", ["k1"])
    board.claim("host-b:202:bbbb", "cpu-x", ["k1"])
    assert first is not None and not first.taken_over
    time.sleep(0.5)  # both expire; the next claim takes the heaviest, slot 0: host-a's
    again = board.claim("host-c:303:cccc", "cpu-x", ["k1"])
    assert again.taken_over and again.previous_worker == "host-a:101:aaaa"
    store.close()


def _result() -> ResultRecord:
    return ResultRecord({"opts": []}, 1e-3, 0.01, 1.0, 1.0, 2e-3, 2.0, 5, "tpe")


def test_a_stale_workers_result_is_kept_unverified(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    board = LeaseBoard(store, ttl_s=30)
    board.register("m", "cpu-x", [WorkItem("k", "k")])
    claim = board.claim("host-a:1:a", "cpu-x", ["k"])
    beat = _Heartbeat(board, claim, _TrialCounter(0), every_s=60)
    device = DeviceRecord("cpu-x", "cpu", "x", {})
    fresh, cut_off = matmul(8, 8, 8), add(16)
    _LeaseStore(store, beat).record(kernel_record(fresh), device, _result())
    beat.renewed -= 31  # its lease was not confirmed for longer than its time to live
    _LeaseStore(store, beat).record(kernel_record(cut_off), device, _result())
    assert store.lookup(fresh.key, "cpu-x").verified
    assert not store.lookup(cut_off.key, "cpu-x").verified
    store.close()


def test_a_lone_tune_sees_the_leases_others_left_open(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    kernels = [add(8), matmul(8, 8, 8)]
    key = get_device("cpu").info().key
    assert open_leases(store, "cpu", kernels) == 0
    board = LeaseBoard(store)
    board.register("m", key, [WorkItem(k.key, k.name) for k in kernels])
    assert open_leases(store, "cpu", kernels) == 2
    for _ in kernels:
        claim = board.claim("host-a:1:a", key, [k.key for k in kernels])
        board.finish(claim, DONE, trials=1)
    assert open_leases(store, "cpu", kernels) == 0
    store.close()


def test_workers_beyond_the_servers_free_connections_are_refused(postgres_url):
    admin_url = make_url(postgres_url).set(drivername="postgresql") \
        .render_as_string(hide_password=False)
    name = f"ts_capacity_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    held = []
    try:
        with Store(make_url(postgres_url).set(database=name)
                   .render_as_string(hide_password=False)) as store:
            free = free_connections(store)
            if free > 200:
                pytest.skip(f"the server has {free} free connections: too many to take up")
            # others' clients take all but 5: room for 2 workers (2 each), not for 3
            held = [psycopg.connect(admin_url) for _ in range(free - 5)]
            check_workers(2, store)
            with pytest.raises(TuneError, match="--workers 3 needs 6 connections"):
                check_workers(3, store)
    finally:
        for connection in held:
            connection.close()
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
