"""Reads of masked views (a padded copy, a neighbour channel off the edge) in C that the compiler
vectorizes.

A masked read written as `test ? x[i] : 0` is a load under a condition; GCC vectorizes it only
where it can make it a masked vector load at an address that moves by whole elements with the
lanes. A test on an axis other than the lanes (the neighbour channel a local response
normalization reads, the row of a padded copy) gives it neither: the whole block then runs one
element at a time (docs/defaults.md). So:

- the index of each masked axis other than the lanes is clamped into its valid range, which makes
  the read an in-bounds address whatever the test says: it is read unconditionally, and its value
  is kept or zeroed by a bit mask (an `and` with 0 or all ones: no branch, no select on a scalar
  condition, both of which stop GCC's vectorizer);
- only a test on the lanes' own axis, where the view reads them one after the other, stays a
  condition on the load: a masked vector load at an affine address, which GCC does vectorize.
  Where it reads them a stride apart (a transposed read), the lanes are gathered either way and
  their axis is clamped too: GCC gathers unconditionally but leaves a masked gather one element
  at a time.

Where a test passes, its clamp changes nothing, so the value read is the one the plain read gives.
A select on a mask test (a pool's padding value) is picked through the bits the same way
(`ts_select`, CDialect.select): under `test ? read : value` GCC moves the read into a branch.
A select on a test computed per lane stays `?:`, which GCC makes a blend.
"""
from __future__ import annotations

from typing import Callable

from tunesearch.graph.dtypes import DType, dtypes
from tunesearch.graph.kernel import KNode
from tunesearch.graph.view import View
from tunesearch.codegen.dialect import Dialect, mask_tests

# a float kept or zeroed by an int test (0 or 1) through its bits, and one of two floats
# picked so
KEEP = """#ifndef TUNESEARCH_KEEP
#define TUNESEARCH_KEEP
static inline float ts_keep(float v, int keep) {
  int b; memcpy(&b, &v, 4); b &= -keep; memcpy(&v, &b, 4); return v;
}
static inline float ts_select(int pick, float a, float b) {
  int x, y; memcpy(&x, &a, 4); memcpy(&y, &b, 4); x = (x & -pick) | (y & ~-pick);
  memcpy(&a, &x, 4); return a;
}
#endif
"""


def masked_read(d: Dialect, view: View, buffer: str, dtype: DType,
                axis_index: Callable[[int], str], holds: Callable[[int], str | None],
                lane_axes: frozenset[int]) -> str:
    """The C expression that reads `buffer` through a masked view at the domain index, zero
    outside the mask. lane_axes: the axes whose index moves along the vector lanes."""
    zero = d.literal(0, dtype)
    if any(lo >= hi for lo, hi in view.mask):
        return zero
    masked = [a for a, ((lo, hi), size) in enumerate(zip(view.mask, view.shape))
              if lo > 0 or hi < size]
    guarded = [a for a in masked if a in lane_axes and view.strides[a] == 1]
    clamped = {a for a in masked if a not in guarded and view.strides[a]}

    def index(axis: int) -> str:
        x = axis_index(axis)
        if axis not in clamped:
            return x
        (lo, hi), size = view.mask[axis], view.shape[axis]
        c = f"({x}>{hi - 1}?{hi - 1}:{x})" if hi < size else x
        c = f"({x}<{lo}?{lo}:{c})" if lo > 0 else c
        flag = holds(axis)
        return f"({flag}?{x}:{c})" if flag else c

    read = _split_read(view, buffer, index, lane_axes)
    if guarded:
        read = f"(({_all(view, axis_index, holds, guarded)})?{read}:{zero})"
    kept = [a for a in masked if a not in guarded]
    if not kept:
        return read
    return _kept(d, read, _all(view, axis_index, holds, kept), dtype)


def gathered_read(d: Dialect, node: KNode, buffer: str, index: str,
                  axis_index: Callable[[int], str], lane_axes: frozenset[int]) -> str:
    """The C expression of a gather (graph.kernel.KNode): `buffer` through its view, at its
    index (the name of a variable) times the gathered axis's stride, 0 where the index lies
    outside the axis. As for a masked read, the index is clamped into the axis, so the read is
    in bounds and unconditional, and its value kept or zeroed by the test: a row of an
    embedding along the vector lanes is then one plain vector load per token."""
    _, view, stride, size = node.arg
    clamped = f"({index}<0?0:({index}>{size - 1}?{size - 1}:{index}))"
    row = f"({buffer}+{clamped}*{stride})" if stride else buffer
    read = _split_read(view, row, axis_index, lane_axes)
    return _kept(d, read, f"({index}>=0)&({index}<{size})", node.dtype)


def _kept(d: Dialect, read: str, test: str, dtype: DType) -> str:
    """read where the int test is 1, else 0: through its bits (no branch, no select on a scalar
    condition, which stop GCC's vectorizer) where the type allows."""
    if dtype is dtypes.float32:
        return f"ts_keep({read},{test})"
    if dtype in (dtypes.int32, dtypes.bool):
        return f"({read}&-({test}))"
    return f"(({test})?{read}:{d.literal(0, dtype)})"


def _split_read(view: View, buffer: str, index: Callable[[int], str],
                lane_axes: frozenset[int]) -> str:
    """buffer read at the view's offset: `(buffer+(base))[lanes]`, the part that does not move
    with the lanes (the clamped rows) added to the pointer apart from the part that does.
    Written as one int sum, GCC cannot prove that the sum does not wrap before it is widened,
    takes the address as no affine function of the lanes and vectorizes a guarded read only
    as a gather, which its tuning for some CPUs (Zen 2, generic x86-64-v3) does not allow:
    the blocks on a padded map's border then ran one element at a time."""
    base = [str(view.offset)] if view.offset else []
    lanes = []
    for axis, stride in enumerate(view.strides):
        if stride:
            term = f"{index(axis)}*{stride}" if stride != 1 else index(axis)
            (lanes if axis in lane_axes else base).append(term)
    if not base or not lanes:
        return f"{buffer}[{'+'.join(base + lanes) or '0'}]"
    return f"({buffer}+({'+'.join(base)}))[{'+'.join(lanes)}]"


def _all(view: View, axis_index, holds, axes) -> str:
    """The tests on axes as one int: `&` (no branches), each test a 0 or 1."""
    return "&".join(f"({t})" for t in mask_tests(view, axis_index, holds, axes))
