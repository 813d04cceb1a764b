"""ONNX convolutions, and the window geometry pooling shares.

Windows (the patches a convolution or a pool reads) are a strided view of the padded input: no
copy where a pool, a depthwise convolution or (on a CPU) a stride-1 convolution with output rows
of several vectors reads them, one im2col copy where any other convolution reads them, so that
it is one matmul-like reduce kernel. Its vector lanes run over whichever of the positions and
the output channels is longer: the im2col copy is laid
out [channel x kernel, positions] for the first (the positions contiguous in the copy and in the
matmul's column operand and output), [positions, channel x kernel] for the second (the weight,
transposed on the host, is the column operand, packed once when the plan is built). Over
output rows long enough for two register blocks, the input is instead copied once channels
last and the windows read in place from that copy, the output channels on the lanes
(_conv_channels_last): where they outnumber the positions, and where they fill a register
block's columns and the windows would otherwise go through im2col (_channels_last).

Those convolutions leave their output channels last in memory, and the layout carries on: a
pointwise convolution of such a value reads it as it lies (the positions its rows, the output
channels its lanes, so channels last again), a convolution of it reads a channels-last copy,
a pool runs along its channels (pool_windows), and a value that several nodes read, or a
concatenation of such values, is written to its buffer channels last (stored_channels_last;
the ONNX model's fan-out). The first convolutions start it (a 7x7 of stride 2 reads a
channels-last copy, one of three channels through im2col puts its output channels on the
lanes: _first_channels_last), so a network's layers move no data between layouts.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from tunesearch.onnx.registry import register
from tunesearch.runtime.device import get_device
from tunesearch.space.cpu_model import useful_accumulators
from tunesearch.space.cpu_space import matmul_block
from tunesearch.tensor import Tensor
from tunesearch.tensor.movement import window_pads

# ---- window geometry

def _spatial_pads(ctx, in_sp, kernel, strides, dilations) -> list[tuple[int, int]]:
    n = len(kernel)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for i, k, s, d in zip(in_sp, kernel, strides, dilations):
            total = max((-(-i // s) - 1) * s + (k - 1) * d + 1 - i, 0)
            small = total // 2
            pads.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
        return pads
    if auto == "VALID":
        return [(0, 0)] * n
    flat = ctx.attr("pads", [0] * (2 * n))
    return list(zip(flat[:n], flat[n:]))


def _geometry(ctx, in_sp, kernel, ceil_mode: bool = False):
    """strides, dilations, pads and output sizes of a conv or pool node."""
    n = len(kernel)
    if n != len(in_sp) or any(k < 1 for k in kernel):
        raise ctx.error(f"kernel {list(kernel)} does not fit the input's {len(in_sp)} spatial "
                        "dims (one size of at least 1 for each)")
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    if len(strides) != n or len(dilations) != n or any(v < 1 for v in strides + dilations):
        raise ctx.error(f"strides {strides} and dilations {dilations} need {n} values each, "
                        "of at least 1")
    pads = _spatial_pads(ctx, in_sp, kernel, strides, dilations)
    outs = []
    for i, k, s, d, (b, e) in zip(in_sp, kernel, strides, dilations, pads):
        span = i + b + e - d * (k - 1) - 1
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= i + b:  # the last window must start inside
            o -= 1
        outs.append(o)
    if any(o <= 0 for o in outs):
        raise ctx.error(f"kernel {list(kernel)} does not fit input {list(in_sp)}")
    return strides, dilations, pads, outs


def _weight(ctx, w, shape) -> Tensor:
    return ctx.tensor(np.ascontiguousarray(w).reshape(shape)) if isinstance(w, np.ndarray) \
        else w.reshape(shape)


def conv_nd(ctx, x: Tensor, w, bias, groups: int, strides, dilations, pads) -> Tensor:
    """Convolution as one reduce: im2col windows times the weight, summed over channel x kernel."""
    n = x.ndim - 2
    kernel = tuple(w.shape[2:])
    batch, cin = x.shape[:2]
    cout, cig = w.shape[:2]
    if cin != cig * groups or cout % groups:
        raise ctx.error(f"input channels {cin} do not fit weight {tuple(w.shape)} with "
                        f"group={groups}")
    rc = cout // groups
    outs = []
    for i, k, s, d, (b, e) in zip(x.shape[2:], kernel, strides, dilations, pads):
        outs.append((i + b + e - d * (k - 1) - 1) // s + 1)
    if any(o <= 0 for o in outs):
        raise ctx.error(f"kernel {list(kernel)} does not fit input {list(x.shape[2:])}")
    positions, depth = math.prod(outs), cig * math.prod(kernel)
    order = stored_channels_last(x)
    # a pointwise convolution of a value laid out channels last: a matmul of its rows (the
    # positions) by the weight, the output channels on the lanes, channels last too. Work
    # on a reduce's output (a bias, an activation) is written with that reduce, not redone
    # on the matmul's broadcast operand once for every block of output channels (resnet50's
    # 1x1 convolutions after a 3x3 one: 2.7 against 0.85 ms so). resnet50's kernels, in the
    # plan's order, old and new build in alternating processes (AVX-512 Xeon): 68.8 -> 66.3
    # ms on one thread, 37.2 -> 35.6 on two; its 1x1 convolutions over 14x14 maps 0.94 ->
    # 0.78 ms (256 into 1024 channels) and 0.83 -> 0.70 (1024 into 256), the 3x3 ones'
    # channels-last copies 2.6x faster (no transpose). At AVX2 even (97.5 -> 97.0 / 52.7 ->
    # 52.6 ms): the 1x1 convolutions of 128 into 512 channels over 28x28 maps lose 9%,
    # those of 1024 into 256 win 5-17%.
    pointwise_last = all(k == 1 for k in kernel) and order is not None
    if cig > 1 and (pointwise_last or _channels_last(ctx, x, order, groups, cig, rc, outs,
                                                     depth, kernel, strides, dilations)):
        if pointwise_last:
            x = x.materialize(order)
        out = _conv_channels_last(ctx, x, w, groups, cig, rc, outs, kernel, strides, dilations,
                                  pads)
        return _with_bias(ctx, out.reshape(batch, cout, *outs), bias)
    cols = x.windows(kernel, strides, dilations, pads, outs)
    if cig > 1 and _channels_on_lanes(rc, positions):
        taps_first = order is not None  # stored channels last: its copy runs along them
        rows = _taps_by_channels(x, groups, cig, outs, kernel, strides, dilations, pads) \
            if taps_first else _channels_by_taps(cols, groups, cig, outs, kernel)
        out = _conv_channels_on_lanes(ctx, rows, w, groups, cig, rc, kernel, taps_first)
    elif all(k == 1 for k in kernel):
        cols = cols.reshape(batch, groups, 1, cig, positions)
        out = (cols * _weight(ctx, w, (1, groups, rc, cig, 1))).sum(3)
    elif _direct(ctx, x, cig, rc, outs, strides, kernel):
        # the windows read in place: a row of them is a run of the padded input, or of its
        # copy by kernel column where the windows step along the rows by more than one
        if strides[-1] > 1:
            cols = _column_runs(ctx, x, kernel, strides, dilations, pads, outs)
        cols = cols.reshape(batch, groups, 1, cig, *outs, *kernel)
        weight = _weight(ctx, w, (1, groups, rc, cig, *([1] * n), *kernel))
        out = (cols * weight).sum((3, *range(4 + n, 4 + 2 * n)))
    elif cig == 1:
        # depthwise: each output channel reads one input channel's windows in place, no copy;
        # the window axes are the whole reduce and the positions stay the vector lanes
        cols = cols.reshape(batch, groups, 1, *outs, *kernel)
        weight = _weight(ctx, w, (1, groups, rc, *([1] * n), *kernel))
        out = (cols * weight).sum(tuple(range(3 + n, 3 + 2 * n)))
    elif _first_channels_last(ctx, x, groups, cig, rc, kernel, dilations):
        out = _conv_channels_on_lanes(ctx, _channels_by_taps(cols, groups, cig, outs, kernel),
                                      w, groups, cig, rc, kernel)
    else:
        # one im2col copy laid out [channel x kernel, positions]: the positions are contiguous
        # in the copy's reads and writes and in the matmul's column operand and output
        cols = cols.reshape(batch, groups, cig, *outs, *kernel)
        order = [0, 1, 2] + [3 + n + i for i in range(n)] + [3 + i for i in range(n)]
        cols = cols.permute(order).reshape(batch, groups, 1, depth, positions)
        out = (cols * _weight(ctx, w, (1, groups, rc, depth, 1))).sum(3)
    return _with_bias(ctx, out.reshape(batch, cout, *outs), bias)


def stored_channels_last(x: Tensor) -> tuple[int, ...] | None:
    """The order of x's axes as it lies in memory, where that is channels last (a
    convolution's output with the channels on the vector lanes, or a buffer written from
    one): (0, 2, ..., 1) with its size-1 axes anywhere. None otherwise (channels first, not
    a read of one buffer, fewer than three axes)."""
    order = x.stored_order()
    if order is None or x.ndim < 3:
        return None
    last = (0, *range(2, x.ndim), 1)
    kept = [a for a in order if x.shape[a] != 1]
    if kept != [a for a in last if x.shape[a] != 1] or kept == sorted(kept):
        return None
    return order


def _with_bias(ctx, out: Tensor, bias) -> Tensor:
    if bias is None:
        return out
    return out + ctx.tensor(bias).reshape(1, out.shape[1], *([1] * (out.ndim - 2)))


# a convolution reads its windows in place where an output row spans at least this many vectors,
# or at least FEW_CHANNELS_ROW_VECTORS where it has at most FEW_CHANNELS_VECTORS vectors of
# output channels
DIRECT_ROW_VECTORS = 4
FEW_CHANNELS_ROW_VECTORS = 1
FEW_CHANNELS_VECTORS = 4


def _direct(ctx, x: Tensor, cig: int, rc: int, outs: list[int], strides,
            kernel: tuple[int, ...]) -> bool:
    """Whether a 2-d convolution runs as one reduce over the windows read in place (no
    im2col copy): on a CPU, where an output row spans at least DIRECT_ROW_VECTORS vectors.
    With stride 1 along the rows a row of windows is a contiguous run of the padded input,
    the vector lanes; with a longer stride it is one of the padded input's copy by kernel
    column (_column_runs), where that copy is at most half the size of im2col's (its kernel
    spans at least twice its stride down the columns: the first 7x7 convolution of stride 2
    of resnet50, densenet121 and inception_v1, whose copy is 3.5 times the input against
    im2col's 12). The register block is then a few output channels by whole vectors of a
    row, a tail block taking the rest, an odd rest shifted back to whole vectors
    (render/block_calls.py shifted_tails). Shorter rows leave the lanes part empty and the
    blocks small: a 3x3 convolution over 112 columns ran 2x faster so than its im2col copy
    and matmul (AVX-512), over 56 columns 1.3-1.7x (AVX2), but over 28 columns 0.9x (AVX2,
    128 output channels). The copy costs its bytes over fewer flops the fewer output
    channels share it (2 / channels bytes written a flop), so with at most
    FEW_CHANNELS_VECTORS vectors of output channels rows of FEW_CHANNELS_ROW_VECTORS vectors
    read in place too: over 56 columns at AVX-512 (3.5 vectors) 32 channels ran 1.2x faster
    so, 64 channels 1.16x, 128 channels 1.0x; over 28 columns at AVX2 32 channels 1.13x, 64
    channels 0.97x; over 55 columns at AVX-512 (squeezenet's 64 channels, the tail shifted)
    the same, to 3% faster on two threads; rows of one vector and less than two (AVX-512
    Xeon, in the plan's order, the copy and matmul against the reduce in place):
    densenet121's 3x3 convolutions of 128 channels into 32 over 28x28 maps 9.1 -> 4.7 ms on
    one thread (twelve), 5.6 -> 2.9 on two, inception_v1's 5x5 of 16 into 32 over 27x27 0.19
    -> 0.14 ms, inception_v2's 3x3 of 64 into 64 over 28x28 1.05 -> 1.01 ms and 0.63 -> 0.57,
    densenet121's over 14x14 maps at AVX2 5.9 -> 4.7 ms; rows shorter than a vector lose
    (densenet121's over 14x14 maps at AVX-512, 1.5x slower). The 7x7 convolutions of
    stride 2 (3 channels to 64 over 112x112) took 2.2 instead of 4.4 ms with their copies on
    one thread (AVX-512 Xeon), 2.7 instead of 4.4 at AVX2, and now read a channels-last
    copy instead where its runs are long enough (_channels_last); squeezenet's 3x3 of
    stride 2 (a copy two thirds of im2col's) 0.66 against 0.54 ms, so it keeps the im2col
    copy."""
    if cig == 1 or len(outs) != 2:
        return False
    if strides[-1] > 1 and kernel[0] < 2 * strides[0]:
        return False
    target = get_device(ctx.device).info().target
    if target.family != "cpu":
        return False
    lanes = target.lanes(x.dtype.itemsize)
    if outs[-1] >= DIRECT_ROW_VECTORS * lanes:
        return True
    return rc <= FEW_CHANNELS_VECTORS * lanes and outs[-1] >= FEW_CHANNELS_ROW_VECTORS * lanes


def _column_runs(ctx, x: Tensor, kernel, strides, dilations, pads, outs) -> Tensor:
    """The windows of a 2-d convolution that steps along its rows by more than one, shaped
    as Tensor.windows's (batch, channels, out rows, out columns, kernel rows, kernel
    columns), read from a copy of the padded input laid out [channel, input row, kernel
    column, output column]: entry (c, y, j, o) is the padded input's (c, y, o * stride + j *
    dilation). A row of windows for one kernel tap is then a contiguous run of the copy (the
    vector lanes), as a stride-1 convolution's is of the input itself; the copy holds every
    input row once per kernel column, where im2col holds it once per kernel tap it meets.
    Each run starts on a cache line (padded with zeros to whole lines), so a register
    block's columns take as few lines at every step as the columns need: zfnet512's runs of
    109 columns, unaligned, made the default pack them on every call (1.2x slower)."""
    (oy, ox), (ky, kx), (sy, _), (dy, _) = outs, kernel, strides, dilations
    batch, cin = x.shape[:2]
    per_line = get_device(ctx.device).info().target.l1d.line // x.dtype.itemsize
    width = -(-ox // per_line) * per_line  # a run with its padding
    rows = (oy - 1) * sy + (ky - 1) * dy + 1  # the padded input's rows the windows read
    runs = x.windows([1, kx], [1, strides[1]], [1, dilations[1]], pads, [rows, ox])
    runs = runs.reshape(batch, cin, rows, ox, kx).permute(0, 1, 2, 4, 3)
    runs = runs.pad([(0, 0)] * 4 + [(0, width - ox)])
    line = kx * width  # one input row's runs
    return runs.as_strided([batch, cin, oy, ox, ky, kx],
                           [cin * rows * line, rows * line, sy * line, 1, dy * line, width])


def _channels_on_lanes(channels: int, positions: int) -> bool:
    """Whether a convolution's matmul puts the output channels on the vector lanes rather than
    the positions: where there are more of them, so the lanes fill whole register blocks (a
    7x7 or 14x14 map has 49 or 196 positions: three blocks of 16 and a tail of one, or twelve
    and a tail of four, against 512 or 256 channels). Its output is then read back transposed
    by the next kernel, which costs a pass over an output that is small where this applies
    (resnet50's convolutions: 12% less kernel time)."""
    return positions < channels


def _channels_last(ctx, x: Tensor, order, groups: int, cig: int, rc: int, outs: list[int],
                   depth: int, kernel: tuple[int, ...], strides, dilations) -> bool:
    """Whether a convolution reads its windows in place from a channels-last copy of its
    input, its output channels on the lanes (_conv_channels_last), rather than from an
    im2col copy: on a CPU, for a kernel of more than one tap whose window rows read runs of
    the copy at least a cache line long (_run), where an output row holds two of the row
    blocks the im2col matmul would take or a block along one output row keeps as many
    accumulators busy, edges counted (cpu_model.useful_accumulators); then where the output
    channels outnumber the positions (they were the lanes already), or fill at least a
    register block's columns where the windows are not read in place positions on the
    lanes (_direct), or would be read so only from a copy by kernel column (a stride along
    the rows), or the input is stored channels last (order, from stored_channels_last: its
    copy then moves no data between layouts, and the output stays channels last for what follows).
    The in-place windows of a row are not one flat axis with the next row's (the padding
    lies between them), so the register block's rows run along one output row: a row of
    one block leaves it no other height and a part block at every row's end.

    The first 7x7 convolutions of stride 2 (3 channels into 64, runs of 21 floats) so, one
    thread (AVX-512 Xeon), with their copies: resnet50's 2.39 -> 1.83 ms, densenet121's,
    inception_v1's and inception_v2's alike; their max pools then run along the channels
    (0.32 -> 0.15 ms), and resnet50's first stage stays channels last: its 3x3
    convolutions of 64 channels over 56x56 maps 1.83 -> 1.44 ms each (their 1x1
    convolutions of 64 into 256 channels lose 0.25 ms each, a register block of 6 x 64
    over 256 columns that 5 x 80 beats by 17%). Whole models' kernels, old and new build in
    alternating processes, one / two threads: resnet50 -2.2% / -4.3%, inception_v2 -5.4% /
    -9.6%, densenet121 -2.4% / -2.7%, inception_v1 -1.1% / -4.4%, zfnet512 -7.9% / 0%; at
    AVX2 -1.3% / -1.4%, -3.4% / -5.2%, -1.0% / -1.1%, -3.4% / -5.5%, -2.7% / -3.9%.

    In the plan's order with their copies, old and new build in alternating processes, one
    / two threads (AVX-512 Xeon): resnet50's six 3x3 convolutions over 14x14 maps 11.5 ->
    9.7 / 6.1 -> 5.0 ms, its four over 28x28 maps (128 channels, positions on the lanes
    before) 9.3 -> 6.9 / 5.0 -> 3.7; densenet121's 24 over 14x14 maps of 32 channels (a row
    block of 14 x 32 against the flat 12 x 32 over 196 rows) 5.67 -> 3.48 / 4.41 -> 2.17
    (at AVX2, 6 x 16 over rows of 14, they keep im2col); inception_v1's over 6x6 maps the
    same on one thread, -11% on two (at AVX2 1.50 -> 1.48 / 0.86 -> 0.80). resnet50's over
    7x7 maps (7 x 48, 21 accumulators, against 6 x 64 over 49 rows, 21.8) keep im2col: 2.26
    -> 2.40 ms each read so. Whole models' kernels: inception_v2 -13% / -18%, inception_v1
    -7% / -10%, bvlc_alexnet -12% / -14%, vgg19 -9% / -12%, zfnet512 -4% / -3%, squeezenet
    the same (its 27x27 ones -5% / -12%, its 13x13 ones 1.26 -> 1.16 / 0.75 -> 0.59 ms); at
    AVX2 (blocks of 4 rows) resnet50 -2% / -3% (its 28x28 ones -21% / -23%), inception_v2
    -5% / -11%, inception_v1 -6% / -7%, bvlc_alexnet -9% / -11%, squeezenet -1% / -4%. A
    first convolution of 3 channels reads runs of 9 floats and reduces 27 for each output it
    writes transposed: squeezenet's 3x3 one of stride 2 took 0.92 against 0.60 ms so, and
    shufflenet's max pool read its output back transposed 3.6x slower."""
    if all(k == 1 for k in kernel) or len(outs) < 2:
        return False
    target = get_device(ctx.device).info().target
    if target.family != "cpu":
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
        or not _direct(ctx, x, cig, rc, outs, strides, kernel))


def _first_channels_last(ctx, x: Tensor, groups: int, cig: int, rc: int,
                         kernel: tuple[int, ...], dilations) -> bool:
    """Whether a convolution whose windows go through an im2col copy because its input has
    too few channels for the channels-last read (a first convolution of three channels,
    _run) still puts its output channels on the lanes, so that its output is stored channels
    last and the pools and convolutions after it read it as it lies: on a CPU, where the
    channels are whole vectors, at least FEW_CHANNELS_VECTORS of them. squeezenet's first
    (3x3 of stride 2, 3 channels into 64, AVX-512 Xeon, one thread): 0.45 -> 0.57 ms, its
    max pool after it 0.34 -> 0.15, its first fire modules' 3x3 convolutions 0.47 -> 0.37
    each; squeezenet's kernels -10.7% / -6.7% on one / two threads, at AVX2 -10.7% / -4.6%.
    shufflenet's (24 channels, three vectors at AVX2) lost 15% so at AVX2: its grouped 1x1
    convolutions of 6 channels a group ran slower as matmuls of the positions."""
    target = get_device(ctx.device).info().target
    if target.family != "cpu" or cig == 1:
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


def _conv_channels_last(ctx, x: Tensor, w, groups: int, cig: int, rc: int, outs: list[int],
                        kernel: tuple[int, ...], strides, dilations, pads) -> Tensor:
    """A convolution with the output channels on the vector lanes, over windows read in place
    from a copy of the padded input laid out channels last ([batch, padded spatial...,
    channels]), which holds the input once where an im2col copy holds it once per kernel
    tap. The position rows of the register block read a window's taps along its last axis
    and its channels as one contiguous run of that copy, one reduce axis where there is one
    group and no dilation along that axis (a 3x3 convolution of 64 channels reduces runs of
    192 rather than runs of 64 three times over). The weight, laid out [taps x channels,
    output channels] on the host, is the column operand; the result [batch, groups,
    positions..., output channels] is a value stored channels last, which a later
    convolution reads as it lies and any other reader transposed, as _conv_channels_on_lanes's.
    Where the windows lie inside a value stored channels last (no padding), they are read
    from its own buffer, no copy.

    A pointwise (1x1) convolution of a value stored channels last reads that value as it
    lies, no copy, its positions one axis of the matmul's rows where they are every
    position in order; a strided one copies every stride-th position first (a quarter of
    the input or less), so its rows are one axis too (a block along one output row of 7
    ran 10% slower at AVX-512)."""
    n = len(outs)
    batch = x.shape[0]
    padded, batch_step, place_steps, tap_steps = _padded_channels_last(
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
    if isinstance(w, np.ndarray):  # laid out [groups, kernel taps, channels, output channels]
        w = w.reshape(groups, rc, cig, *kernel)
        w = np.ascontiguousarray(w.transpose(0, *[3 + i for i in range(n)], 2, 1))
        weight = ctx.tensor(w).reshape(1, groups, *([1] * p), *taps, run, rc)
        weight = weight.permute(*range(2 + p), 2 + p + m + 1, *range(2 + p, 2 + p + m + 1))
    else:
        weight = w.reshape(1, groups, rc, cig, *kernel).permute(0, 1, 2, *[4 + i for i in
                                                                          range(n)], 3)
        weight = weight.reshape(1, groups, *([1] * p), rc, *taps, run)
    out = (cols * weight).sum(tuple(range(2 + p + 1, 2 + p + 2 + m)))
    return out.permute(0, 1, 2 + p, *range(2, 2 + p))


def _padded_channels_last(x: Tensor, kernel, strides, dilations, pads, outs,
                          value: float = 0.0) -> tuple[Tensor, int, list[int], list[int]]:
    """x moved channels last ([batch, spatial..., channels]) and padded with value to span
    exactly its windows (a view of x's own buffer where x is stored so and the windows lie
    inside it, else the copy that as_strided writes), and in that layout the step from one
    batch to the next, from one window to the next along each spatial axis, and from one
    tap to the next."""
    n = len(outs)
    pad = window_pads(x.shape[2:], kernel, strides, dilations, pads, outs)
    padded = x.permute(0, *range(2, 2 + n), 1)
    if any(lo or hi > 0 for lo, hi in pad):  # else the windows lie inside x as it is
        padded = padded.pad([(0, 0), *pad, (0, 0)], value)
    shape = padded.shape
    step = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    return (padded, step[0], [s * st for s, st in zip(strides, step[1:1 + n])],
            [d * st for d, st in zip(dilations, step[1:1 + n])])


def pool_windows(x: Tensor, kernel, strides, dilations, pads, outs, value: float
                 ) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
    """The windows a pool reads, their taps the last len(kernel) axes, and the function that
    lays the pool's result (the taps reduced away) out as [batch, channels, outs...]. Over a
    value stored channels last the windows are [batch, outs..., channels, taps...], read in
    place from it (or its padded copy, channels last too), so the pool's lanes run along the
    channels and its result is stored channels last; else Tensor.windows's [batch, channels,
    outs..., taps...], the lanes along an output row."""
    n, (batch, channels) = len(outs), x.shape[:2]
    if stored_channels_last(x) is None:
        return x.windows(kernel, strides, dilations, pads, outs, value), lambda out: out
    padded, batch_step, place_steps, tap_steps = _padded_channels_last(
        x, kernel, strides, dilations, pads, outs, value)
    wins = padded.as_strided([batch, *outs, channels, *kernel],
                             [batch_step, *place_steps, 1, *tap_steps])
    return wins, lambda out: out.permute(0, n + 1, *range(1, n + 1))


def _channels_by_taps(cols: Tensor, groups: int, cig: int, outs: list[int],
                      kernel: tuple[int, ...]) -> Tensor:
    """Channels-first windows ([batch, channels, outs..., taps...]) as the rows of an im2col
    matmul, [batch, groups, positions, 1, channel x taps]."""
    n, batch = len(outs), cols.shape[0]
    cols = cols.reshape(batch, groups, cig, *outs, *kernel)
    order = [0, 1] + [3 + i for i in range(n)] + [2] + [3 + n + i for i in range(n)]
    return cols.permute(order).reshape(batch, groups, math.prod(outs), 1,
                                       cig * math.prod(kernel))


def _taps_by_channels(x: Tensor, groups: int, cig: int, outs: list[int],
                      kernel: tuple[int, ...], strides, dilations, pads) -> Tensor:
    """The windows of a value stored channels last as the rows of an im2col matmul, [batch,
    groups, positions, 1, taps x channel]: read from its channels-last padded copy, each
    tap's channels one contiguous run, so the im2col copy reads and writes runs of channels
    where the channels-first order (_channels_by_taps) first transposed the input into a
    channels-first padded copy and then gathered single floats a map apart. resnet50's 3x3
    convolutions over 7x7 maps of 512 channels (AVX-512 Xeon, one thread), their copies:
    0.15 -> 0.05 ms each."""
    batch = x.shape[0]
    padded, batch_step, place_steps, tap_steps = _padded_channels_last(
        x, kernel, strides, dilations, pads, outs)
    wins = padded.as_strided([batch, groups, *outs, *kernel, cig],
                             [batch_step, cig, *place_steps, *tap_steps, 1])
    return wins.reshape(batch, groups, math.prod(outs), 1, cig * math.prod(kernel))


def _conv_channels_on_lanes(ctx, rows: Tensor, w, groups: int, cig: int, rc: int,
                            kernel: tuple[int, ...], taps_first: bool = False) -> Tensor:
    """The convolution as a matmul over [positions, channel x kernel] x [channel x kernel,
    output channels] (rows: [batch, groups, positions, 1, depth], the depth taps x channel
    where taps_first): the output channels are the vector lanes and the weight is the column
    operand (packed once, when the plan is built); the result is read back transposed."""
    depth = cig * math.prod(kernel)
    if isinstance(w, np.ndarray):  # laid out [channel x kernel, output channels] on the host
        w = w.reshape(groups, rc, cig, math.prod(kernel))
        if taps_first:
            w = w.transpose(0, 1, 3, 2)
        w = np.ascontiguousarray(w.reshape(groups, rc, depth).transpose(0, 2, 1))
        weight = ctx.tensor(w).reshape(1, groups, 1, depth, rc).permute(0, 1, 2, 4, 3)
    else:
        if taps_first:
            w = w.reshape(groups, rc, cig, math.prod(kernel)).permute(0, 1, 3, 2)
        weight = w.reshape(1, groups, 1, rc, depth)
    out = (rows * weight).sum(4)
    return out.permute(0, 1, 3, 2)


@register("Conv")
def conv(ctx, x, w, bias=None):
    x = ctx.tensor(x)
    strides, dilations, pads, _ = _geometry(ctx, x.shape[2:], w.shape[2:])
    return conv_nd(ctx, x, w, bias, ctx.attr("group", 1), strides, dilations, pads)


@register("ConvTranspose")
def conv_transpose(ctx, x, w, bias=None):
    """A convolution over the input with (stride - 1) zeros between elements, padded by
    dilation * (kernel - 1) less the pads, with the weight flipped and its channels swapped."""
    x = ctx.tensor(x)
    n, groups = x.ndim - 2, ctx.attr("group", 1)
    kernel = tuple(w.shape[2:])
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    extra = list(ctx.attr("output_padding", [0] * n))
    in_sp = x.shape[2:]
    full = [s * (i - 1) + o + (k - 1) * d + 1
            for i, s, o, k, d in zip(in_sp, strides, extra, kernel, dilations)]
    auto, shape = ctx.attr("auto_pad", "NOTSET"), ctx.attr("output_shape")
    if shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        target = list(shape)[-n:] if shape is not None else [i * s for i, s in zip(in_sp, strides)]
        totals = [f - t for f, t in zip(full, target)]
        upper = auto == "SAME_UPPER"
        pads = [(t // 2, t - t // 2) if upper else (t - t // 2, t // 2) for t in totals]
    elif auto == "VALID":
        pads = [(0, 0)] * n
    else:
        flat = ctx.attr("pads", [0] * (2 * n))
        pads = list(zip(flat[:n], flat[n:]))
    if any(s > 1 for s in strides):
        batch, cin = x.shape[:2]
        spread = x.reshape(batch, cin, *[v for i in in_sp for v in (i, 1)])
        spread = spread.pad([(0, 0), (0, 0)] + [p for s in strides for p in ((0, 0), (0, s - 1))])
        spread = spread.reshape(batch, cin, *[i * s for i, s in zip(in_sp, strides)])
        x = spread.shrink([(0, batch), (0, cin)] + [(0, (i - 1) * s + 1)
                                                    for i, s in zip(in_sp, strides)])
    cin, rc = w.shape[:2]
    cig = cin // groups
    if isinstance(w, np.ndarray):
        flipped = w.reshape(groups, cig, rc, *kernel).swapaxes(1, 2)
        flipped = np.flip(flipped, tuple(range(3, 3 + n))).reshape(groups * rc, cig, *kernel)
        weight = np.ascontiguousarray(flipped)
    else:
        weight = w.reshape(groups, cig, rc, *kernel).transpose(1, 2)
        weight = weight.flip(tuple(range(3, 3 + n))).reshape(groups * rc, cig, *kernel)
    conv_pads = [(d * (k - 1) - b, d * (k - 1) - e + o)
                 for d, k, (b, e), o in zip(dilations, kernel, pads, extra)]
    return conv_nd(ctx, x, weight, bias, groups, [1] * n, dilations, conv_pads)
