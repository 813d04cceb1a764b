"""A Config: the choices for one kernel, as plain data.

It is frozen, JSON-serializable and replayable. The database stores configs, never code, and a
config read back is validated against the kernel's space before anything uses it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from tunesearch.errors import UserError

# bumped whenever the meaning of a knob or the code generated for it changes: a stored record
# keeps the version it was tuned under (`tunesearch db prune --space-version-below` re-opens
# what older code generation found); its config stays valid and is still used
# 2: the CPU ktile knob; tail blocks out of line, the lane loop marked omp simd, panels per tile
SPACE_VERSION = 2


class ConfigError(UserError, ValueError):
    """A config that does not fit a kernel or device; the message says why."""


def _freeze(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        raise ConfigError(f"knob values are integers or lists of integers, not {value!r}")
    if isinstance(value, int):
        return int(value)
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    raise ConfigError(f"knob values are integers or lists of integers, not {value!r}")


def check_version(data: Mapping) -> None:
    """Refuse (ConfigError) stored config data whose "version" this code does not know. A
    config of an older space version stays valid; one of a newer release, or a tampered value
    (a string, 999), means knobs this code may misread. Data without a version is current."""
    version = data.get("version", SPACE_VERSION)
    if type(version) is not int or not 1 <= version <= SPACE_VERSION:
        raise ConfigError(f"config version {version!r} is not one this tunesearch knows "
                          f"(1 to {SPACE_VERSION})")


@dataclass(frozen=True)
class Config:
    """Knob name -> int or tuple of ints, sorted by name.

    >>> Config.make(upcast=(4, 16), unroll=2).to_json()
    '{"knobs": {"unroll": 2, "upcast": [4, 16]}, "version": 2}'
    """
    knobs: tuple[tuple[str, Any], ...]

    @staticmethod
    def make(mapping: Mapping[str, Any] | None = None, **kwargs) -> "Config":
        items = dict(mapping or {}, **kwargs)
        for name in items:
            if not isinstance(name, str) or not name.isidentifier():
                raise ConfigError(f"knob names are identifiers, not {name!r}")
        return Config(tuple(sorted((k, _freeze(v)) for k, v in items.items())))

    def get(self, name: str, default: Any = None) -> Any:
        for key, value in self.knobs:
            if key == name:
                return value
        return default

    def as_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.knobs}

    def replace(self, **changes) -> "Config":
        return Config.make({**self.as_dict(), **changes})

    def to_json(self) -> str:
        return json.dumps({"knobs": self.as_dict(), "version": SPACE_VERSION}, sort_keys=True)

    @staticmethod
    def from_json(text: str | Mapping) -> "Config":
        """Parse a stored config; any malformed input raises ConfigError, nothing else."""
        try:
            data = json.loads(text) if isinstance(text, str) else dict(text)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"config is not JSON: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("knobs"), dict):
            raise ConfigError("config must be an object with a 'knobs' object")
        check_version(data)
        return Config.make(data["knobs"])

    def __str__(self) -> str:
        return " ".join(f"{k}={','.join(map(str, v)) if isinstance(v, tuple) else v}"
                        for k, v in self.knobs)
