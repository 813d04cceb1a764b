"""The scheduler: cuts the lazy graph into fused kernels.

A kernel is rooted at a node to realize. Elementwise work fuses freely; the one reduce that the
root reaches through elementwise ops becomes the kernel's reduce, so work before and after it fuses
too. Everything else the kernel reads (realized buffers, other reduces, nodes the lazy graph marked
for realization) is an input, scheduled before it. A reduce is computed by one kernel: one that two
kernels would compute (one reads it written out, the other fuses it) is written out and read by
both.

A concatenation (a sum of padded pieces that tile one axis), and elementwise work on one, is
not a kernel of its own: each piece is a kernel that writes its slice of the one output buffer,
so a convolution and its epilogue write straight into their place in the concatenation. A
padded reduce is split likewise: the reduce writes the padded buffer's interior, kernels that
read nothing its border. graph/fusion.py builds each kernel.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from tunesearch.graph.fusion import build_kernel, fused_reduce, permutation_of
from tunesearch.graph.kernel import Kernel
from tunesearch.graph.lazy import LazyNode, const, movement
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
    leaves = _masked_leaves(root)
    if leaves is None:
        return None
    found: dict[tuple[tuple[int, int], ...], LazyNode | None] = {}
    for node, view in leaves:
        read = node.src[0] if node.op == "load" else None
        if read is None or not read.is_reduce or read.realized is not None:
            read = None
        found[view.mask] = found.get(view.mask) or read
    return found


def _masked_reads(root: LazyNode) -> set[tuple[int, tuple[int, int]]] | None:
    """The (axis, range) of every read under root's elementwise work that is masked, each on
    exactly one axis; None where one is masked on several, or root's work reaches a reduce."""
    leaves = _masked_leaves(root)
    if leaves is None:
        return None
    found: set[tuple[int, tuple[int, int]]] = set()
    for _, view in leaves:
        cut = [(a, (lo, hi)) for a, ((lo, hi), size) in enumerate(zip(view.mask, view.shape))
               if (lo, hi) != (0, size)]
        if len(cut) != 1 or cut[0][1][0] >= cut[0][1][1]:
            return None
        found.add(cut[0])
    return found


def _masked_leaves(root: LazyNode) -> list[tuple[LazyNode, View]] | None:
    """The loads and constants under root's elementwise work that are masked, with their views;
    None where that work reaches anything else (a reduce, a gather) but through a read."""
    found, stack, seen = [], [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.op in ("load", "const"):
            view = node.arg if node.op == "load" else node.arg[1]
            if view.mask is not None:
                found.append((node, view))
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
