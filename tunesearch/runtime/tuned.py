"""The runtime's link to the result database: the lookup that realize.py calls per kernel.

The store is opened once per process, on the first lookup; any database error means "no record"
(with one warning), so a run never fails because of the database.
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


def use_database(url: str | None) -> None:
    """Point the runtime at another database (the CLI's --db); lookups start afresh."""
    global _store, _failed
    from tunesearch.runtime import realize
    _store = open_store(url) if url else None
    _failed = False
    realize.set_lookup(db_lookup)
