"""Values read by several nodes that still belong in one kernel: an activation written as a small
elementwise graph around its input, as exporters write SiLU (x * Sigmoid(x)), GELU
(x * 0.5 * (1 + Erf(x / sqrt 2)), and the Tanh form) and HardSwish by parts.

The importer realizes a value that several nodes read (so a convolution is not computed twice).
Here that would split the activation from its producer: the convolution or matrix product writes
x, a second kernel reads it back for the activation. When every path from x runs through
elementwise nodes only and they all meet in one value before anything else reads them, the
activation is x's epilogue: x and the values between stay lazy, and the scheduler computes the
producer once and the activation on its result, in one kernel.
"""
from __future__ import annotations

from collections import defaultdict

import onnx

# operators that compute each output element from the same element of their inputs
ELEMENTWISE = frozenset(
    "Add Sub Mul Div Pow Neg Abs Sqrt Exp Log Reciprocal Relu LeakyRelu Sigmoid Tanh Erf Gelu "
    "HardSigmoid HardSwish Softplus Softsign Elu Selu Clip Where Cast Min Max Sum Identity "
    "Floor Ceil Sin Cos Sign".split())
MOST_NODES = 24  # an activation is a handful of nodes; a region no larger stays cheap to check


def fused_fanouts(nodes: list[onnx.NodeProto], outputs: set[str]) -> set[str]:
    """The values read by several nodes that the nodes after them close into one value, through
    elementwise nodes only (see the module docstring)."""
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in nodes:
        for name in set(node.input):
            if name:
                consumers[name].append(node)
    fused: set[str] = set()
    for name, readers in consumers.items():
        if len(readers) > 1 and name not in outputs and name not in fused:
            inner = _closed_region(name, consumers, outputs)
            if inner is not None:
                fused |= inner
    return fused


def _closed_region(start: str, consumers, outputs: set[str]):
    """The values from start up to (not including) the one value its elementwise successors
    meet in; None where they escape through more than one value or a non-elementwise reader."""
    values, queue, seen_nodes, escapes = {start}, [start], set(), set()
    while queue:
        value = queue.pop()
        for node in consumers.get(value, []):
            if node.op_type not in ELEMENTWISE or node.domain not in ("", "ai.onnx"):
                escapes.add(value)
                continue
            if id(node) in seen_nodes:
                continue
            seen_nodes.add(id(node))
            if len(seen_nodes) > MOST_NODES:
                return None
            for out in node.output:
                if out and out not in values:
                    values.add(out)
                    queue.append(out)
        if value in outputs or not consumers.get(value):
            escapes.add(value)
    if len(escapes) != 1 or start in escapes:
        return None
    return values - escapes
