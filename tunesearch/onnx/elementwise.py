"""Elementwise ONNX operators: unary math, binary arithmetic (Mod too) and comparisons, IsNaN and
IsInf, variadic Sum/Max/Min/Mean, Where, Clip, Cast and CastLike, and Dropout (inference: the
identity)."""
from __future__ import annotations

import functools
import math
from typing import Any, Optional

import numpy as np
from onnx import helper

from tunesearch.graph.dtypes import dtypes
from tunesearch.onnx.registry import internal_dtype, onnx_np_dtype, producible, register
from tunesearch.tensor import Tensor


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
_unary("IsNaN", fn=lambda ctx, x: x.ne(x), host=lambda ctx, x: np.isnan(x))
_unary("Sign", fn=lambda ctx, x: x.sign().cast(x.dtype), host=lambda ctx, x: np.sign(x))
_unary("Softsign", fn=lambda ctx, x: x / (x.abs() + 1.0))
_unary("Selu", fn=lambda ctx, x: (x < 0).where(
    (x.exp() - 1.0) * (ctx.attr("alpha", 1.67326319217681884765625) *
                       ctx.attr("gamma", 1.05070102214813232421875)),
    x * ctx.attr("gamma", 1.05070102214813232421875)))


def _isinf(ctx, x):
    positive, negative = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    if isinstance(x, np.ndarray):
        return (np.isposinf(x) & bool(positive)) | (np.isneginf(x) & bool(negative))
    x = ctx.tensor(x)
    if not x.dtype.is_float:
        return Tensor.full(x.shape, False, dtypes.bool, ctx.device)
    found = Tensor.full(x.shape, False, dtypes.bool, ctx.device)
    if positive:
        found = found | x.eq(float("inf"))
    if negative:
        found = found | x.eq(float("-inf"))
    return found


register("IsInf", host=_isinf)(_isinf)
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


def _mod(ctx, a, b):
    """fmod=1: the remainder takes the dividend's sign (C's fmod); fmod=0: the divisor's, as
    numpy's mod, infinite divisors included (-3 mod inf is inf, 3 mod inf is 3)."""
    a, b = ctx.tensor(a), ctx.tensor(b)
    if not (a.dtype.is_float or b.dtype.is_float):
        return a - _int_div(a, b) * b if ctx.attr("fmod", 0) else a % b
    q = a / b
    whole = (q < 0).where(q.ceil(), q.floor())
    rest = whole.eq(0).where(a, a - whole * b)  # a quotient below 1: a itself, even by inf
    rest = (a.abs().eq(math.inf) | b.eq(0)).where(math.nan, rest)  # no remainder there
    if ctx.attr("fmod", 0):
        return rest
    flip = rest.ne(0) & (rest < 0).ne(b < 0)
    return flip.where(rest + b, rest)


register("Mod", host=lambda ctx, a, b: (np.fmod if ctx.attr("fmod", 0) else np.mod)(a, b))(_mod)


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


def _check_cast(ctx) -> Optional[str]:
    if not producible(onnx_np_dtype(ctx.attr("to", 1))):
        return f"cast to {helper.tensor_dtype_to_string(ctx.attr('to', 0)).split('.')[-1]}"
    return None


def _host_cast(ctx, x):
    with np.errstate(invalid="ignore"):  # inf and NaN to an integer: as C casts them
        return x.astype(_cast_to(ctx))


@register("Cast", host=_host_cast, check=_check_cast)
def cast(ctx, x):
    return ctx.tensor(x).cast(internal_dtype(_cast_to(ctx)))


@register("CastLike", host=lambda ctx, x, like: x.astype(like.dtype) if not isinstance(
    like, Tensor) else x.astype(like.dtype.np))
def cast_like(ctx, x, like):
    dtype = like.dtype if isinstance(like, Tensor) else internal_dtype(like.dtype)
    return ctx.tensor(x).cast(dtype)


@register("Dropout", known=(1, 2))
def dropout(ctx, x, ratio=None, training_mode=None):
    """Inference, or training with a ratio of 0 (nothing dropped): the identity. Training with
    a ratio above 0 draws random numbers no other runtime would draw the same: refused."""
    if training_mode is not None and bool(np.asarray(ctx.host(training_mode, "training_mode"))):
        dropped = 0.5 if ratio is None else float(np.asarray(ctx.host(ratio, "ratio")))
        if dropped != 0.0:
            raise ctx.unsupported("Dropout in training mode")
    if ctx.n_outputs > 1:
        return x, Tensor.full(x.shape, True, dtypes.bool, ctx.device)
    return x
