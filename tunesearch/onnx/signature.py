"""What an ONNX model declares, checked before it is traced: operators tunesearch runs, tensor
types it computes with, and the declared input shapes bound to the shapes given (symbolic
dimensions resolved, dynamic ones refused with the flag that gives them)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import onnx

from tunesearch.onnx.registry import (OPS, NodeContext, OnnxImportError, UnboundDimensionError,
                                      UnsupportedOperatorError, UnsupportedTypeError,
                                      onnx_np_dtype)

ONNX_DOMAINS = ("", "ai.onnx")
MAX_ELEMENTS = 2 ** 31 - 1  # generated kernels index buffers with 32-bit ints


@dataclass(frozen=True)
class ValueInfo:
    """A model input or output: name, shape (None for a dimension not known) and numpy dtype."""
    name: str
    shape: tuple[Optional[int], ...]
    dtype: np.dtype


def check_operators(graph: onnx.GraphProto, opset: int, device: str) -> None:
    problems: dict[str, list[str]] = {}
    for node in graph.node:
        ctx = NodeContext(node, opset, device)
        spec = OPS.get(node.op_type) if node.domain in ONNX_DOMAINS else None
        what = None
        if spec is None:
            what = node.op_type if node.domain in ONNX_DOMAINS else f"{node.domain}.{node.op_type}"
        elif spec.check is not None:
            what = spec.check(ctx)
        if what:
            problems.setdefault(what, []).append(ctx.name)
    if problems:
        parts = [f"{what} ({'node' if len(names) == 1 else 'nodes'} "
                 f"{', '.join(repr(n) for n in names)})" for what, names in problems.items()]
        raise UnsupportedOperatorError(f"unsupported operators: {'; '.join(parts)}")


def check_types(values, role: str, accept) -> None:
    """Inputs and outputs must be tensors of a type tunesearch computes with."""
    problems = []
    for v in values:
        if not v.type.HasField("tensor_type"):
            problems.append(f"{role} '{v.name}' is a {v.type.WhichOneof('value') or 'value'}, "
                            "not a tensor")
            continue
        elem = v.type.tensor_type.elem_type
        dtype = onnx_np_dtype(elem) if elem else np.dtype(np.float32)
        try:
            ok = accept(dtype) is not False
        except TypeError:
            ok = False
        if not ok:
            problems.append(f"{role} '{v.name}' has element type {_type_name(elem)}")
    if problems:
        raise UnsupportedTypeError("unsupported types: " + "; ".join(problems) +
                                   " (tunesearch computes with float, int and bool tensors)")


def _type_name(elem: int) -> str:
    try:
        return onnx.helper.tensor_dtype_to_string(elem).split(".")[-1]
    except (KeyError, ValueError):  # a number no ONNX release gives a type
        return f"{elem}, which ONNX does not define"


def element_dtype(value: onnx.ValueInfoProto) -> np.dtype:
    dtype = onnx_np_dtype(value.type.tensor_type.elem_type)
    return dtype if dtype is not None else np.dtype(np.float32)


def declared_dims(value: onnx.ValueInfoProto) -> Optional[list]:
    """Declared dims: an int, a symbol name (str) or None; None for an unknown rank."""
    t = value.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]


def declared_shape(value: onnx.ValueInfoProto, symbols: dict[str, int]) -> tuple:
    dims = declared_dims(value) or []
    return tuple(d if isinstance(d, int) else symbols.get(d) for d in dims)


def bind_inputs(declared: list, given: dict[str, tuple]) -> tuple[list[ValueInfo], dict]:
    names = [v.name for v in declared]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise OnnxImportError(f"input_shapes names {unknown}, but the model's inputs are {names}")
    symbols: dict[str, int] = {}
    bound: dict[str, tuple[int, ...]] = {}
    for v in declared:
        if v.name not in given:
            continue
        shape, dims = tuple(int(s) for s in given[v.name]), declared_dims(v)
        if dims is not None and len(dims) != len(shape):
            raise OnnxImportError(f"input '{v.name}' has {len(dims)} dims, the given shape "
                                  f"{shape} has {len(shape)}")
        for i, (d, s) in enumerate(zip(dims or [None] * len(shape), shape)):
            if isinstance(d, int) and d != s:
                raise OnnxImportError(f"input '{v.name}' dim {i} is {d} in the model, not {s}")
            if isinstance(d, str):
                symbols.setdefault(d, s)
        bound[v.name] = shape
    out = []
    for v in declared:
        if v.name not in bound:
            dims = declared_dims(v)
            if dims is None:
                raise UnboundDimensionError(f"input '{v.name}' has no declared shape; give it "
                                            f"with input_shapes (CLI: --input-shape "
                                            f"{v.name}=1x3x224x224)")
            shape = []
            for i, d in enumerate(dims):
                value = d if isinstance(d, int) else symbols.get(d)
                if value is None:
                    label = f" ('{d}')" if d else ""
                    raise UnboundDimensionError(
                        f"input '{v.name}' has a dynamic dimension {i}{label}; give its shape "
                        f"with input_shapes (CLI: --input-shape {v.name}=" +
                        "x".join(str(x) if isinstance(x, int) else "N" for x in dims) + ")")
                shape.append(value)
            bound[v.name] = tuple(shape)
        if any(d < 0 for d in bound[v.name]):
            raise OnnxImportError(f"input '{v.name}' has shape {bound[v.name]}: a dimension is "
                                  "a size, never negative")
        if math.prod(bound[v.name]) > MAX_ELEMENTS or any(d > MAX_ELEMENTS
                                                          for d in bound[v.name]):
            raise OnnxImportError(f"input '{v.name}' has shape {bound[v.name]}: more than "
                                  f"{MAX_ELEMENTS} elements (or a dim past that), which "
                                  "kernels cannot index (32-bit indices)")
        out.append(ValueInfo(v.name, bound[v.name], element_dtype(v)))
    return out, symbols
