"""Bad databases: each a one-line DatabaseError naming the file or URL, and no damage."""
from __future__ import annotations

import os
import socket
import stat
import uuid

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tunesearch.db import DatabaseError, Store


def _one_line_naming(err: pytest.ExceptionInfo, name: str) -> str:
    message = str(err.value)
    assert "\n" not in message
    assert name in message
    return message


@pytest.mark.parametrize("content", [os.urandom(8192), b"hello, this is a text file\n" * 300,
                                     b"SQLite format 3\x00" + os.urandom(4080)])
def test_a_corrupt_or_non_sqlite_file_is_refused_untouched(tmp_path, content):
    path = tmp_path / "broken.db"
    path.write_bytes(content)
    with pytest.raises(DatabaseError) as caught:
        Store(path)
    _one_line_naming(caught, str(path))
    assert path.read_bytes() == content
    assert sorted(os.listdir(tmp_path)) == ["broken.db"]  # no -wal or -shm left behind


def test_a_missing_folder_is_named(tmp_path):
    path = tmp_path / "no" / "such" / "folder" / "results.db"
    with pytest.raises(DatabaseError, match="cannot open database") as caught:
        Store(path)
    _one_line_naming(caught, str(path))
    assert not path.parent.exists()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_server_is_named_without_its_password():
    url = f"postgresql://tuner:s3cret-pw@127.0.0.1:{_closed_port()}/tunesearch"
    with pytest.raises(DatabaseError, match="cannot connect to database") as caught:
        Store(url)
    message = _one_line_naming(caught, "127.0.0.1")
    assert "s3cret-pw" not in message


def test_a_read_only_sqlite_uri_allows_lookups_but_not_saving(tmp_path, make):
    path = tmp_path / "results.db"
    with Store(path) as store:
        store.record(make.kernel(), make.device(), make.result(1e-3), [make.trial(0)])
        store.export(tmp_path / "export.json")
    before = path.read_bytes()
    # chmod does not stop root; SQLite's mode=ro does
    with Store(f"sqlite:///file:{path}?mode=ro&uri=true") as store:
        assert store.readonly
        assert store.lookup(make.kernel().key, make.device().key).time_s == 1e-3
        assert len(store.trials(make.kernel().key, make.device().key)) == 1
        assert store.stats()["results"] == 1
        for attempt in (lambda: store.record(make.kernel(), make.device(), make.result(1e-5)),
                        lambda: store.touch_device(make.device()),
                        lambda: store.import_(tmp_path / "export.json"),
                        lambda: store.merge(path),
                        lambda: store.prune(space_version_below=99)):
            with pytest.raises(DatabaseError, match="cannot save: database .* is read-only") as err:
                attempt()
            _one_line_naming(err, str(path))
    assert path.read_bytes() == before


def test_readonly_flag_reads_and_leaves_the_folder_as_it_was(tmp_path, make):
    path = tmp_path / "results.db"
    with Store(path) as store:
        store.record(make.kernel(), make.device(), make.result(1e-3))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert list(before) == ["results.db"]
    with Store(path, readonly=True) as store:
        assert store.readonly
        assert store.lookup(make.kernel().key, make.device().key) is not None
        with pytest.raises(DatabaseError, match=f"cannot save: database {path} is read-only"):
            store.record(make.kernel(), make.device(), make.result(1e-5))
    # no -wal or -shm left behind (SQLite's mode=ro would leave both in a WAL database)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    with pytest.raises(DatabaseError, match="cannot open database .* no such file"):
        Store(tmp_path / "absent.db", readonly=True)  # read-only never creates a file
    assert not (tmp_path / "absent.db").exists()


def test_readonly_sqlite_refuses_writes_even_past_the_store(tmp_path, make):
    # PRAGMA query_only holds on the connection itself (and for root, as chmod would not)
    path = tmp_path / "results.db"
    with Store(path) as store:
        store.record(make.kernel(), make.device(), make.result(1e-3))
    with Store(path, readonly=True) as store:
        with pytest.raises(DatabaseError, match="readonly|read-only"):
            store.read(lambda connection: connection.exec_driver_sql("DELETE FROM results"))
    with Store(path) as store:
        assert store.lookup(make.kernel().key, make.device().key) is not None


def test_readonly_refuses_an_empty_file_without_writing_a_schema(tmp_path):
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    with pytest.raises(DatabaseError, match="is empty") as caught:
        Store(path, readonly=True)
    _one_line_naming(caught, str(path))
    assert path.read_bytes() == b"" and sorted(os.listdir(tmp_path)) == ["empty.db"]


def test_a_postgresql_role_without_write_rights_can_look_up_but_not_save(pg_url, make):
    with Store(pg_url) as store:
        store.record(make.kernel(), make.device(), make.result(1e-3))
    role = f"reader_{uuid.uuid4().hex[:8]}"
    admin_url = make_url(pg_url).set(drivername="postgresql").render_as_string(False)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    try:
        reader_url = make_url(pg_url).set(username=role).render_as_string(False)
        with Store(reader_url) as store:  # a real server-side refusal, not our own flag
            assert not store.readonly
            assert store.lookup(make.kernel().key, make.device().key).time_s == 1e-3
            with pytest.raises(DatabaseError, match="cannot save: database .* is read-only"):
                store.record(make.kernel(), make.device(), make.result(1e-5))
        with Store(pg_url, readonly=True) as store:
            assert store.lookup(make.kernel().key, make.device().key).time_s == 1e-3
            with pytest.raises(DatabaseError, match="is read-only"):
                store.record(make.kernel(), make.device(), make.result(1e-5))
        with Store(pg_url) as store:
            assert store.lookup(make.kernel().key, make.device().key).time_s == 1e-3
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


def test_export_never_replaces_what_is_not_a_regular_file(tmp_path, make):
    # writing goes to FILE.partial, then replaces FILE: a device or a pipe must not be replaced
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    with Store(tmp_path / "results.db") as store:
        store.record(make.kernel(), make.device(), make.result())
        for target in (pipe, tmp_path):
            with pytest.raises(DatabaseError, match="not a regular file") as caught:
                store.export(target)
            _one_line_naming(caught, str(target))
    assert stat.S_ISFIFO(pipe.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "results.db"]
