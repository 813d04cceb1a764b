"""Pools and the channel-window normalization, in the layout their input lies in.

Over a value stored channels last (a channels-last convolution's output) a pool's windows are
read in place with the channels on the vector lanes, and its result stays channels last, so
the next convolution reads it as it lies (windows.pool_windows).
"""
from __future__ import annotations

import math

import numpy as np

from tunesearch.errors import ShapeError
from tunesearch.lowering.windows import (channel_taps, output_sizes, pool_windows,
                                         reaches_padding, stored_channels_last,
                                         taps_stored_channels_last, window_pads)


def _geometry(x, kernel, strides, dilations, pads, ceil_mode: bool):
    n = len(kernel)
    if x.ndim != n + 2:
        raise ShapeError(f"pool: input {tuple(x.shape)} needs {n + 2} dims for a "
                         f"{n}-d window {list(kernel)}")
    return output_sizes(x.shape[2:], kernel, strides, dilations, pads, ceil_mode)


def _tap_by_tap(x, kernel, strides, dilations, pads, outs) -> bool:
    """Whether a pool combines its windows tap by tap, read from x as it lies
    (windows.channel_taps), rather than reducing them from a padded copy: over a value stored
    channels last whose windows reach into the padding."""
    pad = window_pads(x.shape[2:], kernel, strides, dilations, pads, outs)
    return stored_channels_last(x) is not None and reaches_padding(pad)


def _by_taps(taps, op, scale=None):
    """The taps ([batch, outs..., channels]) combined by op (then times scale, a number or a
    map of [outs...]), stored channels last and read back as [batch, channels, outs...]."""
    out = taps[0]
    for tap in taps[1:]:
        out = op(out, tap)
    if scale is not None:
        out = out * (scale if isinstance(scale, float) else
                     scale.reshape(1, *scale.shape, 1))
    return taps_stored_channels_last(out)


def max_pool(x, kernel, strides, dilations, pads, ceil_mode: bool = False):
    """The largest element of each window; padding never wins."""
    outs = _geometry(x, kernel, strides, dilations, pads, ceil_mode)
    low = -math.inf if x.dtype.is_float else int(np.iinfo(np.int32).min)
    if _tap_by_tap(x, kernel, strides, dilations, pads, outs):
        return _by_taps(channel_taps(x, kernel, strides, dilations, pads, outs, low),
                        lambda a, b: a.maximum(b))
    wins, back = pool_windows(x, kernel, strides, dilations, pads, outs, low)
    return back(wins.max(tuple(range(-len(kernel), 0))))


def average_pool(x, kernel, strides, dilations, pads, ceil_mode: bool = False,
                 count_include_pad: bool = False):
    """The mean of each window: over every tap (count_include_pad, the explicit padding
    counted, never the part a ceil_mode window reaches beyond it), or over the taps inside the
    input. The counts are known at build time: one scale, or a constant map of them."""
    outs = _geometry(x, kernel, strides, dilations, pads, ceil_mode)
    counts = np.ones((), np.float64)
    for i, k, s, d, (b, e), o in zip(x.shape[2:], kernel, strides, dilations, pads, outs):
        pos = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d - b
        lo, hi = (-b, i + e) if count_include_pad else (0, i)
        counts = np.multiply.outer(counts, ((pos >= lo) & (pos < hi)).sum(1))
    if np.all(counts == counts.reshape(-1)[0]):
        scale = float(1.0 / counts.reshape(-1)[0])
    else:
        scale = type(x)((1.0 / counts).astype(np.float32), device=x.device)
    if _tap_by_tap(x, kernel, strides, dilations, pads, outs):
        return _by_taps(channel_taps(x, kernel, strides, dilations, pads, outs),
                        lambda a, b: a + b, scale)
    wins, back = pool_windows(x, kernel, strides, dilations, pads, outs, 0.0)
    return back(wins.sum(tuple(range(-len(kernel), 0)))) * scale


def local_response_norm(x, size: int, alpha: float, beta: float, bias: float):
    """x / (bias + alpha / size * sum of squares over a window of channels) ** beta. Over a
    value stored channels last the squares are written channels last too, so the window's
    shifted reads run along the lanes rather than masking them."""
    order = stored_channels_last(x)
    x = x.materialize(order)
    channels = x.shape[1]
    lo = (size - 1) // 2
    square = (x * x).pad([(0, 0), (lo, size - 1 - lo)] + [(0, 0)] * (x.ndim - 2))
    if order is not None:
        square = square.materialize(order)
    rest = [(0, s) for s in x.shape[2:]]
    total = None
    for j in range(size):
        part = square.shrink([(0, x.shape[0]), (j, j + channels)] + rest)
        total = part if total is None else total + part
    return x * (total * (alpha / size) + bias) ** (-beta)
