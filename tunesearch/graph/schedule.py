"""The scheduler: cuts the lazy graph into fused kernels.

A kernel is rooted at a node to realize. Elementwise work fuses freely; the one reduce that the
root reaches through elementwise ops becomes the kernel's reduce, so work before and after it fuses
too. Everything else the kernel reads (realized buffers, other reduces, nodes the lazy graph marked
for realization) is an input, scheduled before it.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from tunesearch.graph.kernel import BufferSpec, Kernel, KNode
from tunesearch.graph.lazy import LazyNode, load
from tunesearch.graph.view import View


@dataclass(frozen=True)
class ScheduleItem:
    kernel: Kernel
    out: LazyNode              # the node this kernel realizes
    inputs: tuple[LazyNode, ...]  # nodes whose buffers are read, in buffer order 1..n


def backing_node(node: LazyNode) -> LazyNode | None:
    """The node whose buffer holds `node` unchanged, if node is a plain read of one."""
    if node.op == "load" and node.arg.is_contiguous and node.arg.size == node.src[0].numel:
        return node.src[0]
    return None


def create_schedule(roots: list[LazyNode]) -> list[ScheduleItem]:
    """Kernels that realize every root, dependencies first."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    items: list[ScheduleItem] = []
    scheduled: set[int] = set()

    def visit(node: LazyNode):
        if node.realized is not None or id(node) in scheduled:
            return
        scheduled.add(id(node))
        kernel, inputs = build_kernel(node)
        for dep in inputs:
            visit(dep)
        items.append(ScheduleItem(kernel, node, tuple(inputs)))

    for root in roots:
        target = backing_node(root)
        visit(target if target is not None else root)
    return items


def fused_reduce(root: LazyNode) -> LazyNode | None:
    """The first unrealized reduce reachable from root through elementwise ops only."""
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen or node.realized is not None:
            continue
        seen.add(id(node))
        if node.is_reduce:
            return node
        if node.is_elementwise:
            stack.extend(reversed(node.src))
    return None


class _Builder:
    def __init__(self, root: LazyNode):
        self.root = root
        self.reduce = fused_reduce(root)
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
            return self._leaf(node.src[0], node.arg, inner)
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


def build_kernel(root: LazyNode) -> tuple[Kernel, list[LazyNode]]:
    """The kernel that realizes root, and the nodes it reads (buffers 1..n)."""
    builder = _Builder(root)
    expr = builder.build(root, False)
    out_view = builder.to_domain(View.contiguous(root.shape), False)
    buffers = [BufferSpec(root.numel, root.dtype)]
    buffers += [BufferSpec(n.numel, n.dtype) for n in builder.inputs]
    kernel = Kernel(builder.domain, len(builder.axes), expr, out_view, tuple(buffers))
    return kernel, builder.inputs
