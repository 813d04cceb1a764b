"""Masked reads (a padded copy, a concatenation, a neighbour channel off the edge) and the tails
of elementwise kernels, as the CPU renders them: every block of a padded copy, laid out channels
first or last, vectorizes (the compiler's own report, at the tuning -march=native gives this
machine) and a block whose rows lie inside tests only its lanes, a read masked on
an axis other than the lanes is clamped into the buffer and read unconditionally, an elementwise
tail runs shifted back in whole vectors. Each against numpy, on one and two threads, with blocks
that cross the edges."""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from tests.runtime.cpu_items import cpu_config, run_item
from tunesearch import Tensor
from tunesearch.graph.schedule import create_schedule
from tunesearch.runtime.cpu import compiler
from tunesearch.runtime.device import get_device

DEVICE = get_device("cpu")


def _run(item, config):
    out, program = run_item(item, config)
    return out, program.source.text


def _padded_copy(rng):
    """relu(x * scale + shift) padded by one on both spatial sides: the copy a densenet layer
    makes before its 3x3 convolution, masked on the rows and on the columns (the lanes)."""
    x = rng.standard_normal((1, 8, 6, 20)).astype(np.float32)
    scale = rng.standard_normal((1, 8, 1, 1)).astype(np.float32)
    shift = rng.standard_normal((1, 8, 1, 1)).astype(np.float32)
    y = (Tensor(x) * Tensor(scale) + Tensor(shift)).relu().pad([(0, 0), (0, 0), (1, 1), (1, 1)])
    want = np.pad(np.maximum(x * scale + shift, 0), [(0, 0), (0, 0), (1, 1), (1, 1)])
    return create_schedule([y.node])[-1], want


@pytest.mark.parametrize("threads", [1, 2])
def test_a_padded_copy_is_right_and_every_block_vectorizes(threads):
    item, want = _padded_copy(np.random.default_rng(1))
    kernel = item.kernel
    assert kernel.domain == (1, 8, 8, 22)
    config = cpu_config(kernel, threads, upcast=(1, 1, 1, 16), order=(1, 2, 3, 0))
    got, text = _run(item, config)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)  # fused multiply-add
    # the row tests keep or zero the value read; only the column (lane) tests guard a load
    # (the rows' part of the offset added to the pointer apart from the lanes': as one sum, some
    # compilers' tuning gathers the lanes)
    x_read = next(line for line in text.splitlines() if "data1+" in line and "float t" in line)
    assert x_read.count("?(data1+") == 1 and "o2+l2" not in x_read.split("?(data1+")[0], x_read
    assert "ts_keep(" in x_read and "+(o3+l3)]" not in x_read
    # a block whose rows lie inside the mask (most of a padded map's) runs a copy that tests
    # only its lanes: the row flag 1, the lanes' 0; its tail likewise
    calls = {m.group(1): m.group(2) for m in re.finditer(
        r"void (\w+)\(float\* restrict data0[^)]*\) \{\n  \w+_block\((.*)\);", text)}
    lanes = [name for name in calls if name.endswith("_lanes")]
    assert len(lanes) == 2 and all(calls[n].endswith(", 1, 0") for n in lanes), calls
    assert all(calls[n].endswith(", 1, 1") for n in calls if n.endswith("_inner")), calls
    # the compiler vectorizes the lane loop in every out-of-line block: the copy inside every
    # mask, the one whose rows lie inside, the one on an edge, and the tails
    if DEVICE.isa.vector_bytes < 32:
        pytest.skip("SSE4 has no masked vector loads: blocks whose lanes are masked run one "
                    "element at a time at that level (docs/defaults.md)")
    blocks = _every_block_vectorizes(text)
    assert {b.rsplit("_", 1)[-1] for b in blocks} >= {"inner", "lanes", "edge", "tail1"}, blocks


def _every_block_vectorizes(text: str) -> list[str]:
    """The out-of-line block functions of a kernel's C, after checking from the compiler's
    own report that it vectorized the lane loop in each: under the device's flags, and under
    generic tuning at the device's level (what the compiler gives a CPU it does not know; its
    cost model turns gathers off, which once left a padded copy's border blocks scalar on a
    Zen 2 and would have on any CPU newer than the compiler)."""
    flags = _device_flags()
    generic = [f for f in flags if not f.startswith(("-march", "-mtune"))] + \
        [f"-march={DEVICE.isa.march}", "-mtune=generic"]
    blocks = [m.group(1) for m in re.finditer(r"noinline\)\) void (\w+)\(", text)]
    lines = text.splitlines()
    simd_line = next(i for i, line in enumerate(lines, 1) if "omp simd" in line)
    # the compiler names the loop by a line of its body, the first it vectorizes from
    body_end = next(i for i, line in enumerate(lines, 1) if i > simd_line and "}}}" in line)
    for tuned in (flags, generic):
        vectorized = [n for n in _vectorized_lines(text, tuned) if simd_line <= n < body_end]
        assert len(vectorized) >= len(blocks), tuned
    return blocks


def _device_flags() -> list[str]:
    return [f for f in DEVICE.flags if f != "-shared"]


def _vectorized_lines(text: str, flags: list[str]) -> list[int]:
    """The lines of a kernel's C at which the compiler's own report says it vectorized a
    loop, compiled with flags (the test skips where the compiler gives no report)."""
    cc, _ = compiler()
    report = subprocess.run([cc, *flags, "-fopt-info-vec-optimized", "-x", "c", "-", "-c",
                             "-o", "/dev/null"], input=text, capture_output=True, text=True)
    if "unrecognized" in report.stderr or report.returncode != 0:
        pytest.skip(f"{cc} gives no vectorizer report: {report.stderr[-200:]}")
    return [int(line.split(":")[1]) for line in report.stderr.splitlines()
            if "loop vectorized" in line]


@pytest.mark.parametrize("threads", [1, 2])
def test_a_channels_last_padded_copy_vectorizes_on_the_border_too(threads):
    """hardswish(x + bias) padded by two on the rows and columns of a map laid out channels
    last (the copy before a depthwise convolution that runs along the channels): no mask tests
    the lanes, and the blocks on the border, where every test fails together, vectorize as the
    ones inside do."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 7, 7, 48)).astype(np.float32)
    bias = rng.standard_normal((1, 1, 1, 48)).astype(np.float32)
    t = Tensor(x) + Tensor(bias)
    y = (t * ((t + 3.0).relu().minimum(6.0) * (1 / 6))).pad([(0, 0), (2, 2), (2, 2), (0, 0)])
    item = create_schedule([y.node])[-1]
    kernel = item.kernel
    assert kernel.domain == (1, 11, 11, 48)
    got, text = _run(item, cpu_config(kernel, threads, upcast=(1, 1, 1, 16)))
    v = x + bias
    want = np.pad(v * np.clip(v + 3, 0, 6) / 6, [(0, 0), (2, 2), (2, 2), (0, 0)])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    blocks = _every_block_vectorizes(text)
    assert {b.rsplit("_", 1)[-1] for b in blocks} >= {"inner", "edge"}, blocks


@pytest.mark.parametrize("threads", [1, 2])
def test_a_transposing_padded_copy_gathers_unconditionally(threads):
    """A padded copy that reads its input transposed (a convolution's [positions, channels]
    output read back as channels x rows x columns): its lanes are gathered a stride apart, so
    their test keeps or zeroes the gathered value instead of guarding each element's read."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((14, 14, 24)).astype(np.float32)  # rows, columns, channels
    t = Tensor(x).permute(2, 0, 1).reshape(1, 24, 14, 14)
    y = t.relu().pad([(0, 0), (0, 0), (1, 1), (1, 1)])
    item = create_schedule([y.node])[-1]
    kernel = item.kernel
    assert kernel.domain == (1, 24, 16, 16)
    got, text = _run(item, cpu_config(kernel, threads, upcast=(1, 1, 1, 16), order=(1, 2, 3, 0)))
    want = np.pad(np.maximum(x.transpose(2, 0, 1), 0)[None], [(0, 0), (0, 0), (1, 1), (1, 1)])
    np.testing.assert_array_equal(got, want)
    assert "?(data1+" not in text and "?data1[" not in text and "ts_keep((data1+" in text


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("lanes", [4, 8])
def test_a_read_masked_on_the_channels_is_unconditional_and_inside_the_buffer(threads, lanes):
    """The neighbour channels a local response normalization reads: masked on the channels
    (not the lanes), read at a clamped channel, so never outside the buffer (the first and last
    channels' neighbours are off its ends), and kept only where the channel exists."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 6, 5, 13)).astype(np.float32)
    t = Tensor(x)
    below = t.pad([(0, 0), (1, 0), (0, 0), (0, 0)]).shrink([(0, 1), (0, 6), (0, 5), (0, 13)])
    above = t.pad([(0, 0), (0, 1), (0, 0), (0, 0)]).shrink([(0, 1), (1, 7), (0, 5), (0, 13)])
    y = ((below * below + above * above) * -0.5).exp() * t
    item = create_schedule([y.node])[-1]
    kernel = item.kernel
    assert kernel.domain == (1, 6, 5, 13)
    got, text = _run(item, cpu_config(kernel, threads, upcast=(1, 1, 1, lanes)))
    up = np.pad(x, [(0, 0), (1, 0), (0, 0), (0, 0)])[:, :6]
    down = np.pad(x, [(0, 0), (0, 1), (0, 0), (0, 0)])[:, 1:]
    np.testing.assert_allclose(got, np.exp((up * up + down * down) * -0.5) * x,
                               rtol=1e-5, atol=1e-6)
    assert "?data1[" not in text and "?(data1+" not in text
    assert text.count("ts_keep((data1+") >= 2


@pytest.mark.parametrize("threads", [1, 2])
def test_an_elementwise_tail_runs_shifted_back_in_whole_vectors(threads):
    """55 columns in blocks of 32: the tail's 23 columns run as 24, columns 31..54, column 31
    computed twice (and equal)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 55)).astype(np.float32)
    y = (Tensor(x) * 0.5).exp() + 1.0
    item = create_schedule([y.node])[-1]
    kernel = item.kernel
    config = cpu_config(kernel, threads, upcast=(1, 32), order=(0, 1))
    got, text = _run(item, config)
    np.testing.assert_allclose(got, np.exp(x * 0.5) + 1, rtol=2e-6)
    tail = text[text.index("_tail1("):]
    assert re.search(r"_block\([^;]*, 31, 1, 24\);", tail), tail[:400]


def test_a_tail_split_over_the_threads_is_not_shifted():
    """Two threads would write the columns both blocks cover: the tail stays a tail."""
    x = np.random.default_rng(4).standard_normal((3, 55)).astype(np.float32)
    item = create_schedule([((Tensor(x) * 0.5).exp()).node])[-1]
    config = cpu_config(item.kernel, 2, upcast=(1, 32), order=(1, 0))
    got, text = _run(item, config)
    np.testing.assert_allclose(got, np.exp(x * 0.5), rtol=2e-6)
    tail = text[text.index("_tail1("):]
    assert re.search(r"_block\([^;]*, o1, 1, 23\);", tail), tail[:400]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("stride", [1, 2])
def test_a_max_pool_over_a_channels_last_value_vectorizes_on_the_border_too(threads, stride):
    """A 3x3 max pool, padding 1, of a value stored channels last: tap by tap, each tap read
    from the value itself and -inf where it falls in the padding (no padded copy). The -inf
    is picked through the bits of the two values (ts_select), not by `test ? read : -inf`,
    under which GCC moved the read into a branch and ran the border's blocks one element at a
    time (a 13x13 map's pool 3x slower than a copy and a reduce)."""
    rng = np.random.default_rng(8)
    x = -np.abs(rng.standard_normal((1, 9, 9, 48))).astype(np.float32)  # the padding loses
    y = Tensor(x).permute(0, 3, 1, 2).max_pool2d(3, stride, 1)
    item, = create_schedule([y.node])  # writing y channels first, as asked
    out = -(-9 // stride)
    assert item.kernel.domain == (1, out, out, 48, 1)  # a reduce of the one combined term
    got, text = _run(item, cpu_config(item.kernel, threads, upcast=(1, 1, 1, 16)))
    padded = np.pad(x, [(0, 0), (1, 1), (1, 1), (0, 0)], constant_values=-np.inf)
    want = np.max([padded[:, i:i + stride * out:stride, j:j + stride * out:stride]
                   for i in range(3) for j in range(3)], axis=0)
    np.testing.assert_array_equal(got.reshape(want.shape[0], *want.shape[3:], *want.shape[1:3]),
                                  want.transpose(0, 3, 1, 2))
    assert "ts_select(" in text and "= -INFINITY;" in text
    blocks = _every_block_vectorizes(text)
    assert {b.rsplit("_", 1)[-1] for b in blocks} >= {"inner", "edge"}, blocks


def test_a_where_on_a_condition_of_each_lane_stays_a_blend():
    """GELU written with erf (a where on the sign of each element) as a matmul's epilogue: the
    where is `?:`, which GCC makes a blend, and the epilogue's lane loop vectorizes. Picked
    through the bits instead (as a mask test is), GCC vectorized no loop of that epilogue and
    a transformer's feed-forward matmul ran 5x slower."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal((64, 128)).astype(np.float32)
    w = rng.standard_normal((128, 96)).astype(np.float32) * 0.1
    y = (Tensor(a) @ Tensor(w)).gelu()
    item = create_schedule([y.node])[-1]
    got, text = _run(item, cpu_config(item.kernel, 1))
    from math import erf
    z = a @ w
    want = 0.5 * z * (1 + np.vectorize(erf)(z / np.sqrt(2)))
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-5)
    assert "ts_select(" not in text and "?" in text
    epilogue = re.search(r"void (\w+_epilogue)\(", text)
    assert epilogue, "the epilogue runs in a function of its own"
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines, 1) if epilogue.group(1) + "(" in line)
    end = next(i for i, line in enumerate(lines, 1) if i > start and line == "}")
    assert [n for n in _vectorized_lines(text, _device_flags()) if start <= n <= end]
