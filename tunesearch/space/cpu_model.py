"""The analytical model behind the CPU defaults: register blocks, cache tiles and vector widths
derived from what the target is (its registers, vector width, FMA pipes and caches), in the
manner of BLIS's analytical model (Low et al., "Analytical modeling is enough for
high-performance BLIS", 2016). Nothing here is fitted to one machine.

A matmul-like kernel keeps a register block of rows x columns accumulators. Per step of the
reduce it loads the columns as vectors of the second operand and broadcasts one value of the
first operand per row, then issues rows x column-vectors FMAs:

- registers: rows * vectors accumulators + vectors operand registers + the broadcast must
  fit the register file, or the compiler spills accumulators to the stack every step;
- latency: at least fma_units * fma_latency independent accumulators keep the FMA pipes busy;
- among the blocks that fit, the one with the most FMAs per load (rows * vectors / (rows +
  vectors)), counting the work wasted on partial blocks at the edges of the actual sizes,
  needs the least load bandwidth from L1;
- the column sliver of the reduce (reduce x columns) is what the row blocks read again: where
  it does not stay in L1, every step also brings columns * itemsize / line cache lines of it
  from L2, and each such line counts as one more load (at least what it costs: while a line
  crosses from L2 the L1 serves a load or two). On AVX2 this is what parts 6x16 from 3x24,
  equal on L1 loads (1.5 FMAs per load): 6x16 brings one line per 12 FMAs, 3x24 one and a
  half per 9.

Cache tiles follow BLIS: the sliver of the operand kept across the inner block loop must stay
in its cache level while the other operand streams past it.
"""
from __future__ import annotations

import math
import mmap
from dataclasses import dataclass

import numpy as np

from tunesearch.space.target import Cache, Target

PAGE = mmap.PAGESIZE  # the base page: what a TLB entry and the prefetchers' reach cover
MAX_BLOCK_ROWS = 16
MAX_BLOCK_VECTORS = 8


@dataclass(frozen=True)
class RegisterBlock:
    rows: int
    vectors: int        # column vectors
    lanes: int          # elements per vector

    columns_used: int = 0  # columns the block covers, where less than whole vectors

    @property
    def columns(self) -> int:
        return self.columns_used or self.vectors * self.lanes


def registers_needed(rows: int, vectors: int, windows: bool = False, fma: bool = True) -> int:
    """Vector registers a rows x vectors block holds live in its inner loop: the accumulators,
    the column vectors, one for the broadcast, and without FMA one for the product (SSE's
    multiply overwrites an operand, so the product goes to a temporary before its add). Each
    row's value is broadcast straight from memory (a broadcast with a memory operand), packed
    panel or not, into the same architectural register: the core renames it at every broadcast,
    so one row's FMAs never wait on the next row's load (GCC emits AVX2's 4x24 block in exactly
    16 registers, 12 accumulators, 3 column vectors and the broadcast, with nothing spilled).

    windows: the column vectors are a convolution's windows read in place. Its taps are short
    unrolled steps, each loading new vectors shifted by an element, and with no register to
    spare GCC folds those loads into the FMAs: one load per FMA instead of one per vector
    (docs/defaults.md). Such a block keeps one register spare."""
    return rows * vectors + vectors + (2 if windows else 1) + (0 if fma else 1)


def register_block(target: Target, itemsize: int = 4, rows_max: int = MAX_BLOCK_ROWS,
                   columns_max: int | None = None, sizes: tuple[int, int] | None = None,
                   row_choices=None, column_choices=None,
                   reduce: int | None = None, tail_vectors: bool = False) -> RegisterBlock:
    """The register block of the model (see the module docstring). rows_max and columns_max
    bound it by the kernel's sizes, row_choices and column_choices by the space's blocks;
    sizes=(rows, columns) of the output weigh the waste of partial edge blocks, and reduce
    (the length of the reduce) says whether the column sliver stays in L1. tail_vectors: the
    column operand is read in place, never padded to whole blocks, so the tail block runs only
    the vectors its columns need (see _lanes_used); else it costs a whole block. Such a block
    (a convolution's windows) keeps a register spare (registers_needed)."""
    lanes = target.lanes(itemsize)
    columns_max = columns_max or lanes * MAX_BLOCK_VECTORS
    rows = [r for r in (row_choices or range(1, MAX_BLOCK_ROWS + 1))
            if r <= min(rows_max, MAX_BLOCK_ROWS)] or [1]
    columns = [c for c in (column_choices or range(lanes, lanes * MAX_BLOCK_VECTORS + 1, lanes))
               if c <= min(columns_max, lanes * MAX_BLOCK_VECTORS)] or [min(lanes, columns_max)]
    if tail_vectors and any(c % lanes == 0 for c in columns):
        # whole vectors only: a part vector in the block costs at every step of the reduce,
        # and the tail block takes no more vectors than it needs (docs/defaults.md)
        columns = [c for c in columns if c % lanes == 0]
    busy = target.fma_units * target.fma_latency
    best, best_score = RegisterBlock(1, 1, lanes), None
    for r in rows:
        for c in columns:
            vectors = -(-c // lanes)
            if registers_needed(r, vectors, tail_vectors, target.fma) > target.vector_registers:
                continue
            loads = r + vectors
            if reduce is not None and not fits(target.l1d, reduce * c * itemsize):
                loads += c * itemsize / target.l1d.line  # the sliver's lines from L2
            # vector FMAs per load, times the share of their lanes that is output: a block
            # narrower than its vectors uses part of them, and so does the tail block
            intensity = r * vectors / loads * _lanes_used(
                sizes[1] if sizes else c, c, lanes, r if tail_vectors else 0, busy)
            if sizes is not None:
                intensity *= _edge_efficiency(sizes[0], r)
            score = (r * vectors >= busy, round(intensity, 6), r * vectors)
            if best_score is None or score > best_score:
                best, best_score = RegisterBlock(r, vectors, lanes, c), score
    return best


def blocks_that_fit(target: Target, rows, vectors, itemsize: int = 4) -> list[tuple[int, int]]:
    """(rows, columns) of the register blocks, rows x vectors of them, that fit the register
    file: what a sweep of the space should cover."""
    lanes = target.lanes(itemsize)
    return [(r, v * lanes) for r in rows for v in vectors
            if registers_needed(r, v, fma=target.fma) <= target.vector_registers]


def useful_accumulators(block: RegisterBlock, rows: int) -> float:
    """A register block's accumulators times the share of its rows that covers `rows` output
    rows in whole blocks: what it keeps busy, edges counted."""
    return block.rows * block.vectors * _edge_efficiency(rows, block.rows)


def _edge_efficiency(size: int, block: int) -> float:
    """Useful share of the work when size is covered by whole blocks of block."""
    return size / (math.ceil(size / block) * block)


def _lanes_used(size: int, block: int, lanes: int, rows: int, busy: int) -> float:
    """Useful share of the vector lanes when size columns are covered by blocks of block
    columns. A tail block of `rows` rows runs only the vectors its columns need where those
    still keep the FMA units busy (a 56-column row in blocks of 8 x 48: three vectors and a
    half used, as in one block of 56); fewer wait on the FMA latency, and cost a whole block
    (rows 0: always)."""
    full, tail = divmod(size, block)
    per_block = -(-block // lanes)
    tail_vectors = -(-tail // lanes)
    if tail and rows * tail_vectors < busy:
        tail_vectors = per_block
    return size / ((full * per_block + tail_vectors) * lanes)


def fits(cache: Cache, nbytes: int) -> bool:
    """Whether data stays in cache while another stream passes through it: BLIS keeps a
    resident block within all ways but one of each set; half the cache leaves room for the
    streams and the neighbours as well."""
    return nbytes <= cache.size // 2


def holds(cache: Cache, nbytes: int) -> bool:
    """Whether data that is the whole working set of a loop stays in cache: all ways but one
    of every set (the one left for what passes through)."""
    return nbytes <= cache.size * (cache.ways - 1) // cache.ways


def stay_together(cache: Cache, *slivers: int) -> bool:
    """Whether slivers live at once in cache, each taking whole ways of the sets it spans,
    with one way left for everything else (BLIS's condition for its blocks of A and B):

        sum(ceil(bytes / W)) <= ways - 1,  W = sets * line"""
    way = max(1, cache.size // (cache.ways * cache.line)) * cache.line
    return sum(-(-nbytes // way) for nbytes in slivers) <= cache.ways - 1


def k_tile(target: Target, block: RegisterBlock, itemsize: int = 4) -> int:
    """The reduce tile (BLIS's kc) for which the sliver of the outer blocks stays in L1 while
    the inner blocks' slivers stream past it. During one block's reduce its two slivers (rows
    x kc of one operand, kc x columns of the other) are both live, and each takes whole ways
    of the sets it spans; one way is left for everything else (BLIS's condition):

        ceil(rows * kc * S / W) + ceil(columns * kc * S / W) <= ways - 1,  W = sets * line

    The condition is the same whichever sliver stays. The largest power of two that meets
    it, at least 64: AVX2's 6x16 block on a 32 KiB 8-way L1 takes 2 + 4 ways at kc = 256."""
    kc = 1 << 16
    while kc > 64 and not stay_together(target.l1d, block.rows * kc * itemsize,
                                        block.columns * kc * itemsize):
        kc //= 2
    return kc


def panel_pays(target: Target, starts: np.ndarray, run: int, reads: int) -> bool:
    """Whether packing a sliver into a panel pays for itself. The sliver is read in place as
    runs of `run` bytes at byte offsets `starts` (one per step of the reduce), `reads` times
    (once per block of the other side). Packed, its runs lie end to end: the fewest lines,
    none of them sharing an L2 set with more of the others than that set can hold.

    In place it costs nothing more where its runs start on lines and spread over the sets:
    then the panel would only add a copy. It must be packed where more of its lines fall into
    one L2 set than the set holds beside a stream (all ways but one, as `fits` keeps a
    resident block): rows a power-of-two apart, which would evict each other before the next
    read. A sliver whose lines fill a few ways of every fourth set (a 56x56 map's rows, 196
    lines apart) stays. Where its runs straddle lines, the extra lines cost nothing while the
    sliver stays in L1 (`fits`: a re-read loads the same lines again); beyond L1, the extra
    lines of every read after the first must outweigh the copy (reading the sliver once and
    writing the panel)."""
    line = target.l1d.line
    lines = _lines(starts, run, line)
    if _crowded(target, lines):
        return True
    if fits(target.l1d, len(lines) * line):
        return False
    packed = -(-len(starts) * run // line)
    extra = len(lines) - packed
    return extra > 0 and (reads - 1) * extra > len(lines) + packed


def _lines(starts: np.ndarray, run: int, line: int) -> np.ndarray:
    """The cache lines that runs of `run` bytes at byte offsets `starts` touch."""
    first, last = starts // line, (starts + run - 1) // line
    spans = first[:, None] + np.arange(int((last - first).max()) + 1)
    return np.unique(spans[spans <= last[:, None]])


def _crowded(target: Target, lines: np.ndarray) -> bool:
    """Whether more of lines fall into one L2 set than it holds beside a stream."""
    sets = max(1, target.l2.size // (target.l2.ways * target.l1d.line))
    return bool(np.bincount(lines % sets).max() > max(1, target.l2.ways - 1))


def crowds_l2(target: Target, starts: np.ndarray, run: int) -> bool:
    """Whether runs of `run` bytes at byte offsets `starts` put more lines into one L2 set
    than the set holds beside a stream (all ways but one)."""
    return _crowded(target, _lines(starts, run, target.l1d.line))


# sequential streams a hardware prefetcher follows at once: 32 for Intel's L2 streamer (its
# optimization manual); AMD publishes no figure, and no CPU reports one
PREFETCH_STREAMS = 32
# a reduce this many cache lines long or shorter is mostly its writes (see writes_scatter)
SHORT_REDUCE_LINES = 2


def writes_scatter(target: Target, lines_per_step: int, output_bytes: int, reduce_bytes: int,
                   column_bytes: int) -> bool:
    """Whether a matmul's output is better written row block by row block than column block
    by column block.

    With the column blocks outermost (BLIS's order) every column step writes one line into
    each of `lines_per_step` output rows: as many write streams, each line a miss to fetch for
    ownership where the output does not stay in L2. Beyond the streams the prefetcher
    follows, each such miss waits its full latency. Row blocks outermost write a few rows at
    a time, streams the prefetcher follows, but read the column side (`column_bytes`) again
    per row block, reduce / block rows lines per line written: from L3 where it stays there
    beside the output streaming past, else from DRAM, dearer than the misses. A long reduce hides
    the write misses behind its FMAs and makes the re-reads the larger cost; a reduce of at
    most SHORT_REDUCE_LINES lines keeps them to a few streamed lines per written line, less
    than one miss that waits. The memory latency that sets this limit is not in the target
    model (no CPU reports it), so the limit is in lines. Where the whole column side stays in
    L2 the re-reads come from there, at any reduce (docs/defaults.md)."""
    return lines_per_step > PREFETCH_STREAMS and not fits(target.l2, output_bytes) and (
        fits(target.l2, column_bytes) or (
            reduce_bytes <= SHORT_REDUCE_LINES * target.l1d.line and
            fits(target.l3, column_bytes + output_bytes)))


def threads_share_rows(target: Target, row_bytes: int, column_bytes: int,
                       column_blocks: int) -> bool:
    """Whether the threads that share a matmul's outer loop are better given its row blocks
    than its column blocks.

    Column blocks outermost, each thread reads the whole row side (A, `row_bytes`: the rows
    times the reduce) beside its share of the column side; row blocks outermost, each reads
    the whole column side (B, `column_bytes`) beside its share of the rows. Per thread that is
    A + B / threads against A / threads + B: the rows go outermost where the row side is the
    larger, as long as the whole column side stays in the thread's L2, where every row block
    reads it again. One thread reads both once either way and keeps the column blocks
    outermost (BLIS's order; docs/defaults.md)."""
    return target.threads > 1 and column_blocks > 1 and column_bytes < row_bytes \
        and fits(target.l2, column_bytes)


def reduce_split(target: Target, itemsize: int = 4) -> int:
    """Partial sums along a contiguous reduce: two vectors of them, so two adds are in flight
    and the sum is still one vector wide per step."""
    return 2 * target.lanes(itemsize)


def reduce_rows(target: Target, split: int, itemsize: int = 4) -> int:
    """Outputs a contiguous reduce sums at once, `split` partial sums each: enough chains of
    adds to keep the FMA pipes busy (units x latency), their accumulators and as many loads
    within the register file."""
    vectors = max(1, split // target.lanes(itemsize))
    busy = target.fma_units * target.fma_latency
    return max(1, min(busy // vectors, target.vector_registers // (2 * vectors)))


def shared_rows(target: Target) -> tuple[int, int]:
    """(rows, vectors) of a block whose rows share each column vector of one operand and
    read the other anew (a depthwise convolution: the weight shared by the positions): two
    vectors of columns, and as many rows as keep the FMA pipes busy (units x latency
    accumulators) with those columns, a row's read and the accumulators in the register
    file. One row loaded two vectors for every FMA; four rows of two vectors ran a 3x3
    depthwise convolution over 56x56x144 1.5x faster (docs/defaults.md)."""
    vectors = 2
    busy = target.fma_units * target.fma_latency
    room = (target.vector_registers - registers_needed(0, vectors, fma=target.fma)) // vectors
    return max(1, min(-(-busy // vectors), room)), vectors


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
