"""ONNX operators as Tensor calls: the registry, the node context, the import errors and the
dtype helpers. The operators live by family: elementwise.py, reduce.py (reductions, softmax and
matrix products), shape.py (shapes and data movement) and nn.py (convolutions, pooling,
normalizations and resizing).

Every operator is a function `fn(ctx, *inputs)` registered by name; an input is a numpy array (a
value known at import: an initializer, a constant, or the result of folding) or a Tensor (a value
that depends on the model's inputs). When every input of a node is known at import, the node is
folded: by its numpy `host` function where it has one (the shape arithmetic of exported models:
Shape -> Gather -> Concat -> Reshape), otherwise by running its Tensor function once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tunesearch.errors import UserError
from tunesearch.graph.dtypes import DType, dtypes
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


def producible(np_dtype) -> bool:
    """Whether values can be handed out in this type: not the 8-bit float formats, whose
    rounding and saturation rules tunesearch does not implement."""
    try:
        internal_dtype(np_dtype)
    except TypeError:
        return False
    return not (np_dtype.kind == "f" and np_dtype.itemsize < 2)


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


def axis_of(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def node_axes(ctx, given, ndim: int, what: str = "axes") -> Optional[list[int]]:
    """Axes from the attribute (older opsets) or the input (newer), made non-negative."""
    axes = ctx.attr("axes") if given is None else ctx.ints(given, what)
    return None if axes is None else [axis_of(a, ndim) for a in axes]
