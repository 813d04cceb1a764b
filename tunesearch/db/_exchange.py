"""The portable export document: reading a whole database into it, and validating one.

The format itself is documented in `tunesearch.db.store`. Every field of an incoming document is
type-checked before anything is written, so a bad file changes nothing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Connection, select

from tunesearch.db._errors import DatabaseError
from tunesearch.db._models import Device, Kernel, Result, Trial
from tunesearch.db._queries import (
    DEVICE_COLUMNS, KERNEL_COLUMNS, RESULT_COLUMNS, TRIAL_COLUMNS, device_from_row,
    kernel_from_row, result_from_row, trial_from_row,
)
from tunesearch.db._records import (
    MAX_JSON_DEPTH, MAX_TIME_S, DeviceRecord, KernelRecord, ResultRecord, TrialRecord, json_depth,
)

FORMAT = "tunesearch-results"
VERSION = 1
INTEGER_LIMIT = 2 ** 63  # what a database INTEGER column holds


@dataclass(frozen=True)
class SeenDevice:
    device: DeviceRecord
    first_seen: datetime
    last_seen: datetime


@dataclass(frozen=True)
class Exchange:
    """A validated export document, ready to be written into a store."""

    kernels: tuple[KernelRecord, ...]
    devices: tuple[SeenDevice, ...]
    results: tuple[tuple[str, str, ResultRecord], ...]  # (kernel key, device key, result)
    trials: tuple[tuple[str, str, TrialRecord, datetime], ...]


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat()


def snapshot(connection: Connection) -> dict:
    """The whole database as an export document (a JSON-ready dict)."""
    kernel_keys = {}
    kernels = []
    for row in connection.execute(select(Kernel.id, *KERNEL_COLUMNS).order_by(Kernel.key)):
        kernel_keys[row.id] = row.key
        kernels.append(vars_of(kernel_from_row(row)))
    device_keys = {}
    devices = []
    for row in connection.execute(select(Device.id, *DEVICE_COLUMNS, Device.first_seen,
                                         Device.last_seen).order_by(Device.key)):
        device_keys[row.id] = row.key
        devices.append({**vars_of(device_from_row(row)), "first_seen": _iso(row.first_seen),
                        "last_seen": _iso(row.last_seen)})
    results = []
    for row in connection.execute(select(Result.kernel_id, Result.device_id, *RESULT_COLUMNS)
                                  .order_by(Result.id)):
        result = result_from_row(row)
        if result is not None:
            entry = {**vars_of(result), "created": _iso(result.created)}
            results.append({"kernel": kernel_keys[row.kernel_id],
                            "device": device_keys[row.device_id], **entry})
    trials = []
    for row in connection.execute(select(Trial.kernel_id, Trial.device_id, *TRIAL_COLUMNS,
                                         Trial.created).order_by(Trial.id)):
        trial = trial_from_row(row)
        if trial is not None:
            trials.append({"kernel": kernel_keys[row.kernel_id],
                           "device": device_keys[row.device_id], **vars_of(trial),
                           "created": _iso(row.created)})
    return {"format": FORMAT, "version": VERSION, "exported": _iso(datetime.now(timezone.utc)),
            "kernels": kernels, "devices": devices, "results": results, "trials": trials}


def vars_of(record: Any) -> dict:
    return dict(vars(record))


class _Reader:
    """Type-checks the entries of one document, naming the file and entry on the first error."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, problem: str) -> DatabaseError:
        return DatabaseError(f"{self.source}: {where}: {problem}")

    def field(self, entry: Any, name: str, kinds: tuple[type, ...], where: str,
              optional: bool = False) -> Any:
        if not isinstance(entry, dict):
            raise self.fail(where, "expected an object")
        if name not in entry:
            raise self.fail(where, f"missing {name!r}")
        value = entry[name]
        if value is None and optional:
            return None
        # bool is an int in Python, never a valid number or count here
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            raise self.fail(where, f"{name!r} has the wrong type ({type(value).__name__})")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(where, f"{name!r} is not finite")
        if isinstance(value, int) and not -INTEGER_LIMIT <= value < INTEGER_LIMIT:
            raise self.fail(where, f"{name!r} is out of range ({len(str(abs(value)))} digits)")
        if isinstance(value, dict) and json_depth(value) > MAX_JSON_DEPTH:
            raise self.fail(where, f"{name!r} nests deeper than {MAX_JSON_DEPTH} levels")
        return value

    def at_least(self, entry: Any, name: str, kinds: tuple[type, ...], where: str,
                 minimum: float, *, strictly: bool = False, optional: bool = False) -> Any:
        """A field that is a number at least (or, strictly, above) minimum."""
        value = self.field(entry, name, kinds, where, optional)
        if value is not None and (value <= minimum if strictly else value < minimum):
            relation = "above" if strictly else "at least"
            raise self.fail(where, f"{name!r} must be {relation} {minimum}, got {value!r}")
        return value

    def time(self, entry: Any, name: str, where: str, *, strictly: bool = False,
             optional: bool = False) -> float | None:
        """A time in seconds, from 0 (above 0, strictly) to MAX_TIME_S: more is no
        measurement."""
        value = self.at_least(entry, name, NUMBER, where, 0, strictly=strictly,
                              optional=optional)
        if value is not None and value > MAX_TIME_S:
            raise self.fail(where, f"{name!r} must be at most {MAX_TIME_S:g} seconds, "
                            f"got {value!r}")
        return value

    def config(self, entry: Any, where: str) -> dict:
        """A config object; its "version", where it has one, is a positive integer (which
        versions a release knows is the space's to say, when the config is used)."""
        config = self.field(entry, "config", (dict,), where)
        version = config.get("version", 1)
        if type(version) is not int or version < 1:
            raise self.fail(where, f"config version {version!r} is not a positive integer")
        return config

    def moment(self, entry: Any, name: str, where: str) -> datetime:
        text = self.field(entry, name, (str,), where)
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise self.fail(where, f"{name!r} is not an ISO 8601 time: {text!r}") from None
        return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)

    def unique(self, keys: list, name: str, what: str) -> set:
        """The set of `keys`; refuses the document where one is given twice."""
        seen: set = set()
        for i, key in enumerate(keys):
            if key in seen:
                raise self.fail(f"{name}[{i}]", f"{what} {key!r} is given twice")
            seen.add(key)
        return seen

    def entries(self, document: dict, name: str) -> list:
        value = document.get(name, [])
        if not isinstance(value, list):
            raise self.fail(name, "expected a list")
        return value


NUMBER = (int, float)


def parse(document: Any, source: str) -> Exchange:
    """Validate an export document; raises `DatabaseError` naming `source` on the first problem."""
    read = _Reader(source)
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise DatabaseError(f"{source}: not a tunesearch export (no \"format\": \"{FORMAT}\")")
    version = document.get("version")
    if type(version) is not int or version != VERSION:  # True == 1 in Python: not a version
        raise DatabaseError(f"{source}: export format version {document.get('version')!r} is not "
                            f"supported (this tunesearch reads version {VERSION})")
    kernels = []
    for i, entry in enumerate(read.entries(document, "kernels")):
        where = f"kernels[{i}]"
        kernels.append(KernelRecord(
            *(read.field(entry, name, (str,), where)
              for name in ("key", "name", "canonical", "ops", "shapes")),
            space_version=read.at_least(entry, "space_version", (int,), where, 0)))
    devices = []
    for i, entry in enumerate(read.entries(document, "devices")):
        where = f"devices[{i}]"
        device = DeviceRecord(*(read.field(entry, name, (str,), where)
                                for name in ("key", "backend", "name")),
                              fingerprint=read.field(entry, "fingerprint", (dict,), where))
        devices.append(SeenDevice(device, read.moment(entry, "first_seen", where),
                                  read.moment(entry, "last_seen", where)))
    # a key given twice would be written twice, the second entry quietly replacing the first
    kernel_keys = read.unique([kernel.key for kernel in kernels], "kernels", "key")
    device_keys = read.unique([seen.device.key for seen in devices], "devices", "key")

    def owner(entry: Any, where: str) -> tuple[str, str]:
        kernel = read.field(entry, "kernel", (str,), where)
        device = read.field(entry, "device", (str,), where)
        if kernel not in kernel_keys:
            raise read.fail(where, f"kernel {kernel!r} is not in \"kernels\"")
        if device not in device_keys:
            raise read.fail(where, f"device {device!r} is not in \"devices\"")
        return kernel, device

    results = []
    for i, entry in enumerate(read.entries(document, "results")):
        where = f"results[{i}]"
        # a best time must be a real measurement: zero would pin the kernel forever, since only
        # a strictly faster result replaces it; the others may be 0 ("unknown")
        numbers = {"time_s": read.time(entry, "time_s", where, strictly=True),
                   "default_time_s": read.time(entry, "default_time_s", where)}
        numbers.update({name: read.at_least(entry, name, NUMBER, where, 0) for name in
                        ("spread", "gflops", "gbps", "speedup")})
        result = ResultRecord(
            config=read.config(entry, where), **numbers,
            trials=read.at_least(entry, "trials", (int,), where, 0),
            sampler=read.field(entry, "sampler", (str,), where),
            tunesearch_version=read.field(entry, "tunesearch_version", (str,), where),
            host=read.field(entry, "host", (str,), where),
            created=read.moment(entry, "created", where),
            verified=False)  # measured elsewhere, whatever the file says
        results.append((*owner(entry, where), result))
    read.unique([(kernel, device) for kernel, device, _ in results], "results",
                "(kernel, device)")
    trials = []
    for i, entry in enumerate(read.entries(document, "trials")):
        where = f"trials[{i}]"
        trial = TrialRecord(
            number=read.at_least(entry, "number", (int,), where, 0),
            config=read.config(entry, where),
            time_s=read.time(entry, "time_s", where, strictly=True, optional=True),
            error=read.field(entry, "error", (str,), where, optional=True))
        trials.append((*owner(entry, where), trial, read.moment(entry, "created", where)))
    return Exchange(tuple(kernels), tuple(devices), tuple(results), tuple(trials))
