"""The store API on SQLite and PostgreSQL: record, lookup, trials, inspection and pruning."""
from __future__ import annotations

import dataclasses
import math
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import create_engine, inspect, text

from tunesearch.db import DatabaseError, Store, default_url
from tunesearch.db._engine import normalize_url


def test_record_then_lookup_returns_what_was_stored(store_url, make):
    with Store(store_url) as store:
        before = datetime.now(timezone.utc)
        assert store.lookup(make.kernel().key, make.device().key) is None
        assert store.record(make.kernel(), make.device(), make.result(2.5e-4)) is True
        found = store.lookup(make.kernel().key, make.device().key)
    expected = make.result(2.5e-4)
    assert dataclasses.replace(found, created=None) == expected
    assert found.created.tzinfo is not None
    assert before - timedelta(seconds=5) <= found.created <= datetime.now(timezone.utc)


def test_lookup_never_answers_for_another_device_or_kernel(store_url, make):
    with Store(store_url) as store:
        store.record(make.kernel(0), make.device(0), make.result())
        assert store.lookup(make.kernel(0).key, make.device(1).key) is None
        assert store.lookup(make.kernel(1).key, make.device(0).key) is None
        # a prefix of the key is not the key
        assert store.lookup(make.kernel(0).key[:-1], make.device(0).key) is None


def test_best_is_replaced_only_by_a_strictly_faster_result(store_url, make):
    kernel, device = make.kernel(), make.device()
    with Store(store_url) as store:
        assert store.record(kernel, device, make.result(1e-3, sampler="first"))
        assert not store.record(kernel, device, make.result(2e-3, sampler="slower"))
        assert not store.record(kernel, device, make.result(1e-3, sampler="tie"))
        assert store.lookup(kernel.key, device.key).sampler == "first"
        assert store.record(kernel, device, make.result(5e-4, sampler="faster"))
        best = store.lookup(kernel.key, device.key)
        assert (best.sampler, best.time_s) == ("faster", 5e-4)
        assert store.stats()["results"] == 1


def test_trials_are_kept_whether_or_not_the_result_wins(store_url, make):
    kernel, device = make.kernel(), make.device()
    with Store(store_url) as store:
        store.record(kernel, device, make.result(1e-3),
                     [make.trial(1, 2e-3), make.trial(0, None, "compile error: x")])
        store.record(kernel, device, make.result(9e-3), [make.trial(2, 9e-3)])
        trials = store.trials(kernel.key, device.key)
        assert trials == [make.trial(0, None, "compile error: x"), make.trial(1, 2e-3),
                          make.trial(2, 9e-3)]
        assert store.trials(kernel.key, make.device(5).key) == []


def test_configs_are_data_and_round_trip_exactly(store_url, make):
    config = {"name": "'); DROP TABLE results; --", "__import__": "os.system('rm -rf /')",
              "nested": {"tiles": [1, 2, [3]], "none": None, "flag": True}, "µ": "ünïcode",
              "big": 2 ** 62, "small": 1e-300}
    with Store(store_url) as store:
        store.record(make.kernel(), make.device(), make.result(config=config))
        assert store.lookup(make.kernel().key, make.device().key).config == config
        assert store.stats()["results"] == 1  # the table is still there


def test_record_refuses_values_that_are_not_data(store_url, make):
    with Store(store_url) as store:
        with pytest.raises(ValueError, match="time_s"):
            store.record(make.kernel(), make.device(), make.result(time_s=math.nan))
        with pytest.raises(ValueError, match="config"):
            store.record(make.kernel(), make.device(), make.result(config={"f": print}))
        with pytest.raises(ValueError, match="config"):
            store.record(make.kernel(), make.device(), make.result(config=[1, 2]))
        assert store.stats()["kernels"] == 0  # nothing half-written


def test_a_tampered_config_reads_as_a_miss(store_url, make):
    with Store(store_url) as store:
        store.record(make.kernel(), make.device(), make.result())
    engine = create_engine(normalize_url(store_url))
    with engine.begin() as connection:
        connection.execute(text("UPDATE results SET config = 'exec(\"boom\")'"))
    engine.dispose()
    with Store(store_url) as store:
        assert store.lookup(make.kernel().key, make.device().key) is None
        assert store.list_results() == []


def test_list_show_and_stats(store_url, make):
    with Store(store_url) as store:
        store.record(make.kernel(1), make.device(0), make.result(1e-3), [make.trial(0)])
        store.record(make.kernel(1), make.device(1), make.result(3e-3))
        store.record(make.kernel(2), make.device(1), make.result(2e-3))
        # "_" in a prefix is a character, not a LIKE wildcard
        lookalike = dataclasses.replace(make.kernel(3), key="kX0001cafe")
        store.record(lookalike, make.device(0), make.result())
        rows = store.list_results()
        assert [(r.kernel_key, r.device_key) for r in rows] == [
            (make.kernel(1).key, make.device(0).key), (make.kernel(1).key, make.device(1).key),
            (make.kernel(2).key, make.device(1).key), ("kX0001cafe", make.device(0).key)]
        assert {r.kernel_key for r in store.list_results(make.device(1).key)} == {
            make.kernel(1).key, make.kernel(2).key}
        (detail,) = store.show("k_0001")
        assert detail.kernel == make.kernel(1)
        assert [device.key for device, _ in detail.results] == [make.device(0).key,
                                                                 make.device(1).key]
        assert detail.results[0][0].fingerprint == make.device(0).fingerprint
        assert detail.trial_count == 1
        assert len(store.show("k_")) == 2
        assert store.show("nothing") == []
        stats = store.stats()
    assert {k: stats[k] for k in ("kernels", "devices", "results", "trials")} == {
        "kernels": 3, "devices": 2, "results": 4, "trials": 1}
    assert stats["results_by_backend"] == {"cpu": 4}


def _age_devices(url: str, days: float) -> None:
    engine = create_engine(normalize_url(url))
    old = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(days=days)
    with engine.begin() as connection:
        connection.execute(text("UPDATE devices SET first_seen = :t, last_seen = :t"), {"t": old})
    engine.dispose()


def test_prune_removes_old_space_versions_and_unseen_devices(store_url, make):
    with Store(store_url) as store:
        store.record(make.kernel(0, space_version=1), make.device(0), make.result(),
                     [make.trial(0)])
        store.record(make.kernel(1, space_version=2), make.device(0), make.result())
        store.record(make.kernel(1, space_version=2), make.device(1), make.result())
        assert store.prune() == 0
        assert store.prune(space_version_below=2) == 1
        assert store.lookup(make.kernel(0).key, make.device(0).key) is None
        assert store.trials(make.kernel(0).key, make.device(0).key) == []
        assert store.lookup(make.kernel(1).key, make.device(0).key) is not None
    _age_devices(store_url, days=10)
    with Store(store_url) as store:
        store.touch_device(make.device(1))  # seen again just now: kept
        assert store.prune(devices_unseen_days=5) == 1
        assert store.lookup(make.kernel(1).key, make.device(0).key) is None
        assert store.lookup(make.kernel(1).key, make.device(1).key) is not None
        assert store.stats()["devices"] == 1


def test_a_kernel_tuned_again_under_a_newer_space_takes_its_version(store_url, make):
    with Store(store_url) as store:
        store.record(make.kernel(0, space_version=1), make.device(0), make.result())
        store.record(make.kernel(0, space_version=2), make.device(1), make.result())
        store.record(make.kernel(0, space_version=1), make.device(2), make.result())
        [detail] = store.show(make.kernel(0).key)
        assert detail.kernel.space_version == 2
        assert store.prune(space_version_below=2) == 0
        assert store.lookup(make.kernel(0).key, make.device(0).key) is not None


def test_schema_is_created_at_head(store_url):
    with Store(store_url) as store:
        assert store.revision_before is None
        assert store.revision == "v4_verified"
    engine = create_engine(normalize_url(store_url))
    assert {"kernels", "devices", "results", "trials", "alembic_version"} <= set(
        inspect(engine).get_table_names())
    engine.dispose()


def test_default_url_follows_env_and_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("TUNESEARCH_DB", raising=False)
    monkeypatch.delenv("TUNESEARCH_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_url() == f"sqlite:///{tmp_path}/cache/tunesearch/tunesearch.db"
    with Store() as store:  # creates the folder
        assert store.where == f"{tmp_path}/cache/tunesearch/tunesearch.db"
    assert (tmp_path / "cache" / "tunesearch" / "tunesearch.db").is_file()
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_url() == f"sqlite:///{tmp_path}/home/.cache/tunesearch/tunesearch.db"
    monkeypatch.setenv("TUNESEARCH_DB", "postgresql://u@db.example/tunes")
    assert default_url() == "postgresql://u@db.example/tunes"


def test_urls_are_normalized(tmp_path):
    assert normalize_url("postgresql://u:pw@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url(tmp_path / "x.db").database == str(tmp_path / "x.db")
    with pytest.raises(DatabaseError, match="invalid database URL"):
        normalize_url("::not a url://")
    with pytest.raises(DatabaseError, match="use sqlite or postgresql"):
        Store("mysql+nodriver://u@h/db")


def test_postgresql_scheme_without_driver_uses_psycopg(pg_url, make):
    plain = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with Store(plain) as store:
        store.record(make.kernel(), make.device(), make.result())
        assert store.url.startswith("postgresql+psycopg://")
        assert store.lookup(make.kernel().key, make.device().key) is not None


def test_on_backend_gives_every_device_of_the_backend_the_kernel_itself_first(store_url, make):
    """A search reads what the devices of its backend hold: the kernel itself first, then
    kernels of its operations in other shapes; never another backend's results, never a kernel
    of other operations."""
    kernel = make.kernel(0)
    nearer_shape = dataclasses.replace(make.kernel(1), shapes="64x64x48")
    farther_shape = dataclasses.replace(make.kernel(2), shapes="64x64x8")
    other_ops = dataclasses.replace(make.kernel(3), ops="add")
    this, other = make.device(0), make.device(1)
    gpu = dataclasses.replace(make.device(2), backend="opencl")
    with Store(store_url) as store:
        for k in (farther_shape, nearer_shape, kernel, other_ops):
            store.record(k, other, make.result(sampler=k.key))
        store.record(kernel, this, make.result(sampler="this device"))
        store.record(kernel, gpu, make.result(sampler="another backend"))
        found = store.on_backend(kernel, "cpu")
    assert sorted((device.key, key, shapes) for device, key, shapes, _ in found[:2]) == \
        [(this.key, kernel.key, "64x64x64"), (other.key, kernel.key, "64x64x64")]
    assert [(device.key, key, shapes) for device, key, shapes, _ in found[2:]] == [
        (other.key, nearer_shape.key, "64x64x48"), (other.key, farther_shape.key, "64x64x8")]
    assert other in [device for device, *_ in found]
    assert all(config == make.result().config for *_, config in found)
