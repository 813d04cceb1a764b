"""Stored rows that are not what a measurement gives are ignored with a warning when read: a
config of a space version this release does not know, a time of 1e300. A real tune writes the
database; each case tampers a copy of it with sqlite3 and runs the real command line."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from tests.cli.test_bad_input_cli import _relu_model

TIMEOUT_S = 300


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items()
           if key not in ("DEBUG", "GRAPH", "TUNESEARCH_DB", "TUNESEARCH_NODB",
                          "TUNESEARCH_DEVICE")}
    env["TUNESEARCH_CACHE"] = str(cwd / "cache")
    return subprocess.run([sys.executable, "-m", "tunesearch", *args], capture_output=True,
                          text=True, env=env, timeout=TIMEOUT_S, cwd=cwd)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    """A folder with relu.onnx and tuned.db, which holds the winner of its one kernel."""
    folder = tmp_path_factory.mktemp("stored")
    onnx.save(_relu_model([64, 64]), folder / "relu.onnx")
    proc = _cli("tune", str(folder / "relu.onnx"), "--db", str(folder / "tuned.db"),
                "--trials", "3", "--repeat", "1", "--quiet", cwd=folder)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder


def _tampered(folder: Path, tmp_path: Path, sql: str, *params) -> Path:
    path = tmp_path / "copy.db"
    shutil.copy(folder / "tuned.db", path)
    with sqlite3.connect(path) as connection:
        assert connection.execute(sql, params).rowcount == 1
    connection.close()
    return path


def _with_version(folder: Path, version) -> str:
    with sqlite3.connect(folder / "tuned.db") as connection:
        [config] = connection.execute("SELECT config FROM results").fetchone()
    connection.close()
    return json.dumps({**json.loads(config), "version": version})


def _run(tuned: Path, path: Path) -> tuple[dict, list[str]]:
    proc = _cli("run", str(tuned / "relu.onnx"), "--db", str(path), "--repeat", "1", "--json",
                cwd=path.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), proc.stderr.strip().splitlines()


def test_the_untouched_winner_is_used(tuned, tmp_path):
    path = _tampered(tuned, tmp_path, "UPDATE results SET host = host")
    summary, lines = _run(tuned, path)
    assert summary["kernels_tuned"] == 1 and lines == []


@pytest.mark.parametrize("version", [999, "2 garbage", "2", True, 0])
def test_a_config_of_a_version_this_release_does_not_know_is_ignored(tuned, tmp_path, version):
    path = _tampered(tuned, tmp_path, "UPDATE results SET config = ?",
                     _with_version(tuned, version))
    summary, lines = _run(tuned, path)
    assert summary["kernels_tuned"] == 0
    assert len(lines) == 1 and "ignoring the stored config" in lines[0], lines
    assert f"config version {version!r}" in lines[0]


def test_a_config_of_an_older_space_version_is_still_used(tuned, tmp_path):
    path = _tampered(tuned, tmp_path, "UPDATE results SET config = ?", _with_version(tuned, 1))
    summary, lines = _run(tuned, path)
    assert summary["kernels_tuned"] == 1 and lines == []


@pytest.mark.parametrize("column, value", [("time_s", 1e300), ("time_s", -1e-3),
                                           ("default_time_s", 1e300)])
def test_a_time_no_measurement_gives_is_ignored_with_a_warning(tuned, tmp_path, column, value):
    path = _tampered(tuned, tmp_path, f"UPDATE results SET {column} = ?", value)
    before = path.read_bytes()
    summary, _ = _run(tuned, path)
    assert summary["kernels_tuned"] == 0
    listing = _cli("db", "ls", "--db", str(path), cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr[-3000:]
    lines = listing.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ignoring a stored result"), lines
    assert "0 result(s)" in listing.stdout
    assert path.read_bytes() == before


def test_a_trial_time_of_1e300_is_left_out_of_an_export(tuned, tmp_path):
    path = _tampered(tuned, tmp_path, "UPDATE trials SET time_s = 1e300 WHERE id = "
                     "(SELECT min(id) FROM trials WHERE time_s IS NOT NULL)")
    with sqlite3.connect(path) as connection:
        [stored] = connection.execute("SELECT count(*) FROM trials").fetchone()
    connection.close()
    proc = _cli("db", "export", str(tmp_path / "out.json"), "--db", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ignoring a stored trial" in proc.stderr
    exported = json.loads((tmp_path / "out.json").read_text())["trials"]
    assert len(exported) == stored - 1 and all(t["time_s"] is None or t["time_s"] < 3600
                                                for t in exported)
