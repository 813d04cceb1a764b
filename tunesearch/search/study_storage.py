"""Where the Optuna studies live: the storage beside a tuning database (`study_storage`), SQLite
set up for several processes at once, and closing the trials a dead worker left running."""
from __future__ import annotations

import time

import optuna
from optuna.trial import TrialState
from sqlalchemy import event

from tunesearch.db import Store, default_url
from tunesearch.db.leases import ensure_studies_schema, studies_url


def _serialize_sqlite(engine) -> None:
    """SQLite for several processes: WAL, a long busy timeout, and BEGIN IMMEDIATE, so that a
    transaction that reads then writes queues for the lock instead of failing when it upgrades.
    synchronous=NORMAL: Optuna commits once per parameter, and a crashed process loses nothing
    committed in WAL mode without an fsync per commit (only a power cut may)."""
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None
        dbapi_connection.execute("PRAGMA busy_timeout = 60000")
        dbapi_connection.execute("PRAGMA journal_mode = WAL")
        dbapi_connection.execute("PRAGMA synchronous = NORMAL")

    @event.listens_for(engine, "begin")
    def _on_begin(connection):
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections opened before the events were installed go


def study_storage(db_url: str | None = None) -> optuna.storages.RDBStorage:
    """The Optuna storage of the studies that belong to database `db_url` (default: the
    default database): see `tunesearch.db.leases.studies_url` for where they are."""
    db_url = db_url or default_url()
    url = studies_url(db_url)
    if url.startswith("postgresql"):
        with Store(db_url) as store:
            ensure_studies_schema(store)
    sqlite = url.startswith("sqlite")
    engine_kwargs: dict = {"pool_pre_ping": True}
    if sqlite:
        engine_kwargs["connect_args"] = {"timeout": 60}
    for attempt in range(3):  # first use by several processes at once: one creates the tables
        try:
            storage = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
            break
        except Exception:  # noqa: BLE001  (optuna raises a variety here; the last one counts)
            if attempt == 2:
                raise
            time.sleep(0.5 * (attempt + 1))
    if sqlite:
        _serialize_sqlite(storage.engine)
    return storage


def _fail_running_trials(storage, name: str) -> None:
    """Close the trials a dead worker left RUNNING in a study, so none stays open forever."""
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
