"""Only verified configs are trusted: what the studies and the results storage hand back is
validated before anything is built from it, and an imported winner is measured again here."""
from __future__ import annotations

import json
import sqlite3

import optuna
import pytest

from tests.search.kernels import add
from tunesearch.db import DeviceRecord, KernelRecord, ResultRecord, Store
from tunesearch.runtime.device import get_device
from tunesearch.search import Budget, SimulatedMeasurer, search_kernel, study_name, tune_kernels
from tunesearch.search.study import RESULT_ATTR, _Codec
from tunesearch.space.config import SPACE_VERSION
from tunesearch.space.spaces import space_for


@pytest.fixture(scope="module")
def job():
    """A small kernel, its space on this CPU and a made-up time per config (the default is
    neither the fastest nor the slowest)."""
    kernel = add(8, 8)
    info = get_device("cpu").info()
    space = space_for(kernel, info.target)
    configs = list(space.enumerate())
    assert len(configs) >= 8
    times = {c: 1e-3 * (1.0 + i / len(configs)) for i, c in enumerate(configs)}
    return kernel, space, times, info


def _forge(study: optuna.Study, space, codec: _Codec, config_json: str, value: float) -> None:
    """A completed trial that says `config_json` ran in `value` seconds."""
    params = codec.encode(space.params_of(space.default()))
    distributions = study.trials[0].distributions
    study.add_trial(optuna.trial.create_trial(
        params=params, distributions={name: distributions[name] for name in params},
        value=value, user_attrs={RESULT_ATTR: {"config": config_json, "error": None,
                                               "message": "", "max_error": 0.0, "spread": 0.0,
                                               "repeats": 3, "measured": True}},
        system_attrs={"constraints": [0.0]}))


def test_configs_from_a_tampered_study_are_never_built_nor_win(job, tmp_path):
    kernel, space, times, _ = job
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    search_kernel(kernel, space, SimulatedMeasurer(times), Budget(trials=3), "random", seed=0,
                  storage=storage, device_key="sim", finalists=0)
    study = optuna.load_study(study_name=study_name(kernel, "sim"), storage=storage)
    codec = _Codec(tuple(space.parameters()))
    invalid = space.default().replace(upcast=[4000, 8])
    assert space.validate(invalid) is not None
    _forge(study, space, codec, invalid.to_json(), 1e-9)   # does not fit the space
    slowest = max(times, key=times.get)
    _forge(study, space, codec, slowest.to_json(), 0.0)    # a time no measurement gives
    sim = SimulatedMeasurer(times)
    result = search_kernel(kernel, space, sim, Budget(trials=3), "random", seed=1,
                           storage=storage, device_key="sim", finalists=3)
    built = sim.calls + sim.retimes
    assert invalid not in built and all(space.validate(c) is None for c in built)
    assert result.best.config != invalid and result.best.time_s == times[result.best.config]
    assert result.best.config != slowest


def _records(kernel, info, config, time_s: float, **changes):
    return (KernelRecord(kernel.key, kernel.name, kernel.canonical(), kernel.ops_summary(),
                         "x".join(map(str, kernel.domain)), SPACE_VERSION),
            DeviceRecord(info.key, info.backend, info.name, info.as_dict()),
            ResultRecord(config=json.loads(config.to_json()), time_s=time_s, spread=0.0,
                         gflops=1.0, gbps=1.0, default_time_s=2e-3, speedup=1.0, trials=1,
                         sampler="tpe", **changes))


def _import(path, tmp_path, kernel, info, config, time_s: float) -> None:
    """The result as another machine of the same device key would send it."""
    with Store(tmp_path / "elsewhere.db") as other:
        other.record(*_records(kernel, info, config, time_s, host="elsewhere"))
        other.export(tmp_path / "elsewhere.json")
    with Store(path) as store:
        store.import_(tmp_path / "elsewhere.json")


def _tune(path, kernel, times, trials: int = 4):
    sim = SimulatedMeasurer(times)
    with Store(path) as store:
        [result] = tune_kernels([kernel], "cpu", Budget(trials=trials), store=store,
                                progress=False, measurer=sim).results
        stored = store.lookup(kernel.key, get_device("cpu").info().key)
    return result, stored, sim


def test_an_imported_winner_is_measured_again_and_kept_when_it_wins(job, tmp_path):
    kernel, space, times, info = job
    fastest = min(times, key=times.get)
    path = tmp_path / "results.db"
    # it claims an impossible time; measured here it is the fastest config of all
    _import(path, tmp_path, kernel, info, fastest, 1e-9)
    result, stored, sim = _tune(path, kernel, times, trials=2)
    assert result.status == "tuned" and fastest in sim.retimes
    assert (stored.config, stored.time_s, stored.verified) == (
        json.loads(fastest.to_json()), times[fastest], True)
    again, _, sim = _tune(path, kernel, times)
    assert again.status == "stored" and sim.calls == []  # verified now: trusted


def test_an_imported_winner_is_replaced_when_the_search_beats_it(job, tmp_path):
    kernel, space, times, info = job
    slowest = max(times, key=times.get)
    path = tmp_path / "results.db"
    _import(path, tmp_path, kernel, info, slowest, 1e-9)
    result, stored, sim = _tune(path, kernel, times)
    assert slowest in sim.retimes  # measured here, once more
    assert stored.verified and stored.time_s == result.time_s < times[slowest]
    assert stored.config != json.loads(slowest.to_json())


@pytest.mark.parametrize("tamper", ["deep", "invalid", "zero"])
def test_a_tampered_stored_winner_does_not_pin_its_kernel(job, tmp_path, tamper):
    kernel, space, times, info = job
    path = tmp_path / "results.db"
    with Store(path) as store:
        store.record(*_records(kernel, info, space.default(), 1e-9))
    config = {"deep": '{"knobs": ' + "[" * 50000 + "]" * 50000 + "}",
              "invalid": space.default().replace(upcast=[4000, 8]).to_json(),
              "zero": space.default().to_json()}[tamper]
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE results SET config = ?, time_s = ?",
                           (config, 0.0 if tamper == "zero" else 1e-9))
    connection.close()
    result, stored, sim = _tune(path, kernel, times)
    assert result.status == "tuned" and sim.calls  # searched again
    assert stored is not None and stored.time_s == result.time_s == times[result.config]
    assert space.validate(result.config) is None
