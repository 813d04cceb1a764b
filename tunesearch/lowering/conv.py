"""Convolutions in the form the device runs best, chosen from the graph and the target model.

A convolution is one reduce: its windows times the weight, summed over channel x taps. Which
layout the windows are read from is chosen here, for every front end alike (`Tensor.conv2d`,
ONNX Conv and ConvTranspose): read in place from the padded input (a pool, a depthwise
convolution of few channels, or on a CPU one whose output rows span several vectors), along the
channels of a channels-last padded copy (on a CPU a depthwise convolution of a vector of
channels or more, as a pool over a channels-last value), from a channels-last copy
with the output channels on the vector lanes (where those fill a register block or outnumber
the positions), or through one im2col copy laid out with the positions or the output channels
contiguous, whichever is longer. A channels-last output stays channels last: a pointwise
convolution reads it as it lies, a pool runs along its channels (windows.pool_windows), so a
network's layers move no data between layouts. docs/lowering.md keeps the measurements behind
each threshold.

Weights known on the host (numpy arrays) are laid out for their form there, once; a Tensor weight
made from an array is laid out the same way by a copy that a plan makes once; a computed weight
or an input is read through views.
"""
from __future__ import annotations

import math

import numpy as np

from tunesearch.errors import ShapeError
from tunesearch.lowering.windows import (channel_windows, channels_by_taps, column_runs,
                                         output_sizes, padded_channels_last,
                                         stored_channels_last, taps_by_channels)
from tunesearch.runtime.device import get_device
from tunesearch.space.cpu_model import useful_accumulators
from tunesearch.space.cpu_space import matmul_block

# a convolution reads its windows in place where an output row spans at least this many vectors,
# or at least FEW_CHANNELS_ROW_VECTORS where it has at most FEW_CHANNELS_VECTORS vectors of
# output channels (the copy costs its bytes over fewer flops the fewer channels share it)
DIRECT_ROW_VECTORS = 4
FEW_CHANNELS_ROW_VECTORS = 1
FEW_CHANNELS_VECTORS = 4


def convolution(x, w, bias, groups: int, strides, dilations, pads):
    """x (batch, channels, spatial...) convolved with w (out channels, channels / groups,
    kernel...), a Tensor or a numpy array known on the host; bias likewise or None; pads one
    (before, after) pair per spatial axis."""
    n = x.ndim - 2
    if w.ndim != n + 2:
        raise ShapeError(f"conv: input {tuple(x.shape)} and weight {tuple(w.shape)} need "
                         f"{n + 2} dims each")
    kernel = tuple(w.shape[2:])
    batch, cin = x.shape[:2]
    cout, cig = w.shape[:2]
    if cin != cig * groups or cout % groups:
        raise ShapeError(f"conv: input channels {cin} do not fit weight {tuple(w.shape)} with "
                         f"groups={groups}")
    rc = cout // groups
    outs = output_sizes(x.shape[2:], kernel, strides, dilations, pads)
    geometry = (strides, dilations, pads, outs)
    out = _convolve(x, w, groups, cig, rc, kernel, geometry)
    return _with_bias(x, out.reshape(batch, cout, *outs), bias)


def _convolve(x, w, groups: int, cig: int, rc: int, kernel: tuple[int, ...], geometry):
    strides, dilations, pads, outs = geometry
    n, batch = len(outs), x.shape[0]
    positions, depth = math.prod(outs), cig * math.prod(kernel)
    order = stored_channels_last(x)
    # a pointwise convolution of a value laid out channels last: a matmul of its rows (the
    # positions) by the weight, the output channels on the lanes, channels last too
    pointwise_last = all(k == 1 for k in kernel) and order is not None
    if cig > 1 and (pointwise_last or _channels_last(x, order, groups, cig, rc, outs, depth,
                                                     kernel, strides, dilations)):
        if pointwise_last:
            x = x.materialize(order)
        return _conv_channels_last(x, w, groups, cig, rc, kernel, geometry)
    cols = x.windows(kernel, strides, dilations, pads, outs)
    if cig > 1 and _channels_on_lanes(rc, positions):
        taps_first = order is not None  # stored channels last: its copy runs along them
        rows = taps_by_channels(x, groups, cig, outs, kernel, strides, dilations, pads) \
            if taps_first else channels_by_taps(cols, groups, cig, outs, kernel)
        return _conv_channels_on_lanes(x, rows, w, groups, cig, rc, kernel, taps_first)
    if all(k == 1 for k in kernel):
        cols = cols.reshape(batch, groups, 1, cig, positions)
        return (cols * _weight(x, w, (1, groups, rc, cig, 1))).sum(3)
    if _direct(x, cig, rc, outs, strides, kernel):
        # the windows read in place: a row of them is a run of the padded input, or of its
        # copy by kernel column where the windows step along the rows by more than one
        if strides[-1] > 1:
            cols = column_runs(x, kernel, strides, dilations, pads, outs)
        cols = cols.reshape(batch, groups, 1, cig, *outs, *kernel)
        weight = _weight(x, w, (1, groups, rc, cig, *([1] * n), *kernel))
        return (cols * weight).sum((3, *range(4 + n, 4 + 2 * n)))
    if cig == 1 and rc == 1 and _depthwise_channels_last(x, groups):
        return _depthwise_last(x, w, groups, kernel, geometry)
    if cig == 1:
        # depthwise: each output channel reads one input channel's windows in place, no copy;
        # the window axes are the whole reduce and the positions stay the vector lanes
        cols = cols.reshape(batch, groups, 1, *outs, *kernel)
        weight = _weight(x, w, (1, groups, rc, *([1] * n), *kernel))
        return (cols * weight).sum(tuple(range(3 + n, 3 + 2 * n)))
    if _first_channels_last(x, groups, cig, rc, kernel, dilations):
        rows = channels_by_taps(cols, groups, cig, outs, kernel)
        return _conv_channels_on_lanes(x, rows, w, groups, cig, rc, kernel)
    # one im2col copy laid out [channel x kernel, positions]: the positions are contiguous
    # in the copy's reads and writes and in the matmul's column operand and output
    cols = cols.reshape(batch, groups, cig, *outs, *kernel)
    order = [0, 1, 2] + [3 + n + i for i in range(n)] + [3 + i for i in range(n)]
    cols = cols.permute(order).reshape(batch, groups, 1, depth, positions)
    return (cols * _weight(x, w, (1, groups, rc, depth, 1))).sum(3)


def _host(x, array: np.ndarray):
    """A constant known on the host, as a value on x's device."""
    return type(x)(np.ascontiguousarray(array), device=x.device, dtype=x.dtype)


def _fixed(w) -> bool:
    """Whether w's values are fixed before any call: an array known on the host, or a Tensor
    read whole from a buffer made from one (a weight), which a plan lays out once."""
    return isinstance(w, np.ndarray) or w.is_constant()


def _arranged(x, w, shape, order):
    """A fixed w reshaped to shape with its axes put in order, and laid out so: on the host
    for an array, in a copy for a Tensor (which a plan makes once, when it is built), so both
    front ends' kernels read the same layout."""
    if isinstance(w, np.ndarray):
        return _host(x, w.reshape(shape).transpose(order))
    laid = w.reshape(shape).permute(*order)
    steps = [math.prod(laid.shape[i + 1:]) for i in range(laid.ndim)]
    return laid.as_strided(list(laid.shape), steps)  # the identity view of a row-major copy


def _weight(x, w, shape):
    return _host(x, w.reshape(shape)) if isinstance(w, np.ndarray) else w.reshape(shape)


def _with_bias(x, out, bias):
    if bias is None:
        return out
    shape = (1, out.shape[1], *([1] * (out.ndim - 2)))
    return out + (_host(x, bias.reshape(shape)) if isinstance(bias, np.ndarray)
                  else bias.reshape(shape))


def _cpu_target(x):
    target = get_device(x.device).info().target
    return target if target.family == "cpu" else None


def _direct(x, cig: int, rc: int, outs: list[int], strides, kernel: tuple[int, ...]) -> bool:
    """Whether a 2-d convolution runs as one reduce over the windows read in place (no
    im2col copy): on a CPU, where an output row spans at least DIRECT_ROW_VECTORS vectors.
    With stride 1 along the rows a row of windows is a contiguous run of the padded input,
    the vector lanes; with a longer stride it is one of the padded input's copy by kernel
    column (column_runs), where that copy is at most half the size of im2col's. Shorter rows
    leave the lanes part empty and the register blocks small, except where few output
    channels share the copy."""
    if cig == 1 or len(outs) != 2:
        return False
    if strides[-1] > 1 and kernel[0] < 2 * strides[0]:
        return False
    target = _cpu_target(x)
    if target is None:
        return False
    lanes = target.lanes(x.dtype.itemsize)
    if outs[-1] >= DIRECT_ROW_VECTORS * lanes:
        return True
    return rc <= FEW_CHANNELS_VECTORS * lanes and outs[-1] >= FEW_CHANNELS_ROW_VECTORS * lanes


def _depthwise_channels_last(x, channels: int) -> bool:
    """Whether a depthwise convolution (one input channel per output channel) runs with the
    channels on the vector lanes, from a channels-last copy of its input (_depthwise_last):
    on a CPU, where the channels fill at least a vector."""
    target = _cpu_target(x)
    return target is not None and channels >= target.lanes(x.dtype.itemsize)


def _depthwise_last(x, w, channels: int, kernel: tuple[int, ...], geometry):
    """A depthwise convolution as a pool is over a value stored channels last: the windows
    [batch, outs..., channels, taps...] read in place from the channels-last padded copy,
    times the weight laid out [taps..., channels], summed over the taps; the result is
    stored channels last, so the pointwise convolution after it reads it as it lies."""
    strides, dilations, pads, outs = geometry
    n = len(outs)
    wins, layout = channel_windows(x, kernel, strides, dilations, pads, outs)
    if _fixed(w):  # laid out [taps..., channels], once
        w = _arranged(x, w, (channels, *kernel), (*range(1, n + 1), 0))
    else:
        w = w.reshape(channels, *kernel).permute(*range(1, n + 1), 0)
    weight = w.reshape(1, *([1] * n), *kernel, channels).permute(
        *range(n + 1), 2 * n + 1, *range(n + 1, 2 * n + 1))
    return layout((wins * weight).sum(tuple(range(n + 2, 2 * n + 2))))


def _channels_on_lanes(channels: int, positions: int) -> bool:
    """Whether a convolution's matmul puts the output channels on the vector lanes rather than
    the positions: where there are more of them, so the lanes fill whole register blocks."""
    return positions < channels


def _channels_last(x, order, groups: int, cig: int, rc: int, outs: list[int], depth: int,
                   kernel: tuple[int, ...], strides, dilations) -> bool:
    """Whether a convolution reads its windows in place from a channels-last copy of its
    input, its output channels on the lanes (_conv_channels_last), rather than from an
    im2col copy: on a CPU, for a kernel of more than one tap whose window rows read runs of
    the copy at least a cache line long, where an output row holds two of the row blocks
    the im2col matmul would take or a block along one output row keeps as many accumulators
    busy; then where the output channels outnumber the positions, or fill a register
    block's columns and the windows would not be read in place otherwise (or only through a
    copy by kernel column), or the input is stored channels last already. The register
    block's rows run along one output row (the padding lies between rows)."""
    if all(k == 1 for k in kernel) or len(outs) < 2:
        return False
    target = _cpu_target(x)
    if target is None:
        return False
    positions, itemsize = math.prod(outs), x.dtype.itemsize
    if not _runs_a_line(target, itemsize, groups, cig, kernel, dilations):
        return False
    block = matmul_block(target, positions, rc, depth, itemsize)
    if outs[-1] < 2 * block.rows:
        # the block along one output row keeping as many accumulators busy all the same
        row = matmul_block(target, outs[-1], rc, depth, itemsize)
        if useful_accumulators(row, outs[-1]) < useful_accumulators(block, positions):
            return False
    return _channels_on_lanes(rc, positions) or rc >= block.columns and (
        strides[-1] > 1 or order is not None
        or not _direct(x, cig, rc, outs, strides, kernel))


def _first_channels_last(x, groups: int, cig: int, rc: int, kernel: tuple[int, ...],
                         dilations) -> bool:
    """Whether a convolution whose windows go through an im2col copy because its input has
    too few channels for the channels-last read (a first convolution of three channels)
    still puts its output channels on the lanes, so that its output is stored channels last
    and the pools and convolutions after it read it as it lies: on a CPU, where the channels
    are whole vectors, at least FEW_CHANNELS_VECTORS of them."""
    target = _cpu_target(x)
    if target is None or cig == 1:
        return False
    lanes = target.lanes(x.dtype.itemsize)
    return rc % lanes == 0 and rc >= FEW_CHANNELS_VECTORS * lanes and \
        not _runs_a_line(target, x.dtype.itemsize, groups, cig, kernel, dilations)


def _runs_a_line(target, itemsize: int, groups: int, cig: int, kernel: tuple[int, ...],
                 dilations) -> bool:
    """Whether a window's row reads a run of a channels-last copy (_run) at least a cache
    line long."""
    return _run(groups, cig, kernel, dilations) * itemsize >= target.l1d.line


def _run(groups: int, cig: int, kernel: tuple[int, ...], dilations) -> int:
    """The contiguous run of a channels-last copy a window's row reads: its last axis's taps
    and its channels where there is one group and no dilation along that axis, else the
    channels."""
    return kernel[-1] * cig if groups == 1 and dilations[-1] == 1 else cig


def _conv_channels_last(x, w, groups: int, cig: int, rc: int, kernel: tuple[int, ...],
                        geometry):
    """A convolution with the output channels on the vector lanes, over windows read in place
    from a copy of the padded input laid out channels last ([batch, padded spatial...,
    channels]), which holds the input once where an im2col copy holds it once per tap. A
    window's taps along its last axis and its channels are one contiguous run, one reduce
    axis (where there is one group and no dilation along it). The weight, laid out [taps x
    channels, output channels], is the column operand; the result [batch, groups,
    positions..., output channels] is stored channels last. A pointwise convolution of a
    value stored channels last reads it as it lies, its positions one axis of the matmul's
    rows."""
    strides, dilations, pads, outs = geometry
    n, batch = len(outs), x.shape[0]
    padded, batch_step, place_steps, tap_steps = padded_channels_last(
        x, kernel, strides, dilations, pads, outs)
    taps = list(kernel)
    run = _run(groups, cig, kernel, dilations)
    if all(k == 1 for k in kernel):  # a pointwise convolution: no taps
        taps, tap_steps = [], []
    elif run > cig:  # the last axis's taps and the channels: one run
        taps, tap_steps = taps[:-1], tap_steps[:-1]
    m = len(taps)
    cols = padded.as_strided([batch, groups, *outs, 1, *taps, run],
                             [batch_step, cig, *place_steps, 0, *tap_steps, 1])
    p = n
    if not taps:  # a pointwise convolution: one axis of positions, a copy of them if strided
        cols, p = cols.reshape(batch, groups, math.prod(outs), 1, run), 1
    if _fixed(w):  # laid out [groups, kernel taps, channels, output channels], once
        w = _arranged(x, w, (groups, rc, cig, *kernel), (0, *[3 + i for i in range(n)], 2, 1))
        weight = w.reshape(1, groups, *([1] * p), *taps, run, rc)
        weight = weight.permute(*range(2 + p), 2 + p + m + 1, *range(2 + p, 2 + p + m + 1))
    else:
        weight = w.reshape(1, groups, rc, cig, *kernel).permute(0, 1, 2, *[4 + i for i in
                                                                          range(n)], 3)
        weight = weight.reshape(1, groups, *([1] * p), rc, *taps, run)
    out = (cols * weight).sum(tuple(range(2 + p + 1, 2 + p + 2 + m)))
    return out.permute(0, 1, 2 + p, *range(2, 2 + p))


def _conv_channels_on_lanes(x, rows, w, groups: int, cig: int, rc: int,
                            kernel: tuple[int, ...], taps_first: bool = False):
    """The convolution as a matmul over [positions, channel x kernel] x [channel x kernel,
    output channels] (rows: [batch, groups, positions, 1, depth], the depth taps x channel
    where taps_first): the output channels are the vector lanes and the weight is the column
    operand (packed once, when the plan is built); the result is read back transposed."""
    depth = cig * math.prod(kernel)
    if _fixed(w):  # laid out [channel x kernel (taps x channel), output channels], once
        order = (0, 3, 2, 1) if taps_first else (0, 2, 3, 1)
        w = _arranged(x, w, (groups, rc, cig, math.prod(kernel)), order)
        weight = w.reshape(1, groups, 1, depth, rc).permute(0, 1, 2, 4, 3)
    else:
        if taps_first:
            w = w.reshape(groups, rc, cig, math.prod(kernel)).permute(0, 1, 3, 2)
        weight = w.reshape(1, groups, 1, rc, depth)
    out = (rows * weight).sum(4)
    return out.permute(0, 1, 3, 2)
