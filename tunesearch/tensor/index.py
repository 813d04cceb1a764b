"""Indexing for Tensor: ints, slices (any step), None and Ellipsis, via movement ops; and reads
at computed positions (take, gather), via the lazy graph's gather."""
from __future__ import annotations

import numpy as np

from tunesearch.errors import ShapeError
from tunesearch.graph import lazy
from tunesearch.graph.view import View
from tunesearch.tensor._shapes import shape_error as _err


def getitem(x, index):
    if not isinstance(index, tuple):
        index = (index,)
    n_real = sum(1 for i in index if i is not None and i is not Ellipsis)
    if n_real > x.ndim:
        raise ShapeError(f"index: too many indices ({n_real}) for shape {x.shape}")
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (x.ndim - n_real) + index[at + 1:]
    else:
        index = index + (slice(None),) * (x.ndim - n_real)
    shrink, flips, strides, final = [], [], [], []
    dim = 0
    for item in index:
        if item is None:
            final.append(1)
            continue
        size = x.shape[dim]
        if isinstance(item, int):
            i = item + size if item < 0 else item
            if not 0 <= i < size:
                raise ShapeError(f"index: {item} is out of range for dim {dim} of size {size}"
                                 f" (shape {x.shape})")
            shrink.append((i, i + 1))
            strides.append(1)
        elif isinstance(item, slice):
            start, stop, step = item.indices(size)
            if step > 0:
                count = max(0, -(-(stop - start) // step))
                shrink.append((start, start + max(count - 1, 0) * step + (1 if count else 0)))
            else:
                count = max(0, -(-(start - stop) // -step))
                lo = start - (count - 1) * (-step) if count else 0
                shrink.append((lo, start + 1 if count else 0))
                flips.append(dim)
            strides.append(abs(step))
            final.append(count)
        else:
            raise ShapeError(f"index: unsupported index {item!r} (ints, slices, None, ...)")
        dim += 1
    out = x.shrink(shrink)
    if flips:
        out = out.flip(flips)
    for dim, step in enumerate(strides):
        if step != 1:
            out = _every(out, dim, step)
    return out.reshape(final)


def _every(x, dim: int, step: int):
    """Every step-th element along dim, as views: split (n, step) and keep column 0; a last
    element past the whole groups is joined on (a pad and an add, fused)."""
    size = x.shape[dim]
    whole, extra = size // step, size % step
    parts = []
    if whole:
        head = x.shrink([(0, s) if i != dim else (0, whole * step) for i, s in enumerate(x.shape)])
        head = head.reshape(x.shape[:dim] + (whole, step) + x.shape[dim + 1:])
        head = head.shrink([(0, s) if i != dim + 1 else (0, 1) for i, s in enumerate(head.shape)])
        parts.append(head.reshape(x.shape[:dim] + (whole,) + x.shape[dim + 1:]))
    if extra:
        parts.append(x.shrink([(0, s) if i != dim else (whole * step, whole * step + 1)
                               for i, s in enumerate(x.shape)]))
    return parts[0] if len(parts) == 1 else type(x).cat(parts, dim)


def _positions(x, index, axis: int, op: str):
    """index as an int32 Tensor on x's device with negative positions counted from the end of
    x's axis, and the axis as a non-negative number."""
    if not -x.ndim <= axis < x.ndim:
        raise _err(op, [x.shape], f"axis {axis} is out of range for {x.ndim} dimensions")
    axis %= x.ndim
    if not isinstance(index, type(x)):
        array = np.asarray(index)
        if array.dtype.kind not in "iu":
            raise _err(op, [x.shape, array.shape],
                       f"indices must be integers, not {array.dtype.name}")
        index = type(x)(array.reshape(-1).astype(np.int32), device=x.device).reshape(array.shape)
    if index.dtype.is_float or index.dtype.name == "bool":
        raise _err(op, [x.shape, index.shape], f"indices must be integers, not {index.dtype.name}")
    index = index.int()
    size = x.shape[axis]
    return (index < 0).where(index + size, index), axis


def _table(x):
    """The node whose buffer a gather of x reads, and x's view of that buffer: x's own buffer
    where x reads one through a view without padding, else x written to one."""
    node = x.node
    if node.op == "load" and node.arg.mask is None:
        return node.src[0], node.arg
    return node, View.contiguous(x.shape)


def take(x, index, axis: int = 0):
    """numpy's take (ONNX's Gather): x's slices along axis at every position of index, the
    index's axes in place of that axis; a position outside the axis reads zeros. Each element
    is read where it lies: an embedding of a large vocabulary costs its rows, not the table."""
    index, axis = _positions(x, index, axis, "take")
    target, view = _table(x)
    lead, tail = x.shape[:axis], x.shape[axis + 1:]
    out_shape = lead + index.shape + tail
    row = view.shrink(tuple((0, 1) if a == axis else (0, s) for a, s in enumerate(x.shape)))
    row = row.reshape(lead + (1,) * index.ndim + tail).expand(out_shape)
    at = index.reshape((1,) * len(lead) + index.shape + (1,) * len(tail)).expand(out_shape)
    return type(x)(lazy.gather(target, at.node, row, view.strides[axis], x.shape[axis]))


def gather(x, axis: int, index):
    """torch's gather (ONNX's GatherElements, numpy's take_along_axis): out[p] = x at p with
    its coordinate on axis replaced by index[p]; index has x's rank and, off axis, at most x's
    sizes. A position outside the axis reads zeros."""
    index, axis = _positions(x, index, axis, "gather")
    if index.ndim != x.ndim or any(i > s for a, (i, s) in enumerate(zip(index.shape, x.shape))
                                   if a != axis):
        raise _err("gather", [x.shape, index.shape], "the index needs the input's rank and, "
                   f"off axis {axis}, at most its sizes")
    target, view = _table(x)
    row = view.shrink(tuple((0, 1) if a == axis else (0, i)
                            for a, i in enumerate(index.shape))).expand(index.shape)
    return type(x)(lazy.gather(target, index.node, row, view.strides[axis], x.shape[axis]))
