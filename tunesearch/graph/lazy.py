"""The lazy graph: nodes record operations; nothing runs until a tensor is realized.

Leaves are loads (a buffer, or a node that will be realized into one, read through a view),
gathers (a load at a position that a computed index picks along one axis: an embedding's rows)
and constants. Movement ops never make nodes of their own: they are pushed down to the leaves and
change their views, so `a.T * b` reads `a` through a permuted view inside the same kernel. Where a
view cannot express the move (padding an op with f(0) != 0, a reshape that no single view
describes, moving the result of a reduce), the source is marked to be realized and read back.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from tunesearch.graph.dtypes import DType, dtypes
from tunesearch.graph.ops import BinaryOps, MovementOps, ReduceOps, UnaryOps, COMPARISONS
from tunesearch.graph.view import View

# f(0, ...) == 0 for these, so padding their inputs pads their output
PAD_SAFE = {BinaryOps.ADD, BinaryOps.MUL, BinaryOps.MAX, BinaryOps.CMPLT, BinaryOps.WHERE,
            UnaryOps.NEG, UnaryOps.SQRT, UnaryOps.SIN, UnaryOps.CAST}


class LazyNode:
    """One node of the lazy graph.

    op is "buffer" (realized data), "load" (src[0] read through the view in arg), "gather" (see
    `gather`), "const" (arg is (value, view)), a UnaryOps/BinaryOps member (elementwise), or a
    ReduceOps member (arg is (axes, out_shape)). Nodes are compared by identity.
    """
    __slots__ = ("op", "src", "arg", "shape", "dtype", "device", "realized", "__weakref__")

    def __init__(self, op, src: tuple, arg: Any, shape: tuple[int, ...], dtype: DType, device: str,
                 realized: Any = None):
        self.op, self.src, self.arg = op, src, arg
        self.shape, self.dtype, self.device = tuple(shape), dtype, device
        self.realized = realized

    def __repr__(self) -> str:
        name = self.op if isinstance(self.op, str) else self.op.name
        return f"<LazyNode {name} {self.shape} {self.dtype.name}{' realized' if self.realized else ''}>"

    @property
    def is_elementwise(self) -> bool:
        return isinstance(self.op, (UnaryOps, BinaryOps))

    @property
    def is_reduce(self) -> bool:
        return isinstance(self.op, ReduceOps)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


# ---- constructors

def buffer_node(buffer: Any, shape: tuple[int, ...], dtype: DType, device: str,
                fed: bool = False) -> LazyNode:
    """A realized buffer, returned as the load that reads it whole. fed: an input of a traced
    program or model, which every call fills anew (its arg says so), never a constant."""
    base = LazyNode("buffer", (), "fed" if fed else None, shape, dtype, device, realized=buffer)
    return load(base)


def load(target: LazyNode, view: Optional[View] = None) -> LazyNode:
    view = view or View.contiguous(target.shape)
    return LazyNode("load", (target,), view, view.shape, target.dtype, target.device)


def gather(target: LazyNode, index: LazyNode, view: View, stride: int, size: int) -> LazyNode:
    """target's buffer read at view(p) + index[p] * stride for every position p of view's shape,
    where 0 <= index[p] < size, else 0: Gather and GatherElements with computed indices (a
    token's embedding row): one read per element, whatever the axis's size.
    index is an int32 node of view's shape; view (no mask) reads the gathered axis at 0."""
    if view.mask is not None or index.shape != view.shape:
        raise ValueError("a gather reads through an unmasked view of its index's shape")
    return LazyNode("gather", (target, index), (view, stride, size), view.shape, target.dtype,
                    target.device)


def const(value, shape: tuple[int, ...], dtype: DType, device: str) -> LazyNode:
    value = dtype.np(value).item()
    return LazyNode("const", (), (value, View.make(shape, (0,) * len(shape))), shape, dtype, device)


def elementwise(op, *srcs: LazyNode, arg: Any = None) -> LazyNode:
    """An elementwise op on nodes of one shape; constants are folded."""
    if op in COMPARISONS:
        dtype = dtypes.bool
    elif op is UnaryOps.CAST:
        dtype = arg
    elif op is BinaryOps.WHERE:
        dtype = srcs[1].dtype
    else:
        dtype = srcs[0].dtype
    if all(s.op == "const" and s.arg[1].mask is None for s in srcs):
        value = fold(op, [s.arg[0] for s in srcs], [s.dtype for s in srcs], dtype)
        return const(value, srcs[0].shape, dtype, srcs[0].device)
    return LazyNode(op, tuple(srcs), arg, srcs[0].shape, dtype, srcs[0].device)


def reduce(op: ReduceOps, src: LazyNode, axes: tuple[int, ...]) -> LazyNode:
    """Reduce over axes; the result keeps them with size 1."""
    shape = tuple(1 if i in axes else s for i, s in enumerate(src.shape))
    if not axes:
        return src
    return LazyNode(op, (src,), (tuple(sorted(axes)), shape), shape, src.dtype, src.device)


def fold(op, values: list, in_dtypes: list[DType], dtype: DType):
    """Evaluate one op on scalars, the way the kernels do."""
    args = [dt.np(v) for v, dt in zip(values, in_dtypes)]
    with np.errstate(all="ignore"):
        return apply_numpy(op, args, dtype)


def apply_numpy(op, args: list, dtype: DType):
    """The numpy meaning of an elementwise op (shared by constant folding and the reference)."""
    if op is UnaryOps.EXP2:
        out = np.exp2(args[0])
    elif op is UnaryOps.LOG2:
        out = np.log2(args[0])
    elif op is UnaryOps.SQRT:
        out = np.sqrt(args[0])
    elif op is UnaryOps.RECIP:
        out = np.reciprocal(args[0].astype(dtype.np))
    elif op is UnaryOps.NEG:
        out = np.logical_not(args[0]) if args[0].dtype == np.bool_ else np.negative(args[0])
    elif op is UnaryOps.SIN:
        out = np.sin(args[0])
    elif op is UnaryOps.CAST:
        out = args[0]
    elif op is BinaryOps.ADD:
        out = np.logical_or(*args) if dtype is dtypes.bool else np.add(*args)
    elif op is BinaryOps.MUL:
        out = np.logical_and(*args) if dtype is dtypes.bool else np.multiply(*args)
    elif op is BinaryOps.MAX:
        out = np.maximum(*args)
    elif op is BinaryOps.CMPLT:
        out = np.less(*args)
    elif op is BinaryOps.CMPEQ:
        out = np.equal(*args)
    elif op in (BinaryOps.IDIV, BinaryOps.MOD):
        # C semantics (truncation); a zero divisor gives 0, as the kernels define it
        a, b = args
        safe = np.where(b == 0, 1, b)
        q = np.trunc(np.asarray(a, np.float64) / safe).astype(np.int64)
        out = np.where(b == 0, 0, q if op is BinaryOps.IDIV else a - safe * q)
    elif op is BinaryOps.WHERE:
        out = np.where(args[0], args[1], args[2])
    else:
        raise NotImplementedError(op)
    return np.asarray(out).astype(dtype.np)


# ---- movement: pushed down to the leaves

def move_view(view: View, op: MovementOps, arg) -> Optional[View]:
    """The view after a movement op: each op is the View method of its name."""
    if op not in _VIEW_METHODS:
        raise NotImplementedError(op)
    return getattr(view, _VIEW_METHODS[op])(arg)


_VIEW_METHODS = {MovementOps.RESHAPE: "reshape", MovementOps.PERMUTE: "permute",
                 MovementOps.EXPAND: "expand", MovementOps.PAD: "pad",
                 MovementOps.SHRINK: "shrink", MovementOps.FLIP: "flip"}


def movement(node: LazyNode, op: MovementOps, arg) -> LazyNode:
    """Apply a movement op by changing the views of the leaves under node."""
    return _move(node, op, arg, {})


def _move(node: LazyNode, op: MovementOps, arg, memo: dict) -> LazyNode:
    if id(node) in memo:
        return memo[id(node)]
    out = _move_one(node, op, arg, memo)
    memo[id(node)] = out
    return out


def _reread(node: LazyNode, op: MovementOps, arg) -> LazyNode:
    """Realize node, then read it back through the moved view."""
    return load(node, move_view(View.contiguous(node.shape), op, arg))


def _move_one(node: LazyNode, op: MovementOps, arg, memo: dict) -> LazyNode:
    if node.realized is not None and node.op != "buffer":
        return _reread(node, op, arg)
    if node.op == "load":
        view = move_view(node.arg, op, arg)
        return load(node.src[0], view) if view is not None else _reread(node, op, arg)
    if node.op == "gather":
        # the read's view and its index move together; a pad (a mask) realizes it first
        view = move_view(node.arg[0], op, arg)
        if view is None or view.mask is not None:
            return _reread(node, op, arg)
        index = _move(node.src[1], op, arg, memo)
        return gather(node.src[0], index, view, *node.arg[1:])
    if node.op == "const":
        view = move_view(node.arg[1], op, arg)
        if view is None:
            return _reread(node, op, arg)
        return LazyNode("const", (), (node.arg[0], view), view.shape, node.dtype, node.device)
    if node.op == "buffer":
        return _move(load(node), op, arg, memo)
    if node.is_reduce:
        if op is MovementOps.RESHAPE:
            axes, _ = node.arg
            return LazyNode(node.op, node.src, (axes, tuple(arg)), arg, node.dtype, node.device)
        return _reread(node, op, arg)
    if op is MovementOps.PAD and (node.op not in PAD_SAFE or _splits_a_reduce(node, memo)):
        return _reread(node, op, arg)
    if op is MovementOps.EXPAND and math.prod(arg) > math.prod(node.shape) and \
            _epilogue_of_reduce(node, memo)[1]:
        # work on a reduce's result, broadcast: done once per result in the reduce's kernel
        # (a squeeze-excitation gate's sigmoid, a norm's rsqrt), not once per element it
        # reaches; the reduce is a kernel of its own either way
        return _reread(node, op, arg)
    srcs = tuple(_move(s, op, arg, memo) for s in node.src)
    return LazyNode(node.op, srcs, node.arg, srcs[0].shape, node.dtype, node.device)


def _splits_a_reduce(node: LazyNode, memo: dict) -> bool:
    """Whether pushing a pad through node's elementwise work would stop at a node that is not
    pad-safe with an unrealized reduce below: that node would be realized on its own, and the
    reduce computed twice, in its kernel and in the pad's (a convolution's x * sigmoid(x)
    before a padded depthwise convolution). Realizing node whole computes it once."""
    unsafe, reduce = _epilogue_of_reduce(node, memo)
    return unsafe and reduce


def _epilogue_of_reduce(node: LazyNode, memo: dict) -> tuple[bool, bool]:
    """(whether node's elementwise work holds an op that is not pad-safe, whether it reaches an
    unrealized reduce), through elementwise ops down to loads, constants and reduces. Kept in
    the move's memo (beside the moved nodes, under its own key), so that a move asks it of
    each node once rather than walking every node's subtree again."""
    key = ("epilogue", id(node))
    if key not in memo:
        if node.op == "load":
            memo[key] = (False, node.src[0].is_reduce and node.src[0].realized is None)
        elif node.realized is not None or node.op in ("const", "buffer", "gather"):
            memo[key] = (False, False)
        elif node.is_reduce:
            memo[key] = (False, True)
        else:
            parts = [_epilogue_of_reduce(s, memo) for s in node.src]
            memo[key] = (node.op not in PAD_SAFE or any(u for u, _ in parts),
                         any(r for _, r in parts))
    return memo[key]


def moved_shape(shape: tuple[int, ...], op: MovementOps, arg) -> tuple[int, ...]:
    view = move_view(View.contiguous(shape), op, arg)
    return view.shape
