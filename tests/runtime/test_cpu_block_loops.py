"""A block's short loops stay loops in the compiled kernel: a transposing copy whose contiguous
runs are a few elements long (a 3x3 im2col copy laid out [positions, channel x kernel]) calls
no memmove per run inside a parallel loop, where the pointers lose `restrict`. Blocks with an
axis longer than the whole-unroll limit (96 lanes) keep GCC's library calls, which take their
accumulators apart into registers. Each against numpy, on one and two threads."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from tests.runtime.cpu_items import cpu_config, rows_that_fit, run_item
from tunesearch import Tensor
from tunesearch.graph.schedule import create_schedule
from tunesearch.runtime.cpu import compiler
from tunesearch.runtime.device import get_device
from tunesearch.codegen.c import NO_LIBCALLS, UNROLL_LANES

DEVICE = get_device("cpu")

pytestmark = pytest.mark.skipif(
    "Free Software Foundation" not in subprocess.run(
        [compiler()[0], "--version"], capture_output=True, text=True).stdout
    or shutil.which("nm") is None,
    reason="GCC's loop distribution, read back with nm")


def _build(item, threads: int, **knobs):
    got, program = run_item(item, cpu_config(item.kernel, threads, **knobs))
    library = DEVICE.compile(program.source).decode()
    listing = subprocess.run(["nm", "-D", "--undefined-only", library], capture_output=True,
                             text=True, check=True).stdout
    imported = {line.split()[-1].split("@")[0] for line in listing.splitlines() if line.strip()}
    return got, program.source.text, imported


@pytest.mark.parametrize("threads", [1, 2])
def test_an_im2col_copy_in_runs_of_three_calls_no_memmove(threads):
    """The 3x3 windows of a padded 16-channel 13x13 map laid out [positions, channel x
    kernel], as a convolution with its output channels on the lanes reads them."""
    x = np.random.default_rng(0).standard_normal((16, 15, 15)).astype(np.float32)
    cols = Tensor(x).windows([3, 3], [1, 1], [1, 1], [(0, 0), (0, 0)], [13, 13])
    item = create_schedule([cols.permute(1, 2, 0, 3, 4).reshape(169, 144).node])[-1]
    assert item.kernel.domain == (13, 13, 16, 3, 3), item.kernel.domain
    got, text, imported = _build(item, threads, upcast=(1, 1, 1, 1, 3), order=(0, 1, 2, 3, 4))
    want = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(1, 2))
    np.testing.assert_array_equal(got, want.transpose(1, 2, 0, 3, 4))
    assert "ts_parallel" in imported or threads == 1  # the listing is read right
    assert not {"memmove", "memcpy"} & imported, imported
    assert NO_LIBCALLS in text


@pytest.mark.parametrize("threads", [1, 2])
def test_a_block_of_96_lanes_keeps_the_library_calls(threads):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 6)).astype(np.float32)
    b = rng.standard_normal((6, 200)).astype(np.float32)
    item = create_schedule([(Tensor(a) @ Tensor(b)).relu().node])[-1]
    # 96 lanes are whole vectors at every width (6 at AVX-512, 12 at AVX2, 24 at SSE4) and
    # past the whole-unroll limit; the rows are what the register file holds beside them
    lanes = DEVICE.info().target.lanes()
    assert 96 % lanes == 0 and 96 > UNROLL_LANES
    got, text, _ = _build(item, threads, upcast=(rows_that_fit(96 // lanes), 96), order=(1, 0),
                          pack=())
    np.testing.assert_allclose(got, np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)
    assert NO_LIBCALLS not in text
