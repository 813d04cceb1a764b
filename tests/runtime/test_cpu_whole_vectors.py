"""A block of the lane axis that covers an axis of 77 columns as 80: its reduce runs on whole
vectors, the panel padded to them, and only the store of the block's sums is cut to the 77 (with
a block of 77 GCC ran the part vector as narrower vectors and lone floats at every step of the
reduce). Against numpy: the panel packed on each call and packed once ahead (a weight), read in
place unpacked, on one and two threads."""
from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.cpu_items import DEVICE, cpu_config, rows_that_fit, run_item
from tunesearch import Tensor
from tunesearch.graph.schedule import create_schedule


def _odd_matmul(rng):
    """sigmoid(x @ w + b) over 37x333 by 333x77, the odd MLP's last layer."""
    x = rng.standard_normal((37, 333)).astype(np.float32)
    w = rng.standard_normal((333, 77)).astype(np.float32) * 0.1
    b = rng.standard_normal(77).astype(np.float32)
    item = create_schedule([(Tensor(x) @ Tensor(w) + Tensor(b)).sigmoid().node])[-1]
    return item, 1 / (1 + np.exp(-(x @ w + b)))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("pack", ["per call", "ahead", "in place"])
def test_a_lane_block_past_the_columns_computes_them(threads, pack):
    item, want = _odd_matmul(np.random.default_rng(7))
    kernel = item.kernel
    assert kernel.domain[:2] == (37, 77), kernel.domain
    lanes = DEVICE.info().target.lanes()
    whole = -(-77 // lanes) * lanes
    assert whole > 77
    # as many rows as the register file holds beside the block's whole vectors: a block of
    # 5 x 80 at AVX-512 holds 400 accumulators, past what AVX2's space allows (256)
    config = cpu_config(kernel, threads, upcast=(rows_that_fit(whole // lanes), whole),
                        order=(1, 0), pack=() if pack == "in place" else (2,), ktile=0,
                        split=1)
    if pack != "ahead":
        got, _ = run_item(item, config)
    else:
        inputs = [node.realized for node in item.inputs]
        panel = DEVICE.prepack(kernel, config, 2, DEVICE.copyout(inputs[1]))
        program = DEVICE.build(kernel, config, frozenset({2}))
        out = DEVICE.alloc(kernel.buffers[0].size, kernel.buffers[0].dtype)
        program([out, inputs[0], DEVICE.from_numpy(panel, inputs[1].dtype), *inputs[2:]])
        got = DEVICE.copyout(out).reshape(kernel.out_shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
