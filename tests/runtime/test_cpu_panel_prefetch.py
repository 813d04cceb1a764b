"""A whole packed panel that the block loop walks through, one block's slice after another (A's
rows under the column blocks), is fetched ahead in each block's reduce; a panel filled block
by block just before its row blocks (B's column sliver) is not, nor a weight's panel packed
when the plan was built. Each result against numpy,
with the panel's last slice fetching past its end (a prefetch never faults)."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from tunesearch import Tensor
from tunesearch.graph.schedule import create_schedule
from tunesearch.runtime.device import get_device
from tunesearch.codegen.c import render_c
from tunesearch.codegen.c_block import PREFETCH_AHEAD
from tunesearch.space.spaces import space_for

DEVICE = get_device("cpu")


def _prefetched(source: str) -> set[int]:
    """The panels (pk index) the kernel's source fetches ahead."""
    return {int(m) for m in re.findall(
        rf"__builtin_prefetch\(\(const char\*\)&pk(\d+)\[[^;]*\] \+ {PREFETCH_AHEAD}, 0, 2\)",
        source)}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("order, walked", [((1, 0), {1}), ((0, 1), {2})])
def test_the_panel_the_block_loop_walks_is_fetched_ahead(order, walked, threads):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((67, 300)).astype(np.float32)
    b = rng.standard_normal((300, 45)).astype(np.float32)
    item = create_schedule([(Tensor(a) @ Tensor(b)).node])[-1]
    kernel = item.kernel
    space = space_for(kernel, dataclasses.replace(DEVICE.info().target, threads=threads))
    lanes = DEVICE.info().target.lanes(4)
    config = space.default().replace(
        upcast=(4, lanes), order=order, pack=(1, 2), ktile=0, split=1,
        threads=threads, parallel=1 if threads > 1 else 0)
    assert space.validate(config) is None, space.validate(config)
    program = DEVICE.build(kernel, config)
    # one thread: the panel under the outer loop is filled block by block, the other is
    # walked; two threads share the outer loop and fill both whole, and the inner one is walked
    assert _prefetched(program.source.text) == walked
    out = DEVICE.alloc(kernel.buffers[0].size, kernel.buffers[0].dtype)
    program([out] + [node.realized for node in item.inputs])
    np.testing.assert_allclose(DEVICE.copyout(out).reshape(67, 45), a @ b, rtol=1e-4, atol=1e-4)


def test_an_unpacked_matmul_fetches_nothing_ahead():
    a = np.ones((16, 32), np.float32)
    item = create_schedule([(Tensor(a) @ Tensor(a.T.copy())).node])[-1]
    space = space_for(item.kernel, DEVICE.info().target)
    program = DEVICE.build(item.kernel, space.default().replace(pack=()))
    assert _prefetched(program.source.text) == set()


def test_a_panel_packed_at_plan_build_is_not_fetched_ahead():
    a = np.ones((67, 300), np.float32)
    item = create_schedule([(Tensor(a) @ Tensor(a.T.copy())).node])[-1]
    space = space_for(item.kernel, DEVICE.info().target)
    lanes = DEVICE.info().target.lanes(4)
    config = space.default().replace(upcast=(4, lanes), order=(1, 0), pack=(1, 2), ktile=0,
                                     threads=1, parallel=0)
    assert _prefetched(render_c(item.kernel, config)) == {1}
    assert _prefetched(render_c(item.kernel, config, prepacked=frozenset({1}))) == set()
