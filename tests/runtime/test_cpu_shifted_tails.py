"""The tail of a reduce's lanes, as the CPU renders it: where a few whole vectors take fewer
instructions than the tail as the compiler would run it (whole vectors, narrower ones, then
element by element), it runs as those vectors shifted back to end at the row's end (the
elements computed twice come out the same), except in k tiles, along a panel's blocks, where
the lanes are read with a stride, or split over the threads. Each against numpy."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tests.runtime.cpu_items import cpu_config, run_item
from tunesearch import Tensor
from tunesearch.graph.schedule import create_schedule
from tunesearch.runtime.device import get_device
from tunesearch.space.spaces import space_for

DEVICE = get_device("cpu")


def _run(item, threads: int = 1, **knobs):
    out, program = run_item(item, cpu_config(item.kernel, threads, **knobs))
    return out, program.source.text


def _last_item(tensor: Tensor):
    """The last kernel of tensor's schedule, the kernels before it run (the input's copy that
    a window view reads)."""
    *before, item = create_schedule([tensor.node])
    for step in before:
        out = DEVICE.alloc(step.kernel.buffers[0].size, step.kernel.buffers[0].dtype)
        space = space_for(step.kernel, DEVICE.info().target)
        DEVICE.build(step.kernel, space.default())([out] + [n.realized for n in step.inputs])
        step.out.realized = out
    return item


def _tail_call(text: str) -> str:
    """The block call of the first tail function."""
    tail = text[text.index("_tail1("):]
    return tail[tail.index("_block("):tail.index(";")]


def _matmul(rng):
    w = rng.standard_normal((16, 40)).astype(np.float32)
    x = rng.standard_normal((40, 55)).astype(np.float32)
    item = create_schedule([(Tensor(w) @ Tensor(x)).node])[-1]
    assert item.kernel.domain == (16, 55, 40)
    return item, w @ x


def test_a_matmul_tail_of_23_columns_runs_as_24_shifted_back():
    """55 columns in blocks of 32: the tail's 23 columns (a vector, a narrower one and three
    elements at AVX-512 and AVX2; five vectors and three elements at SSE4) run as 24 from
    column 31, fewer instructions at each of these widths."""
    item, want = _matmul(np.random.default_rng(0))
    got, text = _run(item, upcast=(4, 32), order=(1, 0), pack=())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert re.search(r"_block\(data0, data1, data2, o0, 31, 4, 24\)", _tail_call(text)), \
        _tail_call(text)


@pytest.mark.parametrize("threads,ktile", [(2, 0), (1, 16)])
def test_a_matmul_tail_stays_a_tail_over_the_threads_or_in_k_tiles(threads, ktile):
    """Two threads would write the columns both blocks cover; in k tiles a block shifted over
    another would add its share of the partial sums twice."""
    item, want = _matmul(np.random.default_rng(1))
    got, text = _run(item, threads, upcast=(4, 32), order=(1, 0), pack=(), ktile=ktile)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert re.search(r"_block\(data0, data1, data2, o0, o1, 4, 23", _tail_call(text)), \
        _tail_call(text)


def test_a_matmul_tail_along_a_panel_stays_a_tail():
    """The columns' panel is blocked by the origin, and zero-padded: its tail runs whole."""
    item, want = _matmul(np.random.default_rng(1))
    got, text = _run(item, upcast=(4, 32), order=(1, 0), pack=(2,))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert re.search(r"_block\(data0, data1, data2, o0, o1, 4, 23", _tail_call(text)), \
        _tail_call(text)


def test_a_convolution_read_in_place_shifts_its_tail():
    """A 3x3 convolution of 8 channels to 8 over 55 output columns, the windows read in place
    in blocks of 16: the 7-column tail (a 4-float vector and three elements) runs as 8
    columns shifted back."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 8, 9, 57)).astype(np.float32)
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    item = _last_item(Tensor(x).conv2d(Tensor(w)))
    kernel = item.kernel
    last = kernel.n_out - 1
    assert kernel.domain[last] == 55
    upcast = tuple(16 if a == last else 1 for a in range(kernel.n_out))
    got, text = _run(item, upcast=upcast, pack=(), ktile=0)
    want = np.zeros((1, 8, 7, 55), np.float32)
    for i in range(3):
        for j in range(3):
            want += np.einsum("oc,bchw->bohw", w[:, :, i, j], x[:, :, i:i + 7, j:j + 55])
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
    width = 8  # one narrower vector at AVX-512, one vector at AVX2, two at SSE4
    assert re.search(rf", {55 - width}, [^;]*\b{width}\)$", _tail_call(text)), _tail_call(text)


def test_a_pool_read_with_a_stride_keeps_its_tail():
    """A 3x3 max pool of stride 2 over 55 output columns: its lanes read every other input
    column, whose last vector the compiler finishes one element at a time at any width, so
    the tail is not shifted (it ran slower so)."""
    x = np.random.default_rng(4).standard_normal((1, 2, 9, 111)).astype(np.float32)
    item = _last_item(Tensor(x).max_pool2d(3, stride=2))
    kernel = item.kernel
    last = kernel.n_out - 1
    assert kernel.domain[last] == 55
    upcast = tuple(32 if a == last else 1 for a in range(kernel.n_out))
    got, text = _run(item, upcast=upcast)
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    np.testing.assert_array_equal(got, windows.max(axis=(-1, -2)))
    assert re.search(r", o\d+, [^;]*\b23\)$", _tail_call(text)), _tail_call(text)
