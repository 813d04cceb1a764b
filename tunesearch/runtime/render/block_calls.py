"""How a CPU kernel's entry point calls its block function: with constant bounds for a whole
block, through an unmasked copy for a block inside every mask and a masked one for the others,
and through a function of its own for each combination of the axes' tails (or, for an
elementwise kernel's lanes, a whole block shifted back to end at the axis's end)."""
from __future__ import annotations

import itertools

from tunesearch.graph.kernel import Kernel


def _buffer_args(kernel: Kernel) -> str:
    return ", ".join(f"data{i}" for i in range(len(kernel.buffers)))


def shifted_tails(kernel: Kernel, upcast: tuple[int, ...], parallel_axes: tuple[int, ...],
                  vector_bytes: int) -> frozenset[int]:
    """The axes whose tail block runs as a whole block shifted back to end at the axis's end:
    the last axis (the lanes) of an elementwise kernel, where its tail is not whole vectors.
    Its elements are a pure function of the inputs, so those it computes twice come out the
    same; left a tail, the compiler finishes it one element at a time, and where the
    expression holds an exp or a log those few elements cost as much as the rest of the row (a
    local response normalization over 55 columns in blocks of 32 ran 2.2x faster so). Not an
    axis split over the threads: two threads would write the same elements."""
    last = kernel.n_out - 1
    if kernel.reduce is not None or last < 0 or last in parallel_axes:
        return frozenset()
    size, block = kernel.domain[last], upcast[last]
    lanes = max(1, vector_bytes // kernel.buffers[0].dtype.itemsize)
    return frozenset([last]) if size > block and size % block % lanes else frozenset()


def block_args(kernel: Kernel, bounds, origins: dict[int, int] | None = None) -> str:
    origins = origins or {}
    args = [str(origins.get(a, f"o{a}")) for a in range(kernel.n_out)] + [str(b) for b in bounds]
    return _buffer_args(kernel) + "".join(", " + arg for arg in args)


def tail_dispatch(kernel: Kernel, upcast: tuple[int, ...], pack_args: str,
                  name: str, inside_masks: dict[int, tuple[int, int]] | None = None,
                  shifted: frozenset[int] = frozenset()
                  ) -> tuple[list[str], list[tuple[str, str]]]:
    """Nested ifs that call block() with constant bounds for full blocks and each tail's
    function for the axes' tails; also the functions called out of line, as (their call of
    block(), function name). Where views are masked (inside_masks), a full block inside every
    mask runs the unmasked copy and the others a masked one. The tail of an axis in shifted
    is a whole block shifted back to end at the axis's end, computing some elements twice."""
    n_out, domain = kernel.n_out, kernel.domain
    axes_with_tail = [a for a in range(n_out) if domain[a] % upcast[a]]
    out: list[str] = []
    tails: list[tuple[str, str]] = []
    combos = list(itertools.product((False, True), repeat=len(axes_with_tail)))
    for i, combo in enumerate(combos):
        bounds, origins = list(upcast), {}
        tests = []
        for a, is_tail in zip(axes_with_tail, combo):
            if is_tail and a in shifted:
                origins[a] = domain[a] - upcast[a]
            elif is_tail:
                bounds[a] = domain[a] % upcast[a]
            tests.append(f"o{a}+{upcast[a]}{'>' if is_tail else '<='}{domain[a]}")
        prefix = "" if not tests else ("if (" if i == 0 else "else if (") + " && ".join(tests) + ") "
        if i == 0 and inside_masks:
            inside = " && ".join(f"o{a}>={lo} && o{a}+{upcast[a]}<={hi}"
                                 for a, (lo, hi) in sorted(inside_masks.items()))
            # both copies in functions of their own, as the tails: inlined beside each other
            # or in the loop nest, GCC merges them and vectorizes neither
            tails.append((block_args(kernel, bounds + [1]), f"{name}_inner"))
            tails.append((block_args(kernel, bounds + [0]), f"{name}_edge"))
            out.append(prefix + f"{{ if ({inside}) {name}_inner({block_args(kernel, [])}"
                       f"{pack_args}); else {name}_edge({block_args(kernel, [])}"
                       f"{pack_args}); }}")
        elif i == 0:
            out.append(prefix + f"{name}_block({block_args(kernel, bounds)}{pack_args});")
        else:
            tails.append((block_args(kernel, bounds + ([0] if inside_masks else []), origins),
                          f"{name}_tail{i}"))
            out.append(prefix + f"{name}_tail{i}({block_args(kernel, [])}{pack_args});")
    return out, tails
