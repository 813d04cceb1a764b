"""A matrix product's epilogue that holds an exp2 (a SiLU) runs in a function of its own,
handed the register block's sums (c_block.BlockFunction.outlined_epilogue): right against numpy
with full blocks and tails on both axes, with and without a k tile, on one and two threads; an
epilogue without one (a ReLU) stays inline."""
from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.cpu_items import cpu_config, run_item
from tunesearch import Tensor
from tunesearch.graph.schedule import create_schedule

RNG = np.random.default_rng(5)


def _product(m: int, k: int, n: int, activation: str):
    a = (RNG.standard_normal((m, k)) * 0.05).astype(np.float32)
    b = (RNG.standard_normal((k, n)) * 0.05).astype(np.float32)
    y = Tensor(a, device="cpu") @ Tensor(b, device="cpu")
    out = y * y.sigmoid() if activation == "silu" else y.relu()
    exact = a.astype(np.float64) @ b.astype(np.float64)
    want = exact / (1 + np.exp(-exact)) if activation == "silu" else np.maximum(exact, 0)
    return create_schedule([out.node])[-1], want


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("knobs", [{}, {"ktile": 256}], ids=["whole reduce", "k tile"])
def test_a_silu_epilogue_runs_apart_and_is_right(knobs, threads):
    item, want = _product(61, 1024, 100, "silu")  # 61 and 100: tail blocks on both axes
    got, program = run_item(item, cpu_config(item.kernel, threads, **knobs))
    assert "_epilogue(" in program.source.text
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-5)


def test_a_relu_epilogue_stays_inline():
    item, want = _product(61, 256, 100, "relu")
    got, program = run_item(item, cpu_config(item.kernel, 1))
    assert "_epilogue(" not in program.source.text
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-5)
