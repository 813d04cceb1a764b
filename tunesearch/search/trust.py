"""What a search does with what the store already holds for a kernel: trust it, measure it again,
or replace it.

    stored = stored_result(store, kernel, device_key, space)
    stored.skip        # a verified result that fits the space: the kernel is done
    stored.claimed     # an imported or merged config: measured again, kept only if it wins
    stored.supersede   # a row whose config does not parse or fit: the new result replaces it

Every config read back passes `space.validate` before anything is generated from it. A result
that came in through an import or a merge (`verified` False) was measured on another machine;
its time is a claim. The next search of its kernel measures its config here with the finalists'
timing, and whichever of it and the search's winner is faster is stored, verified.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tunesearch.graph.kernel import Kernel
from tunesearch.search.measure import Measurer
from tunesearch.search.results import KernelResult
from tunesearch.space.config import Config, ConfigError
from tunesearch.space.spaces import Space


@dataclass(frozen=True)
class Stored:
    """The store's row of one kernel on this device, judged."""
    record: object | None = None       # the ResultRecord read back (None: none, or unreadable)
    config: Config | None = None       # its config, when it parses and fits the space
    supersede: bool = False            # a row is there but cannot be used: replace it
    note: str = ""                     # what the run says about it

    @property
    def skip(self) -> bool:
        """A verified result that fits: nothing to search."""
        return self.config is not None and bool(getattr(self.record, "verified", True))

    @property
    def claimed(self) -> Config | None:
        """An imported or merged config, to measure here before it is trusted."""
        return self.config if self.config is not None and not self.skip else None


def stored_result(store, kernel: Kernel, device_key: str, space: Space) -> Stored:
    """Judge what `store` holds for kernel on device_key (see the module docstring)."""
    record = store.lookup(kernel.key, device_key)
    if record is None:
        if store.has_result(kernel.key, device_key):
            return Stored(supersede=True, note=f"the stored result of {kernel.name} is "
                          "unreadable (not what tunesearch writes); tuning it again")
        return Stored()
    try:
        config = Config.from_json(record.config)
        reason = space.validate(config)
    except ConfigError as exc:
        reason = str(exc)
    if reason is not None:
        return Stored(record, supersede=True, note=f"the stored config of {kernel.name} no "
                      "longer fits its space; tuning it again")
    if not getattr(record, "verified", True):
        return Stored(record, config, note=f"the stored result of {kernel.name} was measured "
                      "elsewhere (imported or merged); measuring it here")
    return Stored(record, config)


def weigh_claimed(kernel: Kernel, claimed: Config, measurer: Measurer,
                  result: KernelResult) -> KernelResult:
    """The search's result, or the claimed config measured here where it is faster (timed as
    the finalists were, so the two compare)."""
    [again] = measurer.retime(kernel, [claimed])
    if not again.ok or result.time_s is not None and again.time_s >= result.time_s:
        return result
    default_s = result.default_time_s
    return replace(result, config=again.config, time_s=again.time_s, spread=again.spread,
                   gflops=kernel.flops / again.time_s / 1e9,
                   gbps=kernel.bytes / again.time_s / 1e9,
                   speedup=default_s / again.time_s if default_s else None,
                   status=result.status if result.status != "failed" else "tuned", message="")
