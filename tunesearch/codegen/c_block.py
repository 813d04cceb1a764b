"""The block function of a CPU kernel: one register block of the output, in four stages.

    signature       the buffers, the block's origin and bounds per output axis, its panels
    accumulators    a register block of them (upcast per output axis, `split` partial sums),
                    started from the reduce's identity or from the k tile before
    reduce loops    the reduce loops around the block's lanes, the innermost unrolled, its
                    reads through pointers set where it starts (BlockReads)
    store           the block's sums added up, the work after the reduce, the output stored

The function is always inlined: the full blocks and the tails call it with constant bounds, so
every call site is specialized by the compiler (see c.py).
"""
from __future__ import annotations

import math
import re

from tunesearch.codegen.c_kernel import CKernel
from tunesearch.codegen.dialect import ExprEmitter, index_expr
from tunesearch.codegen.masked_loads import gathered_read, masked_read
from tunesearch.codegen.panels import panel_offset
from tunesearch.codegen.prefetch import fetch_lines, next_panel_fetch
from tunesearch.graph.kernel import KNode
from tunesearch.graph.ops import UnaryOps

# a block's loops over its elements are unrolled whole up to this many iterations
UNROLL_LANES = 64

# How far ahead a block's reduce fetches the panel its block loop walks through. Each block
# reads its slice of such a panel (A's rows, packed) as one stream, its register rows side by
# side, where in place it was one stream a row; the hardware prefetchers follow a stream a fixed
# number of lines ahead, which for the one packed stream, consumed rows times faster, is rows
# times less time than the latency of the L3 or memory it comes from. 2 KiB is 32 lines: at a
# block's rate (itemsize x fma_units / vectors bytes a cycle, 2.7 for AVX2's 4x24) some 750
# cycles, a memory latency. The fetch goes to L2, not L1 (prefetcht1): into L1 it crowded out
# the column sliver where the panel stays in L2, into L2 it costs nothing there. Only panels
# packed in the call (see CKernel.walked; docs/defaults.md).
PREFETCH_AHEAD = 2048

# where the block's store splits into the sums kept and the epilogue (BlockFunction.lines)
EPILOGUE = "/* epilogue */"


class BlockReads:
    """The C that reads a load at the block's element being computed: from its panel, through
    its mask, or in place.

    An unmasked read in place inside the reduce goes through a pointer set where the
    innermost reduce loop starts: the block's origins and the outer reduce indices in the
    pointer, the lanes and the inner index in its subscript. Each lane's element is then the
    pointer plus a constant, one register for every row of the block; with the whole index
    in the subscript GCC kept a pointer per row, spilled them to mask registers and reloaded
    one per row at every step."""

    def __init__(self, ck: CKernel):
        self.ck = ck
        # inside the reduce loops, (buffer, view) -> (pointer name, its declaration)
        self.pointers: dict[tuple, tuple[str, str]] | None = None

    def load(self, node: KNode) -> str:
        ck = self.ck
        index, view = node.arg
        if index in ck.packs:
            return f"pk{index}[{panel_offset(ck.packs[index], *ck.pack_index(index))}]"
        if view.mask is not None:
            return masked_read(ck.d, view, f"data{index}", node.dtype, ck.axis_index, ck.holds,
                               ck.lane_axes)
        if self.pointers is not None:
            return self._through_pointer(index, view, node.dtype)
        return f"data{index}[{index_expr(view, ck.axis_index)[0]}]"

    def gather(self, node: KNode, index: str) -> str:
        ck = self.ck
        return gathered_read(ck.d, node, f"data{node.arg[0]}", index, ck.axis_index,
                             ck.lane_axes)

    def _through_pointer(self, index: int, view, dtype) -> str:
        ck, pointers = self.ck, self.pointers
        origin = [str(view.offset)] if view.offset else []
        step = []
        for axis, stride in enumerate(view.strides):
            at = ck.axis_index(axis)
            if not stride or at == "0":
                continue
            if axis < ck.n_out:
                origin.append(f"o{axis}*{stride}")
                step.append(f"l{axis}*{stride}")
            else:
                (step if at == ck.red_idx[ck.inner] else origin).append(
                    f"{at}*{stride}" if stride != 1 else at)
        name = pointers.setdefault((index, view), (
            f"q{len(pointers)}",
            f"const {ck.d.type_name(dtype)}* {ck.d.restrict} q{len(pointers)} = "
            f"data{index} + ({'+'.join(origin) or '0'});"))[0]
        return f"{name}[{'+'.join(step) or '0'}]"


class BlockFunction:
    """The C of `name_block`, the function that computes one register block."""

    def __init__(self, ck: CKernel):
        self.ck = ck
        n_out = ck.n_out
        self.reads = BlockReads(ck)
        self.emitter = ExprEmitter(ck.d, self.reads.load, self.reads.gather)
        self.emitter.axis_index = staticmethod(ck.axis_index)
        self.emitter.holds = staticmethod(ck.holds)
        self.lane_loops = [f"for (int l{a} = 0; l{a} < n{a}; l{a}++)" for a in range(n_out)]
        self.compute_loops = [f"for (int l{a} = 0; l{a} < {ck.whole[a]}; l{a}++)"
                              for a in range(n_out)]
        self.inside = " && ".join(f"l{a} < n{a}" for a in sorted(ck.padded))
        self.unroll_lanes = f"_Pragma(\"GCC unroll {UNROLL_LANES}\")"
        self.acc_dims = "".join(f"[{u}]" for u in ck.upcast)
        self.acc_at = "acc" + "".join(f"[l{a}]" for a in range(n_out))
        self.known: dict[int, str] = {}
        reduce_node = ck.reduce_node
        if reduce_node is not None:
            self.vector = max(1, ck.vector_bytes // reduce_node.dtype.itemsize)
            self.acc_type = ck.d.type_name(reduce_node.dtype)
            # the block's sum at one element: its partial sums added
            self.block_sum = [f"{self.acc_type} red = {self.acc_at}[0];",
                              f"for (int s = 1; s < {ck.split}; s++) "
                              + ck.d.reduce_step(reduce_node.op, "red", f"{self.acc_at}[s]")]

    def lines(self) -> list[str]:
        ck = self.ck
        sig = ck.params() + ck.origin_params() \
            + "".join(f", const int n{a}" for a in range(ck.n_out)) \
            + (", const int inner" if ck.inside_masks else "") \
            + (", const int inlanes" if ck.lanes_flag_axis is not None else "") \
            + ck.panel_params()
        body, before = [], []
        if ck.reduce_node is not None:
            body = self.accumulators() + self.reduce_loops()
            self.known[id(ck.reduce_node)] = "red"
        store = self.store()
        if self.outlined_epilogue():
            # the sums stored, the epilogue runs in a function of its own (outlined_epilogue)
            cut = store.index(EPILOGUE)
            names = re.findall(r"(\w+)\s*(?:,|$)", sig)
            before = [f"static __attribute__((noinline)) void {ck.name}_epilogue({sig}, "
                      f"const {self.acc_type} blk{self.acc_dims}) {{"] \
                + ["  " + b for b in store[cut + 1:-1] if b] + ["}", ""]
            store = store[:cut] + [f"{ck.name}_epilogue({', '.join(names)}, blk);", store[-1]]
        else:
            store = [b for b in store if b != EPILOGUE]
        body += store
        return before + [f"static inline __attribute__((always_inline)) void {ck.name}_block("
                         f"{sig}) {{"] + ["  " + b for b in body if b] + ["}", ""]

    def outlined_epilogue(self) -> bool:
        """Whether the work after the reduce runs in a function of its own, the block's sums
        handed over in memory: where it holds an exp2 or a log2 (a sigmoid, a GELU) and the
        block spans two axes. Inline, the vector constants of those functions (a dozen) are
        loaded once for the whole loop nest and held in registers through the reduce, and the
        accumulators of a block sized to the register file go through the stack at every step
        (a SiLU after a 16-deep pointwise convolution doubled its time)."""
        ck = self.ck
        if not ck.two_axis_block or (ck.tiled and ck.split != 1):
            return False
        return any(node.op in (UnaryOps.EXP2, UnaryOps.LOG2)
                   for node in ck.kernel.expr.walk(stop=lambda n: n is ck.reduce_node))

    def vector_chunks(self, var: str, bound) -> list[str]:
        """A loop over `bound` lanes, one vector at a time: a loop unrolled over the
        vectors around an `omp simd` loop over one vector's lanes."""
        vector = self.vector
        return [f"{self.unroll_lanes} for (int {var}v = 0; {var}v < {bound}; "
                f"{var}v += {vector}) {{",
                f"_Pragma(\"omp simd\") for (int {var} = {var}v; {var} < "
                f"({var}v+{vector} < {bound} ? {var}v+{vector} : {bound}); {var}++) {{"]

    def vector_nest(self, loops: list[str], bound) -> list[str]:
        """loops opened, the last as vector_chunks up to bound: a block's lanes one
        vector at a time."""
        return [self.unroll_lanes + " " + loop + " {" for loop in loops[:-1]] + \
            self.vector_chunks(f"l{self.ck.n_out - 1}", bound)

    def accumulators(self) -> list[str]:
        """The accumulators declared and started: from the reduce's identity, or with a k
        tile after the first from the partial sums the tile before left."""
        ck, acc_at = self.ck, self.acc_at
        n_out, split, part_idx = ck.n_out, ck.split, ck.part_idx
        init = ck.d.reduce_init(ck.reduce_node.op, ck.reduce_node.dtype)
        body = [f"{self.acc_type} acc{self.acc_dims}[{split}];"]
        if ck.tiled and n_out and split == 1:
            # a k tile's partial sums come back from memory as vectors: the lanes as a simd
            # loop, as in the reduce below (fully unrolled and SLP off, GCC loads them one by
            # one and builds each vector from its elements: 64x4096x4096 on two threads ran
            # at 0.72x OpenBLAS so, 0.95x with both ends of the tile as vector loops)
            body += self.vector_nest(self.compute_loops, ck.whole[n_out - 1])
            kept = " && ".join(["!first"] + ([self.inside] if self.inside else []))
            body.append(f"{acc_at}[0] = ({kept}) ? part[{part_idx}] : {init};")
            body.append("}" * (n_out + 1))
        else:
            kept = " && ".join(["s == 0", "!first"] + ([self.inside] if self.inside else []))
            start_value = f"({kept}) ? part[{part_idx}] : {init}" if ck.tiled else init
            body += [self.unroll_lanes + " " + loop for loop in self.compute_loops]
            body.append(f"{self.unroll_lanes} for (int s = 0; s < {split}; s++) "
                        f"{acc_at}[s] = {start_value};")
        return body

    def reduce_bounds(self) -> list[tuple[str, str]]:
        """(first, end) of every reduce loop, the innermost last: one loop over every reduce
        axis where they are flat, named as the innermost; the first axis's tile with a k
        tile."""
        ck = self.ck
        bounds = [("0", str(size)) for size in ck.red_sizes]
        if ck.tiled:
            bounds[0] = ("k0", "k0+kn")
        if ck.flat:
            bounds = [(f"k0*{ck.inner_size}", f"(k0+kn)*{ck.inner_size}") if ck.tiled
                      else ("0", str(math.prod(ck.red_sizes)))]
        return bounds

    def next_panel_fetches(self, bounds: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """(declaration, statement) of each weight's panel a block fetches its share of a
        panel ahead (prefetch.py)."""
        ck = self.ck
        fetch_tile = ck.ktile if ck.tiled else 0
        ahead = next_panel_fetch(ck.packs, ck.prepacked, ck.order, ck.nblocks, ck.red_sizes,
                                 fetch_tile, ck.split, ck.l2_bytes,
                                 ck.threads if ck.parallel else 1, ck.tile_walk)
        # the reduce step a fetch ahead is at, counted from the start of the block's (tile's)
        # reduce
        inner = ck.inner
        step = f"r{inner}b-{bounds[-1][0]}" if bounds[-1][0] != "0" else f"r{inner}b"
        for j, (lo, _) in reversed(list(enumerate(bounds[:-1]))):
            size = math.prod(ck.red_sizes[j + 1:])
            step = f"({'r%d-%s' % (j, lo) if lo != '0' else 'r%d' % j})*{size}+{step}"
        return [fetch_lines(ck.packs[i], i, ck.order, ck.upcast, ck.nblocks, ck.red_sizes,
                            fetch_tile, step, ck.tile_walk) for i in ahead]

    def reduce_loops(self) -> list[str]:
        """The reduce loops, the innermost cut into whole `split` steps and the rest, with
        the pointers of the reads in place set where the innermost starts."""
        ck = self.ck
        bounds = self.reduce_bounds()
        fetches = self.next_panel_fetches(bounds)
        body = [declaration for declaration, _ in fetches]
        for j, (lo, hi) in enumerate(bounds[:-1]):
            body.append(f"for (int r{j} = {lo}; r{j} < {hi}; r{j}++) {{")
        pointers_at, self.reads.pointers = len(body), {}
        lo, hi = bounds[-1]
        if lo == "0" and hi.isdigit():
            full = str(int(hi) - int(hi) % ck.split)
        else:
            full = f"({hi})-((kn*{ck.inner_size})%{ck.split})"
        for piece, (start, stop, step, lanes) in enumerate(
                [(lo, full, ck.split, ck.split), (full, hi, 1, 1)]):
            if start == stop or (piece == 1 and ck.split == 1):
                continue
            body += self.reduce_step_loop(piece, start, stop, step, lanes, fetches)
        body[pointers_at:pointers_at] = [line for _, line in self.reads.pointers.values()]
        self.reads.pointers = None
        body.append("}" * (len(bounds) - 1))
        return body

    def reduce_step_loop(self, piece: int, start: str, stop: str, step: int, lanes: int,
                         fetches: list[tuple[str, str]]) -> list[str]:
        """The innermost reduce loop from start to stop by step, around the block's lanes
        and `lanes` partial sums; the first piece is unrolled and issues the fetches."""
        ck, inner, n_out = self.ck, self.ck.inner, self.ck.n_out
        unroll = ck.unroll
        pragma = f"_Pragma(\"GCC unroll {unroll}\") " if piece == 0 and unroll > 1 else ""
        body = [f"{pragma}for (int r{inner}b = {start}; r{inner}b < {stop}; "
                f"r{inner}b += {step}) {{"]
        for i in ck.walked:  # the lanes of this step's first element, PREFETCH_AHEAD on
            first_lanes = panel_offset(ck.packs[i], *ck.pack_index(i, "0"))
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
        loops = [(f"l{a}", ck.whole[a]) for a in range(n_out)] + [("s", lanes)]
        simd = n_out if lanes > 1 or not n_out else n_out - 1
        opened = 0
        for i, (var, bound) in enumerate(loops):
            if i != simd:
                body.append(f"{self.unroll_lanes} for (int {var} = 0; {var} < {bound}; "
                            f"{var}++) {{")
            elif isinstance(bound, int) and bound <= self.vector:
                body.append(f"_Pragma(\"omp simd\") for (int {var} = 0; {var} < {bound}; "
                            f"{var}++) {{")
            else:
                body += self.vector_chunks(var, bound)
                opened += 1
        body.append(f"const int r{inner} = r{inner}b + s;")
        stmts: list[str] = []
        value = self.emitter.emit(ck.reduce_node.src[0], stmts)
        body += stmts + [ck.d.reduce_step(ck.reduce_node.op, f"{self.acc_at}[s]", value)]
        body.append("}" * (n_out + 2 + opened))
        return body

    def store(self) -> list[str]:
        """The block's elements computed after the reduce and stored through the output view.

        Without a reduce, the last axis's lanes as a simd loop: fully unrolled, GCC's
        straight-line vectorizer gives up on the int index arithmetic and writes a block element
        by element. Not after a reduce: there it takes the accumulators out of the registers.
        After a reduce (untiled), the block's sums are first copied out element by element into
        an array of their own, and the epilogue runs as a simd loop over that copy: left
        element by element, GCC compiles a ReLU in it to a compare and a branch per element,
        which costs more than the whole reduce where that is short. The copy runs one vector at
        a time as well: fully unrolled with SLP off, GCC took every lane out of its register on
        its own (384 extractions after each 6x64 block).
        With a k tile, all tiles but the last store the partial sums as vectors straight from
        the accumulators; the last runs the epilogue on the copy (docs/defaults.md)."""
        ck = self.ck
        n_out, reduce_node, tiled, part_idx = ck.n_out, ck.reduce_node, ck.tiled, ck.part_idx
        body = []
        simd_store = reduce_node is None
        chunked = reduce_node is not None and n_out and (not tiled or ck.split == 1)
        if chunked:
            blk_at = "blk" + "".join(f"[l{a}]" for a in range(n_out))
            if tiled:
                body += ["if (!last) {", *self.vector_nest(self.lane_loops, f"n{n_out - 1}"),
                         f"part[{part_idx}] = {self.acc_at}[0];", "}" * (n_out + 1), "} else {"]
            body.append(f"{self.acc_type} blk{self.acc_dims};")
            body += self.vector_nest(self.lane_loops, f"n{n_out - 1}")
            body += self.block_sum + [f"{blk_at} = red;", "}" * (n_out + 1), EPILOGUE]
            body += self.vector_nest(self.lane_loops, f"n{n_out - 1}")
            body.append(f"{self.acc_type} red = {blk_at};")
        else:
            body += [("_Pragma(\"omp simd\")" if simd_store and a == n_out - 1
                      else self.unroll_lanes) + " " + loop + " {"
                     for a, loop in enumerate(self.lane_loops)]
        if reduce_node is not None and not chunked:
            body += self.block_sum
            if tiled:
                body.append(f"if (!last) part[{part_idx}] = red; else {{")
        stmts = []
        value = self.emitter.emit(ck.kernel.expr, stmts, self.known)
        out_idx, _ = index_expr(ck.kernel.out_view, ck.axis_index)
        body += stmts + [f"data0[{out_idx}] = {value};", "}" * (n_out + bool(chunked))]
        return body + ["}" * tiled]
