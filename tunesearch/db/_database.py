"""One open tunesearch database: where it is, its engine, its schema, and its transactions.

`Database` opens a URL (the default one for None), checks the schema revision, creating or
upgrading it when allowed, and runs work in transactions with the retry policy of `_engine`.
`Store` (the results) is a `Database`; the leases and the Optuna studies use the same
transactions through `read`, `write` and `insert`.

    with Store(url) as store:
        store.write(lambda connection: connection.execute(store.insert(Work).values(...)))
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, TypeVar

from sqlalchemy import Connection
from sqlalchemy.engine import URL

from tunesearch.db._engine import (
    backend_of, database_url, describe, is_default, is_read_only_url, open_engine, read_only_url,
    run_transaction, sqlite_file,
)
from tunesearch.db._errors import DatabaseError, read_only_error
from tunesearch.db._migrations import (
    SchemaState, head_revision, inspect_schema, refusal, upgrade_in_transaction,
)

T = TypeVar("T")
D = TypeVar("D", bound="Database")


def _make_default_folder(url: URL) -> None:
    """The default SQLite file lives in a cache folder that may not exist yet."""
    database = url.database or ""
    if url.get_backend_name() != "sqlite" or not database or database.startswith(("file:", ":")):
        return
    folder = Path(database).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DatabaseError(f"cannot create the folder {folder} for database {database}: "
                            f"{err.strerror or err}") from err


class Database:
    """A tunesearch database, given by a SQLAlchemy URL or a SQLite file path (None: the
    default, `$TUNESEARCH_DB` or the SQLite file in the cache folder).

    `readonly=True` opens it for lookups only (a SQLite file with `PRAGMA query_only`, never
    creating it; PostgreSQL in read-only transactions); so does a URL like
    `sqlite:///file:/x.db?mode=ro&uri=true`. A read-only database writes nothing, not even a
    schema: an empty, missing or older one is refused with one line. `must_exist=True` refuses
    an empty or missing database too, for upkeep that has nothing to do on a new one.
    """

    def __init__(self, url: str | os.PathLike | None = None, *, auto_upgrade: bool = True,
                 readonly: bool = False, must_exist: bool = False):
        parsed = database_url(url)
        readonly = readonly or is_read_only_url(parsed)
        if readonly:
            parsed = read_only_url(parsed)
        self.url: str = parsed.render_as_string(hide_password=False)
        self.where: str = describe(parsed)  # how messages name it: file path or URL sans password
        self.readonly: bool = readonly
        self._backend = backend_of(parsed)
        if is_default(url) and not self.readonly:
            _make_default_folder(parsed)
        path = sqlite_file(parsed)
        self._must_exist = must_exist
        if (self.readonly or must_exist) and path is not None and not path.is_file():
            if path.exists():
                raise DatabaseError(f"cannot open database {self.where}: not a file")
            hint = "" if not self.readonly else (f" (a tune with --db {path} creates it; "
                                                 "TUNESEARCH_NODB=1 runs with default configs "
                                                 "and no database)")
            raise DatabaseError(f"cannot open database {self.where}: no such file{hint}")
        self._engine = open_engine(parsed, read_only=self.readonly)
        self._pid = os.getpid()
        self._write_refusal: DatabaseError | None = None
        try:
            self.revision_before, self.revision = self._open_schema(auto_upgrade)
        except BaseException:
            self._engine.dispose()
            raise

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.where!r})"

    def __enter__(self: D) -> D:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Close the pooled connections (a later call opens new ones)."""
        self._engine.dispose()

    # -- transactions ----------------------------------------------------------------------

    @property
    def insert(self) -> Callable:
        """The backend's `insert()`, which has `on_conflict_do_nothing` and `_do_update`."""
        return self._backend.insert

    def read(self, work: Callable[[Connection], T], options: dict | None = None) -> T:
        """`work(connection)` in one read transaction (retried after lock contention); its
        result. `options` are execution options, e.g. an isolation level for a snapshot."""
        return run_transaction(self._engine_for_this_process(), work, where=self.where,
                               options=options)

    def write(self, work: Callable[[Connection], T]) -> T:
        """`work(connection)` in one write transaction that commits whole or not at all; its
        result. A read-only database (or one of a newer schema) refuses with one line."""
        self._check_writable()
        return run_transaction(self._engine_for_this_process(), work, where=self.where,
                               write=True)

    def _check_writable(self) -> None:
        if self.readonly:
            raise read_only_error(self.where)
        if self._write_refusal is not None:
            raise self._write_refusal

    def _engine_for_this_process(self):
        if self._pid != os.getpid():
            # A forked child must not share the parent's pooled connections (nor close them).
            self._engine.dispose(close=False)
            self._pid = os.getpid()
        return self._engine

    def _open_schema(self, auto_upgrade: bool) -> tuple[str | None, str | None]:
        """Check the schema revision, creating or upgrading it when allowed."""
        schema = self.read(inspect_schema)
        # a server database may be half-way through its creation by another process: look
        # again under the schema lock before refusing it (a file is refused untouched)
        if schema.state is SchemaState.FOREIGN and (self.readonly or
                                                    not str(self.url).startswith("postgresql")):
            raise refusal(schema, self.where)
        if schema.state is SchemaState.DAMAGED:  # refused before anything reads or writes it
            raise refusal(schema, self.where)
        if schema.state is SchemaState.NEWER:
            self._write_refusal = refusal(schema, self.where)
            return schema.revision, schema.revision
        if schema.state is SchemaState.CURRENT:
            return schema.revision, schema.revision
        if (self.readonly or self._must_exist) and schema.revision is None:
            raise DatabaseError(f"database {self.where} is empty: it holds no tunesearch results "
                                "(nothing was written)")
        if self.readonly:
            raise DatabaseError(f"database {self.where} is at revision {schema.revision}, older "
                                f"than {head_revision()}, and opened read-only: run `tunesearch "
                                "db upgrade` once")
        if schema.state is SchemaState.OLD and not auto_upgrade:
            raise DatabaseError(f"database {self.where} is at revision {schema.revision}, older "
                                f"than {head_revision()}: run `tunesearch db upgrade`")

        def upgrade(connection: Connection) -> str | None:
            self._backend.lock_schema(connection)
            # again under the lock: another process may have created the schema meanwhile
            locked = inspect_schema(connection)
            if locked.state in (SchemaState.FOREIGN, SchemaState.DAMAGED):
                raise refusal(locked, self.where)
            if locked.state is SchemaState.CURRENT:
                return locked.revision
            return upgrade_in_transaction(connection, self.where)

        return self.write(upgrade), head_revision()
