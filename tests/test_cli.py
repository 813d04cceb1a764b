"""The tunesearch command, end to end: tune the bundled example, run it, and bad input."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def cli(*args, db=None, check=False, timeout=600):
    env = dict(os.environ)
    if db:
        env["TUNESEARCH_DB"] = db
    proc = subprocess.run([sys.executable, "-m", "tunesearch.cli", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_tune_then_run_uses_the_tuned_kernels(tmp_path):
    db = f"sqlite:///{tmp_path / 'r.db'}"
    first = json.loads(cli("tune", "example:tiny_cnn", "--trials", "4", "--json", "--repeat",
                           "3", db=db, check=True).stdout)
    assert first["kernels_tuned"] > 0
    assert first["kernels_tuned"] == first["kernels"] - sum(
        r["status"] == "failed" for r in first["results"])
    for row in first["results"]:
        if row["status"] == "tuned":
            assert row["tuned_s"] > 0 and row["speedup"] >= 0.5
    second = json.loads(cli("tune", "example:tiny_cnn", "--trials", "4", "--json", "--repeat",
                            "3", db=db, check=True).stdout)
    assert all(r["status"] == "stored" for r in second["results"])
    run = json.loads(cli("run", "example:tiny_cnn", "--json", "--repeat", "3", db=db,
                         check=True).stdout)
    assert run["kernels_tuned"] == first["kernels_tuned"]
    assert run["latency_s"] > 0
    ls = cli("db", "ls", "--db", db, check=True).stdout
    assert "r_" in ls


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


def test_tune_with_workers_then_status(tmp_path):
    db = f"sqlite:///{tmp_path / 'w.db'}"
    out = json.loads(cli("tune", "example:tiny_cnn", "--trials", "3", "--workers", "2", "--json",
                         "--repeat", "2", db=db, check=True).stdout)
    assert out["kernels_tuned"] > 0
    status = json.loads(cli("status", "--db", db, "--json", check=True).stdout)
    assert "tiny_cnn" in json.dumps(status)


def test_graph_1_draws_the_kernels_of_a_model_run(tmp_path):
    dot = tmp_path / "kernels.dot"
    env = dict(os.environ, GRAPH="1", GRAPH_PATH=str(dot), TUNESEARCH_NODB="1")
    proc = subprocess.run([sys.executable, "-m", "tunesearch.cli", "run", "example:tiny_cnn",
                           "--repeat", "1"], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    text = dot.read_text()
    kernels = [line for line in text.splitlines() if line.strip().startswith("k")
               and "label=" in line]
    assert len(kernels) == 13  # the tiny CNN's kernels, each once
    edges = [line.strip().rstrip(";").split(" -> ") for line in text.splitlines() if "->" in line]
    # every kernel but the first reads what an earlier kernel wrote
    for i in range(1, 13):
        assert any(dst == f"k{i}" and src.startswith("k") and int(src[1:]) < i
                   for src, dst in edges), i
