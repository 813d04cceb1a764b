"""The search space of one kernel on one target: its knobs, their validity, the default.

`space_for(kernel, target)` builds it, picking the Space class of the target's family by name
from SPACE_FAMILIES. A space describes itself as a list of parameters (name, choices, and the
condition under which it is active), so a search engine can sample it define-by-run;
`config_from` turns sampled values into a Config and `validate` says why a config is invalid, or
returns None.
"""
from __future__ import annotations

import importlib
import itertools
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Iterator

from tunesearch.graph.kernel import Kernel
from tunesearch.space.config import Config, ConfigError
from tunesearch.space.target import Target


@dataclass(frozen=True)
class Param:
    """One sampled choice. Choices are ints or strings (lists are encoded "1,0")."""
    name: str
    choices: tuple
    when: tuple[str, tuple] | None = None  # active only if that param's value is in the tuple


def encode(values) -> str:
    return ",".join(str(v) for v in values)


def decode(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",")) if text else ()


class Space(ABC):
    """The knobs of one kernel for one device family."""

    def __init__(self, kernel: Kernel, target: Target, constants: frozenset[int] = frozenset()):
        # constants: the kernel's input buffers that hold weights where it runs (a model's
        # plan packs them once, when it is built: a default may pack them for free)
        self.kernel, self.target, self.constants = kernel, target, frozenset(constants)

    @abstractmethod
    def parameters(self) -> list[Param]: ...

    @abstractmethod
    def config_from(self, values: dict[str, Any]) -> Config: ...

    @abstractmethod
    def params_of(self, config: Config) -> dict[str, Any]: ...

    @abstractmethod
    def check(self, config: Config) -> None:
        """Raise ConfigError saying why config does not fit this kernel and target."""

    @abstractmethod
    def default(self) -> Config: ...

    @abstractmethod
    def naive(self) -> Config: ...

    def adapt(self, config: Config) -> Config | None:
        """config, made to fit this kernel where a family knows how (a winner of a kernel
        of the same structure and another shape), or None where it cannot be made valid."""
        return config if self.validate(config) is None else None

    def neighbours(self, config: Config) -> list[Config]:
        """Valid configs one step from config, the ones a search tries first after the
        default. None unless a family knows which steps matter."""
        return []

    def validate(self, config: Any) -> str | None:
        """None if config is valid here, else the reason. Never raises on bad data."""
        try:
            if not isinstance(config, Config):
                raise ConfigError(f"not a Config: {type(config).__name__}")
            self.check(config)
        except ConfigError as exc:
            return str(exc)
        except (TypeError, ValueError, IndexError, KeyError, OverflowError) as exc:
            return f"malformed config: {exc}"
        return None

    def size(self) -> int:
        """The number of points in the parameter grid (valid or not)."""
        total = 0
        for _ in self._grid():
            total += 1
            if total > 10**6:
                break
        return total

    def enumerate(self, limit: int = 100_000) -> Iterator[Config]:
        """Every valid config, for spaces small enough to sweep."""
        seen: set[Config] = set()
        for count, values in enumerate(self._grid()):
            if count >= limit:
                return
            config = self.config_from(values)
            if config not in seen and self.validate(config) is None:
                seen.add(config)
                yield config

    def _grid(self) -> Iterator[dict[str, Any]]:
        params = self.parameters()

        def expand(i: int, values: dict[str, Any]):
            if i == len(params):
                yield dict(values)
                return
            p = params[i]
            if p.when is not None and values.get(p.when[0]) not in p.when[1]:
                yield from expand(i + 1, values)
                return
            for choice in p.choices:
                values[p.name] = choice
                yield from expand(i + 1, values)
                del values[p.name]
        yield from expand(0, {})


def check_knob_set(config: Config, family: str, knobs: tuple[str, ...],
                   integers: tuple[str, ...], optional: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
    """The config's knobs as a dict, once it has exactly `knobs` and `integers` are ints;
    raises ConfigError naming what is unknown, missing or mistyped. Knobs added to a space
    after its first release are `optional`: a stored config without one means the default
    given here, which must generate the same code as before the knob existed."""
    values = {**(optional or {}), **dict(config.knobs)}
    unknown = set(values) - set(knobs)
    if unknown:
        raise ConfigError(f"unknown knobs for {family}: {', '.join(sorted(unknown))}")
    missing = set(knobs) - set(values)
    if missing:
        raise ConfigError(f"missing knobs: {', '.join(sorted(missing))}")
    for name in integers:
        if not isinstance(values[name], int):
            raise ConfigError(f"{name} must be an integer, got {values[name]!r}")
    return values


# space family (a Target's family, a device entry's space_family) -> "module:Class", imported on
# first use (the family modules import this one); a family not listed has no knobs
SPACE_FAMILIES: dict[str, str] = {
    "cpu": "tunesearch.space.cpu_space:CPUSpace",
    "gpu": "tunesearch.space.gpu_space:GPUSpace",
    "none": "tunesearch.space.spaces:TrivialSpace",
}


def space_class(family: str) -> type[Space]:
    """The Space class of a space family (TrivialSpace, one config, for a family not listed)."""
    module, cls = SPACE_FAMILIES.get(family, SPACE_FAMILIES["none"]).split(":")
    return getattr(importlib.import_module(module), cls)


def space_for(kernel: Kernel, target: Target, constants: frozenset[int] = frozenset()) -> Space:
    """The space of kernel on target, of the target's family; constants: the input buffers
    that hold weights where the kernel runs (see Space)."""
    return space_class(target.family)(kernel, target, constants)


class TrivialSpace(Space):
    """One config for devices without knobs (the reference interpreter)."""

    def parameters(self) -> list[Param]:
        return []

    def config_from(self, values):
        return Config.make()

    def params_of(self, config):
        return {}

    def check(self, config):
        if config.knobs:
            raise ConfigError(f"this device has no knobs, got {sorted(dict(config.knobs))}")

    def default(self):
        return Config.make()

    def naive(self):
        return Config.make()


def divisors_and_blocks(size: int, candidates) -> tuple[int, ...]:
    """Candidate block sizes for an axis: those not above its size, plus the size when small."""
    out = sorted({c for c in candidates if c <= size} | ({size} if size <= max(candidates) else set()))
    return tuple(out) or (1,)


def permutations(n: int, limit: int = 24) -> list[tuple[int, ...]]:
    perms = list(itertools.islice(itertools.permutations(range(n)), limit))
    if n > 0 and tuple(reversed(range(n))) not in perms:
        perms.append(tuple(reversed(range(n))))
    return perms


def prod(values) -> int:
    return math.prod(values)
