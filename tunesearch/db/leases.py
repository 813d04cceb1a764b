"""Leases: how several workers, on one machine or many, split the kernels of a tuning run.

    board = LeaseBoard(Store(url), ttl_s=30)
    board.register("resnet50", device_key, [WorkItem(kernel.key, kernel.name)])
    while (claim := board.claim(worker_id(), device_key, kernel_keys)) is not None:
        ...                                  # tune it, calling board.renew(claim, trials) often
        board.finish(claim, DONE, trials=n)

A lease is one row per (kernel key, device key, slot). A worker claims a waiting lease, or a
running one whose `expires_at` has passed (its worker died), and renews it while it tunes; a
claim is one write transaction that takes the row only if it is still claimable (SQLite: BEGIN
IMMEDIATE serializes writers; PostgreSQL: SELECT ... FOR UPDATE SKIP LOCKED, and the UPDATE
re-checks the state), so no two live workers ever hold the same lease. A kernel that dominates a
model gets several slots: several workers add trials to its one Optuna study at once.

Times come from the database server's clock (SQLite: the local clock), so machines whose clocks
disagree still agree on when a lease expires. Every claim is kept in `lease_claims` with how it
ended (done, failed, released, expired, lost), for `tunesearch status` and for checking that no
two workers held a lease at once. (The Optuna studies that several workers share live beside
the tables: `tunesearch.db.studies`.)
"""
from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable, Sequence

from sqlalchemy import (
    Connection, Select, String, and_, any_, bindparam, func, or_, select, text, update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy import insert as plain_insert

from tunesearch.db._models import Device, Kernel, Lease, LeaseClaim, Result, Work
from tunesearch.db.store import Store

WAITING, RUNNING, DONE, FAILED = "waiting", "running", "done", "failed"
STATES = (WAITING, RUNNING, DONE, FAILED)
DEFAULT_TTL_S = 30.0


def worker_id() -> str:
    """A name for this worker that no other process anywhere shares: `host:pid:random`."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


# -- the database's clock, by dialect name ----------------------------------------------------

def _sqlite_now(connection: Connection) -> datetime:
    value = connection.execute(text("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")).scalar_one()
    return datetime.fromisoformat(value).replace(tzinfo=timezone.utc)


def _postgresql_now(connection: Connection) -> datetime:
    # clock_timestamp, not now(): a transaction that waited on a lock must not act in the past
    return connection.execute(text("SELECT clock_timestamp()")).scalar_one() \
        .astimezone(timezone.utc)


CLOCKS: dict[str, Callable[[Connection], datetime]] = {
    "sqlite": _sqlite_now, "postgresql": _postgresql_now,
}


def database_now(connection: Connection) -> datetime:
    """The current UTC time by the database's clock."""
    return CLOCKS[connection.dialect.name](connection)


def _among(connection: Connection, column, values: list[str]):
    """`column IN values`. On PostgreSQL one array parameter (`= ANY`): an IN list of a model's
    hundreds of kernel keys is as many parameters, which the driver binds and the server parses
    on every claim, and that costs more than the rest of the claim together."""
    if connection.dialect.name == "postgresql":
        return column == any_(bindparam(None, values, type_=postgresql.ARRAY(String)))
    return column.in_(values)


# -- records -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class WorkItem:
    """A kernel a run registers: `slots` leases of `budget` trials each (0: no trial limit)."""

    kernel_key: str
    kernel_name: str
    occurrences: int = 1
    weight: float = 0.0  # the kernel's share of the model's time; the heaviest is claimed first
    slots: int = 1
    budget: int = 0


@dataclass(frozen=True)
class ModelKernel:
    """A kernel that a tuning run of `model` registered on a device, and how often it runs."""

    model: str
    device_key: str
    kernel_key: str
    kernel_name: str
    occurrences: int


@dataclass(frozen=True)
class Claim:
    """A lease held by a worker. `trials` were measured by its earlier holders; `taken_over`
    says the previous holder's lease expired (it died) rather than being released."""

    lease_id: int
    claim_id: int
    kernel_key: str
    device_key: str
    slot: int
    slots: int
    worker: str
    trials: int
    budget: int
    claims: int
    taken_over: bool
    expires_at: datetime
    previous_worker: str = ""  # who held it last, where taken_over


@dataclass(frozen=True)
class LeaseRow:
    """One lease as `tunesearch status` shows it. `expired` is a running lease past its expiry."""

    kernel_key: str
    kernel_name: str
    device_key: str
    slot: int
    slots: int
    state: str
    worker: str | None
    claimed_at: datetime | None
    heartbeat: datetime | None
    expires_at: datetime | None
    claims: int
    trials: int
    budget: int
    message: str
    models: tuple[str, ...]
    expired: bool


@dataclass(frozen=True)
class ClaimRow:
    """One claim of a lease, from `lease_claims`."""

    kernel_key: str
    device_key: str
    slot: int
    worker: str
    claimed_at: datetime
    ended_at: datetime | None
    outcome: str | None
    trials: int


_OUTCOMES = {DONE: "done", FAILED: "failed", WAITING: "released"}


class LeaseBoard:
    """The leases of one database (see the module docstring); `ttl_s` is how long a claim or a
    renewal holds a lease without the next renewal."""

    def __init__(self, store: Store, *, ttl_s: float = DEFAULT_TTL_S):
        if ttl_s <= 0:
            raise ValueError(f"lease ttl_s={ttl_s!r} must be positive")
        self.store, self.ttl = store, timedelta(seconds=ttl_s)

    def register(self, model: str, device_key: str, items: Sequence[WorkItem], *,
                 retune: bool = False) -> int:
        """Record that `model` needs `items` tuned on `device_key`; returns the open leases.

        Registering again (another machine joining, a rerun) adds only what is missing. A kernel
        with a result for the device is done, unless `retune` (which reopens done and failed
        leases: pass it on one machine only, or joining machines reopen each other's work).
        """
        insert = self.store.insert

        def work(connection: Connection) -> int:
            now = database_now(connection)
            tuned = self._tuned(connection, device_key, [item.kernel_key for item in items])
            for item in items:
                _insert_work(connection, insert, now, model, device_key, item)
                done = item.kernel_key in tuned and not retune
                for slot in range(item.slots):
                    connection.execute(insert(Lease).values(
                        kernel_key=item.kernel_key, device_key=device_key, slot=slot,
                        slots=item.slots, kernel_name=item.kernel_name, weight=item.weight,
                        state=DONE if done else WAITING, claims=0, trials=0,
                        budget=item.budget, updated=now,
                        message="already in the database" if done else "",
                    ).on_conflict_do_nothing())
                mine = and_(Lease.kernel_key == item.kernel_key, Lease.device_key == device_key)
                connection.execute(update(Lease).where(mine, Lease.slots < item.slots)
                                   .values(slots=item.slots))
                if retune:  # on purpose: done and failed leases are tuned again
                    reopen = Lease.state.in_((DONE, FAILED))
                elif item.kernel_key not in tuned:  # done, but its result was pruned since
                    # asked again in the update itself: a worker may have stored the result and
                    # finished the lease since `tuned` was read (it stores before it finishes)
                    reopen = and_(Lease.state == DONE, Lease.kernel_key.not_in(
                        self._trusted(device_key).where(Kernel.key == item.kernel_key)))
                else:
                    reopen = None
                if reopen is not None:
                    connection.execute(update(Lease).where(mine, reopen).values(
                        state=WAITING, worker=None, trials=0, budget=item.budget, message="",
                        updated=now))
            return connection.execute(select(func.count()).select_from(Lease).where(
                Lease.device_key == device_key, Lease.state.in_((WAITING, RUNNING)),
                _among(connection, Lease.kernel_key, [item.kernel_key for item in items])
            )).scalar_one()

        return self.store.write(work)

    @staticmethod
    def _trusted(device_key: str) -> Select:
        """The keys of the kernels with a result on the device that is trusted: verified here,
        with a positive time."""
        return (select(Kernel.key).select_from(Result)
                .join(Kernel, Kernel.id == Result.kernel_id)
                .join(Device, Device.id == Result.device_id)
                .where(Device.key == device_key, Result.verified.is_(True), Result.time_s > 0))

    @staticmethod
    def _tuned(connection: Connection, device_key: str, kernel_keys: list[str]) -> set[str]:
        return set(connection.execute(LeaseBoard._trusted(device_key)
                                      .where(_among(connection, Kernel.key, kernel_keys)))
                   .scalars())

    def claim(self, worker: str, device_key: str, kernel_keys: Iterable[str]) -> Claim | None:
        """Take the heaviest claimable lease of these kernels on this device, or None."""
        keys = list(kernel_keys)

        def work(connection: Connection) -> Claim | None:
            now = database_now(connection)
            claimable = or_(Lease.state == WAITING,
                            and_(Lease.state == RUNNING, Lease.expires_at < now))
            row = connection.execute(
                select(Lease.__table__).where(Lease.device_key == device_key,
                                              _among(connection, Lease.kernel_key, keys),
                                              claimable)
                .order_by(Lease.weight.desc(), Lease.slot, Lease.id).limit(1)
                .with_for_update(skip_locked=True)).first()
            if row is None:
                return None
            taken_over = row.state == RUNNING
            taken = connection.execute(
                update(Lease).where(Lease.id == row.id, claimable).values(
                    state=RUNNING, worker=worker, claimed_at=now, heartbeat=now,
                    expires_at=now + self.ttl, claims=Lease.claims + 1, updated=now))
            if taken.rowcount != 1:  # another worker was faster; the caller asks again
                return None
            if taken_over:
                connection.execute(
                    update(LeaseClaim).where(LeaseClaim.lease_id == row.id,
                                             LeaseClaim.ended_at.is_(None))
                    .values(ended_at=row.expires_at, outcome="expired"))
            claim_id = connection.execute(plain_insert(LeaseClaim).values(
                lease_id=row.id, worker=worker, claimed_at=now, trials=row.trials)
                .returning(LeaseClaim.id)).scalar_one()
            return Claim(row.id, claim_id, row.kernel_key, row.device_key, row.slot, row.slots,
                         worker, row.trials, row.budget, row.claims + 1, taken_over,
                         now + self.ttl, row.worker if taken_over else "")

        return self.store.write(work)

    def renew(self, claim: Claim, trials: int) -> bool:
        """Extend the lease by the TTL and record the trials so far; False if it was lost (it
        expired and another worker took it, or it was finished)."""
        def work(connection: Connection) -> bool:
            now = database_now(connection)
            return connection.execute(
                update(Lease).where(Lease.id == claim.lease_id, Lease.worker == claim.worker,
                                    Lease.state == RUNNING)
                .values(heartbeat=now, expires_at=now + self.ttl, trials=trials, updated=now)
            ).rowcount == 1

        return self.store.write(work)

    def finish(self, claim: Claim, state: str, *, trials: int, message: str = "") -> bool:
        """End a claim: DONE (a result is stored), FAILED (no config ran; not claimed again), or
        WAITING (released for any worker to continue). False if the lease was lost already."""
        if state not in _OUTCOMES:
            raise ValueError(f"a claim ends as done, failed or waiting, not {state!r}")

        def work(connection: Connection) -> bool:
            now = database_now(connection)
            ended = connection.execute(
                update(Lease).where(Lease.id == claim.lease_id, Lease.worker == claim.worker,
                                    Lease.state == RUNNING)
                .values(state=state, worker=None if state == WAITING else claim.worker,
                        expires_at=None, heartbeat=now, trials=trials, message=message[:2000],
                        updated=now)).rowcount == 1
            connection.execute(
                update(LeaseClaim).where(LeaseClaim.id == claim.claim_id,
                                         LeaseClaim.ended_at.is_(None))
                .values(ended_at=now, outcome=_OUTCOMES[state] if ended else "lost",
                        trials=trials))
            return ended

        return self.store.write(work)

    def release_worker(self, worker: str, message: str = "") -> int:
        """Give back every lease `worker` still holds (WAITING, for any worker to continue) and
        end its open claims; how many leases. A stopping worker's last word: an interrupt that
        landed inside a database call (a claim committed but not yet returned, a finish under
        way) leaves it holding a lease that no Claim in hand names."""
        def work(connection: Connection) -> int:
            now = database_now(connection)
            held = connection.execute(
                update(Lease).where(Lease.worker == worker, Lease.state == RUNNING)
                .values(state=WAITING, worker=None, expires_at=None, heartbeat=now,
                        message=message[:2000], updated=now)
                .returning(Lease.id)).scalars().all()
            if not held:
                return 0
            connection.execute(
                update(LeaseClaim).where(LeaseClaim.lease_id.in_(held),
                                         LeaseClaim.worker == worker,
                                         LeaseClaim.ended_at.is_(None))
                .values(ended_at=now, outcome=_OUTCOMES[WAITING]))
            return len(held)

        return self.store.write(work)

    def pending(self, device_key: str, kernel_keys: Iterable[str]) -> int:
        """How many leases of these kernels on this device are waiting or running."""
        keys = list(kernel_keys)
        return self.store.read(lambda connection: connection.execute(
            select(func.count()).select_from(Lease).where(
                Lease.device_key == device_key, _among(connection, Lease.kernel_key, keys),
                Lease.state.in_((WAITING, RUNNING)))).scalar_one())

    def leases(self, device_key: str | None = None) -> tuple[datetime, list[LeaseRow]]:
        """Every lease (of one device, if given) with the models that registered its kernel,
        and the database's time now (to tell how long ago, and what has expired)."""
        def work(connection: Connection) -> tuple[datetime, list[LeaseRow]]:
            now = database_now(connection)
            models: dict[tuple[str, str], list[str]] = {}
            for model, kernel_key, dev in connection.execute(
                    select(Work.model, Work.kernel_key, Work.device_key).order_by(Work.id)):
                models.setdefault((kernel_key, dev), []).append(model)
            stmt = select(Lease.__table__).order_by(Lease.device_key, Lease.weight.desc(), Lease.id,
                                          Lease.slot)
            if device_key is not None:
                stmt = stmt.where(Lease.device_key == device_key)
            rows = [LeaseRow(
                lease.kernel_key, lease.kernel_name, lease.device_key, lease.slot, lease.slots,
                lease.state, lease.worker, lease.claimed_at, lease.heartbeat, lease.expires_at,
                lease.claims, lease.trials, lease.budget, lease.message,
                tuple(models.get((lease.kernel_key, lease.device_key), ())),
                lease.state == RUNNING and lease.expires_at is not None
                and lease.expires_at < now) for lease in connection.execute(stmt)]
            return now, rows

        return self.store.read(work)

    def device_names(self) -> dict[str, str]:
        """The name of every device key that has been seen (recorded a result)."""
        rows = self.store.read(lambda connection: connection.execute(
            select(Device.key, Device.name)).all())
        return dict(rows)

    def claims(self, device_key: str | None = None) -> list[ClaimRow]:
        """The claim history, lease by lease, oldest claim first."""
        stmt = (select(Lease.kernel_key, Lease.device_key, Lease.slot, LeaseClaim.worker,
                       LeaseClaim.claimed_at, LeaseClaim.ended_at, LeaseClaim.outcome,
                       LeaseClaim.trials)
                .join(Lease, Lease.id == LeaseClaim.lease_id)
                .order_by(Lease.id, LeaseClaim.claimed_at, LeaseClaim.id))
        if device_key is not None:
            stmt = stmt.where(Lease.device_key == device_key)
        rows = self.store.read(lambda connection: connection.execute(stmt).all())
        return [ClaimRow(*row) for row in rows]


# -- models ------------------------------------------------------------------------------------

def _insert_work(connection: Connection, insert, now: datetime, model: str, device_key: str,
                 item: WorkItem) -> None:
    connection.execute(insert(Work).values(
        model=model, kernel_key=item.kernel_key, device_key=device_key,
        kernel_name=item.kernel_name, occurrences=item.occurrences,
        registered=now).on_conflict_do_nothing())


def register_model(store: Store, model: str, device_key: str, items: Sequence[WorkItem]) -> None:
    """Record which kernels `model` runs on `device_key`, and how often, without leases: a run
    that tunes them in its own process needs none. `tunesearch report` draws a model from this."""
    insert = store.insert

    def work(connection: Connection) -> None:
        now = database_now(connection)
        for item in items:
            _insert_work(connection, insert, now, model, device_key, item)

    store.write(work)


def model_kernels(store: Store) -> list[ModelKernel]:
    """Every (model, device, kernel) a tuning run registered, in the order they were registered."""
    stmt = select(Work.model, Work.device_key, Work.kernel_key, Work.kernel_name,
                  Work.occurrences).order_by(Work.id)
    rows = store.read(lambda connection: connection.execute(stmt).all())
    return [ModelKernel(*row) for row in rows]
