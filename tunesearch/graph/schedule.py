"""The scheduler: cuts the lazy graph into fused kernels.

A kernel is rooted at a node to realize. Elementwise work fuses freely; the one reduce that the
root reaches through elementwise ops becomes the kernel's reduce, so work before and after it fuses
too. Everything else the kernel reads (realized buffers, other reduces, nodes the lazy graph marked
for realization) is an input, scheduled before it. A reduce is computed by one kernel: one that two
kernels would compute (one reads it written out, the other fuses it) is written out and read by
both.

A concatenation (a sum of padded pieces that tile one axis), and elementwise work on one, is
not a kernel of its own: each piece is a kernel that writes its slice of the one output buffer,
so a convolution and its epilogue write straight into their place in the concatenation.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass

from tunesearch.graph.kernel import BufferSpec, Kernel, KNode
from tunesearch.graph.lazy import LazyNode, const, load, movement
from tunesearch.graph.ops import MovementOps
from tunesearch.graph.view import View


@dataclass(frozen=True)
class ScheduleItem:
    kernel: Kernel
    out: LazyNode              # the node this kernel realizes (a slice of it, with `piece`)
    inputs: tuple[LazyNode, ...]  # nodes whose buffers are read, in buffer order 1..n
    # for one piece of a concatenation: the node the kernel computes, and where it lies in
    # out's buffer (a view of out's contiguous buffer with the piece's shape)
    piece: tuple[LazyNode, View] | None = None

    @property
    def root(self) -> LazyNode:
        """The node the kernel computes."""
        return self.piece[0] if self.piece else self.out

    @property
    def dest(self) -> tuple[View, int] | None:
        """Where the kernel writes, for a piece: its view and the whole buffer's size."""
        return (self.piece[1], self.out.numel) if self.piece else None


def backing_node(node: LazyNode) -> LazyNode | None:
    """The node whose buffer holds `node` unchanged, if node is a plain read of one."""
    if node.op == "load" and node.arg.is_contiguous and node.arg.size == node.src[0].numel:
        return node.src[0]
    return None


def create_schedule(roots: list[LazyNode]) -> list[ScheduleItem]:
    """Kernels that realize every root, dependencies first.

    A reduce is computed by one kernel: where a kernel would fuse a reduce that another kernel
    also computes (its own kernel, because something reads it written out, or a second kernel
    that fuses it too: `z - z.max()` with z a matmul), the kernels that fused it read it
    written out instead, and the schedule is built again."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    written: set[int] = set()
    while True:
        items = _schedule(roots, frozenset(written))
        twice = _computed_twice(items, frozenset(written))
        if not twice:
            return _fuse_permuted_reduces(items, roots)
        written |= twice


def _schedule(roots: list[LazyNode], written: frozenset[int]) -> list[ScheduleItem]:
    """create_schedule's kernels, with the reduces in written (ids) read as buffers by every
    kernel but their own."""
    items: list[ScheduleItem] = []
    scheduled: set[int] = set()

    def visit(node: LazyNode):
        if node.realized is not None or id(node) in scheduled:
            return
        scheduled.add(id(node))
        pieces = concat_pieces(node, written)
        if pieces is None:
            pieces = pad_pieces(node, written)
        if pieces is None:
            kernel, inputs = build_kernel(node, written=written)
            pieces = [(None, kernel, inputs)]
        for piece, kernel, inputs in pieces:
            for dep in inputs:
                visit(dep)
            items.append(ScheduleItem(kernel, node, tuple(inputs), piece))

    for root in roots:
        target = backing_node(root)
        visit(target if target is not None else root)
    return items


def _computed_twice(items: list[ScheduleItem], written: frozenset[int]) -> set[int]:
    """The reduces (ids) that more than one of items computes."""
    count: dict[int, int] = {}
    for item in items:
        reduce = item.root if item.root.is_reduce else fused_reduce(item.root, written)
        if reduce is not None:
            count[id(reduce)] = count.get(id(reduce), 0) + 1
    return {key for key, n in count.items() if n > 1}


def _fuse_permuted_reduces(items: list[ScheduleItem], roots: list[LazyNode]
                           ) -> list[ScheduleItem]:
    """Fuse a reduce into the one elementwise kernel that reads it, where that kernel reads
    all of it once, through a permutation of its axes (a convolution's output moved back to
    channels first, a matmul's heads transposed): the kernel then iterates the reduce's
    domain and writes its output through the permutation, in place of a kernel that writes the
    reduce and one that reads it back transposed. Only where nothing else reads the reduce,
    which would otherwise be computed twice."""
    readers: dict[int, list[ScheduleItem]] = {}
    for item in items:
        for node in item.inputs:
            readers.setdefault(id(node), []).append(item)
    kept = {id(root) for root in roots} | {id(backing_node(r)) for r in roots}
    fused: dict[int, ScheduleItem] = {}
    dropped: set[int] = set()
    for item in items:
        if item.kernel.reduce is not None:
            continue
        for node in item.inputs:
            if node.is_reduce and node.realized is None and id(node) not in kept \
                    and len(readers.get(id(node), ())) == 1 and id(node) not in dropped:
                built = build_kernel(item.root, lift=node, dest=item.dest)
                if built is not None:
                    fused[id(item)] = ScheduleItem(built[0], item.out, tuple(built[1]),
                                                   item.piece)
                    dropped.add(id(node))
                break
    return [fused.get(id(item), item) for item in items if id(item.out) not in dropped]


def concat_pieces(root: LazyNode, written: frozenset[int] = frozenset()
                  ) -> list[tuple[tuple[LazyNode, View], Kernel, list[LazyNode]]] | None:
    """Where root is elementwise work on a concatenation (a concatenation is a sum of pieces
    read through views padded to ranges of one axis): the ranges of its masked reads on that
    axis, each equal to or apart from every other, tile the axis. Then per range: root there
    (shrunk to the range, the reads padded to other ranges dropped as zeros) with the view of
    root's buffer it fills, its kernel and the kernel's inputs. None for any other node, and
    where a piece's kernel does not build (a domain that cannot take the slice's view)."""
    if not root.is_elementwise or root.realized is not None:
        return None
    cuts = _masked_reads(root)
    if cuts is None or len({axis for axis, _ in cuts}) != 1:
        return None
    axis = next(iter(cuts))[0]
    spans = sorted({span for _, span in cuts})
    if len(spans) < 2 or spans[0][0] != 0 or spans[-1][1] != root.shape[axis] or \
            any(a[1] != b[0] for a, b in zip(spans, spans[1:])):
        return None
    out = []
    whole = View.contiguous(root.shape)
    for lo, hi in spans:
        box = tuple((lo, hi) if a == axis else (0, s) for a, s in enumerate(root.shape))
        piece = _without_zero_reads(movement(root, MovementOps.SHRINK, box), {})
        dest = whole.shrink(box)
        built = build_kernel(piece, dest=(dest, root.numel), written=written)
        if built is None:
            return None
        out.append(((piece, dest), *built))
    return out


def pad_pieces(root: LazyNode, written: frozenset[int] = frozenset()
               ) -> list[tuple[tuple[LazyNode, View], Kernel, list[LazyNode]]] | None:
    """Where root is elementwise work on a padded reduce (every masked read under it masked to
    one box, on any number of axes, and one of them a read of a reduce not yet computed: a
    convolution's output padded for the pool or the convolution after it): the box and the
    border around it as pieces, as concat_pieces gives them. The box's piece reads the reduce
    in order, so the reduce can be computed into the padded buffer's interior
    (_fuse_permuted_reduces) instead of being written and copied; the border's pieces read
    nothing (their reads are masked everywhere there). None for any other node."""
    if not root.is_elementwise or root.realized is not None:
        return None
    boxes = _masked_boxes(root)
    if boxes is None or len(boxes) != 1:
        return None
    (box, padded), = boxes.items()
    full = tuple((0, size) for size in root.shape)
    if padded is None or box == full:
        return None
    boxes_out, rest = [], list(full)
    for axis, (lo, hi) in enumerate(box):  # slabs before and after the box, axis by axis
        size = root.shape[axis]
        for span in ((0, lo), (hi, size)):
            if span[0] < span[1]:
                boxes_out.append(tuple(rest[:axis]) + (span,) + tuple(rest[axis + 1:]))
        rest[axis] = (lo, hi)
    boxes_out.insert(0, tuple(rest))
    out, whole = [], View.contiguous(root.shape)
    for piece_box in boxes_out:
        piece = _without_zero_reads(movement(root, MovementOps.SHRINK, piece_box), {})
        dest = whole.shrink(piece_box)
        if not out and build_kernel(piece, lift=padded, dest=(dest, root.numel)) is None:
            return None  # the reduce cannot be computed into the box (a flattened axis)
        built = build_kernel(piece, dest=(dest, root.numel), written=written)
        if built is None:
            return None
        out.append(((piece, dest), *built))
    return out


def _masked_boxes(root: LazyNode) -> dict[tuple[tuple[int, int], ...], LazyNode | None] | None:
    """The masks of the reads under root's elementwise work, each with the reduce not yet
    computed that is read through it (None if none is); None where root's work reaches a
    reduce or a gather other than through a read."""
    found: dict[tuple[tuple[int, int], ...], LazyNode | None] = {}
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.op in ("load", "const"):
            view = node.arg if node.op == "load" else node.arg[1]
            if view.mask is not None:
                read = node.src[0] if node.op == "load" else None
                if read is None or not read.is_reduce or read.realized is not None:
                    read = None
                found[view.mask] = found.get(view.mask) or read
        elif node.is_elementwise and node.realized is None:
            stack.extend(node.src)
        else:
            return None
    return found


def _masked_reads(root: LazyNode) -> set[tuple[int, tuple[int, int]]] | None:
    """The (axis, range) of every read under root's elementwise work that is masked, each on
    exactly one axis; None where one is masked on several, or root's work reaches a reduce."""
    found: set[tuple[int, tuple[int, int]]] = set()
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.op in ("load", "const"):
            view = node.arg if node.op == "load" else node.arg[1]
            if view.mask is None:
                continue
            cut = [(a, (lo, hi)) for a, ((lo, hi), size) in
                   enumerate(zip(view.mask, view.shape)) if (lo, hi) != (0, size)]
            if len(cut) != 1 or cut[0][1][0] >= cut[0][1][1]:
                return None
            found.add(cut[0])
        elif node.is_elementwise and node.realized is None:
            stack.extend(node.src)
        else:
            return None
    return found


def _without_zero_reads(node: LazyNode, memo: dict) -> LazyNode:
    """node with every read whose view is masked everywhere (a piece padded to another range)
    made the constant zero, so the kernel does not read that buffer."""
    if id(node) not in memo:
        out = node
        if node.op in ("load", "const"):
            view = node.arg if node.op == "load" else node.arg[1]
            if view.mask is not None and any(lo >= hi for lo, hi in view.mask):
                out = const(0, node.shape, node.dtype, node.device)
        elif node.is_elementwise and node.realized is None:
            srcs = tuple(_without_zero_reads(src, memo) for src in node.src)
            if any(a is not b for a, b in zip(srcs, node.src)):
                out = LazyNode(node.op, srcs, node.arg, node.shape, node.dtype, node.device)
        memo[id(node)] = out
    return memo[id(node)]


def permutation_of(view: View, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Where view reads all of a contiguous buffer of `shape` once, as a permutation of the
    axes of some reshape of it: the order of view's axes that lays them out as the buffer does
    (view's size-1 axes first, then largest stride first: a kernel over that order then runs
    its vector lanes along the buffer's last real axis, not along a size-1 one). None for any
    other view."""
    if view.offset or view.mask is not None or view.size != math.prod(shape):
        return None
    axes = sorted((i for i, size in enumerate(view.shape) if size != 1),
                  key=lambda i: -view.strides[i])
    step = 1
    for i in reversed(axes):
        if view.strides[i] != step:
            return None
        step *= view.shape[i]
    return tuple(i for i, size in enumerate(view.shape) if size == 1) + tuple(axes)


def stored_order(node: LazyNode) -> tuple[int, ...] | None:
    """The order in which node's axes lie in memory, where it reads one buffer (or one node
    realized into a buffer) whole: the permutation of that read (permutation_of), of the
    part inside its mask for a padded read (a piece of a concatenation). Under elementwise
    work, the read of a reduce not yet realized counts first (its kernel iterates that
    reduce's domain), one through a permutation before one as laid out; else the first read
    of any other buffer. None where no read covers node whole."""
    found: list[tuple[int, tuple[int, ...]]] = []
    stack, seen = [node], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if item.op == "load":
            view = item.arg if item.arg.mask is None else item.arg.shrink(item.arg.mask)
            order = permutation_of(view, item.src[0].shape)
            if order is not None:
                source = item.src[0]
                rank = 2 if source.is_reduce and source.realized is None else 0
                moved = [a for a in order if view.shape[a] != 1] != \
                    [a for a in range(len(order)) if view.shape[a] != 1]
                found.append((rank + moved, order))
        elif item.is_elementwise and item.realized is None:
            stack.extend(reversed(item.src))
    return max(found, key=lambda f: f[0])[1] if found else None


def fused_reduce(root: LazyNode, written: frozenset[int] = frozenset()) -> LazyNode | None:
    """The first unrealized reduce reachable from root through elementwise ops only, other
    than those in written (ids: reduces read as buffers, unless root is one)."""
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen or node.realized is not None:
            continue
        seen.add(id(node))
        if node.is_reduce:
            if node is root or id(node) not in written:
                return node
            continue
        if node.is_elementwise:
            stack.extend(reversed(node.src))
    return None


class _NoLift(Exception):
    """The kernel reads the reduce it would fuse through more than one view."""


class _Builder:
    def __init__(self, root: LazyNode, lift: LazyNode | None = None,
                 written: frozenset[int] = frozenset()):
        self.root = root
        self.reduce = fused_reduce(root, written) if lift is None else lift
        # with a lifted reduce, the nodes from the root down to its reads have the root's
        # shape: their views are moved onto the reduce's shape through the permutation
        self.lift: tuple[View, tuple[int, ...]] | None = None
        if self.reduce is not None:
            self.axes, _ = self.reduce.arg
            full = self.reduce.src[0].shape
            self.keep_shape = tuple(1 if i in self.axes else s for i, s in enumerate(full))
            self.perm = tuple([i for i in range(len(full)) if i not in self.axes] + list(self.axes))
            self.domain = tuple(full[i] for i in self.perm)
        else:
            self.axes, self.keep_shape, self.perm = (), root.shape, tuple(range(len(root.shape)))
            self.domain = root.shape
        self.inputs: list[LazyNode] = []
        self.memo: dict[tuple[int, bool], KNode] = {}

    def buffer_index(self, target: LazyNode) -> int:
        for i, node in enumerate(self.inputs):
            if node is target:
                return i + 1
        self.inputs.append(target)
        return len(self.inputs)

    def to_domain(self, view: View, inner: bool) -> View | None:
        """A view over a node's shape, as a view over the (permuted) kernel domain."""
        if not inner and self.lift is not None:
            view = view.permute(self.lift[1]).reshape(self.reduce.shape)
            if view is None:
                return None
        if not inner:
            view = view.reshape(self.keep_shape)
            if view is None:
                return None
            view = view.expand(tuple(self.reduce.src[0].shape)) if self.reduce else view
        return view.permute(self.perm)

    def build(self, node: LazyNode, inner: bool) -> KNode:
        key = (id(node), inner)
        if key not in self.memo:
            self.memo[key] = self._build(node, inner)
        return self.memo[key]

    def _leaf(self, target: LazyNode, view: View, inner: bool) -> KNode:
        moved = self.to_domain(view, inner)
        if moved is None:  # no single view: read a realized copy instead
            copy = load(target, view)
            return self._leaf(copy, View.contiguous(view.shape), inner)
        index = self.buffer_index(target)
        return KNode("load", (), (index, moved), target.dtype)

    def _build(self, node: LazyNode, inner: bool) -> KNode:
        if node.realized is not None and node.op != "buffer":
            return self._leaf(node, View.contiguous(node.shape), inner)
        if node.op == "load":
            if node.src[0] is self.reduce and not inner and self.lift is not None:
                if node.arg != self.lift[0]:
                    raise _NoLift
                self.lift, lift = None, self.lift  # the reduce's own coordinates below
                try:
                    return self.build(node.src[0], False)
                finally:
                    self.lift = lift
            return self._leaf(node.src[0], node.arg, inner)
        if node.op == "gather":
            # inside a reduce its result is read from a buffer of its own: the reduce's
            # panels, register blocks and matmul layouts are built over plain loads
            view, stride, size = node.arg
            moved = None if inner else self.to_domain(view, inner)
            if moved is None:
                return self._leaf(node, View.contiguous(node.shape), inner)
            index = self.build(node.src[1], inner)
            return KNode("gather", (index,), (self.buffer_index(node.src[0]), moved, stride, size),
                         node.dtype)
        if node.op == "const":
            value, view = node.arg
            moved = self.to_domain(view, inner)
            if moved is None:
                return self._leaf(node, View.contiguous(node.shape), inner)
            return KNode("const", (), (value, moved), node.dtype)
        if node.is_reduce:
            if node is self.reduce and not inner:
                src = self.build(node.src[0], True)
                return KNode(node.op, (src,), None, node.dtype)
            return self._leaf(node, View.contiguous(node.shape), inner)
        if node.op == "buffer":
            return self._leaf(node, View.contiguous(node.shape), inner)
        srcs = tuple(self.build(s, inner) for s in node.src)
        return KNode(node.op, srcs, node.arg, node.dtype)


def build_kernel(root: LazyNode, lift: LazyNode | None = None,
                 dest: tuple[View, int] | None = None, written: frozenset[int] = frozenset()
                 ) -> tuple[Kernel, list[LazyNode]] | None:
    """The kernel that realizes root, and the nodes it reads (buffers 1..n); the reduces in
    written (ids) are read as buffers, not fused (unless root is one). With lift (a
    reduce that root reads through a permutation of its axes only), the kernel fuses that
    reduce, or None where root reads it otherwise too. With dest (a view of root's shape into
    a larger contiguous buffer, and that buffer's size: a slice of a concatenation), the
    kernel writes there, or None where the kernel's domain cannot take that view."""
    builder = _Builder(root, lift, written)
    if lift is not None:
        views = {n.arg for n in _reads_of(root, lift)}
        order = permutation_of(next(iter(views)), lift.shape) if len(views) == 1 else None
        if order is None:
            return None
        builder.lift = (next(iter(views)), order)
        try:
            expr = builder.build(root, False)
        except _NoLift:
            return None
    else:
        expr = builder.build(root, False)
    view, size = dest or (View.contiguous(root.shape), root.numel)
    out_view = builder.to_domain(view, False)
    if out_view is None:
        return None
    buffers = [BufferSpec(size, root.dtype)]
    buffers += [BufferSpec(n.numel, n.dtype) for n in builder.inputs]
    kernel = Kernel(builder.domain, len(builder.axes), expr, out_view, tuple(buffers))
    return kernel, builder.inputs


def _reads_of(root: LazyNode, target: LazyNode) -> list[LazyNode]:
    """The loads of target that root reaches through elementwise ops."""
    out, stack, seen = [], [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen or (node.realized is not None and node.op != "buffer"):
            continue
        seen.add(id(node))
        if node.op == "load" and node.src[0] is target:
            out.append(node)
        elif node.is_elementwise:
            stack.extend(node.src)
    return out
