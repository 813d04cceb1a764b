"""How a CPU kernel's entry point calls its block function: with constant bounds for a whole
block, through an unmasked copy for a block inside every mask and a masked one for the others,
and through a function of its own for each combination of the axes' tails (or, for the lanes,
a few whole vectors shifted back to end at the axis's end)."""
from __future__ import annotations

import itertools

from tunesearch.graph.kernel import Kernel


def _buffer_args(kernel: Kernel) -> str:
    return ", ".join(f"data{i}" for i in range(len(kernel.buffers)))


# the narrowest vector register a tail's lanes run in (SSE's and NEON's, AVX's xmm)
MIN_VECTOR_BYTES = 16


def vector_pieces(lanes: int, vector: int, narrowest: int) -> int:
    """The instructions a row of `lanes` elements takes per step: whole vectors, then one of
    each narrower width down to `narrowest` elements that fits in what is left (the compiler
    finishes a loop so), then one per element."""
    pieces, rest, width = lanes // vector, lanes % vector, vector // 2
    while width >= narrowest:
        if rest >= width:
            pieces, rest = pieces + 1, rest - width
        width //= 2
    return pieces + rest


def shifted_tails(kernel: Kernel, upcast: tuple[int, ...], parallel_axes: tuple[int, ...],
                  vector_bytes: int, tiled: bool = False,
                  packed_axes: frozenset[int] = frozenset()) -> dict[int, int]:
    """The axes whose tail runs shifted back to end at the axis's end, each with the width it
    runs at then: the last axis (the lanes), its tail rounded up to the narrowest width that
    takes the fewest instructions per step (at most a whole block), where that is fewer than
    the tail as it is, which the compiler runs in whole vectors, then narrower ones, then one
    element at a time (a tail of 7 floats at AVX2 or AVX-512: one 8-float vector against four
    instructions; 23 at AVX-512: 24, a vector and a half, against five). A tail of 4 at
    AVX-512 is one narrower vector already. Each output element is a pure function of the
    inputs, so those computed twice come out the same: where an elementwise expression holds
    an exp or a log the elements run one at a time cost as much as the rest of the row, and a
    reduce runs its whole window for each of them (docs/defaults.md). Not an axis split over
    the threads: two threads would write the same elements (storing only the lanes past the
    block before's instead is no faster: GCC copies such a run out through memory). Not for a
    reduce in k tiles, whose blocks add to partial sums kept between tiles (a block shifted
    over another would add its share twice), along an axis a panel is blocked on (its blocks
    are found from the origin; its tail runs whole over the zero padding anyway), or read with
    a stride along the lanes: the compiler finishes a strided read's last vector one element at a time
    whatever its width (the vector would read past the last element)."""
    last = kernel.n_out - 1
    if last < 0 or last in parallel_axes or any(n.arg[0] == 0 for n in kernel.loads()):
        return {}
    if kernel.reduce is not None and (tiled or last in packed_axes or any(
            n.arg[1].strides[last] not in (0, 1) for n in kernel.loads())):
        return {}
    size, block = kernel.domain[last], upcast[last]
    itemsize = kernel.buffers[0].dtype.itemsize
    vector = max(1, vector_bytes // itemsize)
    narrowest = max(1, MIN_VECTOR_BYTES // itemsize)
    tail = size % block
    if size <= block or not tail:
        return {}
    # the narrowest width of the fewest pieces, from the tail up to whole vectors
    widths = range(-(-tail // narrowest) * narrowest,
                   min(block, -(-tail // vector) * vector) + 1, narrowest)
    best = min(widths, key=lambda w: (vector_pieces(w, vector, narrowest), w), default=None)
    if best is None or vector_pieces(best, vector, narrowest) >= \
            vector_pieces(tail, vector, narrowest):
        return {}
    return {last: best}


def block_args(kernel: Kernel, bounds, origins: dict[int, int] | None = None) -> str:
    origins = origins or {}
    args = [str(origins.get(a, f"o{a}")) for a in range(kernel.n_out)] + [str(b) for b in bounds]
    return _buffer_args(kernel) + "".join(", " + arg for arg in args)


def tail_dispatch(kernel: Kernel, upcast: tuple[int, ...], pack_args: str,
                  name: str, inside_masks: dict[int, tuple[int, int]] | None = None,
                  shifted: dict[int, int] | None = None, lanes_flag: int | None = None
                  ) -> tuple[list[str], list[tuple[str, str]]]:
    """Nested ifs that call block() with constant bounds for full blocks and each tail's
    function for the axes' tails; also the functions called out of line, as (their call of
    block(), function name). Where views are masked (inside_masks), a full block inside every
    mask runs the unmasked copy and the others a masked one. The tail of an axis in shifted
    runs as that many elements shifted back to end at the axis's end, computing some elements
    twice. With lanes_flag (the lanes' axis, masked besides others), the block function takes a
    second flag for that axis, and a block inside on every other axis runs a third copy that
    tests only its lanes."""
    shifted = shifted or {}
    flags = (lambda inner, lanes: [inner, lanes]) if lanes_flag is not None else \
        (lambda inner, lanes: [inner])
    n_out, domain = kernel.n_out, kernel.domain
    axes_with_tail = [a for a in range(n_out) if domain[a] % upcast[a]]
    out: list[str] = []
    tails: list[tuple[str, str]] = []
    combos = list(itertools.product((False, True), repeat=len(axes_with_tail)))

    def inside(axes) -> str:
        return " && ".join(f"o{a}>={lo} && o{a}+{upcast[a]}<={hi}"
                           for a, (lo, hi) in sorted((inside_masks or {}).items()) if a in axes)
    rows_inside = inside(set(inside_masks or ()) - {lanes_flag})
    for i, combo in enumerate(combos):
        bounds, origins = list(upcast), {}
        tests = []
        for a, is_tail in zip(axes_with_tail, combo):
            if is_tail and a in shifted:
                bounds[a] = shifted[a]
                origins[a] = domain[a] - shifted[a]
            elif is_tail:
                bounds[a] = domain[a] % upcast[a]
            tests.append(f"o{a}+{upcast[a]}{'>' if is_tail else '<='}{domain[a]}")
        prefix = "" if not tests else ("if (" if i == 0 else "else if (") + " && ".join(tests) + ") "
        if i == 0 and inside_masks:
            # the copies in functions of their own, as the tails: inlined beside each other
            # or in the loop nest, GCC merges them and vectorizes none
            tails.append((block_args(kernel, bounds + flags(1, 1)), f"{name}_inner"))
            tails.append((block_args(kernel, bounds + flags(0, 0)), f"{name}_edge"))
            args = f"({block_args(kernel, [])}{pack_args})"
            lanes_test = ""
            if lanes_flag is not None:
                tails.append((block_args(kernel, bounds + flags(1, 0)), f"{name}_lanes"))
                lanes_test = f" else if ({rows_inside}) {name}_lanes{args};"
            out.append(prefix + f"{{ if ({inside(set(inside_masks))}) {name}_inner{args};"
                       f"{lanes_test} else {name}_edge{args}; }}")
        elif i == 0:
            out.append(prefix + f"{name}_block({block_args(kernel, bounds)}{pack_args});")
        else:
            tails.append((block_args(kernel, bounds + (flags(0, 0) if inside_masks else []),
                                     origins), f"{name}_tail{i}"))
            call = f"{name}_tail{i}({block_args(kernel, [])}{pack_args});"
            if lanes_flag is not None:  # a tail whose rows lie inside tests only its lanes
                tails.append((block_args(kernel, bounds + flags(1, 0), origins),
                              f"{name}_tail{i}_lanes"))
                call = f"{{ if ({rows_inside}) {name}_tail{i}_lanes(" \
                       f"{block_args(kernel, [])}{pack_args}); else {call} }}"
            out.append(prefix + call)
    return out, tails
