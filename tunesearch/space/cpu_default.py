"""The default CPU config, derived from the target model (space/cpu_model.py): register blocks
like a BLAS micro-kernel where there is a matmul-like reduce, partial sums where the reduce is
contiguous, vector-wide blocks for elementwise work, a k tile where the slivers of the whole reduce
would not stay in L2, and the outer loop over the threads where that saves more than the parallel
loop costs. A matmul's register block, panels and k tile come from cpu_matmul.py. The CPU space
(cpu_space.py) defines the knobs and their validity; this module only chooses their values.
"""
from __future__ import annotations

from typing import Any

from tunesearch.graph.kernel import Kernel
from tunesearch.space import cpu_model
from tunesearch.space.config import Config
from tunesearch.space.cpu_matmul import (UpcastChoices, matmul_layout, reads_windows,
                                         register_blocks)
from tunesearch.space.kernel_shape import batch_axes, gemm_axes, interior_ranges
from tunesearch.space.target import Target

POWERS = (1, 2, 4, 8, 16, 32, 64)  # an elementwise block's sizes along an axis


def default_config(kernel: Kernel, target: Target, upcast_choices: UpcastChoices,
                   constants: frozenset[int] = frozenset()) -> Config:
    """The default derived from the target model (space/cpu_model.py): register blocks
    like a BLAS micro-kernel where there is a matmul-like reduce, partial sums where the
    reduce is contiguous, vector-wide blocks for elementwise work, and the outer loop over
    the threads where that saves more than the parallel loop costs. constants: the input
    buffers that hold weights where the kernel runs (packed once, when a plan is built)."""
    layout = default_layout(kernel, target, upcast_choices, constants)
    cblock, group_tile = layout.pop("cblock"), layout.pop("group_tile")
    blocks = register_blocks(kernel, layout["upcast"])
    threads = target.threads
    order = layout["order"]
    pays = kernel.n_out and cpu_model.parallel_pays(target, kernel.flops, kernel.bytes)
    parallel = 1 if pays and blocks[order[0]] > 1 else 0
    if (parallel or pays) and len(order) > 1 and blocks[order[0]] < 4 * threads \
            and blocks[order[1]] > 1:
        # too few outer blocks to share evenly, or one (a convolution's row of 48 columns in
        # one block, read in place): share the first two loops
        parallel = 2
        if kernel.domain[order[0]] % layout["upcast"][order[0]] and reads_windows(kernel):
            # a convolution's row read in place in blocks that end in a tail (56 columns: 48
            # and 8): shared as they come, one thread takes the whole blocks and another the
            # tails, so the loop of many blocks goes outside (docs/defaults.md). Not a
            # matmul's: its column blocks outermost keep their slivers in L2
            order = layout["order"] = (order[1], order[0], *order[2:])
            parallel = 1 if blocks[order[0]] >= 4 * threads else 2
    elif parallel == 1 and len(order) > 1 and blocks[order[1]] > 1 and not layout["pack"] \
            and uneven_share(blocks[order[0]], threads):
        # the outer blocks share out unevenly (17 column blocks on two threads: 9 and 8):
        # shared with the next loop's. Not where a panel is packed, which a collapsed loop
        # fills whole ahead instead of block by block (codegen/c_kernel.py streamed_packs)
        parallel = 2
    if parallel > 1:
        cblock = 1  # the panels are filled whole ahead (codegen/c_kernel.py streamed_packs)
    while cblock > 1 and parallel and uneven_groups(blocks[order[0]], cblock, threads):
        cblock //= 2
    if cblock == 1 and group_tile:
        layout["ktile"] = 0  # the tile was there only to make room for a group
    return with_cblock(Config.make(**layout, parallel=parallel,
                                   threads=threads if parallel else 1), cblock)


def with_cblock(config: Config, cblock: int) -> Config:
    """config with its column cache block set: held only where it is more than 1, so every
    config without one is written as before the knob existed (cpu_space.OPTIONAL)."""
    if cblock > 1:
        return config.replace(cblock=cblock)
    return Config.make({k: v for k, v in config.as_dict().items() if k != "cblock"})


# the share of a thread's work above the mean beyond which the outer loop is shared collapsed
# with the next: resnet50's 28x28 1x1 and 3x3 matmuls (17 column blocks, 6% above) 8-12% less
# time on two threads so (kernel times in the plan, alternating processes), squeezenet's first
# convolution (13 row blocks, 8%) 10%
UNEVEN_SHARE = 1 / 32


def uneven_share(blocks: int, threads: int) -> bool:
    """Whether `blocks` shared over `threads` in contiguous chunks leave the busiest thread
    more than UNEVEN_SHARE above the mean."""
    return -(-blocks // threads) * threads > blocks * (1 + UNEVEN_SHARE)


def uneven_groups(blocks: int, group: int, threads: int) -> bool:
    """Whether `blocks` shared over `threads` as groups of `group` (cblock: the groups are what
    the threads share) leave the busiest thread more than UNEVEN_SHARE above its share of
    single blocks: 262 column blocks in groups of 8 on two threads take 136 and 126."""
    groups = -(-blocks // group)
    busiest = min(-(-groups // threads) * group, blocks)
    return busiest > -(-blocks // threads) * (1 + UNEVEN_SHARE)


def default_layout(kernel: Kernel, target: Target, upcast_choices: UpcastChoices,
                   constants: frozenset[int] = frozenset()) -> dict[str, Any]:
    """The default's knobs but the threads (see cpu_model.py for the derivation): a matmul's
    from cpu_matmul.matmul_layout; partial sums along a contiguous reduce, several outputs'
    side by side; the vector lanes over the outputs where the reduce is too short for partial
    sums or lies across an operand; vector-wide blocks for elementwise work."""
    n_out, domain = kernel.n_out, kernel.domain
    upcast = [1] * n_out
    split, unroll, pack, ktile, first, last_axis, cblock = 1, 1, (), 0, None, None, 1
    group_tile = False
    loads = [n.arg[1] for n in kernel.loads()]
    lane_axes = [a for a in range(n_out) if domain[a] > 1]
    last = lane_axes[-1] if lane_axes else None
    itemsize = kernel.buffers[0].dtype.itemsize
    if kernel.n_reduce:
        inner_contig = any(v.strides[-1] == 1 for v in loads)
        gemm = gemm_axes(kernel)
        if gemm is not None:
            matmul = matmul_layout(kernel, target, gemm, upcast_choices, constants)
            upcast, pack, unroll = matmul["upcast"], matmul["pack"], matmul["unroll"]
            ktile, first, last_axis = matmul["ktile"], matmul["first"], matmul["last"]
            cblock, group_tile = matmul["cblock"], matmul["group_tile"]
        elif inner_contig and not _reads_across(loads, last) and (
                domain[-1] >= cpu_model.reduce_split(target, itemsize) or last is None):
            split = max(s for s in (1, 2, 4, 8, 16, 32)
                        if s <= min(domain[-1], cpu_model.reduce_split(target, itemsize)))
            unroll = 4
            if last is not None:
                # several outputs' partial sums at once: their sums in flight side by side
                rows = cpu_model.reduce_rows(target, split, itemsize)
                upcast[last] = max(u for u in (1, 2, 4, 8) if u <= min(rows, domain[last]))
        elif last is not None:
            # a reduce too short to fill partial-sum vectors (a pool's or a depthwise
            # convolution's window): the vector lanes run over the outputs instead
            upcast[last] = min(cpu_model.elementwise_block(target, itemsize), domain[last])
            unroll = 2
            shared = _shared_across(kernel, last)
            if shared is not None:
                # a weight that several outputs along another axis read alike (a depthwise
                # convolution's, along the channels on the lanes): a block over that axis
                # too loads each of its vectors once for all of them
                rows, vectors = cpu_model.shared_rows(target)
                upcast[last] = min(vectors * target.lanes(itemsize), domain[last])
                upcast[shared] = min(rows, domain[shared])
    elif last is not None:
        # where a view masks the vector axis (a pad), one vector a block: the blocks that
        # lie inside the mask run unmasked (kernel_shape.interior_ranges), all but the edges.
        # An axis shorter than a vector is one block whole, no tail
        block = cpu_model.elementwise_block(target, itemsize)
        width = target.lanes(itemsize) if last in interior_ranges(kernel) else block
        upcast[last] = domain[last] if domain[last] < target.lanes(itemsize) else \
            max(u for u in POWERS if u <= min(domain[last], width))
        before = lane_axes[-2] if len(lane_axes) > 1 else None
        fill = block // domain[last]  # runs of the last axis an elementwise block holds
        if domain[last] < target.lanes(itemsize) and before is not None and \
                domain[before] >= fill and _gathers_along(loads, last, before):
            # a short last axis that every read gathers (an image's 3 channels laid out
            # last, read from channels first): the block takes runs of it along the axis
            # the reads run along, so that one call of the block handles about an
            # elementwise block and whole lines of its reads, not 3 elements (docs/defaults.md)
            upcast[before] = max(u for u in POWERS if u <= fill)
    if kernel.n_reduce:
        order = default_order(kernel, register_blocks(kernel, upcast), first, last_axis)
    else:
        order = output_order(kernel)
    return dict(upcast=tuple(upcast), order=order, split=split, unroll=unroll, ktile=ktile,
                pack=pack, cblock=cblock, group_tile=group_tile)


def _gathers_along(loads, last: int, before: int) -> bool:
    """Whether no read is contiguous along `last` and some read is along `before`."""
    return not any(abs(v.strides[last]) == 1 for v in loads) and \
        any(abs(v.strides[before]) == 1 for v in loads)


def _shared_across(kernel: Kernel, last: int) -> int | None:
    """The output axis before `last` along which an operand of the reduce stays the same
    while it moves along `last` and the reduce (a depthwise convolution's weight along the
    positions, the channels its lanes), where another operand moves along it; else None."""
    reads = [n.arg[1] for n in kernel.reduce.src[0].walk() if n.op == "load"]
    reduce_axes = range(kernel.n_out, len(kernel.domain))
    for axis in reversed(range(last)):
        if kernel.domain[axis] == 1:
            continue
        weight = any(v.strides[axis] == 0 and v.strides[last] != 0
                     and any(v.strides[r] for r in reduce_axes) for v in reads)
        moving = any(v.strides[axis] != 0 for v in reads)
        return axis if weight and moving else None
    return None


def _reads_across(loads, last: int | None) -> bool:
    """Whether an operand lies across the reduce: read with a stride along it and
    contiguously along the last output axis (a matrix-vector product whose matrix is laid
    out [reduce, outputs], as a 1x1 convolution over a 1x1 map reads its weight transposed).
    Partial sums along the reduce would gather it a lane at a time; the vector lanes run over
    the outputs instead, each a row of it."""
    return last is not None and any(v.strides[-1] not in (0, 1) and v.strides[last] == 1
                                    for v in loads)


def output_order(kernel: Kernel) -> tuple[int, ...]:
    """An elementwise kernel's loops in the order its output lies in memory, so that it
    writes one contiguous stream; axes of size 1 last."""
    strides = kernel.out_view.strides
    real = sorted((a for a in range(kernel.n_out) if kernel.domain[a] > 1),
                  key=lambda a: -abs(strides[a]))
    return tuple(real + [a for a in range(kernel.n_out) if kernel.domain[a] == 1])


def default_order(kernel: Kernel, blocks: list[int], first: int | None,
                  last: int | None = None) -> tuple[int, ...]:
    """The batch axes of a reduce outermost (those along which every operand of the reduce
    moves: groups of a grouped convolution, heads of attention; blocks of two batches share
    no data, so one batch's blocks run together while its operands are in cache), then
    `first` if given, then the axes with the most blocks (the outermost is the one shared over
    the threads), `last` innermost of them if given; axes of size 1 last, where their one
    iteration is free."""
    domain = kernel.domain
    batch = batch_axes(kernel)
    trivial = [a for a in range(kernel.n_out) if domain[a] == 1]
    real = sorted((a for a in range(kernel.n_out) if domain[a] > 1),
                  key=lambda a: (a == last, a not in batch, a != first, -blocks[a]))
    return tuple(real + trivial)
