"""Database URLs and engines: where the database lives, how each backend is set up, and the one
policy for trying again.

SQLite (the default, one file in the user's cache folder) runs in WAL mode with a busy timeout and
foreign keys on; write transactions start with BEGIN IMMEDIATE so that two writers queue on the
lock instead of failing halfway. PostgreSQL goes through psycopg 3. Engines that Optuna creates
for its studies get the same setup (`adopt_engine`).

What fails for a moment is tried again by `retry_with_backoff`, with growing, jittered pauses: a
transaction that met lock contention, a few times (`run_transaction`); anything while the
database does not answer, for as long as the caller will wait (`retry_while_unreachable`).
"""
from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar
from urllib.parse import quote, unquote

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url

from tunesearch import settings
from tunesearch.db._errors import DatabaseError, is_retryable, is_transient, translate

BUSY_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10
WRITE_OPTION = "tunesearch_write"  # execution option that marks a write transaction
MAX_ATTEMPTS = 12  # tries of a transaction that meets lock contention
LOCKED_DELAY_S, LOCKED_MAX_DELAY_S = 0.02, 1.0  # pauses between them
UNREACHABLE_DELAY_S, UNREACHABLE_MAX_DELAY_S = 0.25, 5.0  # pauses while the database is away
T = TypeVar("T")


def default_path() -> Path:
    """The default SQLite file: `$XDG_CACHE_HOME/tunesearch/tunesearch.db` (`~/.cache/...`)."""
    return settings.cache_dir() / "tunesearch.db"


def default_url() -> str:
    """The database to use when none is given: `$TUNESEARCH_DB`, else the default SQLite file.

    For example `TUNESEARCH_DB=postgresql://tuner@db.lan/tunesearch` shares one server.
    """
    return settings.db_url() or f"sqlite:///{default_path()}"


def is_default(url: str | os.PathLike | None) -> bool:
    """Whether `url` leaves the choice of database to `default_url()`: None, or empty (as an
    empty `TUNESEARCH_DB` does)."""
    return url is None or url == ""


def database_url(url: str | os.PathLike | None = None) -> URL:
    """The parsed URL of database `url`, or of the default database (see `is_default`)."""
    return normalize_url(default_url() if is_default(url) else url)


def normalize_url(url: str | os.PathLike) -> URL:
    """Parse a SQLAlchemy URL; a plain path is a SQLite file, `postgresql://` means psycopg 3."""
    text_url = os.fspath(url).strip()
    if "://" not in text_url:
        return URL.create("sqlite", database=str(Path(text_url).expanduser().absolute()))
    try:
        parsed = make_url(text_url)
    except (sa_exc.ArgumentError, ValueError) as err:
        raise DatabaseError(f"invalid database URL {text_url!r}: {err}") from err
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def describe(url: URL) -> str:
    """How messages name a database: the SQLite file path, or the URL without its password."""
    if url.get_backend_name() == "sqlite":
        database = url.database or ":memory:"
        return database[len("file:"):] if database.startswith("file:") else database
    return url.render_as_string(hide_password=True)


def is_read_only_url(url: URL) -> bool:
    """True for a SQLite URI opened with `mode=ro`, e.g. `sqlite:///file:/x.db?mode=ro&uri=true`."""
    return url.get_backend_name() == "sqlite" and url.query.get("mode") == "ro"


def read_only_url(url: URL) -> URL:
    """The same SQLite file, opened through a URI that never creates it (`mode=rw`).

    Each connection of a read-only store sets `PRAGMA query_only` (which holds even for root),
    so nothing is written. Not `mode=ro` (a URL that asks for it gets `mode=rw` too): a `mode=ro`
    reader of a WAL database leaves its -wal and -shm files behind, where a `mode=rw` one removes
    them when it closes last.
    """
    if url.get_backend_name() != "sqlite":
        return url
    database = url.database or ""
    if database in ("", ":memory:"):
        return url
    if not database.startswith("file:"):
        database = "file:" + quote(str(Path(database).absolute()))
    return url.set(database=database, query={**url.query, "mode": "rw", "uri": "true"})


def sqlite_file(url: URL) -> Path | None:
    """The file of a SQLite database URL, or None (another backend, or in memory)."""
    database = url.database or ""
    if url.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return None
    if database.startswith("file:"):
        database = unquote(database[len("file:"):].split("?", 1)[0])
    return Path(database)


@dataclass(frozen=True)
class Backend:
    """What differs between database backends, looked up by dialect name."""

    insert: Callable[..., Any]  # dialect insert() with on_conflict_do_update
    engine_args: Callable[[URL, bool], dict]  # create_engine() keywords for (url, read_only)
    configure: Callable[[Engine, bool], None]  # installs connection events: (engine, read_only)
    lock_schema: Callable[[Connection], None]  # serializes migrations inside a write transaction
    snapshot_options: dict  # execution options for a consistent multi-statement read


# PostgreSQL connections one engine keeps open, and opens beyond them for a moment; a worker
# process has two engines (results and leases, Optuna's studies): see search/capacity.py
PG_POOL_SIZE = 1
PG_POOL_OVERFLOW = 2


def _sqlite_engine_args(url: URL, read_only: bool) -> dict:
    return {"connect_args": {"timeout": BUSY_TIMEOUT_S}}


def _postgresql_engine_args(url: URL, read_only: bool) -> dict:
    connect_args: dict[str, Any] = {}
    if "connect_timeout" not in url.query:
        connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
    if read_only:
        connect_args["options"] = "-c default_transaction_read_only=on"
    # a small pool per process: a worker's main thread and its lease heartbeat use one
    # connection each at most, and a server's max_connections is shared by every worker
    return {"connect_args": connect_args, "pool_pre_ping": True,
            "pool_size": PG_POOL_SIZE, "max_overflow": PG_POOL_OVERFLOW}


def _configure_sqlite(engine: Engine, read_only: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):
        # Take transaction control from the sqlite3 module, which would otherwise BEGIN lazily.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            cursor.execute("PRAGMA foreign_keys = ON")
            if read_only:
                cursor.execute("PRAGMA query_only = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection):
        if not connection.get_execution_options().get(WRITE_OPTION, False):
            connection.exec_driver_sql("BEGIN")
            return
        # WAL is switched on by the first write, not on connect: opening a database only to
        # read it (or to refuse it) leaves the file exactly as it was.
        info = connection.connection.info
        if not info.get("wal"):
            connection.exec_driver_sql("PRAGMA journal_mode = WAL")
            connection.exec_driver_sql("PRAGMA synchronous = NORMAL")
            info["wal"] = True
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _configure_nothing(engine: Engine, read_only: bool) -> None:
    pass


def _lock_nothing(connection: Connection) -> None:
    pass  # SQLite: BEGIN IMMEDIATE already holds the one write lock


def _lock_postgresql_schema(connection: Connection) -> None:
    # A transaction-scoped advisory lock: concurrent first opens create the schema once.
    connection.execute(text("SELECT pg_advisory_xact_lock(7453921)"))


BACKENDS: dict[str, Backend] = {
    "sqlite": Backend(sqlite.insert, _sqlite_engine_args, _configure_sqlite, _lock_nothing, {}),
    "postgresql": Backend(postgresql.insert, _postgresql_engine_args, _configure_nothing,
                          _lock_postgresql_schema, {"isolation_level": "REPEATABLE READ"}),
}


def backend_of(url: URL) -> Backend:
    name = url.get_backend_name()
    if name not in BACKENDS:
        raise DatabaseError(f"unsupported database {describe(url)}: use sqlite or postgresql "
                            f"(got {name!r})")
    return BACKENDS[name]


def engine_args(url: URL, *, read_only: bool = False) -> dict:
    """The `create_engine()` keywords for `url`: its backend's timeouts and connection options."""
    return backend_of(url).engine_args(url, read_only)


def open_engine(url: URL, *, read_only: bool) -> Engine:
    """Create the engine for `url` with the backend's settings; connects lazily."""
    backend = backend_of(url)
    try:
        engine = create_engine(url, **engine_args(url, read_only=read_only))
    except ImportError as err:
        raise DatabaseError(f"cannot use database {describe(url)}: {err} (for PostgreSQL: "
                            "pip install 'tunesearch[postgres]')") from err
    except sa_exc.ArgumentError as err:
        raise DatabaseError(f"cannot use database {describe(url)}: {err}") from err
    backend.configure(engine, read_only)
    return engine


def adopt_engine(engine: Engine, *, every_transaction_writes: bool = False) -> None:
    """Set up an engine that another library created (from `engine_args`: Optuna's storage) as
    `open_engine` sets up its own, with the same connection settings and transaction starts.

    `every_transaction_writes` makes each transaction take the write lock when it begins
    (SQLite: BEGIN IMMEDIATE, and WAL from the first one), for a library whose transactions
    read and then write: on SQLite, a transaction that must upgrade its lock while another
    writer holds it fails at once, where one that takes the lock at BEGIN waits its turn.
    """
    backend_of(engine.url).configure(engine, False)
    if every_transaction_writes:
        engine.update_execution_options(**{WRITE_OPTION: True})
    engine.dispose()  # connections opened before the setup was installed go


def retry_with_backoff(action: Callable[[], T], *, retry_if: Callable[[Exception], bool],
                       attempts: int | None = None, wait_s: float | None = None,
                       delay_s: float = LOCKED_DELAY_S,
                       max_delay_s: float = LOCKED_MAX_DELAY_S) -> T:
    """`action()`, tried again while it fails with an error that `retry_if` accepts: at most
    `attempts` tries, or until `wait_s` seconds have passed since the first one. The pause
    between tries doubles from `delay_s` up to `max_delay_s`, each jittered (x1 to x2) so that
    processes that retry together do not march in step. The error that ends it is raised as is.

        retry_with_backoff(lambda: storage(url), retry_if=is_transient, wait_s=60.0)
    """
    deadline = None if wait_s is None else time.monotonic() + wait_s
    tries = 0
    while True:
        tries += 1
        try:
            return action()
        except Exception as err:  # noqa: BLE001  (retry_if chooses; the rest is raised again)
            if not retry_if(err) or (attempts is not None and tries >= attempts) or \
                    (deadline is not None and time.monotonic() >= deadline):
                raise
        time.sleep(delay_s * (1.0 + random.random()))
        delay_s = min(delay_s * 2.0, max_delay_s)


def retry_while_unreachable(action: Callable[[], T], *, wait_s: float) -> T:
    """`action()`, tried again while the database does not answer (`is_transient`: a server
    restarting, a lost connection) for up to `wait_s` seconds; then its last error is raised."""
    return retry_with_backoff(action, retry_if=is_transient, wait_s=wait_s,
                              delay_s=UNREACHABLE_DELAY_S, max_delay_s=UNREACHABLE_MAX_DELAY_S)


def run_transaction(engine: Engine, work: Callable[[Connection], T], *, where: str,
                    write: bool = False, options: dict | None = None) -> T:
    """Run `work(connection)` in one transaction, retrying it while the database is locked.

    A write transaction takes the write lock up front (BEGIN IMMEDIATE on SQLite), so `work`
    either commits whole or, after lock contention, runs again from the start (`MAX_ATTEMPTS`
    tries at most). Driver errors become one-line `DatabaseError`s naming `where`.
    """
    def attempt() -> T:
        with engine.connect() as connection:
            connection.execution_options(**{WRITE_OPTION: write}, **(options or {}))
            with connection.begin():
                return work(connection)

    try:
        return retry_with_backoff(attempt, retry_if=is_retryable, attempts=MAX_ATTEMPTS)
    except sa_exc.DBAPIError as err:
        raise translate(err, where, writing=write) from err
