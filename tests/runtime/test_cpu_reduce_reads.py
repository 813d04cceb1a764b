"""The reads a reduce makes in place go through a pointer set where the innermost reduce loop
starts: the block's origins and the outer reduce indices in the pointer, only the lanes and the
inner reduce index in the subscript, so each row of a register block is the pointer plus a
constant (with the whole index in the subscript GCC kept a pointer per row and spilled them).
Against numpy: reads over one and two reduce loops, with a k tile and with split partial sums,
on one and two threads."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tests.runtime.cpu_items import cpu_config, run_item
from tunesearch import Tensor
from tunesearch.graph.schedule import create_schedule
from tunesearch.runtime.device import get_device

DEVICE = get_device("cpu")


def _reads(text: str) -> list[str]:
    """The subscripts of the reduce's reads in place: q<n>[...]"""
    return re.findall(r"\bq\d+\[([^\]]*)\]", text)


def _two_loop_reduce(rng):
    """sum over (3, 32) of x[m, r0, r1] * w[r0, r1, n], x read from a wider buffer (rows of 40):
    the reduce axes do not chain into one flat loop."""
    x = rng.standard_normal((30, 3, 40)).astype(np.float32)
    w = rng.standard_normal((3, 32, 48)).astype(np.float32)
    xs = Tensor(x)[:, :, :32].reshape(30, 1, 3, 32)
    ws = Tensor(w).permute(2, 0, 1).reshape(1, 48, 3, 32)
    item = create_schedule([(xs * ws).sum((2, 3)).node])[-1]
    return item, np.einsum("mab,abn->mn", x[:, :, :32], w)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("block,knobs", [((5, 1), {}), ((2, 4), {"split": 4}),
                                         ((5, 1), {"ktile": 2}), ((5, 1), {"unroll": 1})],
                         ids=["plain", "split", "ktile", "rolled"])
def test_a_two_loop_reduce_reads_through_row_pointers(threads, block, knobs):
    item, want = _two_loop_reduce(np.random.default_rng(4))
    assert item.kernel.domain == (30, 48, 3, 32), item.kernel.domain
    rows, columns = block  # columns: lanes (1), or outputs where the split runs on the lanes
    lanes = DEVICE.info().target.lanes() if columns == 1 else columns
    config = cpu_config(item.kernel, threads, upcast=(rows, lanes), order=(0, 1), pack=(),
                        **knobs)
    got, program = run_item(item, config)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    reads = _reads(program.source.text)
    assert reads, program.source.text
    # no block origin and no outer reduce index in a subscript: those are in the pointer
    assert not any(re.search(r"\bo\d|\br0\b", r) for r in reads), reads
    assert any(re.search(r"\bl0\*", r) for r in reads), reads  # the rows: constants apart


@pytest.mark.parametrize("threads", [1, 2])
def test_a_matmul_reads_its_rows_through_one_pointer(threads):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((62, 64)).astype(np.float32)
    b = rng.standard_normal((64, 200)).astype(np.float32)
    item = create_schedule([(Tensor(a) @ Tensor(b)).node])[-1]
    lanes = DEVICE.info().target.lanes()
    got, program = run_item(item, cpu_config(item.kernel, threads, upcast=(6, 2 * lanes),
                                              order=(0, 1)))
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    text = program.source.text
    pointer = re.search(r"const float\* restrict (q\d+) = data1 \+ \(([^;]*)\);", text)
    assert pointer and "o0*64" in pointer.group(2), text
    assert re.search(rf"{pointer.group(1)}\[l0\*64\+r0\]", text), text
