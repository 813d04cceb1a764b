"""Search strategies on a simulated measurer: no hardware, deterministic, fast."""
from __future__ import annotations

from dataclasses import replace
from functools import cached_property

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from tests.search.kernels import add, matmul
from tunesearch.search import (Budget, MeasureResult, SimulatedMeasurer, make_sampler,
                               sampler_names, search_kernel, study_name)
from tunesearch.search.samplers import _missing
from tunesearch.search.study import _Codec
from tunesearch.space.config import Config
from tunesearch.space.cpu_space import CPUSpace
from tunesearch.space.spaces import space_for
from tunesearch.space.target import Target

TWO_THREADS = Target("cpu", threads=2)
ONE_THREAD = Target("cpu", threads=1)


def matmul_time(config) -> float:
    """A smooth made-up cost with one best point: big blocks, some unroll, threads, packing."""
    u0, u1 = config.get("upcast")
    return (1.0 + abs(np.log2(u0 / 6)) + abs(np.log2(u1 / 32)) + 0.1 * config.get("split")
            + 0.05 * abs(config.get("unroll") - 4) + (0.0 if config.get("parallel") else 1.0)
            + (0.0 if 2 in config.get("pack") else 0.3)) * 1e-3


@pytest.fixture(scope="module")
def mm_space():
    kernel = matmul(64, 64, 64)
    return kernel, space_for(kernel, TWO_THREADS)


@pytest.fixture(scope="module")
def small_space():
    """A few dozen configs: two block sizes and a loop order."""
    kernel = add(8, 8)
    space = space_for(kernel, ONE_THREAD)
    assert 20 <= len(list(space.enumerate())) <= 200
    return kernel, space


def test_default_is_trial_zero_and_nothing_is_measured_twice(mm_space):
    kernel, space = mm_space
    sim = SimulatedMeasurer(matmul_time)
    result = search_kernel(kernel, space, sim, Budget(trials=30), "tpe", seed=3)
    assert result.trials[0].number == 0 and result.trials[0].measured
    assert result.trials[0].result.config == space.default() == sim.calls[0]
    assert result.default.config == space.default()
    assert result.measured == len(sim.calls) == len(set(sim.calls)) == 30
    assert all(space.validate(c) is None for c in sim.calls)
    assert result.stopped_by == "trials"
    assert result.best.time_s == min(matmul_time(c) for c in sim.calls)
    assert sim.retimes and sim.retimes[0] == result.best.config or result.best.config in sim.retimes


def test_seeded_search_is_reproducible(mm_space):
    kernel, space = mm_space
    runs = []
    for seed in (5, 5, 6):
        sim = SimulatedMeasurer(matmul_time)
        search_kernel(kernel, space, sim, Budget(trials=25), "tpe", seed=seed)
        runs.append(sim.calls)
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_repeated_configs_are_answered_from_history(small_space):
    kernel, space = small_space
    table = {c: 1.0 + i for i, c in enumerate(space.enumerate())}
    sim = SimulatedMeasurer(table)
    trials = len(table) * 2 // 3
    result = search_kernel(kernel, space, sim, Budget(trials=trials), "random", seed=0)
    repeats = [t for t in result.trials if not t.measured and t.result.error is None]
    assert repeats, "sampling two thirds of a space at random repeats some configs"
    assert len(sim.calls) == len(set(sim.calls)) == result.measured == trials
    for trial in repeats:
        assert trial.result.time_s == table[trial.result.config]


class RawCPUSpace(CPUSpace):
    """The CPU space without bringing sampled blocks within the caps: most points invalid."""

    def _within_caps(self, upcast, split, unroll, choices):
        return upcast, split, unroll


def test_invalid_configs_are_failed_without_measuring(mm_space):
    kernel, _ = mm_space
    space = RawCPUSpace(kernel, TWO_THREADS)
    sim = SimulatedMeasurer(matmul_time)
    result = search_kernel(kernel, space, sim, Budget(trials=40), "random", seed=1)
    invalid = [t for t in result.trials if t.result.error == "invalid"]
    assert invalid and result.failures()["invalid"] == len(invalid)
    assert all(space.validate(t.result.config) for t in invalid)
    assert all(space.validate(c) is None for c in sim.calls)


def test_time_budget_stops_the_search(mm_space):
    kernel, space = mm_space
    now = [0.0]

    def one_second_each(config):
        now[0] += 1.0
        return matmul_time(config)

    sim = SimulatedMeasurer(one_second_each)
    result = search_kernel(kernel, space, sim, Budget(trials=None, seconds=10), "tpe", seed=0,
                           clock=lambda: now[0])
    assert result.stopped_by == "seconds"
    assert result.measured == 10


def test_patience_stops_when_nothing_improves(mm_space):
    kernel, space = mm_space
    sim = SimulatedMeasurer(lambda c: 2.0 if c == space.default() else 1.0)
    result = search_kernel(kernel, space, sim, Budget(trials=100, patience=5), "tpe", seed=0)
    assert result.stopped_by == "patience"
    assert result.measured == 1 + 1 + 5  # the default, the improvement, five without one


def test_grid_finds_the_exhaustive_best(small_space):
    kernel, space = small_space
    rng = np.random.default_rng(0)
    table = {c: float(rng.uniform(1, 2)) for c in space.enumerate()}
    sim = SimulatedMeasurer(table)
    result = search_kernel(kernel, space, sim, Budget(trials=None), "grid", seed=0)
    assert result.stopped_by == "exhausted"
    assert result.measured == len(table)
    assert result.best.time_s == min(table.values())


def test_small_space_is_swept_whatever_the_sampler(small_space):
    kernel, space = small_space
    table = {c: 1.0 + i / 100 for i, c in enumerate(space.enumerate())}
    result = search_kernel(kernel, space, SimulatedMeasurer(table), Budget(trials=200), "tpe")
    assert result.sampler == "grid" and "sweeping" in result.notes[0]
    assert result.measured == len(table)


def test_failing_configs_are_recorded_and_never_win(mm_space):
    kernel, space = mm_space

    def crashes_on_split_two(config):
        if config.get("split") == 2:
            return MeasureResult.failed(config, "wrong", "simulated", max_error=3.0)
        return matmul_time(config)

    result = search_kernel(kernel, space, SimulatedMeasurer(crashes_on_split_two),
                           Budget(trials=40), "random", seed=2)
    assert result.failures().get("wrong", 0) >= 1
    assert result.best.config.get("split") != 2


@pytest.mark.parametrize("name", sampler_names())
def test_every_sampler_searches(mm_space, name):
    kernel, space = mm_space
    sim = SimulatedMeasurer(matmul_time)
    result = search_kernel(kernel, space, sim, Budget(trials=15), name, seed=0)
    assert result.measured == len(set(sim.calls)) == 15
    # the winner is the fastest config measured (re-timed alike by the simulation)
    assert result.best.time_s == min(matmul_time(c) for c in sim.calls)
    fallback = {"gp": _missing("torch", "scipy"), "cmaes": _missing("cmaes")}.get(name)
    if fallback:
        assert result.sampler == "tpe" and any("pip install" in n for n in result.notes)
    else:
        assert result.sampler == name


def test_unknown_sampler_is_refused():
    with pytest.raises(ValueError, match="known samplers: tpe"):
        make_sampler("annealing", 0)


def test_study_in_storage_resumes_from_its_history(small_space, tmp_path):
    kernel, space = small_space
    table = {c: 1.0 + i / 100 for i, c in enumerate(space.enumerate())}
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    first = SimulatedMeasurer(table)
    search_kernel(kernel, space, first, Budget(trials=4), "random", seed=0, storage=storage,
                  device_key="sim", finalists=0)
    second = SimulatedMeasurer(table)
    result = search_kernel(kernel, space, second, Budget(trials=4), "random", seed=0,
                           storage=storage, device_key="sim", finalists=0)
    assert not set(first.calls) & set(second.calls)  # the history answered those
    assert result.best.time_s <= min(table[c] for c in first.calls)
    study = optuna.load_study(study_name=study_name(kernel, "sim"), storage=storage)
    assert study.study_name == f"{kernel.key}@sim"
    assert sum(t.user_attrs["result"]["measured"] for t in study.trials) == 8


class NarrowerCPUSpace(CPUSpace):
    """The same kernel's space after a release that offers other block sizes."""

    @cached_property
    def _parameters(self):
        return tuple(replace(p, choices=p.choices[:-1]) if p.name.startswith("upcast.") and
                     len(p.choices) > 2 else p for p in super()._parameters)


def test_a_study_resumes_after_the_space_changed(mm_space, tmp_path):
    """Optuna refuses a parameter whose choices changed within one study; the search names its
    parameters by their choices, so the resumed study goes on and its history still answers."""
    kernel, space = mm_space
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    first = SimulatedMeasurer(matmul_time)
    search_kernel(kernel, space, first, Budget(trials=8), "tpe", seed=0, storage=storage,
                  device_key="sim", finalists=0)
    narrower = NarrowerCPUSpace(kernel, TWO_THREADS)
    assert narrower.parameters() != space.parameters()
    for sampler in ("tpe", "random", "nsga2"):
        again = SimulatedMeasurer(matmul_time)
        result = search_kernel(kernel, narrower, again, Budget(trials=4), sampler, seed=1,
                               storage=storage, device_key="sim", finalists=0)
        assert result.measured == 4 and not set(first.calls) & set(again.calls)


def test_a_default_taken_by_another_process_is_not_told_to_a_sampled_trial(mm_space, tmp_path):
    """Two workers start one study at once: the other took the enqueued default and has not
    answered yet. This one's first ask is then a sampled trial, which must not get the
    default's time (the sampler would learn it under the wrong values)."""
    kernel, space = mm_space
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    study = optuna.create_study(study_name=study_name(kernel, "sim"), storage=storage)
    codec = _Codec(tuple(space.parameters()))
    study.enqueue_trial(codec.encode(space.params_of(space.default())))
    taken = study.ask()
    codec.suggest(taken)  # the other worker holds the default's trial, still running
    default = MeasureResult(space.default(), matmul_time(space.default()), 0.0, repeats=3)
    sim = SimulatedMeasurer(matmul_time)
    result = search_kernel(kernel, space, sim, Budget(trials=6), "random", seed=0,
                           storage=storage, device_key="sim", default_result=default,
                           finalists=0)
    assert space.default() not in sim.calls and result.default == default
    for trial in optuna.load_study(study_name=study_name(kernel, "sim"),
                                   storage=storage).get_trials(states=[TrialState.COMPLETE]):
        told = Config.from_json(trial.user_attrs["result"]["config"])
        assert space.config_from(codec.decode(trial.params)) == told


def test_the_default_neighbourhood_and_given_starts_come_first(mm_space):
    """After the default the search measures its neighbours (one knob one step away), then the
    caller's starting points, then what the sampler proposes."""
    kernel, space = mm_space
    sim = SimulatedMeasurer(matmul_time)
    near = space.neighbours(space.default())
    start = space.naive()
    assert near and start not in near
    result = search_kernel(kernel, space, sim, Budget(trials=len(near) + 6), "random",
                           seed=1, starts=[start])
    measured = [t.result.config for t in result.trials if t.measured]
    # config_from may bring an enqueued point within the caps: compare what was measured
    expected = list(dict.fromkeys(space.config_from(space.params_of(c))
                                  for c in [space.default(), *near, start]))
    assert measured[:len(expected)] == expected
