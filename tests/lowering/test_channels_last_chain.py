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


def _copies(kernels) -> list:
    """The kernels without a reduce that read a buffer (a padded copy, a layout change)."""
    return [kernel for kernel in kernels if not kernel.n_reduce and len(kernel.buffers) > 1]


def _borders(kernels) -> list:
    """The kernels that read nothing: a padded buffer's border, around what its producer
    wrote in place."""
    return [kernel for kernel in kernels if len(kernel.buffers) == 1]


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


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[2, 3], strides=[1, 2], pads=[0, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[2, 3], strides=[1, 2], pads=[0, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], count_include_pad=1)),
    ("MaxPool", dict(kernel_shape=[1, 3], strides=[1, 3]))])
def test_a_pool_of_a_channels_last_value_runs_along_the_channels(op, attrs):
    """A pool of a value stored channels last runs its lanes along the channels, and its
    result is stored channels last, which the pointwise convolution after it reads as it
    lies. Windows that need no padding are reduced read in place from the value; windows that
    reach into the padding are combined tap by tap, each tap a strided view of the value
    masked where it falls in the padding: no padded buffer, no border kernels, the
    convolution before it writes only its own output. No copy but the input's."""
    width, inits = _first_width(), []
    kh, kw = attrs["kernel_shape"]
    pads = attrs.get("pads", [0] * 4)
    out = ((2 + pads[0] + pads[2] - kh) // attrs["strides"][0] + 1,
           (width + pads[1] + pads[3] - kw) // attrs["strides"][1] + 1)
    proto = _chain([helper.make_node(op, ["r"], ["q"], **attrs),
                    _conv("p", "q", MID, 24, 1, inits), helper.make_node("Relu", ["p"], ["y"])],
                   24, out, inits)
    kernels = kernels_matching_onnxruntime(proto, 5)
    names = [kernel.name for kernel in kernels]
    assert len(kernels) == 4 and not _borders(kernels), names
    copy, conv, pool, pointwise = kernels
    assert copy.n_reduce == 0 and conv.n_reduce and pointwise.n_reduce, names
    assert conv.buffers[0].size == 2 * width * MID  # its own output, no padded buffer
    # tap by tap where padded: a reduce of the one term that combines the taps
    assert pool.domain[pool.n_out:] == ((1,) if any(pads) else (kh, kw)), pool.name
    assert pool.domain[:pool.n_out] == (1, *out, MID), pool.name
    assert pool.out_view.strides[len(out) + 1] == 1
    assert all(view.strides[pool.n_out - 1] == 1 for _, view in _reads(pool.expr)
               if view.strides[pool.n_out - 1])
    assert pointwise.domain == (1, 1, out[0] * out[1], 24, MID)


def test_a_pool_of_a_channels_first_value_keeps_its_lanes_along_a_row():
    """A pool of a model input (channels first): the windows read in place, the lanes along
    the output rows."""
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2])],
        "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 9, 33])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 16])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    pool, = kernels_matching_onnxruntime(proto, 6)
    assert pool.domain == (1, 8, 4, 16, 3, 3)


def test_a_strided_convolution_of_three_channels_reads_a_channels_last_copy():
    """A first convolution (three channels, 7x7 of stride 2, as resnet50's): a channels-last
    copy of its input (as small as the input) and windows read in place from it, a window's
    row of taps and channels one run of 21, rather than the copy by kernel column that its
    rows were read from channels first (3.5 times the input). Its result is stored channels
    last."""
    from tunesearch.space.cpu_model import MAX_BLOCK_ROWS
    width, inits = 2 * MAX_BLOCK_ROWS, []
    node = _conv("y", "x", 3, 64, 7, inits, strides=[2, 2], pads=[3] * 4)
    graph = helper.make_graph(
        [node], "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 2 * width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 2, width])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    kernels = kernels_matching_onnxruntime(proto, 7)
    assert len(kernels) == 2, [kernel.name for kernel in kernels]
    copy, conv = kernels
    assert copy.n_reduce == 0 and copy.domain[-1] == 3
    assert conv.domain == (1, 1, 2, width, 64, 7, 21)


def test_a_convolution_of_a_channels_last_value_reads_a_channels_last_copy():
    """A 3x3 convolution of a value stored channels last, with few output channels over rows
    it would read in place channels first: its padded input channels last too, written in
    place by the convolution before it (its interior) and by kernels of the border (no copy
    moves data between layouts), then the reduce over it."""
    width, inits = _first_width(), []
    proto = _chain([_conv("d", "r", MID, 32, 3, inits, pads=[1] * 4),
                    helper.make_node("Relu", ["d"], ["y"])], 32, (2, width), inits)
    kernels = kernels_matching_onnxruntime(proto, 8)
    assert [copy.domain[-1] for copy in _copies(kernels)] == [CIN]
    assert _reduces(kernels)[0].buffers[0].size == (2 + 2) * (width + 2) * MID
    assert {border.domain[-1] for border in _borders(kernels)} == {MID}
    assert _reduces(kernels)[-1].domain == (1, 1, 2, width, 32, 3, 3 * MID)


def test_a_local_response_norm_of_a_channels_last_value():
    """LRN over a value stored channels last: its window of channels runs along the lanes,
    over a padded copy of the squares; the result matches onnxruntime and stays channels
    last for the pointwise convolution after it."""
    width, inits = _first_width(), []
    proto = _chain([helper.make_node("LRN", ["r"], ["n"], size=5, alpha=1e-3, beta=0.75, bias=2.0),
                    _conv("y", "n", MID, 24, 1, inits)], 24, (2, width), inits)
    kernels = kernels_matching_onnxruntime(proto, 9)
    assert _reduces(kernels)[-1].domain == (1, 1, 2 * width, 24, MID)


def test_a_concatenation_of_channels_last_values_is_stored_channels_last():
    """Two pointwise convolutions of a channels-last value, concatenated along the channels
    (squeezenet's fire module): each writes its slice of one buffer laid out channels last
    (runs of its channels at every position), which the pointwise convolution after it reads
    as it lies."""
    width, inits = _first_width(), []
    proto = _chain([_conv("a", "r", MID, 16, 1, inits), _conv("b", "r", MID, 48, 1, inits),
                    helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
                    _conv("y", "cat", 64, 24, 1, inits)], 24, (2, width), inits)
    kernels = kernels_matching_onnxruntime(proto, 10)
    first, left, right, last = _reduces(kernels)
    for piece, channels in ((left, 16), (right, 48)):
        assert piece.domain == (1, 1, 2 * width, channels, MID)
        assert piece.buffers[0].size == 2 * width * 64  # the whole concatenation
        assert piece.out_view.strides[2:4] == (64, 1)
    assert last.domain == (1, 1, 2 * width, 24, 64)


def test_a_first_convolution_of_three_channels_writes_them_last():
    """A first convolution whose three input channels are too few for the channels-last
    read: its im2col copy and a matmul with the output channels on the lanes where they are
    whole vectors, so its output is stored channels last and the max pool after it runs
    along the channels."""
    from tunesearch.runtime.device import get_device
    lanes, inits = get_device("cpu").info().target.lanes(4), []
    cout, size = 4 * lanes, 9
    nodes = [_conv("c", "x", 3, cout, 3, inits, strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2])]
    graph = helper.make_graph(
        nodes, "first",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2 * size + 1, 2 * size + 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, 4, 4])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    kernels = kernels_matching_onnxruntime(proto, 11)
    conv, pool = _reduces(kernels)
    assert conv.domain == (1, 1, size * size, cout, 27)
    assert pool.domain[:pool.n_out] == (1, 4, 4, cout)
