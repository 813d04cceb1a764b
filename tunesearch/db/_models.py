"""SQLAlchemy declarative models: one class per table.

The migrations in `alembic/versions/` build exactly this schema (a test compares them), so a
change here needs a new revision there.

Configs and fingerprints are stored as JSON text, never as code; times are UTC.
"""
from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (
    Boolean, DateTime, Float, ForeignKey, Index, Integer, MetaData, String, Text, TypeDecorator,
    UniqueConstraint, false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Explicit constraint names, so that migrations (and SQLite batch mode) can refer to them.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator):
    """A timestamp stored as naive UTC and read back timezone-aware (SQLite keeps no zone)."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        return value

    def process_result_value(self, value, dialect):
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Device(Base):
    """A device key (the runtime's hash of its fingerprint) and when it was seen."""

    __tablename__ = "devices"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(255), unique=True)
    backend: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(255))
    fingerprint: Mapped[str] = mapped_column(Text)  # JSON object
    first_seen: Mapped[datetime] = mapped_column(UTCDateTime)
    last_seen: Mapped[datetime] = mapped_column(UTCDateTime)


class Kernel(Base):
    """A kernel by its structural key, with readable text for `db show`."""

    __tablename__ = "kernels"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(255), unique=True)
    name: Mapped[str] = mapped_column(String(255))
    canonical: Mapped[str] = mapped_column(Text)
    ops: Mapped[str] = mapped_column(Text)
    shapes: Mapped[str] = mapped_column(Text)
    space_version: Mapped[int] = mapped_column(Integer)


class Result(Base):
    """The best measured config of one kernel on one device; replaced by a faster one, and an
    unverified one (imported or merged) by any that a search measured here."""

    __tablename__ = "results"
    __table_args__ = (
        UniqueConstraint("kernel_id", "device_id"),
        Index("ix_results_device_id", "device_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kernel_id: Mapped[int] = mapped_column(ForeignKey("kernels.id", ondelete="CASCADE"))
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"))
    config: Mapped[str] = mapped_column(Text)  # JSON object
    time_s: Mapped[float] = mapped_column(Float)
    spread: Mapped[float] = mapped_column(Float, server_default="0")  # since v2
    gflops: Mapped[float] = mapped_column(Float)
    gbps: Mapped[float] = mapped_column(Float)
    default_time_s: Mapped[float] = mapped_column(Float)
    speedup: Mapped[float] = mapped_column(Float)
    trials: Mapped[int] = mapped_column(Integer)
    sampler: Mapped[str] = mapped_column(String(64))
    tunesearch_version: Mapped[str] = mapped_column(String(64))
    host: Mapped[str] = mapped_column(String(255), server_default="")  # since v2
    created: Mapped[datetime] = mapped_column(UTCDateTime)
    # measured by a search that saved it here (True), or imported or merged (False); since v4
    verified: Mapped[bool] = mapped_column(Boolean, server_default=false())


class Trial(Base):
    """One measured (or failed) candidate of a search, kept for analysis and warm starts."""

    __tablename__ = "trials"
    __table_args__ = (Index("ix_trials_kernel_id_device_id", "kernel_id", "device_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kernel_id: Mapped[int] = mapped_column(ForeignKey("kernels.id", ondelete="CASCADE"))
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    config: Mapped[str] = mapped_column(Text)  # JSON object
    time_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created: Mapped[datetime] = mapped_column(UTCDateTime)


class Work(Base):
    """A kernel that a tuning run of a model registered for a device (for `tunesearch status`).

    The database knows kernels, not models: this table remembers which models asked for which
    kernels, so that progress can be shown per model. Leases are per kernel, so two models that
    share a kernel share its tuning.
    """

    __tablename__ = "work"
    __table_args__ = (UniqueConstraint("model", "kernel_key", "device_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model: Mapped[str] = mapped_column(String(255))
    kernel_key: Mapped[str] = mapped_column(String(255))
    device_key: Mapped[str] = mapped_column(String(255))
    kernel_name: Mapped[str] = mapped_column(String(255))
    occurrences: Mapped[int] = mapped_column(Integer)
    registered: Mapped[datetime] = mapped_column(UTCDateTime)


class Lease(Base):
    """Who tunes a (kernel, device) now: one row per slot, claimed by one worker at a time.

    state is waiting, running, done or failed; a running lease whose expires_at has passed
    belongs to a worker that died and may be claimed again. A kernel that dominates a model gets
    several slots, each a share of the trials, all adding to the same Optuna study.
    """

    __tablename__ = "leases"
    __table_args__ = (
        UniqueConstraint("kernel_key", "device_key", "slot"),
        Index("ix_leases_device_key_state", "device_key", "state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kernel_key: Mapped[str] = mapped_column(String(255))
    device_key: Mapped[str] = mapped_column(String(255))
    slot: Mapped[int] = mapped_column(Integer)
    slots: Mapped[int] = mapped_column(Integer)
    kernel_name: Mapped[str] = mapped_column(String(255))
    weight: Mapped[float] = mapped_column(Float)  # share of the model's time: heaviest first
    state: Mapped[str] = mapped_column(String(16))
    worker: Mapped[str | None] = mapped_column(String(255), nullable=True)
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    heartbeat: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    claims: Mapped[int] = mapped_column(Integer)
    trials: Mapped[int] = mapped_column(Integer)  # measured so far, by every holder together
    budget: Mapped[int] = mapped_column(Integer)  # trials planned for this slot (0: no limit)
    message: Mapped[str] = mapped_column(Text)
    updated: Mapped[datetime] = mapped_column(UTCDateTime)


class LeaseClaim(Base):
    """The history of a lease: each claim, how it ended (done, failed, released, expired, lost)."""

    __tablename__ = "lease_claims"
    __table_args__ = (Index("ix_lease_claims_lease_id", "lease_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    lease_id: Mapped[int] = mapped_column(ForeignKey("leases.id", ondelete="CASCADE"))
    worker: Mapped[str] = mapped_column(String(255))
    claimed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    outcome: Mapped[str | None] = mapped_column(String(16), nullable=True)
    trials: Mapped[int] = mapped_column(Integer)
