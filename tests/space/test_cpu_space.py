"""The CPU space: its parameters describe it, its default is valid, bad configs are refused."""
from __future__ import annotations

import random

import pytest

from tests.catalogue import catalogue
from tunesearch.space.config import Config, ConfigError
from tunesearch.space.space import space_for
from tunesearch.space.target import Target

TARGET = Target("cpu", threads=2, vector_bytes=64)
KERNELS = catalogue()


@pytest.mark.parametrize("name,kernel", KERNELS, ids=[n for n, _ in KERNELS])
def test_default_and_naive_are_valid_and_sampleable(name, kernel):
    space = space_for(kernel, TARGET)
    for config in (space.default(), space.naive()):
        assert space.validate(config) is None
        params = space.params_of(config)
        choices = {p.name: p.choices for p in space.parameters()}
        for key, value in params.items():
            assert value in choices[key], (key, value, choices[key])
        assert space.config_from(params) == config
    assert space.size() >= 1


def test_enumerate_small_space():
    name, kernel = next((n, k) for n, k in KERNELS if n == "sum_all")
    space = space_for(kernel, TARGET)
    configs = list(space.enumerate())
    assert configs and len(configs) == len(set(configs))
    assert all(space.validate(c) is None for c in configs)


def test_garbage_configs_are_rejected_not_crashed():
    rng = random.Random(0)
    values = [0, -1, 1, 3, 10**9, (1,), (1, 2, 3), (), (0, 0), (-5, 2)]
    for _, kernel in KERNELS:
        space = space_for(kernel, TARGET)
        for _ in range(40):
            knobs = {k: rng.choice(values) for k in ("upcast", "order", "split", "unroll",
                                                      "pack", "parallel", "threads")}
            if rng.random() < 0.2:
                knobs["bogus"] = 1
            reason = space.validate(Config.make(knobs))
            assert reason is None or isinstance(reason, str)
        assert space.validate("not a config") is not None


def test_reasons_name_the_problem():
    _, kernel = next((n, k) for n, k in KERNELS if n == "matmul_square")
    space = space_for(kernel, TARGET)
    base = space.default()
    assert "accumulators" in space.validate(base.replace(upcast=(48, 64)))
    assert "permutation" in space.validate(base.replace(order=(0, 0)))
    assert "cannot be packed" in space.validate(base.replace(pack=(7,)))
    assert "unknown knobs" in space.validate(Config.make({**base.as_dict(), "x": 1}))
    with pytest.raises(ConfigError):
        Config.from_json('{"knobs": {"upcast": "DROP TABLE"}}')
    with pytest.raises(ConfigError):
        Config.from_json("not json")
