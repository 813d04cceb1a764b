"""Panels filled on every call: the column panel under the column blocks outermost is filled
block by block into a buffer of one block's panel, just before its blocks read it (or several
blocks at once, with a column cache block), and a panel
whose last block runs past the operand's edge copies whole runs and then zeros (two loops, not
a guard per element). Each against numpy, with and without k tiles, on one and two threads,
with a partial edge block."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from tunesearch import Tensor
from tunesearch.graph.schedule import create_schedule
from tunesearch.runtime.device import get_device
from tunesearch.space.kernel_shape import gemm_axes
from tunesearch.space.spaces import space_for

DEVICE = get_device("cpu")
M, K, N = 29, 300, 200  # N is no multiple of the column blocks below


def _matmul():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    item = create_schedule([(Tensor(a) @ Tensor(b)).node])[-1]
    return item, a @ b


def _entry(text: str) -> str:
    """The source after the block functions: the entry point, and before it the functions of
    its loops shared over the thread pool (codegen/parallel.py), where there are any."""
    shared = text.find("\nstruct ")
    return text[shared if shared >= 0 else text.rindex("\nvoid "):]


def _column_blocks_outermost(ktile, threads, columns, **knobs):
    """The matmul with its column side packed under the column blocks outermost, 4 rows by
    `columns` a block: the item, numpy's product, the gemm axes, the program and its entry
    point's source."""
    item, want = _matmul()
    kernel = item.kernel
    row, col, b_side = gemm_axes(kernel)
    space = space_for(kernel, dataclasses.replace(DEVICE.info().target, threads=threads))
    upcast = [1] * kernel.n_out
    upcast[row], upcast[col] = 4, columns
    config = space.default().replace(
        upcast=tuple(upcast), order=(col, row), pack=(b_side,), ktile=ktile,
        parallel=1 if threads > 1 else 0, threads=threads, **knobs)
    assert space.validate(config) is None, space.validate(config)
    program = DEVICE.build(kernel, config)
    entry = _entry(program.source.text)
    return item, want, (row, col, b_side), program, entry


@pytest.mark.parametrize("ktile", [0, 128])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("columns", [16, 48])
def test_the_column_panel_is_filled_block_by_block(ktile, threads, columns):
    item, want, (row, col, b_side), program, entry = _column_blocks_outermost(
        ktile, threads, columns)
    kernel = item.kernel
    # the panel's buffer holds one column block (the tile's rows of it, or the whole reduce)
    rows = ktile or K
    assert f"pk{b_side} = (float*)scratch(0, {rows * columns}*sizeof(float));" in entry
    # ... and is filled inside the column loop, before the row loop
    fill = entry.index(f"pk{b_side}[")
    # (shared over threads, the column loop runs over the range the pool hands out)
    assert entry.index(f"for (int b{col} = ") < fill < entry.index(f"for (int b{row} = 0;")
    # the edge block: the operand's run, then zeros; no guard per element
    assert re.search(rf"for \(int pl{col} = edge; pl{col} < {columns}; pl{col}\+\+\) "
                     rf"pk{b_side}\[[^\]]*\] = 0\.0f;", entry)
    copy = next(line for line in entry.splitlines() if f"= data{b_side}[" in line)
    assert "?" not in copy, copy
    out = DEVICE.alloc(kernel.buffers[0].size, kernel.buffers[0].dtype)
    program([out] + [node.realized for node in item.inputs])
    got = DEVICE.copyout(out).reshape(M, N)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_row_blocks_outermost_fill_the_whole_panel_ahead():
    """With the row blocks outermost every row block reads every column block's panel: it is
    filled whole before the block loops."""
    item, want = _matmul()
    kernel = item.kernel
    row, col, b_side = gemm_axes(kernel)
    space = space_for(kernel, dataclasses.replace(DEVICE.info().target, threads=1))
    upcast = [1] * kernel.n_out
    upcast[row], upcast[col] = 4, 48
    config = space.default().replace(upcast=tuple(upcast), order=(row, col), pack=(b_side,),
                                     ktile=0, parallel=0, threads=1)
    program = DEVICE.build(kernel, config)
    entry = _entry(program.source.text)
    whole = -(-N // 48) * 48 * K
    assert f"scratch(0, {whole}*sizeof(float))" in entry
    # (the block loops run as one flat loop: each block's index is taken from it)
    assert entry.index(f"pk{b_side}[") < entry.index("for (long it_ = 0;") < \
        entry.index(f"const int b{row} = (int)(it_")
    out = DEVICE.alloc(kernel.buffers[0].size, kernel.buffers[0].dtype)
    program([out] + [node.realized for node in item.inputs])
    np.testing.assert_allclose(DEVICE.copyout(out).reshape(M, N), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ktile", [0, 128])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cblock", [2, 3, 32])
def test_a_column_cache_block_fills_several_blocks_panels_at_once(ktile, threads, cblock):
    """cblock: the panels of that many column blocks are filled at once, each reduce row read
    across all of them, into a buffer of that many blocks' panels; the threads share the
    groups. 200 columns in blocks of 16 are 13 blocks: groups of 2 and 3 end in a partial
    one, 32 is one group of all 13."""
    item, want, (row, col, b_side), program, entry = _column_blocks_outermost(
        ktile, threads, 16, cblock=cblock)
    kernel = item.kernel
    group, blocks = min(cblock, 13), 13
    rows = ktile or K
    assert f"pk{b_side}g = (float*)scratch(0, {group * rows * 16}*sizeof(float));" in entry
    # the group's blocks filled row by row across the group, before its column blocks run
    fill = entry.index(f"for (int pb{col} = g{col}*{group};")
    assert entry.index("for (int r0 = 0;") < fill < \
        entry.index(f"for (int b{col} = g{col}*{group};") < entry.index(f"for (int b{row} = 0;")
    groups = -(-blocks // group)  # the loop over them, or the pool's share of it
    assert f"g{col} < {groups};" in entry or f"ts_parallel((long)({groups}), " in entry
    out = DEVICE.alloc(kernel.buffers[0].size, kernel.buffers[0].dtype)
    program([out] + [node.realized for node in item.inputs])
    np.testing.assert_allclose(DEVICE.copyout(out).reshape(M, N), want, rtol=1e-4, atol=1e-4)
