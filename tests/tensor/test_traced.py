"""A traced Tensor program: one plan per set of input shapes, replayed, its constant-only kernels
run once when the plan is built."""
from __future__ import annotations

import numpy as np
import pytest

from tunesearch import Tensor, traced
from tunesearch.errors import InputError


def test_a_traced_program_matches_numpy_and_keeps_one_plan_per_shape():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 5), dtype=np.float32)
    weight = Tensor(w)
    run = traced(lambda x: ((x @ weight).relu() + 1.0, x.sum(1)))
    for rows in (3, 7, 3):
        x = rng.standard_normal((rows, 8), dtype=np.float32)
        y, s = run(x)
        np.testing.assert_allclose(y, np.maximum(x @ w, 0) + 1, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(s, x.sum(1), rtol=1e-5, atol=1e-5)
    assert len(run._plans) == 2


def test_kernels_that_read_only_constants_run_once_at_build():
    """A weight transposed inside the program is computed when the plan is built: each call
    runs only the kernels that read its inputs."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 4), dtype=np.float32)
    weight = Tensor(w)
    run = traced(lambda x: x * (weight.T.exp() + 1.0).sum(1))
    x = rng.standard_normal((3, 4), dtype=np.float32)
    np.testing.assert_allclose(run(x), x * (np.exp(w.T) + 1).sum(1), rtol=1e-5)
    plan = run.plan(x)
    assert len(plan.steps) == 1
    x2 = rng.standard_normal((3, 4), dtype=np.float32)
    np.testing.assert_allclose(run(x2), x2 * (np.exp(w.T) + 1).sum(1), rtol=1e-5)


def test_a_traced_function_must_return_tensors():
    with pytest.raises(InputError, match="returns a Tensor"):
        traced(lambda x: 3)(np.ones(2, np.float32))
