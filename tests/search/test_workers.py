"""Tuning with worker processes into one database: leases, a killed worker, two devices, a
database restart, several workers on one kernel.

The worker processes, the databases (SQLite files and a real PostgreSQL server) and the Optuna
studies are real. Measurements are simulated in each worker (a deterministic made-up time per
config, per device) except in one test that measures on the CPU.
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import os
import signal
import subprocess
import threading
import time
import uuid
import zlib
from pathlib import Path

import optuna
import psycopg
import pytest
from optuna.trial import TrialState
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.search.kernels import add, matmul
from tunesearch.db import Store, study_storage
from tunesearch.db.leases import DONE, LeaseBoard
from tunesearch.runtime.cpu import CPUDevice
from tunesearch.runtime.device import DeviceInfo, get_device
from tunesearch.search import Budget, SimulatedMeasurer
from tunesearch.search.study import study_name
from tunesearch.search.supervise import run_workers
from tunesearch.space.config import Config

MARKERS_ENV = "TUNESEARCH_TEST_MARKERS"  # a folder where slow measurers show they are measuring


# -- measurers, made in each worker process (so: importable, light module-level code) -----------

def made_up_time(device_key: str, config) -> float:
    """A time per config that differs between devices, so each device has its own winner."""
    return 1e-3 * (1 + zlib.crc32(f"{device_key}|{config.to_json()}".encode()) % 997 / 997)


class SlowMeasurer(SimulatedMeasurer):
    """Takes `delay` seconds per measurement, with a marker file named by its pid meanwhile."""

    def __init__(self, device_key: str, delay: float):
        super().__init__(functools.partial(made_up_time, device_key))
        self.delay, self.markers = delay, os.environ.get(MARKERS_ENV)

    def measure(self, kernel, configs):
        marker = Path(self.markers) / str(os.getpid()) if self.markers else None
        if marker is not None:
            marker.touch()
        time.sleep(self.delay)
        if marker is not None:
            marker.unlink()
        return super().measure(kernel, configs)


def fast(device, seed, n_workers):
    return SimulatedMeasurer(functools.partial(made_up_time, device.info().key))


def slow(device, seed, n_workers):
    return SlowMeasurer(device.info().key, 0.25)


class OtherCPU(CPUDevice):
    """The CPU under another device key: a second machine's device, as the database sees it."""

    @functools.cache
    def info(self) -> DeviceInfo:
        real = super().info()
        return dataclasses.replace(real, name="Other CPU",
                                   fingerprint=real.fingerprint + (("board", "other"),))


def small_model():
    """Five small kernels, one of them twice."""
    return [matmul(16, 16, 16), add(8, 8), matmul(8, 16, 4), add(4, 4, 4), add(8, 8), add(32)]


# -- databases -------------------------------------------------------------------------------

@pytest.fixture
def pg_database(postgres_url):
    """Makes new, empty PostgreSQL databases for one test; drops them afterwards."""
    admin_url = make_url(postgres_url).set(drivername="postgresql")
    made = []

    def make() -> str:
        name = f"ts_workers_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(admin_url.render_as_string(hide_password=False),
                             autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        return make_url(postgres_url).set(database=name).render_as_string(hide_password=False)

    yield make
    with psycopg.connect(admin_url.render_as_string(hide_password=False),
                         autocommit=True) as admin:
        for name in made:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def check_integrity(url: str) -> None:
    """Every result row references existing kernel and device rows; one per (kernel, device)."""
    with Store(url) as store:
        engine = create_engine(store.url)
    with engine.connect() as connection:
        orphans = connection.execute(text(
            "SELECT count(*) FROM results r LEFT JOIN kernels k ON k.id = r.kernel_id "
            "LEFT JOIN devices d ON d.id = r.device_id WHERE k.id IS NULL OR d.id IS NULL"))
        assert orphans.scalar_one() == 0
        duplicates = connection.execute(text(
            "SELECT count(*) FROM (SELECT kernel_id, device_id FROM results "
            "GROUP BY kernel_id, device_id HAVING count(*) > 1) AS twice"))
        assert duplicates.scalar_one() == 0
        if url.startswith("sqlite"):
            assert connection.execute(text("PRAGMA integrity_check")).scalar_one() == "ok"
            assert connection.execute(text("PRAGMA foreign_key_check")).all() == []
    engine.dispose()


def check_claims(board: LeaseBoard) -> dict:
    """No lease was held by two workers at once: each claim began after the one before ended.
    Returns the claims by (kernel key, slot)."""
    by_lease: dict = {}
    for claim in board.claims():
        by_lease.setdefault((claim.kernel_key, claim.device_key, claim.slot), []).append(claim)
    for claims in by_lease.values():
        for before, after in zip(claims, claims[1:]):
            assert before.ended_at is not None and after.claimed_at >= before.ended_at
    return by_lease


def in_thread(**kwargs) -> tuple[threading.Thread, dict]:
    """run_workers(**kwargs) in a thread; its report (or exception) lands in the dict."""
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["report"] = run_workers(**kwargs)
        except BaseException as err:  # noqa: BLE001  (the test reports it)
            outcome["error"] = err

    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


def report_of(thread: threading.Thread, outcome: dict):
    thread.join(timeout=150)
    assert not thread.is_alive()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["report"]


# -- tests -----------------------------------------------------------------------------------

def test_three_workers_tune_each_kernel_once_like_one_worker(tmp_path):
    kernels = small_model()
    dominant = kernels[0]  # most of the model's time: one lease per worker on it
    weights = {kernel.key: 1e-6 for kernel in kernels} | {dominant.key: 1e-3}
    cpu = get_device("cpu").info().key
    runs = {}
    for n_workers in (1, 3):
        url = f"sqlite:///{tmp_path / f'{n_workers}.db'}"
        report = run_workers(kernels, "cpu", Budget(trials=3), db_url=url, n_workers=n_workers,
                             model="small", weights=weights, progress=False, measurer=fast)
        assert {r.status for r in report.results} == {"tuned"}, report
        check_integrity(url)
        with Store(url) as store:
            board = LeaseBoard(store)
            by_lease = check_claims(board)
            assert len(by_lease) == 4 + n_workers  # a lease per kernel, a slot per worker
            assert all([c.outcome for c in claims] == ["done"] for claims in by_lease.values())
            results = store.list_results()
            assert len(results) == 5 and {r.device_key for r in results} == {cpu}
            trials = {r.kernel_key: store.trials(r.kernel_key, cpu) for r in results}
            budgets = {}
            for lease in board.leases()[1]:
                budgets[lease.kernel_key] = budgets.get(lease.kernel_key, 0) + lease.budget
            # the best stored is the best any worker found
            assert all(store.lookup(key, cpu).time_s == min(t.time_s for t in own)
                       for key, own in trials.items())
        # every kernel's trials were measured once, by one worker per lease: its budget exactly
        assert {key: len(own) for key, own in trials.items()} == budgets
        runs[n_workers] = {key: [t.config for t in own] for key, own in trials.items()}
    assert runs[1].keys() == runs[3].keys() == {k.key for k in kernels}
    del runs[1][dominant.key], runs[3][dominant.key]  # its slots sample with seeds of their own
    assert runs[1] == runs[3]  # the same seeds sampled the same configs


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_killed_workers_kernel_is_taken_over_and_its_study_continued(backend, request,
                                                                       tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'shared.db'}" if backend == "sqlite" else \
        request.getfixturevalue("pg_database")()
    kernels = small_model()[:4]
    monkeypatch.setenv(MARKERS_ENV, str(tmp_path))
    thread, outcome = in_thread(kernels=kernels, device="cpu", budget=Budget(trials=4),
                                db_url=url, n_workers=3, progress=False, measurer=slow,
                                ttl_s=2.0, heartbeat_s=0.2)
    with Store(url) as store:
        board = LeaseBoard(store)
        victim = None
        deadline = time.monotonic() + 60
        while victim is None and time.monotonic() < deadline:
            _, leases = board.leases()
            for lease in leases:  # a worker inside a trial: past its default, measuring
                pid = lease.worker and lease.worker.split(":")[1]
                if lease.state == "running" and lease.trials >= 1 and \
                        (tmp_path / str(pid)).exists():
                    os.kill(int(pid), signal.SIGKILL)
                    victim = lease
                    break
            time.sleep(0.02)
        report = report_of(thread, outcome)
        assert victim is not None
        assert {r.status for r in report.results} == {"tuned"}
        assert {r.kernel_key for r in report.results} == {k.key for k in kernels}
        assert any("died (signal 9)" in note for note in report.notes), report.notes
        claims = check_claims(board)[victim.kernel_key, victim.device_key, 0]
        assert [c.outcome for c in claims] == ["expired", "done"]
        assert claims[0].worker == victim.worker and claims[1].worker != victim.worker
        taker_measured = len(store.trials(victim.kernel_key, victim.device_key))
        assert len(store.list_results()) == 4
    check_integrity(url)
    kernel = next(k for k in kernels if k.key == victim.kernel_key)
    study = optuna.load_study(study_name=study_name(kernel, victim.device_key),
                              storage=study_storage(url))
    states = [t.state for t in study.get_trials(deepcopy=False)]
    assert TrialState.RUNNING not in states  # the trial the victim died in was closed
    assert TrialState.FAIL in states
    # the taker continued the study: it holds the victim's measured trials and its own
    assert states.count(TrialState.COMPLETE) >= victim.trials + taker_measured
    assert taker_measured <= 4 - victim.trials


def test_two_devices_tune_the_same_kernels_into_one_database_apart(tmp_path):
    """The CPU measures for real, the other device is simulated; both at once, one db."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    kernels = [add(64, 64), matmul(8, 8, 8), add(4, 4, 4)]
    other = OtherCPU()
    runs = {"cpu": ("cpu", None), "other": (other, fast)}
    started = {name: in_thread(kernels=kernels, device=dev, budget=Budget(trials=2), db_url=url,
                               n_workers=1, progress=False, measurer=measurer)
               for name, (dev, measurer) in runs.items()}
    reports = {name: report_of(*running) for name, running in started.items()}
    keys = {"cpu": get_device("cpu").info().key, "other": other.info().key}
    assert keys["cpu"] != keys["other"]
    assert {name: report.device_key for name, report in reports.items()} == keys
    assert all(r.status == "tuned" and r.time_s > 0 for report in reports.values()
               for r in report.results)
    check_integrity(url)
    with Store(url) as store:
        assert len(store.list_results()) == 2 * 3
        assert len(store.list_results(keys["other"])) == 3
        for kernel in kernels:
            own = {name: store.trials(kernel.key, key) for name, key in keys.items()}
            assert all(len(trials) == 2 for trials in own.values())
            cpu = store.lookup(kernel.key, keys["cpu"])
            sim = store.lookup(kernel.key, keys["other"])
            # the simulated device's best is its own fastest trial, by its own made-up times
            fastest = min(own["other"], key=lambda t: t.time_s)
            assert (sim.time_s, sim.config) == (fastest.time_s, fastest.config)
            assert sim.time_s == pytest.approx(made_up_time(keys["other"],
                                                            Config.from_json(sim.config)))
            # the CPU's best is its own measurement, never one of the other device's made-up
            # times, and a config its own search measured
            assert cpu.config in [t.config for t in own["cpu"]]
            assert cpu.time_s != pytest.approx(made_up_time(keys["other"],
                                                            Config.from_json(cpu.config)))
            assert cpu.time_s not in [t.time_s for t in own["other"]]
        for key in keys.values():
            _, leases = LeaseBoard(store).leases(key)
            assert len(leases) == 3 and {lease.state for lease in leases} == {DONE}


def _pg_ctl(postgres_url: str, *args: str) -> None:
    """Run pg_ctl on the test server's data folder, as the user that owns it."""
    with psycopg.connect(make_url(postgres_url).set(drivername="postgresql")
                         .render_as_string(hide_password=False), autocommit=True) as admin:
        data = admin.execute("SHOW data_directory").fetchone()[0]
    bindirs = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    pg_ctl = bindirs[-1] if bindirs else "pg_ctl"
    run_as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    # -l: the server it starts must not hold our pipes open
    subprocess.run([*run_as, pg_ctl, "-D", data, "-l", str(Path(data).parent / "restart.log"),
                    *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=120)


def test_workers_ride_out_a_database_restart(pg_database, postgres_url, tmp_path, monkeypatch):
    if os.environ.get("TUNESEARCH_TEST_PG_URL"):
        pytest.skip("the PostgreSQL server is not this test session's own to restart")
    url = pg_database()
    kernels = small_model()[:4]
    thread, outcome = in_thread(kernels=kernels, device="cpu", budget=Budget(trials=6),
                                db_url=url, n_workers=2, progress=False, measurer=slow,
                                ttl_s=3.0, heartbeat_s=0.2, db_wait_s=60)
    with Store(url) as store:
        board = LeaseBoard(store)
        deadline = time.monotonic() + 60
        while thread.is_alive() and time.monotonic() < deadline and not any(
                lease.trials >= 1 for lease in board.leases()[1]):
            time.sleep(0.05)
        assert thread.is_alive(), outcome  # the workers are at work: now the restart
        assert board.pending(get_device("cpu").info().key, [k.key for k in kernels]) >= 2
    _pg_ctl(postgres_url, "-m", "fast", "-w", "-t", "60", "restart")
    report = report_of(thread, outcome)
    assert {r.status for r in report.results} == {"tuned"}, report
    check_integrity(url)
    with Store(url) as store:
        assert len(store.list_results()) == 4
