"""Reducing ONNX operators: the Reduce* family, ArgMax/ArgMin, Softmax/LogSoftmax and the matrix
products (MatMul, Gemm), each a Tensor reduce."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from tunesearch.onnx.registry import axis_of, node_axes, register
from tunesearch.tensor import Tensor


# ---- reduce

def _reduce_axes(ctx, x, axes_input) -> Optional[tuple[int, ...]]:
    takes_input = ctx.opset >= (13 if ctx.op == "ReduceSum" else 18)
    axes = node_axes(ctx, axes_input if takes_input else None, len(x.shape))
    if not axes:
        return () if ctx.attr("noop_with_empty_axes", 0) else tuple(range(len(x.shape)))
    return tuple(sorted(axes))


def _empty_value(name: str, dtype) -> Optional[float]:
    """What a reduce over no elements gives (ONNX: the operation's identity), or None where it
    has none."""
    low = -math.inf if dtype.kind == "f" else (False if dtype.kind == "b" else
                                                 np.iinfo(np.int32).min)
    high = math.inf if dtype.kind == "f" else (True if dtype.kind == "b" else
                                                np.iinfo(np.int32).max)
    return {"ReduceMax": low, "ReduceMin": high, "ReduceLogSumExp": -math.inf,
            "ReduceSum": 0, "ReduceSumSquare": 0, "ReduceL1": 0, "ReduceL2": 0}.get(name)


def _reducer(name: str, fn, host):
    def empty(ctx, x, dims):
        """The result of reducing an axis of size 0, or None where x has none."""
        if not any(x.shape[d] == 0 for d in dims):
            return None
        dtype = np.dtype(x.dtype) if isinstance(x, np.ndarray) else np.dtype(x.dtype.np)
        value = _empty_value(name, dtype)
        if value is None:
            raise ctx.error("reduces an axis of size 0, which has no result")
        keep = bool(ctx.attr("keepdims", 1))
        shape = tuple(1 if i in dims else s for i, s in enumerate(x.shape) if keep or i not in dims)
        return np.full(shape, value, dtype)

    def run(ctx, x, axes=None):
        x = ctx.tensor(x)
        dims = _reduce_axes(ctx, x, axes)
        if not dims:
            return x
        nothing = empty(ctx, x, dims)
        if nothing is not None:
            return ctx.tensor(nothing)
        out = fn(x, dims, bool(ctx.attr("keepdims", 1)))
        return out.cast(x.dtype)

    def run_host(ctx, x, axes=None):
        dims = _reduce_axes(ctx, x, axes)
        if not dims:
            return x
        nothing = empty(ctx, x, dims)
        if nothing is not None:
            return nothing
        return host(x, axis=dims, keepdims=bool(ctx.attr("keepdims", 1))).astype(x.dtype)
    register(name, host=run_host, known=(1,))(run)


_reducer("ReduceSum", lambda x, d, k: x.sum(d, k), np.sum)
_reducer("ReduceMean", lambda x, d, k: x.mean(d, k), np.mean)
_reducer("ReduceMax", lambda x, d, k: x.max(d, k), np.max)
_reducer("ReduceMin", lambda x, d, k: x.min(d, k), np.min)
_reducer("ReduceSumSquare", lambda x, d, k: (x * x).sum(d, k), lambda x, **kw: np.sum(x * x, **kw))
_reducer("ReduceL1", lambda x, d, k: x.abs().sum(d, k), lambda x, **kw: np.sum(np.abs(x), **kw))
_reducer("ReduceL2", lambda x, d, k: (x * x).sum(d, k).sqrt(),
         lambda x, **kw: np.sqrt(np.sum(x * x, **kw)))
_reducer("ReduceLogSumExp", lambda x, d, k: _logsumexp(x, d, k),
         lambda x, **kw: np.log(np.sum(np.exp(x), **kw)))


def _logsumexp(x: Tensor, dims, keepdim: bool) -> Tensor:
    top = x.max(dims, keepdim=True)
    out = (x - top).exp().sum(dims, keepdim=True).log() + top
    return out if keepdim else out.squeeze(dims)


def _arg_reduce(largest: bool):
    def run(ctx, x):
        x = ctx.tensor(x)
        axis = axis_of(ctx.attr("axis", 0), x.ndim)
        keep = bool(ctx.attr("keepdims", 1))
        n = x.shape[axis]
        v = x if largest else -x
        hit = v.eq(v.max(axis, keepdim=True))
        shape = [n if i == axis else 1 for i in range(x.ndim)]
        if ctx.attr("select_last_index", 0):
            pos = Tensor.arange(n, device=x.device).reshape(shape)
            return (hit.where(pos, -1)).max(axis, keep)
        rev = Tensor.arange(n, 0, -1, device=x.device).reshape(shape)
        return n - hit.where(rev, 0).max(axis, keep)
    return run


register("ArgMax")(_arg_reduce(True))
register("ArgMin")(_arg_reduce(False))


# ---- softmax family and matrix products

def _softmax(log: bool):
    def run(ctx, x):
        x = ctx.tensor(x)
        if ctx.opset < 13:  # older opsets flatten to 2-D around the axis
            x = x.materialize()  # written in its own shape, read flat
            axis = axis_of(ctx.attr("axis", 1), x.ndim)
            flat = x.reshape(math.prod(x.shape[:axis]), -1)
            out = flat.log_softmax(1) if log else flat.softmax(1)
            return out.reshape(x.shape)
        axis = ctx.attr("axis", -1)
        return x.log_softmax(axis) if log else x.softmax(axis)
    return run


register("Softmax")(_softmax(False))
register("LogSoftmax")(_softmax(True))


@register("MatMul")
def matmul(ctx, a, b):
    return ctx.tensor(a).materialize().matmul(ctx.tensor(b).materialize())


@register("Gemm")
def gemm(ctx, a, b, c=None):
    a, b = ctx.tensor(a).materialize(), ctx.tensor(b).materialize()
    if ctx.attr("transA", 0):
        a = a.T
    if ctx.attr("transB", 0):
        b = b.T
    out = a.matmul(b)
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    if alpha != 1.0:
        out = out * alpha
    if c is not None and beta != 0.0:
        c = ctx.tensor(c)
        out = out + (c * beta if beta != 1.0 else c)
    return out
