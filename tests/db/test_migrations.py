"""Schema migrations: upgrading a v1 database, refusing newer ones, models equal to migrations."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, text

from tunesearch.db import DatabaseError, Store, head_revision
from tunesearch.db._engine import normalize_url
from tunesearch.db._migrations import ALEMBIC_DIR, alembic_config, known_revisions
from tunesearch.db._models import Base

V1_FIXTURE = Path(__file__).with_name("fixtures") / "v1.db"


@pytest.fixture
def v1_copy(tmp_path) -> Path:
    path = tmp_path / "old.db"
    shutil.copyfile(V1_FIXTURE, path)
    return path


def _revision(url: str) -> str | None:
    engine = create_engine(normalize_url(url))
    with engine.connect() as connection:
        revision = MigrationContext.configure(connection).get_current_revision()
    engine.dispose()
    return revision


def test_revisions_are_readable_and_shipped_in_the_package():
    assert known_revisions() == {"v1_initial", "v2_trials_history", "v3_leases", "v4_verified"}
    assert head_revision() == "v4_verified"
    assert ALEMBIC_DIR.parent == Path(__import__("tunesearch.db").db.__file__).parent
    assert (ALEMBIC_DIR / "env.py").is_file() and (ALEMBIC_DIR / "script.py.mako").is_file()


def test_v1_fixture_is_upgraded_when_opened_and_its_row_survives(v1_copy, make, monkeypatch,
                                                                 tmp_path):
    assert _revision(f"sqlite:///{V1_FIXTURE}") == "v1_initial"
    monkeypatch.chdir(tmp_path)  # no alembic.ini or source tree needed from the working folder
    with Store(v1_copy) as store:
        assert (store.revision_before, store.revision) == ("v1_initial", head_revision())
        old = store.lookup("k_v1fixture", "d_v1fixture")
        assert old.config == {"local": [4, 4], "order": [1, 0]}
        assert (old.time_s, old.gflops, old.trials, old.sampler) == (0.00125, 12.5, 64, "tpe")
        assert (old.spread, old.host) == (0.0, "")  # the columns v2 added, at their defaults
        assert store.trials("k_v1fixture", "d_v1fixture") == []
        (detail,) = store.show("k_v1")
        assert detail.results[0][0].fingerprint == {"threads": 2}
        # the upgraded database takes new records, trials included
        assert store.record(make.kernel(), make.device(), make.result(), [make.trial(0)])
        assert len(store.trials(make.kernel().key, make.device().key)) == 1
    assert _revision(f"sqlite:///{v1_copy}") == head_revision()


def test_auto_upgrade_off_refuses_an_old_database_and_leaves_it_alone(v1_copy):
    before = v1_copy.read_bytes()
    with pytest.raises(DatabaseError) as caught:
        Store(v1_copy, auto_upgrade=False)
    message = str(caught.value)
    assert "tunesearch db upgrade" in message and str(v1_copy) in message
    assert "\n" not in message
    assert v1_copy.read_bytes() == before
    with Store(v1_copy):  # the default upgrades it
        pass
    with Store(v1_copy, auto_upgrade=False) as store:
        assert store.lookup("k_v1fixture", "d_v1fixture") is not None


def test_a_new_database_is_created_at_head_even_without_auto_upgrade(tmp_path):
    with Store(tmp_path / "new.db", auto_upgrade=False) as store:
        assert (store.revision_before, store.revision) == (None, head_revision())


def test_a_read_only_old_database_is_not_upgraded(v1_copy):
    before = v1_copy.read_bytes()
    with pytest.raises(DatabaseError, match="read-only"):
        Store(v1_copy, readonly=True)
    assert v1_copy.read_bytes() == before


def test_a_newer_database_is_read_but_refused_for_writing(store_url, make):
    with Store(store_url) as store:
        store.record(make.kernel(), make.device(), make.result(1e-3))
    engine = create_engine(normalize_url(store_url))
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = 'v9_from_the_future'"))
    engine.dispose()
    with Store(store_url) as store:
        assert store.revision == "v9_from_the_future"
        assert store.lookup(make.kernel().key, make.device().key).time_s == 1e-3
        with pytest.raises(DatabaseError, match="upgrade tunesearch") as caught:
            store.record(make.kernel(), make.device(), make.result(1e-4))
        assert "v9_from_the_future" in str(caught.value)
        with pytest.raises(DatabaseError, match="upgrade tunesearch"):
            store.touch_device(make.device())
        assert store.lookup(make.kernel().key, make.device().key).time_s == 1e-3
    assert _revision(store_url) == "v9_from_the_future"


def test_models_match_the_migrated_schema(store_url):
    Store(store_url).close()
    engine = create_engine(normalize_url(store_url))
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    engine.dispose()
    assert differences == []


def test_downgrade_to_v1_then_upgrade_again(store_url, make):
    with Store(store_url) as store:
        store.record(make.kernel(), make.device(), make.result(1e-3, host="h"), [make.trial(0)])
    engine = create_engine(normalize_url(store_url))
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "v1_initial")
    engine.dispose()
    assert _revision(store_url) == "v1_initial"
    with Store(store_url) as store:
        assert store.revision_before == "v1_initial"
        result = store.lookup(make.kernel().key, make.device().key)
        assert (result.time_s, result.host) == (1e-3, "")  # host did not survive v1; the row did


def test_a_foreign_sqlite_database_is_refused_untouched(tmp_path):
    path = tmp_path / "other.db"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE notes (body TEXT)")
    connection.commit()
    connection.close()
    before = path.read_bytes()
    with pytest.raises(DatabaseError, match="not a tunesearch database") as caught:
        Store(path)
    assert str(path) in str(caught.value)
    assert path.read_bytes() == before
