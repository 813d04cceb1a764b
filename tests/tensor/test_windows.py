"""Tensor.windows against numpy's sliding windows (strides, dilations, pads, pad value),
Tensor.as_strided against numpy's as_strided, and Tensor.materialize: one buffer that the
kernels reading a value share."""
from __future__ import annotations

import numpy as np
import pytest

from tunesearch import Tensor
from tunesearch.errors import ShapeError
from tunesearch.graph.schedule import create_schedule


def _numpy_windows(x, kernel, strides, dilations, pads, outs, value):
    n = len(kernel)
    padded = np.pad(x, [(0, 0)] * (x.ndim - n) + list(pads), constant_values=value)
    out = np.empty(x.shape[:-n] + tuple(outs) + tuple(kernel), x.dtype)
    for o in np.ndindex(*outs):
        for j in np.ndindex(*kernel):
            index = tuple(oi * s + ji * d for oi, ji, s, d in zip(o, j, strides, dilations))
            out[(Ellipsis,) + o + j] = padded[(Ellipsis,) + index]
    return out


@pytest.mark.parametrize("kernel,strides,dilations,pads,value", [
    ((3, 3), (1, 1), (1, 1), [(1, 1), (1, 1)], 0.0),
    ((3, 2), (2, 1), (1, 2), [(0, 1), (2, 0)], -np.inf),
    ((1, 1), (2, 2), (1, 1), [(0, 0), (0, 0)], 0.0),
])
def test_windows_match_numpy(kernel, strides, dilations, pads, value):
    x = np.random.default_rng(0).standard_normal((2, 3, 7, 6)).astype(np.float32)
    outs = [(i + b + e - d * (k - 1) - 1) // s + 1 for i, k, s, d, (b, e) in
            zip(x.shape[2:], kernel, strides, dilations, pads)]
    got = Tensor(x, device="cpu").windows(kernel, strides, dilations, pads, outs, value)
    want = _numpy_windows(x, kernel, strides, dilations, pads, outs, value)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


def test_materialize_writes_a_value_once_for_its_readers():
    x = np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)
    y = Tensor(x, device="cpu").exp()
    a, b = y.materialize(), y.materialize()
    assert not y.ends_in_reduce() and Tensor(x).sum(0).ends_in_reduce()
    # the exp is one kernel; both sums read its buffer instead of recomputing it
    items = create_schedule([(a.sum(0)).node, (b.sum(1)).node])
    assert len(items) == 3 and sum(i.kernel.name.startswith("E_") for i in items) == 1
    np.testing.assert_allclose((a.sum(0) + b.sum(1)).numpy(), np.exp(x).sum(0) +
                               np.exp(x).sum(1), rtol=1e-5)


def test_windows_that_only_leave_out_the_last_elements_read_the_input_in_place():
    """A stride-2 1x1 window over an even map (a downsampling convolution's) never reads the
    last row and column: the windows are a view of the input's own buffer, not of a copy of
    it shrunk by one (which cost resnet50 a pass over 256x55x55 floats)."""
    x = np.random.default_rng(2).standard_normal((2, 4, 6, 6)).astype(np.float32)
    t = Tensor(x, device="cpu")
    wins = t.windows((1, 1), (2, 2), (1, 1), [(0, 0), (0, 0)], [3, 3])
    out = wins * 2.0
    items = create_schedule([out.node])
    assert len(items) == 1, [item.kernel.name for item in items]
    (source,) = items[0].inputs
    assert source.realized is not None and source.realized.size == x.size  # the input itself
    np.testing.assert_array_equal(out.numpy(), 2.0 * x[:, :, ::2, ::2, None, None])
    # one that pads still writes the padded input once
    padded = t.windows((3, 3), (2, 2), (1, 1), [(1, 1), (1, 1)], [3, 3]) * 2.0
    assert len(create_schedule([padded.node])) == 2


def test_as_strided_reads_like_numpy_from_the_buffer_or_from_one_copy():
    """A view with numpy's as_strided semantics over the value laid out contiguously: read
    from the input's own buffer where it is one, else from one copy of the value (a permuted
    view is written out in its own order first); a view past the end is refused."""
    x = np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32)
    shape, strides = (3, 4, 2), (5, 1, 3)  # overlapping reads, in elements
    want = np.lib.stride_tricks.as_strided(x, shape, [s * 4 for s in strides])
    view = Tensor(x, device="cpu").as_strided(shape, strides)
    items = create_schedule([(view * 1.0).node])
    assert len(items) == 1 and items[0].inputs[0].realized.size == x.size
    np.testing.assert_array_equal(view.numpy(), want)
    xt = np.ascontiguousarray(x.T)
    permuted = Tensor(x, device="cpu").permute(1, 0).as_strided(shape, strides)
    assert len(create_schedule([(permuted * 1.0).node])) == 2  # the transpose, then the view
    np.testing.assert_array_equal(
        permuted.numpy(), np.lib.stride_tricks.as_strided(xt, shape, [s * 4 for s in strides]))
    with pytest.raises(ShapeError, match="outside its 20 elements"):
        Tensor(x, device="cpu").as_strided((4, 5), (5, 2))  # its last read: element 23
    with pytest.raises(ShapeError, match="one stride of 0 or more per axis"):
        Tensor(x, device="cpu").as_strided((2, 2), (-1, 1))
