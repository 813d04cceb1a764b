"""The data the search hands on: measurements, budgets, and what tuning one kernel found.

Failures are data, never exceptions: a candidate that does not compile, crashes, hangs, computes
the wrong values or is invalid for its space is a MeasureResult with an error kind and a message.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tunesearch.errors import UserError
from tunesearch.space.config import Config

if TYPE_CHECKING:
    from tunesearch.graph.kernel import Kernel

# why a candidate failed; the order is the order reports list them in
ERROR_KINDS = ("compile", "crash", "timeout", "wrong", "invalid")


class TuneError(UserError, RuntimeError):
    """Tuning cannot start: an unavailable device, a zero budget, an unknown sampler.

    The message is one line meant for the user, never a traceback.
    """


@dataclass(frozen=True)
class MeasureResult:
    """One candidate measured: its time (median seconds) and spread (IQR / median), or why not."""
    config: Config
    time_s: float | None
    spread: float = 0.0
    error: str | None = None      # one of ERROR_KINDS
    message: str = ""
    max_error: float | None = None  # largest |output - reference| seen
    repeats: int = 0

    def __post_init__(self):
        if self.error is not None and self.error not in ERROR_KINDS:
            raise ValueError(f"unknown error kind {self.error!r}; expected one of {ERROR_KINDS}")
        if (self.error is None) == (self.time_s is None):
            raise ValueError("a measurement has either a time or an error, not both")

    @property
    def ok(self) -> bool:
        return self.error is None

    @staticmethod
    def failed(config: Config, error: str, message: str, max_error: float | None = None
               ) -> "MeasureResult":
        return MeasureResult(config, None, 0.0, error, message, max_error)


@dataclass(frozen=True)
class Budget:
    """How much search a kernel gets.

    trials: measured (unique, valid) configs per kernel; when a schedule is tuned, trials times
    the number of kernels is shared out by how much of the run time each kernel takes.
    seconds: wall time per kernel (None: no limit). total_seconds: wall time for the whole
    schedule, shared out the same way. patience: stop a kernel when its best has not improved by
    more than `min_improvement` for this many trials. target_s: stop as soon as a config runs
    this fast (a time known to be good enough).
    """
    trials: int | None = 100
    seconds: float | None = None
    total_seconds: float | None = None
    patience: int | None = None
    min_improvement: float = 0.01
    target_s: float | None = None

    def problem(self) -> str | None:
        """Why this budget allows no search at all, or None."""
        for name in ("trials", "seconds", "total_seconds", "patience"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, float)) or math.isnan(value)
                                      or value < 0):
                return f"budget {name}={value!r} must be a non-negative number"
        for name in ("trials", "seconds", "total_seconds"):
            if getattr(self, name) == 0:
                return f"the budget is zero ({name}=0): nothing to measure"
        if self.patience == 0:
            return "patience=0 would stop before the first trial; use None for no early stop"
        return None


@dataclass(frozen=True)
class Trial:
    """One trial of a study: the config asked, what answered it, and whether it was measured
    (False for repeats answered from the history and for invalid configs)."""
    number: int
    result: MeasureResult
    measured: bool
    finished: datetime | None = None  # when it was answered (UTC), kept with its measurement


@dataclass(frozen=True)
class SearchResult:
    """What searching one kernel found. `best` and `default` are None when nothing ran cleanly."""
    best: MeasureResult | None
    default: MeasureResult | None
    trials: tuple[Trial, ...]
    measured: int
    stopped_by: str  # trials, seconds, patience, target, exhausted, stalled or interrupted
    sampler: str
    seconds: float
    notes: tuple[str, ...] = ()

    def failures(self) -> dict[str, int]:
        counts = {kind: 0 for kind in ERROR_KINDS}
        for trial in self.trials:
            if trial.result.error and (trial.measured or trial.result.error == "invalid"):
                counts[trial.result.error] += 1
        return {kind: n for kind, n in counts.items() if n}


@dataclass(frozen=True)
class KernelResult:
    """The outcome of tuning one unique kernel, as reported and stored.

    status: "tuned" (searched), "single" (a one-config space: measured only), "stored" (the
    database already had a result; skipped), "failed" (no config ran correctly),
    "interrupted" (stopped by Ctrl-C; the best so far is kept), "skipped" (the run stopped
    before this kernel). speedup is default_time_s / time_s; gflops and gbps come from the
    kernel's flops and bytes over time_s. saved says the store kept it as the new best (it
    keeps a stored result that is at least as fast); save_error, why writing it failed.
    started_from names the other device whose winner of this kernel the search measured first
    (search/starts.py), where there was one.
    """
    kernel_key: str
    name: str
    status: str
    occurrences: int = 1
    config: Config | None = None
    time_s: float | None = None
    spread: float | None = None
    gflops: float | None = None
    gbps: float | None = None
    default_time_s: float | None = None
    speedup: float | None = None
    trials: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    sampler: str = ""
    seconds: float = 0.0
    stopped_by: str = ""
    saved: bool = False
    message: str = ""
    save_error: str = ""  # why a result found was not saved (the database refused it)
    started_from: str = ""

    @classmethod
    def from_record(cls, kernel: Kernel, occurrences: int, record, config: Config | None,
                    status: str, *, saved: bool = False, message: str = "") -> KernelResult:
        """A result the database holds (a tunesearch.db ResultRecord, its config parsed) as
        this run's result for kernel; a 0.0 default time or speed-up there means unknown."""
        return cls(kernel.key, kernel.name, status, occurrences, config, record.time_s,
                   record.spread, record.gflops, record.gbps, record.default_time_s or None,
                   record.speedup or None, record.trials, sampler=record.sampler, saved=saved,
                   message=message)

    def as_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["config"] = self.config.as_dict() if self.config is not None else None
        out["failures"] = dict(self.failures)
        return out


@dataclass(frozen=True)
class TuneReport:
    """Everything one tuning run did, kernel by kernel."""
    device_key: str
    device_name: str
    results: tuple[KernelResult, ...]
    interrupted: bool
    seconds: float
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"device_key": self.device_key, "device_name": self.device_name,
                "interrupted": self.interrupted, "seconds": self.seconds,
                "notes": list(self.notes), "kernels": [r.as_dict() for r in self.results]}

    def to_json(self) -> str:
        """The summary scripts read (`tunesearch tune --json`)."""
        return json.dumps(self.as_dict(), indent=2, sort_keys=True)
