"""The runtime's link to the result database: the lookup that realize.py calls per kernel.

The store is opened once per process, on the first lookup; any database error means "no record"
(with one warning), so code that realizes tensors never fails because of the database. The
command line's `run` opens it up front instead (`use_database_for_run`).
"""
from __future__ import annotations

import warnings

from tunesearch import settings
from tunesearch.graph.kernel import Kernel
from tunesearch.runtime.device import Device

_store = None
_failed = False


def open_store(url: str | None = None):
    """The Store at url (default: TUNESEARCH_DB or the SQLite file in the cache folder)."""
    from tunesearch.db import Store
    return Store(url or settings.db_url())


def db_lookup(kernel: Kernel, device: Device) -> dict | None:
    global _store, _failed
    if _failed:
        return None
    if _store is None:
        try:
            _store = open_store()
        except Exception as exc:
            _failed = True
            warnings.warn(f"tuned configs unavailable, running defaults: {exc}", stacklevel=3)
            return None
    record = _store.lookup(kernel.key, device.info().key)
    return None if record is None else record.config


def use_database_for_run(url: str | None) -> str | None:
    """The command line's `run`: one rule for a database given with --db, with TUNESEARCH_DB, or
    the default file. It is opened now, read-only, and one that cannot be used (missing, empty,
    corrupt, older, unreachable) raises its one-line DatabaseError before the model runs; only
    the default file that does not exist yet (nothing tuned on this machine) means defaults, as
    does TUNESEARCH_NODB=1. Returns where the database is, or None for none.

    (Python code that realizes tensors keeps the forgiving rule of `db_lookup`.)
    """
    global _store, _failed
    from tunesearch.db import Store, default_path
    from tunesearch.runtime import realize
    url = url or settings.db_url()
    if not settings.use_db() or url is None and not default_path().is_file():
        realize.set_lookup(None)
        return None
    _store = Store(url if url is not None else default_path(), readonly=True)
    _failed = False
    realize.set_lookup(db_lookup)
    return _store.where


def use_database(url: str | None) -> None:
    """Point the runtime at another database (the CLI's --db); lookups start afresh."""
    global _store, _failed
    from tunesearch.runtime import realize
    _store = open_store(url) if url else None
    _failed = False
    realize.set_lookup(db_lookup)
