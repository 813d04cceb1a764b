"""Lowering a kernel and a CPU config to a C loop nest.

The nest: optional packing of operands into blocked scratch panels; block loops over the output
axes in the configured order (the first `parallel` of them shared out by OpenMP); inside each block
an always-inline function that keeps a register block of accumulators (upcast per output axis, and
`split` partial sums along the innermost reduce axis), runs the reduce loops (the innermost
unrolled), then applies the work after the reduce and stores. Tail blocks call the same function
with smaller constant bounds, so every call site is specialized by the compiler.
"""
from __future__ import annotations

import itertools
import math

from tunesearch.graph.kernel import Kernel, KNode
from tunesearch.space.config import Config
from tunesearch.space.dialect import Dialect, ExprEmitter, index_expr


HEADER = "#include <math.h>\n#include <stdlib.h>\n#include <stdbool.h>\n"


def _params(kernel: Kernel, dialect: Dialect, const: bool = True) -> str:
    out = [f"{dialect.type_name(kernel.buffers[0].dtype)}* {dialect.restrict} data0"]
    for i, buf in enumerate(kernel.buffers[1:], start=1):
        out.append(f"const {dialect.type_name(buf.dtype)}* {dialect.restrict} data{i}")
    return ", ".join(out)


def _args(kernel: Kernel) -> str:
    return ", ".join(f"data{i}" for i in range(len(kernel.buffers)))


class _PackInfo:
    """A load staged in a scratch panel laid out [blocks of its axes][reduce][lanes of its axes]."""

    def __init__(self, kernel: Kernel, index: int, upcast: tuple[int, ...]):
        n_out = kernel.n_out
        views = [n.arg[1] for n in kernel.loads() if n.arg[0] == index]
        self.index, self.view = index, views[0]
        self.axes = [a for a in range(n_out) if any(v.strides[a] != 0 for v in views)]
        self.blocks = [math.ceil(kernel.domain[a] / upcast[a]) for a in self.axes]
        self.lanes = [upcast[a] for a in self.axes]
        self.reduce = list(kernel.domain[n_out:])
        self.size = math.prod(self.blocks) * math.prod(self.reduce) * math.prod(self.lanes)
        self.dtype = kernel.buffers[index].dtype

    def offset(self, block: list[str], red: list[str], lane: list[str]) -> str:
        expr = "0"
        for idx, size in zip(block + red + lane, self.blocks + self.reduce + self.lanes):
            expr = f"({expr})*{size}+({idx})" if expr != "0" else f"({idx})"
        return expr


def render_cpu(kernel: Kernel, config: Config, name: str = "kernel") -> str:
    """C source for kernel under config; the entry point is `void name(data0, data1, ...)`."""
    d = Dialect()
    n_out, domain = kernel.n_out, kernel.domain
    upcast = tuple(config.get("upcast", (1,) * n_out))
    order = tuple(config.get("order", tuple(range(n_out))))
    unroll, split = config.get("unroll", 1), config.get("split", 1)
    parallel, threads = config.get("parallel", 0), config.get("threads", 1)
    packs = {i: _PackInfo(kernel, i, upcast) for i in config.get("pack", ())}
    reduce_node = kernel.reduce
    red_sizes = domain[n_out:]
    lines = [HEADER]

    # ---- the block function
    lane_params = ", ".join([f"const int o{a}" for a in range(n_out)] +
                            [f"const int n{a}" for a in range(n_out)])
    sig = _params(kernel, d) + (", " + lane_params if lane_params else "")
    sig += "".join(f", {d.type_name(p.dtype)}* {d.restrict} pk{i}" for i, p in packs.items())
    lines.append(f"static inline __attribute__((always_inline)) void {name}_block({sig}) {{")
    body: list[str] = []
    lane_idx = [f"(o{a}+l{a})" for a in range(n_out)]
    red_idx = [f"r{j}" for j in range(len(red_sizes))]
    inner = len(red_sizes) - 1

    def axis_index(axis: int) -> str:
        return lane_idx[axis] if axis < n_out else red_idx[axis - n_out]

    def load(node: KNode) -> str:
        index, view = node.arg
        if index in packs:
            p = packs[index]
            blocks = [f"(o{a}/{upcast[a]})" for a in p.axes]
            lanes = [f"l{a}" for a in p.axes]
            return f"pk{index}[{p.offset(blocks, red_idx, lanes)}]"
        idx, valid = index_expr(view, axis_index)
        read = f"data{index}[{idx}]"
        return f"(({valid})?{read}:{d.literal(0, node.dtype)})" if valid else read

    emitter = ExprEmitter(d, load)
    emitter.axis_index = staticmethod(axis_index)
    lane_loops = [f"for (int l{a} = 0; l{a} < n{a}; l{a}++)" for a in range(n_out)]
    unroll_lanes = "_Pragma(\"GCC unroll 64\")"
    acc_dims = "".join(f"[{u}]" for u in upcast)
    acc_at = "acc" + "".join(f"[l{a}]" for a in range(n_out))
    known = {}
    if reduce_node is not None:
        acc_type = d.type_name(reduce_node.dtype)
        init = d.reduce_init(reduce_node.op, reduce_node.dtype)
        body.append(f"{acc_type} acc{acc_dims}[{split}];")
        body += [unroll_lanes + " " + loop for loop in lane_loops]
        body.append(f"{unroll_lanes} for (int s = 0; s < {split}; s++) {acc_at}[s] = {init};")
        for j, size in enumerate(red_sizes[:-1]):
            body.append(f"for (int r{j} = 0; r{j} < {size}; r{j}++) {{")
        full = red_sizes[-1] - red_sizes[-1] % split
        for part, (start, stop, step, lanes) in enumerate(
                [(0, full, split, split), (full, red_sizes[-1], 1, 1)]):
            if start >= stop:
                continue
            pragma = f"_Pragma(\"GCC unroll {unroll}\") " if part == 0 and unroll > 1 else ""
            body.append(f"{pragma}for (int r{inner}b = {start}; r{inner}b < {stop}; "
                        f"r{inner}b += {step}) {{")
            inner_pragma = [unroll_lanes] * n_out + [unroll_lanes]
            inner_pragma[-1 if lanes > 1 or not n_out else -2] = ""
            body += [p + " " + loop + " {" for p, loop in zip(inner_pragma, lane_loops)]
            body.append(f"{inner_pragma[-1]} for (int s = 0; s < {lanes}; s++) {{")
            body.append(f"const int r{inner} = r{inner}b + s;")
            stmts: list[str] = []
            value = emitter.emit(reduce_node.src[0], stmts)
            body += stmts + [d.reduce_step(reduce_node.op, f"{acc_at}[s]", value)]
            body.append("}" * (n_out + 2))
        body.append("}" * (len(red_sizes) - 1))
        known[id(reduce_node)] = "red"
    body += [unroll_lanes + " " + loop + " {" for loop in lane_loops]
    if reduce_node is not None:
        body.append(f"{d.type_name(reduce_node.dtype)} red = {acc_at}[0];")
        body.append(f"for (int s = 1; s < {split}; s++) "
                    + d.reduce_step(reduce_node.op, "red", f"{acc_at}[s]"))
    stmts = []
    value = emitter.emit(kernel.expr, stmts, known)
    out_idx, _ = index_expr(kernel.out_view, axis_index)
    body += stmts + [f"data0[{out_idx}] = {value};", "}" * n_out]
    lines += ["  " + b for b in body if b] + ["}", ""]

    # ---- the entry point
    lines.append(f"void {name}({_params(kernel, d)}) {{")
    omp_threads = f" num_threads({threads})"
    for i, p in packs.items():
        lines += _pack_loop(kernel, p, upcast, d, omp_threads if parallel else None)
    nblocks = [math.ceil(domain[a] / upcast[a]) for a in range(n_out)]
    if parallel and n_out:
        collapse = f" collapse({parallel})" if parallel > 1 else ""
        lines.append(f"  #pragma omp parallel for{collapse}{omp_threads} schedule(static)")
    for a in order:
        lines.append(f"  for (int b{a} = 0; b{a} < {nblocks[a]}; b{a}++)")
    lines.append("  {")
    lines += [f"    const int o{a} = b{a}*{upcast[a]};" for a in range(n_out)]
    pack_args = "".join(f", pk{i}" for i in packs)
    lines += ["    " + line for line in _tail_dispatch(kernel, upcast, pack_args, name)]
    lines.append("  }")
    lines += [f"  free(pk{i});" for i in packs]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _tail_dispatch(kernel: Kernel, upcast: tuple[int, ...], pack_args: str,
                   name: str) -> list[str]:
    """Nested ifs that call block() with constant bounds: full blocks, and each axis's tail."""
    n_out, domain = kernel.n_out, kernel.domain
    axes_with_tail = [a for a in range(n_out) if domain[a] % upcast[a]]
    out: list[str] = []

    def call(bounds):
        args = [f"o{a}" for a in range(n_out)] + [str(b) for b in bounds]
        return f"{name}_block({_args(kernel)}{', ' if args else ''}{', '.join(args)}{pack_args});"

    combos = list(itertools.product((False, True), repeat=len(axes_with_tail)))
    for i, combo in enumerate(combos):
        bounds = list(upcast)
        tests = []
        for a, is_tail in zip(axes_with_tail, combo):
            if is_tail:
                bounds[a] = domain[a] % upcast[a]
            tests.append(f"o{a}+{upcast[a]}{'>' if is_tail else '<='}{domain[a]}")
        prefix = "" if not tests else ("if (" if i == 0 else "else if (") + " && ".join(tests) + ") "
        out.append(prefix + call(bounds))
    return out


def _pack_loop(kernel: Kernel, p: _PackInfo, upcast, d: Dialect, omp: str | None) -> list[str]:
    """Fill a scratch panel: pk[blocks][reduce][lanes] = the load's value (0 past the edge)."""
    tname = d.type_name(p.dtype)
    lines = [f"  {tname}* pk{p.index} = ({tname}*)aligned_alloc(64, "
             f"(({p.size}*sizeof({tname})+63)/64)*64);"]
    n_out = kernel.n_out
    names_b = [f"pb{a}" for a in p.axes]
    names_r = [f"r{j}" for j in range(len(p.reduce))]
    names_l = [f"pl{a}" for a in p.axes]
    if omp and p.axes:
        lines.append(f"  #pragma omp parallel for{omp} schedule(static)")
    loops = [(n, s) for n, s in zip(names_b + names_r + names_l, p.blocks + p.reduce + p.lanes)]
    lines += [f"  for (int {n} = 0; {n} < {s}; {n}++)" for n, s in loops]
    lines.append("  {")
    guard = []

    def axis_index(axis: int) -> str:
        if axis < n_out:
            return f"(pb{axis}*{upcast[axis]}+pl{axis})" if axis in p.axes else "0"
        return f"r{axis - n_out}"

    for a in p.axes:
        guard.append(f"pb{a}*{upcast[a]}+pl{a}<{kernel.domain[a]}")
    idx, valid = index_expr(p.view, axis_index)
    cond = " && ".join(guard + ([f"({valid})"] if valid else []))
    value = f"data{p.index}[{idx}]"
    if cond:
        value = f"({cond})?{value}:{d.literal(0, p.dtype)}"
    lines.append(f"    pk{p.index}[{p.offset(names_b, names_r, names_l)}] = {value};")
    lines.append("  }")
    return lines


def naive_config(kernel: Kernel) -> Config:
    """The config that changes nothing: one output at a time, serial, in domain order."""
    n_out = kernel.n_out
    return Config.make(upcast=(1,) * n_out, order=tuple(range(n_out)), unroll=1, split=1,
                       pack=(), parallel=0, threads=1)
