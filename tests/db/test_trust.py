"""Which stored result wins: measured here (verified) over imported, never a time that no
measurement gives; on SQLite and PostgreSQL."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from sqlalchemy import create_engine, text

from tunesearch.db import Store
from tunesearch.db._engine import normalize_url
from tunesearch.cli.db import main

V1_FIXTURE = Path(__file__).with_name("fixtures") / "v1.db"


def _execute(url: str, statement: str, **values) -> None:
    engine = create_engine(normalize_url(url))
    with engine.begin() as connection:
        connection.execute(text(statement), values)
    engine.dispose()


def _import(store: Store, tmp_path: Path, make, time_s: float) -> None:
    """Take a result of time_s in through an export file, as from another machine."""
    with Store(tmp_path / f"elsewhere-{time_s}.db") as other:
        other.record(make.kernel(), make.device(), make.result(time_s, host="elsewhere"))
        other.export(tmp_path / "elsewhere.json")
    store.import_(tmp_path / "elsewhere.json")


def test_a_result_measured_here_replaces_an_imported_one_even_when_slower(store_url, tmp_path,
                                                                         make):
    with Store(store_url) as store:
        _import(store, tmp_path, make, 1e-6)  # claims to be far faster than anything real
        imported = store.lookup(make.kernel().key, make.device().key)
        assert (imported.time_s, imported.verified, imported.host) == (1e-6, False, "elsewhere")
        assert store.record(make.kernel(), make.device(), make.result(1e-3))
        mine = store.lookup(make.kernel().key, make.device().key)
        assert (mine.time_s, mine.verified) == (1e-3, True)
        # from then on only a faster one replaces it, measured here or not
        assert not store.record(make.kernel(), make.device(), make.result(2e-3))
        _import(store, tmp_path, make, 5e-3)
        assert store.lookup(make.kernel().key, make.device().key).time_s == 1e-3
        _import(store, tmp_path, make, 5e-4)
        faster = store.lookup(make.kernel().key, make.device().key)
        assert (faster.time_s, faster.verified) == (5e-4, False)


def test_a_stored_time_of_zero_neither_counts_nor_pins_its_kernel(store_url, make):
    with Store(store_url) as store:
        store.record(make.kernel(), make.device(), make.result(1e-3))
    _execute(store_url, "UPDATE results SET time_s = 0, verified = :yes", yes=True)
    with Store(store_url) as store:
        assert store.lookup(make.kernel().key, make.device().key) is None  # ignored
        assert store.list_results() == []
        assert store.record(make.kernel(), make.device(), make.result(2e-3))  # and replaced
        assert store.lookup(make.kernel().key, make.device().key).time_s == 2e-3


def test_supersede_replaces_a_faster_result(store_url, make):
    with Store(store_url) as store:
        store.record(make.kernel(), make.device(), make.result(1e-6))
        assert not store.record(make.kernel(), make.device(), make.result(1e-3))
        assert store.record(make.kernel(), make.device(), make.result(1e-3), supersede=True)
        assert store.lookup(make.kernel().key, make.device().key).time_s == 1e-3


def test_results_from_before_v4_are_not_verified(tmp_path):
    path = tmp_path / "old.db"
    shutil.copyfile(V1_FIXTURE, path)
    with Store(path) as store:
        assert store.lookup("k_v1fixture", "d_v1fixture").verified is False


def test_db_show_says_whether_a_result_was_verified_here(tmp_path, make, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    url = f"sqlite:///{tmp_path / 'results.db'}"
    with Store(url) as store:
        store.record(make.kernel(1), make.device(), make.result(1e-3))
        _import(store, tmp_path, make, 1e-3)
    assert main(["db", "show", make.kernel(1).key, "--db", url]) == 0
    assert "verified  yes: measured here by `tunesearch tune`" in capsys.readouterr().out
    assert main(["db", "show", make.kernel(0).key, "--db", url]) == 0
    out = capsys.readouterr().out
    assert "verified  no: imported or merged" in out and "measures it again" in out
    document = json.loads(Path(tmp_path / "elsewhere.json").read_text())
    assert document["results"][0]["verified"] is True  # as the other machine saw it
