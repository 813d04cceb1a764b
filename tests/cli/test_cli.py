"""The tunesearch command, end to end: tune the bundled example, run it, and bad input."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import onnxruntime
import pytest

from tests.runtime.test_graph import kernel_nodes, parse_dot
from tunesearch.cli import EXAMPLES


def cli(*args, db=None, check=False, timeout=600, env=None, **settings):
    env = dict(os.environ, **(env or {}), **settings)
    if db:
        env["TUNESEARCH_DB"] = db
    proc = subprocess.run([sys.executable, "-m", "tunesearch", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_tune_then_run_uses_the_tuned_kernels(tmp_path):
    db = f"sqlite:///{tmp_path / 'r.db'}"
    first = json.loads(cli("tune", "example:tiny_cnn", "--trials", "4", "--json", "--repeat",
                           "3", db=db, check=True, GRAPH="1",
                           GRAPH_PATH=str(tmp_path / "g.dot")).stdout)
    assert first["kernels_tuned"] > 0
    # GRAPH=1 draws the last model call of the run: the tuned one
    boxes = kernel_nodes(parse_dot((tmp_path / "g.dot").read_text())[0])
    assert len(boxes) == first["kernels"]
    assert sum("  tuned\n" in b["label"] for b in boxes) == first["kernels_tuned"]
    assert first["kernels_tuned"] == first["kernels"] - sum(
        r["status"] == "failed" for r in first["results"])
    for row in first["results"]:
        if row["status"] == "tuned":
            assert row["tuned_s"] > 0
            assert row["speedup"] == pytest.approx(row["default_s"] / row["tuned_s"])
    second = json.loads(cli("tune", "example:tiny_cnn", "--trials", "4", "--json", "--repeat",
                            "3", db=db, check=True).stdout)
    assert all(r["status"] == "stored" for r in second["results"])
    # the tuned kernels compute what onnxruntime computes, on inputs of our own
    model = EXAMPLES / "tiny_cnn.onnx"
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    [spec] = session.get_inputs()
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "in.npz", **{spec.name: x})
    run = json.loads(cli("run", "example:tiny_cnn", "--json", "--repeat", "3", "--inputs",
                         str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "out.npz"),
                         db=db, check=True).stdout)
    assert run["kernels_tuned"] == first["kernels_tuned"]
    assert run["latency_s"] > 0
    expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, {spec.name: x})))
    with np.load(tmp_path / "out.npz") as got:
        assert sorted(got.files) == sorted(expected)
        for name, value in expected.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5)
    # TUNESEARCH_NODB=1: the same database is there, and not used
    untuned = json.loads(cli("run", "example:tiny_cnn", "--json", "--repeat", "1", db=db,
                             env={"TUNESEARCH_NODB": "1"}, check=True).stdout)
    assert untuned["kernels_tuned"] == 0 and untuned["kernels"] == run["kernels"]
    ls = cli("db", "ls", "--db", db, check=True).stdout
    assert "r_" in ls


def test_time_budget_and_patience_end_the_search_before_the_trials(tmp_path):
    db = f"sqlite:///{tmp_path / 'r.db'}"
    out = json.loads(cli("tune", "example:tiny_cnn", "--trials", "100000", "--patience", "3",
                         "--time-budget", "60", "--json", "--repeat", "2", db=db,
                         check=True).stdout)
    tuned = [r for r in out["results"] if r["status"] == "tuned"]
    assert tuned and out["seconds"] > 0
    for row in tuned:  # never the trial budget: patience, the clock, or a swept space
        assert row["stopped_by"] in ("patience", "seconds", "exhausted", "stalled"), row
        assert row["trials"] < 100000


def test_ctrl_c_keeps_what_was_found_and_exits_130(tmp_path):
    path = tmp_path / "r.db"
    env = dict(os.environ, TUNESEARCH_DB=str(path))
    # a dozen trials per kernel: the first kernels are saved within seconds, the rest still wait
    # (with 6 the whole tune once ended while a loaded machine kept this test from signalling)
    tune = subprocess.Popen([sys.executable, "-m", "tunesearch", "tune", "example:tiny_cnn",
                             "--trials", "12", "--json", "--repeat", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 600
        while _results(path) == 0 and time.monotonic() < deadline and tune.poll() is None:
            time.sleep(0.5)
        assert _results(path) >= 1, "no kernel was saved before the deadline"
        tune.send_signal(signal.SIGINT)
        stdout, stderr = tune.communicate(timeout=300)
    finally:
        if tune.poll() is None:
            tune.kill()
    assert tune.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr
    # the table is shown, then one line says what happened to the results
    assert [line for line in stderr.splitlines() if "interrupted" in line] == [
        "tunesearch: interrupted; results already stored are kept"], stderr[-3000:]
    summary = json.loads(stdout)
    assert summary["interrupted"]
    statuses = [r["status"] for r in summary["results"]]
    assert "skipped" in statuses  # stopped before the end
    # every kernel found so far, the interrupted one's best included, is in the database
    found = [r for r in summary["results"] if r["tuned_s"] is not None]
    assert len(found) >= 1 and _results(path) == len(found)


def _results(path) -> int:
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
            return connection.execute("SELECT count(*) FROM results").fetchone()[0]
    except sqlite3.Error:  # not created yet
        return 0


@pytest.mark.parametrize("args,message", [
    (["run", "missing.onnx"], "not found"),
    (["run", "example:nope"], "no bundled example"),
    (["run", "example:tiny_cnn", "--device", "tpu"], "unknown device"),
    (["tune", "example:tiny_cnn", "--trials", "0"], "trials"),
    (["tune", "example:tiny_cnn", "--sampler", "magic"], "unknown sampler"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    proc = cli(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_not_onnx_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a model")
    proc = cli("run", str(bad))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_devices_lists_the_cpu():
    out = json.loads(cli("devices", "--json", check=True).stdout)
    assert out["cpu"]["available"] and out["cpu"]["key"].startswith("cpu-")
    assert "cuda" in out


def test_report_with_plot(tmp_path):
    db = f"sqlite:///{tmp_path / 'r.db'}"
    cli("tune", "example:tiny_cnn", "--trials", "3", "--quiet", "--repeat", "2", db=db,
        check=True)
    png = tmp_path / "report.png"
    out = cli("report", "--db", db, "--plot", str(png), check=True).stdout
    assert "speed-up" in out and png.stat().st_size > 1000
    # the tune registered its model, and every trial kept the time it was measured
    (device,) = json.loads(cli("report", "--db", db, "--json", check=True).stdout).values()
    (model,) = device["models"]
    assert model["model"] == "example:tiny_cnn" and model["kernels"] == device["kernels"]
    assert 0 < model["tuned_s"] and model["missing"] == 0
    times = [t for t, _ in model["points"]]
    assert times == sorted(times)
    assert len(set(times)) >= len(times) - 2 > device["kernels"] + 2  # not one time per kernel
    shares = [r["share"] for r in device["results"]]
    assert shares == sorted(shares, reverse=True) and sum(shares) == pytest.approx(1.0)


def test_tune_with_workers_then_status(tmp_path):
    db = f"sqlite:///{tmp_path / 'w.db'}"
    out = json.loads(cli("tune", "example:tiny_cnn", "--trials", "3", "--workers", "2", "--json",
                         "--repeat", "2", db=db, check=True).stdout)
    assert out["kernels_tuned"] > 0
    status = json.loads(cli("status", "--db", db, "--json", check=True).stdout)
    assert "tiny_cnn" in json.dumps(status)


def test_outputs_are_written_exactly_where_named(tmp_path):
    """A name without .npz is that file, as named (numpy would write name.npz beside it)."""
    out = tmp_path / "outputs_without_suffix"
    cli("run", "example:tiny_cnn", "--repeat", "1", "--outputs", str(out),
        env={"TUNESEARCH_NODB": "1"}, check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]
    with np.load(out) as got:
        assert got.files

