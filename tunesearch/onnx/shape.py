"""ONNX operators that make and move data: constants, shapes, reshapes, concatenation, slicing and
gathering. Their shape inputs must be known at import; the data they move may be computed.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from tunesearch.onnx.registry import axis_of, node_axes, register
from tunesearch.tensor import Tensor


# ---- constants and shapes (all known at import)

def _check_constant(ctx) -> Optional[str]:
    known = {"value", "value_float", "value_floats", "value_int", "value_ints"}
    given = set(ctx.attrs)
    return None if given & known else f"Constant with {', '.join(sorted(given)) or 'no value'}"


def constant(ctx):
    for name, dtype in (("value", None), ("value_float", np.float32),
                        ("value_floats", np.float32), ("value_int", np.int64),
                        ("value_ints", np.int64)):
        if name in ctx.attrs:
            return np.asarray(ctx.attrs[name], dtype)
    raise ctx.error("no value attribute")


register("Constant", host=constant, check=_check_constant)(constant)


def _constant_of_shape(ctx, shape):
    value = ctx.attr("value", np.zeros(1, np.float32))
    return np.full(ctx.ints(shape, "shape"), value.reshape(-1)[0], value.dtype)


register("ConstantOfShape", host=_constant_of_shape, known=(0,))(_constant_of_shape)


def _shape(ctx, x):
    dims = list(x.shape)
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    return np.asarray(dims[start:end] if end is not None else dims[start:], np.int64)


register("Shape", host=_shape)(_shape)
register("Size", host=lambda ctx, x: np.asarray(math.prod(x.shape), np.int64))(
    lambda ctx, x: np.asarray(math.prod(x.shape), np.int64))


def _range(ctx, start, limit, delta):
    start, limit, delta = (np.asarray(ctx.host(v, n)).reshape(-1)[0] for v, n in
                           ((start, "start"), (limit, "limit"), (delta, "delta")))
    count = max(int(math.ceil((limit - start) / delta)), 0)
    return (start + np.arange(count) * delta).astype(np.result_type(start, limit, delta))


register("Range", host=_range, known=(0, 1, 2))(_range)


# ---- movement: the same function serves numpy arrays (folding) and Tensors

def both(*names: str, known: tuple[int, ...] = ()):
    """Register fn for Tensors and, unchanged, for folding numpy arrays."""
    def wrap(fn):
        return register(*names, host=fn, known=known, movement=True)(fn)
    return wrap


@both("Reshape", known=(1,))
def reshape(ctx, x, shape):
    dims = ctx.ints(shape, "shape")
    if not ctx.attr("allowzero", 0):  # 0 copies the input's dim
        dims = [x.shape[i] if s == 0 else s for i, s in enumerate(dims)]
    return x.reshape(tuple(dims))


@both("Flatten")
def flatten(ctx, x):
    axis = axis_of(ctx.attr("axis", 1), len(x.shape))
    return x.reshape((math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))


@both("Transpose")
def transpose(ctx, x):
    perm = tuple(ctx.attr("perm", reversed(range(len(x.shape)))))
    return np.transpose(x, perm) if isinstance(x, np.ndarray) else x.permute(perm)


@both("Squeeze", known=(1,))
def squeeze(ctx, x, axes=None):
    dims = node_axes(ctx, axes, len(x.shape))
    return x.reshape(tuple(s for i, s in enumerate(x.shape)
                           if (s != 1 if dims is None else i not in dims)))


@both("Unsqueeze", known=(1,))
def unsqueeze(ctx, x, axes=None):
    rank = len(x.shape) + len(node_axes(ctx, axes, 0) or [])
    dims = list(x.shape)
    for a in sorted(node_axes(ctx, axes, rank)):
        dims.insert(a, 1)
    return x.reshape(tuple(dims))


def _expand_shape(ctx, in_shape, shape) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(tuple(in_shape), tuple(ctx.ints(shape, "shape"))))


register("Expand", host=lambda ctx, x, s: np.broadcast_to(x, _expand_shape(ctx, x.shape, s))
         .copy(), known=(1,), movement=True)(
    lambda ctx, x, s: x.expand(_expand_shape(ctx, x.shape, s)))


def _concat_np(ctx, *xs):
    return np.concatenate(xs, axis=ctx.attr("axis"))


# not a movement op: each input becomes a kernel that writes its slice of the output (see
# graph/schedule.py), with the work after a reduce in it
@register("Concat", host=_concat_np)
def concat(ctx, *xs):
    pieces = [ctx.tensor(x) for x in xs if math.prod(x.shape) > 0]
    if len(pieces) == 1:
        return pieces[0]
    return Tensor.cat(pieces, dim=ctx.attr("axis"))


def _split_sizes(ctx, x, split) -> tuple[int, list[int]]:
    axis = axis_of(ctx.attr("axis", 0), len(x.shape))
    if split is not None:
        return axis, ctx.ints(split, "split")
    if ctx.attr("split") is not None:
        return axis, list(ctx.attr("split"))
    dim, parts = x.shape[axis], ctx.attr("num_outputs", ctx.n_outputs)
    size = -(-dim // parts)
    return axis, [min(size, dim - i * size) for i in range(parts)]


def _split_np(ctx, x, split=None):
    axis, sizes = _split_sizes(ctx, x, split)
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


@register("Split", host=_split_np, known=(1,), movement=True)
def split(ctx, x, split=None):
    axis, sizes = _split_sizes(ctx, x, split)
    return tuple(x.split(sizes, dim=axis))


def _slices(ctx, shape, starts, ends, axes, steps) -> tuple[slice, ...]:
    if ctx.opset < 10:
        starts, ends, axes = ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes")
    else:
        starts, ends = ctx.ints(starts, "starts"), ctx.ints(ends, "ends")
        axes = None if axes is None else ctx.ints(axes, "axes")
    axes = list(range(len(starts))) if axes is None else [axis_of(a, len(shape)) for a in axes]
    steps = [1] * len(starts) if steps is None else ctx.ints(steps, "steps")
    index = [slice(None)] * len(shape)
    for axis, start, end, step in zip(axes, starts, ends, steps):
        index[axis] = slice(start, end, step)
    return tuple(index)


@both("Slice", known=(1, 2, 3, 4))
def slice_(ctx, x, starts=None, ends=None, axes=None, steps=None):
    return x[_slices(ctx, x.shape, starts, ends, axes, steps)]


def wrap_negative(indices, size):
    """Negative positions count from the end, for numpy arrays and Tensors alike."""
    return (indices < 0).where(indices + size, indices) if isinstance(indices, Tensor) else \
        np.where(indices < 0, indices + size, indices)


def _gather_np(ctx, data, indices):
    axis = axis_of(ctx.attr("axis", 0), data.ndim)
    return np.take(data, wrap_negative(indices, data.shape[axis]), axis=axis)


@register("Gather", host=_gather_np, movement=True)
def gather(ctx, data, indices):
    data = ctx.tensor(data)
    axis = axis_of(ctx.attr("axis", 0), data.ndim)
    if isinstance(indices, np.ndarray):
        idx = wrap_negative(indices, data.shape[axis]).astype(np.int64)
        return gather_known(data, axis, idx)
    return data.take(indices, axis)


def _progression(idx: np.ndarray) -> Optional[tuple[int, int]]:
    """(start, step) when idx is an arithmetic progression with a nonzero step."""
    if idx.size < 2:
        return (int(idx[0]), 1) if idx.size == 1 else None
    steps = np.diff(idx)
    return (int(idx[0]), int(steps[0])) if steps[0] != 0 and np.all(steps == steps[0]) else None


def gather_known(data: Tensor, axis: int, idx: np.ndarray) -> Tensor:
    """data gathered along axis at indices known at import, with movement ops where they can."""
    flat = idx.reshape(-1)
    out_shape = data.shape[:axis] + idx.shape + data.shape[axis + 1:]
    before = [slice(None)] * axis
    ap = _progression(flat)
    if ap is not None:
        start, step = ap
        stop = start + step * len(flat)
        picked = data[tuple(before + [slice(start, stop if stop >= 0 else None, step)])]
        return picked.reshape(out_shape)
    repeat = _repeats(flat)
    if repeat is not None:
        base, times = repeat
        picked = gather_known(data, axis, base)
        shape = picked.shape
        widened = picked.reshape(shape[:axis + 1] + (1,) + shape[axis + 1:])
        widened = widened.expand(shape[:axis + 1] + (times,) + shape[axis + 1:])
        return widened.materialize().reshape(out_shape)
    if len(flat) <= 32:
        pieces = [data[tuple(before + [slice(int(i), int(i) + 1)])] for i in flat]
        return Tensor.cat(pieces, dim=axis).reshape(out_shape)
    return data.take(Tensor(flat.astype(np.int32), device=data.device), axis).reshape(out_shape)


def _repeats(flat: np.ndarray) -> Optional[tuple[np.ndarray, int]]:
    """(base, r) when flat is every element of base repeated r times in a row (r > 1)."""
    runs = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], runs, [len(flat)]])
    lengths = np.diff(bounds)
    if len(lengths) and lengths[0] > 1 and np.all(lengths == lengths[0]):
        return flat[bounds[:-1]], int(lengths[0])
    return None
