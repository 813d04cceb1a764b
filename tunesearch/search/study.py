"""Searching one kernel's space with an Optuna study, through ask/tell.

    result = search_kernel(kernel, space, measurer, Budget(trials=50), sampler="tpe", seed=0)
    result.best.config, result.best.time_s, result.default.time_s

The study is named f"{kernel.key}@{device_key}" and lives in `storage` (an Optuna storage URL;
None keeps it in memory), so a study in a shared database resumes where it stopped. The space is
sampled define-by-run: a parameter is asked for only when its condition holds. The space's default
is trial 0. A config seen before (in this study, or one that differs only in inactive knobs) is
answered from the history; an invalid one is failed without being measured. The finalists are
re-timed with more repeats before the winner is chosen.
"""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from tunesearch.db import MAX_TIME_S
from tunesearch.db.studies import OWNER_ATTR, trial_owner
from tunesearch.errors import ctrl_c_pressed
from tunesearch.graph.kernel import Kernel
from tunesearch.search.measure import Measurer
from tunesearch.search.resume import TrialHeartbeats, open_study, rdb_storage
from tunesearch.search.results import ERROR_KINDS, Budget, MeasureResult, SearchResult, Trial
from tunesearch.search.samplers import DEFAULT_SAMPLER, make_sampler
from tunesearch.space.config import Config, ConfigError
from tunesearch.space.spaces import Param, Space

optuna.logging.set_verbosity(optuna.logging.WARNING)

RESULT_ATTR = "result"  # the user attribute in which a trial keeps its MeasureResult
STALL_LIMIT = 100   # asks in a row without a new config: the sampler has nothing new to offer
FINALISTS = 3


def study_name(kernel: Kernel, device_key: str) -> str:
    return f"{kernel.key}@{device_key}"


@dataclass(frozen=True)
class _Codec:
    """How the space's parameters appear to Optuna. A parameter with integer choices is the index
    into them, so neighbouring block sizes are near; others are categorical. Each one's Optuna
    name carries a digest of its choices: a study resumed after the space changed (a choice
    added, say) gets parameters of new names instead of Optuna refusing a changed distribution,
    and its history still answers configs seen before."""
    params: tuple[Param, ...]

    @staticmethod
    def _as_index(param: Param) -> bool:
        return all(isinstance(c, int) for c in param.choices)

    @staticmethod
    def name(param: Param) -> str:
        kind = "index" if _Codec._as_index(param) else "choice"
        digest = hashlib.sha1(repr((kind, param.choices)).encode()).hexdigest()[:6]
        return f"{param.name}#{digest}"

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for p in self.params:
            if p.when is not None and values.get(p.when[0]) not in p.when[1]:
                continue
            if self._as_index(p):
                values[p.name] = p.choices[trial.suggest_int(self.name(p), 0, len(p.choices) - 1)]
            else:
                values[p.name] = trial.suggest_categorical(self.name(p), p.choices)
        return values

    def decode(self, params: dict[str, Any]) -> dict[str, Any]:
        """The space's values of a trial's Optuna params (the inverse of encode)."""
        out = {}
        for p in self.params:
            if self.name(p) in params:
                value = params[self.name(p)]
                out[p.name] = p.choices[value] if self._as_index(p) else value
        return out

    def encode_if_sampled(self, values: dict[str, Any]) -> dict[str, Any] | None:
        """encode(values), or None where a value is not among its parameter's choices (a
        config the sampler could not have produced)."""
        by_name = {p.name: p for p in self.params}
        if any(name in by_name and v not in by_name[name].choices for name, v in values.items()):
            return None
        return self.encode(values)

    def encode(self, values: dict[str, Any]) -> dict[str, Any]:
        by_name = {p.name: p for p in self.params}
        return {self.name(by_name[name]): by_name[name].choices.index(v)
                if self._as_index(by_name[name]) else v
                for name, v in values.items() if name in by_name}


def _ask(study: optuna.Study, beats: TrialHeartbeats) -> optuna.Trial:
    """A new trial, kept alive by beats' heartbeat and marked with the process that asked it:
    a worker that takes over a dead worker's lease of a shared study closes that worker's open
    trials and no one else's."""
    trial = beats.ask(study)
    trial.set_user_attr(OWNER_ATTR, trial_owner())
    return trial


def _tell(study: optuna.Study, trial: optuna.Trial, result: MeasureResult, measured: bool,
          penalty: float) -> None:
    """Answer a trial. A failed config is told as a completed trial that breaks the constraint
    (with a penalty value for samplers that know no constraints), so samplers learn to stay
    away from where configs fail instead of ignoring those trials."""
    # one attribute, not seven: each is a write of its own in a database storage
    try:
        trial.set_user_attr(RESULT_ATTR, {
            "config": result.config.to_json(), "error": result.error,
            "message": result.message[:2000], "max_error": result.max_error,
            "spread": result.spread, "repeats": result.repeats, "measured": measured})
        trial.set_constraint("failed", 0.0 if result.ok else 1.0)
        study.tell(trial, result.time_s if result.ok else penalty)
    except UpdateFinishedTrialError:
        # failed meanwhile by another process, which took this one for dead (its heartbeat
        # stopped, as when it was suspended): the measurement still counts in this search
        pass


def _from_history(frozen: optuna.trial.FrozenTrial) -> MeasureResult | None:
    """The measurement a finished trial of a resumed study recorded."""
    attrs = frozen.user_attrs.get(RESULT_ATTR)
    if not isinstance(attrs, dict) or "config" not in attrs or frozen.state != TrialState.COMPLETE:
        return None
    try:
        config = Config.from_json(attrs["config"])
    except ConfigError:
        return None
    if attrs.get("error") in ERROR_KINDS:
        return MeasureResult.failed(config, attrs["error"], attrs.get("message") or "",
                                    attrs.get("max_error"))
    if frozen.value is None or not math.isfinite(frozen.value) or not \
            0 < frozen.value <= MAX_TIME_S:  # a row is data: a tampered time is no measurement
        return None
    return MeasureResult(config, frozen.value, attrs.get("spread") or 0.0,
                         max_error=attrs.get("max_error"), repeats=attrs.get("repeats") or 0)


def _grid_bound(params: list[Param]) -> int:
    """An upper bound on the grid size that costs nothing to compute."""
    return math.prod(len(p.choices) for p in params)


class _Search:
    """The state of one search: history, best so far, stopping rules."""

    def __init__(self, budget: Budget, clock: Callable[[], float]):
        self.budget, self.clock, self.start = budget, clock, clock()
        self.history: dict[Config, MeasureResult] = {}
        self.trials: list[Trial] = []
        self.measured = 0
        self.best: MeasureResult | None = None
        self.since_improvement = 0
        self.since_new = 0

    def record(self, number: int, result: MeasureResult, measured: bool) -> None:
        self.trials.append(Trial(number, result, measured, datetime.now(timezone.utc)))
        if result.error != "invalid":
            self.history.setdefault(result.config, result)
        if not measured:
            self.since_new += 1
            return
        self.measured += 1
        self.since_new = 0
        if result.ok and (self.best is None or result.time_s < self.best.time_s):
            improved = self.best is None or \
                result.time_s < self.best.time_s * (1 - self.budget.min_improvement)
            self.best = result
            if improved:
                self.since_improvement = 0
                return
        self.since_improvement += 1

    def known(self, result: MeasureResult) -> None:
        """A measurement made outside this search (an earlier run of the study, the caller's
        own of the default): it answers its config and may be the best so far."""
        if self.history.setdefault(result.config, result) is not result:
            return  # that config is answered already
        if result.ok and (self.best is None or result.time_s < self.best.time_s):
            self.best = result

    def penalty(self) -> float:
        """The value a failed config is told: twice the slowest time that ran correctly."""
        times = [r.time_s for r in self.history.values() if r.ok]
        return 2.0 * max(times) if times else 1.0

    def stop_reason(self, sampler) -> str | None:
        if ctrl_c_pressed():  # its KeyboardInterrupt may have been dropped (see errors.py)
            return "interrupted"
        b = self.budget
        if b.trials is not None and self.measured >= b.trials:
            return "trials"
        if b.seconds is not None and self.clock() - self.start >= b.seconds:
            return "seconds"
        if b.patience is not None and self.best is not None and \
                self.since_improvement >= b.patience:
            return "patience"
        if b.target_s is not None and self.best is not None and self.best.time_s <= b.target_s:
            return "target"
        if getattr(sampler, "exhausted", False):
            return "exhausted"
        if self.since_new >= STALL_LIMIT:
            return "stalled"
        return None


def search_kernel(kernel: Kernel, space: Space, measurer: Measurer, budget: Budget = Budget(),
                  sampler: str = DEFAULT_SAMPLER, seed: int = 0, *, storage: str | None = None,
                  device_key: str = "unknown", default_result: MeasureResult | None = None,
                  on_trial: Callable[[Trial, MeasureResult | None, int], None] | None = None,
                  finalists: int = FINALISTS, clock: Callable[[], float] = time.monotonic,
                  starts: Sequence[Config] = (), first: Sequence[Config] = ()) -> SearchResult:
    """Search the space of kernel for its fastest config (see the module docstring).

    default_result, when the caller has measured the default already, answers trial 0.
    first are configs to try right after the default, before its neighbours (this kernel's
    winners on other devices), starts are configs to try after the neighbours (winners of
    kernels of the same structure, say); invalid ones are skipped.
    on_trial(trial, best so far, configs measured) is called after every trial. Ctrl-C ends
    the search early with stopped_by="interrupted" and the best so far.
    """
    params = space.parameters()
    default = space.default()
    notes: list[str] = []
    if budget.trials is not None and sampler != "grid" and _grid_bound(params) <= budget.trials:
        notes.append(f"the space has at most {_grid_bound(params)} configs, no more than the "
                     f"trial budget: sweeping it")
        sampler = "grid"
    built = make_sampler(sampler, seed, budget.trials)
    notes += built.notes
    codec = _Codec(tuple(params))
    storage = rdb_storage(storage)
    # trials of dead processes are failed; rows Optuna cannot read back leave the study in memory
    study, history, kept = open_study(study_name(kernel, device_key), storage, built.sampler)
    state = _Search(budget, clock)
    beats = TrialHeartbeats(kept)
    for frozen in history:  # a resumed study: its trials count
        known = _from_history(frozen)
        # the storage is data like the results: a config that does not fit is never built
        if known is not None and space.validate(known.config) is None:
            state.known(known)
    if default not in state.history:
        study.enqueue_trial(codec.encode(space.params_of(default)), skip_if_exists=True)
        # then the caller's first picks (this kernel's winners on other devices), the default's
        # neighbourhood and the caller's other starting points (winners of kernels like this
        # one), before the sampler looks wider
        for start in [*first, *space.neighbours(default), *starts]:
            params = codec.encode_if_sampled(space.params_of(start))
            if start not in state.history and params and space.validate(start) is None:
                study.enqueue_trial(params, skip_if_exists=True)
        if default_result is not None:  # measured by the caller: it answers trial 0 at once
            trial = _ask(study, beats)
            if space.config_from(codec.suggest(trial)) == default:
                _tell(study, trial, default_result, True, state.penalty())
                state.record(trial.number, default_result, True)
            else:
                # another process sharing the study took the enqueued default first: this trial
                # has sampled values, and telling it the default's time would teach the sampler
                # a lie. It is closed unanswered; the default's time still counts here
                study.tell(trial, state=TrialState.FAIL)
                state.known(default_result)
            beats.discard(trial)
    stopped_by, pending = None, []
    beats.start()
    try:
        while (stopped_by := state.stop_reason(built.sampler)) is None:
            _one_batch(study, codec, space, kernel, measurer, state, on_trial, pending, beats)
    except KeyboardInterrupt:
        stopped_by = "interrupted"
    finally:
        # asked but never answered: close them so no trial stays RUNNING (one told just before
        # a Ctrl-C, but not yet taken off the list, is finished already and stays as it is)
        for trial in pending:
            study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
        beats.stop()
    best = state.best
    default_ok = state.history.get(default)
    default_ok = default_ok if default_ok is not None and default_ok.ok else None
    if stopped_by != "interrupted" and best is not None:
        try:
            best, default_ok = _final(kernel, measurer, state, default_ok, finalists)
        except KeyboardInterrupt:
            stopped_by = "interrupted"
    return SearchResult(best, default_ok, tuple(state.trials), state.measured, stopped_by,
                        built.name, clock() - state.start, tuple(notes))


def _one_batch(study, codec, space, kernel, measurer, state: _Search, on_trial,
               pending: list, beats: TrialHeartbeats) -> None:
    """Ask until the batch holds batch_size new configs (or the sampler only repeats itself),
    measure the new ones together, tell every trial. `pending` holds the trials asked and not
    yet told, so an interrupted batch can close them."""
    room = measurer.batch_size
    if state.budget.trials is not None:
        room = max(1, min(room, state.budget.trials - state.measured))
    asked: list[tuple[optuna.Trial, Config, str | None]] = []
    new: list[Config] = []
    while len(new) < room and state.since_new + len(asked) - len(new) < STALL_LIMIT:
        trial = _ask(study, beats)
        pending.append(trial)
        config = space.config_from(codec.suggest(trial))
        seen = config in state.history or config in new
        reason = None if seen else space.validate(config)
        asked.append((trial, config, reason))
        if not seen and reason is None:
            new.append(config)
        if getattr(study.sampler, "exhausted", False):
            break
    results = dict(zip(new, measurer.measure(kernel, new))) if new else {}
    for trial, config, reason in asked:
        if config in results:
            result, measured = results.pop(config), True
        elif config in state.history:
            result, measured = state.history[config], False
        else:
            result, measured = MeasureResult.failed(config, "invalid", reason or "invalid"), False
        _tell(study, trial, result, measured, state.penalty())
        pending.remove(trial)
        beats.discard(trial)
        state.record(trial.number, result, measured)
        if on_trial is not None:
            on_trial(state.trials[-1], state.best, state.measured)


def _final(kernel, measurer: Measurer, state: _Search, default: MeasureResult | None,
           count: int) -> tuple[MeasureResult | None, MeasureResult | None]:
    """Re-time the top `count` configs (and the default, so the speed-up compares like with
    like); the fastest that still verifies wins."""
    if count <= 0:
        return state.best, default
    ranked = sorted((r for r in state.history.values() if r.ok), key=lambda r: r.time_s)
    chosen = [r.config for r in ranked[:count]]
    if default is not None and default.config not in chosen:
        chosen.append(default.config)
    retimed = {r.config: r for r in measurer.retime(kernel, chosen)}
    ok = [r for r in retimed.values() if r.ok]
    best = min(ok, key=lambda r: r.time_s) if ok else None
    if default is not None and retimed[default.config].ok:
        default = retimed[default.config]
    return best, default
