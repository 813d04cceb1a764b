"""Inputs that cannot fit in memory are refused before they are allocated; random inputs are
drawn in pieces with the values of one draw of the whole."""
from __future__ import annotations

import resource
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

import tunesearch.onnx as tox
from tunesearch.errors import InputError
from tunesearch.onnx.memory import available_bytes


def _relu(dims, elem=TensorProto.FLOAT, inputs: int = 1):
    nodes = [helper.make_node("Relu" if elem == TensorProto.FLOAT else "Identity",
                              [f"x{i}"], [f"y{i}"]) for i in range(inputs)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(f"x{i}", elem, dims) for i in range(inputs)],
        [helper.make_tensor_value_info(f"y{i}", elem, None) for i in range(inputs)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_inputs_past_memory_are_refused_before_they_are_allocated():
    start = time.perf_counter()
    with pytest.raises(InputError) as caught:  # 64 inputs of 8 GiB each, twice
        tox.load(_relu([500000000, 4], inputs=64), device="reference")
    text = str(caught.value)
    assert "memory" in text and "GiB" in text and "\n" not in text
    assert time.perf_counter() - start < 30  # nothing of that size was written


def test_an_address_space_limit_counts(tmp_path):
    """Under `ulimit -v` the limit is what the process can hold, whatever the machine has."""
    import subprocess
    import sys
    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30));"
            "from tunesearch.onnx.memory import available_bytes; print(available_bytes())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert 0 < int(out.stdout) <= 2 << 30
    assert available_bytes() > 2 << 30 or resource.getrlimit(resource.RLIMIT_AS)[0] != \
        resource.RLIM_INFINITY  # without the limit, any machine that runs the tests has more


@pytest.mark.parametrize("elem, dims", [(TensorProto.FLOAT, [3, 700001]),
                                        (TensorProto.INT64, [2100001]),
                                        (TensorProto.BOOL, [2, 1100000])])
def test_random_inputs_are_one_draw_of_the_whole(elem, dims):
    model = tox.load(_relu(dims, elem), device="reference")
    got = model.random_inputs(seed=3)["x0"]
    rng = np.random.default_rng(3)  # the draw of the whole input at once, as before pieces
    if elem == TensorProto.FLOAT:
        want = rng.standard_normal(dims).astype(np.float32)
    elif elem == TensorProto.INT64:
        want = rng.integers(0, 4, dims).astype(np.int64)
    else:
        want = rng.random(dims) < 0.5
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
