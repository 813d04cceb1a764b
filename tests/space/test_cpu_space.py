"""The CPU space: its parameters describe it, its default is valid, bad configs are refused."""
from __future__ import annotations

import random

import numpy as np
import pytest

from tests.catalogue import catalogue, random_inputs
from tests.conformance import build_cpu_library, call_config, output_error, tolerance
from tunesearch.runtime.interpret import run_kernel
from tunesearch.space import cpu_default
from tunesearch.space.config import Config, ConfigError
from tunesearch.space.spaces import space_for
from tunesearch.space.target import Target

TARGET = Target("cpu", threads=2, vector_bytes=64, vector_registers=32, isa="avx512")
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


def test_garbage_configs_are_refused_and_what_is_accepted_computes_right(tmp_path):
    """Garbage put into one or two knobs of the default (every knob present, so no refusal is
    only about a missing knob): most is refused, with a reason naming the knob; what the space
    accepts is a config it can run, and runs right."""
    rng = random.Random(0)
    values = [0, -1, 1, 3, 10**9, (1,), (1, 2, 3), (), (0, 0), (-5, 2)]
    refused, accepted, named = 0, {}, set()
    for name, kernel in KERNELS:
        space = space_for(kernel, TARGET)
        base = space.default().as_dict()
        for _ in range(40):
            knobs = dict(base)
            for key in rng.sample(sorted(base) + ["bogus"], rng.randint(1, 2)):
                knobs[key] = rng.choice(values)
            config = Config.make(knobs)
            reason = space.validate(config)
            if reason is None:
                accepted.setdefault(name, set()).add(config)
            else:
                assert isinstance(reason, str) and reason
                refused += 1
                named |= {key for key in (*base, "unknown") if reason.startswith(key)}
        assert space.validate("not a config") is not None
    # seed 0 gives 975 of 1040 refused and 65 accepted; bounds leave room for the space to grow
    total = 40 * len(KERNELS)
    assert refused >= 0.85 * total and total - refused >= 20
    assert named >= {"upcast", "order", "split", "unroll", "pack", "parallel", "threads",
                     "ktile", "unknown"}
    for name, kernel in KERNELS:
        configs = sorted(accepted.get(name, ()), key=str)
        if not configs:
            continue
        lib = build_cpu_library(kernel, configs, tmp_path)
        inputs = random_inputs(kernel, seed=1)
        expected = run_kernel(kernel, inputs)
        for i, config in enumerate(configs):
            out = np.zeros(kernel.buffers[0].size, kernel.buffers[0].dtype.np)
            call_config(lib, i, kernel, out, inputs)
            assert output_error(out, expected) <= tolerance(kernel), (name, config)


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


def _kernel(name):
    return next(k for n, k in KERNELS if n == name)


def test_every_sampled_point_is_a_valid_config():
    """Register blocks are sampled per axis; config_from brings a product past the caps back
    within them, so the search does not spend its asks on configs that cannot run."""
    rng = random.Random(1)
    for name, kernel in KERNELS:
        space = space_for(kernel, TARGET)
        params = space.parameters()
        for _ in range(200):
            values = {}
            for p in params:
                if p.when is None or values.get(p.when[0]) in p.when[1]:
                    values[p.name] = rng.choice(p.choices)
            config = space.config_from(values)
            assert space.validate(config) is None, (name, values, space.validate(config))


def test_points_within_the_caps_are_taken_as_they_are():
    space = space_for(_kernel("matmul_square"), TARGET)
    values = space.params_of(space.default())
    assert space.config_from({**values, "upcast.0": 4, "upcast.1": 16, "unroll": 8}).get(
        "upcast") == (4, 16)
    big = space.config_from({**values, "upcast.0": 64, "upcast.1": 32, "split": 4, "unroll": 8})
    # 512 accumulators (the AVX-512 register file in floats): 12 rows x 2 vectors of 16 lanes,
    # which also fits the 32 registers with the 2 column vectors and a broadcast
    assert big.get("upcast") == (12, 32) and big.get("split") == 1 and big.get("unroll") == 4


def test_a_stored_config_without_ktile_means_no_tile():
    """ktile came after the first stored configs: one without it is valid and renders the same
    code as ktile=0, so nothing tuned before has to be tuned again."""
    from tunesearch.codegen.c import render_c
    kernel = _kernel("matmul_prime")
    space = space_for(kernel, TARGET)
    config = space.default()
    old = Config.make({k: v for k, v in config.as_dict().items() if k != "ktile"})
    assert space.validate(old) is None
    assert render_c(kernel, old) == render_c(kernel, config.replace(ktile=0))
    assert "ktile" in space.validate(config.replace(ktile=kernel.domain[kernel.n_out]))


def test_a_config_without_cblock_fills_one_block_at_a_time():
    """cblock came after ktile: a config holds it only where it is more than 1, so a stored
    config without it is valid and renders the code of cblock=1; a cblock is refused where
    the kernel has no column side to pack, or out of range."""
    from tunesearch.codegen.c import render_c
    kernel = _kernel("matmul_prime")
    space = space_for(kernel, TARGET)
    config = space.default().replace(cblock=4)
    assert space.validate(config) is None
    ones = [space.config_from({**space.params_of(config), "cblock": 1}),
            cpu_default.with_cblock(config, 1)]
    for one in ones:
        assert "cblock" not in one.as_dict()
        assert render_c(kernel, one) == render_c(kernel, config.replace(cblock=1))
    assert "cblock" in space.validate(config.replace(cblock=0))
    assert "cblock" in space.validate(config.replace(cblock=64))
    assert any(c.get("cblock", 1) in (2, 8) for c in space.neighbours(config))
    elementwise = next(k for name, k in catalogue() if not k.n_reduce)
    other = space_for(elementwise, TARGET)
    assert "cblock" in other.validate(other.default().replace(cblock=2))


def test_padded_axes_are_those_whose_reads_all_come_from_panels():
    """A tail block computes the whole register block only along axes where every load of the
    reduce comes from a zero-padded panel: elsewhere it would read past the operand's end."""
    from tunesearch.codegen.panels import padded_axes
    kernel = _kernel("matmul_prime")          # out[i, j] = sum_k a[i, k] * b[k, j]
    assert padded_axes(kernel, {}) == set()
    assert padded_axes(kernel, {2: None}) == {1}
    assert padded_axes(kernel, {1: None}) == {0}
    assert padded_axes(kernel, {1: None, 2: None}) == {0, 1}
    bias = _kernel("matmul_bias_relu")        # the bias is read after the reduce, per lane
    assert padded_axes(bias, {1: None, 2: None}) == {0, 1}
