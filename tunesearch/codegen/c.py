"""Lowering a kernel and a CPU config to a C loop nest.

The nest: optional packing of operands into blocked scratch panels; block loops over the output
axes in the configured order (the first `parallel` of them shared over the thread pool); inside
each block an always-inline function that keeps a register block of accumulators (upcast per
output axis, and `split` partial sums along the innermost reduce axis), runs the reduce loops
(the innermost unrolled), then applies the work after the reduce and stores. Tail blocks call
the same function with smaller constant bounds, so every call site is specialized by the
compiler.

With a k tile, the first reduce axis is cut into tiles run one after another around the block
loops: each block keeps its partial results in a scratch buffer between tiles and applies the work
after the reduce on the last tile only. The operands of one tile then stay in cache while every
block reads them.

The C is written in stages, each in a function a reader can find by its name:

    CKernel          (c_kernel.py) the knobs, the panels and the index of every axis, computed
                     once for all the stages
    header           the includes, the inline math, the compiler pragmas
    BlockFunction    (c_block.py) the block function: its signature, accumulators, reduce loops
                     and store
    block_calls      the calls of the block function per block, and its tail functions
    entry_function   (c_entry.py) the entry point: panels, block loops, k tiles; its shared
                     loops then outlined for the thread pool (parallel.py)
"""
from __future__ import annotations

from tunesearch.codegen.block_calls import shifted_tails, tail_dispatch
from tunesearch.codegen.c_block import UNROLL_LANES, BlockFunction
from tunesearch.codegen.c_entry import entry_function
from tunesearch.codegen.c_kernel import CKernel
from tunesearch.codegen.c_support import HEADER, SCRATCH, VECTOR_MATH
from tunesearch.codegen.masked_loads import KEEP
from tunesearch.codegen.parallel import DECLARATION, outline_parallel_loops
from tunesearch.graph.kernel import Kernel
from tunesearch.space.config import Config

# GCC's straight-line (SLP) vectorizer turns the stores of a two-axis register block's
# accumulators into vector loads from the accumulator array, which keeps part of that array in
# memory: an accumulator then goes through the stack at every step of the reduce (a 6x16 block
# of a 96x784x576 convolution ran at half speed). The loops are vectorized by the loop
# vectorizer all the same; the pragma covers what follows it (the block and entry functions).
NO_SLP = '#pragma GCC optimize ("no-tree-slp-vectorize")'

# GCC's RTL pass that moves loop invariants out of loops takes a constant of the epilogue (the
# zero of a ReLU) out of the block loop too, and so holds a vector register through the
# reduce: a register block sized to the register file (AVX2's 4x24, all 16 registers) then
# keeps an accumulator on the stack, loaded and stored at every step (docs/defaults.md). The
# loop invariants that matter inside the reduce (addresses, pointers) are moved by the
# tree-level pass all the same.
NO_HOIST = '#pragma GCC optimize ("no-move-loop-invariants")'

# GCC's loop distribution turns a loop that only copies or zeroes into a library call. Inside a
# parallel loop's outlined body the pointers no longer carry `restrict`, so a block's short
# contiguous copy became a call to memmove for every few elements. Where the block's loops
# unroll whole the loops stay loops. Not where a block axis is longer than that: a partly
# rolled loop zeroing or copying the accumulators is then left as such, and keeps them in
# memory, where as a library call they are taken apart into registers (docs/defaults.md).
NO_LIBCALLS = '#pragma GCC optimize ("no-tree-loop-distribute-patterns")'

# Where no mask tests a lane (a padded copy laid out channels last), GCC's jump threading
# copies the paths through the clamps and tests of a masked read apart, and if-conversion then
# leaves selects on those scalar conditions that its vectorizer does not take: the blocks on a
# padded map's border ran one element at a time, 3x slower than those inside. Where a mask
# tests the lanes (channels first), the vectorizer needs the threading instead: without it,
# it takes none of the masked loads (docs/defaults.md).
NO_THREADING = '#pragma GCC optimize ("no-thread-jumps")'


def render_c(kernel: Kernel, config: Config, name: str = "kernel",
             vector_bytes: int = 32, prepacked: frozenset[int] = frozenset(),
             l2_bytes: int = 0) -> str:
    """C source for kernel under config; the entry point is `void name(data0, data1, ...)`.
    vector_bytes is the target's vector register: the vector loop runs one register at a
    time. The buffers in prepacked (a subset of the config's packs) arrive already packed,
    whole reduce in one panel (pack_panel), so the kernel reads them as they are. l2_bytes is
    the target's L2 per core: a prepacked panel that fits twice in it is fetched a panel
    ahead (prefetch.py); 0 fetches none."""
    ck = CKernel(kernel, config, name, vector_bytes, prepacked, l2_bytes)
    dispatch, tails = block_calls(ck)
    before_entry = header(ck) + BlockFunction(ck).lines() + tails
    entry, captures = entry_function(ck, dispatch)
    # the entry point's shared loops become functions the thread pool runs
    functions, entry = outline_parallel_loops(entry, name, captures)
    return "\n".join(before_entry + functions + entry) + "\n"


def header(ck: CKernel) -> list[str]:
    """What the kernel's C starts with: the includes and inline functions it needs, and the
    pragmas for the compiler that its block function asks for."""
    whole_blocks = max(ck.split, *ck.upcast, 1) <= UNROLL_LANES
    # the pragma first: a function compiled with other options is not inlined into the kernel
    lines = [HEADER] + ([NO_LIBCALLS] if whole_blocks else []) + [VECTOR_MATH] \
        + ([NO_THREADING] if ck.masked_off_lanes else []) \
        + ([KEEP] if ck.masked or ck.gathered or ck.selects else []) \
        + [SCRATCH] + ([DECLARATION] if ck.parallel else [])
    if ck.two_axis_block:  # its accumulators stay in registers
        lines += [NO_SLP, NO_HOIST]
    return lines


def block_calls(ck: CKernel) -> tuple[list[str], list[str]]:
    """The calls of the block function that one block of the loop nest makes (the full block
    or a tail, picked by its origin), and the tail and masked-block functions they call: out of
    line, since inlined beside the full block or in the loop nest they spoil its
    vectorization."""
    packs, tiled, name = ck.packs, ck.tiled, ck.name
    pack_args = "".join(f", pk{i}" for i in packs) \
        + (", k0, kn, first, last, part" if tiled else "")
    shifted = shifted_tails(ck.kernel, ck.upcast, ck.order[:ck.parallel], ck.vector_bytes, tiled,
                            frozenset(a for p in packs.values() for a in p.axes))
    dispatch, tails = tail_dispatch(ck.kernel, ck.upcast, pack_args, name, ck.inside_masks,
                                    shifted, ck.lanes_flag_axis)
    lines = []
    for call, tail in tails:
        lines += [f"static __attribute__((noinline)) void {tail}({ck.params()}"
                  f"{ck.origin_params()}{ck.panel_params()}) {{",
                  f"  {name}_block({call}{pack_args});", "}", ""]
    return dispatch, lines
