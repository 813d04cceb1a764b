"""The GPU knobs (OpenCL and CUDA): the work-group shape, the register block, coalescing, the
unrolled reduce, the grouped reduce and local-memory staging. codegen/gpu.py writes each.

- `local`: work-items of a work-group along each output axis.
- `upcast`: outputs per work-item along each output axis (a register block). Lane u of a
  work-item sits `u * local` away from lane 0, so neighbouring work-items touch neighbouring
  elements (coalesced) on every lane.
- `order`: how the output axes map onto the work-item index, slowest first: the last axis of
  `order` varies fastest between neighbouring work-items (and work-groups).
- `unroll`: unroll count of the innermost reduce loop.
- `group`: the reduce is split over `group` work-items (power of two) and their partial results
  are combined through local memory by a tree.
- `stage` + `ktile`: these input buffers are copied cooperatively, `ktile` steps of the innermost
  reduce axis at a time, into local memory (between barriers) and read from there.
"""
from __future__ import annotations

from typing import Any

from tunesearch.graph.dtypes import DType, dtypes
from tunesearch.graph.kernel import Kernel, KNode
from tunesearch.graph.view import View
from tunesearch.space.config import Config, ConfigError
from tunesearch.space.kernel_shape import subsets
from tunesearch.space.spaces import (Param, Space, check_knob_set, decode,
                                     divisors_and_blocks, encode, permutations, prod)

KNOBS = ("group", "ktile", "local", "order", "stage", "unroll", "upcast")
LOCALS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
UPCASTS = (1, 2, 3, 4, 8)
GROUPS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
UNROLLS = (1, 2, 4, 8)
KTILES = (4, 8, 16, 32, 64)
MAX_UNROLL = 32
MAX_LANES = 64           # outputs a work-item holds: beyond this registers spill everywhere


def view_axes(view: View) -> set[int]:
    """The domain axes a view's values depend on: strided ones, and masked ones."""
    axes = {a for a, st in enumerate(view.strides) if st != 0}
    if view.mask is not None:
        axes |= {a for a, ((lo, hi), size) in enumerate(zip(view.mask, view.shape))
                 if lo > 0 or hi < size}
    return axes


def node_axes(node: KNode, memo: dict[int, frozenset]) -> frozenset:
    """The domain axes an expression node's value depends on."""
    if id(node) not in memo:
        if node.op in ("load", "const"):
            memo[id(node)] = frozenset(view_axes(node.arg[1]))
        elif node.op == "gather":
            memo[id(node)] = frozenset(view_axes(node.arg[1])) | node_axes(node.src[0], memo)
        else:
            memo[id(node)] = frozenset().union(*(node_axes(s, memo) for s in node.src))
    return memo[id(node)]


def compute_size(dtype: DType) -> int:
    """Bytes of one value in registers and local memory (half is widened to float)."""
    return 4 if dtype is dtypes.float16 else dtype.itemsize


def stageable(kernel: Kernel) -> tuple[int, ...]:
    """Inputs that can be staged: read inside the reduce only, through one view that moves along
    the innermost reduce axis."""
    red = kernel.reduce
    if red is None:
        return ()
    inner = {id(n) for n in red.src[0].walk()}
    views: dict[int, set] = {}
    outside: set[int] = set()
    for node in kernel.loads():
        views.setdefault(node.arg[0], set()).add(node.arg[1])
        if id(node) not in inner:
            outside.add(node.arg[0])
    k_axis = len(kernel.domain) - 1
    return tuple(i for i, vs in sorted(views.items())
                 if len(vs) == 1 and i not in outside and k_axis in view_axes(next(iter(vs))))


def stage_tile(kernel: Kernel, index: int, local, upcast) -> tuple[list[int], int, int]:
    """How a staged buffer's tile is laid out in local memory: the output axes it spans, its
    elements per reduce step, and the distance between two reduce steps. The copy walks the
    global buffer along its smallest stride; when that is the reduce axis, neighbouring work-items
    write one row apart, so each row gets one element of padding to spread them over the banks."""
    view = next(n.arg[1] for n in kernel.loads() if n.arg[0] == index)
    axes = sorted(a for a in view_axes(view) if a < kernel.n_out)
    per_step = prod(local[a] * upcast[a] for a in axes)
    strides = {a: abs(view.strides[a]) or 1 << 62 for a in axes + [len(kernel.domain) - 1]}
    along_reduce = min(strides, key=lambda a: (strides[a], a < kernel.n_out)) >= kernel.n_out
    return axes, per_step, per_step + 1 if along_reduce and per_step > 1 else per_step


def local_bytes(kernel: Kernel, config: Config) -> int:
    """Local memory a config needs: the staged tiles and the grouped-reduce scratch."""
    local, upcast = config.get("local"), config.get("upcast")
    total = 0
    for index in config.get("stage"):
        row = stage_tile(kernel, index, local, upcast)[2]
        total += row * config.get("ktile") * compute_size(kernel.buffers[index].dtype)
    if config.get("group") > 1:
        total += prod(local) * config.get("group") * prod(upcast) * \
            compute_size(kernel.reduce.dtype)
    return total


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


class GPUSpace(Space):

    def parameters(self) -> list[Param]:
        k = self.kernel
        params = []
        for a in range(k.n_out):
            params.append(Param(f"local.{a}", divisors_and_blocks(k.domain[a], LOCALS)))
            params.append(Param(f"upcast.{a}", divisors_and_blocks(k.domain[a], UPCASTS)))
        if k.n_out > 1:
            params.append(Param("order", tuple(encode(p) for p in permutations(k.n_out))))
        if k.n_reduce:
            size = k.domain[-1]
            params.append(Param("group", tuple(g for g in GROUPS if g <= size)))
            params.append(Param("unroll", UNROLLS))
            stages = [encode(s) for s in subsets(stageable(k))]
            if len(stages) > 1:
                params.append(Param("stage", tuple(stages)))
                params.append(Param("ktile", divisors_and_blocks(size, KTILES),
                                    when=("stage", tuple(stages[1:]))))
        return params

    def config_from(self, values: dict[str, Any]) -> Config:
        k = self.kernel
        stage = decode(values.get("stage", ""))
        return Config.make(
            local=tuple(values.get(f"local.{a}", 1) for a in range(k.n_out)),
            upcast=tuple(values.get(f"upcast.{a}", 1) for a in range(k.n_out)),
            order=decode(values["order"]) if "order" in values else tuple(range(k.n_out)),
            group=values.get("group", 1), unroll=values.get("unroll", 1),
            stage=stage, ktile=values.get("ktile", 1) if stage else 1)

    def params_of(self, config: Config) -> dict[str, Any]:
        names = {p.name for p in self.parameters()}
        values: dict[str, Any] = {}
        for a, (l, u) in enumerate(zip(config.get("local"), config.get("upcast"))):
            values[f"local.{a}"], values[f"upcast.{a}"] = l, u
        values.update(order=encode(config.get("order")), group=config.get("group"),
                      unroll=config.get("unroll"), stage=encode(config.get("stage")))
        if config.get("stage"):
            values["ktile"] = config.get("ktile")
        return {k: v for k, v in values.items() if k in names}

    def check(self, config: Config) -> None:
        k, t = self.kernel, self.target
        knobs = check_knob_set(config, "gpu", KNOBS, ("group", "unroll", "ktile"))
        for name in ("local", "upcast", "order", "stage"):
            value = knobs[name]
            if not isinstance(value, tuple) or not all(isinstance(v, int) for v in value):
                raise ConfigError(f"{name} must be a list of integers, got {value!r}")
        local, upcast, order = knobs["local"], knobs["upcast"], knobs["order"]
        for name, value in (("local", local), ("upcast", upcast)):
            if len(value) != k.n_out:
                raise ConfigError(f"{name} needs {k.n_out} values, got {value!r}")
        for a, (l, u) in enumerate(zip(local, upcast)):
            size = k.domain[a]
            if not 1 <= l <= size:
                raise ConfigError(f"local {l} of axis {a} is not in 1..{size}")
            if not 1 <= u <= size:
                raise ConfigError(f"upcast {u} of axis {a} is not in 1..{size}")
            if l * (u - 1) >= size:
                raise ConfigError(f"upcast {u} x local {l} of axis {a}: the last lanes are past "
                                  f"its {size} elements in every work-group")
        if sorted(order) != list(range(k.n_out)):
            raise ConfigError(f"order {order!r} is not a permutation of {k.n_out} axes")
        group, unroll, stage, ktile = knobs["group"], knobs["unroll"], knobs["stage"], \
            knobs["ktile"]
        if group < 1 or group & (group - 1):
            raise ConfigError(f"group {group} is not a power of two")
        if not 1 <= unroll <= MAX_UNROLL:
            raise ConfigError(f"unroll {unroll} is not in 1..{MAX_UNROLL}")
        if len(set(stage)) != len(stage):
            raise ConfigError(f"stage lists a buffer twice: {stage!r}")
        if not k.n_reduce:
            if group != 1 or unroll != 1 or stage or ktile != 1:
                raise ConfigError("group, unroll, stage and ktile need a reduce axis")
        else:
            size = k.domain[-1]
            if group > size:
                raise ConfigError(f"group {group} exceeds the reduce length {size}")
            allowed = stageable(k)
            for index in stage:
                if index not in allowed:
                    raise ConfigError(f"buffer {index} cannot be staged (stageable: {allowed})")
            if stage:
                if not 1 <= ktile <= size:
                    raise ConfigError(f"ktile {ktile} is not in 1..{size}")
                if group > ktile:
                    raise ConfigError(f"group {group} exceeds ktile {ktile}")
            elif ktile != 1:
                raise ConfigError("ktile needs staged buffers")
        lanes = prod(upcast)
        if lanes > min(MAX_LANES, t.max_registers):
            raise ConfigError(f"{lanes} outputs per work-item exceed the register budget "
                              f"of {min(MAX_LANES, t.max_registers)}")
        work_group = prod(local) * group
        if work_group > t.max_local_size:
            raise ConfigError(f"a work-group of {work_group} work-items exceeds the device's "
                              f"{t.max_local_size}")
        if t.max_local_dims and work_group > t.max_local_dims[0]:
            raise ConfigError(f"a work-group of {work_group} exceeds the first dimension's "
                              f"limit {t.max_local_dims[0]}")
        blocks = prod(-(-k.domain[a] // (local[a] * upcast[a])) for a in range(k.n_out))
        if blocks >= 2**31:
            raise ConfigError(f"{blocks} work-groups are more than a launch can hold")
        need = local_bytes(k, config)
        if need > t.local_memory:
            raise ConfigError(f"{need} bytes of local memory exceed the device's {t.local_memory}")

    def naive(self) -> Config:
        n = self.kernel.n_out
        return Config.make(local=(1,) * n, upcast=(1,) * n, order=tuple(range(n)), group=1,
                           unroll=1, stage=(), ktile=1)

    def default(self) -> Config:
        """A hand-written choice: a 16x16 work-group of 4x4 register blocks with staged operands
        for matmul-like kernels, a grouped reduce where the reduce reads contiguously, 256
        work-items with 4 outputs each along the contiguous axis for elementwise work. Falls back
        to smaller shapes where the kernel or device does not allow these."""
        for config in self._default_candidates():
            if self.validate(config) is None:
                return config
        return self.naive()

    def _default_candidates(self):
        k = self.kernel
        n, domain = k.n_out, k.domain
        base = self.naive().as_dict()
        loads = [node.arg[1] for node in k.loads()]
        axes = [a for a in range(n) if domain[a] > 1]
        last = axes[-1] if axes else None
        row = axes[-2] if len(axes) > 1 else None
        order = tuple(a for a in range(n) if a != last) + ((last,) if last is not None else ())

        def make(**changes):
            return Config.make({**base, "order": order, **changes})

        def spread(threads: int, upcast: list[int]) -> list[int]:
            """Work-items along the axes, innermost first, within their block counts."""
            local = [1] * n
            for a in reversed(axes):
                blocks = -(-domain[a] // upcast[a])
                local[a] = min(_pow2_floor(blocks), threads)
                while local[a] > 1 and local[a] * (upcast[a] - 1) >= domain[a]:
                    local[a] //= 2
                threads //= local[a]
                if threads <= 1:
                    break
            return local

        if not k.n_reduce:
            for lanes in (4, 2, 1):
                upcast = [1] * n
                if last is not None:
                    upcast[last] = min(lanes, domain[last])
                yield make(local=tuple(spread(256, upcast)), upcast=tuple(upcast))
            return
        size = domain[-1]
        inner_contig = any(abs(v.strides[-1]) == 1 for v in loads)
        matmul = row is not None and any(v.strides[last] != 0 for v in loads) and \
            any(v.strides[last] == 0 and v.strides[-1] != 0 for v in loads)
        if matmul:
            for tile, lanes, ktile in ((16, 4, 16), (16, 2, 16), (8, 2, 8), (8, 1, 8)):
                upcast, local = [1] * n, [1] * n
                for a in (row, last):
                    upcast[a] = min(lanes, domain[a])
                    local[a] = min(tile, _pow2_floor(-(-domain[a] // upcast[a])))
                stage = stageable(k)
                kt = min(ktile, size)
                unroll = max(u for u in UNROLLS if u <= min(4, kt))
                yield make(local=tuple(local), upcast=tuple(upcast), stage=stage,
                           ktile=kt if stage else 1, unroll=unroll)
        outputs = prod(domain[:n])
        if inner_contig or outputs < 64:
            # one work-group reduces a row: neighbouring work-items read neighbouring elements
            for group in (256, 64, 16, 1):
                group = min(group, _pow2_floor(size))
                local = spread(max(1, 256 // group), [1] * n)
                yield make(local=tuple(local), group=group, unroll=4 if group == 1 else 2)
        # reduce along a strided axis: the work-items of a group read neighbouring outputs
        for threads in (256, 64, 16):
            yield make(local=tuple(spread(threads, [1] * n)), unroll=4)
