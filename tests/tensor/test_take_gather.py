"""Reads at computed positions (Tensor.take, numpy's take; Tensor.gather, torch's gather) against
numpy on the CPU and reference devices: every axis, indices of any rank, negative ones counted
from the end and ones outside the axis read as zeros, tables read through views or computed,
and the result moved, reduced and fused afterwards. An embedding's kernels cost its rows, never
its vocabulary."""
from __future__ import annotations

import numpy as np
import pytest

from tunesearch import ShapeError, Tensor
from tunesearch.graph.schedule import create_schedule

RNG = np.random.default_rng(3)
DEVICES = ["cpu", "reference"]


def np_take(x: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
    """numpy's take with a position outside the axis reading zeros (numpy would raise)."""
    size = x.shape[axis]
    wrapped = np.where(idx < 0, idx + size, idx)
    valid = (wrapped >= 0) & (wrapped < size)
    out = np.take(x, np.where(valid, wrapped, 0), axis=axis)
    keep = valid.reshape((1,) * axis + idx.shape + (1,) * (x.ndim - axis - 1))
    return np.where(keep, out, 0).astype(x.dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis,ishape", [(0, (3, 17)), (1, (4,)), (2, (2, 3, 2)), (-1, ()),
                                         (1, (1,))])
def test_take_matches_numpy(device, axis, ishape):
    x = RNG.standard_normal((6, 9, 5)).astype(np.float32)
    size = x.shape[axis]
    idx = RNG.integers(-size - 3, size + 3, ishape).astype(np.int32)
    index = Tensor(idx, device=device) if idx.ndim else idx  # a numpy scalar: a 0-d index
    got = Tensor(x, device=device).take(index, axis).numpy()
    np.testing.assert_array_equal(got, np_take(x, idx, axis % 3))


@pytest.mark.parametrize("device", DEVICES)
def test_take_from_views_and_computed_tables(device):
    x = RNG.standard_normal((12, 10)).astype(np.float32)
    idx = np.array([[0, 11, -1], [5, 3, -12]], np.int32)
    t, i = Tensor(x, device=device), Tensor(idx, device=device)
    np.testing.assert_array_equal(t.T.take(i % 10, 0).numpy(), np_take(x.T, idx % 10, 0))
    np.testing.assert_array_equal(t[2:, ::-2].take(i % 5, 1).numpy(),
                                  np_take(x[2:, ::-2], idx % 5, 1))
    np.testing.assert_allclose((t * 2.0 + 1.0).take(i, 0).numpy(), np_take(x * 2 + 1, idx, 0),
                               rtol=1e-6)
    padded = t.pad([(1, 1), (0, 0)])  # a padded table is written out first
    np.testing.assert_array_equal(padded.take(i, 0).numpy(),
                                  np_take(np.pad(x, [(1, 1), (0, 0)]), idx, 0))
    ints = (RNG.integers(-9, 9, (7, 4))).astype(np.int32)
    np.testing.assert_array_equal(Tensor(ints, device=device).take(i % 7, 0).numpy(),
                                  np_take(ints, idx % 7, 0))


@pytest.mark.parametrize("device", DEVICES)
def test_take_then_movement_reduce_and_fusion(device):
    table = RNG.standard_normal((50, 8)).astype(np.float32)
    pos = RNG.standard_normal((6, 8)).astype(np.float32)
    idx = RNG.integers(0, 50, (2, 6)).astype(np.int32)
    e = Tensor(table, device=device).take(Tensor(idx, device=device), 0)
    want = table[idx]
    np.testing.assert_array_equal(e.permute(2, 0, 1).numpy(), want.transpose(2, 0, 1))
    np.testing.assert_array_equal(e.reshape(12, 8)[3:9].numpy(), want.reshape(12, 8)[3:9])
    np.testing.assert_array_equal(e.pad([(0, 0), (1, 2), (0, 0)]).numpy(),
                                  np.pad(want, [(0, 0), (1, 2), (0, 0)]))
    np.testing.assert_array_equal(e.reshape(2, 6, 1, 8).expand(2, 6, 3, 8).numpy(),
                                  np.broadcast_to(want[:, :, None], (2, 6, 3, 8)))
    summed = (e + Tensor(pos, device=device)).sum(-1)
    np.testing.assert_allclose(summed.numpy(), (want + pos).sum(-1), rtol=1e-5, atol=1e-5)
    normed = (e + Tensor(pos, device=device)).layernorm()
    x = want + pos
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(normed.numpy(), ref, rtol=1e-4, atol=1e-4)
    product = e @ Tensor(table.T[:, :5].copy(), device=device)
    np.testing.assert_allclose(product.numpy(), want @ table.T[:, :5], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_matches_take_along_axis(device, axis):
    x = RNG.standard_normal((5, 7, 4)).astype(np.float32)
    shape = [3, 6, 4]
    shape[axis] = 9  # more positions than the axis has
    size = x.shape[axis]
    idx = RNG.integers(-size, size, shape).astype(np.int32)
    got = Tensor(x, device=device).gather(axis, Tensor(idx, device=device)).numpy()
    window = x[:shape[0] if axis != 0 else 5, :shape[1] if axis % 3 != 1 else 7, :]
    want = np.take_along_axis(window, np.where(idx < 0, idx + size, idx), axis)
    np.testing.assert_array_equal(got, want)


def test_an_embedding_costs_its_rows_not_its_vocabulary():
    """A 30,522-word embedding of 128 tokens: one kernel over the tokens x hidden, reading
    about a row per token; before, a one-hot sum ran over every word of the vocabulary."""
    words, hidden = 30522, 64
    table = Tensor(RNG.standard_normal((words, hidden)).astype(np.float32), device="cpu")
    ids = RNG.integers(0, words, (1, 128)).astype(np.int32)
    out = table.take(Tensor(ids, device="cpu"), 0)
    items = create_schedule([out.node])
    assert len(items) == 1 and items[0].kernel.domain == (1, 128, hidden)
    assert items[0].kernel.bytes == 4 * (2 * 128 * hidden + 128)  # out, rows, ids
    np.testing.assert_array_equal(out.numpy(), table.numpy()[ids])


def test_bad_indices_are_refused_at_the_call():
    x = Tensor(np.zeros((4, 3), np.float32), device="reference")
    with pytest.raises(ShapeError, match="integers"):
        x.take(Tensor(np.zeros(2, np.float32), device="reference"), 0)
    with pytest.raises(ShapeError, match="axis 2"):
        x.take(np.array([0]), 2)
    with pytest.raises(ShapeError, match="rank"):
        x.gather(0, np.array([0, 1]))
    with pytest.raises(ShapeError, match="rank"):
        x.gather(0, np.zeros((2, 5), np.int32))
