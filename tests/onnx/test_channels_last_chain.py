"""A value a convolution leaves channels last (its output channels on the vector lanes) stays
channels last for the convolutions after it: a pointwise convolution reads it as it lies, as a
matmul of its positions by the weight, and a value read twice is written to its buffer in
that order. Every result matches onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.onnx.models import kernels_matching_onnxruntime

RNG = np.random.default_rng(17)
CIN, MID = 16, 96  # the first convolution's input and output channels


def _first_width() -> int:
    """Output columns over which the first (3x3) convolution reads a channels-last copy:
    rows that hold two register blocks of the largest height, with more output channels
    than positions (two rows of them)."""
    from tunesearch.space.cpu_model import MAX_BLOCK_ROWS
    return 2 * MAX_BLOCK_ROWS


def _conv(name: str, x: str, cin: int, cout: int, k: int, inits: list, **attrs):
    w = (RNG.standard_normal((cout, cin // attrs.get("group", 1), k, k)) * 0.2).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    inits += [numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")]
    return helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [name], **attrs)


def _chain(then: list, out_channels: int, out_size: tuple[int, int], inits: list):
    """x -> 3x3 conv (channels last) -> Relu 'r', then the nodes `then` ending in 'y'."""
    width = _first_width()
    nodes = [_conv("c", "x", CIN, MID, 3, inits, pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["r"]), *then]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CIN, 2, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, out_channels, *out_size])],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _reduces(kernels) -> list:
    return [kernel for kernel in kernels if kernel.n_reduce]


def _reads(node, found=None) -> list:
    """The (buffer index, view) of every load under a kernel's expression."""
    found = [] if found is None else found
    if node.op == "load":
        found.append(node.arg)
    for src in node.src:
        _reads(src, found)
    return found


def test_a_pointwise_convolution_reads_a_channels_last_value_as_it_lies():
    """The 1x1 convolution after a channels-last one is a matmul of the positions (rows) by
    the weight, the output channels on the lanes, reading the first one's buffer along the
    channels (stride 1 on its reduce axis); the first one's bias and ReLU are written with it
    (its epilogue), not redone in the matmul's reads. No copy between them."""
    width, inits = _first_width(), []
    proto = _chain([_conv("p", "r", MID, 40, 1, inits), helper.make_node("Relu", ["p"], ["y"])],
                   40, (2, width), inits)
    kernels = kernels_matching_onnxruntime(proto, 1)
    assert len(kernels) == 3, [kernel.name for kernel in kernels]  # the copy and two reduces
    first, pointwise = _reduces(kernels)
    assert pointwise.domain == (1, 1, 2 * width, 40, MID)
    (index, view), = [read for read in _reads(pointwise.expr)
                      if pointwise.buffers[read[0]].size == 2 * width * MID]
    assert view.strides[-1] == 1 and view.strides[2] == MID
    # the first convolution writes its positions' channels contiguously, after its ReLU
    assert first.out_view.strides[first.n_out - 1] == 1
    assert first.expr.op.name == "MAX"


def test_a_channels_last_value_read_twice_is_written_channels_last():
    """A value two nodes read (a residual) is written to a buffer of its own: laid out
    channels last where it comes from a channels-last convolution, so that convolution's
    kernel writes it contiguously and the pointwise convolution reads it as it lies."""
    width, inits = _first_width(), []
    proto = _chain([_conv("p", "r", MID, MID, 1, inits),
                    helper.make_node("Add", ["p", "r"], ["y"])], MID, (2, width), inits)
    kernels = kernels_matching_onnxruntime(proto, 2)
    first, pointwise = _reduces(kernels)
    assert first.out_view.strides[first.n_out - 1] == 1  # channels last: contiguous
    assert pointwise.domain == (1, 1, 2 * width, MID, MID)
    # the residual read along the output channels (the lanes) as it lies
    residual = [view for index, view in _reads(pointwise.expr)
                if pointwise.buffers[index].size == 2 * width * MID and view.strides[-1] == 0]
    assert residual and all(view.strides[pointwise.n_out - 1] == 1 for view in residual)


@pytest.mark.parametrize("strides,groups", [((2, 2), 1), ((1, 2), 1), ((1, 1), 2),
                                            ((2, 2), 4)])
def test_strided_and_grouped_pointwise_convolutions_of_a_channels_last_value(strides, groups):
    """A strided pointwise convolution reads every stride-th position into one copy (its
    positions one axis of rows again); a grouped one reads each group's channels as a run.
    Both match onnxruntime."""
    width, inits = _first_width(), []
    out = (-(-2 // strides[0]), -(-width // strides[1]))
    proto = _chain([_conv("p", "r", MID, 32, 1, inits, strides=list(strides), group=groups),
                    helper.make_node("Relu", ["p"], ["y"])], 32, out, inits)
    kernels = kernels_matching_onnxruntime(proto, 3)
    pointwise = _reduces(kernels)[-1]
    assert pointwise.domain == (1, groups, out[0] * out[1], 32 // groups, MID // groups)


def test_a_value_left_channels_first_keeps_the_pointwise_matmul_over_positions():
    """A pointwise convolution of a model input (laid out channels first) keeps the
    positions on the lanes: its output channels are the rows."""
    width, inits = _first_width(), []
    node = _conv("y", "x", CIN, 40, 1, inits)
    graph = helper.make_graph(
        [node], "pointwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CIN, 2, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 40, 2, width])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    pointwise, = _reduces(kernels_matching_onnxruntime(proto, 4))
    assert pointwise.domain == (1, 1, 40, 2 * width, CIN)
