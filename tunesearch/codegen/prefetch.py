"""Fetching a weight's next panel while the blocks still read the current one.

A weight packed when the plan was built (prepacked, codegen/panels.py) is laid out one
panel per block of the outer block loop's axis (B's column blocks under the column loop). Every
inner block (the row blocks) reads the whole current panel from L2, and the first of them brings
it in from L3 or memory: that block waits on the weight's stream at memory speed while the
others compute at register speed. Here each inner block fetches its share of the next panel
(1 / inner blocks of it) in its reduce, a line or a few every step, so the next panel is in L2
when its blocks start and the stream runs beside the arithmetic instead of before it.

The fetch goes to every level (prefetcht0): into L2 only (prefetcht1, prefetcht2) is no faster,
and AMD's cores fill L1 and L2 for every hint alike (docs/defaults.md).

Only where the current and the next panel's slices fit in L2 together: a panel larger than
half of L2 would evict itself while its own blocks still read it.
"""
from __future__ import annotations

import math

from tunesearch.codegen.panels import panel_offset
from tunesearch.space.panel_layout import PackInfo

# at most this many lines fetched per reduce step: past that the block is a stream of the
# weight anyway, with nothing to hide it behind
MAX_LINES_PER_STEP = 4
LINE = 64


def next_panel_fetch(packs: dict[int, PackInfo], prepacked: frozenset[int],
                     order: tuple[int, ...], nblocks: list[int], red_sizes: tuple[int, ...],
                     ktile: int, split: int, l2_bytes: int, threads: int,
                     walk: bool = False) -> list[int]:
    """The prepacked panels whose next block's slice each block fetches (see module doc).
    Only where each thread walks two outer blocks or more (threads share the outer loop in
    runs of consecutive blocks): with one, the next block is another thread's. Where each
    thread walks its blocks once per k tile (walk), the slice fetched is its own block's next
    tile, always the thread's."""
    if not order or split != 1 or not l2_bytes or not red_sizes:
        return []
    outer = order[0]
    if nblocks[outer] < 2 * threads and not walk:
        return []
    return [i for i, p in packs.items() if i in prepacked and p.axes == [outer]
            and 2 * _slice(p, red_sizes, ktile)[1] <= l2_bytes]


def _slice(pack: PackInfo, red_sizes: tuple[int, ...], ktile: int) -> tuple[int, int]:
    """(reduce steps, bytes) of one outer block's panel under one k tile (the whole reduce
    without one)."""
    steps = (ktile or red_sizes[0]) * math.prod(red_sizes[1:])
    return steps, steps * math.prod(pack.lanes) * pack.dtype.itemsize


def fetch_lines(pack: PackInfo, index: int, order: tuple[int, ...], upcast: tuple[int, ...],
                nblocks: list[int], red_sizes: tuple[int, ...], ktile: int,
                step: str, walk: bool = False) -> tuple[str, str]:
    """(declaration, statement) of panel `index`'s fetch: the declaration (at the top of the
    block function, before its reduce loops) points at this block's share of the next
    block's slice (with walk: of its own block's next k tile, after the last tile the next
    block's first); the statement (in the innermost reduce loop) fetches the share's line for
    reduce step `step`, counted from the start of the block's reduce (of its k tile)."""
    outer, inner_axes = order[0], order[1:]
    inner_blocks = math.prod(nblocks[a] for a in inner_axes)
    # this block's place among the blocks of one outer block, in the order they run
    place = "0"
    for a in inner_axes:
        place = f"({place})*{nblocks[a]}+(o{a}/{upcast[a]})" if place != "0" \
            else f"(o{a}/{upcast[a]})"
    steps, slice_bytes = _slice(pack, red_sizes, ktile)
    own = f"(o{outer}/{upcast[outer]})"
    following = f"(o{outer}/{upcast[outer]}+1)"
    has_next = f"{following} < {nblocks[outer]}"
    share = -(-slice_bytes // inner_blocks)
    per_step = -(-share // steps)  # bytes a reduce step fetches: a line every few steps or more
    if ktile:  # the last k tile may be shorter: its shares are of the rows it has
        row_bytes, size = slice_bytes // ktile, red_sizes[0]
        # a walk fetches the block's next tile, the next block's first after the last
        rows = (f"(!last ? (k0+kn+{ktile} <= {size} ? {ktile} : {size}-k0-kn) : "
                f"{has_next} ? {ktile} : kn)") if walk else "(kn)"
        share = f"({rows}*{row_bytes}+{inner_blocks - 1})/{inner_blocks}"
    zeros = ["0"] * (len(pack.reduce) - 1)
    first = ["k0" if ktile else "0"] + zeros
    lanes = ["0"] * len(pack.lanes)
    if walk:
        next_tile = panel_offset(pack, [own], ["k0+kn"] + zeros, lanes)
        next_block = panel_offset(pack, [following], ["0"] + zeros, lanes)
        target = (f"!last ? {next_tile} : {has_next} ? {next_block} : "
                  f"{panel_offset(pack, [own], first, lanes)}")
    else:
        # past the last outer block: the first block's next k tile, or (untiled) the current
        # block's own panel, which is in cache already
        wrap = panel_offset(pack, ["0"], ["k0+kn"] + zeros, lanes) if ktile else \
            panel_offset(pack, [own], first, lanes)
        target = f"{has_next} ? {panel_offset(pack, [following], first, lanes)} : {wrap}"
    declaration = f"const char* nx{index} = (const char*)&pk{index}[{target}] + ({place})*{share};"
    stride = per_step
    if walk:  # the next slice fetched over this tile's steps, which may be the short last one
        per_row = steps // ktile
        shortest = (red_sizes[0] % ktile or ktile) * per_row
        per_step = -(-slice_bytes // inner_blocks // shortest)
        stride = f"nxs{index}"
        declaration += (f" const long nxs{index} = ({share}+kn*{per_row}-1)/(kn*{per_row});")
    statement = " ".join(f"__builtin_prefetch(nx{index} + ({step})*{stride} + {k * LINE}, 0, 3);"
                         for k in range(min(-(-per_step // LINE), MAX_LINES_PER_STEP)))
    return declaration, statement
