"""The run-time lookup of tuned configs: the config each kernel runs with on a device.

A `TunedConfigs` holds the database it reads, the choices made so far (each kernel is looked up
once per device, then answered from memory) and, optionally, a miss policy: what to do when a
kernel has no record and TUNESEARCH_TUNE=N asks for tuning (`settings.tune_on_miss`). The front
ends make lookups and pass them down (`lowering.plan.Plan`, `Tensor.numpy(lookup=...)`,
`tunesearch.onnx.load(..., lookup=...)`); the runtime never makes one of its own.

    >>> configs = TunedConfigs("sqlite:///results.db")   # opened on the first lookup
    >>> configs.choose(kernel, get_device("cpu"))          # Choice(config=..., tuned=True)

A stored config is validated against the kernel's space before it is used; an invalid one is
ignored with a warning, and so is a record made for another device key (it is never found).
TUNESEARCH_NODB=1 turns every lookup off.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Optional

from tunesearch import settings
from tunesearch.graph.kernel import Kernel
from tunesearch.runtime.device import Device
from tunesearch.space.config import Config, ConfigError
from tunesearch.space.spaces import space_for


@dataclass(frozen=True)
class Choice:
    """The config a kernel runs with; `tuned` when it is a valid record from the database."""
    config: Config
    tuned: bool


# a front end's answer to a kernel without a record: (kernel, device, trials) tunes the kernel
# and stores its winner where the lookup will find it
MissPolicy = Callable[[Kernel, Device, int], None]


class TunedConfigs:
    """The tuned configs of one database, looked up per kernel and device.

    `TunedConfigs(url)` reads the database at url (default: TUNESEARCH_DB, else the SQLite file
    in the cache folder), opened on the first lookup. It is forgiving, as code that realizes
    tensors must be: a database that cannot be opened means default configs (one warning), and
    so does a lookup that fails. `open` opens the database now and raises where it cannot;
    `for_run` is the command line's strict rule; `defaults` reads no database at all.
    """

    def __init__(self, url: str | None = None, *, on_miss: Optional[MissPolicy] = None):
        self.on_miss = on_miss
        self._url = url
        self._store = None
        self._failed = False           # the database could not be opened: defaults from now on
        self._reads_database = True
        self._choices: dict[tuple[str, str, frozenset[int]], Choice] = {}

    @classmethod
    def open(cls, url: str | None, *, on_miss: Optional[MissPolicy] = None) -> TunedConfigs:
        """The tuned configs of the database at url (None: TUNESEARCH_DB, else the default
        file), opened now: one that cannot be opened raises its DatabaseError here."""
        from tunesearch.db import Store
        lookup = cls(url, on_miss=on_miss)
        lookup._store = Store(url)
        return lookup

    @classmethod
    def for_run(cls, url: str | None, *, on_miss: Optional[MissPolicy] = None) -> TunedConfigs:
        """The command line's `run`: one rule for a database given with --db, with
        TUNESEARCH_DB, or the default file. It is opened now, read-only, and one that cannot be
        used (missing, empty, corrupt, older, unreachable) raises its one-line DatabaseError
        before the model runs; only the default file that does not exist yet (nothing tuned on
        this machine) means defaults, as does TUNESEARCH_NODB=1."""
        from tunesearch.db import Store, default_path
        url = url or settings.db_url()
        if not settings.use_db() or url is None and not default_path().is_file():
            return cls.defaults()
        lookup = cls(url, on_miss=on_miss)
        lookup._store = Store(url if url is not None else default_path(), readonly=True)
        return lookup

    @classmethod
    def defaults(cls) -> TunedConfigs:
        """No database: every kernel runs its default config, and nothing is tuned on a miss."""
        lookup = cls()
        lookup._reads_database = False
        return lookup

    def __repr__(self) -> str:
        where = self._store.where if self._store is not None else self._url or "default"
        return f"TunedConfigs({where if self._reads_database else 'none'})"

    def choose(self, kernel: Kernel, device: Device, constants: frozenset[int] = frozenset()
               ) -> Choice:
        """The config this kernel runs with here: a valid tuned record, else the default (a
        miss, an invalid record or a database error: a lookup never makes a run fail).
        constants: its input buffers that hold weights where it runs (see Space)."""
        key = (kernel.key, device.info().key, frozenset(constants))  # the device as configured
        if key in self._choices:
            return self._choices[key]
        space = space_for(kernel, device.info().target, constants)
        if kernel.buffers[0].size == 0:  # nothing to compute (realize.get_program) or tune
            self._choices[key] = Choice(space.naive(), False)
            return self._choices[key]
        choice = Choice(space.default(), False)
        if self._reads_database and settings.use_db():
            stored = self._stored(kernel, device)
            trials = settings.tune_on_miss()
            if stored is None and trials > 0 and self.on_miss is not None:
                self.on_miss(kernel, device, trials)
                stored = self._stored(kernel, device)
            if stored is not None:
                try:
                    config = Config.from_json(stored)
                    reason = space.validate(config)
                except ConfigError as exc:
                    reason = str(exc)
                if reason is None:
                    choice = Choice(config, True)
                else:
                    warnings.warn(f"ignoring the stored config of {kernel.name} ({kernel.key}): "
                                  f"{reason}", stacklevel=2)
        self._choices[key] = choice
        return choice

    def _stored(self, kernel: Kernel, device: Device) -> Optional[dict]:
        """The config stored for kernel on this device key, as JSON data; None for none."""
        try:
            store = self._opened()
            if store is None:
                return None
            record = store.lookup(kernel.key, device.info().key)
        except Exception as exc:  # the database is optional at run time
            warnings.warn(f"tuned-config lookup failed, using defaults: {exc}", stacklevel=3)
            return None
        return None if record is None else record.config

    def _opened(self):
        """The store, opened on the first lookup; None once it could not be opened."""
        if self._store is None and not self._failed:
            from tunesearch.db import Store
            try:
                self._store = Store(self._url or settings.db_url())
            except Exception as exc:
                self._failed = True
                warnings.warn(f"tuned configs unavailable, running defaults: {exc}",
                              stacklevel=4)
        return self._store
