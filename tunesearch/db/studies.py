"""The Optuna studies of a database: where they live, the storage that opens them (with trial
heartbeats: `tunesearch.search.resume` fails the trials whose heartbeat stopped), and closing
the trials a dead worker left running.

    storage = study_storage(url)           # an optuna.storages.RDBStorage beside database url
    fail_running_trials(storage, "k_3f2a...@d_91c0...")

The studies live beside the database's tables (`studies_url`): in a schema `optuna` of the same
PostgreSQL database, or for SQLite in a sibling file (`results.db` -> `results.studies.db`),
because Optuna's own `trials` and `alembic_version` tables would clash with tunesearch's in one
SQLite file. Their engine is set up as tunesearch's own (`_engine.adopt_engine`: the same busy
timeout, WAL, connect timeout), except that every transaction takes the write lock when it
begins: Optuna's transactions read and then write, and several processes share one study.

Optuna is imported when a storage is first opened, not with this package: the runtime reads
results through `tunesearch.db` and needs no Optuna.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, text
from sqlalchemy.engine import URL

from tunesearch.db._database import Database
from tunesearch.db._engine import adopt_engine, database_url, engine_args, retry_with_backoff

if TYPE_CHECKING:
    import optuna

STUDIES_SCHEMA = "optuna"  # PostgreSQL schema of the Optuna studies
# A search records a heartbeat for each open trial every HEARTBEAT_S; a trial whose heartbeat is
# older than GRACE_S belongs to a process that died, and the next search of its study fails it
# (the lease of a dead worker expires after as long)
HEARTBEAT_S = 5
GRACE_S = 30
CREATE_ATTEMPTS = 3  # the first use by several processes at once: one creates the tables
CREATE_DELAY_S = 0.5


def _studies_url(db_url: str | os.PathLike | None) -> URL:
    url = database_url(db_url)
    if url.get_backend_name() == "sqlite":
        database = url.database or ""
        if database.startswith("file:") or database in ("", ":memory:"):
            raise ValueError(f"Optuna studies need a SQLite file path, not {database!r}")
        path = Path(database)
        return url.set(database=str(path.with_name(f"{path.stem}.studies{path.suffix}")))
    return url.set(query={**url.query, "options": f"-csearch_path={STUDIES_SCHEMA}"})


def studies_url(db_url: str | os.PathLike | None = None) -> str:
    """The Optuna storage URL of the studies that belong to database `db_url` (None: the
    default database).

    PostgreSQL: the same database with `search_path` set to the schema `optuna` (create it with
    `ensure_studies_schema`). SQLite: the file beside it, `x.db` -> `x.studies.db`.
    """
    return _studies_url(db_url).render_as_string(hide_password=False)


def ensure_studies_schema(database: Database) -> None:
    """Create the PostgreSQL schema of the studies if it is missing (SQLite: nothing to do)."""
    if database_url(database.url).get_backend_name() != "postgresql":
        return

    def work(connection: Connection) -> None:
        connection.execute(text("SELECT pg_advisory_xact_lock(7453922)"))  # one creator at once
        connection.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{STUDIES_SCHEMA}"'))

    database.write(work)


def study_storage(db_url: str | os.PathLike | None = None, *, heartbeat_s: int = HEARTBEAT_S,
                  grace_s: int = GRACE_S) -> optuna.storages.RDBStorage:
    """The Optuna storage of the studies that belong to database `db_url` (None: the default
    database); see `studies_url` for where they are. Its trials have heartbeats every
    `heartbeat_s` (whole seconds, as Optuna takes them); one silent for `grace_s` is stale."""
    import optuna

    url = _studies_url(db_url)
    if url.get_backend_name() == "postgresql":
        with Database(db_url) as database:
            ensure_studies_schema(database)
    kwargs = {**engine_args(url), "pool_pre_ping": True}
    storage = retry_with_backoff(  # optuna raises a variety here; the last one counts
        lambda: optuna.storages.RDBStorage(url.render_as_string(hide_password=False),
                                           engine_kwargs=kwargs),
        retry_if=lambda err: True, attempts=CREATE_ATTEMPTS, delay_s=CREATE_DELAY_S)
    # set as the attributes they become: the arguments warn that they are experimental, and
    # silencing that warning is not safe while other threads open storages
    storage.heartbeat_interval, storage.grace_period = heartbeat_s, grace_s
    adopt_engine(storage.engine, every_transaction_writes=True)
    return storage


OWNER_ATTR = "owner"  # the user attribute that names the process that asked a trial


def trial_owner() -> str:
    """How a trial names the process that asked it: `host:pid` (a worker id's first fields)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_of_worker(worker: str) -> str:
    """The trial owner of a worker named by `leases.worker_id` (`host:pid:random`)."""
    return worker.rsplit(":", 1)[0] if worker.count(":") >= 2 else worker


def fail_running_trials(storage: optuna.storages.BaseStorage, name: str,
                        owner: str | None = None) -> None:
    """Close the trials a dead worker left RUNNING in study `name`, so none stays open forever.
    owner: only the trials that process asked (see `trial_owner`), where live workers share the
    study; None: every running trial (nobody else works on it)."""
    import optuna
    from optuna.trial import TrialState

    try:
        study = optuna.load_study(study_name=name, storage=storage)
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    except KeyError:
        return
    except (ArithmeticError, TypeError, ValueError):  # rows Optuna cannot read back: the
        return  # search of the study leaves them out (tunesearch.search.resume)
    for trial in running:
        if owner is None or trial.user_attrs.get(OWNER_ATTR) == owner:
            study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
