"""Basic indexing for Tensor: ints, slices (any step), None and Ellipsis, via movement ops."""
from __future__ import annotations

from tunesearch.errors import ShapeError


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
