"""The result database: the best config per (kernel, device), trial history, and sharing.

SQLite in the user's cache folder by default, any SQLAlchemy URL (PostgreSQL through psycopg 3)
for a database shared by several machines. `search/` writes it and `runtime/` reads it; this
package imports nothing else from tunesearch.

    from tunesearch.db import Store
    with Store() as store:
        best = store.lookup(kernel_key, device_key)

Besides the results (`store.py`, on `_database.py`'s engine and transactions): the leases that
workers share (`leases.py`) and the Optuna studies beside the results (`studies.py`). Every
database concern lives here, with one connection setup and one retry policy (`_engine.py`).
"""
from tunesearch.db._engine import (
    default_path, default_url, retry_while_unreachable,
)
from tunesearch.db._errors import DatabaseError, is_transient
from tunesearch.db._migrations import head_revision
from tunesearch.db._records import MAX_TIME_S
from tunesearch.db.store import (
    DeviceRecord, KernelDetail, KernelRecord, ResultRecord, ResultRow, Store, TrialRecord,
    read_database, read_export,
)
from tunesearch.db.studies import (
    STUDIES_SCHEMA, ensure_studies_schema, fail_running_trials, studies_url, study_storage,
)

__all__ = [
    "DatabaseError", "DeviceRecord", "KernelDetail", "KernelRecord", "MAX_TIME_S",
    "ResultRecord", "ResultRow", "STUDIES_SCHEMA", "Store", "TrialRecord", "default_path",
    "default_url",
    "ensure_studies_schema", "fail_running_trials", "head_revision", "is_transient",
    "read_database", "read_export", "retry_while_unreachable", "studies_url", "study_storage",
]
