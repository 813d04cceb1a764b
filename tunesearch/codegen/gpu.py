"""Lowering a kernel and a GPU config to one OpenCL C or CUDA C kernel.

The launch is 1-D: one work-group per block of outputs (local x upcast along each output axis),
each of prod(local) x group work-items. The work-item index splits into the grouped-reduce lane g
(fastest, so the `group` work-items of one output read neighbouring reduce elements) and one local
index per output axis, decomposed in `order` (its last axis fastest); the work-group index splits
the same way. Every work-item keeps a register block of accumulators, one per upcast lane; lane u
of axis a is `u * local[a]` away from lane 0. Loads of lanes past the end of an axis are clamped to
its last element (branch-free and in bounds) and only their stores are skipped. Staged buffers are
copied tile by tile into local memory by the whole work-group between two barriers. A grouped
reduce combines the partial accumulators through local memory by a tree of halvings.
"""
from __future__ import annotations

import itertools
import math
import re

from tunesearch.graph.kernel import Kernel, KNode
from tunesearch.codegen.dialect import ExprEmitter, index_expr
from tunesearch.codegen.gpu_dialects import GPUDialect
from tunesearch.space.config import Config
from tunesearch.space.gpu_space import node_axes, stage_tile


def render_gpu(kernel: Kernel, config: Config, dialect: GPUDialect,
               name: str = "kernel") -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """Source of the entry point `name` for kernel under config, with the launch it needs:
    (text, global size in work-items, work-group size), both 1-D."""
    return _Lowering(kernel, config, dialect, name).render()


class _Lowering:
    def __init__(self, kernel: Kernel, config: Config, dialect: GPUDialect, name: str):
        self.k, self.d, self.name = kernel, dialect, name
        n = self.n_out = kernel.n_out
        self.sizes = kernel.domain[:n]
        self.local = tuple(config.get("local", (1,) * n))
        self.upcast = tuple(config.get("upcast", (1,) * n))
        self.order = tuple(config.get("order", tuple(range(n))))
        self.group, self.unroll = config.get("group", 1), config.get("unroll", 1)
        self.stage, self.ktile = tuple(config.get("stage", ())), config.get("ktile", 1)
        self.extent = [l * u for l, u in zip(self.local, self.upcast)]
        self.blocks = [-(-s // e) for s, e in zip(self.sizes, self.extent)]
        self.tail = [s % e != 0 for s, e in zip(self.sizes, self.extent)]
        self.work_group = math.prod(self.local) * self.group
        self.lanes = list(itertools.product(*(range(u) for u in self.upcast)))
        self.red = kernel.reduce
        self.red_sizes = kernel.domain[n:]
        self.tiles = {b: stage_tile(kernel, b, self.local, self.upcast) for b in self.stage}
        self.axes_memo: dict[int, frozenset] = {}
        self.emitter = ExprEmitter(dialect, self._load, self._gather)
        self.emitter.axis_index = self._axis_index
        self.lane: tuple[int, ...] = ()
        self.k_index = "0"

    # ---- indices
    def _axis_index(self, axis: int) -> str:
        if axis < self.n_out:
            return f"i{axis}_{self.lane[axis]}"
        j = axis - self.n_out
        if self.red is None or self.k_index == "0":
            return "0"  # after the reduce: views have stride 0 there
        return self.k_index if j == len(self.red_sizes) - 1 else f"r{j}"

    def _tile_position(self, index: int, positions: dict[int, str]) -> str:
        axes = self.tiles[index][0]
        terms, stride = [], 1
        for a in reversed(axes):
            terms.append(f"({positions[a]})*{stride}" if stride != 1 else f"({positions[a]})")
            stride *= self.extent[a]
        return "+".join(reversed(terms)) or "0"

    def _load(self, node: KNode) -> str:
        index, view = node.arg
        if index in self.tiles:
            row = self.tiles[index][2]
            lane = {a: f"l{a}+{self.lane[a] * self.local[a]}" for a in range(self.n_out)}
            return f"tile{index}[kk*{row}+{self._tile_position(index, lane)}]"
        idx, valid = index_expr(view, self._axis_index)
        read = self.d.read(self.k.buffers[index].dtype, f"data{index}", idx)
        return f"(({valid})?{read}:{self.d.literal(0, node.dtype)})" if valid else read

    def _gather(self, node: KNode, index: str) -> str:
        buffer, view, stride, size = node.arg
        idx, _ = index_expr(view, self._axis_index)
        read = self.d.read(self.k.buffers[buffer].dtype, f"data{buffer}",
                           f"{idx}+{index}*{stride}")
        return f"(({index}>=0&&{index}<{size})?{read}:{self.d.literal(0, node.dtype)})"

    def _partial_lane(self, axis: int, u: int) -> bool:
        """Whether lane u of an axis runs past the axis's end in the last work-group."""
        rest = self.sizes[axis] % self.extent[axis]
        return rest != 0 and (u + 1) * self.local[axis] > rest

    def _emit_lanes(self, root: KNode, known: dict[int, str], lines: list[str]) -> list[str]:
        """Emit root for every lane; nodes that do not depend on a lane's axes are shared.
        In known's names, '@' stands for the lane's number (its accumulator)."""
        nodes = root.walk()
        shared: dict[tuple, str] = {}
        values = []
        for lane_no, lane in enumerate(self.lanes):
            self.lane = lane

            def key(node):
                axes = node_axes(node, self.axes_memo)
                return id(node), tuple(lane[a] for a in sorted(axes) if a < self.n_out)
            have = {id(n): shared[key(n)] for n in nodes if key(n) in shared}
            extra = {i: v.replace("@", str(lane_no)) for i, v in known.items()}
            names: dict[int, str] = {}
            values.append(self.emitter.emit(root, lines, {**have, **extra}, names))
            for node in nodes:
                if id(node) in names and id(node) not in have and id(node) not in extra:
                    shared[key(node)] = names[id(node)]
        return values

    # ---- the kernel
    def render(self) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
        d, k = self.d, self.k
        params = [d.param(b.dtype, i, i == 0) for i, b in enumerate(k.buffers)]
        body: list[str] = []
        for b in self.stage:
            body.append(d.local_array(k.buffers[b].dtype, f"tile{b}",
                                      self.tiles[b][2] * self.ktile))
        if self.group > 1:
            body.append(d.local_array(self.red.dtype, "part", self.work_group * len(self.lanes)))
        work = (self._reduce() if self.red is not None else []) + self._epilogue()
        used = set(re.findall(r"\bi\d+_\d+\b", "\n".join(work)))
        body += [line for line in self._indices()
                 if not line.startswith("const int i") or line.split()[2] in used] + work
        header = d.header({b.dtype for b in k.buffers})
        text = header + d.signature(self.name, params, self.work_group) + " {\n" + \
            "\n".join(_indent(body, 1)) + "\n}\n"
        groups = math.prod(self.blocks)
        return text, (groups * self.work_group,), (self.work_group,)

    def _indices(self) -> list[str]:
        d = self.d
        out = [f"const int lid = {d.local_id};"]
        if self.n_out:
            out.append(f"int bid = {d.group_id};")
            out.append(f"int rest = lid / {self.group};" if self.group > 1 else "int rest = lid;")
        if self.group > 1:
            out.append(f"const int g = lid % {self.group};")
        for a in reversed(self.order):
            out.append(f"const int l{a} = rest % {self.local[a]}; rest /= {self.local[a]};")
            out.append(f"const int ob{a} = (bid % {self.blocks[a]})*{self.extent[a]}; "
                       f"bid /= {self.blocks[a]};")
            out.append(f"const int o{a} = ob{a} + l{a};")
        for a in range(self.n_out):
            for u in range(self.upcast[a]):
                at = f"o{a}+{u * self.local[a]}" if u else f"o{a}"
                at = f"min({at}, {self.sizes[a] - 1})" if self._partial_lane(a, u) else at
                out.append(f"const int i{a}_{u} = {at};")
        return out

    def _reduce(self) -> list[str]:
        d, red = self.d, self.red
        acc_type = d.type_name(red.dtype)
        init = d.reduce_init(red.op, red.dtype)
        out = [f"{acc_type} acc{i} = {init};" for i in range(len(self.lanes))]
        inner = len(self.red_sizes) - 1
        for j, size in enumerate(self.red_sizes[:-1]):
            out.append(f"for (int r{j} = 0; r{j} < {size}; r{j}++) {{")
        size = self.red_sizes[-1]
        if not self.stage:
            out += self._split_loop("rk", size, "")
        else:
            tile, full = self.ktile, size - size % self.ktile
            out.append(f"for (int k0 = 0; k0 < {full}; k0 += {tile}) {{")
            out += _indent(self._tile_step(tile), 1) + ["}"]
            if full < size:  # the last, shorter tile, with its own constant trip count
                out += ["{", f"  const int k0 = {full};"]
                out += _indent(self._tile_step(size - full), 1) + ["}"]
        out += ["}"] * inner
        if self.group > 1:
            out += self._combine()
        return out

    def _split_loop(self, var: str, length: int, offset: str) -> list[str]:
        """Steps 0..length-1 of the innermost reduce, dealt round-robin to the group's
        work-items: a loop with a constant trip count (so `unroll` always applies), then one
        step for the work-items that get one more."""
        count, extra = divmod(length, self.group)
        g = "g+" if self.group > 1 else ""
        self.k_index = f"({offset}{var})" if offset else var
        step = _indent(self._step(), 1)
        out = []
        if count:
            if self.unroll > 1 and count > 1:
                out.append(self.d.unroll_pragma.format(n=min(self.unroll, count)))
            out.append(f"for (int m = 0; m < {count}; m++) {{")
            stride = f"m*{self.group}" if self.group > 1 else "m"
            out += [f"  const int {var} = {g}{stride};"] + step + ["}"]
        if extra:
            out += [f"if (g < {extra}) {{", f"  const int {var} = g+{count * self.group};"]
            out += step + ["}"]
        self.k_index = "0"
        return out

    def _tile_step(self, length: int) -> list[str]:
        """Stage one tile of `length` reduce steps, then reduce over it."""
        loads = []
        for b in self.stage:
            loads += self._stage_load(b, length)
        return loads + [self.d.barrier] + self._split_loop("kk", length, "k0+") + \
            [self.d.barrier]

    def _step(self) -> list[str]:
        """One reduce step for every lane."""
        lines: list[str] = []
        values = self._emit_lanes(self.red.src[0], {}, lines)
        for i, value in enumerate(values):
            lines.append(self.d.reduce_step(self.red.op, f"acc{i}", value))
        return lines

    def _stage_load(self, index: int, rows: int) -> list[str]:
        """The work-group copies `rows` reduce steps of a buffer's tile into local memory."""
        axes, per_step, row = self.tiles[index]
        view = next(n.arg[1] for n in self.k.loads() if n.arg[0] == index)
        dtype = self.k.buffers[index].dtype
        k_axis = len(self.k.domain) - 1
        # the dimension with the smallest stride varies fastest, so the copy is coalesced
        dims = [(k_axis, rows)] + [(a, self.extent[a]) for a in axes]
        dims.sort(key=lambda dim: abs(view.strides[dim[0]]) or 1 << 62)
        lines = [f"for (int q = lid; q < {per_step * rows}; q += {self.work_group}) {{",
                 "  int qr = q;"]
        for axis, extent in dims:
            name = "qk" if axis == k_axis else f"e{axis}"
            lines.append(f"  const int {name} = qr % {extent}; qr /= {extent};")

        def axis_index(axis: int) -> str:
            if axis == k_axis:
                return "(k0+qk)"
            if axis >= self.n_out:
                return f"r{axis - self.n_out}"
            return f"(ob{axis}+e{axis})" if axis in axes else "0"
        idx, valid = index_expr(view, axis_index)
        tests = [f"ob{a}+e{a}<{self.sizes[a]}" for a in axes if self.tail[a]]
        tests += [f"({valid})"] if valid else []
        value = self.d.read(dtype, f"data{index}", idx)
        if tests:
            value = f"({' && '.join(tests)}) ? {value} : {self.d.literal(0, dtype)}"
        position = self._tile_position(index, {a: f"e{a}" for a in axes})
        lines.append(f"  tile{index}[qk*{row}+{position}] = {value};")
        lines.append("}")
        return lines

    def _combine(self) -> list[str]:
        """The group's partial accumulators, halved into work-item g == 0 by a tree."""
        d, red, w = self.d, self.red, self.work_group
        out = [f"part[{i * w}+lid] = acc{i};" for i in range(len(self.lanes))]
        out.append(f"for (int s = {self.group // 2}; s > 0; s >>= 1) {{")
        out.append("  " + d.barrier)
        out.append("  if (g < s) {")
        for i in range(len(self.lanes)):
            out.append("    " + d.reduce_step(red.op, f"acc{i}", f"part[{i * w}+lid+s]"))
            out.append(f"    part[{i * w}+lid] = acc{i};")
        out += ["  }", "}"]
        return out

    def _epilogue(self) -> list[str]:
        """Work after the reduce, and the stores (skipped for lanes past an axis's end)."""
        d, k = self.d, self.k
        lines: list[str] = []
        known = {id(self.red): "acc@"} if self.red is not None else {}
        values = self._emit_lanes(k.expr, known, lines)
        out_dtype = k.buffers[0].dtype
        for lane, value in zip(self.lanes, values):
            self.lane = lane
            raw = {a: f"(o{a}+{lane[a] * self.local[a]})" for a in range(self.n_out)}
            idx, _ = index_expr(k.out_view, lambda axis: raw.get(axis, "0"))
            tests = [f"{raw[a]}<{self.sizes[a]}" for a in range(self.n_out)
                     if self._partial_lane(a, lane[a])]
            store = d.write(out_dtype, "data0", idx, value)
            lines.append(f"if ({' && '.join(tests)}) {store}" if tests else store)
        if self.group > 1:
            return ["if (g == 0) {"] + _indent(lines, 1) + ["}"]
        return lines


def _indent(lines: list[str], depth: int) -> list[str]:
    return ["  " * depth + line for line in lines]
