"""`tunesearch status` and `tunesearch dashboard` on real databases (SQLite and PostgreSQL)."""
from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from rich.console import Console
from sqlalchemy import create_engine, select, update
from sqlalchemy.engine import make_url

from tests.search.kernels import add
from tunesearch.db import (
    DatabaseError, DeviceRecord, KernelRecord, ResultRecord, Store, study_storage,
)
from tunesearch.db._engine import normalize_url
from tunesearch.db._models import Lease
from tunesearch.db.leases import DONE, FAILED, LeaseBoard, WorkItem
from tunesearch.runtime.device import get_device
from tunesearch.search import Budget, SimulatedMeasurer, tune_kernels
from tunesearch.search.study import study_name
from tunesearch.cli.status import print_status, status

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    """A new, empty database of each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'status.db'}"
        return
    server = request.getfixturevalue("postgres_url")
    admin = make_url(server).set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"ts_status_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    yield make_url(server).set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _age_claims(url: str, worker: str, ago: timedelta) -> None:
    """Move a worker's claims back in time, as if it had claimed them `ago` earlier."""
    engine = create_engine(normalize_url(url))
    with engine.begin() as connection:
        for row in connection.execute(select(Lease.id, Lease.claimed_at, Lease.heartbeat,
                                             Lease.expires_at).where(Lease.worker == worker)):
            connection.execute(update(Lease).where(Lease.id == row.id).values(
                claimed_at=row.claimed_at - ago, heartbeat=row.heartbeat - ago,
                expires_at=row.expires_at - ago))
    engine.dispose()


def _record(store: Store, kernel_key: str, device_key: str) -> None:
    store.record(KernelRecord(kernel_key, "add", "store(b0)", "add", "64", 1),
                 DeviceRecord(device_key, "cpu", "Test CPU", {"threads": 2}),
                 ResultRecord(config={"unroll": 2}, time_s=1e-3, spread=0.0, gflops=1.0,
                              gbps=1.0, default_time_s=2e-3, speedup=2.0, trials=5,
                              sampler="tpe"))


def test_status_shows_done_running_stalled_waiting_failed_per_device_and_model(url):
    with Store(url) as store:
        board = LeaseBoard(store, ttl_s=30)
        board.register("net_a", "dev1", [WorkItem("k1", "mm"), WorkItem("k2", "add"),
                                          WorkItem("k3", "relu")])
        board.register("net_b", "dev1", [WorkItem("k2", "add"), WorkItem("k4", "sum")])
        board.register("net_a", "dev2", [WorkItem("k1", "mm")])
        running = board.claim("hostA:11:aa", "dev1", ["k1"])
        done = board.claim("hostB:22:bb", "dev1", ["k2"])
        _record(store, "k2", "dev1")
        board.finish(done, DONE, trials=5)
        failed = board.claim("hostB:22:bb", "dev1", ["k3"])
        board.finish(failed, FAILED, trials=3, message="no config ran correctly")
        board.claim("hostC:33:cc", "dev2", ["k1"])  # then it dies, and an hour passes
    _age_claims(url, "hostC:33:cc", timedelta(hours=1))
    info = status(url)
    dev1, dev2 = sorted(info["devices"], key=lambda d: d["device_key"])
    assert (dev1["device_name"], dev1["kernels"]) == ("Test CPU", 4)
    assert {s: dev1[s] for s in ("done", "running", "stalled", "waiting", "failed")} == \
        {"done": 1, "running": 1, "stalled": 0, "waiting": 1, "failed": 1}
    models = {m["model"]: m for m in dev1["models"]}
    assert (models["net_a"]["kernels"], models["net_a"]["running"], models["net_a"]["done"],
            models["net_a"]["failed"]) == (3, 1, 1, 1)
    assert (models["net_b"]["kernels"], models["net_b"]["done"],
            models["net_b"]["waiting"]) == (2, 1, 1)
    [lease] = dev1["in_progress"]
    assert (lease["kernel"], lease["worker"], lease["stalled"]) == ("mm", running.worker, False)
    # both measured against the same clock: together they are the lease's time to live
    assert lease["running_s"] >= 0 and lease["expires_in_s"] > 0
    assert lease["running_s"] + lease["expires_in_s"] == pytest.approx(30, abs=1e-3)
    assert dev1["failed_kernels"] == [{"kernel": "relu", "kernel_key": "k3",
                                       "message": "no config ran correctly"}]
    assert (dev2["kernels"], dev2["stalled"], dev2["running"]) == (1, 1, 0)
    stalled = dev2["in_progress"][0]
    assert stalled["stalled"] and stalled["expires_in_s"] < 0
    assert stalled["running_s"] + stalled["expires_in_s"] == pytest.approx(30, abs=1e-3)
    json.dumps(info)  # ready for --json
    out = io.StringIO()
    print_status(info, Console(file=out, width=200))
    text = out.getvalue()
    assert "hostA:11:aa" in text and "net_b" in text and "expired" in text
    assert "failed: relu (k3): no config ran correctly" in text


def test_status_of_a_database_without_runs(tmp_path):
    Store(tmp_path / "empty.db").close()
    info = status(f"sqlite:///{tmp_path / 'empty.db'}")
    assert info["devices"] == []
    out = io.StringIO()
    print_status(info, Console(file=out, width=200))
    assert "no tuning runs registered" in out.getvalue()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(address: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(address, timeout=5) as response:
        return response.status, response.read()


def test_dashboard_serves_the_studies_of_a_database_on_loopback(tmp_path):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    kernel = add(8, 8)
    with Store(url) as store:
        tune_kernels([kernel], "cpu", Budget(trials=2), store=store, progress=False,
                     measurer=SimulatedMeasurer(lambda config: 1e-3),
                     storage=study_storage(url))
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    server = subprocess.Popen(
        [sys.executable, "-c", "import sys; from tunesearch.cli.dashboard import serve_dashboard; "
         "serve_dashboard(sys.argv[1], '127.0.0.1', int(sys.argv[2]))", url, str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline, answer = time.monotonic() + 60, None
        while answer is None and time.monotonic() < deadline and server.poll() is None:
            try:
                answer = _get(f"http://127.0.0.1:{port}/")
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        assert server.poll() is None, server.stderr.read().decode()
        assert answer is not None and answer[0] == 200 and b"<html" in answer[1].lower()
        status_code, body = _get(f"http://127.0.0.1:{port}/api/studies")
        names = [study["study_name"] for study in json.loads(body)["study_summaries"]]
        assert names == [study_name(kernel, get_device("cpu").info().key)]
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_status_only_reads(tmp_path):
    with pytest.raises(DatabaseError, match="no such file"):
        status(f"sqlite:///{tmp_path / 'none.db'}")
    assert list(tmp_path.iterdir()) == []  # looking created nothing
