"""Basic indexing for Tensor: ints, slices (any step), None and Ellipsis, via movement ops."""
from __future__ import annotations


def getitem(x, index):
    from tunesearch.tensor import ShapeError
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
    if any(s != 1 for s in strides):
        # take every s-th element: pad to a multiple of s, split (n, s), keep column 0
        shape, pads = out.shape, []
        for size, s in zip(shape, strides):
            pads.append((0, (-size) % s))
        out = out.pad(pads)
        split = [v for size, s, (_, p) in zip(shape, strides, pads) for v in ((size + p) // s, s)]
        out = out.reshape(split)
        out = out.shrink([r for size, s, (_, p) in zip(shape, strides, pads)
                          for r in ((0, (size + p) // s), (0, 1))])
        out = out.reshape([(size + p) // s for size, s, (_, p) in zip(shape, strides, pads)])
    return out.reshape(final)
