"""The store: the one API through which tunesearch reads and writes tuning results.

    store = Store()                                   # $TUNESEARCH_DB, or the SQLite cache file
    if store.record(kernel, device, result, trials):  # kept only if faster than the stored best
        ...
    best = store.lookup(kernel.key, device.key)       # ResultRecord or None

A database is created at the newest schema revision and an older one is upgraded when opened
(`auto_upgrade=False` refuses instead). One written by a newer tunesearch opens for reading only.
Every problem a user can cause raises `DatabaseError` with one line naming the file or URL.

Export format (`tunesearch db export FILE`), version 1
------------------------------------------------------
One UTF-8 JSON object; kernels and devices are referenced by their keys, times are ISO 8601 UTC,
configs and fingerprints are JSON objects (data, never code)::

    {"format": "tunesearch-results", "version": 1, "exported": "2025-01-31T12:00:00+00:00",
     "kernels": [{"key": "k_3f2a...", "name": "r_64_64_64", "canonical": "...", "ops": "...",
                  "shapes": "...", "space_version": 1}],
     "devices": [{"key": "d_91c0...", "backend": "cpu", "name": "AMD EPYC 9R14",
                  "fingerprint": {...}, "first_seen": "...", "last_seen": "..."}],
     "results": [{"kernel": "k_3f2a...", "device": "d_91c0...", "config": {...},
                  "time_s": 0.0012, "spread": 0.02, "gflops": 41.5, "gbps": 3.1,
                  "default_time_s": 0.004, "speedup": 3.3, "trials": 200, "sampler": "tpe",
                  "tunesearch_version": "0.1.0", "host": "box", "created": "...",
                  "verified": true}],
     "trials": [{"kernel": "k_3f2a...", "device": "d_91c0...", "number": 0, "config": {...},
                 "time_s": 0.004, "error": null, "created": "..."}]}

Importing keeps the faster of the stored and the imported result per (kernel, device), adds the
trials not already stored, and refuses (changing nothing) a file of another format or version,
one whose numbers no measurement gives (a time of zero or above an hour, an integer past 64 bits),
or one that gives a kernel, a device or a (kernel, device) result twice. An imported or
merged result is not verified here (`verified` in the file is informational): the next search of
its kernel on this device measures it again, and its result replaces the imported one.
"""
from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Sequence

from sqlalchemy import Connection, delete, func, or_, select

from tunesearch.db import _exchange, _queries
from tunesearch.db._database import Database
from tunesearch.db._errors import DatabaseError
from tunesearch.db._models import Device, Kernel, Result, Trial
from tunesearch.db._records import (
    DeviceRecord, KernelDetail, KernelRecord, ResultRecord, ResultRow, TrialRecord, check_time,
)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


class Store(Database):
    """Tuning results in one database, given by a SQLAlchemy URL or a SQLite file path.

    Opening it (the default database for None, `readonly=True` for lookups only), its schema and
    its transactions are `Database`'s (`_database.py`); this class holds what is stored.
    """

    # -- the best result per (kernel, device) ----------------------------------------------

    def lookup(self, kernel_key: str, device_key: str) -> ResultRecord | None:
        """The best result of a kernel on exactly this device key, or None."""
        stmt = (select(*_queries.RESULT_COLUMNS).select_from(Result)
                .join(Kernel, Kernel.id == Result.kernel_id)
                .join(Device, Device.id == Result.device_id)
                .where(Kernel.key == kernel_key, Device.key == device_key))
        row = self.read(lambda connection: connection.execute(stmt).first())
        return None if row is None else _queries.result_from_row(row)

    def has_result(self, kernel_key: str, device_key: str) -> bool:
        """Whether a results row exists for the kernel on exactly this device key, readable or
        not (`lookup` skips a row whose config or time is not what tunesearch writes)."""
        stmt = (select(Result.id).select_from(Result)
                .join(Kernel, Kernel.id == Result.kernel_id)
                .join(Device, Device.id == Result.device_id)
                .where(Kernel.key == kernel_key, Device.key == device_key))
        return self.read(lambda connection: connection.execute(stmt).first()) is not None

    def record(self, kernel: KernelRecord, device: DeviceRecord, result: ResultRecord,
               trials: Sequence[TrialRecord] = (), *, supersede: bool = False) -> bool:
        """Store `result` if it beats the stored best (strictly faster), or the stored one is
        not verified and this one is; True if it was stored. `supersede` stores it whatever
        is stored (for a caller that found the stored config unusable, or whose winner lost inside
        its model to the default).

        The trials are appended to the history either way; the device's last_seen is updated.
        """
        check_time(result.time_s, "result time_s", positive=True)
        for trial in trials:
            check_time(trial.time_s, f"trial {trial.number} time_s", optional=True)
        now = _now()
        insert = self.insert

        def work(connection: Connection) -> bool:
            kernel_id = _queries.upsert_kernel(connection, insert, kernel)
            device_id = _queries.upsert_device(connection, insert, device, now, now)
            stored = _queries.offer_result(connection, insert, kernel_id, device_id, result,
                                           result.created or now, supersede=supersede)
            _queries.add_trials(connection, kernel_id, device_id,
                                [(t, t.created or now) for t in trials])
            return stored

        return self.write(work)

    def trials(self, kernel_key: str, device_key: str) -> list[TrialRecord]:
        """The trial history of a kernel on a device, in trial-number order, each with the time
        it was measured (or, for a history recorded before trials kept theirs, recorded)."""
        stmt = (select(*_queries.TRIAL_COLUMNS, Trial.created).select_from(Trial)
                .join(Kernel, Kernel.id == Trial.kernel_id)
                .join(Device, Device.id == Trial.device_id)
                .where(Kernel.key == kernel_key, Device.key == device_key)
                .order_by(Trial.number, Trial.id))
        rows = self.read(lambda connection: connection.execute(stmt).all())
        return [trial for trial in map(_queries.trial_from_row, rows) if trial is not None]

    def touch_device(self, device: DeviceRecord) -> None:
        """Record that this device was seen now (so `prune --unseen-days` keeps it)."""
        now = _now()
        self.write(lambda connection: _queries.upsert_device(
            connection, self.insert, device, now, now))

    # -- sharing ---------------------------------------------------------------------------

    def _snapshot(self) -> dict:
        return self.read(_exchange.snapshot, options=self._backend.snapshot_options)

    def absorb(self, exchange: _exchange.Exchange) -> int:
        """Write a validated document (`read_export`, `read_database`) in one transaction;
        returns the results that won."""
        insert = self.insert

        def work(connection: Connection) -> int:
            kernel_ids = {kernel.key: _queries.upsert_kernel(connection, insert, kernel)
                          for kernel in exchange.kernels}
            device_ids = {seen.device.key: _queries.upsert_device(
                connection, insert, seen.device, seen.first_seen, seen.last_seen)
                for seen in exchange.devices}
            stored = sum(_queries.offer_result(connection, insert, kernel_ids[kernel],
                                               device_ids[device], result, result.created)
                         for kernel, device, result in exchange.results)
            history = defaultdict(list)
            for kernel, device, trial, created in exchange.trials:
                history[kernel, device].append((trial, created))
            for (kernel, device), items in history.items():
                _queries.add_trials(connection, kernel_ids[kernel], device_ids[device], items,
                                    skip_known=True)
            return stored

        return self.write(work)

    def export(self, path: str | os.PathLike) -> int:
        """Write every kernel, device, result and trial to a JSON file; returns the results."""
        target = Path(path)
        if target.exists() and not target.is_file():  # a folder, a device: never replaced
            raise DatabaseError(f"cannot write {target}: it exists and is not a regular file")
        document = self._snapshot()
        partial = target.with_name(target.name + ".partial")
        try:
            partial.write_text(json.dumps(document, indent=1, allow_nan=False) + "\n",
                               encoding="utf-8")
            os.replace(partial, target)  # readers never see half a file
        except OSError as err:
            partial.unlink(missing_ok=True)
            raise DatabaseError(f"cannot write {target}: {err.strerror or err}") from err
        return len(document["results"])

    def import_(self, path: str | os.PathLike) -> int:
        """Merge an export file in; returns how many of its results became the stored best."""
        self._check_writable()  # before reading the file: its problems come second
        return self.absorb(read_export(path))

    def merge(self, other_url: str | os.PathLike) -> int:
        """Take in another database (opened read-only); returns its results that won here."""
        self._check_writable()
        return self.absorb(read_database(other_url))

    # -- inspection and upkeep -------------------------------------------------------------

    def list_results(self, device_key: str | None = None) -> list[ResultRow]:
        """Every stored best result (of one device key, if given), by kernel name."""
        stmt = (select(Kernel.key.label("kernel_key"), Kernel.name.label("kernel_name"),
                       Device.key.label("device_key"), Device.name.label("device_name"),
                       Device.backend, *_queries.RESULT_COLUMNS).select_from(Result)
                .join(Kernel, Kernel.id == Result.kernel_id)
                .join(Device, Device.id == Result.device_id)
                .order_by(Kernel.name, Kernel.key, Device.name, Device.key))
        if device_key is not None:
            stmt = stmt.where(Device.key == device_key)
        rows = self.read(lambda connection: connection.execute(stmt).all())
        return [ResultRow(row.kernel_key, row.kernel_name, row.device_key, row.device_name,
                          row.backend, result)
                for row in rows if (result := _queries.result_from_row(row)) is not None]

    def on_backend(self, kernel: KernelRecord, backend: str
                   ) -> list[tuple[DeviceRecord, str, str, dict]]:
        """(device, kernel key, shapes, config) of the stored results on every device key of
        `backend`, of `kernel` itself and of kernels with its operations and reduce in other
        shapes: the kernel's own first, then the nearest shapes. A search starts from them
        (search/starts.py): this device's other shapes, the other devices' winners. One query
        per kernel, whatever the number of devices."""
        stmt = _same_operations(kernel, *_queries.DEVICE_COLUMNS).where(
            Device.backend == backend)
        rows = self.read(lambda connection: connection.execute(stmt).all())
        return [(_queries.device_from_row(row), row.kernel_key, row.shapes, result.config)
                for _, row, result in _by_shape(kernel, rows)]

    def show(self, key_prefix: str) -> list[KernelDetail]:
        """The kernels whose key starts with `key_prefix`, each with its results and trials."""
        def work(connection: Connection) -> list[KernelDetail]:
            kernels = connection.execute(
                select(Kernel.id, *_queries.KERNEL_COLUMNS)
                .where(Kernel.key.startswith(key_prefix, autoescape=True))
                .order_by(Kernel.key)).all()
            details = []
            for kernel in kernels:
                rows = connection.execute(
                    select(*_queries.DEVICE_COLUMNS, *_queries.RESULT_COLUMNS).select_from(Result)
                    .join(Device, Device.id == Result.device_id)
                    .where(Result.kernel_id == kernel.id).order_by(Result.time_s)).all()
                results = tuple((_queries.device_from_row(row), result) for row in rows
                                if (result := _queries.result_from_row(row)) is not None)
                trial_count = connection.execute(
                    select(func.count()).where(Trial.kernel_id == kernel.id)).scalar_one()
                details.append(KernelDetail(_queries.kernel_from_row(kernel), results,
                                            trial_count))
            return details

        return self.read(work)

    def stats(self) -> dict:
        """Counts of kernels, devices, results and trials, and where the database is."""
        def work(connection: Connection) -> dict:
            counts = {table.__tablename__: connection.execute(
                select(func.count()).select_from(table)).scalar_one()
                for table in (Kernel, Device, Result, Trial)}
            by_backend = dict(connection.execute(
                select(Device.backend, func.count(Result.id)).select_from(Result)
                .join(Device, Device.id == Result.device_id).group_by(Device.backend)).all())
            return {"database": self.where, "revision": self.revision, **counts,
                    "results_by_backend": by_backend}

        return self.read(work, options=self._backend.snapshot_options)

    def prune(self, *, space_version_below: int | None = None,
              devices_unseen_days: float | None = None) -> int:
        """Delete kernels of an old space version and devices not seen for a while.

        Their results and trials go with them. Returns the number of results removed.
        """
        old_kernels = gone_devices = None
        if space_version_below is not None:
            if isinstance(space_version_below, bool) or not isinstance(space_version_below, int) \
                    or not 0 <= space_version_below < 2 ** 31:
                raise DatabaseError(f"prune: space_version_below={space_version_below!r} must be "
                                    f"an integer from 0 to {2 ** 31 - 1}")
            old_kernels = select(Kernel.id).where(Kernel.space_version < space_version_below)
        if devices_unseen_days is not None:
            try:
                cutoff = _now() - timedelta(days=devices_unseen_days)
            except (OverflowError, TypeError, ValueError):  # nan, or past year 1
                cutoff = None
            if cutoff is None or not devices_unseen_days >= 0:
                raise DatabaseError(f"prune: devices_unseen_days={devices_unseen_days!r} must be "
                                    "a number of days from 0 to what a date can hold")
            gone_devices = select(Device.id).where(Device.last_seen < cutoff)
        if old_kernels is None and gone_devices is None:
            return 0

        def owned_by(table):
            clauses = []
            if old_kernels is not None:
                clauses.append(table.kernel_id.in_(old_kernels))
            if gone_devices is not None:
                clauses.append(table.device_id.in_(gone_devices))
            return or_(*clauses)

        def work(connection: Connection) -> int:
            removed = connection.execute(delete(Result).where(owned_by(Result))).rowcount
            connection.execute(delete(Trial).where(owned_by(Trial)))
            if old_kernels is not None:
                connection.execute(delete(Kernel).where(Kernel.id.in_(old_kernels)))
            if gone_devices is not None:
                connection.execute(delete(Device).where(Device.id.in_(gone_devices)))
            return removed

        return self.write(work)


def _same_operations(kernel: KernelRecord, *columns):
    """The stored results of the kernels with the operations of `kernel` (its reduce and axes
    are checked by `_by_shape`), with the columns `_by_shape` reads and `columns`."""
    return (select(Kernel.key.label("kernel_key"), Kernel.shapes, Kernel.canonical, *columns,
                   *_queries.RESULT_COLUMNS)
            .select_from(Result)
            .join(Kernel, Kernel.id == Result.kernel_id)
            .join(Device, Device.id == Result.device_id)
            .where(Kernel.ops == kernel.ops))


def _by_shape(kernel: KernelRecord, rows) -> list[tuple[tuple, object, ResultRecord]]:
    """The rows (kernel_key, shapes, canonical, a result's columns) whose kernels have the reduce
    of `kernel` and as many axes, each with its readable result: `kernel` itself first, then
    the nearest shapes (the sum over the axes of how far apart the sizes are in log scale)."""
    reduce = kernel.canonical.split(" reduce=", 1)[-1].split(" ", 1)[0]
    dims = kernel.shapes.split("x")
    found = []
    for row in rows:
        other = row.shapes.split("x")
        if len(other) != len(dims) or not all(d.isdigit() for d in other) or \
                row.canonical.split(" reduce=", 1)[-1].split(" ", 1)[0] != reduce:
            continue
        result = _queries.result_from_row(row)
        if result is not None:
            distance = sum(abs(math.log(max(int(a), 1) / max(int(b), 1)))
                           for a, b in zip(other, dims))
            found.append(((row.kernel_key != kernel.key, distance), row, result))
    found.sort(key=lambda item: item[0])
    return found


def read_export(path: str | os.PathLike) -> _exchange.Exchange:
    """An export file, read and validated whole (`DatabaseError` naming it on the first
    problem), so that a command can refuse it before it opens or creates its database."""
    source = str(path)
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"),
                              parse_constant=_reject_constant)
    except OSError as err:
        raise DatabaseError(f"cannot read {source}: {err.strerror or err}") from err
    except ValueError as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise DatabaseError(f"{source}: not a tunesearch export ({err})") from err
    except RecursionError:
        raise DatabaseError(f"{source}: not a tunesearch export (JSON nested too deeply)"
                            ) from None
    return _exchange.parse(document, source)


def read_database(url: str | os.PathLike) -> _exchange.Exchange:
    """Everything another database holds (opened read-only), validated as an export is."""
    with Store(url, readonly=True) as other:
        return _exchange.parse(other._snapshot(), other.where)
