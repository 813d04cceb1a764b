"""Failures that used to come after a file was written (or never): a damaged database schema, a
GRAPH_PATH that cannot be written, an import or merge whose input is bad, a prune of a missing
database, an unknown TUNESEARCH_DEVICE, an export that names a kernel twice, a dashboard with no
studies to show or an address it cannot listen on. Each runs the real command line in
a fresh process and must exit 2 with one line on stderr, leaving every file of its folder as it
was (contents and modification times) and creating none.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from tunesearch.db import Store

from tests.cli.test_bad_input_cli import _export_with, _relu_model
from tests.db.conftest import Make

TIMEOUT_S = 300


def _snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file under folder: its hash and its modification time in nanoseconds."""
    return {str(path.relative_to(folder)): (hashlib.sha256(path.read_bytes()).hexdigest(),
                                            path.stat().st_mtime_ns)
            for path in sorted(folder.rglob("*")) if path.is_file()}


def _build(folder: Path) -> None:
    make = Make()
    onnx.save(_relu_model([2, 8]), folder / "relu.onnx")
    with Store(folder / "good.db") as store:
        store.record(make.kernel(), make.device(), make.result())
    for name, damage in (("no_trials.db", "DROP TABLE trials"),
                         ("no_host.db", "ALTER TABLE results DROP COLUMN host")):
        (folder / name).write_bytes((folder / "good.db").read_bytes())
        with sqlite3.connect(folder / name) as connection:
            connection.execute(damage)
        connection.close()
    (folder / "empty.db").write_bytes(b"")
    (folder / "corrupt.db").write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 16)
    (folder / "bad_studies.db").write_bytes((folder / "good.db").read_bytes())
    (folder / "bad_studies.studies.db").write_bytes(b"SQLite format 3\x00" + bytes(256) * 16)
    (folder / "foreign_studies.db").write_bytes((folder / "good.db").read_bytes())
    (folder / "foreign_studies.studies.db").write_bytes((folder / "good.db").read_bytes())
    _export_with(folder / "valid.json", make)
    _export_with(folder / "zero_time.json", make, time_s=0.0)
    for name, changes in (("config_999", {"config": {"knobs": {"unroll": 2}, "version": 999}}),
                          ("config_garbage", {"config": {"knobs": {}, "version": "2 garbage"}}),
                          ("config_true", {"config": {"knobs": {}, "version": True}}),
                          ("time_1e300", {"time_s": 1e300}),
                          ("default_1e300", {"default_time_s": 1e300})):
        _export_with(folder / f"{name}.json", make, **changes)
    document = json.loads((folder / "valid.json").read_text())
    variants = {
        "version_true.json": {**document, "version": True},
        "kernel_twice.json": {**document, "kernels": document["kernels"] * 2},
        "device_twice.json": {**document, "devices": document["devices"] * 2},
        "result_twice.json": {**document, "results": document["results"] * 2},
    }
    # the case: a kernel entry given again, renamed, would rename the stored kernel
    renamed = dict(document["kernels"][0], name="renamed")
    variants["kernel_renamed.json"] = {**document, "kernels": [*document["kernels"], renamed]}
    for name, variant in variants.items():
        (folder / name).write_text(json.dumps(variant))


def _cli(folder: Path, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    full_env = {key: value for key, value in os.environ.items()
                if key not in ("DEBUG", "GRAPH", "TUNESEARCH_DB", "TUNESEARCH_NODB",
                               "TUNESEARCH_DEVICE")}
    full_env["TUNESEARCH_DB"] = str(folder / "default.db")  # must not be created either
    full_env["TUNESEARCH_CACHE"] = str(folder.parent / f"{folder.name}-cache")
    full_env.update({key: value.format(dir=folder) for key, value in env.items()})
    return subprocess.run([sys.executable, "-m", "tunesearch",
                           *[arg.format(dir=folder) for arg in args]], capture_output=True,
                          text=True, env=full_env, timeout=TIMEOUT_S, cwd=folder)


TUNE = ["tune", "{dir}/relu.onnx", "--trials", "2", "--repeat", "1", "--quiet"]
CASES = {
    "tune into a dropped table": (TUNE + ["--db", "{dir}/no_trials.db"], {},
                                  ("no_trials.db", "damaged", "'trials'")),
    "tune into a dropped column": (TUNE + ["--db", "{dir}/no_host.db"], {},
                                   ("no_host.db", "results.host")),
    "ls a dropped table": (["db", "ls", "--db", "{dir}/no_trials.db"], {}, ("damaged",)),
    "import into a dropped table": (["db", "import", "{dir}/valid.json", "--db",
                                     "{dir}/no_trials.db"], {}, ("damaged",)),
    "tune with GRAPH_PATH in a missing folder": (
        TUNE + ["--db", "{dir}/good.db"], {"GRAPH": "1", "GRAPH_PATH": "{dir}/no/such/g.dot"},
        ("GRAPH_PATH", "no/such")),
    "import a bad file into a new database": (
        ["db", "import", "{dir}/zero_time.json", "--db", "{dir}/new.db"], {},
        ("zero_time.json", "time_s")),
    "import a missing file into a new database": (
        ["db", "import", "{dir}/none.json", "--db", "{dir}/new.db"], {}, ("none.json",)),
    "merge a missing database into a new one": (
        ["db", "merge", "{dir}/none.db", "--db", "{dir}/new.db"], {}, ("none.db",)),
    "merge an empty database into a new one": (
        ["db", "merge", "{dir}/empty.db", "--db", "{dir}/new.db"], {}, ("empty.db",)),
    "prune a missing database": (
        ["db", "prune", "--unseen-days", "3", "--db", "{dir}/new.db"], {},
        ("new.db", "no such file")),
    "prune an empty database": (
        ["db", "prune", "--unseen-days", "3", "--db", "{dir}/empty.db"], {},
        ("empty.db", "empty")),
    "import version true": (["db", "import", "{dir}/version_true.json", "--db", "{dir}/new.db"],
                            {}, ("version_true.json", "version True")),
    "import a kernel twice": (["db", "import", "{dir}/kernel_twice.json", "--db", "{dir}/good.db"],
                              {}, ("kernels[1]", "twice")),
    "import a kernel renamed": (["db", "import", "{dir}/kernel_renamed.json", "--db",
                                 "{dir}/good.db"], {}, ("kernels[1]", "twice")),
    "import a device twice": (["db", "import", "{dir}/device_twice.json", "--db", "{dir}/good.db"],
                              {}, ("devices[1]", "twice")),
    "import a result twice": (["db", "import", "{dir}/result_twice.json", "--db", "{dir}/good.db"],
                              {}, ("results[1]", "twice")),
    "dashboard on a missing database": (["dashboard", "--db", "{dir}/new.db"], {},
                                        ("new.db", "no such file")),
    "dashboard on a corrupt database": (["dashboard", "--db", "{dir}/corrupt.db"], {},
                                        ("corrupt.db",)),
    "dashboard on an empty database": (["dashboard", "--db", "{dir}/empty.db"], {},
                                       ("empty.db",)),
    "dashboard without a studies file": (["dashboard", "--db", "{dir}/good.db"], {},
                                         ("good.studies.db", "tune")),
    "dashboard on a corrupt studies file": (["dashboard", "--db", "{dir}/bad_studies.db"], {},
                                            ("bad_studies.studies.db",)),
    "dashboard on a studies file of results": (
        ["dashboard", "--db", "{dir}/foreign_studies.db"], {}, ("foreign_studies.studies.db",)),
    "dashboard on a host that does not resolve": (
        ["dashboard", "--db", "{dir}/good.db", "--host", "no-such-host.invalid"], {},
        ("no-such-host.invalid", "resolve")),
    "dashboard on another machine's address": (  # TEST-NET-1: never an address of this one
        ["dashboard", "--db", "{dir}/good.db", "--host", "192.0.2.1"], {},
        ("192.0.2.1", "this machine")),
    "import a config of version 999": (
        ["db", "import", "{dir}/config_999.json", "--db", "{dir}/good.db"], {},
        ("config_999.json", "results[0]", "version 999")),
    "import a config version with garbage": (
        ["db", "import", "{dir}/config_garbage.json", "--db", "{dir}/good.db"], {},
        ("config_garbage.json", "'2 garbage'")),
    "import a config version true": (
        ["db", "import", "{dir}/config_true.json", "--db", "{dir}/good.db"], {},
        ("config_true.json", "version True")),
    "import a time of 1e300": (["db", "import", "{dir}/time_1e300.json", "--db", "{dir}/good.db"],
                               {}, ("time_1e300.json", "'time_s'", "3600")),
    "import a default time of 1e300": (
        ["db", "import", "{dir}/default_1e300.json", "--db", "{dir}/good.db"], {},
        ("default_1e300.json", "'default_time_s'")),
    "unknown TUNESEARCH_DEVICE": (["devices"], {"TUNESEARCH_DEVICE": "tpu"},
                                  ("TUNESEARCH_DEVICE", "'tpu'", "cpu", "reference")),
    "unknown TUNESEARCH_DEVICE for run": (["run", "{dir}/relu.onnx", "--db", "{dir}/good.db"],
                                          {"TUNESEARCH_DEVICE": "gpu0"}, ("TUNESEARCH_DEVICE",)),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("refused")
    _build(folder)
    return folder


@pytest.mark.parametrize("name", list(CASES))
def test_refused_in_one_line_before_any_file_changes(files, name):
    args, env, words = CASES[name]
    before = _snapshot(files)
    proc = _cli(files, args, env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert len(lines) == 1 and "internal error" not in lines[0], proc.stderr[-3000:]
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert _snapshot(files) == before


def test_tunesearch_device_names_the_default_device(files, tmp_path):
    """A known TUNESEARCH_DEVICE is the device a command without --device uses."""
    proc = _cli(files, ["run", "{dir}/relu.onnx", "--db", "{dir}/good.db", "--repeat", "1",
                        "--json"], {"TUNESEARCH_DEVICE": "reference"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["device"] == "reference"


def test_a_valid_import_into_a_new_database_still_creates_it(files, tmp_path):
    target = tmp_path / "fresh.db"
    proc = _cli(files, ["db", "import", "{dir}/valid.json", "--db", str(target)], {})
    assert proc.returncode == 0, proc.stderr[-3000:]
    with Store(target, readonly=True) as store:
        assert [row.kernel_key for row in store.list_results()] == [Make().kernel().key]
