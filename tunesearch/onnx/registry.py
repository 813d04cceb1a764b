"""ONNX operators as Tensor calls: the registry, the node context, and the elementwise, reduce,
softmax and matrix operators. Shapes and data movement are in shape.py; convolutions,
pooling, normalizations and resizing in nn.py.

Every operator is a function `fn(ctx, *inputs)` registered by name; an input is a numpy array (a
value known at import: an initializer, a constant, or the result of folding) or a Tensor (a value
that depends on the model's inputs). When every input of a node is known at import, the node is
folded: by its numpy `host` function where it has one (the shape arithmetic of exported models:
Shape -> Gather -> Concat -> Reshape), otherwise by running its Tensor function once.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tunesearch.errors import UserError
from tunesearch.graph import lazy
from tunesearch.graph.dtypes import DType, dtypes
from tunesearch.graph.schedule import fused_reduce
from tunesearch.tensor import Tensor


class OnnxImportError(UserError):
    """A model that tunesearch cannot import; the message is one line that says why."""


class ModelNotFoundError(OnnxImportError):
    """The model file does not exist."""


class NotOnnxError(OnnxImportError):
    """The file or bytes are not an ONNX model."""


class UnsupportedOperatorError(OnnxImportError):
    """Operators (or operator settings) that the importer does not implement; all are listed."""


class UnboundDimensionError(OnnxImportError):
    """An input has a dynamic dimension and no shape was given for it."""


class UnsupportedTypeError(OnnxImportError):
    """An input or output whose type tunesearch does not compute with (strings, float8, ...)."""


@dataclass(frozen=True)
class OpDef:
    fn: Callable[..., Any]
    host: Optional[Callable[..., Any]] = None   # numpy version, for folding known values
    check: Optional[Callable[["NodeContext"], Optional[str]]] = None  # settings it cannot take
    known_inputs: tuple[int, ...] = ()  # inputs that must be known at import (shapes, axes)
    movement: bool = False  # moves or selects data: a computed input is realized first if it
    #                         ends in a reduce, so the work after the reduce stays in its kernel


OPS: dict[str, OpDef] = {}


def register(*names: str, host=None, check=None, known: tuple[int, ...] = (),
             movement: bool = False):
    """Register the decorated function as the Tensor implementation of the named operators."""
    def wrap(fn):
        for name in names:
            OPS[name] = OpDef(fn, host, check, known, movement)
        return fn
    return wrap


# ---- dtypes: tunesearch computes in float32, int32 and bool; other ONNX types map onto them

def internal_dtype(np_dtype) -> DType:
    """The dtype tunesearch computes an ONNX element type in (TypeError where there is none)."""
    if np_dtype is None:
        raise TypeError("unsupported element type")
    kind = np.dtype(np_dtype).kind
    if kind == "b":
        return dtypes.bool
    if kind in "iu":
        return dtypes.int32
    if kind == "f":
        return dtypes.float32
    raise TypeError(f"unsupported element type {np.dtype(np_dtype)}")


def onnx_np_dtype(elem_type: int):
    """The numpy dtype of an ONNX element type (None where numpy has none)."""
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        return None


class NodeContext:
    """One ONNX node as its operator function sees it: attributes, opset, device, helpers."""

    def __init__(self, node: onnx.NodeProto, opset: int, device: str):
        self.node, self.op, self.opset, self.device = node, node.op_type, opset, device
        self.name = node.name or (node.output[0] if node.output else "?")
        self.attrs = {a.name: _attr_value(a) for a in node.attribute}
        self.n_outputs = sum(1 for o in node.output if o)

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)

    def error(self, problem: str) -> OnnxImportError:
        return OnnxImportError(f"{self.op} node '{self.name}': {problem}")

    def unsupported(self, what: str) -> UnsupportedOperatorError:
        return UnsupportedOperatorError(f"unsupported operators: {what} (node '{self.name}')")

    def host(self, value, what: str) -> np.ndarray:
        """A value that must be known at import (a shape, axes, pads)."""
        if isinstance(value, Tensor):
            raise self.error(f"input '{what}' must be known at import (an initializer or a "
                             "constant expression), not computed from the model's inputs")
        return value

    def ints(self, value, what: str) -> list[int]:
        return [int(v) for v in np.asarray(self.host(value, what)).reshape(-1)]

    def tensor(self, value) -> Tensor:
        """A Tensor for a value; a known scalar becomes an inline constant, not a buffer."""
        if isinstance(value, Tensor):
            return value
        array = np.asarray(value)
        dtype = internal_dtype(array.dtype)
        if array.size == 1:
            return Tensor.full(array.shape, array.reshape(-1)[0].item(), dtype, self.device)
        return Tensor(array.astype(dtype.np), device=self.device, dtype=dtype)


def _attr_value(attr: onnx.AttributeProto):
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return value


def materialize(t: Tensor) -> Tensor:
    """Mark a computed value to be written to its own buffer when the model runs (lazily, unlike
    Tensor.realize): matmuls and windows then read it instead of recomputing it per use."""
    if t.node.op in ("load", "const", "buffer"):
        return t
    return Tensor(lazy.load(t.node))


def ends_in_reduce(t: Tensor) -> bool:
    """Whether t is a reduce, or elementwise work on one, that is not yet written anywhere."""
    return fused_reduce(t.node) is not None


def axis_of(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def node_axes(ctx, given, ndim: int, what: str = "axes") -> Optional[list[int]]:
    """Axes from the attribute (older opsets) or the input (newer), made non-negative."""
    axes = ctx.attr("axes") if given is None else ctx.ints(given, what)
    return None if axes is None else [axis_of(a, ndim) for a in axes]


# ---- elementwise

def _unary(*names: str, fn, host=None):
    register(*names, host=host)(lambda ctx, x: fn(ctx, ctx.tensor(x)))


_unary("Relu", fn=lambda ctx, x: x.relu())
_unary("Neg", fn=lambda ctx, x: -x, host=lambda ctx, x: -x)
_unary("Abs", fn=lambda ctx, x: x.abs(), host=lambda ctx, x: np.abs(x))
_unary("Sqrt", fn=lambda ctx, x: x.sqrt())
_unary("Exp", fn=lambda ctx, x: x.exp())
_unary("Log", fn=lambda ctx, x: x.log())
_unary("Reciprocal", fn=lambda ctx, x: x.reciprocal())
_unary("Sigmoid", fn=lambda ctx, x: x.sigmoid())
_unary("Tanh", fn=lambda ctx, x: x.tanh())
_unary("Erf", fn=lambda ctx, x: x.erf())
_unary("Floor", fn=lambda ctx, x: x.floor(), host=lambda ctx, x: np.floor(x))
_unary("Ceil", fn=lambda ctx, x: x.ceil(), host=lambda ctx, x: np.ceil(x))
_unary("Sin", fn=lambda ctx, x: x.sin())
_unary("Cos", fn=lambda ctx, x: x.cos())
_unary("Not", fn=lambda ctx, x: x.logical_not(), host=lambda ctx, x: np.logical_not(x))
_unary("Identity", fn=lambda ctx, x: x, host=lambda ctx, x: x)
_unary("LeakyRelu", fn=lambda ctx, x: x.leaky_relu(ctx.attr("alpha", 0.01)))
_unary("Gelu", fn=lambda ctx, x: x.gelu(ctx.attr("approximate", "none")))
_unary("Softplus", fn=lambda ctx, x: (x.exp() + 1.0).log())
_unary("Elu", fn=lambda ctx, x: (x < 0).where((x.exp() - 1.0) * ctx.attr("alpha", 1.0), x))
_unary("HardSigmoid", fn=lambda ctx, x: (x * ctx.attr("alpha", 0.2) + ctx.attr("beta", 0.5))
       .clip(0.0, 1.0))
_unary("HardSwish", fn=lambda ctx, x: x * (x * (1 / 6) + 0.5).clip(0.0, 1.0))


def _int_div(a: Tensor, b: Tensor) -> Tensor:
    """ONNX integer division truncates toward zero; Tensor's // floors."""
    q = a // b
    inexact = (a - q * b).ne(0)
    return q + (inexact & (a < 0).ne(b < 0)).int()


def _div(a: Tensor, b: Tensor) -> Tensor:
    if a.dtype.is_float or b.dtype.is_float:
        return a / b
    return _int_div(a, b)


def _host_div(a, b):
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return (np.trunc(a / b)).astype(np.result_type(a, b))
    return np.asarray(a / b, np.result_type(a, b))


def _pow(ctx, a: Tensor, b) -> Tensor:
    if isinstance(b, np.ndarray) and b.size == 1:  # a known exponent: the fast integer paths
        exponent = b.reshape(-1)[0].item()
        out = a ** (float(exponent) if a.dtype.is_float else exponent)
    else:
        out = a ** ctx.tensor(b)
    return out.cast(a.dtype)


def _binary(name: str, fn, host):
    def run(ctx, a, b):
        return fn(ctx.tensor(a), ctx.tensor(b))
    register(name, host=(lambda ctx, a, b: host(a, b)) if host else None)(run)


_binary("Add", lambda a, b: a + b, np.add)
_binary("Sub", lambda a, b: a - b, np.subtract)
_binary("Mul", lambda a, b: a * b, np.multiply)
_binary("Div", _div, _host_div)
_binary("Equal", lambda a, b: a.eq(b), np.equal)
_binary("Less", lambda a, b: a < b, np.less)
_binary("Greater", lambda a, b: a > b, np.greater)
_binary("LessOrEqual", lambda a, b: a <= b, np.less_equal)
_binary("GreaterOrEqual", lambda a, b: a >= b, np.greater_equal)
_binary("And", lambda a, b: a.cast(dtypes.bool) & b.cast(dtypes.bool), np.logical_and)
_binary("Or", lambda a, b: a.cast(dtypes.bool) | b.cast(dtypes.bool), np.logical_or)
_binary("Xor", lambda a, b: a.cast(dtypes.bool).ne(b.cast(dtypes.bool)), np.logical_xor)


@register("Pow")
def pow_(ctx, a, b):
    return _pow(ctx, ctx.tensor(a), b)


def _variadic(name: str, fn, host):
    def run(ctx, *xs):
        return functools.reduce(fn, [ctx.tensor(x) for x in xs if x is not None])
    register(name, host=lambda ctx, *xs: functools.reduce(host, xs))(run)


_variadic("Sum", lambda a, b: a + b, np.add)
_variadic("Max", lambda a, b: a.maximum(b), np.maximum)
_variadic("Min", lambda a, b: a.minimum(b), np.minimum)


@register("Mean")
def mean_(ctx, *xs):
    return functools.reduce(lambda a, b: a + b, [ctx.tensor(x) for x in xs]) * (1.0 / len(xs))


@register("Where", host=lambda ctx, c, a, b: np.where(c, a, b))
def where(ctx, cond, a, b):
    return ctx.tensor(cond).where(ctx.tensor(a), ctx.tensor(b))


@register("Clip")
def clip(ctx, x, lo=None, hi=None):
    x = ctx.tensor(x)
    if ctx.opset < 11:
        lo, hi = ctx.attr("min"), ctx.attr("max")
    if lo is not None:
        x = x.maximum(ctx.tensor(np.asarray(lo, x.dtype.np) if not isinstance(lo, Tensor) else lo))
    if hi is not None:
        x = x.minimum(ctx.tensor(np.asarray(hi, x.dtype.np) if not isinstance(hi, Tensor) else hi))
    return x


def _cast_to(ctx) -> Any:
    return onnx_np_dtype(ctx.attr("to"))


def producible(np_dtype) -> bool:
    """Whether values can be handed out in this type: not the 8-bit float formats, whose
    rounding and saturation rules tunesearch does not implement."""
    try:
        internal_dtype(np_dtype)
    except TypeError:
        return False
    return not (np_dtype.kind == "f" and np_dtype.itemsize < 2)


def _check_cast(ctx) -> Optional[str]:
    if not producible(onnx_np_dtype(ctx.attr("to", 1))):
        return f"cast to {helper.tensor_dtype_to_string(ctx.attr('to', 0)).split('.')[-1]}"
    return None


@register("Cast", host=lambda ctx, x: x.astype(_cast_to(ctx)), check=_check_cast)
def cast(ctx, x):
    return ctx.tensor(x).cast(internal_dtype(_cast_to(ctx)))


@register("CastLike", host=lambda ctx, x, like: x.astype(like.dtype) if not isinstance(
    like, Tensor) else x.astype(like.dtype.np))
def cast_like(ctx, x, like):
    dtype = like.dtype if isinstance(like, Tensor) else internal_dtype(like.dtype)
    return ctx.tensor(x).cast(dtype)


# ---- reduce

def _reduce_axes(ctx, x, axes_input) -> Optional[tuple[int, ...]]:
    takes_input = ctx.opset >= (13 if ctx.op == "ReduceSum" else 18)
    axes = node_axes(ctx, axes_input if takes_input else None, len(x.shape))
    if not axes:
        return () if ctx.attr("noop_with_empty_axes", 0) else tuple(range(len(x.shape)))
    return tuple(sorted(axes))


def _reducer(name: str, fn, host):
    def run(ctx, x, axes=None):
        x = ctx.tensor(x)
        dims = _reduce_axes(ctx, x, axes)
        if not dims:
            return x
        out = fn(x, dims, bool(ctx.attr("keepdims", 1)))
        return out.cast(x.dtype)

    def run_host(ctx, x, axes=None):
        dims = _reduce_axes(ctx, x, axes)
        if not dims:
            return x
        return host(x, axis=dims, keepdims=bool(ctx.attr("keepdims", 1))).astype(x.dtype)
    register(name, host=run_host, known=(1,))(run)


_reducer("ReduceSum", lambda x, d, k: x.sum(d, k), np.sum)
_reducer("ReduceMean", lambda x, d, k: x.mean(d, k), np.mean)
_reducer("ReduceMax", lambda x, d, k: x.max(d, k), np.max)
_reducer("ReduceMin", lambda x, d, k: x.min(d, k), np.min)
_reducer("ReduceSumSquare", lambda x, d, k: (x * x).sum(d, k), lambda x, **kw: np.sum(x * x, **kw))
_reducer("ReduceL1", lambda x, d, k: x.abs().sum(d, k), lambda x, **kw: np.sum(np.abs(x), **kw))
_reducer("ReduceL2", lambda x, d, k: (x * x).sum(d, k).sqrt(),
         lambda x, **kw: np.sqrt(np.sum(x * x, **kw)))
_reducer("ReduceLogSumExp", lambda x, d, k: _logsumexp(x, d, k),
         lambda x, **kw: np.log(np.sum(np.exp(x), **kw)))


def _logsumexp(x: Tensor, dims, keepdim: bool) -> Tensor:
    top = x.max(dims, keepdim=True)
    out = (x - top).exp().sum(dims, keepdim=True).log() + top
    return out if keepdim else out.squeeze(dims)


def _arg_reduce(largest: bool):
    def run(ctx, x):
        x = ctx.tensor(x)
        axis = axis_of(ctx.attr("axis", 0), x.ndim)
        keep = bool(ctx.attr("keepdims", 1))
        n = x.shape[axis]
        v = x if largest else -x
        hit = v.eq(v.max(axis, keepdim=True))
        shape = [n if i == axis else 1 for i in range(x.ndim)]
        if ctx.attr("select_last_index", 0):
            pos = Tensor.arange(n, device=x.device).reshape(shape)
            return (hit.where(pos, -1)).max(axis, keep)
        rev = Tensor.arange(n, 0, -1, device=x.device).reshape(shape)
        return n - hit.where(rev, 0).max(axis, keep)
    return run


register("ArgMax")(_arg_reduce(True))
register("ArgMin")(_arg_reduce(False))


# ---- softmax family and matrix products

def _softmax(log: bool):
    def run(ctx, x):
        x = materialize(ctx.tensor(x))
        if ctx.opset < 13:  # older opsets flatten to 2-D around the axis
            axis = axis_of(ctx.attr("axis", 1), x.ndim)
            flat = x.reshape(math.prod(x.shape[:axis]), -1)
            out = flat.log_softmax(1) if log else flat.softmax(1)
            return out.reshape(x.shape)
        axis = ctx.attr("axis", -1)
        return x.log_softmax(axis) if log else x.softmax(axis)
    return run


register("Softmax")(_softmax(False))
register("LogSoftmax")(_softmax(True))


@register("MatMul")
def matmul(ctx, a, b):
    return materialize(ctx.tensor(a)).matmul(materialize(ctx.tensor(b)))


@register("Gemm")
def gemm(ctx, a, b, c=None):
    a, b = materialize(ctx.tensor(a)), materialize(ctx.tensor(b))
    if ctx.attr("transA", 0):
        a = a.T
    if ctx.attr("transB", 0):
        b = b.T
    out = a.matmul(b)
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    if alpha != 1.0:
        out = out * alpha
    if c is not None and beta != 0.0:
        c = ctx.tensor(c)
        out = out + (c * beta if beta != 1.0 else c)
    return out


@register("Dropout", known=(1, 2))
def dropout(ctx, x, ratio=None, training_mode=None):
    if training_mode is not None and bool(np.asarray(ctx.host(training_mode, "training_mode"))):
        raise ctx.unsupported("Dropout in training mode")
    if ctx.n_outputs > 1:
        return x, Tensor.full(x.shape, True, dtypes.bool, ctx.device)
    return x
