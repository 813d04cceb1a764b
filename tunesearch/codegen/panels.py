"""Filling panels (operands staged in the blocked scratch layout of space/panel_layout.py): the C
loop that fills one on every call, and the same panel made once on the host for an operand that
never changes (a model's weight, packed when the plan is built)."""
from __future__ import annotations

import math

import numpy as np

from tunesearch.graph.kernel import Kernel
from tunesearch.codegen.dialect import Dialect, index_expr
from tunesearch.space.config import Config
from tunesearch.space.panel_layout import PackInfo, varies

MAX_PREPACK_ELEMENTS = 1 << 26  # a constant's panel held beside it, per kernel that reads it


def panel_offset(p: PackInfo, block: list[str], red: list[str], lane: list[str]) -> str:
    """The C offset in panel p of a block, reduce and lane index; `red` holds one index per
    reduce axis, or one flat index over them all (the panel lays them out one after another)."""
    reduce = p.reduce if len(red) == len(p.reduce) else [math.prod(p.reduce)]
    expr = "0"
    for idx, size in zip(block + red + lane, p.blocks + reduce + p.lanes):
        expr = f"({expr})*{size}+({idx})" if expr != "0" else f"({idx})"
    return expr


def padded_axes(kernel: Kernel, packs) -> set[int]:
    """Output axes whose tail blocks may compute the whole register block: every load the
    reduce reads along them comes from a panel, which is zero-padded to whole blocks."""
    if kernel.reduce is None:
        return set()
    loads = [n.arg for n in kernel.reduce.src[0].walk() if n.op == "load"]
    return {a for a in range(kernel.n_out)
            if all(index in packs for index, view in loads if varies(view, a))}


def prepack_layouts(kernel: Kernel, config: Config, constants: frozenset[int]
                    ) -> dict[int, tuple[int, ...]]:
    """The buffers among `constants` (never written, never fed: a model's weights) that kernel
    under config reads prepacked, each with the key of its panel's layout: the buffers the
    config packs whose panel without a k tile holds at most MAX_PREPACK_ELEMENTS. A panel
    depends only on the register block along the axes it varies on, so two configs with equal
    keys read the same panel."""
    out = {}
    upcast = tuple(config.get("upcast", ()))
    for index in config.get("pack", ()):
        if index in constants:
            p = PackInfo(kernel, index, upcast, 0)
            if p.size <= MAX_PREPACK_ELEMENTS:
                out[index] = tuple(upcast[a] for a in p.axes)
    return out


def pack_panel(kernel: Kernel, config: Config, index: int, values: np.ndarray
               ) -> np.ndarray | None:
    """The panel of buffer `index` (its flat values) as the kernel under config reads it
    prepacked: the layout of a pack without a k tile, zeros past the edges and outside the
    view's mask. None where the config does not pack that buffer or the panel is too large."""
    if index not in prepack_layouts(kernel, config, frozenset([index])):
        return None
    upcast = tuple(config.get("upcast"))
    p = PackInfo(kernel, index, upcast, 0)
    n_out, view = kernel.n_out, p.view
    shape = p.blocks + p.reduce + p.lanes
    grid = np.indices(shape, sparse=True) if shape else []
    nb, nr = len(p.blocks), len(p.reduce)
    coords: list = [0] * len(kernel.domain)
    valid: np.ndarray | bool = True
    for k, a in enumerate(p.axes):
        coords[a] = grid[k] * upcast[a] + grid[nb + nr + k]
        valid = valid & (coords[a] < kernel.domain[a])
    for j in range(nr):
        coords[n_out + j] = grid[nb + j]
    offset = view.offset + sum(c * s for c, s in zip(coords, view.strides) if s)
    if view.mask is not None:
        for c, (lo, hi) in zip(coords, view.mask):
            valid = valid & (c >= lo) & (c < hi)
    offset = np.broadcast_to(np.asarray(offset, np.int64), shape)
    valid = np.broadcast_to(np.asarray(valid, bool), shape)
    read = values.reshape(-1)[np.where(valid, offset, 0)] if values.size else 0
    return np.where(valid, read, 0).astype(values.dtype).reshape(-1)


def pack_loop(kernel: Kernel, p: PackInfo, upcast, d: Dialect, shared: str | None,
              tiled: bool, own: int | None = None, vector_bytes: int = 32,
              group: int = 1) -> list[str]:
    """Fill a scratch panel: pk[blocks][reduce][lanes] = the load's value (0 past the edge);
    with a k tile, the kn rows of the first reduce axis from k0 on. With own (an axis), only
    the block b{own} of that axis, into a buffer of that one block's panel: filled inside
    the block loop, just before it is read; with a group too, the `group` blocks of group
    g{own} (the last group's may be fewer), into a buffer of that many blocks' panels, each
    reduce row read across all of them at once. shared: the line that heads the fill as a loop
    shared over the threads (parallel.shared_loop), or None."""
    n_out = kernel.n_out
    names_b = [f"pb{a}" for a in p.axes]
    names_r = [f"r{j}" for j in range(len(p.reduce))]
    names_l = [f"pl{a}" for a in p.axes]
    sizes = p.blocks + (["kn"] + p.reduce[1:] if tiled else p.reduce) + p.lanes
    strides = ([p.view.strides[a] * upcast[a] for a in p.axes]
               + list(p.view.strides[n_out:]) + [p.view.strides[a] for a in p.axes])
    # the loop with the largest stride in the source outermost, the contiguous one innermost:
    # the operand is then read in order, row after row (a panel is written in any order)
    loops = sorted(zip(names_b + names_r + names_l, sizes, strides), key=lambda x: -abs(x[2]))
    lines = [f"  {shared}"] if shared else []

    def axis_index(axis: int) -> str:
        if axis < n_out:
            return f"(pb{axis}*{upcast[axis]}+pl{axis})" if axis in p.axes else "0"
        return "(k0+r0)" if tiled and axis == n_out else f"r{axis - n_out}"

    guards = {a: f"pb{a}*{upcast[a]}+pl{a}<{kernel.domain[a]}" for a in p.axes
              if kernel.domain[a] % upcast[a]}
    idx, valid = index_expr(p.view, axis_index)
    # the panel of one block (own) is written at block 0 of a buffer of its own
    grouped = own is not None and group > 1
    at = [(f"(pb{own}-g{own}*{group})" if grouped else "0") if own is not None and n == f"pb{own}"
          else n for n in names_b]
    target = f"pk{p.index}{'g' if grouped else ''}[{panel_offset(p, at, names_r, names_l)}]"
    zero = d.literal(0, p.dtype)

    def fill(skip: int | None = None) -> str:
        cond = " && ".join([g for a, g in guards.items() if a != skip]
                           + ([f"({valid})"] if valid else []))
        value = f"data{p.index}[{idx}]"
        return f"{target} = {f'({cond})?{value}:{zero}' if cond else value};"

    # where the lanes innermost are whole vectors and the last block runs past the operand's
    # edge: they run to the edge, then zeros, two loops the compiler vectorizes, where a guard
    # per element keeps the copy scalar. A few lanes (a block of rows) stay one short loop
    # with the guard: unrolled whole, a loop of a varying count would cost more
    inner = loops[-1][0] if loops else ""
    lanes = max(1, vector_bytes // p.dtype.itemsize)
    edge = next((a for a in guards if inner == f"pl{a}" and upcast[a] % lanes == 0), None)
    if own is not None and not grouped:
        lines.append(f"  const int pb{own} = b{own};")
        loops = [x for x in loops if x[0] != f"pb{own}"]

    def head(n: str, size) -> str:
        if grouped and n == f"pb{own}":  # the group's blocks, the last group's up to the edge
            lo, hi = f"g{own}*{group}", f"g{own}*{group}+{group}"
            return f"  for (int {n} = {lo}; {n} < ({hi} < {size} ? {hi} : {size}); {n}++)"
        return f"  for (int {n} = 0; {n} < {size}; {n}++)"
    heads = [head(n, size) for n, size, _ in loops]
    if edge is None:
        return lines + heads + ["  {", f"    {fill()}", "  }"]
    u, n = upcast[edge], kernel.domain[edge]
    return lines + heads[:-1] + [
        "  {",
        f"    const int edge = {n}-pb{edge}*{u} < {u} ? {n}-pb{edge}*{u} : {u};",
        f"    for (int pl{edge} = 0; pl{edge} < edge; pl{edge}++) {fill(edge)}",
        f"    for (int pl{edge} = edge; pl{edge} < {u}; pl{edge}++) {target} = {zero};",
        "  }"]
