"""The CPU knobs: register block (upcast) per output axis, partial sums along the reduce (split),
unroll of the innermost reduce loop, a cache tile on the first reduce axis (ktile, 0 for none),
the outer blocks whose streamed panels are filled at once (cblock, BLIS's column cache block), block
loop order, packing of operands into panels, and the parallel loops with their thread count
(shared over the CPU device's thread pool). Every knob changes the C that codegen/c.py
writes. The default's values come from the target model (cpu_default.py)."""
from __future__ import annotations

from functools import cached_property
from typing import Any

from tunesearch.space import cpu_default, cpu_matmul, cpu_model
from tunesearch.space.config import Config, ConfigError
from tunesearch.space.cpu_default import with_cblock
from tunesearch.space.cpu_matmul import CBLOCKS, KTILES
from tunesearch.space.kernel_shape import gemm_axes, packable, subsets
from tunesearch.space.panel_layout import PackInfo
from tunesearch.space.spaces import (Param, Space, check_knob_set, decode,
                                     divisors_and_blocks, encode, permutations, prod)

KNOBS = ("cblock", "ktile", "order", "pack", "parallel", "split", "threads", "unroll", "upcast")
# knobs newer than stored configs, with the value they meant; a config holds cblock only where
# it is more than 1, so every config of the releases before it is written as it was
OPTIONAL = {"ktile": 0, "cblock": 1}
UPCASTS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64)
LAST_UPCASTS = (1, 2, 4, 8, 16, 32, 64)     # and whole multiples of the vector: last_upcasts()
MAX_ACCUMULATORS = 256        # floats of accumulators per block, or the whole register file
UNROLLED_PER_ACCUMULATOR = 4  # statements in the unrolled reduce body: bounds compile time
MAX_UPCAST_AXES = 2           # each blocked axis with a tail doubles the specialized copies
MAX_SPLIT_BLOCK = 16          # with partial sums, each output lane is a vector of its own
MAX_ELEMENTWISE_BLOCK = 256
MAX_PACK_ELEMENTS = 1 << 26


def last_upcasts(lanes: int) -> tuple[int, ...]:
    """Blocks of the vector lane axis: powers of two, and one to six whole vectors."""
    return tuple(sorted(set(LAST_UPCASTS) | {lanes * m for m in range(1, 7)}))


def row_blocks(size: int) -> tuple[int, ...]:
    """Blocks of an axis before the lanes: UPCASTS, and the divisors of its size up to 8
    (UPCASTS has every block below 8 but 7). A map of side 7 * 2^k (7x7 to 112x112) has
    7 | its positions: 49 positions in blocks of 7 leave no tail where blocks of 6 take a
    ninth for the last row, and 192 columns then go in four blocks of 48, which two threads
    share evenly, not three of 64 (docs/defaults.md)."""
    divisors = {d for d in range(2, 9) if size % d == 0}
    return tuple(sorted(set(divisors_and_blocks(size, UPCASTS)) | divisors))


def matmul_block(target, rows: int, columns: int, reduce: int,
                 itemsize: int = 4) -> cpu_model.RegisterBlock:
    """The register block the lowering weighs a convolution's layouts by (lowering/conv.py), for
    a matmul of rows x columns over a reduce of that length: the default's model over UPCASTS'
    rows, without row_blocks' divisors, on which a 7x7 map's row block ties with its 49
    positions' and its convolution went to windows read in place, slower (docs/defaults.md)."""
    return cpu_model.register_block(
        target, itemsize, rows_max=rows, columns_max=columns, sizes=(rows, columns),
        row_choices=divisors_and_blocks(rows, UPCASTS),
        column_choices=divisors_and_blocks(columns, last_upcasts(target.lanes(itemsize))),
        reduce=reduce)


class CPUSpace(Space):

    def parameters(self) -> list[Param]:
        return list(self._parameters)

    @cached_property
    def _parameters(self) -> tuple[Param, ...]:
        # computed once per space: config_from reads the choices for every sampled point
        k = self.kernel
        # the last axis is the vectorized lane loop: whole vectors keep it free of epilogues
        params = [Param(f"upcast.{a}", self._upcast_choices(a)) for a in range(k.n_out)]
        orders = self._orders()
        if len(orders) > 1:
            params.append(Param("order", tuple(encode(p) for p in orders)))
        if k.n_reduce:
            params.append(Param("split", divisors_and_blocks(k.domain[-1], (1, 2, 4, 8, 16, 32))))
            params.append(Param("unroll", (1, 2, 4, 8)))
            ktiles = self._ktiles()
            if len(ktiles) > 1:
                params.append(Param("ktile", ktiles))
            packs = subsets(packable(k))
            if len(packs) > 1:
                params.append(Param("pack", tuple(encode(p) for p in packs)))
            if self._fills_column_blocks:
                params.append(Param("cblock", CBLOCKS))
        if k.n_out and self.target.threads > 1:
            params.append(Param("parallel", tuple(range(min(2, k.n_out) + 1))))
            counts = sorted({t for t in (2, 4, 8, 16, 32, 64) if t <= self.target.threads}
                            | {self.target.threads})
            params.append(Param("threads", tuple(counts), when=("parallel", (1, 2))))
        return tuple(params)

    @cached_property
    def _fills_column_blocks(self) -> bool:
        """Whether the column side of a matmul-like reduce can be packed: its panel, filled
        block by block under the column loop, can be filled several blocks at once."""
        return self._gemm is not None and self._gemm[2] in packable(self.kernel)

    def _upcast_choices(self, axis: int) -> tuple[int, ...]:
        k = self.kernel
        if axis < k.n_out - 1:
            return row_blocks(k.domain[axis])
        whole = self._whole_vectors(axis)
        return tuple(sorted(set(divisors_and_blocks(k.domain[axis], self._last_upcasts()))
                            | ({whole} if whole in self._last_upcasts() else set())))

    @cached_property
    def _gemm(self) -> tuple[int, int, int] | None:
        return gemm_axes(self.kernel)

    def _whole_vectors(self, axis: int) -> int:
        """The most a block of the axis may cover: its size, or for a matmul's column axis its
        size rounded up to whole vectors. A block of 80 over 77 columns runs its reduce on five
        whole vectors where the column panel is padded (packed), instead of four and a part
        vector GCC runs as narrower vectors and lone floats (docs/defaults.md,
        space/cpu_matmul.py)."""
        size = self.kernel.domain[axis]
        if self._gemm is None or self._gemm[1] != axis:
            return size
        lanes = self.target.lanes(self.kernel.buffers[0].dtype.itemsize)
        return -(-size // lanes) * lanes

    @cached_property
    def _max_accumulators(self) -> int:
        """Accumulators a block may hold: the whole register file in floats where that is
        more than 256 (AVX-512), else 256 (blocks past the file spill, but stay valid)."""
        t = self.target
        return max(MAX_ACCUMULATORS, t.vector_registers * t.lanes())

    @cached_property
    def _max_unrolled(self) -> int:
        return UNROLLED_PER_ACCUMULATOR * self._max_accumulators

    @cached_property
    def _reads_windows(self) -> bool:
        return cpu_matmul.reads_windows(self.kernel)

    def _last_upcasts(self) -> tuple[int, ...]:
        return last_upcasts(self.target.lanes(self.kernel.buffers[0].dtype.itemsize))

    def _orders(self) -> list[tuple[int, ...]]:
        """Block loop orders: axes of size 1 stay inside, the others are permuted (a bounded
        number of permutations, always including the default's and the naive one)."""
        domain = self.kernel.domain
        trivial = [a for a in range(self.kernel.n_out) if domain[a] == 1]
        real = [a for a in range(self.kernel.n_out) if domain[a] > 1]
        orders = [tuple(real[i] for i in p) + tuple(trivial) for p in permutations(len(real))]
        default = cpu_default.default_layout(self.kernel, self.target, self._upcast_choices,
                                             self.constants)
        for extra in (default["order"], tuple(range(self.kernel.n_out))):
            if extra not in orders:
                orders.append(extra)
        return orders

    def _ktiles(self) -> tuple[int, ...]:
        """0 (the whole reduce at once) and the cache tiles shorter than the first reduce axis,
        where operands are read again by other blocks (a matmul at heart); elsewhere a tile
        only adds traffic."""
        size = self.kernel.domain[self.kernel.n_out]
        if gemm_axes(self.kernel) is None:
            return (0,)
        return (0,) + tuple(t for t in KTILES if t < size)

    def config_from(self, values: dict[str, Any]) -> Config:
        """The config of sampled values. The register-block knobs are chosen per axis, so most
        combinations would exceed the caps on accumulators and unrolled statements: those are
        brought within the caps (the largest blocks shrunk first), so the search spends its
        trials on configs that run. Values already within the caps are taken as they are."""
        k = self.kernel
        parallel = values.get("parallel", 0)
        choices = {p.name: p.choices for p in self._parameters}
        upcast = [values.get(f"upcast.{a}", 1) for a in range(k.n_out)]
        split, unroll = values.get("split", 1), values.get("unroll", 1)
        if all(isinstance(v, int) and v >= 1 for v in upcast + [split, unroll]):
            upcast, split, unroll = self._within_caps(upcast, split, unroll, choices)
            upcast = self._within_registers(upcast, choices)
        return with_cblock(Config.make(
            upcast=tuple(upcast),
            order=decode(values["order"]) if "order" in values else tuple(range(k.n_out)),
            split=split, unroll=unroll,
            ktile=values.get("ktile", 0), pack=decode(values.get("pack", "")), parallel=parallel,
            threads=values.get("threads", 1) if parallel else 1), values.get("cblock", 1))

    def _within_caps(self, upcast: list[int], split: int, unroll: int,
                     choices: dict[str, tuple]) -> tuple[list[int], int, int]:
        k = self.kernel
        upcast = list(upcast)
        blocked = sorted((a for a in range(k.n_out) if upcast[a] > 1),
                         key=lambda a: (upcast[a], a), reverse=True)
        for a in blocked[MAX_UPCAST_AXES:]:
            upcast[a] = 1
        cap = self._max_accumulators if k.n_reduce else MAX_ELEMENTWISE_BLOCK
        while prod(upcast) > cap:
            # shrink the largest block of an axis other than the vector lanes, else the lanes
            axes = [a for a in range(k.n_out - 1) if upcast[a] > 1] or [k.n_out - 1]
            a = max(axes, key=lambda a: upcast[a])
            smaller = [c for c in choices.get(f"upcast.{a}", (1,)) if c < upcast[a]]
            upcast[a] = max(smaller, default=1)
        if k.n_reduce:
            if split > 1 and prod(upcast) > MAX_SPLIT_BLOCK:
                split = 1
            while split > 1 and prod(upcast) * split > self._max_accumulators:
                split = max(c for c in choices.get("split", (1,)) if c < split)
            while unroll > 1 and prod(upcast) * split * unroll > self._max_unrolled:
                unroll = max(c for c in choices.get("unroll", (1,)) if c < unroll)
        return upcast, split, unroll

    def _within_registers(self, upcast: list[int], choices: dict[str, tuple]) -> list[int]:
        """A matmul's register block shrunk until the model says it fits the register file
        (rows first, then column vectors): a spilling block costs a trial and runs at half
        speed. Validation still accepts spilling blocks, so stored configs stay usable."""
        gemm = gemm_axes(self.kernel)
        if gemm is None:
            return upcast
        row, col, _ = gemm
        lanes = self.target.lanes(self.kernel.buffers[0].dtype.itemsize)
        upcast = list(upcast)

        def spills() -> bool:
            vectors = -(-upcast[col] // lanes)
            return cpu_model.registers_needed(upcast[row], vectors, self._reads_windows,
                                              self.target.fma) > \
                self.target.vector_registers
        while spills():
            a = row if upcast[row] > 1 and (upcast[row] >= -(-upcast[col] // lanes)
                                            or upcast[col] <= lanes) else col
            smaller = [c for c in choices.get(f"upcast.{a}", (1,)) if c < upcast[a]]
            if not smaller:
                break
            upcast[a] = max(smaller)
        return upcast

    def adapt(self, config: Config) -> Config | None:
        """A config of a kernel of the same structure and another shape, made to fit this
        one: each register block brought to the largest choice of its axis not above it,
        operands this kernel cannot pack left unpacked, a k tile this reduce is too short for
        dropped, a column cache block where there is no column side to pack dropped, the
        threads of this target."""
        k = self.kernel
        try:
            knobs = dict(config.knobs)
            if len(knobs["upcast"]) != k.n_out:  # before the choices of axes it may not have
                return None
            upcast = tuple(max((c for c in self._upcast_choices(a) if c <= u), default=1)
                           for a, u in enumerate(knobs["upcast"]))
            pack = tuple(i for i in knobs.get("pack", ()) if i in packable(k))
            ktile = knobs.get("ktile", 0)
            ktile = ktile if k.n_reduce and 0 < ktile < k.domain[k.n_out] else 0
            parallel = knobs.get("parallel", 0) if self.target.threads > 1 else 0
            adapted = with_cblock(
                config.replace(upcast=upcast, pack=pack, ktile=ktile, parallel=parallel,
                               threads=self.target.threads if parallel else 1),
                knobs.get("cblock", 1) if self._fills_column_blocks else 1)
        except (KeyError, TypeError, ValueError, ConfigError):
            return None
        return adapted if self.validate(adapted) is None else None

    def neighbours(self, config: Config) -> list[Config]:
        """Configs one step from config along the knobs that matter most on a CPU: one
        register row or vector column more or less, the k tile halved, doubled or switched,
        one operand's packing flipped, another block loop outermost, the unroll halved or
        doubled. The search measures these right after the default, before it samples more
        widely."""
        k = self.kernel
        out: list[Config] = []
        upcast = list(config.get("upcast"))
        gemm = gemm_axes(k)
        lanes = self.target.lanes(k.buffers[0].dtype.itemsize)
        if gemm is not None:
            row, col, _ = gemm
            for axis, step in ((row, 1), (col, lanes)):
                for delta in (-step, step):
                    value = upcast[axis] + delta
                    if 1 <= value <= k.domain[axis]:
                        moved = list(upcast)
                        moved[axis] = value
                        out.append(config.replace(upcast=tuple(moved)))
        if k.n_reduce and len(self._ktiles()) > 1:
            ktile = config.get("ktile", 0)
            tiles = [t for t in self._ktiles() if t]
            if ktile:
                out += [config.replace(ktile=t) for t in (ktile // 2, ktile * 2, 0) if
                        t in self._ktiles()]
            else:
                model = cpu_matmul.model_ktile(k, self.target, config)
                out.append(config.replace(ktile=model if model in tiles else tiles[-1]))
        for index in packable(k):
            pack = tuple(sorted(set(config.get("pack")) ^ {index}))
            out.append(config.replace(pack=pack))
        order = config.get("order")
        real = [a for a in order if k.domain[a] > 1]
        for axis in real[1:]:  # another block loop outermost
            out.append(config.replace(order=(axis,) + tuple(a for a in order if a != axis)))
        if k.n_reduce:
            unroll = config.get("unroll")
            out += [config.replace(unroll=u) for u in (unroll // 2, unroll * 2) if 1 <= u <= 8]
        if self._fills_column_blocks:
            cblock = config.get("cblock", 1)
            out += [with_cblock(config, c) for c in (cblock // 2, cblock * 2) if c in CBLOCKS]
        seen = {config}
        result = []
        for c in out:
            if c not in seen and self.validate(c) is None:
                seen.add(c)
                result.append(c)
        return result

    def params_of(self, config: Config) -> dict[str, Any]:
        names = {p.name for p in self.parameters()}
        values: dict[str, Any] = {f"upcast.{a}": u for a, u in enumerate(config.get("upcast"))}
        values.update(order=encode(config.get("order")), split=config.get("split"),
                      unroll=config.get("unroll"), ktile=config.get("ktile", 0),
                      pack=encode(config.get("pack")),
                      parallel=config.get("parallel"), cblock=config.get("cblock", 1))
        if config.get("parallel"):
            values["threads"] = config.get("threads")
        return {k: v for k, v in values.items() if k in names}

    def check(self, config: Config) -> None:
        k = self.kernel
        knobs = check_knob_set(config, "cpu", KNOBS,
                               ("cblock", "ktile", "split", "unroll", "parallel", "threads"),
                               OPTIONAL)
        upcast, order = knobs["upcast"], knobs["order"]
        if not isinstance(upcast, tuple) or len(upcast) != k.n_out:
            raise ConfigError(f"upcast needs {k.n_out} values, got {upcast!r}")
        for a, u in enumerate(upcast):
            most = self._whole_vectors(a)
            if not isinstance(u, int) or not 1 <= u <= most:
                raise ConfigError(f"upcast {u!r} of axis {a} is not in 1..{most}")
        if sum(1 for u in upcast if u > 1) > MAX_UPCAST_AXES:
            raise ConfigError(f"upcast on more than {MAX_UPCAST_AXES} axes: {upcast}")
        if not isinstance(order, tuple) or sorted(order) != list(range(k.n_out)):
            raise ConfigError(f"order {order!r} is not a permutation of {k.n_out} axes")
        split, unroll = knobs["split"], knobs["unroll"]
        if not 1 <= unroll <= 32:
            raise ConfigError(f"unroll {unroll} is not in 1..32")
        if k.n_reduce:
            if not 1 <= split <= min(64, k.domain[-1]):
                raise ConfigError(f"split {split} is not in 1..{min(64, k.domain[-1])}")
            if prod(upcast) * split > self._max_accumulators:
                raise ConfigError(f"{prod(upcast) * split} accumulators exceed "
                                  f"{self._max_accumulators}")
            if split > 1 and prod(upcast) > MAX_SPLIT_BLOCK:
                raise ConfigError(f"with split {split} the block of {prod(upcast)} outputs "
                                  f"exceeds {MAX_SPLIT_BLOCK} vector accumulators")
            if prod(upcast) * split * unroll > self._max_unrolled:
                raise ConfigError(f"block {prod(upcast)} x split {split} x unroll {unroll} "
                                  f"exceeds {self._max_unrolled} unrolled statements")
            ktile = knobs["ktile"]
            if ktile != 0 and not 1 <= ktile < k.domain[k.n_out]:
                raise ConfigError(f"ktile {ktile} is not 0 (no tile) or in "
                                  f"1..{k.domain[k.n_out] - 1}")
            if ktile and prod(k.domain[:k.n_out]) > MAX_PACK_ELEMENTS:
                raise ConfigError("the partial results of a k tile are too large")
        else:
            if split != 1 or unroll != 1 or knobs["ktile"] != 0:
                raise ConfigError("split, unroll and ktile need a reduce axis")
            if prod(upcast) > MAX_ELEMENTWISE_BLOCK:
                raise ConfigError(f"a block of {prod(upcast)} exceeds {MAX_ELEMENTWISE_BLOCK}")
        if not 1 <= knobs["cblock"] <= CBLOCKS[-1] or (knobs["cblock"] > 1
                                                       and not self._fills_column_blocks):
            raise ConfigError(f"cblock {knobs['cblock']} is not 1, or in 1..{CBLOCKS[-1]} for a "
                              "matmul-like reduce whose column side can be packed")
        pack = knobs["pack"]
        if not isinstance(pack, tuple) or len(set(pack)) != len(pack):
            raise ConfigError(f"pack must be a list of distinct buffer numbers, got {pack!r}")
        allowed = packable(k)
        for index in pack:
            if index not in allowed:
                raise ConfigError(f"buffer {index!r} cannot be packed (packable: {allowed})")
        parallel, threads = knobs["parallel"], knobs["threads"]
        if not 0 <= parallel <= min(2, k.n_out):
            raise ConfigError(f"parallel {parallel} is not in 0..{min(2, k.n_out)}")
        if parallel == 0 and threads != 1:
            raise ConfigError("threads > 1 needs a parallel loop")
        if not 1 <= threads <= max(1, 4 * self.target.threads):
            raise ConfigError(f"threads {threads} is not in 1..{4 * self.target.threads}")
        for index in pack:
            if PackInfo(k, index, upcast, knobs["ktile"]).size > MAX_PACK_ELEMENTS:
                raise ConfigError(f"the panel for buffer {index} is too large")

    def naive(self) -> Config:
        n_out = self.kernel.n_out
        return Config.make(upcast=(1,) * n_out, order=tuple(range(n_out)), split=1, unroll=1,
                           ktile=0, pack=(), parallel=0, threads=1)

    def default(self) -> Config:
        """The default derived from the target model (see cpu_default.py)."""
        return cpu_default.default_config(self.kernel, self.target, self._upcast_choices,
                                          self.constants)
