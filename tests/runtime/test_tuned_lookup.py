"""The runtime uses a stored config for its device key, and falls back safely on anything else."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tunesearch import Tensor
from tunesearch.db import DeviceRecord, KernelRecord, ResultRecord, Store
from tunesearch.graph.schedule import create_schedule
from tunesearch.runtime.device import get_device
from tunesearch.runtime.lookup import TunedConfigs
from tunesearch.space.config import SPACE_VERSION, Config

A = np.random.default_rng(0).standard_normal((48, 40)).astype(np.float32)
B = np.random.default_rng(1).standard_normal((40, 24)).astype(np.float32)


def matmul() -> Tensor:
    return Tensor(A) @ Tensor(B)


def save(store: Store, kernel, device, config: dict) -> None:
    info = device.info()
    store.record(KernelRecord(kernel.key, kernel.name, kernel.canonical(), kernel.ops_summary(),
                              str(kernel.domain), SPACE_VERSION),
                 DeviceRecord(info.key, info.backend, info.name, info.as_dict()),
                 ResultRecord(config=config, time_s=1e-6, spread=0.01, gflops=1.0, gbps=1.0,
                              default_time_s=2e-6, speedup=2.0, trials=1, sampler="test"))


@pytest.fixture
def db(tmp_path):
    with Store(f"sqlite:///{tmp_path / 'results.db'}") as store:
        yield store


TUNED = {"knobs": {"order": [1, 0], "pack": [], "parallel": 0, "split": 1, "threads": 1,
                   "unroll": 2, "upcast": [4, 8]}}


def test_stored_config_is_used(db):
    kernel = create_schedule([matmul().node])[0].kernel
    device = get_device("cpu")
    save(db, kernel, device, TUNED)
    lookup = TunedConfigs.open(db.url)
    choice = lookup.choose(kernel, device)
    assert choice.tuned and choice.config == Config.from_json(TUNED)
    np.testing.assert_allclose(matmul().numpy(lookup=lookup), A @ B, rtol=1e-4, atol=1e-4)
    # the lookup the command line's `run` makes reads the same record, read-only
    assert TunedConfigs.for_run(db.url).choose(kernel, device) == choice
    assert not TunedConfigs.defaults().choose(kernel, device).tuned


def test_record_for_another_device_is_not_applied(db):
    kernel = create_schedule([matmul().node])[0].kernel
    other = get_device("reference")
    save(db, kernel, other, TUNED)
    choice = TunedConfigs.open(db.url).choose(kernel, get_device("cpu"))
    assert not choice.tuned


@pytest.mark.parametrize("knobs", [
    {**TUNED["knobs"], "upcast": [4000, 8]},            # out of range
    {**TUNED["knobs"], "unroll": "4"},                  # wrong type
    {**TUNED["knobs"], "evil": 1},                      # unknown knob
    {**TUNED["knobs"], "threads": 10**18},              # huge
    {**TUNED["knobs"], "pack": ["'; DROP TABLE results; --"]},  # SQL-looking string
    {"order": [0, 1]},                                  # missing knobs
])
def test_tampered_config_falls_back_to_default(db, knobs):
    kernel = create_schedule([matmul().node])[0].kernel
    device = get_device("cpu")
    save(db, kernel, device, {"knobs": knobs})
    lookup = TunedConfigs.open(db.url)
    with pytest.warns(UserWarning, match="ignoring the stored config"):
        choice = lookup.choose(kernel, device)
    assert not choice.tuned
    np.testing.assert_allclose(matmul().numpy(lookup=lookup), A @ B, rtol=1e-4, atol=1e-4)
    assert Store(db.url).lookup(kernel.key, device.info().key) is not None  # nothing dropped


def test_unreachable_database_never_fails_a_run(tmp_path):
    env = dict(os.environ, TUNESEARCH_DB="postgresql://nobody@127.0.0.1:1/none", DEBUG="2")
    script = ("import numpy as np; from tunesearch import Tensor; "
              "print((Tensor(np.ones((4, 4), np.float32)) @ Tensor(np.ones((4, 4), "
              "np.float32))).numpy().sum())")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "64.0"
    assert "default" in proc.stderr


def test_debug3_shows_tuned_config(db, tmp_path):
    kernel = create_schedule([matmul().node])[0].kernel
    save(db, kernel, get_device("cpu"), TUNED)
    script = ("import numpy as np; from tunesearch import Tensor; "
              "a = np.random.default_rng(0).standard_normal((48, 40)).astype(np.float32); "
              "b = np.random.default_rng(1).standard_normal((40, 24)).astype(np.float32); "
              "(Tensor(a) @ Tensor(b)).numpy()")
    env = dict(os.environ, TUNESEARCH_DB=db.url, DEBUG="3")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "tuned" in proc.stderr and "upcast=4,8" in proc.stderr, proc.stderr


def test_a_miss_is_tuned_by_the_lookup_s_policy_only(db, monkeypatch):
    kernel = create_schedule([matmul().node])[0].kernel
    device = get_device("cpu")
    calls = []

    def policy(kernel, device, trials):  # stands in for a search: stores TUNED
        calls.append(trials)
        save(db, kernel, device, TUNED)

    monkeypatch.setenv("TUNESEARCH_TUNE", "0")
    assert not TunedConfigs.open(db.url, on_miss=policy).choose(kernel, device).tuned
    assert calls == []  # TUNESEARCH_TUNE unset or 0: a miss stays a miss
    monkeypatch.setenv("TUNESEARCH_TUNE", "3")
    assert not TunedConfigs.open(db.url).choose(kernel, device).tuned  # no policy, no tuning
    lookup = TunedConfigs.open(db.url, on_miss=policy)
    choice = lookup.choose(kernel, device)
    assert calls == [3] and choice.tuned and choice.config == Config.from_json(TUNED)
    assert lookup.choose(kernel, device) is choice and calls == [3]  # answered from memory


def test_tune_on_miss_stores_and_uses_a_config(tmp_path):
    db = f"sqlite:///{tmp_path / 'miss.db'}"
    script = ("import numpy as np; from tunesearch import Tensor; "
              "a = np.ones((24, 20), np.float32); b = np.ones((20, 12), np.float32); "
              "print((Tensor(a) @ Tensor(b)).numpy().sum())")
    env = dict(os.environ, TUNESEARCH_DB=db, TUNESEARCH_TUNE="3", DEBUG="2")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == str(24.0 * 12 * 20)
    assert "tuned" in proc.stderr
    assert Store(db).stats()["results"] >= 1
