"""The canonical kernel: a loop domain, one expression, one output view.

The domain is the full iteration shape, output axes first, then the reduce axes. The expression
is a tree of loads (buffer position + view over the domain), constants, elementwise ops and at most
one reduce over the last `n_reduce` axes. Buffer 0 is the output. The key hashes this structure, so
the same computation has the same key in every process and on every machine.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

from tunesearch.graph.dtypes import DType
from tunesearch.graph.ops import BinaryOps, ReduceOps, UnaryOps
from tunesearch.graph.view import View

# bumped whenever the meaning of a kernel's structure changes
KERNEL_FORMAT = 1


class KNode:
    """An immutable expression node. op: "load" (arg=(buffer, view)), "gather" (arg=(buffer,
    view, stride, size), src=(index,): the buffer at view + index * stride where 0 <= index <
    size, else 0), "const" (arg=(value, view)), a UnaryOps/BinaryOps member, or a ReduceOps
    member. Structural equality and a cached hash."""
    __slots__ = ("op", "src", "arg", "dtype", "_hash", "_text")

    def __init__(self, op, src: tuple, arg: Any, dtype: DType):
        self.op, self.src, self.arg, self.dtype = op, tuple(src), arg, dtype
        self._text = None
        self._hash = hash((op, self.src, arg if op != "load" else (arg[0], arg[1]), dtype.name))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):
        # rebuilt, not copied: string hashes differ from process to process
        return KNode, (self.op, self.src, self.arg, self.dtype)

    def __eq__(self, other) -> bool:
        return self is other or (isinstance(other, KNode) and self._hash == other._hash
                                 and self.text() == other.text())

    def text(self) -> str:
        """A canonical one-line text of this subtree."""
        if self._text is None:
            if self.op == "load":
                body = f"load(b{self.arg[0]},{self.arg[1].key()})"
            elif self.op == "gather":
                buf, view, stride, size = self.arg
                body = f"gather(b{buf},{view.key()},{stride},{size},{self.src[0].text()})"
            elif self.op == "const":
                body = f"const({self.arg[0]!r},{self.arg[1].key()})"
            else:
                extra = f",{self.arg.name}" if isinstance(self.arg, DType) else ""
                body = f"{self.op.name.lower()}({','.join(s.text() for s in self.src)}{extra})"
            self._text = f"{body}:{self.dtype.name}"
        return self._text

    def __repr__(self) -> str:
        return self.text()

    def walk(self, stop=None):
        """Every node of the tree once, children before parents; below a node for which
        stop(node) is true nothing is visited, nor that node itself."""
        seen, order = set(), []

        def visit(n):
            if id(n) in seen or (stop is not None and stop(n)):
                return
            seen.add(id(n))
            for s in n.src:
                visit(s)
            order.append(n)
        visit(self)
        return order


@dataclass(frozen=True)
class BufferSpec:
    """A buffer a kernel reads or writes: its size in elements (not bytes) and element type."""
    size: int
    dtype: DType


@dataclass(frozen=True)
class Kernel:
    """One kernel: a loop domain and one expression, stored through a view.

    - domain: the full iteration shape, the output axes first, then the `n_reduce` reduce axes
      (every index of it is one evaluation of the expression's inside);
    - expr: the expression tree (`KNode`s): loads of buffers through views of the domain,
      gathers (loads at a computed index along one axis), constants, unary, binary and where
      ops, and at most one reduce over the reduce axes;
    - out_view: how an index of the output axes maps to an offset of buffer 0;
    - buffers: buffer 0 is the output, 1.. the inputs in the order the loads number them.

    Derived: `key` (a hash of the canonical text, the same in every process and on every
    machine: the database's kernel key), `name` (r_ for a reduce, E_ for elementwise, then the
    domain), `flops` and `bytes` (what DEBUG=2 turns into GFLOPS and GB/s)."""
    domain: tuple[int, ...]
    n_reduce: int
    expr: KNode
    out_view: View
    buffers: tuple[BufferSpec, ...]
    key: str = field(init=False)
    name: str = field(init=False)
    flops: int = field(init=False)
    bytes: int = field(init=False)

    def __post_init__(self):
        text = self.canonical()
        object.__setattr__(self, "key", "k_" + hashlib.sha256(text.encode()).hexdigest()[:20])
        prefix = "r" if self.n_reduce else "E"
        object.__setattr__(self, "name", f"{prefix}_{'_'.join(map(str, self.domain))}")
        object.__setattr__(self, "flops", _count_flops(self))
        object.__setattr__(self, "bytes", _count_bytes(self))

    @property
    def n_out(self) -> int:
        return len(self.domain) - self.n_reduce

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.domain[:self.n_out]

    @property
    def reduce(self) -> KNode | None:
        for node in self.expr.walk():
            if isinstance(node.op, ReduceOps):
                return node
        return None

    def loads(self) -> list[KNode]:
        return [n for n in self.expr.walk() if n.op == "load"]

    def gathers(self) -> list[KNode]:
        """The reads at computed positions (never inside the reduce: see graph.schedule)."""
        return [n for n in self.expr.walk() if n.op == "gather"]

    def canonical(self) -> str:
        bufs = ",".join(f"{b.dtype.name}[{b.size}]" for b in self.buffers)
        return (f"kernel/{KERNEL_FORMAT} domain={self.domain} reduce={self.n_reduce} "
                f"bufs={bufs} out={self.out_view.key()} expr={self.expr.text()}")

    def ops_summary(self) -> str:
        counts: dict[str, int] = {}
        for node in self.expr.walk():
            name = node.op if isinstance(node.op, str) else node.op.name.lower()
            counts[name] = counts.get(name, 0) + 1
        return " ".join(f"{k}:{v}" for k, v in sorted(counts.items()))


def _count_flops(kernel: Kernel) -> int:
    full = math.prod(kernel.domain)
    out = math.prod(kernel.out_shape)
    inner: set[int] = set()
    red = kernel.reduce
    if red is not None:
        inner = {id(n) for n in red.src[0].walk()}
    flops = 0
    for node in kernel.expr.walk():
        if isinstance(node.op, (UnaryOps, BinaryOps)) and node.op is not UnaryOps.CAST:
            flops += full if id(node) in inner else out
        elif isinstance(node.op, ReduceOps):
            flops += full
    return flops


def _count_bytes(kernel: Kernel) -> int:
    """Bytes the kernel must move: its output once (a slice of buffer 0 for a piece of a
    concatenation), and each input's distinct elements once."""
    total = math.prod(kernel.out_shape) * kernel.buffers[0].dtype.itemsize
    read: dict[int, int] = {}
    for node in kernel.loads():
        buf, view = node.arg
        box = view.mask or tuple((0, s) for s in view.shape)
        touched = math.prod(hi - lo for (lo, hi), st in zip(box, view.strides) if st != 0)
        read[buf] = min(kernel.buffers[buf].size, read.get(buf, 0) + touched)
    for node in kernel.gathers():  # a row per index at most, the table at most
        buf = node.arg[0]
        read[buf] = min(kernel.buffers[buf].size, read.get(buf, 0) + math.prod(kernel.out_shape))
    for buf, count in read.items():
        total += count * kernel.buffers[buf].dtype.itemsize
    return total
