"""The plan of a model: folded at import, scheduled once, replayed on new inputs, observable."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tunesearch.onnx as tox


def _reshape_by_shape_model():
    """y = relu(reshape(x, [shape(x)[0], -1])) * 2, the shape computed the exporter's way."""
    inits = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Concat", ["n", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["flat"]),
             helper.make_node("Relu", ["flat"], ["r"]),
             helper.make_node("Mul", ["r", "two"], ["y"]),
             helper.make_node("Shape", ["y"], ["y_shape"])]
    graph = helper.make_graph(
        nodes, "reshape_by_shape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("y_shape", TensorProto.INT64, [2])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_shape_arithmetic_is_folded_and_the_plan_replayed():
    model = tox.load(_reshape_by_shape_model(), input_shapes={"x": (2, 3, 4)},
                     device="reference")
    items = model.schedule()
    assert len(items) == 1  # relu and the scale fused; Shape/Gather/Concat folded on the host
    assert items[0].kernel.out_shape == (2, 12)
    rng = np.random.default_rng(0)
    for _ in range(2):  # new data into the same input buffer, same program
        x = rng.standard_normal((2, 3, 4)).astype(np.float32)
        out = model(x=x)
        np.testing.assert_allclose(out["y"], np.maximum(x.reshape(2, -1), 0) * 2, rtol=1e-6)
        assert out["y_shape"].dtype == np.int64 and out["y_shape"].tolist() == [2, 12]
    assert model.schedule()[0] is items[0]


def test_another_lookup_chooses_the_configs_again_without_a_new_trace(tmp_path):
    import json
    from tests.runtime.test_tuned_lookup import save
    from tunesearch.db import Store
    from tunesearch.runtime.device import get_device
    from tunesearch.runtime.lookup import TunedConfigs
    from tunesearch.space.spaces import space_for
    model = tox.load(_reshape_by_shape_model(), input_shapes={"x": (2, 3, 4)}, device="cpu",
                     lookup=TunedConfigs.defaults())
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    want = np.maximum(x.reshape(2, -1), 0) * 2
    np.testing.assert_allclose(model(x=x)["y"], want, rtol=1e-6)
    assert model.profile({"x": x}, repeat=1).n_tuned == 0
    [item] = model.schedule()
    device = get_device("cpu")
    with Store(f"sqlite:///{tmp_path / 'results.db'}") as store:
        save(store, item.kernel, device,
             json.loads(space_for(item.kernel, device.info().target).default().to_json()))
    model.use_lookup(TunedConfigs.open(store.url))
    np.testing.assert_allclose(model(x=x)["y"], want, rtol=1e-6)
    assert model.profile({"x": x}, repeat=1).n_tuned == 1
    assert model.schedule()[0] is item  # the same trace, its configs chosen again


def test_profile_and_debug_lines(monkeypatch, capfd):
    model = tox.load(_reshape_by_shape_model(), input_shapes={"x": (2, 3, 4)}, device="cpu")
    profile = model.profile(repeat=3)
    assert len(profile.kernels) == len(model.schedule()) == 1
    assert profile.latency > 0 and profile.kernel_seconds > 0
    capfd.readouterr()
    monkeypatch.setenv("DEBUG", "2")
    model(model.random_inputs(1))
    lines = [line for line in capfd.readouterr().err.splitlines() if "GFLOPS" in line]
    assert len(lines) == 1 and model.schedule()[0].kernel.name in lines[0]


def test_intermediate_buffers_are_reused_without_clobbering():
    """A chain of kernels whose buffers are recycled; an early value is read again at the end."""
    width = 16
    inits, nodes = [], []
    previous = "x"
    for i in range(6):
        w = np.random.default_rng(i).standard_normal((width, width)).astype(np.float32) / 4
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [previous, f"w{i}"], [f"m{i}"]))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"h{i}"]))
        previous = f"h{i}"
    nodes.append(helper.make_node("Add", [previous, "h0"], ["y"]))
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, width])],
                              inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    model = tox.load(proto, device="reference")
    x = np.random.default_rng(9).standard_normal((4, width)).astype(np.float32)
    h, first = x, None
    for i in range(6):
        h = np.tanh(h @ numpy_helper.to_array(inits[i]))
        first = h if first is None else first
    np.testing.assert_allclose(model(x)["y"], h + first, rtol=1e-4, atol=1e-5)


def _memory(buffer) -> int:
    """The address of the memory a buffer is part of: a host array's, or the OpenCL buffer a
    sub-buffer belongs to."""
    if isinstance(buffer.handle, np.ndarray):
        return buffer.handle.ctypes.data
    import pyopencl as cl
    parent = buffer.handle.get_info(cl.mem_info.ASSOCIATED_MEMOBJECT)
    return (parent or buffer.handle).int_ptr


def _device_or_skip(name: str) -> str:
    from tunesearch.runtime.device import DeviceUnavailable, get_device
    try:
        get_device(name).info()
    except (DeviceUnavailable, ImportError) as exc:
        pytest.skip(f"no {name} device: {exc}")
    return name


@pytest.mark.parametrize("device", ["cpu", "opencl"])
def test_results_of_other_sizes_share_a_freed_buffer_without_clobbering(device):
    """Results of different sizes take parts of larger freed buffers (best fit); a value read
    again at the end is never overwritten, and the outputs match numpy."""
    widths = [64, 48, 32, 56, 16, 40, 24]
    inits, nodes, previous = [], [], "x"
    rng = np.random.default_rng(3)
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [previous, f"w{i}"], [f"m{i}"]))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"h{i}"]))
        previous = f"h{i}"
    inits.append(numpy_helper.from_array(
        (rng.standard_normal((48, widths[-1])) / 7).astype(np.float32), "back"))
    nodes.append(helper.make_node("MatMul", ["h0", "back"], ["early"]))
    nodes.append(helper.make_node("Add", [previous, "early"], ["y"]))
    graph = helper.make_graph(nodes, "widths",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    model = tox.load(proto, device=_device_or_skip(device))
    x = rng.standard_normal((8, 64)).astype(np.float32)
    h, first = x, None
    for i in range(len(widths) - 1):
        h = np.tanh(h @ numpy_helper.to_array(inits[i]))
        first = h if first is None else first
    want = h + first @ numpy_helper.to_array(inits[-1])
    for _ in range(2):  # the second run replays the plan on the same buffers
        np.testing.assert_allclose(model(x)["y"], want, rtol=1e-4, atol=1e-5)
    plan = model._plan({"x": x.shape})
    outs = [step.buffers[0] for step in plan.steps]
    sizes: dict[int, set[int]] = {}
    for b in outs:
        sizes.setdefault(_memory(b), set()).add(b.size)
    assert len(sizes) < len(outs)
    assert any(len(s) > 1 for s in sizes.values())  # a result in part of a larger buffer


def test_buffer_pool_takes_the_smallest_freed_buffer_that_holds_a_result():
    from tunesearch.graph.dtypes import dtypes
    from tunesearch.lowering.plan import BufferPool
    from tunesearch.runtime.device import get_device
    float32 = dtypes.float32
    pool = BufferPool(get_device("cpu"))
    big, small, other = pool.take(100, float32), pool.take(40, float32), pool.take(40, float32)
    for buffer in (big, small, other):
        pool.give(buffer)
    # equal fits: the most recently freed; then the smallest that holds it, as a part
    assert pool.take(40, float32) is other
    part = pool.take(30, float32)
    assert part.size == 30 and part.handle.ctypes.data == small.handle.ctypes.data
    pool.give(part)  # the whole buffer goes back, not the part
    assert pool.take(40, float32) is small
    assert pool.take(100, float32) is big and pool.take(10, float32) not in (big, small)
    # a device that cannot address part of a buffer shares only equal sizes (the reference
    # device's results are arrays of their own)
    reference = BufferPool(get_device("reference"))
    whole = reference.take(100, float32)
    reference.give(whole)
    assert reference.take(30, float32) is not whole and reference.take(100, float32) is whole


def _in_place_model():
    """y = tanh(x @ w) + x (x read by the first and the last kernel), z = x: an output that is
    an input."""
    w = np.random.default_rng(3).standard_normal((24, 24)).astype(np.float32) / 4
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Tanh", ["m"], ["t"]),
             helper.make_node("Add", ["t", "x"], ["y"])]
    graph = helper.make_graph(
        nodes, "in_place", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 24]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 24])],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                             ir_version=8), w


def test_the_cpu_reads_an_input_in_place_and_lets_go_of_it():
    """On the CPU a C-contiguous input of its dtype is read where the caller keeps it, not
    copied into the plan's buffer (which keeps what the trace put there); every call reads the
    array it is given; an input that is also an output, a strided view and another dtype are
    copied; after the call the kernels point at the plan's buffer again (a later launch reads
    nothing of the caller's)."""
    proto, w = _in_place_model()
    model = tox.load(proto, device="cpu")
    plan = model._plan({"x": (5, 24)})
    rng = np.random.default_rng(0)
    for dtype, view in ((np.float32, False), (np.float32, True), (np.float64, False)):
        for _ in range(3):
            x = rng.standard_normal((5, 48) if view else (5, 24)).astype(dtype)
            fed = x[:, ::2] if view else x
            kept = fed.copy()
            out = model(x=fed)
            want = np.tanh(kept.astype(np.float32) @ w) + kept.astype(np.float32)
            np.testing.assert_allclose(out["y"], want, rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(out["x"], kept.astype(np.float32))
            np.testing.assert_array_equal(fed, kept)  # the caller's array is only read
    # x is also an output here: copied, so the plan's buffer holds the last input
    buffer = plan.input_buffers["x"]
    np.testing.assert_array_equal(buffer.handle[:buffer.size].reshape(5, 24),
                                  kept.astype(np.float32))

    nodes = [n for n in proto.graph.node]
    graph = helper.make_graph(nodes, "in_place_only", list(proto.graph.input),
                              [proto.graph.output[0]], list(proto.graph.initializer))
    alone = tox.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                       ir_version=8), device="cpu")
    plan = alone._plan({"x": (5, 24)})
    buffer = plan.input_buffers["x"]
    before = buffer.handle[:buffer.size].copy()
    x = rng.standard_normal((5, 24)).astype(np.float32)
    np.testing.assert_allclose(alone(x=x)["y"], np.tanh(x @ w) + x, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(buffer.handle[:buffer.size], before)  # read in place
    buffer.handle[:buffer.size] = 1.0  # what the kernels read once the call let go of x
    x[:] = 7.0
    plan.launch()
    np.testing.assert_allclose(plan.device.copyout(plan._outs[0][2].realized)[:120],
                               (np.tanh(np.ones((5, 24), np.float32) @ w) + 1).reshape(-1),
                               rtol=1e-5, atol=1e-5)


def test_the_cpu_writes_an_output_into_the_array_it_returns():
    """An output the call's kernels write goes straight into a new array that the call
    returns (no copy out of the plan's buffer, which it leaves as it was): each call's arrays
    are its own, a value that is two outputs is two arrays, an output the plan folded when it
    was built (initializers only) and one computed in place of a reshape still come out
    right, and a plain launch afterwards writes the plan's buffer again."""
    w = np.random.default_rng(4).standard_normal((24, 24)).astype(np.float32) / 4
    c = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Tanh", ["m"], ["y"]),
             helper.make_node("Identity", ["y"], ["y2"]),
             helper.make_node("Reshape", ["y", "flat"], ["f"]),
             helper.make_node("Exp", ["c"], ["k"])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
            for n in ("y", "y2", "f", "k")]
    graph = helper.make_graph(
        nodes, "outputs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 24])], outs,
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(c, "c"),
         numpy_helper.from_array(np.array([-1], np.int64), "flat")])
    model = tox.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                       ir_version=8), device="cpu")
    plan = model._plan({"x": (5, 24)})
    rng = np.random.default_rng(0)
    x1, x2 = (rng.standard_normal((5, 24)).astype(np.float32) for _ in range(2))
    first = model(x=x1)
    buffer = plan._outs[0][2].realized
    buffer.handle[:buffer.size] = -5.0  # the plan's own buffer: no call writes it
    second = model(x=x2)
    np.testing.assert_array_equal(buffer.handle[:buffer.size], -5.0)
    for out, x in ((first, x1), (second, x2)):
        want = np.tanh(x @ w)
        np.testing.assert_allclose(out["y"], want, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(out["y2"], out["y"])
        np.testing.assert_array_equal(out["f"], out["y"].reshape(-1))
        np.testing.assert_allclose(out["k"], np.exp(c), rtol=1e-6)
    second["y"][:] = 0.0  # one output's array is no other's
    assert np.abs(second["y2"]).max() > 0 and np.abs(second["f"]).max() > 0
    fed = plan.input_buffers["x"]  # the call read x2 in place; a launch reads this buffer
    fed.handle[:fed.size] = x2.reshape(-1)
    plan.launch()
    np.testing.assert_allclose(plan.device.copyout(buffer)[:120].reshape(5, 24),
                               np.tanh(x2 @ w), rtol=1e-5, atol=1e-5)
