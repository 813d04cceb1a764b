"""The windows a convolution or a pool reads, and the layouts they are read from.

Every form here is a view over one buffer: the padded input (channels first or channels last),
a copy of it by kernel column, or the value itself where it is stored so; the windows are never
copied out one by one except by an im2col form, which the convolution chooses (lowering/conv.py).
"""
from __future__ import annotations

import itertools
import math
from typing import Callable, Sequence

from tunesearch.errors import ShapeError
from tunesearch.graph import lazy
from tunesearch.graph.dtypes import dtypes
from tunesearch.graph.schedule import backing_node
from tunesearch.graph.view import View
from tunesearch.runtime.device import get_device


def window_pads(spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                dilations: Sequence[int], pads: Sequence[tuple[int, int]],
                outs: Sequence[int]) -> list[tuple[int, int]]:
    """Per spatial axis, the (before, after) padding that makes an input of size `spatial`
    span exactly the windows of `outs` outputs: before as given, after whatever the last
    window reaches (negative where it leaves the input's last elements unread)."""
    extent = [(o - 1) * s + (k - 1) * d + 1
              for o, s, k, d in zip(outs, strides, kernel, dilations)]
    return [(b, e - i - b) for (b, _), e, i in zip(pads, extent, spatial)]


def reaches_padding(pad: Sequence[tuple[int, int]]) -> bool:
    """Whether windows whose padding window_pads gives read outside the input (else they lie
    inside it as it is, its last elements perhaps unread)."""
    return any(lo != 0 or hi > 0 for lo, hi in pad)


def output_sizes(spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                 dilations: Sequence[int], pads: Sequence[tuple[int, int]],
                 ceil_mode: bool = False) -> list[int]:
    """The number of windows along each spatial axis; with ceil_mode a last partial window
    counts where it starts inside the input or its leading padding (ONNX and torch pools)."""
    outs = []
    for i, k, s, d, (b, e) in zip(spatial, kernel, strides, dilations, pads):
        span = i + b + e - d * (k - 1) - 1
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= i + b:  # the last window must start inside
            o -= 1
        outs.append(o)
    if any(o <= 0 for o in outs):
        raise ShapeError(f"kernel {list(kernel)} does not fit input {list(spatial)}")
    return outs


def stored_channels_last(x) -> tuple[int, ...] | None:
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


def materialize_as_stored(x):
    """x written to a buffer of its own in the order its producer lays it out (channels last
    after a channels-last convolution), so that its readers read it as it lies."""
    return x.materialize(stored_channels_last(x))


def padded_channels_last(x, kernel, strides, dilations, pads, outs, value: float = 0.0):
    """x moved channels last ([batch, spatial..., channels]) and padded with value to span
    exactly its windows (a view of x's own buffer where x is stored so and the windows lie
    inside it, else the copy that as_strided writes), and in that layout the step from one
    batch to the next, from one window to the next along each spatial axis, and from one
    tap to the next."""
    n = len(outs)
    pad = window_pads(x.shape[2:], kernel, strides, dilations, pads, outs)
    padded = x.permute(0, *range(2, 2 + n), 1)
    if reaches_padding(pad):
        padded = padded.pad([(0, 0), *pad, (0, 0)], value)
    shape = padded.shape
    step = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    return (padded, step[0], [s * st for s, st in zip(strides, step[1:1 + n])],
            [d * st for d, st in zip(dilations, step[1:1 + n])])


def column_runs(x, kernel, strides, dilations, pads, outs):
    """The windows of a 2-d convolution that steps along its rows by more than one, shaped
    as Tensor.windows's (batch, channels, out rows, out columns, kernel rows, kernel
    columns), read from a copy of the padded input laid out [channel, input row, kernel
    column, output column]: entry (c, y, j, o) is the padded input's (c, y, o * stride + j *
    dilation). A row of windows for one kernel tap is then a contiguous run of the copy (the
    vector lanes), as a stride-1 convolution's is of the input itself; the copy holds every
    input row once per kernel column, where im2col holds it once per tap. Each run starts on
    a cache line (padded with zeros to whole lines), so a register block's columns touch as
    few lines at every step as they need."""
    (oy, ox), (ky, kx), (sy, _), (dy, _) = outs, kernel, strides, dilations
    batch, cin = x.shape[:2]
    per_line = get_device(x.device).info().target.l1d.line // x.dtype.itemsize
    width = -(-ox // per_line) * per_line  # a run with its padding
    rows = (oy - 1) * sy + (ky - 1) * dy + 1  # the padded input's rows the windows read
    runs = x.windows([1, kx], [1, strides[1]], [1, dilations[1]], pads, [rows, ox])
    runs = runs.reshape(batch, cin, rows, ox, kx).permute(0, 1, 2, 4, 3)
    runs = runs.pad([(0, 0)] * 4 + [(0, width - ox)])
    line = kx * width  # one input row's runs
    return runs.as_strided([batch, cin, oy, ox, ky, kx],
                           [cin * rows * line, rows * line, sy * line, 1, dy * line, width])


def channels_by_taps(cols, groups: int, cig: int, outs: list[int], kernel: tuple[int, ...]):
    """Channels-first windows ([batch, channels, outs..., taps...]) as the rows of an im2col
    matmul, [batch, groups, positions, 1, channel x taps]."""
    n, batch = len(outs), cols.shape[0]
    cols = cols.reshape(batch, groups, cig, *outs, *kernel)
    order = [0, 1] + [3 + i for i in range(n)] + [2] + [3 + n + i for i in range(n)]
    return cols.permute(order).reshape(batch, groups, math.prod(outs), 1,
                                       cig * math.prod(kernel))


def taps_by_channels(x, groups: int, cig: int, outs: list[int], kernel: tuple[int, ...],
                     strides, dilations, pads):
    """The windows of a value stored channels last as the rows of an im2col matmul, [batch,
    groups, positions, 1, taps x channel], read from its channels-last padded copy: each
    tap's channels are one contiguous run, where the channels-first order (channels_by_taps)
    would transpose the input first and then gather single elements a map apart."""
    batch = x.shape[0]
    padded, batch_step, place_steps, tap_steps = padded_channels_last(
        x, kernel, strides, dilations, pads, outs)
    wins = padded.as_strided([batch, groups, *outs, *kernel, cig],
                             [batch_step, cig, *place_steps, *tap_steps, 1])
    return wins.reshape(batch, groups, math.prod(outs), 1, cig * math.prod(kernel))


def pool_windows(x, kernel, strides, dilations, pads, outs, value: float
                 ) -> tuple[object, Callable]:
    """The windows a pool reads, their taps the last len(kernel) axes, and the function that
    lays the pool's result (the taps reduced away) out as [batch, channels, outs...]. Over a
    value stored channels last the windows are [batch, outs..., channels, taps...], read in
    place from it (or its padded copy, channels last too), so the pool's lanes run along the
    channels and its result is stored channels last; else Tensor.windows's [batch, channels,
    outs..., taps...], the lanes along an output row."""
    if stored_channels_last(x) is None:
        return x.windows(kernel, strides, dilations, pads, outs, value), lambda out: out
    return channel_windows(x, kernel, strides, dilations, pads, outs, value)


def channel_windows(x, kernel, strides, dilations, pads, outs, value: float = 0.0
                    ) -> tuple[object, Callable]:
    """The windows of x as [batch, outs..., channels, taps...], read from its channels-last
    padded copy (or from x in place where it is stored so and needs no padding), the channels
    one contiguous run for each tap: the vector lanes of a pool or a depthwise convolution.
    Also the function that lays a result of [batch, outs..., channels] out as [batch,
    channels, outs...], stored channels last."""
    n, (batch, channels) = len(outs), x.shape[:2]
    padded, batch_step, place_steps, tap_steps = padded_channels_last(
        x, kernel, strides, dilations, pads, outs, value)
    wins = padded.as_strided([batch, *outs, channels, *kernel],
                             [batch_step, *place_steps, 1, *tap_steps])
    return wins, lambda out: out.permute(0, n + 1, *range(1, n + 1))


def channel_taps(x, kernel, strides, dilations, pads, outs, value: float = 0.0) -> list:
    """The windows of x (stored channels last) one tap at a time: per tap, [batch, outs...,
    channels] read from x's own buffer through one strided view, masked (value there) where
    the tap falls in the padding. A pool built from them reads x as it lies, where
    channel_windows would first write its padded copy: one pass over the input fewer, and the
    blocks inside every mask run unmasked (space.kernel_shape.interior_ranges)."""
    n, (batch, channels), spatial = len(outs), x.shape[:2], x.shape[2:]
    stored = x.permute(0, *range(2, 2 + n), 1).materialize()
    target = backing_node(stored.node) or stored.node
    steps = [math.prod(stored.shape[i + 1:]) for i in range(n + 2)]
    shape = (batch, *outs, channels)
    strides_out = (steps[0], *[s * st for s, st in zip(strides, steps[1:1 + n])], 1)
    taps = []
    for tap in itertools.product(*[range(k) for k in kernel]):
        starts = [t * d - b for t, d, (b, _) in zip(tap, dilations, pads)]
        box = [(0, batch)]
        for start, s, size, o in zip(starts, strides, spatial, outs):
            lo = min(o, max(0, -(start // s) if start < 0 else 0))
            hi = max(lo, min(o, (size - 1 - start) // s + 1))
            box.append((lo, hi))
        box.append((0, channels))
        full = all(b == (0, size) for b, size in zip(box, shape))
        mask = None if full else tuple(box)
        offset = sum(st * step for st, step in zip(starts, steps[1:1 + n]))
        view = View.make(shape, strides_out, offset, mask)
        read = type(x)(lazy.load(target, view))
        if mask is not None and value != 0:
            inside = type(x)(lazy.LazyNode("const", (), (True, View.make(
                shape, (0,) * len(shape), 0, mask)), shape, dtypes.bool, x.device))
            read = inside.where(read, read._scalar_like(value))
        taps.append(read)
    return taps


def taps_stored_channels_last(out):
    """A value computed tap by tap ([batch, outs..., channels], elementwise over the taps of
    channel_taps) as a reduce of that one term, read back as [batch, channels, outs...]: its
    kernel then iterates the channels-last domain (the lanes along the channels) whoever
    reads it, its result is stored channels last (graph.schedule.stored_order), and the bias
    and activation after it join that kernel as a convolution's epilogue does."""
    n = out.ndim - 2
    return out.reshape(*out.shape, 1).sum(n + 2).permute(0, n + 1, *range(1, n + 1))
