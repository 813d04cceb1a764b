"""Tuning a list of kernels: uniqueness, budget sharing, the store, Ctrl-C, bad input.

The measurements are simulated; the device (for its key and target) and the store are real.
"""
from __future__ import annotations

import io
import json
from datetime import datetime, timezone

import pytest
from rich.console import Console

from tests.search.kernels import add, matmul
from tests.test_errors import press_ctrl_c_in_a_finalizer
from tunesearch.db import Store
from tunesearch.db.leases import model_kernels
from tunesearch.errors import noticing_ctrl_c
from tunesearch.runtime.device import get_device
from tunesearch.search import (Budget, RichProgress, SimulatedMeasurer, TuneError, summary_table,
                               tune_kernels)
from tunesearch.search.tune import kernel_record
from tunesearch.space.spaces import space_for

MM, ELEMENTWISE = matmul(64, 64, 64), add(64, 64)


def cost(scale: float):
    """A made-up time per config that prefers big register blocks."""
    def time_of(config) -> float:
        blocks = config.get("upcast")
        return scale * (1.0 + 1.0 / blocks[0] + 1.0 / blocks[-1] + 0.01 * config.get("split"))
    return time_of


def simulated() -> SimulatedMeasurer:
    return SimulatedMeasurer(by_kernel={MM.key: cost(1e-3), ELEMENTWISE.key: cost(1e-6)})


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "results.db") as opened:
        yield opened


def test_each_kernel_once_and_the_budget_goes_where_the_time_is():
    sim = simulated()
    report = tune_kernels([MM, ELEMENTWISE, MM, MM], "cpu", Budget(trials=20), seed=0,
                          progress=False, measurer=sim)
    mm, elementwise = report.results
    assert (mm.name, mm.occurrences, elementwise.occurrences) == (MM.name, 3, 1)
    assert mm.status == elementwise.status == "tuned"
    assert mm.trials > elementwise.trials >= 20 // 4  # the matmul takes ~all the time
    assert mm.trials + elementwise.trials <= 40
    assert len(sim.calls) == mm.trials + elementwise.trials  # the defaults are measured once
    assert mm.speedup == pytest.approx(mm.default_time_s / mm.time_s)
    assert mm.gflops == pytest.approx(MM.flops / mm.time_s / 1e9)
    assert mm.gbps == pytest.approx(MM.bytes / mm.time_s / 1e9)
    assert report.device_key == get_device("cpu").info().key


def test_trials_keep_when_they_were_measured_and_the_model_its_kernels(store):
    start = datetime.now(timezone.utc)
    tune_kernels([MM, ELEMENTWISE, MM], "cpu", Budget(trials=8), store=store, progress=False,
                 measurer=simulated(), model="net")
    end = datetime.now(timezone.utc)
    device_key = get_device("cpu").info().key
    for kernel in (MM, ELEMENTWISE):
        trials = store.trials(kernel.key, device_key)
        when = [t.created for t in trials]
        assert len(trials) >= 2 and all(start <= w <= end for w in when)
        assert when == sorted(when) and len(set(when)) == len(when)  # one time per trial
    assert [(m.model, m.kernel_key, m.occurrences) for m in model_kernels(store)] == \
        [("net", MM.key, 2), ("net", ELEMENTWISE.key, 1)]


def test_results_are_stored_then_skipped_unless_retune(store):
    sim = simulated()
    first = tune_kernels([MM], "cpu", Budget(trials=10), store=store, progress=False,
                         measurer=sim)
    [result] = first.results
    assert result.saved
    device_key = get_device("cpu").info().key
    stored = store.lookup(MM.key, device_key)
    assert stored.config == json.loads(result.config.to_json())
    assert stored.time_s == result.time_s and stored.trials == result.trials == 10
    assert len(store.trials(MM.key, device_key)) == 10
    again = SimulatedMeasurer(cost(1e-3))
    [skipped] = tune_kernels([MM], "cpu", Budget(trials=10), store=store, progress=False,
                             measurer=again).results
    assert skipped.status == "stored" and again.calls == []
    assert skipped.config == result.config
    [retuned] = tune_kernels([MM], "cpu", Budget(trials=5), store=store, progress=False,
                             retune=True, measurer=again).results
    assert retuned.status == "tuned" and len(again.calls) == 5


def test_ctrl_c_keeps_the_best_so_far_and_stops(store):
    calls = []

    def interrupted_on_the_eighth(config):
        calls.append(config)
        if len(calls) == 8:
            raise KeyboardInterrupt
        return cost(1e-3)(config)

    seen = []
    sim = SimulatedMeasurer(by_kernel={MM.key: interrupted_on_the_eighth,
                                       ELEMENTWISE.key: cost(1e-6)})
    report = tune_kernels([MM, ELEMENTWISE], "cpu", Budget(trials=30), store=store,
                          progress=False, measurer=sim, on_result=seen.append)
    assert report.interrupted
    mm, elementwise = report.results
    assert mm.status == "interrupted" and mm.trials == 7 and mm.saved  # the 8th never answered
    assert elementwise.status == "skipped"
    assert [r.name for r in seen] == [MM.name]
    assert store.lookup(MM.key, get_device("cpu").info().key).time_s == mm.time_s


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drop itself
def test_a_dropped_ctrl_c_stops_the_run_after_the_batch_and_keeps_it(store):
    # Ctrl-C while a finalizer runs: its KeyboardInterrupt never reaches the search, which
    # still stops at the next batch and saves what it found (errors.ctrl_c_pressed)
    calls = []

    def pressed_on_the_eighth(config):
        calls.append(config)
        if len(calls) == 8:
            press_ctrl_c_in_a_finalizer()
        return cost(1e-3)(config)

    sim = SimulatedMeasurer(by_kernel={MM.key: pressed_on_the_eighth,
                                       ELEMENTWISE.key: cost(1e-6)})
    with noticing_ctrl_c():
        report = tune_kernels([MM, ELEMENTWISE], "cpu", Budget(trials=30), store=store,
                              progress=False, measurer=sim)
    assert report.interrupted
    mm, elementwise = report.results
    assert mm.status == "interrupted" and 8 <= mm.trials < 30 and mm.saved
    assert elementwise.status == "skipped"
    assert store.lookup(MM.key, get_device("cpu").info().key).time_s == mm.time_s


def test_zero_budget_measures_nothing():
    sim = simulated()
    for budget in (Budget(trials=0), Budget(trials=10, seconds=0)):
        with pytest.raises(TuneError, match="budget is zero"):
            tune_kernels([MM], "cpu", budget, progress=False, measurer=sim)
    assert sim.calls == []


def test_unavailable_device_and_unknown_sampler_are_clear_errors():
    with pytest.raises(TuneError, match="cannot tune on device 'nosuch'.*known devices"):
        tune_kernels([MM], "nosuch", progress=False, measurer=simulated())
    with pytest.raises(TuneError, match="unknown sampler 'annealing'"):
        tune_kernels([MM], "cpu", sampler="annealing", progress=False, measurer=simulated())


def test_a_space_with_one_config_is_measured_not_searched(faulty_device):
    kernel = add(1)  # the device has one thread: a single element has one config
    assert len(list(space_for(kernel, get_device(faulty_device).info().target).enumerate())) == 1
    sim = SimulatedMeasurer(lambda config: 1e-6)
    [result] = tune_kernels([kernel], faulty_device, Budget(trials=50), progress=False,
                            measurer=sim).results
    assert result.status == "single" and result.trials == 1 and len(sim.calls) == 1
    assert result.time_s == 1e-6


def test_progress_display_and_json_summary():
    out = io.StringIO()
    view = RichProgress(Console(file=out, width=120, force_terminal=False))
    report = tune_kernels([MM, ELEMENTWISE], "cpu", Budget(trials=6), progress=view,
                          measurer=simulated())
    text = out.getvalue()
    assert MM.name in text and ELEMENTWISE.name in text and "over default" in text
    summary = json.loads(report.to_json())
    assert [k["name"] for k in summary["kernels"]] == [MM.name, ELEMENTWISE.name]
    assert summary["kernels"][0]["config"] == report.results[0].config.as_dict()
    table = io.StringIO()
    Console(file=table, width=160).print(summary_table(report))
    assert MM.name in table.getvalue()


def test_a_kernel_starts_from_the_winner_of_its_kind_in_another_shape(store):
    """The winner of a matmul of one shape, made to fit, is among the first configs measured
    for a matmul of another shape, right after the default and its neighbours."""
    first, second = matmul(48, 64, 96), matmul(40, 64, 88)
    sim = SimulatedMeasurer(by_kernel={first.key: cost(1e-3), second.key: cost(1e-3)})
    [done] = tune_kernels([first], "cpu", Budget(trials=12), seed=0, progress=False,
                          measurer=sim, store=store).results
    info = get_device("cpu").info()
    assert _other_shapes(store, second, info) == ["48x96x64"]
    space = space_for(second, info.target)
    adapted = space.adapt(done.config)
    assert adapted is not None and space.validate(adapted) is None
    sim.calls.clear()
    tune_kernels([second], "cpu", Budget(trials=30), seed=0, progress=False, measurer=sim,
                 store=store)
    early = 2 + len(space.neighbours(space.default()))  # default, neighbours, then the start
    assert adapted in sim.calls[:early] or adapted == space.default() or \
        adapted in space.neighbours(space.default())
    # a kernel of another structure finds nothing
    assert _other_shapes(store, ELEMENTWISE, info) == []


def _other_shapes(store, kernel, info) -> list[str]:
    """The shapes of the kernels of kernel's structure the store holds winners of on this
    device, nearest first."""
    return [shapes for device, key, shapes, _ in store.on_backend(kernel_record(kernel),
                                                                  info.backend)
            if device.key == info.key and key != kernel.key]
