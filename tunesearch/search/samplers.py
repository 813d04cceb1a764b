"""Optuna samplers by name. Adding one is a function decorated with @sampler, nothing else.

    built = make_sampler("tpe", seed=0, n_trials=100)
    built.sampler, built.name, built.notes   # the optuna sampler, what really runs, fallbacks said

A factory gets the seed and the trial budget and returns the sampler, plus notes when it had to
fall back (a missing optional dependency, parameters the method cannot model). Every sampler
sees a parameter with integer choices as an integer index, so the order of the choices (block
sizes 1 < 2 < 4 ...) means something to it (see study._Codec).
"""
from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass
from typing import Callable

import optuna

DEFAULT_SAMPLER = "tpe"


@dataclass(frozen=True)
class BuiltSampler:
    name: str                   # the method that really runs (after any fallback)
    sampler: optuna.samplers.BaseSampler
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SamplerSpec:
    name: str
    summary: str
    make: Callable[[int, int | None], BuiltSampler]


SAMPLERS: dict[str, SamplerSpec] = {}


def sampler(name: str, summary: str):
    """Register a sampler factory `make(seed, n_trials) -> BuiltSampler` under name."""
    def wrap(make):
        SAMPLERS[name] = SamplerSpec(name, summary, make)
        return make
    return wrap


def sampler_names() -> list[str]:
    return list(SAMPLERS)


def make_sampler(name: str, seed: int, n_trials: int | None = None) -> BuiltSampler:
    """The sampler registered under name; ValueError naming the known ones otherwise."""
    if name not in SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}; known samplers: {', '.join(SAMPLERS)}")
    with warnings.catch_warnings():  # optuna marks some samplers experimental; that is known
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return SAMPLERS[name].make(seed, n_trials)


def _missing(*modules: str) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def _tpe(seed: int, n_trials: int | None) -> optuna.samplers.TPESampler:
    # a short random start, then multivariate TPE that groups the conditional parameters;
    # constant_liar keeps a batch of asks from piling onto one point
    startup = 6 if n_trials is None else max(4, min(6, n_trials // 5))
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True,
                                      group=True, constant_liar=True)


@sampler("tpe", "tree-structured Parzen estimator (the default): good at conditional spaces")
def make_tpe(seed: int, n_trials: int | None) -> BuiltSampler:
    return BuiltSampler("tpe", _tpe(seed, n_trials))


@sampler("random", "uniform random configs: the baseline every other sampler must beat")
def make_random(seed: int, n_trials: int | None) -> BuiltSampler:
    return BuiltSampler("random", optuna.samplers.RandomSampler(seed=seed))


class ExhaustiveSampler(optuna.samplers.BruteForceSampler):
    """BruteForceSampler for ask/tell: it asks the study to stop when every point was tried,
    which Optuna only allows inside optimize(); here that becomes the `exhausted` flag."""

    exhausted = False

    def after_trial(self, study, trial, state, values) -> None:
        try:
            super().after_trial(study, trial, state, values)
        except RuntimeError as exc:
            if "Study.stop" not in str(exc):
                raise
            self.exhausted = True


@sampler("grid", "every config once, in a seeded order: for spaces small enough to sweep")
def make_grid(seed: int, n_trials: int | None) -> BuiltSampler:
    return BuiltSampler("grid", ExhaustiveSampler(seed=seed))


@sampler("gp", "Gaussian-process Bayesian optimization (needs torch and scipy)")
def make_gp(seed: int, n_trials: int | None) -> BuiltSampler:
    missing = _missing("torch", "scipy")
    if missing:
        return BuiltSampler("tpe", _tpe(seed, n_trials), notes=(
            f"gp needs {' and '.join(missing)} (pip install {' '.join(missing)}); using tpe",))
    startup = 10 if n_trials is None else max(4, min(10, n_trials // 5))
    return BuiltSampler("gp", optuna.samplers.GPSampler(
        seed=seed, n_startup_trials=startup))


@sampler("nsga2", "a genetic algorithm (NSGA-II) with a population sized to the budget")
def make_nsga2(seed: int, n_trials: int | None) -> BuiltSampler:
    population = 50 if n_trials is None else max(8, min(50, n_trials // 5))
    return BuiltSampler("nsga2", optuna.samplers.NSGAIISampler(
        seed=seed, population_size=population))


@sampler("cmaes", "CMA-ES over the numeric knobs (needs the cmaes package)")
def make_cmaes(seed: int, n_trials: int | None) -> BuiltSampler:
    missing = _missing("cmaes")
    if missing:
        return BuiltSampler("tpe", _tpe(seed, n_trials), notes=(
            "cmaes needs the cmaes package (pip install cmaes); using tpe",))
    # CMA-ES models numbers only: choice indices of the numeric knobs are its search space;
    # string-valued knobs (loop order, packing) and conditional ones go to TPE. It knows no
    # constraints: failed configs reach it through their penalty value
    return BuiltSampler("cmaes", optuna.samplers.CmaEsSampler(
        seed=seed, n_startup_trials=0, independent_sampler=_tpe(seed, n_trials), with_margin=True,
        warn_independent_sampling=False), notes=(
        "cmaes samples the numeric knobs; categorical and conditional knobs are sampled by tpe",))
