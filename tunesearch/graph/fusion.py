"""One kernel from a node of the lazy graph: the elementwise work under it and the one reduce it
reaches through elementwise ops fused, every other read (realized buffers, other reduces) a
buffer of the kernel, each through a view of the kernel's domain. graph/schedule.py decides
which nodes are kernels; this builds each one.
"""
from __future__ import annotations

import math

from tunesearch.graph.kernel import BufferSpec, Kernel, KNode
from tunesearch.graph.lazy import LazyNode, load
from tunesearch.graph.view import View


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
