"""The analytical model behind the CPU defaults: register blocks, cache tiles and vector widths
derived from what the target is (its registers, vector width, FMA pipes and caches), in the
manner of BLIS's analytical model (Low et al., "Analytical modeling is enough for
high-performance BLIS", 2016). Nothing here is fitted to one machine.

A matmul-like kernel keeps a register block of rows x columns accumulators. Per step of the
reduce it loads the columns as vectors of the second operand and broadcasts one value of the
first operand per row, then issues rows x column-vectors FMAs:

- registers: rows * vectors accumulators + vectors operand registers + the broadcasts (two in
  flight) must fit the register file, or the compiler spills accumulators to the stack every
  step;
- latency: at least fma_units * fma_latency independent accumulators keep the FMA pipes busy;
- among the blocks that fit, the one with the most FMAs per load (rows * vectors / (rows +
  vectors)), counting the work wasted on partial blocks at the edges of the actual sizes,
  needs the least load bandwidth from L1;
- blocks within EDGE_TIE of that (3x24 and 6x16 on AVX2 both make 1.5 FMAs per load) go to
  the one with the fewest column vectors: its column sliver, the operand kept across the row
  blocks, is the narrowest, so more of it stays in L1 and fewer of its loads per FMA come from
  L2 once the sliver of the whole reduce outgrows L1 (3x24 loads 3 vectors per 9 FMAs, 6x16
  2 per 12).

Cache tiles follow BLIS: the sliver of the operand kept across the inner block loop must stay
in its cache level while the other operand streams past it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tunesearch.space.target import Cache, Target

MAX_BLOCK_ROWS = 16
MAX_BLOCK_VECTORS = 8
# blocks whose FMAs per load differ by less than this are a tie: an edge block's share of the
# work, not a difference in what the block loads
EDGE_TIE = 0.01


@dataclass(frozen=True)
class RegisterBlock:
    rows: int
    vectors: int        # column vectors
    lanes: int          # elements per vector

    columns_used: int = 0  # columns the block covers, where less than whole vectors

    @property
    def columns(self) -> int:
        return self.columns_used or self.vectors * self.lanes


def registers_needed(rows: int, vectors: int, row_panel: bool) -> int:
    """Vector registers a rows x vectors block holds live in its inner loop. Rows read from a
    packed panel are loaded together and broadcast from registers (one register each, as GCC
    does); rows read in place are broadcast from memory one at a time, two registers: one
    feeding its FMAs while the next is loaded (with one, each row waits for the last)."""
    return rows * vectors + vectors + (rows if row_panel else 2)


def register_block(target: Target, itemsize: int = 4, rows_max: int = MAX_BLOCK_ROWS,
                   columns_max: int | None = None, row_panel: bool = False,
                   sizes: tuple[int, int] | None = None, row_choices=None,
                   column_choices=None) -> RegisterBlock:
    """The register block of the model (see the module docstring). rows_max and columns_max
    bound it by the kernel's sizes, row_choices and column_choices by the space's blocks;
    sizes=(rows, columns) of the output weigh the waste of partial edge blocks."""
    lanes = target.lanes(itemsize)
    columns_max = columns_max or lanes * MAX_BLOCK_VECTORS
    rows = [r for r in (row_choices or range(1, MAX_BLOCK_ROWS + 1))
            if r <= min(rows_max, MAX_BLOCK_ROWS)] or [1]
    columns = [c for c in (column_choices or range(lanes, lanes * MAX_BLOCK_VECTORS + 1, lanes))
               if c <= min(columns_max, lanes * MAX_BLOCK_VECTORS)] or [min(lanes, columns_max)]
    busy = target.fma_units * target.fma_latency
    scored = []
    for r in rows:
        for c in columns:
            vectors = -(-c // lanes)
            if registers_needed(r, vectors, row_panel) > target.vector_registers:
                continue
            used = c / lanes  # a block narrower than a vector uses part of it
            intensity = r * used / (r + vectors)
            if sizes is not None:
                intensity *= _edge_efficiency(sizes[0], r) * _edge_efficiency(sizes[1], c)
            scored.append((r * vectors >= busy, intensity, RegisterBlock(r, vectors, lanes, c)))
    if not scored:
        return RegisterBlock(1, 1, lanes)
    pipes = max(s[0] for s in scored)
    top = max(s[1] for s in scored if s[0] == pipes)
    ties = [s for s in scored if s[0] == pipes and s[1] >= top * (1 - EDGE_TIE)]
    best = max(ties, key=lambda s: (-s[2].vectors, s[1], s[2].rows * s[2].vectors))
    return best[2]


def blocks_that_fit(target: Target, rows, vectors, itemsize: int = 4) -> list[tuple[int, int]]:
    """(rows, columns) of the register blocks, rows x vectors of them, that fit the register
    file with rows read in place: what a sweep of the space should cover."""
    lanes = target.lanes(itemsize)
    return [(r, v * lanes) for r in rows for v in vectors
            if registers_needed(r, v, False) <= target.vector_registers]


def _edge_efficiency(size: int, block: int) -> float:
    """Useful share of the work when size is covered by whole blocks of block."""
    return size / (math.ceil(size / block) * block)


def fits(cache: Cache, nbytes: int) -> bool:
    """Whether data stays in cache while another stream passes through it: BLIS keeps a
    resident block within all ways but one of each set; half the cache leaves room for the
    streams and the neighbours as well."""
    return nbytes <= cache.size // 2


def k_tile(target: Target, block: RegisterBlock, itemsize: int = 4,
           resident_rows: bool = True) -> int:
    """The reduce tile (BLIS's kc) for which the resident sliver of one operand stays in L1
    while the other streams through it: the resident sliver (rows x kc when the row blocks are
    outermost, else kc x columns) may take C ways of each L1 set, where C leaves one way for
    the stream and shares the rest in proportion to the two slivers' widths:

        C = floor((ways - 1) / (1 + other / resident)),  kc = C * sets * line / (resident * S)

    Rounded down to a power of two, at least 64."""
    l1 = target.l1d
    sets = max(1, l1.size // (l1.ways * l1.line))
    resident, other = (block.rows, block.columns) if resident_rows else (block.columns,
                                                                           block.rows)
    ways = max(1, math.floor((l1.ways - 1) / (1 + other / resident)))
    kc = ways * sets * l1.line // (resident * itemsize)
    return max(64, 1 << max(0, int(math.log2(max(kc, 1)))))


def reduce_split(target: Target, itemsize: int = 4) -> int:
    """Partial sums along a contiguous reduce: two vectors of them, so two adds are in flight
    and the sum is still one vector wide per step."""
    return 2 * target.lanes(itemsize)


def elementwise_block(target: Target, itemsize: int = 4) -> int:
    """Elements an elementwise block handles at once: four vectors, enough to hide a load's
    latency behind the others without running out of registers on any level."""
    return 4 * target.lanes(itemsize)


def single_thread_seconds(target: Target, flops: int, nbytes: int) -> float:
    """What one core needs at least for a kernel: its flops at half the FMA pipes' peak (what a
    good register block sustains), or its bytes at 8 a cycle (streaming from L2 and beyond),
    whichever is more."""
    hz = target.ghz * 1e9
    peak = target.fma_units * target.lanes() * 2 * hz
    return max(flops / (0.5 * peak), nbytes / (8 * hz))


def parallel_pays(target: Target, flops: int, nbytes: int) -> bool:
    """Whether sharing a kernel over the threads saves more than twice what starting and ending
    the parallel loop costs (the target's measured fork_join_s)."""
    if target.threads <= 1:
        return False
    saved = single_thread_seconds(target, flops, nbytes) * (1 - 1 / target.threads)
    return saved > 2 * target.fork_join_s
