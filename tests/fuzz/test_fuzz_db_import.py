"""Malformed `db export` files through `tunesearch db import`: a valid export with one value
replaced by any JSON value, a key removed, an entry repeated, or its text cut short. Each must be
refused in one line (exit 2) and leave the database as it was, or be imported (exit 0)."""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from tests.db.conftest import Make
from tests.fuzz.contract import fuzz_settings, run_cli
from tunesearch.db import Store

pytestmark = pytest.mark.filterwarnings("ignore:The recursion limit")

DATABASE = ("target.db", "target.db-wal", "target.db-shm", "target.db-journal",
            "target.studies.db")


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, dict]:
    """A database with two kernels, two devices and their results, and its export."""
    folder = tmp_path_factory.mktemp("export")
    make = Make()
    with Store(folder / "target.db") as store:
        for i in range(2):
            store.record(make.kernel(i), make.device(i), make.result(time_s=1e-3 * (i + 1)))
        store.export(folder / "export.json")
    return folder / "target.db", json.loads((folder / "export.json").read_text())


JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70),
                              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.text(max_size=6), inner,
                                                            max_size=3)),
                    max_leaves=6)


def _paths(value, at=()):
    """Every place in a JSON document: a tuple of keys and indices."""
    yield at
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, at + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, at + (index,))


def _mutated(document: dict, data) -> str:
    document = json.loads(json.dumps(document))
    places = [p for p in _paths(document) if p]
    at = data.draw(st.sampled_from(places))
    parent = document
    for step in at[:-1]:
        parent = parent[step]
    change = data.draw(st.sampled_from(["replace", "replace", "remove", "repeat", "cut"]))
    if change == "replace":
        parent[at[-1]] = data.draw(JSON)
    elif change == "remove":
        del parent[at[-1]]
    elif change == "repeat" and isinstance(parent, list):
        parent.append(json.loads(json.dumps(parent[at[-1]])))
    text = json.dumps(document, allow_nan=True)
    if change == "cut":
        text = text[:data.draw(st.integers(0, len(text) - 1))]
    return text


@fuzz_settings(examples=80)
@given(data=st.data())
def test_malformed_exports_are_refused_in_one_line_or_imported(exported, data):
    database, document = exported
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        shutil.copy(database, folder / "target.db")
        (folder / "in.json").write_text(_mutated(document, data))
        outcome = run_cli(["db", "import", str(folder / "in.json"), "--db",
                           str(folder / "target.db")], folder, may_change=DATABASE)
        outcome.check()


def test_the_unchanged_export_imports(exported, tmp_path):
    """The cases start from a document the import takes, into a copy of the database it came
    from: nothing new, so the database keeps its two results."""
    database, document = exported
    shutil.copy(database, tmp_path / "target.db")
    (tmp_path / "in.json").write_text(json.dumps(document))
    outcome = run_cli(["db", "import", str(tmp_path / "in.json"), "--db",
                       str(tmp_path / "target.db")], tmp_path, may_change=DATABASE)
    outcome.check()
    assert outcome.code == 0, outcome.stderr
    with Store(tmp_path / "target.db", readonly=True) as store:
        assert len(store.list_results()) == 2
