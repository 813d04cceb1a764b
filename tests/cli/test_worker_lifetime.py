"""Workers never outlive their tune, and a worker count the machine cannot serve is refused
before anything starts. The commands, their workers and the database are real."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _tune(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tunesearch", "tune", "example:tiny_cnn",
                             *args], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, **kwargs)


def test_more_workers_than_the_machine_serves_are_refused_in_one_line(tmp_path):
    db = tmp_path / "t.db"
    tune = _tune("--workers", "100000", "--db", f"sqlite:///{db}")
    out, err = tune.communicate(timeout=120)
    assert tune.returncode == 2
    assert len(err.strip().splitlines()) == 1 and "--workers 100000" in err, err
    assert not db.exists()  # refused before a file was created


def _session(sid: int) -> list[int]:
    """The pids of every live process in session sid (zombies are dead: left out)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def _running_leases(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as connection:
            return connection.execute(
                "SELECT count(*) FROM leases WHERE state = 'running'").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


def test_a_tune_killed_outright_leaves_no_process_and_no_held_lease(tmp_path):
    db = tmp_path / "t.db"
    # its own session: every process it starts, at any depth, is found by the session id
    tune = _tune("--workers", "2", "--trials", "5000", "--repeat", "1", "--quiet",
                 "--db", f"sqlite:///{db}", start_new_session=True)
    try:
        deadline = time.time() + 300
        while _running_leases(db) < 2 and time.time() < deadline and tune.poll() is None:
            time.sleep(0.5)
        assert _running_leases(db) == 2, tune.stderr.read() if tune.poll() is not None else ""
        assert len(_session(tune.pid)) >= 3  # the tune and its two workers at least
        tune.kill()
        tune.wait()
        deadline = time.time() + 40
        while _session(tune.pid) and time.time() < deadline:
            time.sleep(0.5)
        assert _session(tune.pid) == []
        assert _running_leases(db) == 0, tune.stderr.read()  # each gave its lease back
    finally:
        for pid in _session(tune.pid):  # a failed test must not leave them behind either
            os.kill(pid, signal.SIGKILL)
