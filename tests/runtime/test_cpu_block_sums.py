"""A register block's sums leave the accumulators one vector at a time: the copy of the sums
that the epilogue reads is a loop the compiler vectorizes (its own report), not a lane-by-lane
extraction from every register. A short-K matmul with a bias and a ReLU (a 1x1 convolution 64
channels deep, as resnet50's), its block 6 rows by four vectors (6x64 at AVX-512), against
numpy on one and two threads."""
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


def _vectorized_lines(text: str) -> set[int]:
    cc, _ = compiler()
    flags = [f for f in DEVICE.flags if f != "-shared"]
    report = subprocess.run([cc, *flags, "-fopt-info-vec-optimized", "-x", "c", "-", "-c",
                             "-o", "/dev/null"], input=text, capture_output=True, text=True)
    if "unrecognized" in report.stderr or report.returncode != 0:
        pytest.skip(f"{cc} gives no vectorizer report: {report.stderr[-200:]}")
    return {int(m.group(1)) for m in re.finditer(r"<stdin>:(\d+):\d+: optimized: loop vectorized",
                                                 report.stderr)}


@pytest.mark.parametrize("threads", [1, 2])
def test_the_copy_of_a_blocks_sums_is_a_vector_loop(threads):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((62, 64)).astype(np.float32)
    b = rng.standard_normal((64, 256)).astype(np.float32)
    bias = rng.standard_normal(256).astype(np.float32)
    item = create_schedule([(Tensor(a) @ Tensor(b) + Tensor(bias)).relu().node])[-1]
    assert item.kernel.domain == (62, 256, 64), item.kernel.domain
    lanes = DEVICE.info().target.lanes()
    got, program = run_item(item, cpu_config(item.kernel, threads, upcast=(6, 4 * lanes),
                                              order=(0, 1)))
    np.testing.assert_allclose(got, np.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4)
    lines = program.source.text.splitlines()
    # the copy's loop nest: from the declaration of blk to the store into it (GCC reports a
    # vectorized loop at a statement of its body, 1-based)
    start = next(i for i, line in enumerate(lines, 1) if re.match(r"\s*float blk\[", line))
    store = next(i for i, line in enumerate(lines, 1) if re.search(r"blk(\[l\d\])+ = red;", line))
    vectorized = _vectorized_lines(program.source.text)
    assert any(start < line <= store for line in vectorized), (
        sorted(vectorized), lines[start - 1:store])
