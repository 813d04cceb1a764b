"""The default CPU config of a matmul at heart (kernel_shape.gemm_axes), derived from the target
model (space/cpu_model.py): its register block, which operands it packs into panels, its k tile
and column cache block, and which side's blocks run outermost. cpu_default.py chooses the rest
(the threads, the loop order, and the defaults of every other kernel).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from tunesearch.graph.kernel import Kernel
from tunesearch.space import cpu_model
from tunesearch.space.config import Config
from tunesearch.space.kernel_shape import gemm_axes, packable
from tunesearch.space.spaces import prod
from tunesearch.space.target import Target

KTILES = (64, 128, 256, 512, 1024)  # the k tiles the knob offers; the model's rounds down to one
CBLOCKS = (1, 2, 4, 8, 16, 32)  # the column cache blocks the knob offers, in register blocks
# the register-block sizes the space offers along an output axis
UpcastChoices = Callable[[int], tuple[int, ...]]


def register_blocks(kernel: Kernel, upcast) -> list[int]:
    """The number of register blocks along each output axis."""
    return [-(-kernel.domain[a] // upcast[a]) for a in range(kernel.n_out)]


def matmul_layout(kernel: Kernel, target: Target, gemm: tuple[int, int, int],
                  upcast_choices: UpcastChoices, constants: frozenset[int]) -> dict[str, Any]:
    """The knobs of a matmul at heart (gemm: its row axis, column axis and column side, see
    kernel_shape.gemm_axes) but the order and the threads, with the axis the model puts
    outermost (`first`) or innermost (`last`), None where it leaves that to the order: the
    register block of the model; the column side packed where the panel pays
    for its copy (cpu_model.panel_pays: every row block reads the sliver again, and a panel
    makes it one contiguous stream) or costs nothing (a weight, _weight_read_again), any
    operand read with a stride along the vector lanes (a convolution's windows), and the
    row side where its rows lie side by side and the reduce strides (a channels-first input
    with the positions as rows: a block's rows take a cache line of their own at every step
    of the reduce, a panel makes them one stream) or they leave L2, where the copy pays
    (_row_copy_pays: a weight's is made once, another's on every call), or it is a weight
    whose rows lie lines apart (_weight_rows_apart); the
    column blocks outermost while a column and a row sliver of the whole reduce stay in L2
    together (BLIS's jr loop around ir), but the row blocks outermost where the column
    blocks would write more output rows at once than a prefetcher follows and the column
    side each row block reads again stays near (cpu_model.writes_scatter), else a k tile
    that keeps the outer blocks' sliver in L1 (_tiled_outer says which side is outer), or
    one that keeps every row beside a column sliver in L2 (_rows_tile); a column panel
    streamed from rows a page or more apart filled several column blocks at once
    (fill_group), under a k tile where the whole reduce leaves no room for that (group_tile:
    the tile was taken for the group alone); and a model's weight walked by the model's k tile
    where the row sliver of the whole reduce leaves L1, on the best block whose column blocks
    the threads split evenly."""
    layout = _matmul_layout(kernel, target, gemm, upcast_choices, constants)
    if layout.pop("walk_uneven"):
        # the walk would pay but for a register block whose column blocks the threads split
        # unevenly: the best block among those they split evenly, where it walks
        _, col, _ = gemm
        threads = target.threads

        def even(choices: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(c for c in choices if -(-kernel.domain[col] // c) % threads == 0)
        walked = _matmul_layout(kernel, target, gemm, lambda a: even(upcast_choices(a))
                                if a == col else upcast_choices(a), constants)
        if not walked.pop("walk_uneven") and walked["ktile"] and even(
                (walked["upcast"][col],)):
            return walked
    return layout


def _matmul_layout(kernel: Kernel, target: Target, gemm: tuple[int, int, int],
                   upcast_choices: UpcastChoices, constants: frozenset[int]) -> dict[str, Any]:
    """matmul_layout's knobs for the register block the model takes among upcast_choices,
    and whether the walk was not taken only because the threads split its column blocks
    unevenly (walk_uneven)."""
    n_out, domain = kernel.n_out, kernel.domain
    itemsize = kernel.buffers[0].dtype.itemsize
    upcast = [1] * n_out
    ktile, first, last_axis, cblock, group_tile = 0, None, None, 1, False
    row, col, b_side = gemm
    views = {n.arg[0]: n.arg[1] for n in kernel.loads()}
    reduce_axes = [a for a in range(n_out, len(domain)) if domain[a] > 1]
    reduce_size = prod(domain[n_out:])
    block = cpu_model.register_block(
        target, itemsize, rows_max=domain[row], columns_max=domain[col],
        sizes=(domain[row], domain[col]),
        row_choices=upcast_choices(row),
        column_choices=upcast_choices(col), reduce=reduce_size,
        tail_vectors=reads_windows(kernel))
    upcast[row] = min(block.rows, domain[row])
    upcast[col] = min(block.columns, domain[col])
    packs = packable(kernel)
    row_copy = _row_copy_pays(kernel, col, upcast, constants)
    pack = tuple(i for i in packs
                 if views[i].strides[col] not in (0, 1)
                 or (i == b_side and (_column_panel_pays(
                     kernel, target, views[i], row, col, upcast)
                     or _weight_read_again(kernel, i, upcast, constants)))
                 or (_rows_across_lines(views[i], row, col, reduce_axes)
                     and row_copy(i)))
    unroll = 4
    # per column block the column sliver stays in L2 while the rows stream past
    # it: both slivers of the whole reduce must stay there together (BLIS's way
    # count, as for the k tile in L1)
    first = col
    out_bytes = prod(domain[:n_out]) * itemsize
    column_bytes = out_bytes // domain[row] * reduce_size  # im2col's or B's size
    if kernel.out_view.strides[col] == 1 and cpu_model.writes_scatter(
            target, prod(domain[a] for a in range(n_out) if a != col), out_bytes,
            reduce_size * itemsize, column_bytes):
        first, last_axis = None, col  # row blocks outermost: the output row by row
    elif cpu_model.threads_share_rows(target, domain[row] * reduce_size * itemsize,
                                      column_bytes,
                                      register_blocks(kernel, upcast)[col]):
        first, last_axis = None, col  # the threads share the rows (A)
    if not cpu_model.stay_together(target.l2, reduce_size * upcast[col] * itemsize,
                                   reduce_size * upcast[row] * itemsize):
        # the tile keeps the sliver of the outer blocks resident in L1 beside the
        # inner ones' (see _tiled_outer for which side is outer)
        tile = model_ktile(kernel, target, Config.make(upcast=tuple(upcast)))
        if tile < domain[n_out]:
            ktile, first = tile, _tiled_outer(kernel, target, row, col, tile)
    elif first == col:
        ktile = _rows_tile(kernel, target, row, col, upcast)
    if b_side not in pack and b_side in packs and first == col and \
            domain[row] > upcast[row] and _steps_on_own_pages(
                kernel, target, views[b_side], reduce_axes, upcast[col], itemsize,
                register_blocks(kernel, upcast)[row]):
        pack = tuple(sorted(pack + (b_side,)))
    if b_side in pack and b_side not in constants and first == col and \
            _rows_on_own_pages(views[b_side], reduce_axes, itemsize):
        # its panel streamed block by block under the column loop (codegen/c.py),
        # filled several blocks at once, under a k tile where one block's panel of
        # the whole reduce leaves no room for two
        step = reduce_size // domain[n_out] * itemsize  # a step of the first axis
        panel, rows = step * upcast[col], step * domain[row]

        def group(tile: int) -> int:
            return fill_group(target, panel * (tile or domain[n_out]),
                              rows * (tile or domain[n_out]))
        if not ktile:
            ktile = next((t for t in (0, *KTILES[::-1])
                          if t < domain[n_out] and group(t) > 1), 0)
            group_tile = ktile > 0
        cblock = group(ktile)
    a_side = next((i for i in packs if i != b_side), None)
    if a_side is not None and a_side not in pack and (
            (row_copy(a_side) and _row_tile_leaves_l2(
                kernel, target, views[a_side], row, col, upcast, ktile, first))
            or (a_side in constants and _weight_rows_apart(
                kernel, target, views[a_side], row, col, upcast))):
        pack = tuple(sorted(pack + (a_side,)))
    part = upcast[col] % target.lanes(itemsize)
    whole = upcast[col] - part + target.lanes(itemsize)
    if b_side in pack and bin(part).count("1") > 1 and whole in upcast_choices(col):
        # a part vector that is no one narrower vector runs its reduce on a whole
        # one where the panel is padded (80 for 77 columns), where GCC ran the 13
        # columns as 8, 4 and 1 at every step; 24 columns (16 and 8) stay
        # (docs/defaults.md)
        upcast[col] = whole
    walk = not ktile and first == col and b_side in pack and set(pack) <= constants and \
        domain[row] > upcast[row] and \
        not cpu_model.fits(target.l1d, reduce_size * upcast[row] * itemsize) and \
        cpu_model.fits(target.l2, reduce_size * domain[row] * itemsize)
    walk_uneven = walk and register_blocks(kernel, upcast)[col] % target.threads != 0
    if walk and not walk_uneven:
        # a weight (from memory in every call of a model, search/measure.from_memory) under
        # row blocks whose sliver of the whole reduce leaves L1 while the panel streams past
        # (all the rows in L2: the weight's stream is what the kernel waits on): walked
        # tile by tile of the reduce (each thread its own blocks once per tile,
        # codegen/c_entry.py), the row sliver stays in L1 and the weight's next tile is
        # fetched beside the arithmetic on this one, where untiled each column block's first
        # row block waits on the stream of its whole panel. Where the row sliver stays in L1
        # the tiles' partial sums cost more than the stream, and where the threads' runs of
        # blocks split a column block, each reads the whole panel's tiles but fetches only
        # its rows' shares of them (docs/defaults.md)
        tile = model_ktile(kernel, target, Config.make(upcast=tuple(upcast)))
        ktile = tile if tile < domain[n_out] else 0
    return dict(upcast=upcast, pack=pack, unroll=unroll, ktile=ktile, first=first,
                last=last_axis, cblock=cblock, group_tile=group_tile, walk_uneven=walk_uneven)


def _reduce_step_bytes(view, reduce_axes: list[int], itemsize: int) -> int:
    """How far apart in bytes view reads two steps of the innermost reduce axis (0 where
    there is no reduce axis)."""
    return abs(view.strides[reduce_axes[-1]]) * itemsize if reduce_axes else 0


def _rows_on_own_pages(view, reduce_axes: list[int], itemsize: int) -> bool:
    """Whether each step of the innermost reduce axis reads the column operand a page or more
    from the last (a wide matmul's B, an im2col copy of a large map)."""
    return _reduce_step_bytes(view, reduce_axes, itemsize) >= cpu_model.PAGE


def fill_group(target: Target, panel_bytes: int, rows_bytes: int) -> int:
    """The column cache block (BLIS's nc, in register blocks): how many column blocks' panels
    of panel_bytes each a streamed fill writes at once. The fill reads each reduce step's run
    of the column operand; where those runs lie a page or more apart, each costs a page walk
    and a stream the prefetchers start anew, and a run of one block's few lines (96 bytes for
    AVX2's 24 columns) waits on them at every step. Read across several blocks at once, the
    run is that many times longer. The group's panels stay in L2 while every row block reads
    them, and the next group's fill needs the same room: twice the group fits there
    (cpu_model.fits), beside the rows every column block reads (rows_bytes, the row side's
    sliver of the reduce or its tile) where those stay there too; where they do not, they
    stream past either way (docs/defaults.md has the measurements)."""
    beside = rows_bytes if cpu_model.fits(target.l2, rows_bytes) else 0
    return max(c for c in CBLOCKS
               if c == 1 or cpu_model.fits(target.l2, 2 * c * panel_bytes + beside))


# reduces longer than this are judged by their first steps: the pattern of lines repeats
PANEL_SAMPLE = 1 << 16


def _column_panel_pays(kernel: Kernel, target: Target, view, row: int, col: int,
                       upcast: list[int]) -> bool:
    """Whether the column side's sliver, read in place by every row block, is better packed
    (cpu_model.panel_pays). Buffers start on a cache line (runtime/cpu.py aligned_empty)."""
    n_out, domain = kernel.n_out, kernel.domain
    itemsize = kernel.buffers[0].dtype.itemsize
    steps = np.array(np.unravel_index(np.arange(min(prod(domain[n_out:]), PANEL_SAMPLE)),
                                      domain[n_out:]))
    starts = (view.offset + np.asarray(view.strides[n_out:]) @ steps) * itemsize
    reads = -(-domain[row] // upcast[row])
    return cpu_model.panel_pays(target, starts, upcast[col] * itemsize, reads)


def _weight_read_again(kernel: Kernel, index: int, upcast: list[int],
                       constants: frozenset[int]) -> bool:
    """Whether the column side is a weight that more than one row block reads: its panel is
    made once, when a plan is built, so every row block reads one contiguous stream in the
    order the reduce takes it, for nothing per call, instead of a run of the block's columns
    a row apart at every step (docs/defaults.md). The row blocks count along every output
    axis the weight does not vary on: a convolution reading its windows in place channels
    last has its rows along the output rows and columns, a block a whole row."""
    if index not in constants:
        return False
    view = next(n.arg[1] for n in kernel.loads() if n.arg[0] == index)
    blocks = register_blocks(kernel, upcast)
    return prod(blocks[a] for a in range(kernel.n_out) if view.strides[a] == 0) > 1


# a column side whose reduce steps lie half a page apart (or more, less than a page) is packed
# on every call only where at least this many row blocks read the panel, so the copy is read
# often enough to pay (docs/defaults.md)
HALF_PAGE_PACK_READS = 16


def _steps_on_own_pages(kernel: Kernel, target: Target, view, reduce_axes: list[int],
                        columns: int, itemsize: int, reads: int) -> bool:
    """Whether each step of the innermost reduce axis reads the column sliver on a page of its
    own (an im2col copy's or a wide matmul operand's rows, a page or more apart), or on half
    of one where at least HALF_PAGE_PACK_READS row blocks (`reads`) read it, and the sliver
    does not stay in L1. Every row block reads the sliver again: in place, at a page and a TLB
    entry per step, which the prefetchers do not cross; packed, with the column blocks
    outermost, it is filled block by block just before its row blocks (codegen/c.py, streamed
    panels): one read of the sliver, which the first row block would make anyway, and a write
    into L2, after which every re-read is one contiguous stream. (Where the threads share the
    column loop with the next, fewer than four column blocks a thread, the panel is filled
    whole ahead instead: a few blocks' worth, which stays in the caches.) A sliver that L1
    holds beside the row side's stream (all its ways but one, cpu_model.holds) is re-read from
    there: the copy would only add (docs/defaults.md). Steps half a page apart (an im2col copy
    of a 28x28 map, 3 KiB a step) leave the prefetchers one or two steps a page, no run to
    follow either, but the copy, made on every call, must be read often enough."""
    steps = prod(kernel.domain[kernel.n_out:])
    step = _reduce_step_bytes(view, reduce_axes, itemsize)
    apart = step >= cpu_model.PAGE or (2 * step >= cpu_model.PAGE and
                                       reads >= HALF_PAGE_PACK_READS)
    return apart and not cpu_model.holds(target.l1d, steps * columns * itemsize)


# a row side packed on every call (not a weight, which a plan packs once) is copied whole for
# the column blocks that read it: it pays only where at least this many of them read the panel
# (each block reads every row, or one row block's, again; docs/defaults.md)
PER_CALL_PACK_READS = 8


def _row_copy_pays(kernel: Kernel, col: int, upcast: list[int], constants: frozenset[int]
                   ) -> Callable[[int], bool]:
    """Whether packing row side `index` can pay for its copy: a weight's is made once, when a
    plan is built; any other operand's on every call, for ceil(columns / block) column blocks
    to read (PER_CALL_PACK_READS)."""
    reads = -(-kernel.domain[col] // upcast[col])
    return lambda index: index in constants or reads >= PER_CALL_PACK_READS


def _weight_rows_apart(kernel: Kernel, target: Target, view, row: int, col: int,
                       upcast: list[int]) -> bool:
    """Whether a row side that is a weight (packed once, when a plan is built: nothing per
    call) is read better packed: where its rows lie a cache line or more apart, every step of
    the reduce reads a line of each row of the register block, one stream per row (a page
    apart or more from 1024 floats of reduce on), where the panel is one stream in the order
    the reduce takes it (docs/defaults.md)."""
    itemsize = kernel.buffers[0].dtype.itemsize
    return _rows_read_again(kernel, view, col, upcast) and \
        abs(view.strides[row]) * itemsize >= target.l1d.line


def _rows_read_again(kernel: Kernel, view, col: int, upcast: list[int]) -> bool:
    """Whether view is an unmasked row side (constant along the columns) that more than one
    column block reads again: the only case where packing it can change what is read."""
    return view.mask is None and view.strides[col] == 0 and kernel.domain[col] > upcast[col]


def _rows_across_lines(view, row: int, col: int, reduce_axes: list[int]) -> bool:
    """Whether view is a row side (varies along the rows, not the columns) whose rows are
    adjacent and whose innermost reduce axis is strided."""
    strides = view.strides
    return bool(reduce_axes) and strides[row] == 1 and strides[col] == 0 and \
        strides[reduce_axes[-1]] not in (0, 1)


def reads_windows(kernel: Kernel) -> bool:
    """Whether a matmul-like reduce reads a convolution's windows in place: a reduce axis of its
    column operand runs along the columns (the kernel's width). The default reads such an
    operand as it is (no panel padded to whole blocks), so a tail block runs only the vectors
    its columns need."""
    gemm = gemm_axes(kernel)
    if gemm is None:
        return False
    _, col, b_side = gemm
    view = next(n.arg[1] for n in kernel.loads() if n.arg[0] == b_side)
    return view.strides[col] != 0 and any(
        view.strides[a] == view.strides[col] for a in range(kernel.n_out, len(kernel.domain)))


def _row_tile_leaves_l2(kernel: Kernel, target: Target, view, row: int, col: int,
                        upcast: list[int], ktile: int, first: int) -> bool:
    """Whether a row side read in place as whole rows of the reduce (a matmul's first
    operand) is better packed, as BLIS packs it: where the rows every column block reads
    again (all of them with the column blocks outermost, else one row block's) do not stay
    in L2 beside the column sliver, in size (cpu_model.holds) or because they crowd its sets
    (cpu_model.crowds_l2: rows a power of two apart). Each column block then streams them
    from L3 again: in place one stream per row of the register block, packed one stream in
    the order the reduce takes it."""
    n_out, domain = kernel.n_out, kernel.domain
    strides = view.strides
    run = prod(domain[n_out:]) if not ktile else ktile * prod(domain[n_out + 1:])
    contiguous = strides[-1] == 1 and all(
        strides[a] == strides[a + 1] * domain[a + 1] for a in range(n_out, len(domain) - 1))
    if not contiguous or strides[row] in (0, 1) or \
            not _rows_read_again(kernel, view, col, upcast):
        return False
    rows = domain[row] if first == col else upcast[row]
    itemsize = kernel.buffers[0].dtype.itemsize
    starts = (view.offset + np.arange(rows) * strides[row]) * itemsize
    # beside them L2 holds the column sliver they meet (run x columns)
    together = (rows + upcast[col]) * run * itemsize
    return not cpu_model.holds(target.l2, together) or \
        cpu_model.crowds_l2(target, starts, run * itemsize)


def _rows_tile(kernel: Kernel, target: Target, row: int, col: int, upcast: list[int]) -> int:
    """The k tile of a matmul whose column blocks are outermost where every column block
    reads all the rows again: 0 where the whole row side stays in L2 beside a column block's
    sliver of the whole reduce (cpu_model.stay_together), or where it is too large to stay
    there alone (cpu_model.fits: then it streams from L3 as a panel, tiled or not); else the
    largest tile for which the two slivers of a tile do (BLIS's kc, sized so that its block
    of A stays in L2 while the column blocks take it in turn; docs/defaults.md)."""
    domain, n_out = kernel.domain, kernel.n_out
    step = prod(domain[n_out + 1:]) * kernel.buffers[0].dtype.itemsize  # a tile step's row
    rows, columns = domain[row] * step, upcast[col] * step
    if not cpu_model.fits(target.l2, rows * domain[n_out]) or \
            cpu_model.stay_together(target.l2, columns * domain[n_out], rows * domain[n_out]):
        return 0
    return max((t for t in KTILES if t < domain[n_out]
                and cpu_model.stay_together(target.l2, columns * t, rows * t)), default=0)


def _tiled_outer(kernel: Kernel, target: Target, row: int, col: int, tile: int) -> int:
    """The outer blocks of a k-tiled matmul. Several threads: the blocks of the larger side,
    shared out, so each thread streams only its part of the larger operand's panel. One
    thread: the row blocks, their sliver resident in L1 while the tile's column panel streams
    past from L2 (BLIS's jr loop inside ir); where that panel does not stay in L2 but the
    tile's rows do, the column blocks, the rows streaming past each column sliver from L2
    (BLIS's ir loop inside jr, the rows' tile its packed block of A)."""
    domain = kernel.domain
    if target.threads > 1:
        return row if domain[row] >= domain[col] else col
    run = tile * prod(domain[kernel.n_out + 1:]) * kernel.buffers[0].dtype.itemsize
    if not cpu_model.fits(target.l2, run * domain[col]) and \
            cpu_model.fits(target.l2, run * domain[row]):
        return col
    return row


def model_ktile(kernel: Kernel, target: Target, config: Config) -> int:
    """The k tile the model gives for config's register block: the sliver of whichever of
    the row and column blocks is outer stays resident in L1 beside the other's."""
    gemm = gemm_axes(kernel)
    if gemm is None:
        return 0
    row, col, _ = gemm
    itemsize = kernel.buffers[0].dtype.itemsize
    lanes = target.lanes(itemsize)
    upcast = config.get("upcast")
    block = cpu_model.RegisterBlock(upcast[row], -(-upcast[col] // lanes), lanes)
    inner = prod(kernel.domain[kernel.n_out + 1:])
    tile = cpu_model.k_tile(target, block, itemsize) // inner
    return max((t for t in KTILES if t <= tile), default=KTILES[0])
