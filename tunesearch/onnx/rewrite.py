"""Graph rewrites at load, before a model is traced: what onnxruntime calls its basic graph
optimizations, for the cases that change the kernels.

A BatchNormalization, Mul or Add by a constant after a Conv, Gemm or MatMul with a constant
weight is folded into that weight and bias, so the per-channel scale and shift cost nothing at
run time (unfolded they are an epilogue that reads two more vectors per output, or a kernel of
their own where the producer's output is read twice):

    Conv(x, W, b) -> BatchNormalization(s, B, mean, var)   =>   Conv(x, W * a, (b - mean) * a + B)
                                                               with a = s / sqrt(var + eps)
    Conv(x, W, b) -> Mul(c)                                =>   Conv(x, W * c, b * c)
    Conv(x, W, b) -> Add(c)                                =>   Conv(x, W, b + c)
    MatMul(x, W) -> Mul(c)                                 =>   MatMul(x, W * c)
    Gemm(x, W, C) -> Mul(c) / Add(c)                       =>   Gemm(x, W * c, C * c) / Gemm(x, W, C + c)

c must be constant per output channel (a scalar, or one value per output channel broadcast over
the rest). A rewrite applies only where the producer's output has no other reader and is not a
graph output, and the folded values are computed in float64. Everything else (a weight that is a
graph input, a BatchNormalization in training mode, a constant of another shape) is left as it
is and runs unfused, with the same results. Constant subgraphs need no rewrite here: the importer
evaluates every node whose inputs are all known on the host, once, at load.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper


@dataclass
class Rewritten:
    """The nodes to trace, the constants they read (initializers and folded weights), and
    what was folded: {"BatchNormalization into Conv": 53, ...}."""
    nodes: list[onnx.NodeProto]
    constants: dict[str, np.ndarray]
    folded: Counter = field(default_factory=Counter)


def fold_into_weights(graph: onnx.GraphProto, initializers: dict[str, np.ndarray]
                      ) -> Rewritten:
    """The graph's nodes with scale and shift nodes folded into the weights before them (see
    the module docstring). initializers is not changed; folded weights get new names."""
    constants = dict(initializers)
    for node in graph.node:  # Constant nodes hold weights too
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
            value = _constant_value(node)
            if value is not None:
                constants[node.output[0]] = value
    nodes = list(graph.node)
    outputs = {v.name for v in graph.output}
    result = Rewritten(nodes, constants)
    names = _Names({n for node in nodes for n in list(node.input) + list(node.output)}
                   | set(constants))
    changed = True
    while changed:
        changed = False
        readers = Counter(name for node in result.nodes for name in node.input if name)
        by_input = {}
        for i, node in enumerate(result.nodes):
            for name in node.input:
                by_input.setdefault(name, []).append(i)
        for i, node in enumerate(result.nodes):
            out = node.output[0] if node.output else ""
            if node.op_type not in ("Conv", "Gemm", "MatMul") or node.domain not in ("", "ai.onnx") \
                    or readers[out] != 1 or out in outputs:
                continue
            j = by_input[out][0]
            consumer = result.nodes[j]
            folded = _fold(node, consumer, constants, names)
            if folded is not None:
                result.nodes[i] = folded
                del result.nodes[j]
                result.folded[f"{consumer.op_type} into {node.op_type}"] += 1
                changed = True
                break
    return result


def _fold(producer: onnx.NodeProto, consumer: onnx.NodeProto, constants: dict,
          names: "_Names") -> Optional[onnx.NodeProto]:
    """The producer with the consumer folded into it, or None where it does not apply."""
    if consumer.domain not in ("", "ai.onnx") or len([o for o in consumer.output if o]) != 1:
        return None
    weights = _weights(producer, constants)
    if weights is None:
        return None
    w, bias, channels, layout = weights
    if consumer.op_type == "BatchNormalization":
        if producer.op_type != "Conv" or _attr(consumer, "training_mode", 0) or \
                len(consumer.input) < 5 or consumer.input[0] != producer.output[0]:
            return None
        params = [constants.get(name) for name in consumer.input[1:5]]
        if any(p is None or p.shape != (channels,) for p in params):
            return None
        s, b, mean, var = (p.astype(np.float64) for p in params)
        scale = s / np.sqrt(var + _attr(consumer, "epsilon", 1e-5))
        shift = b - mean * scale
    elif consumer.op_type in ("Mul", "Add") and len(consumer.input) == 2:
        other = consumer.input[1] if consumer.input[0] == producer.output[0] else consumer.input[0]
        if other == producer.output[0] or other not in constants:
            return None
        # the constant must not widen the output: at most the output's rank (a matmul's
        # output rank is the input's, 1 where x is a vector)
        rank = w.ndim if layout == "conv" else (2 if producer.op_type == "Gemm" else 1)
        if constants[other].ndim > rank:
            return None
        c = _per_channel(constants[other], channels, layout, w.ndim)
        if c is None or not np.all(np.isfinite(c)):
            return None
        if consumer.op_type == "Add" and producer.op_type == "MatMul":
            return None  # no bias input: the add stays an epilogue of the matmul's kernel
        if consumer.op_type == "Mul":
            scale, shift = c, np.zeros(channels)
        else:
            scale, shift = np.ones(channels), c
    else:
        return None
    return _scaled(producer, consumer, w, bias, scale, shift, constants, names)


def _weights(node: onnx.NodeProto, constants: dict):
    """(weight, bias or None, output channels, layout) of a node whose weight is constant:
    layout says where the output channel is: "conv" (axis 0 of W, axis 1 of the output), "cols"
    (the last axis of W and of the output)."""
    if len(node.input) < 2 or node.input[1] not in constants:
        return None
    w = constants[node.input[1]]
    if w.dtype.kind != "f":
        return None
    bias_name = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if bias_name is not None and bias_name not in constants:
        return None
    bias = constants[bias_name] if bias_name else None
    if node.op_type == "Conv":
        return (w, bias, w.shape[0], "conv") if w.ndim >= 3 else None
    if node.op_type == "MatMul":
        return (w, None, w.shape[-1], "cols") if w.ndim == 2 else None
    if w.ndim != 2 or _attr(node, "transA", 0) not in (0, 1):
        return None
    channels = w.shape[0] if _attr(node, "transB", 0) else w.shape[1]
    if bias is not None and (bias.ndim > 2 or (bias.ndim == 2 and bias.shape[0] != 1)):
        return None  # a bias per row and column: a shift per column cannot be added to it alone
    return w, bias, channels, "cols"


def _per_channel(c: np.ndarray, channels: int, layout: str, w_rank: int) -> Optional[np.ndarray]:
    """c as one value per output channel, if it is constant along every other axis of the
    output: a scalar, or shaped (channels, 1, ...) for a conv's NCHW output (with leading ones),
    (..., channels) for a matmul's."""
    if c.dtype.kind != "f":
        return None
    if c.size == 1:
        return np.full(channels, float(c.reshape(-1)[0]))
    dims = list(c.shape)
    if layout == "conv":
        spatial = w_rank - 2
        if len(dims) > spatial + 2 or len(dims) < spatial + 1 or \
                any(d != 1 for d in dims[len(dims) - spatial:]) or \
                any(d != 1 for d in dims[:len(dims) - spatial - 1]):
            return None
    elif any(d != 1 for d in dims[:-1]):
        return None
    return c.reshape(-1).astype(np.float64) if c.size == channels else None


def _scaled(producer, consumer, w, bias, scale, shift, constants, names) -> onnx.NodeProto:
    """A copy of producer with its weight scaled per output channel and its bias shifted,
    writing the consumer's output."""
    w64 = w.astype(np.float64)
    if producer.op_type == "Conv":
        w_new = w64 * scale.reshape((-1,) + (1,) * (w.ndim - 1))
    elif producer.op_type == "Gemm" and _attr(producer, "transB", 0):
        w_new = w64 * scale[:, None]
    else:
        w_new = w64 * scale[None, :]
    inputs = list(producer.input)
    inputs[1] = names.new(f"{inputs[1]}.folded")
    constants[inputs[1]] = w_new.astype(w.dtype)
    has_shift = bool(np.any(shift != 0))
    attrs = {a.name: helper.get_attribute_value(a) for a in producer.attribute}
    if producer.op_type != "MatMul":
        b64 = np.zeros(len(scale)) if bias is None else bias.astype(np.float64)
        if producer.op_type == "Gemm":
            beta = attrs.get("beta", 1.0)
            # y = alpha * A B + beta * C: scaling y by s scales the product and beta * C
            b64 = (beta * b64 if bias is not None else b64) * scale + shift
            attrs["beta"] = 1.0
        else:
            b64 = b64 * scale + shift
        if bias is not None or has_shift:
            dtype = bias.dtype if bias is not None else w.dtype
            name = names.new(f"{inputs[1]}.bias")
            gemm_row = producer.op_type == "Gemm" and bias is not None and bias.ndim == 2
            constants[name] = b64.reshape((1, -1) if gemm_row else (-1,)).astype(dtype)
            inputs = inputs[:2] + [name]
    return helper.make_node(producer.op_type, inputs, [consumer.output[0]],
                            name=producer.name or consumer.name, **attrs)


def _attr(node: onnx.NodeProto, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _constant_value(node: onnx.NodeProto) -> Optional[np.ndarray]:
    for a in node.attribute:
        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
            return numpy_helper.to_array(a.t)
    return None


class _Names:
    """Fresh value names, unused in the graph."""

    def __init__(self, taken: set[str]):
        self.taken = set(taken)

    def new(self, base: str) -> str:
        name, n = base, 1
        while name in self.taken:
            n += 1
            name = f"{base}.{n}"
        self.taken.add(name)
        return name
