"""Movement ops on Tensor: they never copy, they only change the view a later kernel reads through
(reshape, permute, expand, pad, shrink, flip, what is built from them, indexing), and joining
(cat, stack, split)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

from tunesearch.graph import lazy
from tunesearch.graph.dtypes import dtypes
from tunesearch.graph.fusion import fused_reduce
from tunesearch.graph.ops import MovementOps
from tunesearch.graph.schedule import backing_node, stored_order
from tunesearch.graph.view import View
from tunesearch.lowering.windows import reaches_padding, window_pads
from tunesearch.tensor._shapes import shape_arg as _shape_arg
from tunesearch.tensor._shapes import shape_error as _err
from tunesearch.tensor.index import gather, getitem, take

if TYPE_CHECKING:
    from tunesearch.tensor.tensor import Tensor


class MovementMixin:
    __slots__ = ()

    def reshape(self, *shape) -> "Tensor":
        shape = _shape_arg(shape)
        if shape.count(-1) > 1:
            raise _err("reshape", [self.shape], f"only one -1 is allowed in {shape}")
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            if known == 0 or self.numel() % known:
                raise _err("reshape", [self.shape], f"cannot infer -1 in {shape}")
            shape = tuple(self.numel() // known if s == -1 else s for s in shape)
        if any(s < 0 for s in shape) or math.prod(shape) != self.numel():
            raise _err("reshape", [self.shape], f"cannot reshape {self.numel()} elements to "
                       f"{shape}")
        if shape == self.shape:
            return self
        return type(self)(lazy.movement(self.node, MovementOps.RESHAPE, shape))

    def view(self, *shape): return self.reshape(*shape)

    def permute(self, *order) -> "Tensor":
        order = _shape_arg(order)
        order = tuple(o % max(self.ndim, 1) for o in order)
        if sorted(order) != list(range(self.ndim)):
            raise _err("permute", [self.shape], f"{order} is not a permutation of {self.ndim} dims")
        if order == tuple(range(self.ndim)):
            return self
        return type(self)(lazy.movement(self.node, MovementOps.PERMUTE, order))

    def transpose(self, dim0: int = -2, dim1: int = -1) -> "Tensor":
        order = list(range(self.ndim))
        order[dim0], order[dim1] = order[dim1], order[dim0]
        return self.permute(order)

    @property
    def T(self) -> "Tensor":
        return self.permute(tuple(reversed(range(self.ndim))))

    def expand(self, *shape) -> "Tensor":
        shape = _shape_arg(shape)
        if len(shape) < self.ndim:
            raise _err("expand", [self.shape], f"cannot expand to fewer dims {shape}")
        x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape) \
            if len(shape) > self.ndim else self
        shape = tuple(s if t == -1 else t for s, t in zip(x.shape, shape))
        for s, t in zip(x.shape, shape):
            if s != t and s != 1:
                raise _err("expand", [self.shape], f"cannot expand to {shape}: a dim of size "
                           f"{s} can only stay {s}")
        if shape == x.shape:
            return x
        return type(self)(lazy.movement(x.node, MovementOps.EXPAND, shape))

    def pad(self, padding: Sequence[tuple[int, int]], value: float = 0.0) -> "Tensor":
        """Pad each axis by (before, after); negative amounts shrink."""
        padding = [tuple(p) for p in padding]
        if len(padding) != self.ndim or any(len(p) != 2 for p in padding):
            raise _err("pad", [self.shape], f"need one (before, after) per dim, got {padding}")
        shrink = [(max(0, -b), s - max(0, -a)) for (b, a), s in zip(padding, self.shape)]
        x = self.shrink(shrink) if any(p < 0 for pair in padding for p in pair) else self
        grow = tuple((max(0, b), max(0, a)) for b, a in padding)
        if all(p == (0, 0) for p in grow):
            return x
        out = type(self)(lazy.movement(x.node, MovementOps.PAD, grow))
        if value != 0:
            inside = type(self)(lazy.movement(x._const(True, dtypes.bool).node, MovementOps.PAD,
                                              grow))
            out = inside.where(out, out._scalar_like(value))
        return out

    def shrink(self, arg: Sequence[tuple[int, int]]) -> "Tensor":
        arg = tuple((int(lo), int(hi)) for lo, hi in arg)
        if len(arg) != self.ndim or any(not 0 <= lo <= hi <= s for (lo, hi), s in
                                        zip(arg, self.shape)):
            raise _err("shrink", [self.shape], f"bad ranges {arg}")
        if all(lo == 0 and hi == s for (lo, hi), s in zip(arg, self.shape)):
            return self
        return type(self)(lazy.movement(self.node, MovementOps.SHRINK, arg))

    def flip(self, axis) -> "Tensor":
        axes = self._axes(axis, "flip")
        return type(self)(lazy.movement(self.node, MovementOps.FLIP, axes)) if axes else self

    def squeeze(self, axis=None) -> "Tensor":
        if axis is None:
            return self.reshape([s for s in self.shape if s != 1])
        axes = self._axes(axis, "squeeze")
        for a in axes:
            if self.shape[a] != 1:
                raise _err("squeeze", [self.shape], f"axis {a} has size {self.shape[a]}, not 1")
        return self.reshape([s for i, s in enumerate(self.shape) if i not in axes])

    def unsqueeze(self, axis: int) -> "Tensor":
        axis = axis % (self.ndim + 1)
        return self.reshape(self.shape[:axis] + (1,) + self.shape[axis:])

    def flatten(self, start: int = 0, end: int = -1) -> "Tensor":
        if self.ndim == 0:
            return self.reshape(1)
        start, end = start % self.ndim, end % self.ndim
        return self.reshape(self.shape[:start] + (-1,) + self.shape[end + 1:])

    def contiguous(self) -> "Tensor":
        return self.realize()

    def materialize(self, order: Sequence[int] | None = None) -> "Tensor":
        """This value, written to a buffer of its own when it is computed (lazily, unlike
        realize): the kernels that read it (a matmul, windows) read that buffer instead of
        recomputing the value for each of their reads. With order (a permutation of the
        axes), the buffer lays the axes out in that order and the result reads it back
        through the inverse permutation: a value computed from a reduce whose axes lie in
        another order (a convolution's output channels last) is written as it is computed."""
        if self.node.op in ("load", "const", "buffer"):
            return self
        if order is not None and tuple(order) != tuple(range(self.ndim)):
            stored = self.permute(order).materialize()
            return stored.permute([list(order).index(i) for i in range(self.ndim)])
        return type(self)(lazy.load(self.node))

    def stored_order(self) -> tuple[int, ...] | None:
        """The order in which this value's axes lie in the buffer it reads whole, or in the
        reduce its kernel fuses (graph.schedule.stored_order); None where no read covers it."""
        return stored_order(self.node)

    def ends_in_reduce(self) -> bool:
        """Whether this is a reduce, or elementwise work on one, not yet written anywhere: a
        kernel that reads it would fuse that reduce inside its own."""
        return fused_reduce(self.node) is not None

    def windows(self, kernel: Sequence[int], strides: Sequence[int],
                dilations: Sequence[int], pads: Sequence[tuple[int, int]],
                outs: Sequence[int], value: float = 0.0) -> "Tensor":
        """The sliding windows over the last len(kernel) axes (as torch's unfold, every axis
        at once): shape (..., outs..., kernel...), where window (o, j) of an axis reads element
        o * stride + j * dilation of the input padded by pads with value.

        The padded input is written to a buffer of its own (unless it is one already) and read
        back through one strided view: no copy of the windows themselves. Where the windows
        only leave out the input's last elements (a stride-2 1x1 convolution over an even
        map), nothing is copied: the view reads the input's own buffer.

            >>> x = Tensor(np.arange(5.0))
            >>> x.windows([3], [1], [1], [(1, 1)], [5]).shape
            (5, 3)
        """
        n = len(kernel)
        pad = [(0, 0)] * (self.ndim - n) + window_pads(self.shape[-n:], kernel, strides,
                                                       dilations, pads, outs)
        # a pad that only shrinks: the windows lie inside the input as it is
        padded = self.pad(pad, value) if reaches_padding(pad) else self
        shape = padded.shape
        step = [math.prod(shape[i + 1:]) for i in range(len(shape))]
        return padded.as_strided(list(shape[:-n]) + list(outs) + list(kernel),
                                 step[:-n] + [s * st for s, st in zip(strides, step[-n:])] +
                                 [d * st for d, st in zip(dilations, step[-n:])])

    def as_strided(self, shape: Sequence[int], strides: Sequence[int]) -> "Tensor":
        """A view of this value laid out contiguously (row-major, as its shape says): element
        i of the result is element sum(i * strides) of that layout, as numpy's as_strided
        reads. The value is read from its own buffer where it is one unchanged, else written to
        a buffer of its own first (one copy); the view itself copies nothing.

            >>> Tensor(np.arange(6.0)).as_strided([2, 3], [2, 1]).numpy()
            array([[0., 1., 2.],
                   [2., 3., 4.]], dtype=float32)
        """
        if len(shape) != len(strides) or any(st < 0 for st in strides):
            raise _err("as_strided", [self.shape], f"need one stride of 0 or more per axis, "
                       f"got shape {list(shape)} and strides {list(strides)}")
        last = sum((s - 1) * st for s, st in zip(shape, strides))
        if math.prod(shape) and last >= self.numel():
            raise _err("as_strided", [self.shape], f"shape {list(shape)} with strides "
                       f"{list(strides)} reads outside its {self.numel()} elements")
        backing = backing_node(self.node) or self.node
        return type(self)(lazy.load(backing, View.make(list(shape), list(strides))))

    def __getitem__(self, index) -> "Tensor":
        return getitem(self, index)

    def take(self, index, axis: int = 0) -> "Tensor":
        """numpy's take: the slices along axis at computed positions (an embedding's rows);
        see tensor.index.take."""
        return take(self, index, axis)

    def gather(self, dim: int, index) -> "Tensor":
        """torch's gather: each element at a computed position along dim; see
        tensor.index.gather."""
        return gather(self, dim, index)

    # ---- joining
    @staticmethod
    def cat(tensors: Sequence["Tensor"], dim: int = 0) -> "Tensor":
        first = tensors[0]
        dim = dim % first.ndim
        for t in tensors[1:]:
            if t.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(
                    zip(t.shape, first.shape)) if i != dim):
                raise _err("cat", [x.shape for x in tensors], f"shapes differ off dim {dim}")
        total = sum(t.shape[dim] for t in tensors)
        out, offset = None, 0
        for t in tensors:
            pad = [(0, 0)] * t.ndim
            pad[dim] = (offset, total - offset - t.shape[dim])
            piece = t.pad(pad)
            out = piece if out is None else out + piece
            offset += t.shape[dim]
        return out

    @staticmethod
    def stack(tensors: Sequence["Tensor"], dim: int = 0) -> "Tensor":
        dim = dim % (tensors[0].ndim + 1)
        return type(tensors[0]).cat([t.unsqueeze(dim) for t in tensors], dim)

    def split(self, sizes, dim: int = 0) -> list["Tensor"]:
        dim = dim % self.ndim
        if isinstance(sizes, int):
            sizes = [sizes] * (self.shape[dim] // sizes) + \
                ([self.shape[dim] % sizes] if self.shape[dim] % sizes else [])
        if sum(sizes) != self.shape[dim]:
            raise _err("split", [self.shape], f"sizes {list(sizes)} do not add up to "
                       f"{self.shape[dim]}")
        out, start = [], 0
        for size in sizes:
            arg = [(0, s) for s in self.shape]
            arg[dim] = (start, start + size)
            out.append(self.shrink(arg))
            start += size
        return out
