"""Measuring candidates: compiled in parallel, run in an isolated process, verified, timed.

    with DeviceMeasurer("cpu") as measurer:
        [result] = measurer.measure(kernel, [space.default()])
        result.time_s, result.spread      # or result.error, result.message

A Measurer answers a batch of configs of one kernel with one MeasureResult each. DeviceMeasurer
does it for real, with a Builder (builder.py: a pool of compile processes) and a Runner
(runner.py: an isolated process with hard timeouts), and checks every output against the
reference; SimulatedMeasurer answers from a table or a function, so search strategies can be
tested and compared without hardware.
"""
from __future__ import annotations

import statistics
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Union

import numpy as np

from tunesearch.graph.kernel import Kernel
from tunesearch.runtime.device import Device
from tunesearch.search import verify
from tunesearch.search._runner_child import guard_values
from tunesearch.search._spawn import machine_cores
from tunesearch.search.builder import Builder, ProcessPoolBuilder
from tunesearch.search.device_lock import DeviceLock, measuring_lock
from tunesearch.search.messages import BuildResult, DeviceSpec, RunRequest, RunSetup, Timing
from tunesearch.search.results import MeasureResult
from tunesearch.search.runner import ProcessRunner, Runner
from tunesearch.space.config import Config

GUARD_ELEMENTS = 4096


class Measurer(ABC):
    """Measures configs of a kernel. `batch_size` configs are worth asking for at once."""

    batch_size: int = 1

    @abstractmethod
    def measure(self, kernel: Kernel, configs: list[Config]) -> list[MeasureResult]:
        """One result per config, in order. A config measured before may be answered again."""

    def retime(self, kernel: Kernel, configs: list[Config]) -> list[MeasureResult]:
        """Time finalists again, more carefully, before a winner is chosen."""
        return self.measure(kernel, configs)

    def use_constants(self, constants: Mapping[str, frozenset[int]]) -> None:
        """Kernel key -> the input buffers that never change where the kernel runs (a
        model's weights, see OnnxModel.constant_inputs): measured as the plan runs them,
        packed ahead where a config packs them. Measurers that time nothing ignore it."""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def from_memory(constants: frozenset[int]) -> tuple[int, ...]:
    """The constant inputs (a model's weights) a candidate is timed with pushed out of the
    caches before each run: all of them. Every other kernel of the model runs between two
    calls of this one, and their weights and values together leave no weight in a core's L2
    (inception_v2's 1024 x 192 weight, 768 KiB: 59 us with it in L2, 125 pushed out, 130 in
    the model). Timed in the caches, a candidate that waits on a weight's stream before its
    arithmetic would win on a speed it never has in the model."""
    return tuple(sorted(constants))


def summarize(config: Config, times: list[float]) -> MeasureResult:
    """The median time and its relative spread (interquartile range / median)."""
    median = statistics.median(times)
    if len(times) >= 4:
        q1, _, q3 = statistics.quantiles(times, n=4)
        spread = (q3 - q1) / median if median > 0 else 0.0
    else:
        spread = (max(times) - min(times)) / median if median > 0 else 0.0
    return MeasureResult(config, median, spread, repeats=len(times))


@dataclass
class _KernelState:
    """What is kept per kernel: the inputs and reference, and the fastest time so far."""
    kernel: Kernel
    inputs: list[np.ndarray]
    reference: np.ndarray
    tolerance: float
    fill: np.ndarray
    guard: np.ndarray
    best_s: float | None = None


# rounds the finalists are re-timed in (DeviceMeasurer.retime)
FINAL_ROUNDS = 3


class DeviceMeasurer(Measurer):
    """Real measurements on a device, safe against candidates that crash, hang or lie.

    timeout_s is the floor of the hard limit on one run in the runner process (the limit grows
    with the fastest time seen: a candidate `slow_cutoff` times slower than it is timed once and
    dropped); first_timeout_s applies while a kernel has no time yet. `timing` is for trials,
    `final_timing` for re-timing finalists. builder and runner: a ProcessPoolBuilder of
    compile_workers processes and a ProcessRunner unless given. lock: held while candidates are
    timed (never while they compile), so that no other process of the machine times on the same
    physical device meanwhile; the device's `measuring_lock` unless given.
    """

    def __init__(self, device: str | Device | DeviceSpec, *, seed: int = 0,
                 timeout_s: float = 10.0, first_timeout_s: float = 120.0,
                 timing: Timing = Timing(),
                 final_timing: Timing = Timing(warmup=1, min_time_s=0.25, min_repeats=7,
                                               max_repeats=2000),
                 compile_workers: int | None = None, compile_timeout_s: float = 300.0,
                 slow_cutoff: float = 10.0, kernels_kept: int = 4,
                 builder: Builder | None = None, runner: Runner | None = None,
                 lock: DeviceLock | None = None):
        self.device = DeviceSpec.of(device)
        self.seed, self.timeout_s, self.first_timeout_s = seed, timeout_s, first_timeout_s
        self.timing, self.final_timing, self.slow_cutoff = timing, final_timing, slow_cutoff
        self.builder = builder or ProcessPoolBuilder(self.device, compile_workers,
                                                     compile_timeout_s)
        self.runner = runner or ProcessRunner(self.device)
        self.batch_size = compile_workers or machine_cores()
        self._kernels: OrderedDict[str, _KernelState] = OrderedDict()
        self._kernels_kept = kernels_kept
        self._results: dict[tuple[str, Config], MeasureResult] = {}
        self._built: dict[tuple[str, Config], BuildResult] = {}  # successful builds only
        self._constants: dict[str, frozenset[int]] = {}
        self._lock = lock

    @property
    def lock(self) -> DeviceLock:
        if self._lock is None:  # asked late: naming an OpenCL device opens it
            self._lock = measuring_lock(self.device)
        return self._lock

    def use_constants(self, constants: Mapping[str, frozenset[int]]) -> None:
        for key, indices in constants.items():
            if self._constants.get(key) != indices:  # built under other constants: build again
                self._built = {k: v for k, v in self._built.items() if k[0] != key}
                self._results = {k: v for k, v in self._results.items() if k[0] != key}
            self._constants[key] = frozenset(indices)

    # ---- per kernel: inputs and reference, computed once
    def state(self, kernel: Kernel) -> _KernelState:
        state = self._kernels.get(kernel.key)
        if state is None:
            inputs = verify.make_inputs(kernel, self.seed)
            reference = verify.reference_output(kernel, inputs)
            out = kernel.buffers[0]
            guard = guard_values(out.dtype.name, min(GUARD_ELEMENTS, max(out.size, 64)))
            state = _KernelState(kernel, inputs, reference, verify.tolerance(kernel),
                                 verify.unwritten_fill(reference, verify.written(kernel)),
                                 guard)
            self._kernels[kernel.key] = state
            while len(self._kernels) > self._kernels_kept:
                old, _ = self._kernels.popitem(last=False)
                self._built = {k: v for k, v in self._built.items() if k[0] != old}
        self._kernels.move_to_end(kernel.key)
        return state

    def measure(self, kernel: Kernel, configs: list[Config]) -> list[MeasureResult]:
        todo = list(dict.fromkeys(c for c in configs if (kernel.key, c) not in self._results))
        [results] = self._run_all(kernel, todo, final=False)
        for config, result in zip(todo, results):
            self._results[(kernel.key, config)] = result
        return [self._results[(kernel.key, c)] for c in configs]

    def retime(self, kernel: Kernel, configs: list[Config]) -> list[MeasureResult]:
        """The finalists timed in FINAL_ROUNDS rounds, each a block of runs per config with a
        share of final_timing, the order turned by one each round: a slow phase of the machine
        (a neighbour's burst, a stalled thread) then falls on several finalists alike instead
        of crowning whichever was timed outside it. Per config the median of its rounds; a
        failure in any round fails it."""
        unique = list(dict.fromkeys(configs))
        rounds = self._run_all(kernel, unique, final=True, rounds=FINAL_ROUNDS)
        combined = {config: _of_rounds([r[i] for r in rounds]) for i, config in enumerate(unique)}
        return [combined[c] for c in configs]

    def _run_all(self, kernel: Kernel, configs: list[Config], final: bool, rounds: int = 1
                 ) -> list[list[MeasureResult]]:
        """Per round, one result per config in order (each round timed with its share of the
        timing, its order turned by one; a config that failed is not run again)."""
        if not configs:
            return [[] for _ in range(rounds)]
        missing = [c for c in configs if (kernel.key, c) not in self._built]
        building = self.builder.submit(kernel, missing,
                                       self._constants.get(kernel.key, frozenset()))
        state = self.state(kernel)  # the reference is computed while the compilers run
        failed: dict[Config, MeasureResult] = {}
        for config, built in zip(missing, self.builder.collect(building)):
            if built.ok:
                self._built[(kernel.key, config)] = built
            else:
                failed[config] = MeasureResult.failed(config, built.error, built.message)
        buffer_specs = tuple((b.size, b.dtype.name) for b in kernel.buffers)
        self.runner.load(RunSetup(kernel.key, buffer_specs, tuple(state.inputs), state.fill,
                                  state.guard, kernel))
        timing = self.final_timing if final else self.timing
        share = replace(timing, min_time_s=timing.min_time_s / rounds,
                        min_repeats=max(1, -(-timing.min_repeats // rounds)))
        out = []
        for turn in range(rounds):
            first = turn % len(configs)
            order = configs[first:] + configs[:first]
            with self.lock:  # a round at a time: other processes' compiles go on meanwhile
                timed = {c: failed[c] if c in failed else self._run_one(state, c, final, share)
                         for c in order}
            failed.update((c, r) for c, r in timed.items() if not r.ok)  # not run again
            out.append([timed[c] for c in configs])
        return out

    def _run_one(self, state: _KernelState, config: Config, final: bool,
                 timing: Timing) -> MeasureResult:
        built = self._built[(state.kernel.key, config)]
        if state.best_s is None:
            timeout = self.first_timeout_s
        else:
            # a run slower than the cutoff is timed once (trials only: finalists are timed
            # fully); a run far slower than that is hung, as far as tuning is concerned
            cutoff = self.slow_cutoff * state.best_s
            if not final:
                timing = replace(timing, cutoff_s=cutoff)
            timeout = self.timeout_s + timing.min_time_s + \
                (2 + timing.warmup + timing.min_repeats) * cutoff
        cold = from_memory(self._constants.get(state.kernel.key, frozenset()))
        ran = self.runner.run(RunRequest(built.artifact, built.source, timing, timeout, config,
                                         built.layouts, cold))
        if not ran.ok:
            return MeasureResult.failed(config, ran.error, ran.message)
        if ran.violation is not None:
            return MeasureResult.failed(config, "crash", f"wrote out of bounds: {ran.violation}")
        ok, max_error, message = verify.compare(ran.first, state.reference, state.tolerance)
        if ok and ran.changed is not None:
            ok, later_error, message = verify.compare(ran.changed, state.reference,
                                                      state.tolerance)
            max_error = max(max_error, later_error)
            message = f"the output changed between runs: {message}"
        if not ok:
            return MeasureResult.failed(config, "wrong", message, max_error)
        result = replace(summarize(config, list(ran.times)), max_error=max_error)
        if state.best_s is None or result.time_s < state.best_s:
            state.best_s = result.time_s
        return result

    def close(self) -> None:
        self.runner.close()
        self.builder.close()
        if self._lock is not None:
            self._lock.close()


def _of_rounds(results: list[MeasureResult]) -> MeasureResult:
    """One config's rounds as one result: the median of their times, the widest spread, every
    repeat; the first failure where a round failed."""
    failed = next((r for r in results if not r.ok), None)
    if failed is not None:
        return failed
    errors = [r.max_error for r in results if r.max_error is not None]
    return replace(results[0], time_s=statistics.median(r.time_s for r in results),
                   spread=max(r.spread for r in results),
                   repeats=sum(r.repeats for r in results),
                   max_error=max(errors) if errors else None)


# a simulated answer: seconds, None (the candidate crashes), or a full MeasureResult
SimValue = Union[float, None, MeasureResult]


class SimulatedMeasurer(Measurer):
    """Answers from a table config -> value or a function config -> value, without hardware.

    `by_kernel` gives a table or function per kernel key (for runs over several kernels); a
    config with no answer fails as a crash. `calls` lists every config measured, in order, so
    tests can see what a strategy asked for; `retimes` the finalists re-timed.
    """

    def __init__(self, table: Mapping[Config, SimValue] | Callable[[Config], SimValue] = None,
                 *, by_kernel: Mapping[str, Mapping | Callable] | None = None,
                 batch_size: int = 1):
        self.table, self.by_kernel = table, dict(by_kernel or {})
        self.batch_size = batch_size
        self.calls: list[Config] = []
        self.retimes: list[Config] = []

    def _answer(self, kernel: Kernel, config: Config) -> MeasureResult:
        source = self.by_kernel.get(kernel.key, self.table)
        value = source(config) if callable(source) else (source or {}).get(config)
        if isinstance(value, MeasureResult):
            return replace(value, config=config)
        if value is None:
            return MeasureResult.failed(config, "crash", "no simulated time for this config")
        return MeasureResult(config, float(value), 0.0, repeats=1)

    def measure(self, kernel: Kernel, configs: list[Config]) -> list[MeasureResult]:
        self.calls += configs
        return [self._answer(kernel, c) for c in configs]

    def retime(self, kernel: Kernel, configs: list[Config]) -> list[MeasureResult]:
        self.retimes += configs
        return [self._answer(kernel, c) for c in configs]
