"""A kernel under a CPU config as every stage of its C reads it: the knobs, the panels its
operands are staged in, the shape of the reduce loops, and the C index of each axis inside a
block. Computed once per render, so the stages (c_block.py, c_entry.py, c.py) agree."""
from __future__ import annotations

import math

from tunesearch.codegen.dialect import Dialect
from tunesearch.codegen.panels import padded_axes
from tunesearch.graph.dtypes import DType, dtypes
from tunesearch.graph.kernel import Kernel, KNode
from tunesearch.graph.ops import BinaryOps
from tunesearch.space.config import Config
from tunesearch.space.kernel_shape import interior_ranges, masked_axes
from tunesearch.space.panel_layout import PackInfo


class CDialect(Dialect):
    """The C of the CPU device: sqrt, exp2 and log2 by the inline functions of VECTOR_MATH."""

    def math_name(self, name: str) -> str:
        return f"ts_{name}f" if name in ("sqrt", "exp2", "log2") else super().math_name(name)

    def recip_one_plus_exp2(self, x: str, dtype: DType) -> str | None:
        return f"ts_recip_1_exp2f({x})" if dtype is dtypes.float32 else None

    def select(self, node: KNode, cond: str, a: str, b: str) -> str:
        """A float picked by a mask test (a pool's tap in the padding) through its bits
        (codegen/masked_loads.py): GCC sinks a read that only one side of `cond ? a : b` uses
        under a branch, and where the test is the same for every lane the block then runs one
        element at a time. A test computed per lane stays `?:`, a blend (through the bits,
        GCC vectorized no loop that also computed an erf)."""
        return f"ts_select(!!({cond}),{a},{b})" if bit_select(node) else \
            super().select(node, cond, a, b)


def bit_select(node: KNode) -> bool:
    """Whether a where is rendered as ts_select: a float one on a mask test."""
    return node.op is BinaryOps.WHERE and node.dtype is dtypes.float32 and \
        node.src[0].op == "const"


def buffer_params(kernel: Kernel, dialect: Dialect) -> str:
    """The kernel's buffers as C parameters: the output, then the inputs read only."""
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


class CKernel:
    """kernel under config, rendered as the function `name` for a target whose vector register
    holds vector_bytes and whose L2 per core holds l2_bytes; prepacked: the buffers that arrive
    packed already (see render_c)."""

    def __init__(self, kernel: Kernel, config: Config, name: str, vector_bytes: int,
                 prepacked: frozenset[int], l2_bytes: int):
        self.kernel, self.config, self.name = kernel, config, name
        self.vector_bytes, self.prepacked, self.l2_bytes = vector_bytes, prepacked, l2_bytes
        self.d = CDialect()
        n_out, domain = self.n_out, self.domain = kernel.n_out, kernel.domain
        self.upcast = tuple(config.get("upcast", (1,) * n_out))
        self.order = tuple(config.get("order", tuple(range(n_out))))
        self.unroll, self.split = config.get("unroll", 1), config.get("split", 1)
        self.parallel, self.threads = config.get("parallel", 0), config.get("threads", 1)
        self.reduce_node = reduce_node = kernel.reduce
        self.red_sizes = red_sizes = domain[n_out:]
        self.ktile = config.get("ktile", 0) if reduce_node is not None else 0
        self.tiled = 0 < self.ktile < red_sizes[0] if reduce_node is not None else False
        self._panels(config)
        self.flat = collapsible(kernel, self.packs)
        # with flat reduce loops one index runs over all reduce axes; a k tile covers `inner`
        # of it for each step of the first axis
        self.inner_size = math.prod(red_sizes[1:]) if self.flat else 1
        self.masked = any(n.arg[1].mask is not None for n in kernel.loads())
        self.gathered = bool(kernel.gathers())
        self.selects = any(bit_select(n) for n in kernel.expr.walk())
        self.inside_masks = interior_ranges(kernel)
        # the lanes' axis gets a flag of its own where other axes are masked too: a block whose
        # rows lie inside (most of a padded map's) tests only its lanes against the mask
        self.lanes_flag_axis = n_out - 1 if n_out - 1 in self.inside_masks and \
            len(self.inside_masks) > 1 else None
        self.lane_idx = [f"(o{a}+l{a})" for a in range(n_out)]
        self.red_idx = [f"r{j}" for j in range(len(red_sizes))]
        self.inner = inner = len(red_sizes) - 1
        # the axes whose index moves along the vector lanes: the last output axis, and the
        # innermost reduce axis where split partial sums run over the lanes
        self.lane_axes = frozenset([n_out - 1] + (
            [len(domain) - 1 if self.flat else n_out + inner]
            if self.split > 1 and reduce_node is not None else []))
        # the masks test no lane: every test is the same for a whole vector (a padded copy
        # laid out channels last, its rows and columns masked, its channels the lanes)
        self.masked_off_lanes = self.masked and not (self.lane_axes & masked_axes(kernel))
        # a register block over two output axes after a reduce (a matmul's rows x columns)
        self.two_axis_block = reduce_node is not None and sum(u > 1 for u in self.upcast) >= 2
        self.nblocks = [math.ceil(domain[a] / self.upcast[a]) for a in range(n_out)]
        # the reduce runs over whole blocks where the panels are padded: one shape for every
        # call
        self.padded = padded_axes(kernel, self.packs)
        self.whole = [self.upcast[a] if a in self.padded else f"n{a}" for a in range(n_out)]
        # a block element's place in the k tiles' partial sums
        self.part_idx = "+".join(f"{self.lane_idx[a]}*{math.prod(domain[a + 1:n_out])}"
                                 for a in range(n_out)) or "0"

    def _panels(self, config: Config) -> None:
        """The panels of the config's packs, which of them are streamed, which walked."""
        upcast, order, prepacked = self.upcast, self.order, self.prepacked
        self.packs = packs = {i: PackInfo(self.kernel, i, upcast,
                                          0 if i in prepacked else self.ktile)
                              for i in config.get("pack", ())}
        self.streamed = streamed_packs(packs, prepacked, order, self.parallel)
        # the whole panels the block loop walks through, a block's slice at a time (A's rows
        # under the column blocks): each block's reduce fetches its slice ahead
        # (PREFETCH_AHEAD). Only a panel packed in the call, just written and in L2 or L3: a
        # weight's panel packed when the plan was built, read from memory in every call, ran
        # slower so (docs/defaults.md)
        self.walked = [i for i, p in packs.items() if i not in self.streamed
                       and i not in prepacked and order and order[0] not in p.axes and p.axes]
        # with a k tile and shared block loops, each thread walks its own run of blocks once
        # per tile (BLIS's order: a weight's tile streams in beside the arithmetic on the
        # tile before it) where no panel is filled per tile; else the tiles run around the
        # shared loops, one fork and join per tile
        self.tile_walk = self.tiled and bool(self.parallel and self.n_out) and \
            all(i in prepacked for i in packs)

    def params(self) -> str:
        """The entry point's parameters: the kernel's buffers."""
        return buffer_params(self.kernel, self.d)

    def panel_params(self) -> str:
        """The block function's parameters after the origins and bounds: the panels, and with
        a k tile the tile and the partial sums."""
        d = self.d
        extra = "".join(f", const {d.type_name(p.dtype)}* {d.restrict} pk{i}"
                        for i, p in self.packs.items())
        if self.tiled:
            extra += (f", const int k0, const int kn, const int first, const int last, "
                      f"{d.type_name(self.reduce_node.dtype)}* {d.restrict} part")
        return extra

    def origin_params(self) -> str:
        """The block's origin along every output axis, as parameters."""
        return "".join(f", const int o{a}" for a in range(self.n_out))

    def axis_index(self, axis: int) -> str:
        """The C index of axis at the block's element being computed."""
        if axis < self.n_out:
            return self.lane_idx[axis]
        if self.flat:  # the strides chain: the innermost axis's stride times the flat index
            return self.red_idx[self.inner] if axis == len(self.domain) - 1 else "0"
        return self.red_idx[axis - self.n_out]

    def holds(self, axis: int) -> str | None:
        """The flag under which the block lies inside every mask on axis (see index_expr)."""
        if axis == self.lanes_flag_axis:
            return "inlanes"
        return "inner" if axis in self.inside_masks else None

    def pack_index(self, index: int, lane: str | None = None) -> tuple[list[str], ...]:
        """(blocks, reduce, lanes) of panel index at the block's element being computed (lane
        None) or at the given lane of every axis."""
        p = self.packs[index]
        red_idx, inner = self.red_idx, self.inner
        # a streamed panel holds the one block being computed
        blocks = ["0"] if index in self.streamed else \
            [f"(o{a}/{self.upcast[a]})" for a in p.axes]
        lanes = [lane or f"l{a}" for a in p.axes]
        # a tile's panel, or the whole reduce
        by_tile = self.tiled and index not in self.prepacked
        if self.flat:
            red = [f"({red_idx[inner]}-k0*{self.inner_size})" if by_tile else red_idx[inner]]
        else:
            red = [f"({red_idx[0]}-k0)"] + red_idx[1:] if by_tile else red_idx
        return blocks, red, lanes
