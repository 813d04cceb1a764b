"""A numpy interpreter of kernels: the reference every device is checked against.

It evaluates the expression over boxes of the domain, a slab of the first axis at a time, so a
1024^3 matmul domain never sits in memory whole.
"""
from __future__ import annotations

import math

import numpy as np

from tunesearch.graph.kernel import Kernel, KNode
from tunesearch.graph.lazy import apply_numpy
from tunesearch.graph.ops import ReduceOps
from tunesearch.graph.view import View

CHUNK_ELEMENTS = 1 << 23


def read_view(flat: np.ndarray, view: View, box: tuple[tuple[int, int], ...]) -> np.ndarray:
    """The values a view reads over a box of its shape, zeros where masked."""
    sub = view.shrink(box)
    out_shape = sub.shape
    if sub.all_masked or 0 in out_shape:
        return np.zeros(out_shape, flat.dtype)
    if sub.mask is None:
        return _strided(flat, sub)
    valid = sub.shrink(sub.mask)
    out = np.zeros(out_shape, flat.dtype)
    out[tuple(slice(lo, hi) for lo, hi in sub.mask)] = _strided(flat, valid)
    return out


def _strided(flat: np.ndarray, view: View) -> np.ndarray:
    lo, hi = view.span()
    if lo < 0 or hi >= flat.size:
        raise IndexError(f"view {view.key()} reads outside a buffer of {flat.size} elements")
    item = flat.itemsize
    return np.lib.stride_tricks.as_strided(flat[view.offset:], view.shape,
                                           tuple(s * item for s in view.strides), writeable=False)


def _offsets(view: View) -> np.ndarray:
    """The buffer offset an unmasked view reads at every index of its shape."""
    out = np.full((), view.offset, np.int64)
    for axis, (size, stride) in enumerate(zip(view.shape, view.strides)):
        if stride:
            out = out + (np.arange(size, dtype=np.int64) * stride).reshape(
                [size if a == axis else 1 for a in range(len(view.shape))])
    return np.broadcast_to(out, view.shape)


class _Evaluator:
    def __init__(self, kernel: Kernel, inputs: list[np.ndarray]):
        self.kernel = kernel
        self.bufs = [None] + [np.ascontiguousarray(b).reshape(-1) for b in inputs]
        self.memo: dict[tuple[int, tuple], np.ndarray] = {}

    def eval(self, node: KNode, box) -> np.ndarray:
        key = (id(node), box)
        if key not in self.memo:
            self.memo[key] = self._eval(node, box)
        return self.memo[key]

    def _eval(self, node: KNode, box) -> np.ndarray:
        shape = tuple(hi - lo for lo, hi in box)
        if node.op == "load":
            index, view = node.arg
            return read_view(self.bufs[index], view, box)
        if node.op == "gather":
            index, view, stride, size = node.arg
            flat = self.bufs[index]
            at = np.broadcast_to(self.eval(node.src[0], box), shape).astype(np.int64)
            valid = (at >= 0) & (at < size)
            base = _offsets(view.shrink(box))
            picked = flat[base + np.where(valid, at, 0) * stride] if flat.size else \
                np.zeros(shape, flat.dtype)
            return np.where(valid, picked, np.zeros((), flat.dtype))
        if node.op == "const":
            value, view = node.arg
            out = np.full(shape, value, node.dtype.np)
            if view.mask is not None:
                sub = view.shrink(box)
                keep = np.zeros(shape, bool)
                if not sub.all_masked:
                    keep[tuple(slice(lo, hi) for lo, hi in sub.mask or [(0, s) for s in shape])] = True
                out = np.where(keep, out, np.zeros((), node.dtype.np))
            return out
        if isinstance(node.op, ReduceOps):
            n_out = self.kernel.n_out
            full = box[:n_out] + tuple((0, s) for s in self.kernel.domain[n_out:])
            src = self.eval(node.src[0], full)
            axes = tuple(range(n_out, len(full)))
            fn = np.sum if node.op is ReduceOps.SUM else np.max
            return fn(src, axis=axes, keepdims=True).astype(node.dtype.np)
        args = [self.eval(s, box) for s in node.src]
        with np.errstate(all="ignore"):
            out = apply_numpy(node.op, args, node.dtype if node.arg is None else node.arg)
        return np.broadcast_to(out, shape)


def run_kernel(kernel: Kernel, inputs: list[np.ndarray], out: np.ndarray | None = None
               ) -> np.ndarray:
    """Evaluate kernel on numpy inputs (buffers 1..n); returns the flat output buffer: `out`
    where given (the elements out of the kernel's view keep their values: the other slices of
    a concatenation), else a new one, zero out of the view."""
    if out is None:
        out = np.zeros(kernel.buffers[0].size, kernel.buffers[0].dtype.np)
    domain, n_out = kernel.domain, kernel.n_out
    evaluator = _Evaluator(kernel, inputs)
    per_row = math.prod(domain[1:]) if len(domain) > 1 else 1
    step = max(1, CHUNK_ELEMENTS // max(per_row, 1)) if n_out else domain[0] if domain else 1
    first = domain[0] if domain else 1
    if not domain:
        chunks = [()]
    elif n_out == 0:
        chunks = [((0, 1),) * 0]  # no output axes: one box
    else:
        chunks = [((lo, min(first, lo + step)),) for lo in range(0, first, step)]
    for head in chunks:
        box = head + tuple((0, s) for s in domain[len(head):n_out]) + ((0, 1),) * kernel.n_reduce
        if n_out == 0:
            box = ((0, 1),) * kernel.n_reduce
        evaluator.memo.clear()
        values = evaluator.eval(kernel.expr, box)
        index = read_view(np.arange(out.size), kernel.out_view, box) if out.size else None
        if index is not None:
            out[index.reshape(-1)] = np.broadcast_to(values, index.shape).reshape(-1)
    return out
