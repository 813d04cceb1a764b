"""A model timed with every kernel's default and with its tuned winners, back to back, and the
winners that lose inside it given back their defaults.

Tuning a model (`search.tune_model`) ends here. The two sides run in alternating blocks (defaults, winners,
defaults, winners...), each block a warm-up call and `repeat` timed calls, and each side's figure
is the median of its blocks: a machine that slows down for a while slows both sides alike. When
the blocks of one side disagree by more than NOISE, more rounds are run; if they still disagree,
the comparison says the machine was too noisy to trust it instead of printing a speed-up it did
not see.

One process is one sample: its threads, its buffers' addresses and the machine's mood while it
runs are its own. So the blocks run in PROCESSES fresh processes, one after another, and every
figure is the median over them (`measure_in_processes`); the spread between processes is
reported with the figures.

A winner is chosen on the kernel alone. Inside the model its neighbours, the cache state and the
threads can make it slower than the default was there: such a winner is not applied. The
default takes its place in the database (search.tune.keep_defaults: the kernel keeps the config
that ran faster in its model) and the comparison lists it. Judged on the median process, a
winner that was faster in one lucky process only loses.
"""
from __future__ import annotations

import importlib
import json
import os
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field

from tunesearch.runtime import realize
from tunesearch.runtime.lookup import TunedConfigs
from tunesearch.search.on_miss import tune_on_miss

NOISE = 0.10        # blocks of one side further apart than this (relative) are not trusted
LOSS = 0.05         # a winner this much slower than the default inside the model loses its place
ROUNDS, MAX_ROUNDS = 3, 7
PROCESSES = 3       # fresh processes the model is timed in after a tune


@dataclass(frozen=True)
class Comparison:
    before_s: float                 # the model with every default (median of its blocks)
    after_s: float                  # with the winners the database has for this device
    spread: float                   # the larger relative spread of the two sides' blocks
    rounds: int
    kept_default: tuple[str, ...] = ()   # keys of kernels whose winner lost inside the model
    n_tuned: int = 0
    n_kernels: int = 0
    kernel_before: dict = field(default_factory=dict)   # key -> seconds inside the model
    kernel_after: dict = field(default_factory=dict)    # (medians over the blocks)
    kernel_after_best: dict = field(default_factory=dict)  # key -> its fastest block
    before_by_process: tuple[float, ...] = ()   # each process's median, where several ran
    after_by_process: tuple[float, ...] = ()

    @property
    def noisy(self) -> bool:
        return self.spread > NOISE

    @property
    def speedup(self) -> float:
        return self.before_s / self.after_s


def profile_with(model, inputs, repeat: int, db_url: str | None, use_db: bool):
    """Profile the model with tuned configs from db_url, or with every kernel's default: fresh
    plans, programs and lookup, so each side looks its configs up afresh. The model keeps that
    lookup for its later calls."""
    use_configs(model, db_url, use_db)
    return model.profile(inputs, repeat=repeat)


def use_configs(model, db_url: str | None, use_db: bool) -> None:
    """From the next call on, the model runs the tuned configs of db_url (use_db) or every
    kernel's default: fresh plans, programs and lookup."""
    lookup = TunedConfigs.open(db_url, on_miss=tune_on_miss) if use_db else TunedConfigs.defaults()
    realize.clear_programs()
    model.reset_plans()
    model.use_lookup(lookup)


def _per_kernel(profile) -> dict[str, float]:
    out: dict[str, float] = {}
    for kernel, seconds in profile.kernels:
        out[kernel.key] = out.get(kernel.key, 0.0) + seconds
    return out


def _spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def measure(model, inputs, repeat: int, db_url: str | None) -> Comparison:
    """Alternating blocks of the defaults and the winners until both sides agree with
    themselves (or MAX_ROUNDS); see the module docstring."""
    # a first round of both sides, not counted: fresh plans, buffers and sleeping threads make
    # the first blocks after tuning slower than any later one
    profile_with(model, inputs, 1, db_url, use_db=False)
    profile_with(model, inputs, 1, db_url, use_db=True)
    before, after = [], []
    rounds = 0
    while rounds < MAX_ROUNDS:
        before.append(profile_with(model, inputs, repeat, db_url, use_db=False))
        after.append(profile_with(model, inputs, repeat, db_url, use_db=True))
        rounds += 1
        spread = max(_spread([p.latency for p in before]), _spread([p.latency for p in after]))
        if rounds >= ROUNDS and spread <= NOISE:
            break
    kernels_before = [_per_kernel(p) for p in before]
    kernels_after = [_per_kernel(p) for p in after]
    return Comparison(
        statistics.median(p.latency for p in before), statistics.median(p.latency for p in after),
        spread, rounds, n_tuned=after[-1].n_tuned, n_kernels=len(after[-1].kernels),
        kernel_before={k: statistics.median(d[k] for d in kernels_before)
                       for k in kernels_before[-1]},
        kernel_after={k: statistics.median(d[k] for d in kernels_after)
                      for k in kernels_after[-1]},
        kernel_after_best={k: min(d[k] for d in kernels_after) for k in kernels_after[-1]})


def measure_in_processes(recipe: dict, repeat: int, db_url: str,
                         processes: int = PROCESSES) -> Comparison:
    """`measure` in `processes` fresh processes, one after another; each figure is the median
    over them. The spread is the larger of the spread between processes and the median
    process's own. recipe: how a fresh process builds the model again, {"function":
    "module:name", "arguments": {...}} (an OnnxModel loaded from a file has one, `.recipe`)."""
    request = json.dumps({"recipe": recipe, "repeat": repeat})
    env = dict(os.environ, TUNESEARCH_MEASURE_DB=db_url)  # the URL may hold a password
    runs = []
    for _ in range(processes):
        done = subprocess.run([sys.executable, "-m", "tunesearch.search.in_model"],
                              input=request, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"timing the model in a process of its own failed "
                               f"(exit {done.returncode}): {done.stderr.strip()[-2000:]}")
        runs.append(Comparison(**json.loads(done.stdout.strip().splitlines()[-1])))
    return combine(runs)


def combine(runs: list[Comparison]) -> Comparison:
    """The median process of several: each side's latency and each kernel's time, the median
    over the processes; the fastest block of a kernel's winner, its median too (one lucky
    process does not save a winner)."""
    median = statistics.median
    before = tuple(r.before_s for r in runs)
    after = tuple(r.after_s for r in runs)
    spread = max(_spread(list(before)), _spread(list(after)), median(r.spread for r in runs))

    def per_kernel(name: str) -> dict:
        keys = getattr(runs[-1], name)
        return {k: median(getattr(r, name).get(k, getattr(runs[-1], name)[k]) for r in runs)
                for k in keys}
    return Comparison(median(before), median(after), spread, sum(r.rounds for r in runs),
                      n_tuned=runs[-1].n_tuned, n_kernels=runs[-1].n_kernels,
                      kernel_before=per_kernel("kernel_before"),
                      kernel_after=per_kernel("kernel_after"),
                      kernel_after_best=per_kernel("kernel_after_best"),
                      before_by_process=before, after_by_process=after)


def losers(comparison: Comparison, results) -> list:
    """The results tuned in this run whose winner ran slower inside the model than the default
    did there: by more than LOSS (or the noise between blocks, where that is larger), even in
    its fastest block. Results already stored are not judged again."""
    margin = max(LOSS, comparison.spread)
    out = []
    for r in results:
        if r.config is None or r.status != "tuned":
            continue
        before = comparison.kernel_before.get(r.kernel_key)
        after = comparison.kernel_after_best.get(r.kernel_key,
                                                 comparison.kernel_after.get(r.kernel_key))
        if before and after and after > before * (1 + margin):
            out.append(r)
    return out


def _child() -> int:
    """One process of `measure_in_processes`: the request on stdin, the Comparison as one line
    of JSON on stdout."""
    request = json.loads(sys.stdin.read())
    module, name = request["recipe"]["function"].split(":")
    model = getattr(importlib.import_module(module), name)(**request["recipe"]["arguments"])
    inputs = model.random_inputs(seed=0)
    comparison = measure(model, inputs, request["repeat"], os.environ["TUNESEARCH_MEASURE_DB"])
    print(json.dumps(asdict(comparison)))
    return 0


if __name__ == "__main__":
    sys.exit(_child())
