"""Views: how an index of a shape maps to an offset in a buffer, so that movement ops never copy.

A view is (shape, strides, offset, mask). The mask is one half-open range per axis; outside of it
the value reads as zero (that is what `pad` makes). Size-1 axes always have stride 0, so two views
that read the same elements compare equal.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional


def strides_for(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major contiguous strides, 0 on size-1 axes."""
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc if size != 1 else 0)
        acc *= size
    return tuple(reversed(strides))


def prod(items) -> int:
    return math.prod(items)


@dataclass(frozen=True)
class View:
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0
    mask: Optional[tuple[tuple[int, int], ...]] = None

    @staticmethod
    def contiguous(shape: tuple[int, ...]) -> "View":
        return View(tuple(shape), strides_for(tuple(shape)), 0, None)

    @staticmethod
    def make(shape, strides, offset=0, mask=None) -> "View":
        shape = tuple(int(s) for s in shape)
        strides = tuple(0 if s == 1 else int(st) for s, st in zip(shape, strides))
        if mask is not None:
            mask = tuple((max(0, lo), min(s, hi)) for (lo, hi), s in zip(mask, shape))
            if all(lo == 0 and hi == s for (lo, hi), s in zip(mask, shape)):
                mask = None
            elif any(lo >= hi for lo, hi in mask):
                # nothing is valid: every read is zero
                mask = tuple((0, 0) for _ in shape)
                strides, offset = tuple(0 for _ in shape), 0
        return View(shape, strides, int(offset), mask)

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def is_contiguous(self) -> bool:
        return self.offset == 0 and self.mask is None and self.strides == strides_for(self.shape)

    @property
    def all_masked(self) -> bool:
        return self.mask is not None and any(lo >= hi for lo, hi in self.mask)

    def span(self) -> tuple[int, int]:
        """The lowest and highest offset that a valid index can reach."""
        if self.all_masked:
            return 0, 0
        box = self.mask or tuple((0, s) for s in self.shape)
        lo = hi = self.offset
        for (a, b), st in zip(box, self.strides):
            if b <= a:
                continue
            ends = (a * st, (b - 1) * st)
            lo += min(ends)
            hi += max(ends)
        return lo, hi

    # ---- movement ops: each returns a new view, or None where one view cannot express it
    def permute(self, order: tuple[int, ...]) -> "View":
        mask = tuple(self.mask[i] for i in order) if self.mask else None
        return View.make([self.shape[i] for i in order], [self.strides[i] for i in order],
                         self.offset, mask)

    def expand(self, shape: tuple[int, ...]) -> "View":
        strides = tuple(0 if s != n else st for s, n, st in zip(self.shape, shape, self.strides))
        mask = None
        if self.mask:
            mask = tuple(((0, n) if s != n and m != (0, 0) else ((0, 0) if s != n else m))
                         for s, n, m in zip(self.shape, shape, self.mask))
        return View.make(shape, strides, self.offset, mask)

    def shrink(self, arg: tuple[tuple[int, int], ...]) -> "View":
        offset = self.offset + sum(lo * st for (lo, _), st in zip(arg, self.strides))
        mask = None
        if self.mask:
            mask = tuple((max(mlo, lo) - lo, min(mhi, hi) - lo)
                         for (mlo, mhi), (lo, hi) in zip(self.mask, arg))
        return View.make([hi - lo for lo, hi in arg], self.strides, offset, mask)

    def pad(self, arg: tuple[tuple[int, int], ...]) -> "View":
        if all(b == 0 and a == 0 for b, a in arg):
            return self
        shape = [s + b + a for s, (b, a) in zip(self.shape, arg)]
        box = self.mask or tuple((0, s) for s in self.shape)
        mask = tuple((lo + b, hi + b) for (lo, hi), (b, _) in zip(box, arg))
        offset = self.offset - sum(b * st for (b, _), st in zip(arg, self.strides))
        return View.make(shape, self.strides, offset, mask)

    def flip(self, axes: tuple[int, ...]) -> "View":
        strides, offset, mask = list(self.strides), self.offset, list(self.mask or [])
        for ax in axes:
            size = self.shape[ax]
            offset += (size - 1) * strides[ax]
            strides[ax] = -strides[ax]
            if mask:
                lo, hi = mask[ax]
                mask[ax] = (size - hi, size - lo)
        return View.make(self.shape, strides, offset, tuple(mask) if mask else None)

    def reshape(self, new_shape: tuple[int, ...]) -> Optional["View"]:
        new_shape = tuple(new_shape)
        if new_shape == self.shape:
            return self
        if prod(new_shape) != self.size:
            return None
        if self.size == 0:  # no element is addressed: any strides do, the contiguous ones
            return View.make(new_shape, strides_for(new_shape), self.offset)
        if self.mask is not None:
            return self._reshape_masked(new_shape)
        strides = _reshape_strides(self.shape, self.strides, new_shape)
        return None if strides is None else View.make(new_shape, strides, self.offset)

    def _reshape_masked(self, new_shape: tuple[int, ...]) -> Optional["View"]:
        # only adding or removing size-1 axes keeps a mask expressible
        old = [i for i, s in enumerate(self.shape) if s != 1]
        if [self.shape[i] for i in old] != [s for s in new_shape if s != 1]:
            return None
        if any(self.mask[i] != (0, 1) for i, s in enumerate(self.shape) if s == 1):
            return None  # a masked-out size-1 axis: keep it simple, let the caller copy
        it = iter(old)
        strides, mask = [], []
        for s in new_shape:
            if s == 1:
                strides.append(0)
                mask.append((0, 1))
            else:
                i = next(it)
                strides.append(self.strides[i])
                mask.append(self.mask[i])
        return View.make(new_shape, strides, self.offset, tuple(mask))

    def key(self) -> str:
        mask = "" if self.mask is None else "m" + ",".join(f"{a}:{b}" for a, b in self.mask)
        return (f"v({','.join(map(str, self.shape))};{','.join(map(str, self.strides))};"
                f"{self.offset}{';' + mask if mask else ''})")


def _reshape_strides(shape, strides, new_shape) -> Optional[tuple[int, ...]]:
    """numpy's no-copy reshape rule, with size-1 axes ignored."""
    old = [(s, st) for s, st in zip(shape, strides) if s != 1]
    new_strides = [0] * len(new_shape)
    new_idx = [i for i, s in enumerate(new_shape) if s != 1]
    oi = ni = 0
    while ni < len(new_idx) and oi < len(old):
        n_group, o_group = [new_idx[ni]], [oi]
        np_, op = new_shape[new_idx[ni]], old[oi][0]
        while np_ != op:
            if np_ < op:
                ni += 1
                n_group.append(new_idx[ni])
                np_ *= new_shape[new_idx[ni]]
            else:
                oi += 1
                o_group.append(oi)
                op *= old[oi][0]
        for a, b in zip(o_group, o_group[1:]):
            if old[a][1] != old[b][0] * old[b][1]:
                return None
        stride = old[o_group[-1]][1]
        for idx in reversed(n_group):
            new_strides[idx] = stride
            stride *= new_shape[idx]
        ni += 1
        oi += 1
    return tuple(new_strides)
