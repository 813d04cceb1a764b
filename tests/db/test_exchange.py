"""Export, import and merge: round trips between databases and backends, and bad files."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tunesearch.db import DatabaseError, Store


def _fill(store: Store, make, times: dict[int, float], trials_from: int = 0) -> None:
    for k, time_s in times.items():
        store.record(make.kernel(k), make.device(k % 2), make.result(time_s, host=f"h{k}"),
                     [make.trial(trials_from + k, time_s), make.trial(99, None, "timeout")])


def _content(store: Store) -> tuple:
    """Everything a store holds, independent of row ids and of the export time."""
    rows = [(r.kernel_key, r.device_key, r.result) for r in store.list_results()]
    trials = {(r.kernel_key, r.device_key): store.trials(r.kernel_key, r.device_key)
              for r in store.list_results()}
    details = [d for r in store.list_results() for d in store.show(r.kernel_key)]
    return rows, trials, details


def _as_imported(content: tuple) -> tuple:
    """What a store holds after taking `content` in: the same, but measured elsewhere, so not
    verified here."""
    rows, trials, details = content
    assert all(result.verified for _, _, result in rows)
    return ([(k, d, replace(result, verified=False)) for k, d, result in rows], trials,
            [replace(detail, results=tuple((device, replace(result, verified=False))
                                           for device, result in detail.results))
             for detail in details])


def test_export_then_import_reproduces_the_database(tmp_path, store_url, make):
    source_path = tmp_path / "source.db"
    with Store(source_path) as source:
        _fill(source, make, {0: 1e-3, 1: 2e-3, 2: 3e-3})
        assert source.export(tmp_path / "all.json") == 3
        expected = _as_imported(_content(source))
    document = json.loads((tmp_path / "all.json").read_text())
    assert (document["format"], document["version"]) == ("tunesearch-results", 1)
    assert {r["kernel"] for r in document["results"]} == {k["key"] for k in document["kernels"]}
    assert len(document["trials"]) == 6
    with Store(store_url) as target:  # SQLite -> SQLite and SQLite -> PostgreSQL
        assert target.import_(tmp_path / "all.json") == 3
        assert _content(target) == expected
        # importing the same file again changes nothing: no new best, no duplicate trials
        assert target.import_(tmp_path / "all.json") == 0
        assert _content(target) == expected
        target.export(tmp_path / "again.json")
    again = json.loads((tmp_path / "again.json").read_text())
    assert [r.pop("verified") for r in again["results"]] == [False] * 3
    assert [r.pop("verified") for r in document["results"]] == [True] * 3
    assert {k: v for k, v in again.items() if k != "exported"} == {
        k: v for k, v in document.items() if k != "exported"}


def test_merge_keeps_the_best_per_kernel_and_device(tmp_path, store_url, make):
    mine_times = {0: 1e-3, 1: 5e-3, 3: 2e-3}
    other_times = {0: 2e-3, 1: 1e-3, 2: 4e-3}
    with Store(tmp_path / "other.db") as other:
        _fill(other, make, other_times, trials_from=100)
    with Store(store_url) as mine:
        _fill(mine, make, mine_times)
        assert mine.merge(f"sqlite:///{tmp_path / 'other.db'}") == 2  # kernel 1 and kernel 2
        for k in range(4):
            best = mine.lookup(make.kernel(k).key, make.device(k % 2).key)
            reference = min(t[k] for t in (mine_times, other_times) if k in t)
            assert best.time_s == reference
            assert best.host == f"h{k}"
        # the histories are joined; the trial both had (number 99, same error) is kept once
        numbers = [t.number for t in mine.trials(make.kernel(0).key, make.device(0).key)]
        assert numbers == [0, 99, 100]
        assert mine.merge(tmp_path / "other.db") == 0
        assert mine.stats()["trials"] == 3 * 2 + 3 * 2 - 2  # kernels 0 and 1 share trial 99


def test_merge_from_postgresql_into_sqlite(tmp_path, pg_url, make):
    with Store(pg_url) as server:
        _fill(server, make, {0: 1e-3, 1: 2e-3})
        expected = _as_imported(_content(server))
    with Store(tmp_path / "local.db") as local:
        assert local.merge(pg_url) == 2
        assert _content(local) == expected


def _write(path, document) -> None:
    path.write_text(json.dumps(document))


def _valid_document(tmp_path, make) -> dict:
    with Store(tmp_path / "valid.db") as store:
        _fill(store, make, {0: 1e-3})
        store.export(tmp_path / "valid.json")
    return json.loads((tmp_path / "valid.json").read_text())


@pytest.mark.parametrize("breakage, message", [
    (lambda d: d.update(version=2), "format version 2 is not supported"),
    (lambda d: d.update(format="something-else"), "not a tunesearch export"),
    (lambda d: d["results"][0].update(kernel="k_missing"), "not in \"kernels\""),
    (lambda d: d["results"][0].update(time_s=True), "'time_s' has the wrong type"),
    (lambda d: d["results"][0].update(config="{'a': 1}"), "'config' has the wrong type"),
    (lambda d: d["trials"][0].pop("number"), "missing 'number'"),
    (lambda d: d["devices"][0].update(last_seen="yesterday"), "not an ISO 8601 time"),
    (lambda d: d.update(kernels={}), "kernels: expected a list"),
])
def test_a_bad_import_file_changes_nothing(tmp_path, make, breakage, message):
    document = _valid_document(tmp_path, make)
    document["kernels"].append({**document["kernels"][0], "key": "k_only_in_the_file"})
    breakage(document)
    bad = tmp_path / "bad.json"
    _write(bad, document)
    with Store(tmp_path / "target.db") as target:
        _fill(target, make, {5: 1e-3})
        before = _content(target), target.stats()
        with pytest.raises(DatabaseError, match=message) as caught:
            target.import_(bad)
        assert str(caught.value).startswith(f"{bad}: ") and "\n" not in str(caught.value)
        assert (_content(target), target.stats()) == before


@pytest.mark.parametrize("text", ["not json at all", '{"format": "tunesearch-results",',
                                  '[1, 2]', '{"format": "tunesearch-results", "version": 1, '
                                  '"kernels": [], "results": [], "x": NaN}'])
def test_an_import_file_that_is_not_an_export_is_refused(tmp_path, text):
    path = tmp_path / "notes.json"
    path.write_text(text)
    with Store(tmp_path / "target.db") as target:
        with pytest.raises(DatabaseError, match="not a tunesearch export") as caught:
            target.import_(path)
        assert str(path) in str(caught.value)
        assert target.stats()["kernels"] == 0


def test_import_and_export_name_missing_files(tmp_path):
    with Store(tmp_path / "target.db") as target:
        with pytest.raises(DatabaseError, match=f"cannot read {tmp_path}/missing.json"):
            target.import_(tmp_path / "missing.json")
        with pytest.raises(DatabaseError, match=f"cannot write {tmp_path}/no/such/dir.json"):
            target.export(tmp_path / "no" / "such" / "dir.json")
