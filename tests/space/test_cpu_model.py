"""The target model behind the CPU defaults: register blocks that fit the register file of each
ISA level, k tiles from L1, and a search that starts from the default's neighbourhood."""
from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from tests.catalogue import catalogue
from tunesearch.space import cpu_default, cpu_matmul, cpu_model
from tunesearch.space.kernel_shape import batch_axes, gemm_axes
from tunesearch.space.spaces import space_for
from tunesearch.space.target import Cache, Target

LEVELS = {
    "avx512": Target("cpu", threads=2, vector_bytes=64, vector_registers=32, isa="avx512"),
    "avx2": Target("cpu", threads=2, vector_bytes=32, vector_registers=16, isa="avx2"),
    "sse4": Target("cpu", threads=1, vector_bytes=16, vector_registers=16, fma_latency=7, fma=False,
                   isa="sse4"),
}
KERNELS = catalogue()
GEMMS = [(n, k) for n, k in KERNELS if k.n_reduce and gemm_axes(k) is not None]


@pytest.mark.parametrize("level", LEVELS)
def test_register_block_fits_and_keeps_the_pipes_busy(level):
    target = LEVELS[level]
    block = cpu_model.register_block(target, sizes=(1024, 1024))
    assert cpu_model.registers_needed(block.rows, block.vectors) <= \
        target.vector_registers
    if target.vector_registers >= 16 and target.fma_latency <= 4:
        assert block.rows * block.vectors >= target.fma_units * target.fma_latency
    # no block that fits has more FMAs per load
    best = block.rows * block.vectors / (block.rows + block.vectors)
    for rows in range(1, 17):
        for vectors in range(1, 9):
            if cpu_model.registers_needed(rows, vectors) <= target.vector_registers:
                assert rows * vectors / (rows + vectors) <= best + 1e-9 or \
                    rows * vectors < target.fma_units * target.fma_latency


def test_blocks_follow_the_register_file():
    """AVX2's 16 registers of 8 floats take 4x24 (12 accumulators, 3 column vectors and the
    broadcast: 16), 1.71 FMAs per load against BLIS's Haswell 6x16's 1.5; 5x24 would need 19
    and the 6x32 of an AVX-512 machine 29: both spill."""
    avx2 = cpu_model.register_block(LEVELS["avx2"], sizes=(1024, 1024))
    assert (avx2.rows, avx2.columns) == (4, 24)
    assert cpu_model.registers_needed(4, 3) == 16
    assert cpu_model.registers_needed(5, 3) > 16
    assert cpu_model.registers_needed(6, 4) > 16
    big = cpu_model.register_block(LEVELS["avx512"], sizes=(1024, 1024))
    assert big.columns % 16 == 0 and big.rows * big.vectors > avx2.rows * avx2.vectors
    sse = cpu_model.register_block(LEVELS["sse4"], sizes=(1024, 1024))
    assert sse.lanes == 4 and cpu_model.registers_needed(sse.rows, sse.vectors) <= 16


def test_a_column_sliver_out_of_l1_counts_its_lines():
    """3x24 and 6x16 both make 1.5 FMAs per load on AVX2 (where the rows offer no 4, which
    beats both). A short reduce keeps either column sliver in L1, and the edges decide (3x24
    wastes less of 257x4099); a reduce of 511 does not, and 6x16 brings one line from L2 per 12
    FMAs where 3x24 brings one and a half per 9 (6x8 over 3x12 on SSE's 4 lanes). 4x24 brings
    one and a half per 12, and wins either way."""
    from tunesearch.space.cpu_model import register_block
    no_four = (1, 2, 3, 6, 8)
    short = register_block(LEVELS["avx2"], sizes=(257, 4099), reduce=64, row_choices=no_four)
    assert (short.rows, short.columns) == (3, 24)
    long = register_block(LEVELS["avx2"], sizes=(257, 4099), reduce=511, row_choices=no_four)
    assert (long.rows, long.columns) == (6, 16)
    sse = register_block(LEVELS["sse4"], sizes=(257, 4099), reduce=511, row_choices=no_four)
    assert (sse.rows, sse.columns) == (6, 8)
    narrow = register_block(LEVELS["avx2"], columns_max=24, sizes=(200, 24), reduce=511,
                            row_choices=no_four)
    assert (narrow.rows, narrow.columns) == (3, 24)
    for reduce in (64, 511):
        block = register_block(LEVELS["avx2"], sizes=(257, 4099), reduce=reduce)
        assert (block.rows, block.columns) == (4, 24)


def test_a_panel_pays_where_the_sliver_in_place_would_not_stay():
    """A 16-column sliver (64-byte runs) over a reduce of 512 steps: rows a power of two apart
    (4 KiB) crowd into a few L2 sets and must be packed; rows a whole number of lines apart
    that spread over the sets cost nothing more in place; runs that straddle lines are packed
    only where the sliver outgrows L1 and enough row blocks read it again to pay for the
    copy."""
    import numpy as np
    target = LEVELS["avx2"]
    steps = np.arange(512)
    assert cpu_model.panel_pays(target, steps * 4096, 64, reads=2)
    assert not cpu_model.panel_pays(target, steps * 3136, 64, reads=100)
    # a 3x3 convolution's im2col over 56x56 positions, 128 channels deep: rows 196 lines
    # apart fill every fourth L2 set 4-5 lines deep, within the 7 ways a resident block gets
    deep = np.arange(1152)
    assert not cpu_model.panel_pays(target, deep * 12544, 64, reads=6)
    assert cpu_model.panel_pays(target, steps * 4000 + 16, 64, reads=100)
    assert not cpu_model.panel_pays(target, steps * 4000 + 16, 64, reads=2)
    # straddling runs of a short reduce stay in L1, where the extra lines cost no traffic:
    # squeezenet's first convolution (27 steps, rows 49284 bytes apart) and a 3x24 block of
    # a 1x1 convolution 128 channels deep over 56x56 positions
    assert not cpu_model.panel_pays(target, np.arange(27) * 49284, 64, reads=11)
    assert not cpu_model.panel_pays(target, np.arange(128) * 12544 + 32, 96, reads=43)


def test_k_tile_from_l1():
    """BLIS's kc: a 4x24 block on a 32 KiB 8-way L1 (ways of 4 KiB) takes 1 + 6 ways at
    kc = 256, 2 + 12 at 512. A larger L1 gives a longer tile."""
    target = LEVELS["avx2"]
    block = cpu_model.RegisterBlock(4, 3, 8)
    assert cpu_model.k_tile(target, block) == 256
    bigger = Target("cpu", l1d=Cache(64 << 10, 8))
    assert cpu_model.k_tile(bigger, block) == 512


def test_k_tile_keeps_both_slivers_in_l1():
    """BLIS's condition: a block's two slivers (6 x kc and kc x 16) take whole ways of L1's
    sets, one way left over. At kc = 256 they take 2 + 4 of 8 ways (BLIS's Haswell kc), at
    512 they would take 3 + 8; the same whichever sliver the block order keeps (a 6-row
    sliver alone in one way, kc = 128, ran 64x4096x4096 at 0.65x OpenBLAS on one thread
    where 256 ran it at 0.85x)."""
    from tunesearch.space import cpu_matmul
    from tunesearch.space.config import Config
    target = LEVELS["avx2"]
    assert cpu_model.k_tile(target, cpu_model.RegisterBlock(6, 2, 8)) == 256
    kernel = dict(GEMMS)["matmul_square"]
    row, col, _ = gemm_axes(kernel)
    for order in ((row, col), (col, row)):
        config = Config.make(upcast=(6, 16), order=order)
        assert cpu_matmul.model_ktile(kernel, target, config) == 256


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name,kernel", GEMMS, ids=[n for n, _ in GEMMS])
def test_matmul_defaults_fit_the_register_file(level, name, kernel):
    target = LEVELS[level]
    space = space_for(kernel, target)
    config = space.default()
    assert space.validate(config) is None
    row, col, b_side = gemm_axes(kernel)
    upcast = config.get("upcast")
    vectors = -(-upcast[col] // target.lanes())
    assert cpu_model.registers_needed(upcast[row], vectors) <= target.vector_registers


def _last_kernel(tensor):
    from tunesearch.graph.schedule import create_schedule
    return create_schedule([tensor.node])[-1].kernel


def _matmul(m: int, k: int, n: int):
    """The kernel of an m x k by k x n matmul of float32 zeros."""
    import numpy as np
    from tunesearch import Tensor
    return _last_kernel(Tensor(np.zeros((m, k), np.float32))
                        @ Tensor(np.zeros((k, n), np.float32)))


def test_the_default_packs_the_column_side_where_the_panel_pays():
    """Matmul 1024: B's rows are 4 KiB apart and crowd into 16 of L2's sets: packed. A 1x1
    convolution over 56x56 positions: the input's channel rows are 196 lines apart and
    spread over the sets, so in place it costs nothing more: not packed (BLAS would copy it).
    The im2col of a 3x3 convolution over the same map is: its 1152 rows spread over the sets
    too, but each step of the reduce lies on a page of its own, and the panel is filled block
    by block into L2 (densenet121's 32-channel 3x3 convolutions: 15-20% faster packed so,
    where filled whole ahead it had been 2x slower)."""
    import numpy as np
    from tunesearch import Tensor
    target = LEVELS["avx2"]
    zeros = np.zeros((1024, 1024), np.float32)
    kernel = _last_kernel(Tensor(zeros) @ Tensor(zeros))
    assert gemm_axes(kernel)[2] in space_for(kernel, target).default().get("pack")
    image = Tensor(np.zeros((1, 64, 56, 56), np.float32))
    weight = Tensor(np.zeros((256, 64, 1, 1), np.float32))
    kernel = _last_kernel(image.conv2d(weight))
    row, col, b_side = gemm_axes(kernel)
    assert kernel.domain[col] == 56 * 56  # the lowering: one axis of positions
    assert b_side not in space_for(kernel, target).default().get("pack")
    weight, im2col = np.zeros((32, 1152), np.float32), np.zeros((1152, 3136), np.float32)
    kernel = _last_kernel(Tensor(weight) @ Tensor(im2col))
    row, col, b_side = gemm_axes(kernel)
    assert kernel.domain[col] == 3136
    assert b_side in space_for(kernel, target).default().get("pack")


def test_the_default_packs_the_row_side_that_leaves_l2():
    """The rows every column block reads again are packed where they do not stay in L2: in
    size (matmul 1024: all of A, 4 MiB, with the column blocks outermost), or by crowding its
    sets (64x4096x4096: a k tile of 64 rows 16 KiB apart, 16 lines to a set of 8 ways). Not
    where they stay (a 3x3 convolution's 32x1152 weights), nor where the rows outermost keep
    one row block's sliver (64x16384x256 on one thread, whose tile's column panel stays in
    L2; 64x4096x4096's, 4 MiB, does not: its column blocks are outermost, as on two
    threads)."""
    import dataclasses
    import numpy as np
    from tunesearch import Tensor
    two = dataclasses.replace(LEVELS["avx2"], threads=2, fork_join_s=1e-6)
    target = dataclasses.replace(two, threads=1)

    def row_side_packed(kernel, target):
        row, col, b_side = gemm_axes(kernel)
        config = space_for(kernel, target).default()
        rows = [i for i in config.get("pack") if i != b_side]
        return config, bool(rows)

    square = np.zeros((1024, 1024), np.float32)
    assert row_side_packed(_last_kernel(Tensor(square) @ Tensor(square)), target)[1]
    a, b = np.zeros((64, 4096), np.float32), np.zeros((4096, 4096), np.float32)
    skinny = _last_kernel(Tensor(a) @ Tensor(b))
    config, packed = row_side_packed(skinny, two)
    assert packed and config.get("ktile") == 256
    config, packed = row_side_packed(skinny, target)
    assert packed and config.get("order")[0] == gemm_axes(skinny)[1]
    deep = np.zeros((64, 16384), np.float32)
    narrow = _last_kernel(Tensor(deep) @ Tensor(np.zeros((16384, 256), np.float32)))
    config, packed = row_side_packed(narrow, target)
    assert config.get("ktile") and not packed and config.get("order")[0] == gemm_axes(narrow)[0]
    # without a k tile (64x4096x256: both slivers of the whole reduce stay in L2) the column
    # blocks are outermost and the rows, all of A, stream past each: packed
    shallow = _last_kernel(Tensor(a) @ Tensor(b[:, :256].copy()))
    config, packed = row_side_packed(shallow, target)
    assert not config.get("ktile") and packed
    assert config.get("order")[0] == gemm_axes(shallow)[1]
    weight, im2col = np.zeros((32, 1152), np.float32), np.zeros((1152, 3136), np.float32)
    assert not row_side_packed(_last_kernel(Tensor(weight) @ Tensor(im2col)), target)[1]


def test_a_row_side_packed_on_every_call_needs_enough_column_blocks_to_read_it():
    """A row side that is not a weight is copied on every call: packed only where at least
    PER_CALL_PACK_READS column blocks read the panel. A weight's panel is made once, when a
    plan is built, so the same rows are packed as a constant whatever the column count.
    resnet50's 3x3 convolutions over 14x14 maps (196 im2col rows of 2304, read by 4 column
    blocks of 64 channels at AVX-512, with 2 MiB of L2 the rows leave beside the sliver) and
    its 1x1 convolutions reading a channels-first input with the positions as rows."""
    import numpy as np
    from tunesearch import Tensor
    target = dataclasses.replace(LEVELS["avx512"], threads=1, l2=Cache(2 << 20, 16, 64, 1))
    assert cpu_matmul.PER_CALL_PACK_READS == 8

    def packs(kernel, constants=frozenset()):
        row, col, b_side = gemm_axes(kernel)
        config = space_for(kernel, target, constants).default()
        reads = -(-kernel.domain[col] // config.get("upcast")[col])
        return reads, [i for i in config.get("pack") if i != b_side]

    for channels, packed in ((256, False), (512, True)):
        im2col = Tensor(np.zeros((196, 2304), np.float32))
        kernel = _last_kernel(im2col @ Tensor(np.zeros((2304, channels), np.float32)))
        reads, rows = packs(kernel)
        assert (reads >= 8, bool(rows)) == (packed, packed), (channels, reads, rows)
        assert packs(kernel, frozenset({1}))[1] == [1]  # a weight: packed once, whatever
        channels_first = Tensor(np.zeros((1024, 49), np.float32)).T  # positions x channels
        kernel = _last_kernel(channels_first @ Tensor(np.zeros((1024, channels), np.float32)))
        reads, rows = packs(kernel)
        assert bool(rows) == packed, (channels, reads, rows)
        assert packs(kernel, frozenset({1}))[1] == [1]


def test_a_short_reduce_with_many_output_rows_writes_them_row_block_by_row_block():
    """A 3x3 convolution of an RGB image (64 channels, a 27-long reduce, 12321 positions):
    BLIS's order would write a line into each of the 64 channel rows per column step, more
    streams than a prefetcher follows, into an output that leaves L2; the row blocks go
    outermost and the positions innermost. Not where the reduce is long (a 64-deep 1x1
    convolution to 256 channels), the rows few (16 channels), the output small enough for L2
    (512 positions), or where the column side read again per row block would not stay in L3
    beside the output (224x224 positions). A long reduce too where the column side stays in L2
    (the 64-deep 1x1 convolution beside a 2 MiB L2)."""
    import dataclasses
    import numpy as np
    from tunesearch import Tensor
    target = dataclasses.replace(LEVELS["avx2"], l3=Cache(32 << 20, 16, shared_by=2))  # Zen 3

    def order(rows, reduce, cols, on=target):
        kernel = _last_kernel(Tensor(np.zeros((rows, reduce), np.float32))
                              @ Tensor(np.zeros((reduce, cols), np.float32)))
        row, col, _ = gemm_axes(kernel)
        config = space_for(kernel, on).default()
        return config.get("order"), row, col

    got, row, col = order(64, 27, 12321)
    assert got[0] == row and got[1] == col
    for shape in ((256, 64, 3136), (16, 16, 3025), (64, 16, 512), (64, 27, 50176)):
        got, row, col = order(*shape)
        assert got[0] == col, shape
    mib = 1 << 20
    assert cpu_model.writes_scatter(target, 33, mib, 128, mib)
    assert not cpu_model.writes_scatter(target, 32, mib, 128, mib)  # the prefetcher follows
    assert not cpu_model.writes_scatter(target, 33, mib // 8, 128, mib)  # stays in L2
    assert not cpu_model.writes_scatter(target, 33, mib, 129, mib)  # the FMAs hide the misses
    # the column side read again per row block would come from DRAM: vgg19's first conv
    assert not cpu_model.writes_scatter(target, 64, 12 * mib, 108, 5 * mib)
    # at any reduce where the column side stays in L2: the 64-deep 1x1 convolution's 0.8 MiB
    # of input beside a 2 MiB L2 (the AVX-512 Xeon), re-read from there by every row block
    xeon = dataclasses.replace(target, l2=Cache(2 << 20, 16))
    got, row, col = order(256, 64, 3136, on=xeon)
    assert got[0] == row and got[1] == col
    assert cpu_model.writes_scatter(xeon, 33, 4 * mib, 4096, mib)
    assert not cpu_model.writes_scatter(xeon, 33, 4 * mib, 4096, mib + 1)


@pytest.mark.parametrize("level", LEVELS)
def test_sampled_matmul_blocks_never_spill(level):
    target = LEVELS[level]
    rng = random.Random(2)
    for name, kernel in GEMMS:
        space = space_for(kernel, target)
        row, col, _ = gemm_axes(kernel)
        for _ in range(100):
            values = {}
            for p in space.parameters():
                if p.when is None or values.get(p.when[0]) in p.when[1]:
                    values[p.name] = rng.choice(p.choices)
            config = space.config_from(values)
            assert space.validate(config) is None
            upcast = config.get("upcast")
            vectors = -(-upcast[col] // target.lanes())
            assert cpu_model.registers_needed(upcast[row], vectors) <= \
                target.vector_registers or upcast[row] == 1, (name, config)


@pytest.mark.parametrize("name,kernel", KERNELS, ids=[n for n, _ in KERNELS])
def test_neighbours_are_valid_distinct_and_one_step_away(name, kernel):
    space = space_for(kernel, LEVELS["avx2"])
    default = space.default()
    near = space.neighbours(default)
    assert default not in near and len(near) == len(set(near))
    for config in near:
        assert space.validate(config) is None
        changed = {k for k in dict(config.knobs) if config.get(k) != default.get(k)}
        assert len(changed) == 1, (config, default)
    if gemm_axes(kernel) is not None and kernel.domain[gemm_axes(kernel)[0]] > 1:
        assert any(c.get("upcast") != default.get("upcast") for c in near)


def test_vector_multiples_are_column_choices():
    name, kernel = GEMMS[0]
    _, col, _ = gemm_axes(kernel)
    for target in LEVELS.values():
        choices = {p.name: p.choices for p in space_for(kernel, target).parameters()}
        lanes = target.lanes()
        wanted = {lanes * m for m in (1, 2, 3) if lanes * m <= kernel.domain[col]}
        assert wanted <= set(choices[f"upcast.{col}"]), (target.isa, choices)


def test_threads_only_where_they_pay_for_their_start():
    """A kernel is shared over the threads only where one thread's time (from the model) less
    its share exceeds twice the measured cost of a parallel loop."""
    from tests.search.kernels import matmul
    quiet = Target("cpu", threads=2, fork_join_s=4e-6)
    small, big = matmul(16, 16, 16), matmul(256, 256, 256)
    assert space_for(small, quiet).default().get("parallel") == 0
    assert space_for(big, quiet).default().get("parallel") >= 1
    assert space_for(big, quiet).default().get("threads") == 2
    loaded = Target("cpu", threads=2, fork_join_s=1.0)   # threads that wake a second late
    assert space_for(big, loaded).default().get("parallel") == 0
    assert not cpu_model.parallel_pays(Target("cpu", threads=1), 10**12, 10**12)


def test_the_default_packs_a_column_side_whose_steps_lie_pages_apart():
    """A convolution's im2col copy read as the column side: each step of the reduce lies a
    row of the copy (a page or more) away from the last, and every row block reads the
    sliver again. Where the sliver leaves L1 the default packs it (filled block by block,
    under the column blocks outermost); where it stays there (a first convolution's 27 steps),
    or the rows lie closer than a page and the block's runs cover whole lines (AVX-512's
    48 or 64 columns; AVX2's 24 straddle them, and cpu_model.panel_pays packs those), it reads
    it in place, unless they lie half a page apart or more and enough row blocks read it
    (HALF_PAGE_PACK_READS)."""
    import numpy as np
    from tunesearch import Tensor

    def column_side_packed(rows, depth, positions, level="avx2"):
        weight = np.zeros((rows, depth), np.float32)
        im2col = np.zeros((depth, positions), np.float32)
        kernel = _last_kernel(Tensor(weight) @ Tensor(im2col))
        row, col, b_side = gemm_axes(kernel)
        config = space_for(kernel, LEVELS[level]).default()
        return b_side in config.get("pack"), config.get("order")[0] == col

    assert column_side_packed(128, 1152, 3136) == (True, True)    # 12 KiB a step, 1152 steps
    assert column_side_packed(16, 27, 1024)[0] is False            # 27 steps stay in L1
    # 4032 bytes a step: 8 row blocks read in place, 16 packed
    assert column_side_packed(64, 1152, 1008, "avx512")[0] is False
    assert column_side_packed(128, 1152, 1008, "avx512")[0] is True


@pytest.mark.parametrize("level", LEVELS)
def test_an_elementwise_default_writes_its_output_in_order(level):
    """An im2col copy laid out [positions, channel x kernel] (a convolution with the channels
    on the lanes): its loops run in the output's memory order, whatever axis has the most
    blocks, and its 3-wide innermost axis, shorter than a vector, is one block whole (no
    tail). The zoo models check such copies' output against onnxruntime."""
    import numpy as np
    from tunesearch import Tensor
    from tunesearch.graph.schedule import create_schedule
    x = np.random.default_rng(8).standard_normal((1, 24, 9, 9)).astype(np.float32)
    w = np.random.default_rng(9).standard_normal((24 * 9, 40)).astype(np.float32)
    cols = Tensor(x).windows([3, 3], [1, 1], [1, 1], [(1, 1), (1, 1)], [9, 9])
    cols = cols.reshape(1, 24, 9, 9, 3, 3).permute(0, 2, 3, 1, 4, 5).reshape(81, 24 * 9)
    items = create_schedule([(cols @ Tensor(w)).node])
    item = next(i for i in items if i.kernel.n_reduce == 0 and i.kernel.out_shape[-1] == 3)
    kernel = item.kernel
    config = space_for(kernel, LEVELS[level]).default()
    strides = kernel.out_view.strides
    order = [a for a in config.get("order") if kernel.domain[a] > 1]
    assert [abs(strides[a]) for a in order] == sorted((abs(strides[a]) for a in order),
                                                      reverse=True)
    assert config.get("upcast")[-1] == 3
    assert order[-1] == kernel.n_out - 1


@pytest.mark.parametrize("level", LEVELS)
def test_an_elementwise_block_over_a_short_last_axis_takes_runs_of_the_axis_before(level):
    """A copy whose last axis is a few elements that every read gathers (an image's 3
    channels laid out last from channels first, padded for a strided convolution): the block
    takes runs along the axis the reads run along, about an elementwise block in all, so one
    call of it handles that many elements, not three (each block a call: 52,441 calls of 3
    floats took 2.4x as long as 3,435 of 48). Axes with room for fewer runs keep one run (a
    window copy's 3 x 3 taps: test_an_elementwise_default_writes_its_output_in_order)."""
    import numpy as np
    from tunesearch import Tensor
    from tunesearch.graph.schedule import create_schedule
    x = np.random.default_rng(3).standard_normal((1, 3, 224, 224)).astype(np.float32)
    value = Tensor(x).pad(((0, 0), (0, 0), (2, 3), (2, 3))).permute(0, 2, 3, 1) * 1.0
    item = next(i for i in create_schedule([value.node]) if i.kernel.out_shape == (1, 229, 229, 3))
    target = LEVELS[level]
    upcast = space_for(item.kernel, target).default().get("upcast")
    block = cpu_model.elementwise_block(target)
    assert upcast[-1] == 3 and block // 2 < upcast[-2] * 3 <= block, upcast
    np.testing.assert_array_equal(
        value.numpy(), np.pad(x, ((0, 0), (0, 0), (2, 3), (2, 3))).transpose(0, 2, 3, 1))


def test_an_outer_loop_of_one_block_shares_the_next_over_the_threads():
    """A convolution that reads its windows in place over rows of 48 columns: its column
    blocks (outermost) are one 48-wide block, so the threads share the rows below it (a
    collapsed loop), not nothing."""
    import numpy as np
    from tunesearch import Tensor
    x = np.zeros((1, 128, 48, 48), np.float32)
    w = np.zeros((32, 128, 3, 3), np.float32)
    cols = Tensor(x).windows([3, 3], [1, 1], [1, 1], [(1, 1), (1, 1)], [48, 48])
    cols = cols.reshape(1, 1, 128, 48, 48, 3, 3)
    kernel = _last_kernel((cols * Tensor(w).reshape(1, 32, 128, 1, 1, 3, 3)).sum((2, 5, 6)))
    config = space_for(kernel, LEVELS["avx512"]).default()
    order, upcast = config.get("order"), config.get("upcast")
    assert -(-kernel.domain[order[0]] // upcast[order[0]]) == 1
    assert config.get("parallel") == 2 and config.get("threads") == 2


def test_outer_blocks_that_share_unevenly_share_the_next_loop_too():
    """A 1x1 convolution over 28x28 positions (64 channels, a 512-deep reduce, its input read
    in place) in 48-column blocks: 17 column blocks give one thread 9 and the other 8, so the
    threads share the column and row loops collapsed; over 768 positions (16 blocks) the
    column loop alone."""
    import numpy as np
    from tunesearch import Tensor
    # a Sapphire Rapids core's caches: B's slivers stay in L2, read in place
    target = dataclasses.replace(LEVELS["avx512"], fork_join_s=1e-6, l1d=Cache(48 << 10, 12),
                                 l2=Cache(2 << 20, 16), l3=Cache(105 << 20, 15, shared_by=56))
    for positions, parallel in ((784, 2), (768, 1)):
        w, x = np.zeros((64, 512), np.float32), np.zeros((512, positions), np.float32)
        config = space_for(_last_kernel(Tensor(w) @ Tensor(x)), target).default()
        order, upcast = config.get("order"), config.get("upcast")
        assert (order[0], upcast[order[0]], config.get("pack")) == (1, 48, ()), config
        assert config.get("parallel") == parallel and config.get("threads") == 2, config
    assert not cpu_default.uneven_share(16, 2) and cpu_default.uneven_share(17, 2)
    assert not cpu_default.uneven_share(33, 2) and not cpu_default.uneven_share(17, 1)


@pytest.mark.parametrize("level", ["avx512", "avx2", "sse4"])
def test_a_weight_whose_rows_lie_lines_apart_is_packed_once(level):
    """resnet50's 3x3 convolutions over 28x28 maps as a matmul: the weight (128x1152, rows 4.5
    KiB apart) is the row side. Where the plan knows it is a weight (packed once, when it is
    built) the default reads it as a panel, one stream, instead of a line per row of the block
    at every step; the same matmul whose first operand comes with each call reads it in place
    (its copy would be made per call, and these rows stay in L2). A weight whose rows are
    closer than a line (8 floats a row) stays as it is."""
    target = dataclasses.replace(LEVELS[level], l1d=Cache(32 << 10, 8), l2=Cache(1 << 20, 8))

    def pack(m, k, n, constants):
        kernel = _matmul(m, k, n)
        a_side = 3 - gemm_axes(kernel)[2]
        space = space_for(kernel, target, constants)
        config = space.default()
        assert space.validate(config) is None
        return a_side in config.get("pack"), a_side

    _, a_side = pack(128, 1152, 784, frozenset())
    assert pack(128, 1152, 784, frozenset({a_side})) == (True, a_side)
    assert pack(128, 1152, 784, frozenset()) == (False, a_side)
    assert pack(128, 8, 784, frozenset({a_side})) == (False, a_side)


def test_a_column_sliver_that_l1_holds_is_read_in_place_though_its_steps_lie_pages_apart():
    """An im2col copy as the column side, its rows (the reduce steps) 49 KiB apart: the first
    7x7 convolution's 147 steps of 48 columns (28 KiB) stay in a 32 KiB L1 in all its ways but
    one, beside the weight's panel, and are re-read there by every row block: no copy. A 3x3
    convolution's 1152 steps (216 KiB) would be re-read from L2 at a page a step: packed."""
    target = dataclasses.replace(LEVELS["avx512"], threads=1, l1d=Cache(32 << 10, 8),
                                 l2=Cache(1 << 20, 8))

    def packs(m, k, n):
        kernel = _matmul(m, k, n)
        _, col, b_side = gemm_axes(kernel)
        config = space_for(kernel, target, frozenset({3 - b_side})).default()
        assert config.get("upcast")[col] == 48, config
        return b_side in config.get("pack")
    assert not packs(64, 147, 12544)
    assert packs(128, 1152, 12544)


@pytest.mark.parametrize("level", ["avx512", "avx2"])
def test_windows_read_in_place_take_whole_vectors_and_a_tail_block(level):
    """A convolution reading its windows in place over rows of 56 columns (3.5 vectors at
    AVX-512): the register block spans whole vectors of the row, the rest a tail block that
    runs only the vectors it needs, and its channel block divides the 32 channels. A matmul's
    column block is chosen as before (its panel may be padded to whole blocks)."""
    import numpy as np
    from tunesearch import Tensor
    from tunesearch.space import cpu_model
    target = LEVELS[level]
    lanes = target.lanes(4)
    x = np.zeros((1, 128, 56, 56), np.float32)
    w = np.zeros((32, 128, 3, 3), np.float32)
    cols = Tensor(x).windows([3, 3], [1, 1], [1, 1], [(1, 1), (1, 1)], [56, 56])
    cols = cols.reshape(1, 1, 128, 56, 56, 3, 3)
    kernel = _last_kernel((cols * Tensor(w).reshape(1, 32, 128, 1, 1, 3, 3)).sum((2, 5, 6)))
    upcast = space_for(kernel, target).default().get("upcast")
    assert upcast[-1] % lanes == 0 and upcast[-1] < 56 + lanes, upcast
    assert 32 % upcast[2] == 0, upcast
    # the share of lanes used: 56 columns in blocks of 48 take 3 + 1 vectors of 16 at AVX-512
    assert cpu_model._lanes_used(56, 48, 16, rows=8, busy=8) == 56 / 64
    # a tail too small to keep the FMA units busy costs a whole block
    assert cpu_model._lanes_used(56, 48, 16, rows=4, busy=8) == 56 / 96
    assert cpu_model._lanes_used(56, 48, 16, rows=0, busy=8) == 56 / 96


@pytest.mark.parametrize("level", LEVELS)
def test_a_depthwise_convolution_along_the_channels_blocks_the_positions_too(level):
    """A depthwise convolution read along the channels (the lanes), its weight the same for
    every position: the block spans several positions of a row, so each weight vector is
    loaded once for all of them, with accumulators enough to keep the FMA pipes busy and the
    block within the register file (or as many as it holds). A max pool (no weight) keeps its
    block on the lanes."""
    from tunesearch import Tensor
    target = LEVELS[level]
    lanes = target.lanes(4)
    x = Tensor(np.zeros((1, 16, 16, 96), np.float32)).pad([(0, 0), (1, 1), (1, 1), (0, 0)])
    wins = x.as_strided([1, 16, 16, 96, 3, 3], [0, 18 * 96, 96, 1, 18 * 96, 96])
    w = Tensor(np.zeros((3, 3, 96), np.float32)).permute(2, 0, 1).reshape(1, 1, 1, 96, 3, 3)
    kernel = _last_kernel((wins * w).sum((4, 5)))
    upcast = space_for(kernel, target).default().get("upcast")
    rows, columns = upcast[2], upcast[3]
    assert rows > 1 and columns % lanes == 0, upcast
    vectors = columns // lanes
    accumulators = rows * vectors
    # the pipes busy, or no room for another row (SSE4's latency of 7 wants 14 chains)
    assert accumulators >= target.fma_units * target.fma_latency or \
        accumulators + 2 * vectors + 1 > target.vector_registers, upcast
    assert accumulators + vectors + 1 <= target.vector_registers, upcast
    pool = _last_kernel(wins.max((4, 5)))
    assert space_for(pool, target).default().get("upcast")[2] == 1


@pytest.mark.parametrize("level", ["avx512", "avx2", "sse4"])
def test_a_contiguous_reduce_sums_several_outputs_at_once(level):
    """A matrix-vector product (a classifier's 1000x1024 weight times a vector): partial sums
    along the contiguous reduce, for as many rows at once as keep the adds in flight within
    the registers; on this machine the result matches numpy."""
    import numpy as np
    from tunesearch import Tensor
    from tunesearch.space import cpu_model
    target = LEVELS[level]
    rng = np.random.default_rng(3)
    w = rng.standard_normal((1000, 1024)).astype(np.float32)
    v = rng.standard_normal((1024,)).astype(np.float32)
    kernel = _last_kernel((Tensor(w) * Tensor(v).reshape(1, 1024)).sum(1))
    config = space_for(kernel, target).default()
    split, upcast = config.get("split"), config.get("upcast")
    vectors = split // target.lanes(4)
    rows = cpu_model.reduce_rows(target, split)
    assert upcast[-1] == rows > 1, config
    assert rows * vectors <= target.fma_units * target.fma_latency
    assert 2 * rows * vectors <= target.vector_registers
    # run on this machine under its own default (the same rule at its level)
    got = (Tensor(w) * Tensor(v).reshape(1, 1024)).sum(1).numpy()
    np.testing.assert_allclose(got, w @ v, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("level", ["avx512", "avx2", "sse4"])
def test_a_matrix_laid_across_the_reduce_puts_the_lanes_on_the_outputs(level):
    """The same product with the matrix laid out [1024, 1000] (densenet121's classifier, a
    1x1 convolution over a 1x1 map, reads its weight so): partial sums along the reduce would
    gather it a lane at a time, so the lanes run over the outputs, along its rows, and the
    reduce steps one by one; on this machine the result matches numpy."""
    import numpy as np
    from tunesearch import Tensor
    target = LEVELS[level]
    rng = np.random.default_rng(4)
    w = rng.standard_normal((1024, 1000)).astype(np.float32)
    v = rng.standard_normal((1024,)).astype(np.float32)

    def product():
        return (Tensor(v).reshape(1024, 1) * Tensor(w)).sum(0)
    config = space_for(_last_kernel(product()), target).default()
    assert config.get("split") == 1, config
    assert config.get("upcast")[-1] >= target.lanes(4), config
    np.testing.assert_allclose(product().numpy(), v @ w, rtol=1e-4, atol=1e-3)


def test_a_streamed_panel_whose_steps_lie_pages_apart_is_filled_several_blocks_at_once():
    """The skinny 64x4096x4096: B's rows lie 16 KiB apart, and its panel is filled block by
    block under the column loop. The default fills several column blocks at once (cblock), as
    many as fit twice in a quarter... half of L2 with the next group's, under a k tile where one
    block's panel of the whole reduce leaves no room for two. The groups share evenly over the
    threads; B's rows closer than a page (1000 columns), a weight (packed once by the plan)
    and a panel filled whole ahead (the row blocks outermost) take none."""
    xeon = dict(l1d=Cache(48 << 10, 12), l2=Cache(2 << 20, 16))
    zen3 = dict(l1d=Cache(32 << 10, 8), l2=Cache(512 << 10, 8))

    def default(m, k, n, level, caches, threads=1, constants=frozenset()):
        target = dataclasses.replace(LEVELS[level], threads=threads, fork_join_s=1e-6,
                                     **caches)
        kernel = _matmul(m, k, n)
        config = space_for(kernel, target, constants).default()
        assert space_for(kernel, target, constants).validate(config) is None
        return kernel, target, config

    kernel, target, config = default(64, 4096, 4096, "avx2", xeon)
    row, col, b_side = gemm_axes(kernel)
    assert config.get("order")[0] == col and b_side in config.get("pack")
    # A's 64 rows of the whole reduce (1 MiB) stay in L2 and take its half: no room for a
    # group. At a 1024 tile A's rows are 256 KiB and a block's panel 96 KiB: four blocks
    # (twice 384 KiB beside 256 KiB in 1 MiB), not eight
    assert (config.get("ktile"), config.get("cblock")) == (1024, 4), config
    assert cpu_matmul.fill_group(target, 1024 * 24 * 4, 64 * 1024 * 4) == 4
    assert cpu_matmul.fill_group(target, 4096 * 24 * 4, 64 * 4096 * 4) == 1
    # rows that leave L2 anyway (matmul 1024's 4 MiB of A) stream past: not counted
    assert cpu_matmul.fill_group(target, 1024 * 24 * 4, 1024 * 1024 * 4) == 4
    # AVX-512's 48 columns: twice the panel, half the blocks
    assert default(64, 4096, 4096, "avx512", xeon)[2].get("cblock") == 2
    # a Zen 3's 512 KiB L2: the slivers of the whole reduce leave it, so the model's k tile
    # (256 for 4x24 in a 32 KiB 8-way L1) and as many blocks of it as fit
    _, zen, config = default(64, 4096, 4096, "avx2", zen3)
    assert (config.get("ktile"), config.get("cblock")) == (256, 4), config
    assert cpu_matmul.fill_group(zen, 256 * 24 * 4, 64 * 256 * 4) == 4
    # SSE4's 12 columns: the same 1024 tile, blocks half the size, twice as many fit
    assert default(64, 4096, 4096, "sse4", xeon)[2].get("cblock") == 8
    # two threads share the groups: 171 blocks in groups of 4 are 43 groups, 22 and 21
    assert default(64, 4096, 4096, "avx2", xeon, threads=2)[2].get("cblock") == 4
    assert cpu_default.uneven_groups(262, 8, 2) and not cpu_default.uneven_groups(262, 4, 2)
    # 46 blocks share evenly over two threads only one by one (groups of 2: 12 and 11 groups,
    # 24 blocks against 23): no group, and no tile taken for one
    one = default(64, 8192, 1088, "avx2", xeon)[2]
    two = default(64, 8192, 1088, "avx2", xeon, threads=2)[2]
    assert (one.get("cblock"), one.get("ktile")) == (4, 1024), one
    assert (two.get("cblock", 1), two.get("ktile"), two.get("parallel")) == (1, 0, 1), two
    # B's rows 4000 bytes apart: each block's fill reads its run on the page of the last
    assert default(64, 4096, 1000, "avx2", xeon)[2].get("cblock", 1) == 1
    # a weight is packed once, when the plan is built: nothing is filled in the call. It
    # comes from memory (64 MiB) under rows whose sliver leaves L1: walked by the model's k
    # tile (the weight's next tile fetched beside the arithmetic)
    kernel, target, config = default(64, 4096, 4096, "avx2", xeon,
                                     constants=frozenset([b_side]))
    assert config.get("cblock", 1) == 1, config
    assert config.get("ktile") == cpu_matmul.model_ktile(kernel, target, config) == 256


def test_rows_that_stay_in_l2_alone_but_not_beside_a_column_sliver_take_a_k_tile():
    """A 3x3 convolution over 54 positions as a matmul (54 by 4608 by 512 channels, the weight
    the column side): every column block of 6x64 reads all 54 rows again, 1 MiB, which a 2 MiB
    L2 keeps alone but not beside a column block's sliver of the whole reduce (1.2 MiB): the
    largest k tile for which both stay (1024). resnet50's over 7x7 maps, 49 positions, takes
    blocks of 7x48 (cpu_space.row_blocks), whose slivers (0.9 and 0.9 MiB) stay together: its
    weight is walked by the model's k tile (128) instead. Not where they stay
    untiled (its 1x1 convolutions, 1024 deep), nor where the rows alone leave L2 (196 rows of
    2304: they stream from L3 as a panel either way). The 1x1 convolution's weight (8 MiB)
    comes from memory, and a row block's sliver of its reduce (24 KiB) leaves this target's
    32 KiB L1 beside the stream: walked by the model's k tile instead (not on a 48 KiB L1)."""
    target = dataclasses.replace(LEVELS["avx512"], threads=1, l2=Cache(2 << 20, 16))

    def tile(m, k, n):
        kernel = _matmul(m, k, n)
        _, col, b_side = gemm_axes(kernel)
        space = space_for(kernel, target, frozenset({b_side}))
        config = space.default()
        assert space.validate(config) is None
        assert config.get("order")[0] == col  # the column blocks outermost
        return config.get("ktile")
    assert tile(54, 4608, 512) == 1024
    assert tile(49, 4608, 512) == 128
    assert tile(49, 1024, 2048) == 64
    assert tile(196, 2304, 256) == 0
    target = dataclasses.replace(target, l1d=Cache(48 << 10, 12))
    assert tile(49, 1024, 2048) == 0


@pytest.mark.parametrize("level", ["avx512", "avx2", "sse4"])
def test_a_weight_on_the_column_side_is_packed_once_for_every_row_block(level):
    """resnet50's 1x1 convolutions over 14x14 maps as a matmul (196 positions by 1024 by 256
    channels, the weight the column side, its rows 1 KiB apart): packed where the plan knows
    it is a weight (made once, when the plan is built), at every ISA level; at AVX-512, whose
    blocks of 64 columns are whole cache lines, read in place where it comes with each call
    (a copy per call would not pay there); not where one row block reads it all."""
    target = dataclasses.replace(LEVELS[level], threads=1, l1d=Cache(48 << 10, 12),
                                 l2=Cache(2 << 20, 16))  # the Xeon's

    def packed(m, constant):
        kernel = _matmul(m, 1024, 256)
        _, col, b_side = gemm_axes(kernel)
        space = space_for(kernel, target, frozenset({b_side} if constant else ()))
        config = space.default()
        assert space.validate(config) is None
        return b_side in config.get("pack"), config.get("upcast")
    weight_packed, (rows, _) = packed(196, constant=True)
    assert weight_packed
    if level == "avx512":
        assert not packed(196, constant=False)[0]
    assert not packed(rows, constant=True)[0]  # one row block


def test_a_sliver_half_a_page_a_step_is_packed_where_many_row_blocks_read_it():
    """A 3x3 convolution over a 28x28 map as a matmul: its im2col copy's rows (the reduce
    steps) lie 3 KiB apart, one or two to a page, and a sliver of 1152 steps leaves L1. With
    128 output channels (16 row blocks of 8) the panel, made on every call, is packed; with
    64 (8 row blocks) the copy is not read often enough and the sliver is read in place."""
    target = dataclasses.replace(LEVELS["avx512"], threads=1, l1d=Cache(48 << 10, 12),
                                 l2=Cache(2 << 20, 16))  # the Xeon's
    assert cpu_matmul.HALF_PAGE_PACK_READS == 16

    def packed(m, k, n):
        kernel = _matmul(m, k, n)
        row, col, b_side = gemm_axes(kernel)
        config = space_for(kernel, target, frozenset({3 - b_side})).default()
        assert config.get("upcast")[row] == 8 and config.get("order")[0] == col, config
        return b_side in config.get("pack")
    assert packed(128, 1152, 784)
    assert not packed(64, 1152, 784)


@pytest.mark.parametrize("level", ["avx512", "avx2", "sse4"])
def test_a_column_block_of_part_of_a_vector_runs_whole_vectors_on_a_padded_panel(level):
    """The odd MLP's 37x333 by 333x77 product, its weight the column side: at AVX-512 the
    default block covers the 77 columns as 80 (whole vectors: the 13 past 64 are no one
    narrower vector), which the space offers; a part vector that is one narrower vector stays
    (24 columns: a vector of 16 and one of 8). At every level the default is valid and its
    column block's part vector is no more than one narrower vector."""
    target = LEVELS[level]
    lanes = target.lanes()
    for (m, k, n) in ((37, 333, 77), (169, 512, 24), (50, 68, 68), (30, 64, 13)):
        kernel = _matmul(m, k, n)
        _, col, b_side = gemm_axes(kernel)
        space = space_for(kernel, target, frozenset({b_side}))
        config = space.default()
        assert space.validate(config) is None
        block = config.get("upcast")[col]
        part = block % lanes
        assert bin(part).count("1") <= 1, (m, k, n, config)
        choices = {p.name: p.choices for p in space.parameters()}[f"upcast.{col}"]
        assert block in choices
        if level == "avx512":
            assert block == {77: 80, 24: 24, 68: 68, 13: 16}[n], (n, config)
            assert 80 in choices if n == 77 else True


def test_threads_share_the_row_blocks_where_the_row_side_is_the_larger():
    """resnet50's 1x1 convolution of 512 channels into 128 over 28x28 positions, a 784x512 by
    512x128 matmul (1.6 MiB of rows, a 0.25 MiB weight): two threads share its row blocks,
    each reading half the rows and the whole weight, which stays in its L2, instead of every
    row beside half the weight; one thread keeps the column blocks outermost. Not where the
    column side is the larger (196x1024 by 1024x256), leaves L2 or is one column block."""
    import numpy as np
    from tunesearch import Tensor
    xeon = dataclasses.replace(LEVELS["avx512"], l2=Cache(2 << 20, 16))

    def outer(rows, reduce, cols, on):
        kernel = _last_kernel(Tensor(np.zeros((rows, reduce), np.float32))
                              @ Tensor(np.zeros((reduce, cols), np.float32)))
        row, col, b_side = gemm_axes(kernel)
        config = space_for(kernel, on, frozenset({b_side})).default()
        first = config.get("order")[0]
        return "rows" if first == row else "columns" if first == col else first

    assert outer(784, 512, 128, xeon) == "rows"
    assert outer(784, 512, 256, xeon) == "rows"
    assert outer(784, 512, 128, dataclasses.replace(xeon, threads=1)) == "columns"
    assert outer(196, 1024, 256, xeon) == "columns"
    mib = 1 << 20
    assert cpu_model.threads_share_rows(xeon, 2 * mib, mib, 2)
    assert not cpu_model.threads_share_rows(xeon, 2 * mib, mib + 4, 2)  # leaves half of L2
    assert not cpu_model.threads_share_rows(xeon, mib, mib, 2)  # the row side no larger
    assert not cpu_model.threads_share_rows(xeon, 2 * mib, mib, 1)  # one column block


@pytest.mark.parametrize("level", LEVELS)
def test_a_batch_axis_of_a_reduce_goes_outermost(level):
    """The groups of a grouped 1x1 convolution and the heads of batched matrix products share no
    operand across them: the default runs one group's (head's) blocks together, its operands in
    cache, not the groups innermost (shufflenet's 4-group convolutions 1.2-1.4x slower so, Zen
    2). A depthwise convolution's channels, along which both its operands move too, are its
    lanes: the rule leaves them to the others."""
    from tunesearch import Tensor
    from tunesearch.graph.schedule import create_schedule
    rng = np.random.default_rng(3)
    x = Tensor(rng.standard_normal((1, 272, 14, 14)).astype(np.float32))
    cases = {
        "grouped": x.conv2d(rng.standard_normal((272, 68, 1, 1)).astype(np.float32), groups=4),
        "heads": Tensor(rng.standard_normal((4, 128, 64)).astype(np.float32)) @
        Tensor(rng.standard_normal((4, 64, 128)).astype(np.float32)),
        "depthwise": x.conv2d(rng.standard_normal((272, 1, 3, 3)).astype(np.float32),
                              padding=1, groups=272)}
    for name, out in cases.items():
        kernel = max((i.kernel for i in create_schedule([out.node])), key=lambda k: k.flops)
        order = [a for a in space_for(kernel, LEVELS[level]).default().get("order")
                 if kernel.domain[a] > 1]
        loads = [n.arg[1] for n in kernel.loads()
                 if any(n.arg[1].strides[a] for a in range(kernel.n_out, len(kernel.domain)))]
        batch = [a for a in range(kernel.n_out)
                 if kernel.domain[a] > 1 and all(v.strides[a] for v in loads)]
        assert len(batch) == 1, (name, kernel.name)
        if name == "depthwise":  # left to the other rules
            assert gemm_axes(kernel) is None and not batch_axes(kernel)
        else:
            assert order[0] == batch[0], (name, kernel.name, order)


def test_a_models_weight_is_walked_on_a_block_whose_column_blocks_the_threads_split_evenly():
    """inception_v2's 1x1 and 3x3 convolutions over 7x7 maps as matmuls (49 positions, the
    weight the column side) on two cores with a 48 KiB L1: every weight of a model comes from
    memory, so where a row block's sliver of the whole reduce leaves half of L1 it is walked by
    the model's k tile. 49 positions take blocks of 7 rows (no tail), 192 columns four blocks
    of 48. 224 columns in the model's blocks of 80 are three, which two threads split
    unevenly: walked on the best block they split evenly (6x64, four). The same matmul with a
    B that is no weight is neither packed nor walked; 128 columns of 6x64 (a 24 KiB sliver,
    within half of L1) are not walked."""
    target = dataclasses.replace(LEVELS["avx512"], threads=2, l1d=Cache(48 << 10, 12),
                                 l2=Cache(2 << 20, 16))

    def default(m, k, n, weight=True):
        kernel = _matmul(m, k, n)
        _, col, b_side = gemm_axes(kernel)
        space = space_for(kernel, target, frozenset({b_side}) if weight else frozenset())
        config = space.default()
        assert space.validate(config) is None
        return config.get("upcast"), config.get("ktile")
    assert default(49, 1024, 192) == ((7, 48), 128)
    assert default(49, 2016, 224) == ((6, 64), 128)
    assert default(49, 2016, 224, weight=False) == ((5, 80), 0)
    assert default(49, 1024, 128) == ((6, 64), 0)
