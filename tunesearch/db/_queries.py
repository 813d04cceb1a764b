"""The statements behind the store: each runs on a connection inside the caller's transaction.

The best result is kept by one conditional upsert (`INSERT ... ON CONFLICT DO UPDATE ... WHERE
results.time_s > excluded.time_s`), so two writers racing on the same (kernel, device) cannot
both win or lose a faster result, on SQLite and PostgreSQL alike.
"""
from __future__ import annotations

import logging
import math
from datetime import datetime
from typing import Any, Callable, Iterable

from sqlalchemy import Connection, Row, and_, case, false, insert, or_, select, true

from tunesearch.db._models import Device, Kernel, Result, Trial
from tunesearch.db._records import (
    DeviceRecord, KernelRecord, ResultRecord, TrialRecord, dump_json_object, is_time,
    load_json_object,
)

log = logging.getLogger(__name__)

Insert = Callable[..., Any]  # the dialect's insert(), which has on_conflict_do_update

KERNEL_COLUMNS = (Kernel.key, Kernel.name, Kernel.canonical, Kernel.ops, Kernel.shapes,
                  Kernel.space_version)
DEVICE_COLUMNS = (Device.key, Device.backend, Device.name, Device.fingerprint)
RESULT_COLUMNS = (Result.config, Result.time_s, Result.spread, Result.gflops, Result.gbps,
                  Result.default_time_s, Result.speedup, Result.trials, Result.sampler,
                  Result.tunesearch_version, Result.host, Result.created, Result.verified)
TRIAL_COLUMNS = (Trial.number, Trial.config, Trial.time_s, Trial.error)


def upsert_kernel(connection: Connection, dialect_insert: Insert, kernel: KernelRecord) -> int:
    """Insert the kernel if its key is new; returns its id either way. A kernel recorded again
    under a newer space version (tuned again by a newer release) takes that version, so pruning
    by version leaves it alone; an older one never lowers it."""
    stmt = dialect_insert(Kernel).values(
        key=kernel.key, name=kernel.name, canonical=kernel.canonical, ops=kernel.ops,
        shapes=kernel.shapes, space_version=kernel.space_version)
    newer = stmt.excluded.space_version > Kernel.space_version
    # DO UPDATE rather than DO NOTHING so that RETURNING yields the id of an existing row too.
    stmt = stmt.on_conflict_do_update(index_elements=[Kernel.key], set_={
        "name": stmt.excluded.name,
        "space_version": case((newer, stmt.excluded.space_version), else_=Kernel.space_version),
    }).returning(Kernel.id)
    return connection.execute(stmt).scalar_one()


def upsert_device(connection: Connection, dialect_insert: Insert, device: DeviceRecord,
                  first_seen: datetime, last_seen: datetime) -> int:
    """Insert or update a device, widening its seen interval; returns its id.

    Name and fingerprint follow the most recent sighting, so importing an old export does not
    overwrite what this machine saw last.
    """
    stmt = dialect_insert(Device).values(
        key=device.key, backend=device.backend, name=device.name,
        fingerprint=dump_json_object(device.fingerprint, "device fingerprint"),
        first_seen=first_seen, last_seen=last_seen)
    new = stmt.excluded
    newer = Device.last_seen <= new.last_seen
    stmt = stmt.on_conflict_do_update(index_elements=[Device.key], set_={
        "backend": case((newer, new.backend), else_=Device.backend),
        "name": case((newer, new.name), else_=Device.name),
        "fingerprint": case((newer, new.fingerprint), else_=Device.fingerprint),
        "first_seen": case((Device.first_seen > new.first_seen, new.first_seen),
                           else_=Device.first_seen),
        "last_seen": case((newer, new.last_seen), else_=Device.last_seen),
    }).returning(Device.id)
    return connection.execute(stmt).scalar_one()


def offer_result(connection: Connection, dialect_insert: Insert, kernel_id: int, device_id: int,
                 result: ResultRecord, created: datetime, *, supersede: bool = False) -> bool:
    """Store `result` unless the stored one is at least as fast; True if it was stored.

    A verified result (measured here) also replaces an unverified one however fast that claims
    to be, and any result replaces a stored time that no measurement gives (zero, negative,
    NULL): neither may pin a kernel. `supersede` replaces whatever is stored (the caller found
    it unusable: a config that does not parse or no longer fits the kernel's space, or a
    winner that lost inside its model to the default).
    """
    values = dict(
        config=dump_json_object(result.config, "result config"), time_s=result.time_s,
        spread=result.spread, gflops=result.gflops, gbps=result.gbps,
        default_time_s=result.default_time_s, speedup=result.speedup, trials=result.trials,
        sampler=result.sampler, tunesearch_version=result.tunesearch_version, host=result.host,
        created=created, verified=bool(result.verified))
    stmt = dialect_insert(Result).values(kernel_id=kernel_id, device_id=device_id, **values)
    replaces = or_(Result.time_s > stmt.excluded.time_s, Result.time_s <= 0,
                   Result.time_s.is_(None),
                   and_(stmt.excluded.verified, Result.verified.is_not(True)),
                   true() if supersede else false())
    stmt = stmt.on_conflict_do_update(
        index_elements=[Result.kernel_id, Result.device_id],
        set_={name: stmt.excluded[name] for name in values},
        where=replaces,
    ).returning(Result.id)
    return connection.execute(stmt).first() is not None


def add_trials(connection: Connection, kernel_id: int, device_id: int,
               trials: Iterable[tuple[TrialRecord, datetime]], *, skip_known: bool = False) -> int:
    """Append trials to the history of (kernel, device); returns how many were added.

    With `skip_known`, trials equal to one already stored (same number, config, time and error)
    are left out, so importing or merging the same history twice adds nothing.
    """
    known: set[tuple] = set()
    if skip_known:
        rows = connection.execute(select(*TRIAL_COLUMNS).where(
            Trial.kernel_id == kernel_id, Trial.device_id == device_id))
        known = {tuple(row) for row in rows}
    new_rows = []
    for trial, created in trials:
        config = dump_json_object(trial.config, "trial config")
        signature = (trial.number, config, trial.time_s, trial.error)
        if signature in known:
            continue
        known.add(signature)
        new_rows.append(dict(kernel_id=kernel_id, device_id=device_id, number=trial.number,
                             config=config, time_s=trial.time_s, error=trial.error,
                             created=created))
    if new_rows:
        connection.execute(insert(Trial), new_rows)
    return len(new_rows)


def kernel_from_row(row: Row) -> KernelRecord:
    return KernelRecord(row.key, row.name, row.canonical, row.ops, row.shapes, row.space_version)


def device_from_row(row: Row) -> DeviceRecord:
    return DeviceRecord(row.key, row.backend, row.name, load_json_object(row.fingerprint) or {})


def _number(value: Any, positive: bool = False) -> bool:
    """A finite, non-negative number (positive, for a best time) as a row must hold it."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) \
        and math.isfinite(value) and (value > 0 if positive else value >= 0)


def result_from_row(row: Row) -> ResultRecord | None:
    """The record of a results row; None (with a warning) when its config is not a JSON object
    or its numbers are not what a measurement gives (a best time that is not positive and finite
    would pin the kernel forever: only a strictly faster result replaces it)."""
    config = load_json_object(row.config)
    if config is None:
        log.warning("ignoring a stored result whose config is not a JSON object: %.80r",
                    row.config)
        return None
    if not is_time(row.time_s, positive=True) or not is_time(row.default_time_s) or not all(
            _number(value) for value in (row.spread, row.gflops, row.gbps, row.speedup,
                                         row.trials)):
        log.warning("ignoring a stored result whose numbers no measurement gives: time_s=%r, "
                    "default_time_s=%r", row.time_s, row.default_time_s)
        return None
    return ResultRecord(
        config=config, time_s=row.time_s, spread=row.spread, gflops=row.gflops, gbps=row.gbps,
        default_time_s=row.default_time_s, speedup=row.speedup, trials=row.trials,
        sampler=row.sampler, tunesearch_version=row.tunesearch_version, host=row.host,
        created=row.created, verified=bool(row.verified))


def trial_from_row(row: Row) -> TrialRecord | None:
    config = load_json_object(row.config)
    if config is None:
        log.warning("ignoring a stored trial whose config is not a JSON object: %.80r", row.config)
        return None
    if row.time_s is not None and not is_time(row.time_s):
        log.warning("ignoring a stored trial whose time no measurement gives: time_s=%r",
                    row.time_s)
        return None
    return TrialRecord(row.number, config, row.time_s, row.error, getattr(row, "created", None))
