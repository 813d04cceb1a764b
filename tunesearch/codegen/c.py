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
"""
from __future__ import annotations

import math

from tunesearch.graph.kernel import Kernel, KNode
from tunesearch.codegen.block_calls import shifted_tails, tail_dispatch
from tunesearch.codegen.c_support import HEADER, SCRATCH, VECTOR_MATH
from tunesearch.codegen.parallel import (DECLARATION, outline_parallel_loops,
                                                 shared_loop)
from tunesearch.codegen.dialect import Dialect, ExprEmitter, index_expr
from tunesearch.codegen.masked_loads import KEEP, masked_read
from tunesearch.codegen.panels import pack_loop, padded_axes
from tunesearch.codegen.prefetch import fetch_lines, next_panel_fetch
from tunesearch.space.config import Config
from tunesearch.space.kernel_shape import interior_ranges
from tunesearch.space.panel_layout import PackInfo


class CDialect(Dialect):
    """The C of the CPU device: sqrt, exp2 and log2 by the inline functions of VECTOR_MATH."""

    def math_name(self, name: str) -> str:
        return f"ts_{name}f" if name in ("sqrt", "exp2", "log2") else super().math_name(name)


def _params(kernel: Kernel, dialect: Dialect, const: bool = True) -> str:
    out = [f"{dialect.type_name(kernel.buffers[0].dtype)}* {dialect.restrict} data0"]
    for i, buf in enumerate(kernel.buffers[1:], start=1):
        out.append(f"const {dialect.type_name(buf.dtype)}* {dialect.restrict} data{i}")
    return ", ".join(out)


def collapsible(kernel: Kernel, packs) -> bool:
    """Whether the reduce axes can run as one flat loop: every load the reduce reads in place
    steps through them as through one axis (each axis's stride is the next one's times its
    size, no mask on them); panels lay them out that way already. A convolution's channel x
    kernel-window reduce then runs as one long loop instead of a short innermost one."""
    if kernel.reduce is None or kernel.n_reduce < 2:
        return False
    n_out, domain = kernel.n_out, kernel.domain
    for node in kernel.reduce.src[0].walk():
        if node.op != "load" or node.arg[0] in packs:
            continue
        view = node.arg[1]
        if view.mask is not None and any(view.mask[a] != (0, domain[a])
                                         for a in range(n_out, len(domain))):
            return False
        if any(view.strides[a] != view.strides[a + 1] * domain[a + 1]
               for a in range(n_out, len(domain) - 1)):
            return False
    return True


# GCC's straight-line (SLP) vectorizer turns the stores of a two-axis register block's
# accumulators into vector loads from the accumulator array, which keeps part of that array in
# memory: an accumulator then goes through the stack at every step of the reduce (a 6x16 block
# of a 96x784x576 convolution ran at half speed). The loops are vectorized by the loop
# vectorizer all the same; the pragma covers what follows it (the block and entry functions).
NO_SLP = '#pragma GCC optimize ("no-tree-slp-vectorize")'

# GCC's RTL pass that moves loop invariants out of loops takes a constant of the epilogue (the
# zero of a ReLU) out of the block loop too, and so holds a vector register through the
# reduce: a register block sized to the register file (AVX2's 4x24, all 16 registers) then
# keeps an accumulator on the stack, loaded and stored at every step (squeezenet's 3x3
# convolution 48 -> 192 channels over 13x13: 1.5x slower). The loop invariants that matter
# inside the reduce (addresses, pointers) are moved by the tree-level pass all the same.
NO_HOIST = '#pragma GCC optimize ("no-move-loop-invariants")'

# a block's loops over its elements are unrolled whole up to this many iterations
UNROLL_LANES = 64

# GCC's loop distribution turns a loop that only copies or zeroes into a library call. Inside a
# parallel loop's outlined body the pointers no longer carry `restrict`, so a block's short
# contiguous copy became a call to memmove for every few elements (a 3x3 im2col copy laid out
# [positions, channel x kernel]: a call per 12 bytes, 5.7x slower on one thread; a depthwise
# 3x3 convolution over 14x14 maps 2.2x). Where the block's loops unroll whole the loops stay
# loops. Not where a block axis is longer than that: a partly rolled loop zeroing or copying
# the accumulators is then left as such, and keeps them in memory (a 4x96 block of a grouped
# 1x1 convolution: 2.8x slower), where as a library call they are taken apart into registers.
NO_LIBCALLS = '#pragma GCC optimize ("no-tree-loop-distribute-patterns")'

# How far ahead a block's reduce fetches the panel its block loop walks through. Each block
# reads its slice of such a panel (A's rows, packed) as one stream, its register rows side by
# side, where in place it was one stream a row; the hardware prefetchers follow a stream a fixed
# number of lines ahead, which for the one packed stream, consumed rows times faster, is rows
# times less time than the latency of the L3 or memory it comes from. 2 KiB is 32 lines: at a
# block's rate (itemsize x fma_units / vectors bytes a cycle, 2.7 for AVX2's 4x24) some 750
# cycles, a memory latency. A matmul of 257 rows, a 4099-deep reduce and 511 columns at AVX2
# (A's 4 MiB packed, read again by every column block): 6.5 -> 5.6 ms on two threads, what A
# read in place takes; matmul 1024 and 1000 at AVX2 and AVX-512 5-14%. The fetch goes to L2,
# not L1 (prefetcht1): into L1 it crowded out the column sliver where the panel stays in L2
# (resnet50's 196x256x2304: 7% slower), into L2 it costs nothing there. Only panels packed in
# the call (see walked).
PREFETCH_AHEAD = 2048


def render_c(kernel: Kernel, config: Config, name: str = "kernel",
             vector_bytes: int = 32, prepacked: frozenset[int] = frozenset(),
             l2_bytes: int = 0) -> str:
    """C source for kernel under config; the entry point is `void name(data0, data1, ...)`.
    vector_bytes is the target's vector register: the vector loop runs one register at a
    time. The buffers in prepacked (a subset of the config's packs) arrive already packed,
    whole reduce in one panel (pack_panel), so the kernel reads them as they are. l2_bytes is
    the target's L2 per core: a prepacked panel that fits twice in it is fetched a panel
    ahead (prefetch.py); 0 fetches none."""
    d = CDialect()
    n_out, domain = kernel.n_out, kernel.domain
    upcast = tuple(config.get("upcast", (1,) * n_out))
    order = tuple(config.get("order", tuple(range(n_out))))
    unroll, split = config.get("unroll", 1), config.get("split", 1)
    parallel, threads = config.get("parallel", 0), config.get("threads", 1)
    reduce_node = kernel.reduce
    red_sizes = domain[n_out:]
    ktile = config.get("ktile", 0) if reduce_node is not None else 0
    tiled = 0 < ktile < red_sizes[0] if reduce_node is not None else False
    packs = {i: PackInfo(kernel, i, upcast, 0 if i in prepacked else ktile)
             for i in config.get("pack", ())}
    streamed = streamed_packs(packs, prepacked, order, parallel)
    flat = collapsible(kernel, packs)
    # with flat reduce loops one index runs over all reduce axes; a k tile covers `inner` of it
    # for each step of the first axis
    inner_size = math.prod(red_sizes[1:]) if flat else 1
    masked = any(n.arg[1].mask is not None for n in kernel.loads())
    whole_blocks = max(split, *upcast, 1) <= UNROLL_LANES
    # the pragma first: a function compiled with other options is not inlined into the kernel
    lines = [HEADER] + ([NO_LIBCALLS] if whole_blocks else []) + [VECTOR_MATH] \
        + ([KEEP] if masked else []) + [SCRATCH] + ([DECLARATION] if parallel else [])
    if reduce_node is not None and sum(u > 1 for u in upcast) >= 2:
        # a register block over two axes: its accumulators stay in registers
        lines += [NO_SLP, NO_HOIST]

    # ---- the block function
    extra = "".join(f", const {d.type_name(p.dtype)}* {d.restrict} pk{i}"
                    for i, p in packs.items())
    if tiled:
        extra += (f", const int k0, const int kn, const int first, const int last, "
                  f"{d.type_name(reduce_node.dtype)}* {d.restrict} part")
    origins = "".join(f", const int o{a}" for a in range(n_out))
    inside_masks = interior_ranges(kernel)
    sig = _params(kernel, d) + origins + "".join(f", const int n{a}" for a in range(n_out)) \
        + (", const int inner" if inside_masks else "") + extra
    lines.append(f"static inline __attribute__((always_inline)) void {name}_block({sig}) {{")
    body: list[str] = []
    lane_idx = [f"(o{a}+l{a})" for a in range(n_out)]
    red_idx = [f"r{j}" for j in range(len(red_sizes))]
    inner = len(red_sizes) - 1

    def axis_index(axis: int) -> str:
        if axis < n_out:
            return lane_idx[axis]
        if flat:  # the strides chain: the innermost axis's stride times the flat index
            return red_idx[inner] if axis == len(domain) - 1 else "0"
        return red_idx[axis - n_out]

    def holds(axis: int) -> str | None:
        return "inner" if axis in inside_masks else None

    # the axes whose index moves along the vector lanes: the last output axis, and the
    # innermost reduce axis where split partial sums run over the lanes
    lane_axes = frozenset([n_out - 1] + ([len(domain) - 1 if flat else n_out + inner]
                                         if split > 1 and reduce_node is not None else []))

    def pack_index(index: int, lane: str | None = None) -> tuple[list[str], ...]:
        """(blocks, reduce, lanes) of panel index at the block's element being computed (lane
        None) or at the given lane of every axis."""
        p = packs[index]
        # a streamed panel holds the one block being computed
        blocks = ["0"] if index in streamed else [f"(o{a}/{upcast[a]})" for a in p.axes]
        lanes = [lane or f"l{a}" for a in p.axes]
        by_tile = tiled and index not in prepacked  # a tile's panel, or the whole reduce
        if flat:
            red = [f"({red_idx[inner]}-k0*{inner_size})" if by_tile else red_idx[inner]]
        else:
            red = [f"({red_idx[0]}-k0)"] + red_idx[1:] if by_tile else red_idx
        return blocks, red, lanes

    # the whole panels the block loop walks through, a block's slice at a time (A's rows under
    # the column blocks): each block's reduce fetches its slice ahead (PREFETCH_AHEAD). Only a
    # panel packed in the call, just written and in L2 or L3: a weight's panel packed when the
    # plan was built measured slower so (vgg19's 9 MiB 512x4608 one, from memory in every
    # call: 7-9% on two threads)
    walked = [i for i, p in packs.items() if i not in streamed and i not in prepacked
              and order and order[0] not in p.axes and p.axes]
    nblocks = [math.ceil(domain[a] / upcast[a]) for a in range(n_out)]
    # the weights' panels each block fetches its share of a panel ahead (prefetch.py)
    fetch_tile = ktile if tiled else 0
    ahead = next_panel_fetch(packs, prepacked, order, nblocks, red_sizes, fetch_tile, split,
                             l2_bytes, threads if parallel else 1)

    # An unmasked read in place inside the reduce goes through a pointer set where the
    # innermost reduce loop starts: the block's origins and the outer reduce indices in the
    # pointer, the lanes and the inner index in its subscript. Each lane's element is then the
    # pointer plus a constant, one register for every row of the block; with the whole index
    # in the subscript GCC kept a pointer per row, spilled them to mask registers and reloaded
    # one per row at every step (resnet50's 3x3 convolution over 28x28x128 in 6x64 blocks:
    # 17% slower)
    reduce_reads: dict[tuple, tuple[str, str]] | None = None  # (buffer, view): name, origin

    def reduce_read(index: int, view, dtype) -> str:
        origin = [str(view.offset)] if view.offset else []
        step = []
        for axis, stride in enumerate(view.strides):
            at = axis_index(axis)
            if not stride or at == "0":
                continue
            if axis < n_out:
                origin.append(f"o{axis}*{stride}")
                step.append(f"l{axis}*{stride}")
            else:
                (step if at == red_idx[inner] else origin).append(
                    f"{at}*{stride}" if stride != 1 else at)
        name_ = reduce_reads.setdefault((index, view), (
            f"q{len(reduce_reads)}",
            f"const {d.type_name(dtype)}* {d.restrict} q{len(reduce_reads)} = "
            f"data{index} + ({'+'.join(origin) or '0'});"))[0]
        return f"{name_}[{'+'.join(step) or '0'}]"

    def load(node: KNode) -> str:
        index, view = node.arg
        if index in packs:
            return f"pk{index}[{packs[index].offset(*pack_index(index))}]"
        if view.mask is not None:
            return masked_read(d, view, f"data{index}", node.dtype, axis_index, holds, lane_axes)
        if reduce_reads is not None:
            return reduce_read(index, view, node.dtype)
        return f"data{index}[{index_expr(view, axis_index)[0]}]"

    emitter = ExprEmitter(d, load)
    emitter.axis_index = staticmethod(axis_index)
    emitter.holds = staticmethod(holds)
    lane_loops = [f"for (int l{a} = 0; l{a} < n{a}; l{a}++)" for a in range(n_out)]
    # the reduce runs over whole blocks where the panels are padded: one shape for every call
    padded = padded_axes(kernel, packs)
    whole = [upcast[a] if a in padded else f"n{a}" for a in range(n_out)]
    compute_loops = [f"for (int l{a} = 0; l{a} < {whole[a]}; l{a}++)" for a in range(n_out)]
    inside = " && ".join(f"l{a} < n{a}" for a in sorted(padded))
    unroll_lanes = f"_Pragma(\"GCC unroll {UNROLL_LANES}\")"
    acc_dims = "".join(f"[{u}]" for u in upcast)
    acc_at = "acc" + "".join(f"[l{a}]" for a in range(n_out))
    known = {}
    part_idx = "+".join(f"{lane_idx[a]}*{math.prod(domain[a + 1:n_out])}"
                        for a in range(n_out)) or "0"
    if reduce_node is not None:
        vector = max(1, vector_bytes // reduce_node.dtype.itemsize)

        def vector_chunks(var: str, bound) -> list[str]:
            """A loop over `bound` lanes, one vector at a time: a loop unrolled over the
            vectors around an `omp simd` loop over one vector's lanes."""
            return [f"{unroll_lanes} for (int {var}v = 0; {var}v < {bound}; "
                    f"{var}v += {vector}) {{",
                    f"_Pragma(\"omp simd\") for (int {var} = {var}v; {var} < "
                    f"({var}v+{vector} < {bound} ? {var}v+{vector} : {bound}); {var}++) {{"]
        def vector_nest(loops: list[str], bound) -> list[str]:
            """loops opened, the last as vector_chunks up to bound: a block's lanes one
            vector at a time."""
            return [unroll_lanes + " " + loop + " {" for loop in loops[:-1]] + \
                vector_chunks(f"l{n_out - 1}", bound)
        acc_type = d.type_name(reduce_node.dtype)
        # the block's sum at one element: its partial sums added
        block_sum = [f"{acc_type} red = {acc_at}[0];",
                     f"for (int s = 1; s < {split}; s++) "
                     + d.reduce_step(reduce_node.op, "red", f"{acc_at}[s]")]
        init = d.reduce_init(reduce_node.op, reduce_node.dtype)
        body.append(f"{acc_type} acc{acc_dims}[{split}];")
        if tiled and n_out and split == 1:
            # a k tile's partial sums come back from memory as vectors: the lanes as a simd
            # loop, as in the reduce below (fully unrolled and SLP off, GCC loads them one by
            # one and builds each vector from its elements: 64x4096x4096 on two threads ran
            # at 0.72x OpenBLAS so, 0.95x with both ends of the tile as vector loops)
            body += vector_nest(compute_loops, whole[n_out - 1])
            kept = " && ".join(["!first"] + ([inside] if inside else []))
            body.append(f"{acc_at}[0] = ({kept}) ? part[{part_idx}] : {init};")
            body.append("}" * (n_out + 1))
        else:
            kept = " && ".join(["s == 0", "!first"] + ([inside] if inside else []))
            start_value = f"({kept}) ? part[{part_idx}] : {init}" if tiled else init
            body += [unroll_lanes + " " + loop for loop in compute_loops]
            body.append(f"{unroll_lanes} for (int s = 0; s < {split}; s++) "
                        f"{acc_at}[s] = {start_value};")
        bounds = [("0", str(size)) for size in red_sizes]
        if tiled:
            bounds[0] = ("k0", "k0+kn")
        if flat:  # one loop over every reduce axis, named as the innermost
            bounds = [(f"k0*{inner_size}", f"(k0+kn)*{inner_size}") if tiled
                      else ("0", str(math.prod(red_sizes)))]
        # the reduce step a fetch ahead is at, counted from the start of the block's (tile's)
        # reduce
        step = f"r{inner}b-{bounds[-1][0]}" if bounds[-1][0] != "0" else f"r{inner}b"
        for j, (lo, _) in reversed(list(enumerate(bounds[:-1]))):
            size = math.prod(red_sizes[j + 1:])
            step = f"({'r%d-%s' % (j, lo) if lo != '0' else 'r%d' % j})*{size}+{step}"
        fetches = [fetch_lines(packs[i], i, order, upcast, nblocks, red_sizes, fetch_tile, step)
                   for i in ahead]
        body += [declaration for declaration, _ in fetches]
        for j, (lo, hi) in enumerate(bounds[:-1]):
            body.append(f"for (int r{j} = {lo}; r{j} < {hi}; r{j}++) {{")
        pointers_at, reduce_reads = len(body), {}
        lo, hi = bounds[-1]
        if lo == "0" and hi.isdigit():
            full = str(int(hi) - int(hi) % split)
        else:
            full = f"({hi})-((kn*{inner_size})%{split})"
        for piece, (start, stop, step, lanes) in enumerate(
                [(lo, full, split, split), (full, hi, 1, 1)]):
            if start == stop or (piece == 1 and split == 1):
                continue
            pragma = f"_Pragma(\"GCC unroll {unroll}\") " if piece == 0 and unroll > 1 else ""
            body.append(f"{pragma}for (int r{inner}b = {start}; r{inner}b < {stop}; "
                        f"r{inner}b += {step}) {{")
            for i in walked:  # the lanes of this step's first element, PREFETCH_AHEAD on
                first_lanes = packs[i].offset(*pack_index(i, "0"))
                body.append(f"{{ const int r{inner} = r{inner}b; __builtin_prefetch((const char*)"
                            f"&pk{i}[{first_lanes}] + {PREFETCH_AHEAD}, 0, 2); }}")
            if piece == 0:
                body += [statement for _, statement in fetches]
            # the innermost real loop is the vector loop: each of its lanes has an accumulator
            # of its own, which `omp simd` tells the compiler (left to itself, GCC sometimes
            # unrolls it first and then fails to vectorize the block at all). It runs one
            # vector at a time inside a loop unrolled over the vectors: a vector loop of
            # several vectors is sometimes left rolled, its accumulators in memory (a 4x24
            # block of a 512 matmul ran at a fifth of its speed)
            loops = [(f"l{a}", whole[a]) for a in range(n_out)] + [("s", lanes)]
            simd = n_out if lanes > 1 or not n_out else n_out - 1
            opened = 0
            for i, (var, bound) in enumerate(loops):
                if i != simd:
                    body.append(f"{unroll_lanes} for (int {var} = 0; {var} < {bound}; "
                                f"{var}++) {{")
                elif isinstance(bound, int) and bound <= vector:
                    body.append(f"_Pragma(\"omp simd\") for (int {var} = 0; {var} < {bound}; "
                                f"{var}++) {{")
                else:
                    body += vector_chunks(var, bound)
                    opened += 1
            body.append(f"const int r{inner} = r{inner}b + s;")
            stmts: list[str] = []
            value = emitter.emit(reduce_node.src[0], stmts)
            body += stmts + [d.reduce_step(reduce_node.op, f"{acc_at}[s]", value)]
            body.append("}" * (n_out + 2 + opened))
        body[pointers_at:pointers_at] = [line for _, line in reduce_reads.values()]
        reduce_reads = None
        body.append("}" * (len(bounds) - 1))
        known[id(reduce_node)] = "red"
    # without a reduce, the last axis's lanes as a simd loop: fully unrolled, GCC's
    # straight-line vectorizer gives up on the int index arithmetic and writes a block element
    # by element. Not after a reduce: there it takes the accumulators out of the registers
    # (a 1024 matmul ran at half its speed). After a reduce (untiled), the block's sums are
    # first copied out element by element into an array of their own, and the epilogue runs
    # as a simd loop over that copy: left element by element, GCC compiles a ReLU in it to a
    # compare and a branch per element, which costs more than the whole reduce where that is
    # short (a grouped 1x1 convolution six channels deep: 1.6x faster). The copy runs one
    # vector at a time as well: fully unrolled with SLP off, GCC took every lane out of its
    # register on its own (384 extractions after each 6x64 block; resnet50's 64-deep 1x1
    # convolutions to 256 channels ran 25% slower, its whole network 5% on one thread and
    # 13% on two)
    # With a k tile, all tiles but the last store the partial sums as vectors straight from
    # the accumulators (through the copy, element by element, they took a third of a k-tiled
    # 3x3 convolution's time at 64-deep tiles); the last runs the epilogue on the copy
    simd_store = reduce_node is None
    chunked = reduce_node is not None and n_out and (not tiled or split == 1)
    if chunked:
        blk_at = "blk" + "".join(f"[l{a}]" for a in range(n_out))
        if tiled:
            body += ["if (!last) {", *vector_nest(lane_loops, f"n{n_out - 1}"),
                     f"part[{part_idx}] = {acc_at}[0];", "}" * (n_out + 1), "} else {"]
        body.append(f"{acc_type} blk{acc_dims};")
        body += vector_nest(lane_loops, f"n{n_out - 1}")
        body += block_sum + [f"{blk_at} = red;", "}" * (n_out + 1)]
        body += vector_nest(lane_loops, f"n{n_out - 1}")
        body.append(f"{acc_type} red = {blk_at};")
    else:
        body += [("_Pragma(\"omp simd\")" if simd_store and a == n_out - 1 else unroll_lanes)
                 + " " + loop + " {" for a, loop in enumerate(lane_loops)]
    if reduce_node is not None and not chunked:
        body += block_sum
        if tiled:
            body.append(f"if (!last) part[{part_idx}] = red; else {{")
    stmts = []
    value = emitter.emit(kernel.expr, stmts, known)
    out_idx, _ = index_expr(kernel.out_view, axis_index)
    body += stmts + [f"data0[{out_idx}] = {value};", "}" * (n_out + tiled + bool(chunked))]
    lines += ["  " + b for b in body if b] + ["}", ""]

    # ---- the tails and the masked blocks, out of line: inlined beside the full block or in
    # the loop nest they spoil its vectorization
    pack_args = "".join(f", pk{i}" for i in packs) + (", k0, kn, first, last, part" if tiled else "")
    shifted = shifted_tails(kernel, upcast, order[:parallel], vector_bytes, tiled,
                            frozenset(a for p in packs.values() for a in p.axes))
    dispatch, tails = tail_dispatch(kernel, upcast, pack_args, name, inside_masks, shifted)
    for call, tail in tails:
        lines += [f"static __attribute__((noinline)) void {tail}({_params(kernel, d)}{origins}"
                  f"{extra}) {{", f"  {name}_block({call}{pack_args});", "}", ""]

    # ---- the entry point; its shared loops become functions the thread pool runs
    before_entry = lines
    lines = [f"void {name}({_params(kernel, d)}) {{"]
    captures = [tuple(p.rsplit(" ", 1)) for p in _params(kernel, d).split(", ")]
    for slot, (i, p) in enumerate(packs.items()):
        tname = d.type_name(p.dtype)
        if i in prepacked:
            lines.append(f"  const {tname}* pk{i} = data{i};")
            captures.append((f"const {tname}*", f"pk{i}"))
        elif i not in streamed:
            lines.append(f"  {tname}* pk{i} = ({tname}*)scratch({slot}, "
                         f"{p.size}*sizeof({tname}));")
            captures.append((f"{tname}*", f"pk{i}"))
    fills = [line for i, p in packs.items() if i not in prepacked and i not in streamed
             for line in pack_loop(kernel, p, upcast, d, shared_loop(threads) if parallel else None,
                                   tiled, vector_bytes=vector_bytes)]
    nest: list[str] = []
    if parallel and n_out:
        nest.append(shared_loop(threads, parallel))
    rest = order
    # (scratch slot, buffer, element type, one block's panel size) of each streamed panel
    streamed_buffers = [(slot, i, d.type_name(p.dtype), p.size // p.blocks[0])
                        for slot, (i, p) in enumerate(packs.items()) if i in streamed]
    group = 1
    if streamed:
        # each outer block fills its panels just before its blocks read them, into a buffer
        # of one block's panel per thread that stays in L2: filled whole ahead, a panel
        # larger than the caches would go out to memory and come back, and one larger than
        # the scratch kept (64 MiB) would be allocated, faulted in and zeroed by the kernel
        # on every call; filled by a parallel loop of its own, the threads would split it by
        # the reduce rows and each read the share the other wrote
        # With a column cache block (cblock, BLIS's nc), `group` outer blocks' panels are
        # filled at once, each reduce row read across all of them: where those rows lie a page
        # or more apart, a fill of one block's few lines a row waits on a page walk and a new
        # stream at every row (see cpu_default.fill_group)
        outer = order[0]
        group = min(config.get("cblock", 1), nblocks[outer])
        if group > 1:
            groups = -(-nblocks[outer] // group)
            nest.append(f"for (int g{outer} = 0; g{outer} < {groups}; g{outer}++) {{")
            for slot, i, tname, size in streamed_buffers:
                nest.append(f"  {tname}* pk{i}g = ({tname}*)scratch({slot}, "
                            f"{group * size}*sizeof({tname}));")
                nest += pack_loop(kernel, packs[i], upcast, d, None, tiled, own=outer,
                                  vector_bytes=vector_bytes, group=group)
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
                nest += pack_loop(kernel, packs[i], upcast, d, None, tiled, own=outer,
                                  vector_bytes=vector_bytes)
        rest = order[1:]
    for a in rest:
        nest.append(f"for (int b{a} = 0; b{a} < {nblocks[a]}; b{a}++)")
    nest.append("{")
    nest += [f"  const int o{a} = b{a}*{upcast[a]};" for a in range(n_out)]
    nest += ["  " + line for line in dispatch]
    nest.append("}")
    if streamed:
        grouped = "g" if group > 1 else ""  # the group's buffer, and the block loop inside it
        nest += ["}"] * (group > 1) + [
            f"  scratch_done({slot}, pk{i}{grouped}, {group * size}*sizeof({tname}));"
            for slot, i, tname, size in streamed_buffers] + ["}"]
    if tiled:
        acc_type = d.type_name(reduce_node.dtype)
        size, tiles = math.prod(domain[:n_out]), math.ceil(red_sizes[0] / ktile)
        lines.append(f"  {acc_type}* part = ({acc_type}*)scratch({len(packs)}, "
                     f"{size}*sizeof({acc_type}));")
        lines.append(f"  for (int kt = 0; kt < {tiles}; kt++) {{")
        lines.append(f"    const int k0 = kt*{ktile}, first = kt == 0, last = kt == {tiles - 1};")
        lines.append(f"    const int kn = last ? {red_sizes[0]}-k0 : {ktile};")
        lines += ["  " + line for line in fills + nest]
        lines += ["  }", f"  scratch_done({len(packs)}, part, {size}*sizeof({acc_type}));"]
        captures += [(f"{acc_type}*", "part"), ("const int", "k0"), ("const int", "first"),
                     ("const int", "last"), ("const int", "kn")]
    else:
        lines += fills + ["  " + line for line in nest]
    lines += [f"  scratch_done({slot}, pk{i}, {p.size}*sizeof({d.type_name(p.dtype)}));"
              for slot, (i, p) in enumerate(packs.items())
              if i not in prepacked and i not in streamed]
    lines.append("}")
    functions, lines = outline_parallel_loops(lines, name, captures)
    return "\n".join(before_entry + functions + lines) + "\n"


def streamed_packs(packs: dict[int, PackInfo], prepacked: frozenset[int],
                   order: tuple[int, ...], parallel: int) -> list[int]:
    """The panels filled block by block inside the outer block loop: those that vary along
    that loop's axis and no other (B's column panel under the column loop), where the loop
    is not collapsed with the next over the threads. Filled whole ahead, a panel larger than
    the caches goes out to memory and comes back; filled by a parallel loop of its own, the
    threads would split it by the reduce rows and each read the share the other wrote."""
    if parallel > 1 or not order:
        return []
    return [i for i, p in packs.items() if i not in prepacked and p.axes == [order[0]]]
