"""How a lowered program is spelled: the C family differs only in a few words.

The lowering writes loop nests through a Dialect; C, OpenCL C and CUDA C each fill in their own
names for types, math functions, thread indices and barriers. Expressions are emitted one SSA
temporary per node, so shared subexpressions are computed once and the compiler sees plain code.
"""
from __future__ import annotations

import math
from typing import Callable

from tunesearch.graph.dtypes import DType, dtypes
from tunesearch.graph.kernel import KNode
from tunesearch.graph.ops import BinaryOps, ReduceOps, UnaryOps
from tunesearch.graph.view import View


class Dialect:
    """Plain C (the CPU device)."""
    name = "c"
    restrict = "restrict"
    fmax_name = "fmaxf"

    def type_name(self, dtype: DType) -> str:
        return dtype.c_name

    def literal(self, value, dtype: DType) -> str:
        if dtype is dtypes.bool:
            return "1" if value else "0"
        if dtype.is_float:
            if math.isnan(value):
                return "NAN"
            if math.isinf(value):
                return "INFINITY" if value > 0 else "-INFINITY"
            text = repr(float(value))
            return f"(({self.type_name(dtype)}){text}f)" if dtype is dtypes.float16 else f"{text}f"
        return str(int(value))

    def unary(self, op: UnaryOps, x: str, dtype: DType) -> str:
        if op is UnaryOps.NEG:
            return f"(!{x})" if dtype is dtypes.bool else f"(-{x})"
        if op is UnaryOps.RECIP:
            return f"(1.0f/{x})"
        if op is UnaryOps.CAST:
            return f"(({self.type_name(dtype)}){x})"
        return f"{self.math_name(op.value)}({x})"

    def math_name(self, name: str) -> str:
        return name + "f"

    def recip_one_plus_exp2(self, x: str, dtype: DType) -> str | None:
        """1 / (1 + exp2(x)) (a sigmoid) as one expression, where the dialect has a cheaper
        way to it than its three operations; None where it has not."""
        return None

    def binary(self, op: BinaryOps, a: str, b: str, dtype: DType) -> str:
        symbols = {BinaryOps.ADD: "+", BinaryOps.MUL: "*", BinaryOps.CMPLT: "<",
                   BinaryOps.CMPEQ: "==", BinaryOps.MOD: "%", BinaryOps.IDIV: "/"}
        if dtype is dtypes.bool and op in (BinaryOps.ADD, BinaryOps.MUL):
            return f"({a}{'|' if op is BinaryOps.ADD else '&'}{b})"
        if op is BinaryOps.MAX:
            return f"(({a})>({b})?({a}):({b}))"
        if op in (BinaryOps.MOD, BinaryOps.IDIV):
            return f"(({b})==0?0:({a}){symbols[op]}({b}))"
        return f"({a}{symbols[op]}{b})"

    def select(self, node: KNode, cond: str, a: str, b: str) -> str:
        """node (a where) as cond ? a : b, both already computed."""
        return f"({cond}?{a}:{b})"

    def reduce_init(self, op: ReduceOps, dtype: DType) -> str:
        return self.literal(0.0 if op is ReduceOps.SUM else -math.inf, dtype) if dtype.is_float \
            else ("0" if op is ReduceOps.SUM else "-2147483647")

    def reduce_step(self, op: ReduceOps, acc: str, x: str) -> str:
        if op is ReduceOps.SUM:
            return f"{acc} += {x};"
        return f"{acc} = ({x}>{acc})?({x}):({acc});"


def index_expr(view: View, axis_index: Callable[[int], str],
               holds: Callable[[int], str | None] = lambda axis: None
               ) -> tuple[str, str | None]:
    """The buffer offset a view reads at the domain index, and its validity test (or None).
    holds(axis), where not None, is a C flag under which the tests on that axis are known to
    pass (a block inside the mask on it), so the compiler drops them where the flag is 1."""
    terms = [str(view.offset)] if view.offset else []
    for axis, stride in enumerate(view.strides):
        if stride:
            terms.append(f"{axis_index(axis)}*{stride}" if stride != 1 else axis_index(axis))
    valid = None
    if view.mask is not None:
        if any(lo >= hi for lo, hi in view.mask):
            return "0", "0"
        valid = "&&".join(mask_tests(view, axis_index, holds, range(len(view.shape)))) or None
    return "+".join(terms) or "0", valid


def mask_tests(view: View, axis_index: Callable[[int], str],
               holds: Callable[[int], str | None], axes) -> list[str]:
    """The tests of a masked view's valid range on the given axes (an axis's flag from holds,
    where there is one, passes them)."""
    tests = []
    for axis in axes:
        (lo, hi), size = view.mask[axis], view.shape[axis]
        flag = holds(axis)
        for test in ([f"({axis_index(axis)})>={lo}"] if lo > 0 else []) + \
                    ([f"({axis_index(axis)})<{hi}"] if hi < size else []):
            tests.append(f"({flag}||{test})" if flag else test)
    return tests


def _one_plus_exp2(node: KNode) -> KNode | None:
    """x where node is 1 + exp2(x) (either order, the 1 an unmasked constant): the
    reciprocal of it is a sigmoid, which a dialect may compute in one expression (the exp2 and
    the sum are still emitted for any other reader; the compiler drops them where none is)."""
    if node.op is not BinaryOps.ADD:
        return None
    for one, power in (node.src, node.src[::-1]):
        if one.op == "const" and one.arg[0] == 1.0 and one.arg[1].mask is None and \
                power.op is UnaryOps.EXP2:
            return power.src[0]
    return None


class ExprEmitter:
    """Emits the statements that compute expression nodes into temporaries."""

    def __init__(self, dialect: Dialect, load: Callable[[KNode], str],
                 gather: Callable[[KNode, str], str] | None = None):
        """load(node) is the read of a load; gather(node, index) the read of a gather at the
        variable holding its index."""
        self.dialect, self.load, self.gather = dialect, load, gather
        self.count = 0

    def emit(self, root: KNode, lines: list[str], known: dict[int, str] | None = None,
             names_out: dict[int, str] | None = None) -> str:
        """Append statements computing root to lines; returns the name holding its value.
        known maps nodes (by id) whose value is already in a variable (the reduce's accumulator).
        names_out, if given, receives the name of every node computed or known, so a caller can
        reuse values across several emits (the GPU lowering shares them between lanes)."""
        names = dict(known or {})
        d = self.dialect
        for node in root.walk(stop=lambda n: id(n) in names):
            if isinstance(node.op, ReduceOps):
                raise ValueError("the reduce must be given in known")
            if node.op == "load":
                value = self.load(node)
            elif node.op == "gather":
                value = self.gather(node, names[id(node.src[0])])
            elif node.op == "const":
                value = d.literal(node.arg[0], node.dtype)
                valid = index_expr(node.arg[1], self.axis_index, self.holds)[1]
                if valid:
                    value = f"(({valid})?{value}:{d.literal(0, node.dtype)})"
            elif isinstance(node.op, UnaryOps):
                exponent = _one_plus_exp2(node.src[0]) if node.op is UnaryOps.RECIP else None
                fused = None if exponent is None else \
                    d.recip_one_plus_exp2(names[id(exponent)], node.dtype)
                value = fused or d.unary(node.op, names[id(node.src[0])], node.dtype)
            elif node.op is BinaryOps.WHERE:
                c, a, b = (names[id(s)] for s in node.src)
                value = d.select(node, c, a, b)
            else:
                a, b = (names[id(s)] for s in node.src)
                value = d.binary(node.op, a, b, node.src[0].dtype)
            name = f"t{self.count}"
            self.count += 1
            lines.append(f"{d.type_name(node.dtype)} {name} = {value};")
            names[id(node)] = name
        if names_out is not None:
            names_out.update(names)
        return names[id(root)]

    axis_index: Callable[[int], str] = staticmethod(lambda axis: f"i{axis}")
    holds: Callable[[int], str | None] = staticmethod(lambda axis: None)
