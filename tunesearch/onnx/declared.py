"""A model checked against what it declares, once, when it is loaded and before any work: the
opsets it imports, the data of every tensor it holds against the tensor's shape and type, and
the names of its graph (each value written once, every output produced).

    check_declared(proto)      # raises a one-line OnnxImportError subclass, or returns None

The onnx checker runs where it applies to a model tunesearch loads (each tensor kept in typed
fields: its data type, dims and the field its values are in); the whole-model checker does not,
since it refuses models onnxruntime and tunesearch run (outputs declared without a shape). What
it lets pass (unknown data types, data longer than the shape, opsets past the newest release) is
checked here.
"""
from __future__ import annotations

import math
from typing import Iterable, Iterator

import onnx
from onnx import TensorProto

from tunesearch.onnx.registry import OnnxImportError
from tunesearch.onnx.signature import MAX_ELEMENTS


class InvalidModelError(OnnxImportError):
    """A model whose contents disagree with what it declares, or that no ONNX release defines."""


DEFAULT_DOMAINS = ("", "ai.onnx")
# sub-byte types pack several values into one byte (raw data) or one int32 (typed data)
_BITS = {getattr(TensorProto, name): bits for name, bits in
         (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2))
         if hasattr(TensorProto, name)}
_COMPLEX = (TensorProto.COMPLEX64, TensorProto.COMPLEX128)
_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def check_declared(proto: onnx.ModelProto) -> None:
    """Refuse a model whose opsets, tensors or names are not what ONNX allows."""
    check_opsets(proto)
    graph = proto.graph
    for tensor in tensors(graph):
        check_tensor_data(tensor)
    check_names(graph)


def check_opsets(proto: onnx.ModelProto) -> None:
    """The default domain is imported once, at a version some ONNX release defines."""
    if proto.ir_version > onnx.IR_VERSION:
        raise InvalidModelError(f"the model's IR version {proto.ir_version} is newer than this "
                                f"onnx package ({onnx.__version__}) reads (at most "
                                f"{onnx.IR_VERSION}); upgrade onnx")
    domains = [o.domain or "" for o in proto.opset_import]
    default = [o.version for o in proto.opset_import if o.domain in DEFAULT_DOMAINS]
    repeated = sorted({d or "ai.onnx" for d in domains if domains.count(d) > 1})
    if repeated or len(default) > 1:
        raise InvalidModelError(f"the model imports the opset of {', '.join(repeated) or 'ai.onnx'}"
                                " more than once; a domain has one version")
    if not default:
        # since IR version 3 a model names the opset its operators come from (ONNX IR spec)
        raise InvalidModelError("the model imports no opset of the default domain (ai.onnx), "
                                "so its operators mean nothing; set opset_import")
    latest = onnx.defs.onnx_opset_version()
    # the default domain's versions start at 1 (ONNX 1.0); one past the newest is not defined yet
    if not 1 <= default[0] <= latest:
        raise InvalidModelError(f"the model imports opset {default[0]} of the default domain; "
                                f"ONNX releases define 1 to {latest} (onnx {onnx.__version__})")


def check_tensor_data(tensor: TensorProto) -> None:
    """A tensor's data holds exactly the values its dims and data type declare."""
    label = f"tensor '{tensor.name}'"
    if tensor.data_location == TensorProto.EXTERNAL:
        raise InvalidModelError(f"{label} keeps its data in a file that was not loaded; load the "
                                "model from its path")
    try:
        onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
    except (KeyError, ValueError, TypeError):
        raise InvalidModelError(f"{label} has data type {tensor.data_type}, which ONNX does not "
                                "define") from None
    if any(d < 0 for d in tensor.dims):
        raise InvalidModelError(f"{label} has dims {list(tensor.dims)}: a dim is never negative")
    if any(d > MAX_ELEMENTS for d in tensor.dims):  # even with no elements, past any index
        raise InvalidModelError(f"{label} has dims {list(tensor.dims)}: a dim past "
                                f"{MAX_ELEMENTS}, which kernels cannot index (32-bit indices)")
    count = math.prod(tensor.dims)
    shape = "x".join(map(str, tensor.dims)) or "a scalar"
    stored = next((f for f in _FIELDS if len(getattr(tensor, f))), None)
    if count and stored is None and not tensor.HasField("raw_data"):
        raise InvalidModelError(f"{label} of shape {shape} holds no data")
    if tensor.HasField("raw_data"):
        have, want, unit = len(tensor.raw_data), _raw_bytes(tensor.data_type, count), "bytes"
    elif stored is not None:
        have, want, unit = len(getattr(tensor, stored)), _typed_count(tensor.data_type, count), \
            f"values in {stored}"
    else:
        have = want = unit = None  # no values, no data
    if want is not None and have != want:
        raise InvalidModelError(f"{label} of shape {shape} holds {have} {unit} of data; its "
                                f"shape and type take {want}")
    if tensor.HasField("raw_data"):
        if tensor.data_type == TensorProto.STRING:  # strings live in string_data only
            raise InvalidModelError(f"{label} holds strings in raw_data; ONNX keeps them in "
                                    "string_data")
        if stored is not None:
            raise InvalidModelError(f"{label} holds its data twice, in raw_data and {stored}")
        return  # its size is checked above; the checker would copy the data once more
    try:  # the rest: data in the field its type is stored in, one field only
        onnx.checker.check_tensor(tensor)
    except onnx.checker.ValidationError as err:
        raise InvalidModelError(f"{label}: {str(err).splitlines()[0]}") from None


def _raw_bytes(data_type: int, count: int) -> int | None:
    if data_type == TensorProto.STRING:
        return None  # check_tensor_data refuses raw strings: they have no raw form
    if data_type in _BITS:
        return math.ceil(count * _BITS[data_type] / 8)
    return count * onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize


def _typed_count(data_type: int, count: int) -> int:
    if data_type in _BITS:  # packed into int32_data, one byte's worth per int32
        return math.ceil(count * _BITS[data_type] / 8)
    return 2 * count if data_type in _COMPLEX else count


def check_names(graph: onnx.GraphProto) -> None:
    """Each value of the graph is written once (ONNX graphs are in single static assignment
    form), and every graph output is an input, an initializer or a node's output."""
    _unique((v.name for v in graph.input), "input")
    _unique((t.name for t in graph.initializer), "initializer")
    _unique((v.name for v in graph.output), "output")
    outer = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    written: dict[str, str] = {}
    for index, node in enumerate(graph.node):
        label = node.name or f"#{index}"
        for name in node.output:
            if not name:
                continue  # an optional output left out
            if name in written:
                raise InvalidModelError(f"nodes '{written[name]}' and '{label}' both write "
                                        f"'{name}'; a value is written by one node only")
            if name in outer:
                raise InvalidModelError(f"node '{label}' writes '{name}', which is also an "
                                        "input or initializer of the model")
            written[name] = label
    for output in graph.output:
        if output.name not in written and output.name not in outer:
            raise InvalidModelError(f"the model's output '{output.name}' is produced by no node "
                                    "and is no input or initializer")


def _unique(names: Iterable[str], role: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidModelError(f"the model lists {role} '{name}' twice")
        seen.add(name)


def tensors(graph: onnx.GraphProto) -> Iterator[TensorProto]:
    """Every tensor of a graph: initializers and node attributes, in subgraphs too."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from tensors(attribute.g)
            for subgraph in attribute.graphs:
                yield from tensors(subgraph)
