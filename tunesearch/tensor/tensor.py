"""The torch-like Tensor: every operation is recorded lazily and built from the small op set.

    >>> from tunesearch import Tensor
    >>> x = Tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> (x @ x).relu().sum(axis=1).numpy()
    array([17., 37.], dtype=float32)

Errors (shape mismatches, bad axes, bad reshapes, unsupported dtypes) are raised at the call that
caused them, naming the op, the shapes and the problem.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from tunesearch import settings
from tunesearch.graph import lazy
from tunesearch.graph.dtypes import DType, dtypes, result_dtype
from tunesearch.graph.lazy import LazyNode
from tunesearch.graph.ops import BinaryOps, ReduceOps, UnaryOps
from tunesearch.graph.schedule import backing_node
from tunesearch.lowering.plan import Plan
from tunesearch.runtime.device import get_device
from tunesearch.runtime.lookup import TunedConfigs
from tunesearch.tensor._shapes import broadcast_shape as _broadcast_shape
from tunesearch.tensor._shapes import shape_arg as _shape_arg
from tunesearch.tensor._shapes import shape_error as _err
from tunesearch.tensor.lookups import default_lookup
from tunesearch.tensor.movement import MovementMixin
from tunesearch.tensor.nn import NNMixin
from tunesearch.tensor.unary import UnaryMixin


def _as_dtype(dtype) -> DType | None:
    if dtype is None or isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        return dtypes.by_name(dtype)
    return dtypes.from_numpy(dtype)


class Tensor(MovementMixin, UnaryMixin, NNMixin):
    __slots__ = ("node",)

    def __init__(self, data: Any, device: str | None = None, dtype=None):
        if isinstance(data, LazyNode):
            self.node = data
            return
        device = device or settings.default_device()
        if isinstance(data, Tensor):
            data = data.numpy()
        array = np.asarray(data)
        dt = _as_dtype(dtype) or dtypes.from_numpy(array.dtype if array.dtype != np.float64
                                                   else np.float32)
        array = np.ascontiguousarray(array, dt.np)
        buffer = get_device(device).from_numpy(array, dt)
        self.node = lazy.buffer_node(buffer, array.shape, dt, device)

    # ---- properties
    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.shape

    @property
    def dtype(self) -> DType:
        return self.node.dtype

    @property
    def device(self) -> str:
        return self.node.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<Tensor {self.shape} {self.dtype.name} on {self.device}>"

    # ---- creation
    @staticmethod
    def full(shape, value, dtype=None, device: str | None = None) -> "Tensor":
        shape = _shape_arg(shape)
        dt = _as_dtype(dtype) or (dtypes.float32 if isinstance(value, float) else
                                  dtypes.bool if isinstance(value, bool) else
                                  dtypes.int32 if isinstance(value, int) else dtypes.float32)
        return Tensor(lazy.const(value, shape, dt, device or settings.default_device()))

    @staticmethod
    def zeros(*shape, dtype=None, device=None) -> "Tensor":
        return Tensor.full(shape, 0.0, dtype, device)

    @staticmethod
    def ones(*shape, dtype=None, device=None) -> "Tensor":
        return Tensor.full(shape, 1.0, dtype, device)

    @staticmethod
    def arange(start, stop=None, step=1, dtype=None, device=None) -> "Tensor":
        if stop is None:
            start, stop = 0, start
        values = np.arange(start, stop, step)
        dt = _as_dtype(dtype) or (dtypes.int32 if values.dtype.kind in "iu" else dtypes.float32)
        return Tensor(values, device=device, dtype=dt)

    @staticmethod
    def rand(*shape, seed: int | None = None, device=None) -> "Tensor":
        rng = np.random.default_rng(seed)
        return Tensor(rng.random(_shape_arg(shape), dtype=np.float32), device=device)

    @staticmethod
    def randn(*shape, seed: int | None = None, device=None) -> "Tensor":
        rng = np.random.default_rng(seed)
        return Tensor(rng.standard_normal(_shape_arg(shape), dtype=np.float32), device=device)

    @staticmethod
    def placeholder(shape, dtype=None, device=None) -> "Tensor":
        """An input of a traced program or model: a buffer every call fills anew (zeros until
        then), never taken for a constant (see is_constant)."""
        dt = _as_dtype(dtype) or dtypes.float32
        device = device or settings.default_device()
        buffer = get_device(device).from_numpy(np.zeros(_shape_arg(shape), dt.np), dt)
        return Tensor(lazy.buffer_node(buffer, _shape_arg(shape), dt, device, fed=True))

    def is_constant(self) -> bool:
        """Whether this reads, whole and unchanged, data fixed before any call (a weight): a
        buffer made from an array, not a placeholder, so a plan may lay it out once."""
        base = backing_node(self.node)
        return base is not None and base.op == "buffer" and base.arg != "fed"

    def _const(self, value, dtype: DType | None = None) -> "Tensor":
        return Tensor(lazy.const(value, self.shape, dtype or self.dtype, self.device))

    # ---- realization
    def realize(self, lookup: TunedConfigs | None = None) -> "Tensor":
        """Run the kernels this tensor needs, with the tuned configs of `lookup` (default: the
        process's, `tunesearch.tensor.default_lookup()`)."""
        node = self.node
        backing = backing_node(node)
        if backing is not None and backing.realized is not None:
            return self
        Plan(get_device(self.device), {}, [self], [self.dtype.np], ["result"],
             lookup=default_lookup() if lookup is None else lookup, once=True,
             label="schedule").execute()
        if backing is None:
            self.node = lazy.load(node)
        return self

    def numpy(self, lookup: TunedConfigs | None = None) -> np.ndarray:
        """The values, realized first with the tuned configs of `lookup` (see `realize`)."""
        self.realize(lookup)
        base = backing_node(self.node)
        buffer = base.realized
        return get_device(buffer.device).copyout(buffer).reshape(self.shape)

    def item(self):
        return self.numpy().reshape(-1)[0].item()

    def tolist(self):
        return self.numpy().tolist()

    def to(self, device: str) -> "Tensor":
        return Tensor(self.numpy(), device=device)

    # ---- elementwise plumbing
    def _operand(self, other, op: str) -> tuple["Tensor", "Tensor"]:
        if not isinstance(other, Tensor):
            if isinstance(other, (np.ndarray, list, tuple)):
                other = Tensor(np.asarray(other), device=self.device)
            else:
                dt = self.dtype if not (isinstance(other, float) and not self.dtype.is_float) \
                    else dtypes.float32
                if isinstance(other, bool) and self.dtype is dtypes.bool:
                    dt = dtypes.bool
                other = Tensor(lazy.const(other, (), dt, self.device))
        if other.device != self.device:
            raise _err(op, [self.shape, other.shape],
                       f"tensors are on different devices ({self.device}, {other.device})")
        a, b = self, other
        dt = result_dtype(a.dtype, b.dtype)
        a, b = a.cast(dt), b.cast(dt)
        shape = _broadcast_shape(a.shape, b.shape, op)
        return a._broadcast_to(shape), b._broadcast_to(shape)

    def _broadcast_to(self, shape: tuple[int, ...]) -> "Tensor":
        if self.shape == shape:
            return self
        padded = (1,) * (len(shape) - self.ndim) + self.shape
        return self.reshape(padded).expand(shape)

    def _binary(self, op: BinaryOps, other, name: str) -> "Tensor":
        a, b = self._operand(other, name)
        return Tensor(lazy.elementwise(op, a.node, b.node))

    def _unary(self, op: UnaryOps) -> "Tensor":
        x = self if self.dtype.is_float or op is UnaryOps.NEG else self.float()
        return Tensor(lazy.elementwise(op, x.node))

    def cast(self, dtype) -> "Tensor":
        dt = _as_dtype(dtype)
        if dt == self.dtype:
            return self
        return Tensor(lazy.elementwise(UnaryOps.CAST, self.node, arg=dt))

    def float(self) -> "Tensor":
        return self.cast(dtypes.float32)

    def int(self) -> "Tensor":
        return self.cast(dtypes.int32)

    # ---- the op set, and arithmetic built on it
    def __add__(self, other): return self._binary(BinaryOps.ADD, other, "add")
    def __radd__(self, other): return self.__add__(other)
    def __mul__(self, other): return self._binary(BinaryOps.MUL, other, "mul")
    def __rmul__(self, other): return self.__mul__(other)
    def __neg__(self): return self._unary(UnaryOps.NEG)
    def __sub__(self, other): a, b = self._operand(other, "sub"); return a + (-b)
    def __rsub__(self, other): return (-self) + other

    def __truediv__(self, other):
        a, b = self._operand(other, "div")
        if not a.dtype.is_float:
            a, b = a.float(), b.float()
        return a * b.reciprocal()

    def __rtruediv__(self, other):
        a, b = self._operand(other, "div")
        return b / a

    def __floordiv__(self, other):
        a, b = self._operand(other, "floordiv")
        if a.dtype.is_float:
            return (a / b).floor()
        q = Tensor(lazy.elementwise(BinaryOps.IDIV, a.node, b.node))
        # C truncates; Python floors: step down where the signs differ and it was inexact
        fix = ((a - q * b).ne(0)) & ((a < 0).ne(b < 0))
        return q - fix.int()

    def __mod__(self, other):
        a, b = self._operand(other, "mod")
        if a.dtype.is_float:
            return a - (a / b).floor() * b
        return a - (a // b) * b

    def __pow__(self, exponent):
        if isinstance(exponent, (int, float)) and float(exponent).is_integer() and \
                abs(exponent) <= 8:
            n = int(abs(exponent))
            out = self._const(1.0 if self.dtype.is_float else 1)
            base = self
            while n:
                if n & 1:
                    out = out * base
                base, n = base * base, n >> 1
            return out.reciprocal() if exponent < 0 else out
        if isinstance(exponent, (int, float)) and float(4 * exponent).is_integer() and \
                abs(exponent) <= 8 and self.dtype.is_float:
            # quarters by square roots: exact where exp2(log2) is not, and cheaper; NaN below 0
            whole, frac = divmod(abs(exponent), 1)
            root = self.sqrt()
            out = self ** int(whole) if whole else None
            for part in ([root] if frac >= 0.5 else []) + \
                    ([root.sqrt()] if frac in (0.25, 0.75) else []):
                out = part if out is None else out * part
            return out.reciprocal() if exponent < 0 else out
        a, b = self._operand(exponent, "pow")
        a, b = a.float(), b.float()
        magnitude = (b * a.abs().log2()).exp2()
        # a negative base with an odd integer exponent is negative
        odd = ((b.abs() % 2) - 1).abs() < 1e-6
        return (a < 0).where(odd.where(-magnitude, magnitude), magnitude)

    def __rpow__(self, base):
        return self._const(base, dtypes.float32) ** self

    def __matmul__(self, other): return self.matmul(other)
    def __rmatmul__(self, other): return Tensor(np.asarray(other), self.device).matmul(self)
    def __lt__(self, other): return self._binary(BinaryOps.CMPLT, other, "lt")
    def __gt__(self, other): a, b = self._operand(other, "gt"); return b < a
    def __le__(self, other): return (self > other).logical_not()
    def __ge__(self, other): return (self < other).logical_not()
    def eq(self, other): return self._binary(BinaryOps.CMPEQ, other, "eq")
    def ne(self, other): return self.eq(other).logical_not()
    def __and__(self, other): return self._binary(BinaryOps.MUL, other, "and")
    def __or__(self, other): return self._binary(BinaryOps.ADD, other, "or")
    def logical_not(self): return Tensor(lazy.elementwise(UnaryOps.NEG, self.cast(dtypes.bool).node))
    def maximum(self, other): return self._binary(BinaryOps.MAX, other, "maximum")
    def minimum(self, other): return -((-self).maximum(-other))

    def where(self, a, b) -> "Tensor":
        """self ? a : b, broadcast together."""
        cond = self.cast(dtypes.bool)
        if not isinstance(a, Tensor):
            a = (b if isinstance(b, Tensor) else cond)._scalar_like(a)
        x, y = a._operand(b, "where")
        shape = _broadcast_shape(cond.shape, x.shape, "where")
        cond, x, y = cond._broadcast_to(shape), x._broadcast_to(shape), y._broadcast_to(shape)
        return Tensor(lazy.elementwise(BinaryOps.WHERE, cond.node, x.node, y.node))

    def _scalar_like(self, value) -> "Tensor":
        dt = dtypes.float32 if isinstance(value, float) or self.dtype is dtypes.bool \
            else self.dtype
        return Tensor(lazy.const(value, (), dt, self.device))

    # ---- reduce
    def _axes(self, axis, op: str) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        out = []
        for a in axes:
            if not -self.ndim <= a < max(self.ndim, 1):
                raise _err(op, [self.shape], f"axis {a} is out of range for {self.ndim} dims")
            out.append(a % max(self.ndim, 1))
        if len(set(out)) != len(out):
            raise _err(op, [self.shape], f"repeated axis in {axes}")
        return tuple(sorted(out))

    def _reduce(self, op: ReduceOps, axis, keepdim: bool, name: str) -> "Tensor":
        axes = self._axes(axis, name)
        x = self if self.dtype is not dtypes.bool else self.int()
        out = Tensor(lazy.reduce(op, x.node, axes)) if axes else x
        if keepdim:
            return out
        return out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self, axis=None, keepdim: bool = False):
        return self._reduce(ReduceOps.SUM, axis, keepdim, "sum")

    def max(self, axis=None, keepdim: bool = False):
        return self._reduce(ReduceOps.MAX, axis, keepdim, "max")

    def min(self, axis=None, keepdim: bool = False):
        x = self.int() if self.dtype is dtypes.bool else self  # -bool is logical not
        return -((-x).max(axis, keepdim))

    def mean(self, axis=None, keepdim: bool = False):
        axes = self._axes(axis, "mean")
        count = math.prod(self.shape[a] for a in axes) or 1
        return self.float().sum(axis, keepdim) * (1.0 / count)

    def var(self, axis=None, keepdim: bool = False, correction: int = 1):
        axes = self._axes(axis, "var")
        count = math.prod(self.shape[a] for a in axes)
        diff = self - self.mean(axes, keepdim=True)
        return (diff * diff).sum(axes, keepdim) * (1.0 / max(count - correction, 1))

    def std(self, axis=None, keepdim: bool = False, correction: int = 1):
        return self.var(axis, keepdim, correction).sqrt()

    def argmax(self, axis: int = -1, keepdim: bool = False):
        axis = self._axes(axis, "argmax")[0]
        n = self.shape[axis]
        idx = Tensor.arange(n, 0, -1, device=self.device).reshape(
            [n if i == axis else 1 for i in range(self.ndim)])
        hit = self.eq(self.max(axis, keepdim=True))
        return (n - (hit * idx).max(axis, keepdim)).cast(dtypes.int32)

    def matmul(self, other: "Tensor") -> "Tensor":
        """Batched matmul with broadcasting, as one multiply-and-sum kernel."""
        if not isinstance(other, Tensor):
            other = Tensor(np.asarray(other, np.float32), self.device)
        a, b = self, other
        if a.ndim == 0 or b.ndim == 0:
            raise _err("matmul", [a.shape, b.shape], "both operands need at least 1 dim")
        a2 = a.reshape(1, a.shape[0]) if a.ndim == 1 else a
        b2 = b.reshape(b.shape[0], 1) if b.ndim == 1 else b
        if a2.shape[-1] != b2.shape[-2]:
            raise _err("matmul", [a.shape, b.shape],
                       f"inner dims differ: {a2.shape[-1]} != {b2.shape[-2]}")
        batch = _broadcast_shape(a2.shape[:-2], b2.shape[:-2], "matmul")
        m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
        x = a2.reshape(a2.shape[:-1] + (1, k))._broadcast_to(batch + (m, n, k))
        y = b2.transpose(-1, -2).reshape(b2.shape[:-2] + (1, n, k))._broadcast_to(
            batch + (m, n, k))
        x, y = x._operand(y, "matmul")
        out = (x * y).sum(-1)
        if a.ndim == 1:
            out = out.squeeze(-2)
        if b.ndim == 1:
            out = out.squeeze(-1)
        return out

    dot = matmul
