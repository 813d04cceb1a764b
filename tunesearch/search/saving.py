"""Whether the results of a search can be saved: asked before the search, not after it.

A database can refuse writes in ways that opening it does not show: a read-only file system, a
file SQLite can read but not lock for writing, a schema written by a newer tunesearch, a role
without rights. `check_writable` makes one real write (this device was seen now, which
`tunesearch db prune --unseen-days` reads anyway), so that each of these refuses the run before
minutes of search are spent on results that could not be kept.
"""
from __future__ import annotations

from tunesearch.db import DatabaseError, DeviceRecord
from tunesearch.runtime.device import Device, get_device
from tunesearch.space.config import ConfigError, check_version


def device_record(info) -> DeviceRecord:
    """The database's record of a device (its DeviceInfo)."""
    return DeviceRecord(info.key, info.backend, info.name, info.as_dict())


def check_writable(store, device: str | Device) -> None:
    """Raise the store's `DatabaseError` (one line) when it cannot record a result."""
    store.touch_device(device_record(
        (get_device(device) if isinstance(device, str) else device).info()))


def check_config_versions(exchange, source: str) -> None:
    """Refuse an input with a config of a space version this tunesearch does not know: the
    database layer checks what a config is, the space which versions it reads."""
    for i, (_, _, result) in enumerate(exchange.results):
        try:
            check_version(result.config)
        except ConfigError as err:
            raise DatabaseError(f"{source}: results[{i}]: {err}") from None
