"""`tunesearch db ...` through argparse, as the command line runs it."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from tunesearch.db import KernelRecord, Store
from tunesearch.cli.db import main, register

V1_FIXTURE = Path(__file__).with_name("fixtures") / "v1.db"


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps to the terminal width


@pytest.fixture
def filled(tmp_path, make) -> str:
    url = f"sqlite:///{tmp_path / 'results.db'}"
    with Store(url) as store:
        store.record(make.kernel(1), make.device(0), make.result(2.5e-4, sampler="tpe"),
                     [make.trial(0), make.trial(1, None, "timeout")])
        store.record(make.kernel(2, space_version=0), make.device(1), make.result(1e-3))
    return url


def _fails(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_register_adds_the_db_group_to_an_existing_cli():
    parser = argparse.ArgumentParser(prog="tunesearch")
    subparsers = parser.add_subparsers(dest="command")
    register(subparsers)
    args = parser.parse_args(["db", "prune", "--space-version-below", "3", "--db", "x.db"])
    assert (args.command, args.db_command, args.space_version_below, args.db) == (
        "db", "prune", 3, "x.db")
    assert callable(args.func)


def test_ls_show_and_stats(capsys, filled, make):
    assert main(["db", "ls", "--db", filled]) == 0
    out = capsys.readouterr().out
    assert "r_1_64_64" in out and "r_2_64_64" in out and "250.0 us" in out
    assert "2 result(s)" in out
    main(["db", "ls", "--db", filled, "--device", make.device(1).key])
    out = capsys.readouterr().out
    assert "r_2_64_64" in out and "r_1_64_64" not in out
    main(["db", "show", make.kernel(1).key[:6], "--db", filled])
    out = capsys.readouterr().out
    assert make.kernel(1).key in out and '"unroll": 2' in out and "2 trial(s)" in out
    main(["db", "stats", "--db", filled])
    out = capsys.readouterr().out
    assert "v4_verified" in out and "results_by_backend" not in out and "cpu: 2" in out


def test_names_from_the_database_are_printed_as_text_not_markup(capsys, tmp_path, make):
    url = f"sqlite:///{tmp_path / 'odd.db'}"
    with Store(url) as store:
        odd = KernelRecord("k_[/bold]", "r_[red]1[/]", "[/]", "ops", "s", 1)
        store.record(odd, make.device(), make.result())
    main(["db", "ls", "--db", url])
    assert "r_[red]1[/]" in capsys.readouterr().out
    main(["db", "show", "k_[", "--db", url])
    assert "k_[/bold]" in capsys.readouterr().out


def test_export_import_merge_and_prune(capsys, tmp_path, filled, make):
    export = tmp_path / "shared.json"
    main(["db", "export", str(export), "--db", filled])
    assert "exported 2 result(s)" in capsys.readouterr().out
    assert json.loads(export.read_text())["format"] == "tunesearch-results"
    other = f"sqlite:///{tmp_path / 'other.db'}"
    main(["db", "import", str(export), "--db", other])
    assert "2 result(s) are new bests" in capsys.readouterr().out
    third = tmp_path / "third.db"
    main(["db", "merge", other, "--db", str(third)])
    assert "2 result(s) are new bests" in capsys.readouterr().out
    main(["db", "prune", "--space-version-below", "1", "--db", str(third)])
    assert "removed 1 result(s)" in capsys.readouterr().out
    with Store(third) as store:
        assert [row.kernel_key for row in store.list_results()] == [make.kernel(1).key]


def test_the_default_database_comes_from_the_environment(capsys, monkeypatch, filled):
    monkeypatch.setenv("TUNESEARCH_DB", filled)
    main(["db", "ls"])
    assert "2 result(s)" in capsys.readouterr().out


def test_upgrade_brings_a_v1_database_to_head(capsys, tmp_path):
    path = tmp_path / "old.db"
    shutil.copyfile(V1_FIXTURE, path)
    main(["db", "upgrade", "--db", str(path)])
    assert "from v1_initial to v4_verified" in capsys.readouterr().out
    main(["db", "upgrade", "--db", str(path)])
    assert "already at the newest revision" in capsys.readouterr().out


def test_errors_are_one_line_and_exit_2(capsys, tmp_path, filled):
    broken = tmp_path / "broken.db"
    broken.write_bytes(os.urandom(4096))
    assert str(broken) in _fails(capsys, ["db", "ls", "--db", str(broken)])
    assert "no kernel key starts with 'zz'" in _fails(capsys, ["db", "show", "zz", "--db", filled])
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"format": "tunesearch-results", "version": 7}))
    err = _fails(capsys, ["db", "import", str(wrong), "--db", filled])
    assert str(wrong) in err and "version 7" in err
    assert "--space-version-below" in _fails(capsys, ["db", "prune", "--db", filled])
    read_only = f"sqlite:///file:{tmp_path / 'results.db'}?mode=ro&uri=true"
    # the file is checked first, so a good one reaches the database that refuses it
    good = tmp_path / "good.json"
    with Store(filled, readonly=True) as store:
        store.export(good)
    assert "is read-only" in _fails(capsys, ["db", "import", str(good), "--db", read_only])
    path = tmp_path / "future.db"
    Store(path).close()
    connection = sqlite3.connect(path)
    connection.execute("UPDATE alembic_version SET version_num = 'v5_later'")
    connection.commit()
    connection.close()
    assert "upgrade tunesearch" in _fails(capsys, ["db", "upgrade", "--db", str(path)])
