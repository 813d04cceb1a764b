"""The GPU space: its parameters, validation, defaults, and knobs that really change the code."""
from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest

from tests.catalogue import catalogue
from tests.conformance import sample_configs
from tunesearch import Tensor
from tunesearch.graph.schedule import create_schedule
from tunesearch.codegen.gpu import render_gpu
from tunesearch.codegen.gpu_dialects import CUDADialect, OpenCLDialect
from tunesearch.space.config import Config
from tunesearch.space.gpu_space import GPUSpace, local_bytes, stageable
from tunesearch.space.spaces import space_for
from tunesearch.space.target import Target

KERNELS = dict(catalogue())
TARGET = Target("gpu", max_local_size=1024, max_local_dims=(1024, 1024, 64),
                local_memory=48 * 1024, max_registers=255, warp=32)


def space(name: str, target: Target = TARGET) -> GPUSpace:
    return space_for(KERNELS[name], target)


def test_registered_as_gpu_family():
    assert isinstance(space("matmul_square"), GPUSpace)


@pytest.mark.parametrize("name", list(KERNELS))
def test_default_and_naive_are_valid(name):
    s = space(name)
    assert s.validate(s.naive()) is None
    assert s.validate(s.default()) is None
    naive = s.naive()
    assert set(naive.get("local")) <= {1} and set(naive.get("upcast")) <= {1}


def test_default_matmul_is_tiled_and_staged():
    s = space("matmul_square")
    d = s.default()
    assert d.get("local") == (16, 16) and d.get("upcast") == (4, 4)
    assert d.get("stage") == stageable(s.kernel) == (1, 2)
    assert d.get("ktile") == 16


def test_default_reductions_are_grouped_and_elementwise_upcast():
    assert space("sum_last_axis").default().get("group") > 1
    assert space("sum_all").default().get("group") == 256
    # a reduce along a strided axis spreads work-items over the contiguous outputs instead
    column_sum = Tensor(np.ones((300, 200), np.float32), device="reference").sum(0)
    kernel = create_schedule([column_sum.node])[0].kernel
    strided = space_for(kernel, TARGET).default()
    assert strided.get("group") == 1 and strided.get("local") == (128,)
    elementwise = space("fma_3d_odd").default()
    assert elementwise.get("upcast")[-1] == 4


@pytest.mark.parametrize("name", list(KERNELS))
def test_default_is_a_point_of_the_parameters(name):
    """The search enqueues the default as its first trial, so it must be expressible."""
    s = space(name)
    values = s.params_of(s.default())
    choices = {p.name: p.choices for p in s.parameters()}
    for key, value in values.items():
        assert value in choices[key], (key, value)
    assert s.config_from(values) == s.default()


def test_parameters_round_trip_through_configs():
    for name in ("matmul_prime", "conv2d_groups.1", "broadcast_mul_add", "sum_all"):
        s = space(name)
        for config in sample_configs(s, 20, seed=3):
            values = s.params_of(config)
            assert s.config_from(values) == config
            assert Config.from_json(config.to_json()) == config
            for p in s.parameters():
                if p.name in values:
                    assert values[p.name] in p.choices, (p.name, values[p.name])


def test_conditional_ktile_only_with_stage():
    s = space("matmul_square")
    params = {p.name: p for p in s.parameters()}
    assert params["ktile"].when[0] == "stage" and "" not in params["ktile"].when[1]
    assert s.config_from({"stage": "", "ktile": 8}).get("ktile") == 1


def test_enumerate_small_space_yields_only_valid_distinct_configs():
    s = space("sum_all")
    configs = list(s.enumerate())
    assert configs and len(configs) == len(set(configs)) <= s.size()
    assert all(s.validate(c) is None for c in configs)


def _garbage_value(rng: random.Random):
    return rng.choice([0, -1, 1, 2, 3, 7, 64, 4096, 10**12, (), (1,), (0, 0), (1, 2, 3),
                       (-4, 2), (16, 16), (2, 1, 0), (9, 9, 9, 9)])


def test_random_garbage_is_rejected_with_a_reason_never_a_crash():
    rng = random.Random(0)
    names = ("group", "ktile", "local", "order", "stage", "unroll", "upcast", "bogus")
    rejected = 0
    for name in ("matmul_prime", "sum_last_axis", "conv2d_stride_pad.0", "sum_all"):
        s = space(name)
        base = s.default().as_dict()
        for _ in range(300):
            knobs = dict(base)
            for key in rng.sample(names, rng.randint(1, 3)):
                if rng.random() < 0.1:
                    knobs.pop(key, None)
                else:
                    knobs[key] = _garbage_value(rng)
            reason = s.validate(Config.make(knobs))
            if reason is not None:
                assert isinstance(reason, str) and reason
                rejected += 1
    assert rejected > 900
    assert space("sum_all").validate({"local": []}) == "not a Config: dict"


def test_device_limits_are_enforced():
    config = space("matmul_square").default()  # 256 work-items of 16 accumulators
    few_items = Target("gpu", max_local_size=128)
    assert "work-group of 256 work-items exceeds the device's 128" in \
        space("matmul_square", few_items).validate(config)
    narrow = Target("gpu", max_local_dims=(64, 64, 64))
    assert "exceeds the first dimension's limit 64" in \
        space("matmul_square", narrow).validate(config)
    few_registers = Target("gpu", max_registers=8)
    assert "16 outputs per work-item exceed the register budget of 8" in \
        space("matmul_square", few_registers).validate(config)
    for target in (few_items, narrow, few_registers):
        s = space("matmul_square", target)
        assert s.validate(s.default()) is None


@pytest.mark.parametrize("change, reason", [
    (dict(group=3), "not a power of two"),
    (dict(group=128), "exceeds the reduce length"),
    (dict(stage=(), ktile=16), "ktile needs staged buffers"),
    (dict(stage=(3,)), "cannot be staged"),
    (dict(ktile=65), "ktile 65 is not in 1..64"),
    (dict(group=32, ktile=16, local=(8, 4)), "exceeds ktile"),
    (dict(order=(0, 0)), "not a permutation"),
    (dict(local=(16, 16, 1)), "local needs 2 values"),
    (dict(upcast=(4, 64)), "last lanes are past"),
    (dict(unroll=0), "unroll 0 is not in"),
    (dict(group=1.5), "knob values are integers"),
])
def test_validation_reasons(change, reason):
    s = space("matmul_square")
    try:
        config = s.default().replace(**change)
    except ValueError as exc:  # Config itself refuses non-integers
        assert reason in str(exc)
        return
    assert reason in (s.validate(config) or "")


def test_local_memory_limit_and_accounting():
    kernel = KERNELS["matmul_square"]
    config = space("matmul_square").default()
    # 16 reduce steps of 64 values of A and of B, float32; A is copied along the reduce axis,
    # so its rows are padded by one element against bank conflicts
    assert local_bytes(kernel, config) == (65 + 64) * 16 * 4
    small = Target("gpu", local_memory=4 * 1024)
    assert "bytes of local memory" in space("matmul_square", small).validate(config)
    assert space("matmul_square", small).validate(space("matmul_square", small).default()) is None
    grouped = space("sum_last_axis").default()
    w = grouped.get("group") * grouped.get("local")[0]
    assert local_bytes(KERNELS["sum_last_axis"], grouped) == w * 4


def test_render_launch_sizes_follow_the_config():
    kernel = KERNELS["matmul_prime"]  # 31 x 41 outputs, reduce 37
    config = space("matmul_prime").default().replace(local=(8, 16), upcast=(2, 2), group=2,
                                                     ktile=8)
    text, global_size, local_size = render_gpu(kernel, config, OpenCLDialect(), "k")
    blocks = -(-31 // 16) * -(-41 // 32)
    assert local_size == (8 * 16 * 2,) and global_size == (blocks * 8 * 16 * 2,)
    assert "reqd_work_group_size(256, 1, 1)" in text


def _source(name, config, dialect=None):
    return render_gpu(KERNELS[name], config, dialect or OpenCLDialect(), "k")[0]


def test_every_knob_changes_the_generated_code():
    """No knob that the backend ignores: changing any one of them changes the kernel."""
    s = space("matmul_prime")
    base = s.default().replace(local=(8, 8), upcast=(2, 2), group=1, unroll=2, ktile=8,
                               stage=(1, 2))
    assert s.validate(base) is None
    changes = dict(local=(4, 8), upcast=(2, 4), order=(1, 0), unroll=4, group=2, stage=(2,),
                   ktile=16)
    text = _source("matmul_prime", base)
    for knob, value in changes.items():
        other = base.replace(**{knob: value})
        assert s.validate(other) is None, (knob, s.validate(other))
        assert _source("matmul_prime", other) != text, knob


def test_code_shows_each_mechanism():
    s = space("matmul_square")
    staged = _source("matmul_square", s.default())
    assert "__local float tile1" in staged and "barrier(CLK_LOCAL_MEM_FENCE);" in staged
    assert len(re.findall(r"\bacc\d+ \+=", staged)) == 16  # a 4x4 register block
    assert "#pragma unroll 4" in staged
    grouped = _source("sum_last_axis", space("sum_last_axis").default())
    assert "__local float part" in grouped and "if (g < s)" in grouped
    cuda = _source("matmul_square", s.default(), CUDADialect())
    assert 'extern "C" __global__' in cuda and "__shared__ float tile1" in cuda
    assert "__syncthreads();" in cuda and "blockIdx.x" in cuda and "threadIdx.x" in cuda


def test_order_decides_the_fastest_work_item_axis():
    s = space("broadcast_mul_add")
    for order in ((0, 1), (1, 0)):
        text = _source("broadcast_mul_add", s.naive().replace(local=(4, 4), order=order))
        first = re.search(r"const int l(\d) = rest % 4;", text).group(1)
        assert int(first) == order[-1]


def test_config_json_is_stable():
    config = space("matmul_square").default()
    data = json.loads(config.to_json())
    assert data["knobs"] == {"group": 1, "ktile": 16, "local": [16, 16], "order": [0, 1],
                             "stage": [1, 2], "unroll": 4, "upcast": [4, 4]}
