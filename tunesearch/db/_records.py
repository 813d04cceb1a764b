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
    """The best measured config of a kernel on a device; `spread` is relative (IQR / median).

    `verified` is False for a result that came in through `import_` or `merge`: its time was
    measured elsewhere, and the next search of its kernel measures it again.
    """

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
    # measured by a search that saved it in this database (an imported or merged result is not)
    verified: bool = True


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


# Configs and fingerprints are shallow (a config is an object of integers and lists of them);
# anything nested deeper is not one, and is refused before code that recurses meets it.
MAX_JSON_DEPTH = 16


def json_depth(value: object) -> int:
    """How deeply lists and objects nest in a JSON value (a number or string: 0), counted
    without recursion, so that any depth can be measured."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item \
            if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def dump_json_object(value: dict, what: str) -> str:
    """Canonical JSON text of a dict; refuses anything that JSON cannot carry exactly, or that
    nests deeper than MAX_JSON_DEPTH."""
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be a dict, got {type(value).__name__}")
    if json_depth(value) > MAX_JSON_DEPTH:
        raise ValueError(f"{what} nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} is not JSON data: {err}") from err


def load_json_object(text: str) -> dict | None:
    """The dict stored as JSON text, or None when the text is not a JSON object (or nests
    deeper than MAX_JSON_DEPTH: a tampered row must not crash whoever reads it)."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or json_depth(value) > MAX_JSON_DEPTH:
        return None
    return value


# No kernel run lasts an hour: the runner's hard timeout ends one long before. A longer stored
# time is not a measurement but damage (1e300 would sit in every sum and ratio).
MAX_TIME_S = 3600.0


def is_time(value: object, *, positive: bool = False) -> bool:
    """A number of seconds a measurement can give: finite, from 0 (above 0 for a measured
    best: zero would beat every real measurement forever) to MAX_TIME_S; a NaN would make every
    comparison false."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) \
        and math.isfinite(value) and (value > 0 if positive else value >= 0) \
        and value <= MAX_TIME_S


def check_time(value: float | None, what: str, *, optional: bool = False,
               positive: bool = False) -> None:
    """Refuse a time that `is_time` refuses (None passes where `optional`)."""
    if value is None and optional:
        return
    if not is_time(value, positive=positive):
        kind = "positive" if positive else "non-negative"
        raise ValueError(f"{what} must be a {kind} time of at most {MAX_TIME_S:g} seconds, "
                         f"got {value!r}")
