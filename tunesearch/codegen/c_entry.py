"""The entry point of a CPU kernel, `void name(data0, data1, ...)`, in three stages.

    panels          a pointer to each panel: the buffer itself where it arrives prepacked, else
                    scratch kept between calls, filled before the block loops
    block loops     the loops over the blocks in the configured order (the first `parallel`
                    shared over the thread pool), each block's call picked by the dispatch of
                    block_calls.py; a streamed panel filled per outer block inside them
    k tiles         with a k tile, the panels' fills and the block loops once per tile, the
                    partial sums kept in scratch between tiles; where no panel is filled per
                    tile, each thread walks its own run of blocks once per tile instead

Its shared loops are still written as OpenMP loops here; parallel.py outlines them afterwards,
capturing the variables listed with the lines.
"""
from __future__ import annotations

import math

from tunesearch.codegen.c_kernel import CKernel
from tunesearch.codegen.panels import pack_loop
from tunesearch.codegen.parallel import flat_indices, k_tiles_open, shared_loop


def entry_function(ck: CKernel, dispatch: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """The entry point's lines around dispatch (a block's calls), with the (type, name) of
    each variable a shared loop inside it reads."""
    d, packs = ck.d, ck.packs
    lines = [f"void {ck.name}({ck.params()}) {{"]
    captures = [tuple(p.rsplit(" ", 1)) for p in ck.params().split(", ")]
    for slot, (i, p) in enumerate(packs.items()):
        tname = d.type_name(p.dtype)
        if i in ck.prepacked:
            lines.append(f"  const {tname}* pk{i} = data{i};")
            captures.append((f"const {tname}*", f"pk{i}"))
        elif i not in ck.streamed:
            lines.append(f"  {tname}* pk{i} = ({tname}*)scratch({slot}, "
                         f"{p.size}*sizeof({tname}));")
            captures.append((f"{tname}*", f"pk{i}"))
    fills = [line for i, p in packs.items() if i not in ck.prepacked and i not in ck.streamed
             for line in pack_loop(ck.kernel, p, ck.upcast, d,
                                   shared_loop(ck.threads) if ck.parallel else None,
                                   ck.tiled, vector_bytes=ck.vector_bytes)]
    nest = block_loops(ck, dispatch)
    if ck.tile_walk:  # the tiles' loop is inside the shared loop's function
        lines += k_tile_loop(ck, nest, walk=True)
        captures.append((f"{d.type_name(ck.reduce_node.dtype)}*", "part"))
    elif ck.tiled:
        lines += k_tile_loop(ck, fills + nest)
        acc_type = d.type_name(ck.reduce_node.dtype)
        captures += [(f"{acc_type}*", "part"), ("const int", "k0"), ("const int", "first"),
                     ("const int", "last"), ("const int", "kn")]
    else:
        lines += fills + ["  " + line for line in nest]
    lines += [f"  scratch_done({slot}, pk{i}, {p.size}*sizeof({d.type_name(p.dtype)}));"
              for slot, (i, p) in enumerate(packs.items())
              if i not in ck.prepacked and i not in ck.streamed]
    lines.append("}")
    return lines, captures


def k_tile_loop(ck: CKernel, body: list[str], walk: bool = False) -> list[str]:
    """body run once per tile of the first reduce axis, the partial sums in scratch; with walk
    the body's shared loop runs the tiles itself (shared_loop's tiles), so it runs once."""
    acc_type = ck.d.type_name(ck.reduce_node.dtype)
    size, tiles = math.prod(ck.domain[:ck.n_out]), math.ceil(ck.red_sizes[0] / ck.ktile)
    slot = len(ck.packs)
    inside = ["  " + line for line in body] if walk else \
        k_tiles_open(tiles, ck.ktile, ck.red_sizes[0]) + ["  " + line for line in body] + ["  }"]
    return [f"  {acc_type}* part = ({acc_type}*)scratch({slot}, {size}*sizeof({acc_type}));",
            *inside, f"  scratch_done({slot}, part, {size}*sizeof({acc_type}));"]


def block_loops(ck: CKernel, dispatch: list[str]) -> list[str]:
    """The loops over the blocks in the configured order around a block's calls; with a reduce,
    one loop over a flat index, whose range the threads share by its first `parallel` axes.
    Nested block loops around a register block that needs every vector register lead GCC to
    leave the column vectors in memory, an operand of each row's FMA (AVX2's 4x24 block: four
    loads of each vector a step where one would do, a third slower); over one flat loop it
    keeps them in registers. Blocks without a reduce are a few loads and stores each (a
    window's three taps), where a division per block would cost more than it: their loops
    stay nested."""
    nest: list[str] = []
    flat = ck.reduce_node is not None
    shared = ck.parallel if ck.n_out else 0
    rest = ck.order
    # (scratch slot, buffer, element type, one block's panel size) of each streamed panel
    streamed_buffers = [(slot, i, ck.d.type_name(p.dtype), p.size // p.blocks[0])
                        for slot, (i, p) in enumerate(ck.packs.items()) if i in ck.streamed]
    group = 1
    if ck.streamed:
        if shared:  # the threads share the outer loop, which fills the streamed panels
            nest.append(shared_loop(ck.threads, shared))
            shared = 0
        group = min(ck.config.get("cblock", 1), ck.nblocks[ck.order[0]])
        nest += streamed_outer_loop(ck, streamed_buffers, group)
        rest = ck.order[1:]
    if shared:
        # parallel.py runs these loops as one flat loop, a range of the first `shared` per call;
        # a tile walk is handed whole outer blocks' shared blocks (cut at their ends)
        tiles = (ck.ktile, ck.red_sizes[0], math.prod(ck.nblocks[a] for a in rest[1:shared])) \
            if ck.tile_walk else None
        nest.append(shared_loop(ck.threads, shared, len(rest) - shared if flat else 0, tiles))
        nest += block_loop_heads(ck, rest, False)
    else:
        nest += block_loop_heads(ck, rest, flat)
    nest += [f"  const int o{a} = b{a}*{ck.upcast[a]};" for a in range(ck.n_out)]
    nest += ["  " + line for line in dispatch]
    nest.append("}")
    if ck.streamed:
        grouped = "g" if group > 1 else ""  # the group's buffer, and the block loop inside it
        nest += ["}"] * (group > 1) + [
            f"  scratch_done({slot}, pk{i}{grouped}, {group * size}*sizeof({tname}));"
            for slot, i, tname, size in streamed_buffers] + ["}"]
    return nest


def block_loop_heads(ck: CKernel, axes, flat: bool) -> list[str]:
    """The loops over the blocks of axes (the first outermost), opened: nested, or (flat) one
    loop over a flat index."""
    if not flat or len(axes) < 2:
        return [f"for (int b{a} = 0; b{a} < {ck.nblocks[a]}; b{a}++)" for a in axes] + ["{"]
    counts = [ck.nblocks[a] for a in axes]
    return [f"for (long it_ = 0; it_ < {math.prod(counts)}; it_++)", "{"] + \
        flat_indices([f"b{a}" for a in axes], counts)


def streamed_outer_loop(ck: CKernel, streamed_buffers: list[tuple[int, int, str, int]],
                        group: int) -> list[str]:
    """The outer block loop opened, with the streamed panels filled for its blocks.

    Each outer block fills its panels just before its blocks read them, into a buffer of one
    block's panel per thread that stays in L2: filled whole ahead, a panel larger than the
    caches would go out to memory and come back, and one larger than the scratch kept (64 MiB)
    would be allocated, faulted in and zeroed by the kernel on every call; filled by a parallel
    loop of its own, the threads would split it by the reduce rows and each read the share the
    other wrote.
    With a column cache block (cblock, BLIS's nc), `group` outer blocks' panels are filled at
    once, each reduce row read across all of them: where those rows lie a page or more apart,
    a fill of one block's few lines a row waits on a page walk and a new stream at every row
    (see space/cpu_matmul.fill_group)."""
    outer, nblocks = ck.order[0], ck.nblocks
    nest = []
    if group > 1:
        groups = -(-nblocks[outer] // group)
        nest.append(f"for (int g{outer} = 0; g{outer} < {groups}; g{outer}++) {{")
        for slot, i, tname, size in streamed_buffers:
            nest.append(f"  {tname}* pk{i}g = ({tname}*)scratch({slot}, "
                        f"{group * size}*sizeof({tname}));")
            nest += pack_loop(ck.kernel, ck.packs[i], ck.upcast, ck.d, None, ck.tiled,
                              own=outer, vector_bytes=ck.vector_bytes, group=group)
        end = f"g{outer}*{group}+{group}"
        nest.append(f"for (int b{outer} = g{outer}*{group}; b{outer} < ({end} < "
                    f"{nblocks[outer]} ? {end} : {nblocks[outer]}); b{outer}++) {{")
        nest += [f"  {tname}* pk{i} = pk{i}g + (b{outer}-g{outer}*{group})*{size};"
                 for slot, i, tname, size in streamed_buffers]
    else:
        nest.append(f"for (int b{outer} = 0; b{outer} < {nblocks[outer]}; b{outer}++) {{")
        for slot, i, tname, size in streamed_buffers:
            nest.append(f"  {tname}* pk{i} = ({tname}*)scratch({slot}, "
                        f"{size}*sizeof({tname}));")
            nest += pack_loop(ck.kernel, ck.packs[i], ck.upcast, ck.d, None, ck.tiled,
                              own=outer, vector_bytes=ck.vector_bytes)
    return nest
