"""The frozen records that cross the boundary of the database layer.

Callers (the search, the runtime, the command line) see only these, never rows or sessions.
Configs and fingerprints are plain JSON-serializable dicts: data, never code.
"""
from __future__ import annotations

import json
import math
import socket
from dataclasses import dataclass, field
from datetime import datetime
from importlib import metadata


def _tunesearch_version() -> str:
    try:
        return metadata.version("tunesearch")
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class KernelRecord:
    """A kernel by its structural key (e.g. `k_3f2a...`) and readable name (`r_64_64_64`)."""

    key: str
    name: str
    canonical: str
    ops: str
    shapes: str
    space_version: int


@dataclass(frozen=True)
class DeviceRecord:
    """A device by the key the runtime computes from its fingerprint."""

    key: str
    backend: str
    name: str
    fingerprint: dict


@dataclass(frozen=True)
class ResultRecord:
    """The best measured config of a kernel on a device; `spread` is relative (IQR / median)."""

    config: dict
    time_s: float
    spread: float
    gflops: float
    gbps: float
    default_time_s: float
    speedup: float
    trials: int
    sampler: str
    tunesearch_version: str = field(default_factory=_tunesearch_version)
    host: str = field(default_factory=socket.gethostname)
    created: datetime | None = None  # set when read back


@dataclass(frozen=True)
class TrialRecord:
    """One candidate of a search: a time, or the error that failed it."""

    number: int
    config: dict
    time_s: float | None
    error: str | None
    # when it was measured (recorded without one: when it is recorded); not part of what a trial
    # is, so equal trials from two histories compare equal (as when merging)
    created: datetime | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ResultRow:
    """One line of `Store.list_results()`: a best result with its kernel and device."""

    kernel_key: str
    kernel_name: str
    device_key: str
    device_name: str
    backend: str
    result: ResultRecord


@dataclass(frozen=True)
class KernelDetail:
    """What `Store.show()` knows about one kernel: its best result per device and its trials."""

    kernel: KernelRecord
    results: tuple[tuple[DeviceRecord, ResultRecord], ...]
    trial_count: int


def dump_json_object(value: dict, what: str) -> str:
    """Canonical JSON text of a dict; refuses anything that JSON cannot carry exactly."""
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be a dict, got {type(value).__name__}")
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} is not JSON data: {err}") from err


def load_json_object(text: str) -> dict | None:
    """The dict stored as JSON text, or None when the text is not a JSON object."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def check_time(value: float | None, what: str, *, optional: bool = False) -> None:
    """Times are finite and non-negative; a NaN would make every comparison false."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0:
        raise ValueError(f"{what} must be a finite time in seconds, got {value!r}")
