"""Fusion decides kernel boundaries: counts for the cases that matter, stable keys, DEBUG lines."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tunesearch import Tensor
from tunesearch.graph.schedule import create_schedule


def kernels(t: Tensor) -> int:
    return len(create_schedule([t.node]))


def rand(*shape):
    return Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32))


def test_elementwise_chain_is_one_kernel_reading_three_buffers():
    a, b, c = rand(64), rand(64), rand(64)
    items = create_schedule([(a * b + c).node])
    assert len(items) == 1
    assert len(items[0].kernel.buffers) == 4  # out + three inputs


def test_elementwise_fuses_into_reduce_and_matmul_is_one_kernel():
    a, b = rand(16, 32), rand(16, 32)
    assert kernels((a * b).sum(1)) == 1
    assert kernels(rand(8, 5) @ rand(5, 7)) == 1
    assert kernels(((rand(8, 5) @ rand(5, 7)) + rand(7)).relu()) == 1
    assert kernels((a * b).sum(1) * 2 + 1) == 1


def test_constants_fold_to_one_kernel():
    x = Tensor.zeros(1)
    for i in range(5):
        x = x + i
    assert kernels(x) == 1
    assert x.numpy().tolist() == [10.0]


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "layernorm"])
def test_a_normalization_after_a_matmul_computes_the_matmul_once(op):
    """Its input is read by the max (or mean) and by the work after it: written once, not
    fused again into a second kernel as that kernel's reduce (it was, before)."""
    a, b = rand(16, 40), rand(40, 24)
    out = getattr((a @ b).relu(), op)(1) if op != "layernorm" else (a @ b).relu().layernorm()
    items = create_schedule([out.node])
    assert sum(item.kernel.domain == (16, 24, 40) for item in items) == 1
    z = np.maximum(a.numpy() @ b.numpy(), 0)
    shifted = z - z.max(1, keepdims=True)
    want = {"softmax": np.exp(shifted) / np.exp(shifted).sum(1, keepdims=True),
            "log_softmax": shifted - np.log(np.exp(shifted).sum(1, keepdims=True)),
            "layernorm": (z - z.mean(1, keepdims=True)) / np.sqrt(z.var(1, keepdims=True)
                                                                + 1e-5)}[op]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


def test_a_reduce_is_computed_by_one_kernel():
    """A reduce that one kernel reads written out and another would fuse (or that two kernels
    would fuse) is written once and read by both: hand-written code gets what the front end's
    softmax gets."""
    a, b = rand(16, 40), rand(40, 24)
    matmul = lambda items: sum(item.kernel.domain == (16, 24, 40) for item in items)
    z = a @ b
    shifted = z - z.max(1, keepdim=True)
    items = create_schedule([shifted.node])
    assert matmul(items) == 1 and len(items) == 3
    want = a.numpy() @ b.numpy()
    np.testing.assert_allclose(shifted.numpy(), want - want.max(1, keepdims=True),
                               rtol=1e-5, atol=1e-5)
    # two outputs, each fusing the matmul before: the matmul once, each output reads it
    z = a @ b
    relu, sigmoid = z.relu(), z.sigmoid()
    items = create_schedule([relu.node, sigmoid.node])
    assert matmul(items) == 1 and len(items) == 3
    np.testing.assert_allclose(relu.numpy(), np.maximum(want, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sigmoid.numpy(), 1 / (1 + np.exp(-want)), rtol=1e-5, atol=1e-5)
    # the matmul and its epilogue asked for together: the epilogue reads what the matmul wrote
    z = a @ b
    items = create_schedule([z.node, (z * 2 + 1).node])
    assert matmul(items) == 1 and len(items) == 2


def test_kernel_counts_of_composite_ops():
    x = rand(4, 33)
    # the max, the exp written once, its sum, the division
    assert kernels(x.softmax(1)) == 4
    assert kernels(x.layernorm()) == 3
    # a copy that lays the input out for the windows, then one fused conv + bias + relu (rows
    # of 64 read their windows in place at every ISA level's vector width up to 16 lanes;
    # shorter rows go through an im2col copy where the lanes are wide)
    img, w, bias = rand(1, 3, 8, 64), rand(4, 3, 3, 3), rand(4)
    assert kernels(img.conv2d(w, bias, padding=1).relu()) == 2
    assert kernels(img.max_pool2d(2)) == 1


def test_movement_ops_are_views_not_copies():
    a, b = rand(6, 4), rand(4, 6)
    assert kernels(a.T + b) == 1
    assert kernels(a.reshape(24).flip(0) * 2) == 1
    assert kernels(a.T.reshape(24) * 2) == 2  # no single view flattens a transpose: one copy
    assert kernels(a.pad(((1, 1), (0, 2)))[1:5, ::2] + 1) == 1


def test_a_reduce_read_back_permuted_fuses_into_its_reader():
    # the reader iterates the reduce's domain and writes through the permutation: one kernel
    a, b, c = rand(37, 50), rand(50, 23), rand(23, 1)
    t = ((a @ b).T + c).relu()
    assert kernels(t) == 1
    expect = np.maximum((a.numpy() @ b.numpy()).T + c.numpy(), 0)
    np.testing.assert_allclose(t.numpy(), expect, rtol=1e-5, atol=1e-5)
    # channels last to channels first, with a split of the positions: still one kernel
    x, w = rand(2, 3, 4, 5), rand(5, 6)
    u = (x @ w).reshape(2, 12, 6).permute(0, 2, 1).reshape(2, 6, 3, 4) * 2 + 1
    assert kernels(u) == 1
    expect = (x.numpy() @ w.numpy()).transpose(0, 3, 1, 2) * 2 + 1
    np.testing.assert_allclose(u.numpy(), expect, rtol=1e-5, atol=1e-5)


def test_a_concatenation_is_written_in_place_by_its_pieces():
    """No kernel copies the pieces together: each writes its slice of one buffer, a matmul or
    convolution with its epilogue (one kernel each), a realized input copied into its slice."""
    a, b, w = rand(6, 9), rand(9, 7), rand(6, 5)
    t = Tensor.cat([(a @ b + 1).relu(), w, (b.T @ a.T).T * 2], dim=1)
    items = create_schedule([t.node])
    pieces = [item for item in items if item.out is t.node]
    assert len(pieces) == 3 and all(item.piece is not None for item in pieces)
    assert sum(item.kernel.reduce is not None for item in items) == 2 == len(items) - 1
    assert [item.kernel.out_view.offset for item in pieces] == [0, 7, 12]
    ab = a.numpy() @ b.numpy()
    expect = np.concatenate([np.maximum(ab + 1, 0), w.numpy(), ab * 2], axis=1)
    np.testing.assert_allclose(t.numpy(), expect, rtol=1e-5, atol=1e-5)
    # along the first axis, nested: the inner concatenation's pieces are the outer one's
    u = Tensor.cat([Tensor.cat([a, a * 2]), (a @ b @ b.T)[:4]], dim=0)
    pieces = [item for item in create_schedule([u.node]) if item.out is u.node]
    assert sorted(item.kernel.out_view.offset for item in pieces) == [0, 54, 108]
    inner = np.concatenate([a.numpy(), a.numpy() * 2])
    np.testing.assert_allclose(u.numpy(), np.concatenate([inner, (ab @ b.numpy().T)[:4]]),
                               rtol=1e-5, atol=1e-5)


def test_elementwise_work_on_a_concatenation_runs_in_its_pieces():
    """ReLU after the concatenation, and a residual added to it: each piece computes its slice
    of the result (the residual read at the slice), the matmul fused in its piece."""
    a, b, w, r = rand(6, 9), rand(9, 7), rand(6, 5), rand(6, 12)
    t = (Tensor.cat([a @ b, w * 2], dim=1) + r).relu()
    items = create_schedule([t.node])
    assert len(items) == 2 and all(item.piece is not None for item in items)
    assert sum(item.kernel.reduce is not None for item in items) == 1
    expect = np.maximum(np.concatenate([a.numpy() @ b.numpy(), w.numpy() * 2], 1)
                        + r.numpy(), 0)
    np.testing.assert_allclose(t.numpy(), expect, rtol=1e-5, atol=1e-5)


def test_a_padded_reduce_is_computed_into_its_padded_buffer():
    """A matmul with its epilogue padded on both axes (a convolution's output padded for the
    pool or the convolution after it): the matmul writes the padded buffer's interior, and
    kernels that read nothing its border; no kernel copies the matmul's result."""
    a, b = rand(6, 9), rand(9, 7)
    t = (a @ b + 1).relu().pad(((1, 2), (0, 3)), -np.inf)
    items = create_schedule([t.node])
    assert all(item.out is t.node and item.piece is not None for item in items)
    (inner,) = [item for item in items if item.kernel.reduce is not None]
    assert inner.kernel.buffers[0].size == 9 * 10 and inner.kernel.out_view.offset == 10
    borders = [item.kernel for item in items if item is not inner]
    assert len(borders) == 3 and all(len(kernel.buffers) == 1 for kernel in borders)
    expect = np.pad(np.maximum(a.numpy() @ b.numpy() + 1, 0), ((1, 2), (0, 3)),
                    constant_values=-np.inf)
    np.testing.assert_allclose(t.numpy(), expect, rtol=1e-5, atol=1e-5)


def test_a_padded_reduce_that_cannot_fill_the_interior_is_copied_once():
    """The matmul's rows are two axes of the padded value (a pointwise convolution's flattened
    positions): no single view of the padded buffer takes them, so one kernel pads a copy."""
    a, b = rand(12, 5), rand(5, 6)
    t = (a @ b).reshape(3, 4, 6).pad(((1, 1), (1, 1), (0, 0)))
    items = create_schedule([t.node])
    assert len(items) == 2 and not any(item.piece for item in items)
    expect = np.pad((a.numpy() @ b.numpy()).reshape(3, 4, 6), ((1, 1), (1, 1), (0, 0)))
    np.testing.assert_allclose(t.numpy(), expect, rtol=1e-5, atol=1e-5)


def test_a_sum_of_overlapping_pads_is_not_a_concatenation():
    a = rand(4, 5)
    t = a.pad(((0, 2), (0, 0))) + a.pad(((1, 1), (0, 0)))
    items = create_schedule([t.node])
    assert len(items) == 1 and items[0].piece is None
    expect = np.pad(a.numpy(), ((0, 2), (0, 0))) + np.pad(a.numpy(), ((1, 1), (0, 0)))
    np.testing.assert_allclose(t.numpy(), expect)


def test_a_reduce_with_two_readers_is_computed_once():
    a, b = rand(12, 9), rand(9, 7)
    r = a @ b
    u1, u2 = r.T + 1, r.T.reshape(7 * 12)[::2] * 3
    items = create_schedule([u1.node, u2.node])
    assert sum(item.kernel.reduce is not None for item in items) == 1
    expect = a.numpy() @ b.numpy()
    np.testing.assert_allclose(u1.numpy(), expect.T + 1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(u2.numpy(), expect.T.reshape(-1)[::2] * 3, rtol=1e-5, atol=1e-5)


def test_realized_results_are_reused():
    a = rand(8, 8)
    s = a.sum(1)
    s.realize()
    assert kernels(s * 2) == 1


KEY_SCRIPT = """
import numpy as np
from tunesearch import Tensor
from tunesearch.graph.schedule import create_schedule
a = Tensor(np.ones((12, 7), np.float32)); b = Tensor(np.ones((7, 5), np.float32))
_ = [Tensor(np.ones(3, np.float32)) for _ in range(int(__import__('sys').argv[1]))]
print([i.kernel.key for i in create_schedule([((a @ b).relu().softmax(1)).node])])
"""


def test_kernel_keys_are_stable_across_processes():
    outs = {subprocess.run([sys.executable, "-c", KEY_SCRIPT, str(n)], capture_output=True,
                           text=True, check=True).stdout for n in (0, 5)}
    assert len(outs) == 1 and outs.pop().count("k_") == 5


def test_flops_and_bytes():
    k = create_schedule([(rand(8, 5) @ rand(5, 7)).node])[0].kernel
    assert k.flops == 2 * 8 * 5 * 7
    assert k.bytes == 4 * (8 * 7 + 8 * 5 + 5 * 7)


DEBUG_SCRIPT = """
import numpy as np
from tunesearch import Tensor
x = Tensor(np.random.rand(32, 48).astype(np.float32))
print(x.softmax(1).numpy().sum())
"""


def test_debug2_prints_one_line_per_kernel(tmp_path):
    env = dict(os.environ, DEBUG="2", TUNESEARCH_NODB="1", GRAPH="1",
               GRAPH_PATH=str(tmp_path / "g.dot"))
    proc = subprocess.run([sys.executable, "-c", DEBUG_SCRIPT], capture_output=True, text=True,
                          env=env, check=True)
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("cpu ")]
    assert len(lines) == 4, proc.stderr  # the softmax's four kernels
    for line in lines:
        m = re.search(r"([\d.]+) us\s+([\d.]+) GFLOPS\s+([\d.]+) GB/s\s+(tuned|default)", line)
        assert m, line
        assert float(m.group(1)) > 0 and float(m.group(3)) > 0
    assert "schedule: 4 kernels" in proc.stderr
    assert (tmp_path / "g.dot").read_text().count("->") >= 2


SHAPES = st.lists(st.integers(1, 5), min_size=1, max_size=4)


@st.composite
def movement_chain(draw):
    shape = tuple(draw(SHAPES))
    ops = []
    cur = shape
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["permute", "reshape", "pad", "shrink", "flip", "expand"]))
        if kind == "permute":
            order = draw(st.permutations(range(len(cur))))
            ops.append(("permute", tuple(order)))
            cur = tuple(cur[i] for i in order)
        elif kind == "reshape":
            n = int(np.prod(cur))
            divs = [d for d in range(1, n + 1) if n % d == 0]
            d = draw(st.sampled_from(divs))
            ops.append(("reshape", (d, n // d)))
            cur = (d, n // d)
        elif kind == "pad":
            pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in cur)
            ops.append(("pad", pads))
            cur = tuple(s + a + b for s, (a, b) in zip(cur, pads))
        elif kind == "shrink":
            arg = []
            for s in cur:
                lo = draw(st.integers(0, s - 1))
                arg.append((lo, draw(st.integers(lo + 1, s))))
            ops.append(("shrink", tuple(arg)))
            cur = tuple(b - a for a, b in arg)
        elif kind == "flip":
            ops.append(("flip", draw(st.integers(0, len(cur) - 1))))
        else:
            ops.append(("expand", (2,) + cur))
            cur = (2,) + cur
    return shape, ops


# each movement op in numpy's words (the reference) and in Tensor's
NUMPY_OPS = {"permute": lambda x, a: x.transpose(a), "reshape": lambda x, a: x.reshape(a),
             "pad": np.pad, "shrink": lambda x, a: x[tuple(slice(lo, hi) for lo, hi in a)],
             "flip": np.flip, "expand": np.broadcast_to}
TENSOR_OPS = {"permute": lambda t, a: t.permute(a), "reshape": lambda t, a: t.reshape(a),
              "pad": lambda t, a: t.pad(a), "shrink": lambda t, a: t.shrink(a),
              "flip": lambda t, a: t.flip(a), "expand": lambda t, a: t.expand(a)}


def apply_ops(x, ops, table):
    for kind, arg in ops:
        x = table[kind](x, arg)
    return x


def apply_numpy(x, ops):
    return apply_ops(x, ops, NUMPY_OPS)


def apply_tensor(t, ops):
    return apply_ops(t, ops, TENSOR_OPS)


@settings(max_examples=60, deadline=None)
@given(movement_chain())
def test_movement_chains_match_numpy(chain):
    shape, ops = chain
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1
    want = apply_numpy(x, ops)
    # on the reference device: the view algebra is what is under test here
    got = apply_tensor(Tensor(x, device="reference") * 1.0, ops).numpy()
    np.testing.assert_array_equal(got, want)
