"""A search on a device starts from the winners the database holds for its kernel on the nearest
other devices of its backend: measured right after the default, made to fit, never trusted.

The measurements are simulated; the device (for its key, fingerprint and target) and the SQLite
store are real.
"""
from __future__ import annotations

import json

import pytest

from tests.search.kernels import matmul
from tunesearch.db import DeviceRecord, ResultRecord, Store
from tunesearch.runtime.device import get_device
from tunesearch.search import Budget, SimulatedMeasurer, tune_kernels
from tunesearch.search.progress import describe
from tunesearch.search.saving import device_record
from tunesearch.search.starts import device_distance, find_starts
from tunesearch.search.tune import kernel_record
from tunesearch.space.spaces import space_for

MM = matmul(64, 64, 64)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "results.db") as opened:
        yield opened


@pytest.fixture(scope="module")
def here():
    info = get_device("cpu").info()
    return info, space_for(MM, info.target)


def _time(config) -> float:
    """A made-up time per config that prefers big register blocks."""
    blocks = config.get("upcast")
    return 1e-3 * (1.0 + 1.0 / blocks[0] + 1.0 / blocks[-1] + 0.01 * config.get("split", 1))


def _far_configs(space, count: int) -> list:
    """Valid configs of the space that are neither its default nor one of its neighbours (a
    search would not measure them early by itself), each one the space keeps as it is."""
    early = {space.default(), *space.neighbours(space.default())}
    out = []
    for config in space.enumerate():
        if config not in early and space.adapt(config) == config and \
                space.validate(config) is None:
            out.append(config)
            if len(out) == count:
                return out
    raise AssertionError("the space is too small for this test")


def _device(info, key: str, backend: str = "cpu", **changes) -> DeviceRecord:
    """Another device: this one's fingerprint with some fields changed."""
    return DeviceRecord(key, backend, changes.get("name", info.name),
                        dict(info.as_dict(), backend=backend, **changes))


def _store_winner(store, kernel, device: DeviceRecord, config) -> None:
    config = json.loads(config.to_json()) if not isinstance(config, dict) else config
    store.record(kernel_record(kernel), device, ResultRecord(
        config=config, time_s=1e-3, spread=0.0, gflops=1.0, gbps=1.0, default_time_s=2e-3,
        speedup=2.0, trials=10, sampler="tpe"))


def test_the_nearest_devices_winners_are_measured_right_after_the_default(store, here):
    info, space = here
    near, farther, other_backend = _far_configs(space, 3)
    # the same CPU at another ISA level, another vendor's CPU, and a GPU through OpenCL
    _store_winner(store, MM, _device(info, "cpu-farther", vendor="GenuineIntel",
                                     name="Intel Xeon"), farther)
    _store_winner(store, MM, _device(info, "cpu-near", isa="avx2", flags="-march=x86-64-v3"),
                  near)
    _store_winner(store, MM, _device(info, "opencl-gpu", backend="opencl"), other_backend)
    sim = SimulatedMeasurer(_time)
    [result] = tune_kernels([MM], "cpu", Budget(trials=4), seed=0, progress=False,
                            measurer=sim, store=store).results
    assert sim.calls[:3] == [space.default(), near, farther]
    # the store's trial history says the same: trial 0 the default, trial 1 the near winner
    trials = store.trials(MM.key, info.key)
    assert [t.config for t in trials[:3]] == \
        [json.loads(c.to_json()) for c in (space.default(), near, farther)]
    assert "cpu-near" in result.started_from
    assert "started from the winner on" in describe(result)
    # a device of another backend gives nothing, however good its config
    starts = find_starts(store, kernel_record(MM), space, device_record(info))
    assert starts.first == (near, farther) and other_backend not in starts.later


def test_a_winner_that_cannot_be_made_to_fit_is_skipped(store, here):
    info, space = here
    [usable] = _far_configs(space, 1)
    nearest = _device(info, "cpu-nearest", isa="avx2")
    _store_winner(store, MM, nearest, {"knobs": {"upcast": [4, 4, 4, 4, 4]}, "version": 2})
    _store_winner(store, MM, _device(info, "cpu-next", isa="sse4", vector_bytes=16), usable)
    starts = find_starts(store, kernel_record(MM), space, device_record(info))
    assert starts.first == (usable,) and "cpu-next" in starts.source
    sim = SimulatedMeasurer(_time)
    tune_kernels([MM], "cpu", Budget(trials=3), seed=0, progress=False, measurer=sim,
                 store=store)
    assert sim.calls[:2] == [space.default(), usable]


def test_other_shapes_come_after_this_kernels_own_winners(store, here):
    """Winners of other shapes are later starts: this device's first, then the other
    devices'."""
    info, space = here
    [own] = _far_configs(space, 1)
    elsewhere, at_home = matmul(64, 64, 48), matmul(64, 64, 32)
    [from_elsewhere] = _far_configs(space_for(elsewhere, info.target), 1)
    [from_home] = _far_configs(space_for(at_home, info.target), 1)
    near = _device(info, "cpu-near", isa="avx2")
    _store_winner(store, MM, near, own)
    _store_winner(store, elsewhere, near, from_elsewhere)
    _store_winner(store, at_home, DeviceRecord(info.key, "cpu", info.name, info.as_dict()),
                  from_home)
    starts = find_starts(store, kernel_record(MM), space, device_record(info))
    assert starts.first == (own,)
    adapted = [space.adapt(from_home), space.adapt(from_elsewhere)]
    assert starts.later == tuple(dict.fromkeys(c for c in adapted if c not in (None, own)))


CPU = {"backend": "cpu", "name": "AMD EPYC", "vendor": "AuthenticAMD", "machine": "x86_64",
       "compiler": "gcc 12.2", "flags": "-march=native", "threads": 2, "cores": 2,
       "isa": "native (avx2)", "vector_bytes": 32, "vector_registers": 16, "l1d": 32768,
       "l2": 524288, "l3": 33554432, "fma_units": 2}


def test_nearness_orders_devices_by_hardware_then_isa_then_sizes():
    same_cpu_avx2 = dict(CPU, isa="avx2", flags="-march=x86-64-v3")
    same_cpu_sse4 = dict(CPU, isa="sse4", vector_bytes=16, flags="-march=x86-64-v2")
    zen4 = dict(CPU, name="AMD EPYC 9R14", isa="native (avx512)", vector_bytes=64,
                vector_registers=32, l2=1048576)
    zen3_more_cores = dict(CPU, name="AMD EPYC 7R13", threads=8, cores=8)
    xeon = dict(CPU, name="Intel Xeon", vendor="GenuineIntel", l2=2097152)
    unknown = {"backend": "cpu"}   # a device that stored almost nothing
    garbled = dict(CPU, vector_bytes="32", l2=None, threads=-1)
    ranked = sorted([unknown, xeon, zen4, same_cpu_sse4, garbled, zen3_more_cores,
                     same_cpu_avx2], key=lambda other: device_distance(CPU, other))
    assert ranked == [same_cpu_avx2, garbled, same_cpu_sse4, zen3_more_cores, zen4, xeon,
                      unknown]
    assert device_distance(CPU, dict(CPU)) == (0, 0, 0, 0)


def test_nearness_of_gpus_follows_their_family():
    a100 = {"backend": "cuda", "name": "NVIDIA A100", "compute_capability": "8.0",
            "sm_count": 108, "driver": "12.4"}
    a30 = dict(a100, name="NVIDIA A30", sm_count=56)
    rtx = dict(a100, name="NVIDIA RTX 4090", compute_capability="8.9", sm_count=128)
    h100 = dict(a100, name="NVIDIA H100", compute_capability="9.0", sm_count=132)
    other_driver = dict(a100, driver="12.8")
    ranked = sorted([h100, rtx, a30, other_driver], key=lambda d: device_distance(a100, d))
    assert ranked == [other_driver, a30, rtx, h100]
