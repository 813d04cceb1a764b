"""Convolutions whose output channels outnumber their positions run as a matmul with the
channels on the vector lanes and the weight as the column operand; the result matches
onnxruntime, grouped or not, 1x1 or wider, with a bias and an activation after it."""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tunesearch.onnx as tox
from tests.onnx.models import kernels_matching_onnxruntime

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("k,groups,cout", [(3, 1, 48), (1, 1, 40), (3, 2, 64), (5, 4, 128)])
def test_channels_on_lanes_match_onnxruntime(k, groups, cout):
    cin, size = 8, 5
    w = (RNG.standard_normal((cout, cin // groups, k, k)) * 0.2).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[k // 2] * 4, group=groups),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, size, size])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    matmul = next(kernel for kernel in kernels_matching_onnxruntime(proto, 2) if kernel.n_reduce)
    # the reduce's output axes end in the positions (flat, or rows and columns where it reads
    # a channels-last copy), then the channels: the channels are the lanes
    assert matmul.domain[matmul.n_out - 1] == cout // groups
    assert math.prod(matmul.domain[2:matmul.n_out - 1]) == size * size


def _conv_model(cin, cout, k, width, groups=1, dilation=1, height=3, strides=(1, 1)):
    """A convolution (padded to keep the map's size at stride 1) and a ReLU; width and height
    are the output's."""
    w = (RNG.standard_normal((cout, cin // groups, k, k)) * 0.2).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    pad = dilation * (k // 2)
    in_size = [(o - 1) * s + dilation * (k - 1) + 1 - 2 * pad
               for o, s in zip((height, width), strides)]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4, group=groups,
                              dilations=[dilation] * 2, strides=list(strides)),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, *in_size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, height, width])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _lanes() -> int:
    from tunesearch.runtime.device import get_device
    return get_device("cpu").info().target.lanes(4)


def _row_columns(channels: int) -> int:
    """Output columns from which the CPU target reads a convolution's windows in place."""
    from tunesearch.lowering.conv import (DIRECT_ROW_VECTORS, FEW_CHANNELS_ROW_VECTORS,
                                      FEW_CHANNELS_VECTORS)
    lanes = _lanes()
    return (DIRECT_ROW_VECTORS if channels > FEW_CHANNELS_VECTORS * lanes
            else FEW_CHANNELS_ROW_VECTORS) * lanes


def _channels(which: str) -> int:
    """A few output channels, or more than FEW_CHANNELS_VECTORS vectors of them (70 at
    AVX-512, 38 at AVX2, 22 at SSE4)."""
    from tunesearch.lowering.conv import FEW_CHANNELS_VECTORS
    return 6 if which == "few" else FEW_CHANNELS_VECTORS * _lanes() + 6


@pytest.mark.parametrize("k,groups,dilation,channels", [
    (3, 1, 1, "few"), (3, 2, 2, "few"), (5, 1, 1, "few"), (3, 1, 1, "many")])
def test_wide_rows_read_the_windows_in_place_and_match_onnxruntime(k, groups, dilation, channels):
    """Output rows of at least DIRECT_ROW_VECTORS vectors (FEW_CHANNELS_ROW_VECTORS with at
    most FEW_CHANNELS_VECTORS vectors of output channels), plus a partial one: one reduce over channel x kernel
    reading the padded input in place, no im2col copy."""
    # past the threshold by half a vector
    cout = _channels(channels)
    width = _row_columns(cout // groups) + max(1, _lanes() // 2)
    kernels = kernels_matching_onnxruntime(_conv_model(4, cout, k, width, groups, dilation), 3)
    conv = next(kernel for kernel in kernels if kernel.n_reduce)
    assert conv.n_reduce == 3 and conv.domain[conv.n_out - 2:] == (3, width, 4 // groups, k, k)
    # the padded input, then the convolution: nothing the size of the windows is written
    assert len(kernels) == 2, [kernel.name for kernel in kernels]


def _runs_through_an_im2col_copy(cout: int, width: int, seed: int) -> None:
    """A 3x3 convolution of 4 channels into cout over rows of width columns matches
    onnxruntime and runs as one im2col copy and a matmul over [positions, channel x kernel]."""
    kernels = kernels_matching_onnxruntime(_conv_model(4, cout, 3, width), seed)
    conv = next(kernel for kernel in kernels if kernel.n_reduce)
    assert conv.n_reduce == 1 and conv.domain[conv.n_out - 1:] == (3 * width, 4 * 9)


def test_few_channel_rows_with_an_odd_tail_read_the_windows_in_place():
    """Three vectors and an odd part of one (55 columns at AVX-512): the tail block runs as
    whole vectors shifted back (render/block_calls.py shifted_tails), so the windows are read
    in place as for a row that ends in whole half vectors."""
    width = _row_columns(6) + max(1, _lanes() // 2) - 1
    kernels = kernels_matching_onnxruntime(_conv_model(4, 6, 3, width), 5)
    conv = next(kernel for kernel in kernels if kernel.n_reduce)
    assert conv.n_reduce == 3 and conv.domain[conv.n_out - 1] == width
    assert len(kernels) == 2, [kernel.name for kernel in kernels]


@pytest.mark.parametrize("channels", ["few", "many"])
def test_rows_of_fewer_vectors_go_through_an_im2col_copy(channels):
    cout = _channels(channels)
    _runs_through_an_im2col_copy(cout, _row_columns(cout) - 1, seed=4)


@pytest.mark.parametrize("k,groups,dilation", [(7, 2, 1), (5, 2, 2)])
def test_strided_wide_rows_read_a_copy_by_kernel_column(k, groups, dilation):
    """A convolution of stride 2 whose kernel spans at least twice the stride over wide
    output rows, whose window rows would read runs of a channels-last copy shorter than a
    cache line (two channels a group): the padded input, its copy by kernel column (each
    input row once per kernel column, not once per tap as im2col's), then one reduce over
    channel x kernel reading that copy's rows in place (runs that start on a cache line)."""
    cout, height = 16, 5
    width = _row_columns(cout // groups) + max(1, _lanes() // 2)
    proto = _conv_model(4, cout, k, width, groups, dilation, height, strides=(2, 2))
    kernels = kernels_matching_onnxruntime(proto, 6)
    assert len(kernels) == 3, [kernel.name for kernel in kernels]
    pad, runs, conv = kernels
    rows = (height - 1) * 2 + dilation * (k - 1) + 1
    # each run padded to whole cache lines
    from tunesearch.runtime.device import get_device
    per_line = get_device("cpu").info().target.l1d.line // 4
    assert runs.n_reduce == 0 and runs.domain == (1, 4, rows, k, -(-width // per_line) * per_line)
    assert conv.n_reduce == 3 and conv.domain[conv.n_out - 2:] == (height, width, 4 // groups, k, k)


def test_a_stride_down_the_columns_only_reads_the_windows_in_place():
    """Stride 2 between rows, 1 along them: a row of windows is still a run of the padded
    input, read in place with no copy of it."""
    width = _row_columns(6) + max(1, _lanes() // 2)
    kernels = kernels_matching_onnxruntime(
        _conv_model(4, 6, 3, width, height=4, strides=(2, 1)), 7)
    conv = next(kernel for kernel in kernels if kernel.n_reduce)
    assert conv.n_reduce == 3 and conv.domain[conv.n_out - 2:] == (4, width, 4, 3, 3)
    assert len(kernels) == 2, [kernel.name for kernel in kernels]


def test_a_stride_as_long_as_half_the_kernel_goes_through_an_im2col_copy():
    """A 3x3 convolution of stride 2 (squeezenet's first): a copy by kernel column would hold
    two thirds of im2col's, and the matmul over the im2col copy ran faster."""
    width = _row_columns(6) + max(1, _lanes() // 2)
    kernels = kernels_matching_onnxruntime(
        _conv_model(4, 6, 3, width, height=3, strides=(2, 2)), 8)
    conv = next(kernel for kernel in kernels if kernel.n_reduce)
    assert conv.n_reduce == 1 and conv.domain[conv.n_out - 1:] == (3 * width, 4 * 9)


@pytest.mark.parametrize("k,groups,dilation,strides", [
    (3, 1, 1, (1, 1)), (3, 2, 1, (1, 1)), (3, 1, 2, (1, 1)), (3, 1, 1, (2, 2)),
    (5, 4, 1, (1, 2))])
def test_channels_on_lanes_over_long_rows_read_a_channels_last_copy(k, groups, dilation,
                                                                     strides):
    """More output channels than positions, over output rows that hold two register blocks
    of the largest height (cpu_model.MAX_BLOCK_ROWS): the padded input copied once channels
    last, then one reduce whose rows are the positions of an output row and whose columns are
    the output channels, reading that copy in place. Nothing the size of im2col's copy is
    written, and a window's last-axis taps and channels are one reduce axis where they are
    one contiguous run (one group, no dilation)."""
    from tunesearch.space.cpu_model import MAX_BLOCK_ROWS
    cin, rc, height, width = 16 * groups, 96, 2, 2 * MAX_BLOCK_ROWS
    proto = _conv_model(cin, rc * groups, k, width, groups, dilation, height, strides)
    kernels = kernels_matching_onnxruntime(proto, 9)
    copy, conv, *rest = kernels
    assert copy.n_reduce == 0 and copy.domain[-1] == cin  # channels last
    # at most the output moved back channels first after it (with several groups)
    assert all(kernel.n_reduce == 0 and kernel.buffers[0].size == rc * groups * height * width
               for kernel in rest), [kernel.name for kernel in kernels]
    assert len(rest) == (groups > 1)
    cig = cin // groups
    taps = (k, k * cig) if groups == 1 and dilation == 1 else (k, k, cig)
    assert conv.domain == (1, groups, height, width, rc, *taps)


def test_channels_on_lanes_with_a_weight_input_read_a_channels_last_copy():
    """The weight an input of the graph, not a constant: moved to [taps x channels, output
    channels] in the graph rather than on the host, with the same result."""
    from tunesearch.space.cpu_model import MAX_BLOCK_ROWS
    width = 2 * MAX_BLOCK_ROWS
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4)]
    graph = helper.make_graph(
        nodes, "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 2, width]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [96, 8, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 96, 2, width])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    conv = next(kernel for kernel in kernels_matching_onnxruntime(proto, 10) if kernel.n_reduce)
    assert conv.domain == (1, 1, 2, width, 96, 3, 24)


def test_channels_on_lanes_over_short_rows_go_through_an_im2col_copy():
    """Output rows too short for two register blocks, whose block along one row (a single
    row here) is smaller than the flat matmul's: the flat matmul over [positions, channel x
    kernel] of an im2col copy."""
    kernels = kernels_matching_onnxruntime(_conv_model(8, 96, 3, 1, height=3), 11)
    conv = next(kernel for kernel in kernels if kernel.n_reduce)
    assert conv.domain == (1, 1, 3, 96, 72)


def test_a_weight_that_every_output_row_reads_is_packed_by_the_plan():
    """A channels-last convolution whose register block is a whole output row: the row blocks
    that read the weight's column sliver count along every output axis the weight does not
    vary on (the rows of the map), so the weight is packed once, when the plan is built."""
    from tunesearch.space.cpu_model import MAX_BLOCK_ROWS
    from tunesearch.space.spaces import space_for
    width = 2 * MAX_BLOCK_ROWS
    from tunesearch.runtime.device import get_device
    model = tox.load(_conv_model(8, 96, 3, width, height=2), device="cpu")
    model(model.random_inputs(12))
    plan = next(iter(model._plans.values()))
    (step, constants), = [(step, c) for step, c in zip(plan.steps, plan.constant_inputs())
                          if step.kernel.n_reduce]
    assert step.kernel.domain == (1, 1, 2, width, 96, 3, 24)
    weight = next(i for i in constants if step.kernel.buffers[i].size == 96 * 72)
    assert weight in step.choice.config.as_dict()["pack"], step.choice.config
    target = get_device("cpu").info().target
    assert step.choice.config == space_for(step.kernel, target, constants).default()
    # a block of a whole output row: the rows of the map still read the sliver again
    from tunesearch.space.cpu_matmul import _weight_read_again
    kernel = step.kernel
    row_block = [1, 1, 1, width, 16] + [1] * kernel.n_reduce
    assert _weight_read_again(kernel, weight, row_block, constants)
    assert not _weight_read_again(kernel, weight, [1, 1, 2, width, 16], constants)


def _long_rows_not_read_in_place(cin: int) -> tuple[int, int, int]:
    """(output channels, width, height) of a convolution with more positions than output
    channels whose windows are not read in place (rows under DIRECT_ROW_VECTORS vectors, more
    than FEW_CHANNELS_VECTORS vectors of channels) over rows that hold two register blocks of
    the matmul's rows."""
    from tunesearch.lowering.conv import DIRECT_ROW_VECTORS, FEW_CHANNELS_VECTORS
    from tunesearch.runtime.device import get_device
    from tunesearch.space.cpu_space import matmul_block
    lanes, height = _lanes(), 4
    cout, width = (FEW_CHANNELS_VECTORS + 1) * lanes, DIRECT_ROW_VECTORS * lanes - 1
    block = matmul_block(get_device("cpu").info().target, width * height, cout, cin * 9)
    if width < 2 * block.rows or cout < block.columns:
        pytest.skip(f"rows of {width} hold fewer than two blocks of {block.rows} here")
    return cout, width, height


def test_positions_on_lanes_over_rows_not_read_in_place_read_a_channels_last_copy():
    """More positions than output channels, but rows the windows are not read in place from
    (an im2col copy before): the channels-last copy and the reduce over it, the output
    channels on the lanes (at least a register block's columns of them)."""
    cout, width, height = _long_rows_not_read_in_place(16)
    kernels = kernels_matching_onnxruntime(_conv_model(16, cout, 3, width, height=height), 13)
    assert len(kernels) == 2, [kernel.name for kernel in kernels]
    copy, conv = kernels
    assert copy.n_reduce == 0 and copy.domain[-1] == 16
    assert conv.domain == (1, 1, height, width, cout, 3, 48)


def test_a_run_shorter_than_a_cache_line_goes_through_an_im2col_copy():
    """Three input channels (a first convolution): a window's row is a run of 9 floats of a
    channels-last copy, less than a cache line a step, with a reduce of 27 against the
    output written transposed: the im2col copy and the flat matmul, its output channels
    (whole vectors of them) on the lanes (conv._first_channels_last)."""
    cout, width, height = _long_rows_not_read_in_place(3)
    kernels = kernels_matching_onnxruntime(_conv_model(3, cout, 3, width, height=height), 14)
    conv = next(kernel for kernel in kernels if kernel.n_reduce)
    assert conv.domain == (1, 1, height * width, cout, 27)


def _row_blocks(channels: int, depth: int, size: int):
    """The register blocks this target's matmul takes for a convolution into `channels` over
    a size x size map with a reduce of `depth`: the flat one over every position, the one
    along one output row, and whether the second keeps as many accumulators busy, edges
    counted (the test lowering/conv._channels_last makes of rows shorter than two flat blocks)."""
    from tunesearch.runtime.device import get_device
    from tunesearch.space.cpu_model import useful_accumulators
    from tunesearch.space.cpu_space import matmul_block
    target = get_device("cpu").info().target
    flat = matmul_block(target, size * size, channels, depth)
    row = matmul_block(target, size, channels, depth)
    return flat, row, useful_accumulators(row, size) >= useful_accumulators(flat, size * size)


def test_a_row_as_wide_as_the_flat_block_reads_a_channels_last_copy():
    """Output rows shorter than two of the flat matmul's row blocks, where the block along
    one row still keeps as many accumulators busy (densenet121's 3x3 convolutions of 128 channels
    into 32 over 14x14 maps at AVX-512: 14 x 32 against 12 x 32): the channels-last copy and
    its reduce, no im2col copy."""
    cin, cout, size = 16, 2 * _lanes(), 14
    flat, row, row_as_busy = _row_blocks(cout, cin * 9, size)
    if size >= 2 * flat.rows or not row_as_busy:
        pytest.skip(f"blocks {flat} and {row} here")
    kernels = kernels_matching_onnxruntime(_conv_model(cin, cout, 3, size, height=size), 15)
    assert len(kernels) == 2, [kernel.name for kernel in kernels]
    assert kernels[1].domain == (1, 1, size, size, cout, 3, 3 * cin)


@pytest.mark.parametrize("strides, groups, weight_input", [
    (1, 1, False), (2, 1, False), (1, 2, False), (1, 1, True)])
def test_an_im2col_copy_of_a_channels_last_value_runs_along_its_channels(strides, groups,
                                                                         weight_input):
    """A 3x3 convolution over a 7x7 map of a value stored channels last (the output of one
    with its channels on the lanes), too short a row to read in place: its im2col copy is
    made from the channels-last padded copy, laid out [positions, taps x channels], each
    tap's channels one run (no channels-first copy between), and the weight (a constant or
    an input of the graph) follows that order."""
    cin, mid, size = 16, 96, 7 * strides

    def too_short(channels: int) -> bool:
        """Whether output rows of 7 are too short for the channels-last read at this target:
        a row holds less than two flat blocks, and its own block keeps fewer accumulators
        busy. The channels outnumber the 49 positions: they are the im2col matmul's lanes."""
        flat, _, row_as_busy = _row_blocks(channels, mid // groups * 9, 7)
        return channels > 49 and 7 < 2 * flat.rows and not row_as_busy

    # 128 output channels at AVX-512; at AVX2 a 4 x 24 block along a row keeps more busy
    # than the flat 5 x 16 over 128 channels (and over 64 a group), 192 not
    cout = next((c for c in range(128, 1025, 64) if too_short(c // groups)), None)
    if cout is None:
        pytest.skip("a row of 7 keeps a register block as busy as the flat matmul's for "
                    "every count of output channels tried here")
    w1 = (RNG.standard_normal((mid, cin, 3, 3)) * 0.2).astype(np.float32)
    w2 = (RNG.standard_normal((cout, mid // groups, 3, 3)) * 0.1).astype(np.float32)
    b2 = RNG.standard_normal(cout).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "w2", "b2"], ["y"], pads=[1] * 4, group=groups,
                              strides=[strides] * 2)]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b2, "b2")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, size, size])]
    if weight_input:
        inputs.append(helper.make_tensor_value_info("w2", TensorProto.FLOAT, list(w2.shape)))
    else:
        inits.append(numpy_helper.from_array(w2, "w2"))
    graph = helper.make_graph(
        nodes, "conv", inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, 7, 7])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    kernels = kernels_matching_onnxruntime(proto, 12)
    last = max(i for i, kernel in enumerate(kernels) if kernel.n_reduce)
    matmul = kernels[last]
    assert matmul.domain[-1] == mid // groups * 9  # [positions, taps x channels] rows
    copies = [kernel for kernel in kernels[:last] if not kernel.n_reduce
              and kernel.domain[-1] == mid // groups and kernel.domain[-3:-1] == (3, 3)]
    assert copies, [kernel.name for kernel in kernels]  # the im2col copy: taps, then channels
    # no channels-first copy of the 96 channels: every copy before it keeps them last
    for kernel in kernels[:last]:
        if not kernel.n_reduce and mid in kernel.domain:
            assert kernel.domain[-1] in (mid, mid // groups), kernel.name


@pytest.mark.parametrize("k,strides,dilation", [(3, (1, 1), 1), (5, (2, 2), 1), (3, (1, 1), 2)])
def test_a_depthwise_convolution_runs_along_the_channels(k, strides, dilation):
    """A depthwise convolution of at least a vector of channels (a pointwise one before it and
    after it, as in MobileNet's blocks) reduces its windows over the taps alone, the channels
    its last output axis (the lanes), read from a channels-last padded copy of the first's
    output; the pointwise convolution after it reads its output as it lies."""
    channels = 2 * _lanes() + 3
    kernels = kernels_matching_onnxruntime(_depthwise_block(channels, k, strides, dilation), 6)
    depthwise = [kernel for kernel in kernels if kernel.n_reduce == 2]
    assert len(depthwise) == 1, [kernel.name for kernel in kernels]
    assert depthwise[0].domain[-3:] == (channels, k, k)
    # the first convolution, the padded copy, the depthwise one and the last: no transposes
    assert len(kernels) == 4, [kernel.name for kernel in kernels]


def test_a_squeeze_excitation_after_a_depthwise_convolution_runs_along_the_channels():
    """EfficientNet's block: SiLU on the depthwise convolution's output, read by the squeeze
    (a mean over the positions) and by the excitation's product. Every kernel of more than one
    output axis ends in the channels, its lanes: the SiLU written channels last once ended in
    the size-1 batch axis instead, one element at a time."""
    channels = 2 * _lanes()
    kernels = kernels_matching_onnxruntime(_depthwise_block(channels, 3, (1, 1), 1, se=True), 7)
    ends = [kernel.domain[kernel.n_out - 1] for kernel in kernels if kernel.n_out > 1
            and math.prod(kernel.domain[:kernel.n_out]) > channels]
    assert ends and all(end != 1 for end in ends), [kernel.name for kernel in kernels]


def _depthwise_block(channels: int, k: int, strides, dilation: int, se: bool = False):
    """A pointwise convolution from 4 channels, HardSwish, a depthwise convolution, ReLU (or
    SiLU and a squeeze-excitation), and a pointwise convolution into 6 channels."""
    w1 = (RNG.standard_normal((channels, 4, 1, 1)) * 0.5).astype(np.float32)
    dw = (RNG.standard_normal((channels, 1, k, k)) * 0.5).astype(np.float32)
    w2 = (RNG.standard_normal((6, channels, 1, 1)) * 0.2).astype(np.float32)
    pad = dilation * (k // 2)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("HardSwish", ["a"], ["h"]),
             helper.make_node("Conv", ["h", "dw"], ["d"], group=channels, pads=[pad] * 4,
                              strides=list(strides), dilations=[dilation] * 2),
             helper.make_node("Relu", ["d"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"])]
    if se:
        nodes[3:4] = [helper.make_node("Sigmoid", ["d"], ["s"]),
                      helper.make_node("Mul", ["d", "s"], ["silu"]),
                      helper.make_node("GlobalAveragePool", ["silu"], ["g"]),
                      helper.make_node("Sigmoid", ["g"], ["e"]),
                      helper.make_node("Mul", ["silu", "e"], ["r"])]
    size = 9
    out = [(size + 2 * pad - dilation * (k - 1) - 1) // s + 1 for s in strides]
    graph = helper.make_graph(
        nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, *out])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (dw, "dw"), (w2, "w2"))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
