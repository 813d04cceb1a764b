"""ONNX operators that pick elements by computed positions, as PyTorch's exporters emit them for
transformers: GatherElements and GatherND (embedding and token-type lookups, the last token's
logits), CumSum (position ids from an attention mask) and Trilu (causal masks).

Indices known at import become one flat gather (shape.gather_known: slices where the positions
form a progression); computed indices a read at each computed position (Tensor.gather and
Tensor.take, the lazy graph's gather), as Gather's do.
"""
from __future__ import annotations

import math

import numpy as np

from tunesearch.onnx.registry import axis_of, register
from tunesearch.onnx.shape import gather_known, wrap_negative
from tunesearch.tensor import Tensor


def _check_range(ctx, indices: np.ndarray, size: int) -> None:
    if indices.size and (indices.min() < -size or indices.max() >= size):
        raise ctx.error(f"an index is out of range for a dimension of {size}")


# ---- GatherElements: out[p] = data[p with the axis coordinate replaced by indices[p]]

def _gather_elements_np(ctx, data, indices):
    axis = axis_of(ctx.attr("axis", 0), data.ndim)
    _check_range(ctx, indices, data.shape[axis])
    return np.take_along_axis(data, wrap_negative(indices, data.shape[axis]).astype(np.int64), axis)


def _elements_flat(shape: tuple[int, ...], ishape: tuple[int, ...], axis: int, indices):
    """The position in data.reshape(-1) that each output element reads."""
    strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    flat = indices * strides[axis]
    for i, size in enumerate(ishape):
        if i == axis:
            continue
        coord = np.arange(size, dtype=np.int32).reshape(
            [size if j == i else 1 for j in range(len(ishape))])
        flat = flat + coord * strides[i]
    return flat


@register("GatherElements", host=_gather_elements_np, movement=True)
def gather_elements(ctx, data, indices):
    data = ctx.tensor(data)
    axis = axis_of(ctx.attr("axis", 0), data.ndim)
    size = data.shape[axis]
    if isinstance(indices, np.ndarray):
        _check_range(ctx, indices, size)
        positions = wrap_negative(indices, size).astype(np.int64)
        flat = _elements_flat(data.shape, indices.shape, axis, positions)
        return gather_known(data.reshape(-1), 0, flat.astype(np.int64))
    return data.gather(axis, indices)


# ---- GatherND: indices' last axis is a coordinate into data's leading axes

def _nd_parts(ctx, data_shape, index_shape):
    batch = ctx.attr("batch_dims", 0)
    depth = index_shape[-1]
    lead = data_shape[batch:batch + depth]
    return batch, depth, lead, data_shape[batch + depth:]


def _nd_flat(indices, data_shape, batch: int, depth: int, lead):
    """Each index tuple as one position in data.reshape(batch..., prod(lead), rest) flattened
    over the batch axes too, so a batch never reads another batch's rows."""
    strides = [math.prod(lead[j + 1:]) for j in range(depth)]
    flat = None
    ishape = tuple(indices.shape[:-1])
    for j in range(depth):
        if isinstance(indices, Tensor):
            part = indices.shrink([(0, s) for s in ishape] + [(j, j + 1)]).reshape(ishape)
        else:
            part = indices[..., j]
        part = wrap_negative(part, lead[j]) * strides[j]
        flat = part if flat is None else flat + part
    rows = math.prod(lead)
    for i in range(batch):
        coord = np.arange(data_shape[i], dtype=np.int32).reshape(
            [data_shape[i] if k == i else 1 for k in range(len(ishape))])
        flat = flat + coord * (rows * math.prod(data_shape[i + 1:batch]))
    return flat


def _gather_nd_np(ctx, data, indices):
    batch, depth, lead, rest = _nd_parts(ctx, data.shape, indices.shape)
    for j in range(depth):
        _check_range(ctx, indices[..., j], lead[j])
    flat = _nd_flat(indices.astype(np.int64), data.shape, batch, depth, lead)
    rows = data.reshape((-1,) + tuple(rest))
    return rows[flat]


@register("GatherND", host=_gather_nd_np, movement=True)
def gather_nd(ctx, data, indices):
    data = ctx.tensor(data)
    batch, depth, lead, rest = _nd_parts(ctx, data.shape, indices.shape)
    rows = data.reshape((math.prod(data.shape[:batch + depth]),) + tuple(rest))
    if isinstance(indices, np.ndarray):
        for j in range(depth):
            _check_range(ctx, indices[..., j], lead[j])
        flat = _nd_flat(indices.astype(np.int64), data.shape, batch, depth, lead)
        return gather_known(rows, 0, np.asarray(flat, np.int64))
    flat = _nd_flat(indices.int(), data.shape, batch, depth, lead)
    return rows.take(flat, 0)


# ---- CumSum and Trilu

def _cumsum_axis(ctx, x, axis) -> int:
    return axis_of(ctx.ints(axis, "axis")[0], x.ndim)


def _cumsum_np(ctx, x, axis):
    a = _cumsum_axis(ctx, x, axis)
    y = np.flip(x, a) if ctx.attr("reverse", 0) else x
    out = np.cumsum(y, axis=a, dtype=x.dtype)
    if ctx.attr("exclusive", 0):
        out = out - y
    return np.flip(out, a) if ctx.attr("reverse", 0) else out


@register("CumSum", host=_cumsum_np, known=(1,))
def cumsum(ctx, x, axis):
    """A sum over a triangular mask: out[i] = sum of x[j] for j <= i (j < i exclusive, j >= i
    reversed); the axes it runs on (a sequence) are short."""
    x = ctx.tensor(x)
    a = _cumsum_axis(ctx, x, axis)
    n = x.shape[a]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    reverse, exclusive = bool(ctx.attr("reverse", 0)), bool(ctx.attr("exclusive", 0))
    keep = (j >= i) if reverse else (j <= i)
    if exclusive:
        keep &= j != i
    moved = x.permute(tuple(k for k in range(x.ndim) if k != a) + (a,))
    pairs = moved.reshape(moved.shape[:-1] + (1, n))
    mask = Tensor(keep.reshape((1,) * (x.ndim - 1) + (n, n)), device=x.device)
    zero = 0.0 if x.dtype.is_float else 0
    summed = mask.where(pairs, zero).sum(-1).cast(x.dtype)
    back = list(range(x.ndim - 1))
    back.insert(a, x.ndim - 1)
    return summed.permute(tuple(back))


def _trilu_mask(ctx, shape, k) -> np.ndarray:
    k = 0 if k is None else ctx.ints(k, "k")[0]
    rows, cols = shape[-2], shape[-1]
    i, j = np.arange(rows)[:, None], np.arange(cols)[None, :]
    return (j - i >= k) if ctx.attr("upper", 1) else (j - i <= k)


@register("Trilu", host=lambda ctx, x, k=None: np.where(_trilu_mask(ctx, x.shape, k), x,
                                                         np.zeros((), x.dtype)), known=(1,))
def trilu(ctx, x, k=None):
    x = ctx.tensor(x)
    mask = Tensor(_trilu_mask(ctx, x.shape, k), device=x.device)
    return mask.where(x, 0.0 if x.dtype.is_float else 0).cast(x.dtype)
