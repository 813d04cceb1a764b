"""Shared helpers for device conformance: sample random valid configs of a kernel's space."""
from __future__ import annotations

import random

import numpy as np

from tunesearch.graph.kernel import Kernel
from tunesearch.space.config import Config
from tunesearch.space.space import Space


def sample_configs(space: Space, count: int, seed: int = 0, tries: int = 4000) -> list[Config]:
    """Up to count distinct valid configs, the default and naive ones first."""
    rng = random.Random(seed)
    out: list[Config] = []
    for config in (space.default(), space.naive()):
        if space.validate(config) is None and config not in out:
            out.append(config)
    params = space.parameters()
    for _ in range(tries):
        if len(out) >= count:
            break
        values = {}
        for p in params:
            if p.when is not None and values.get(p.when[0]) not in p.when[1]:
                continue
            values[p.name] = rng.choice(p.choices)
        config = space.config_from(values)
        if config not in out and space.validate(config) is None:
            out.append(config)
    return out


def output_error(got: np.ndarray, want: np.ndarray) -> float:
    """Largest difference relative to the expected output's scale (at least 1). Equal values,
    infinities included, and NaN on both sides agree; NaN on one side only is an infinite error."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    diff = np.where(same, 0.0, np.abs(got - want))
    if np.isnan(diff).any():
        return float("inf")
    finite = want[np.isfinite(want)]
    scale = max(1.0, float(np.abs(finite).max())) if finite.size else 1.0
    return float(diff.max()) / scale if diff.size else 0.0


def tolerance(kernel: Kernel) -> float:
    """Relative error allowed: float32 sums reassociate, so it grows with the reduce length."""
    reduce_len = 1
    for size in kernel.domain[kernel.n_out:]:
        reduce_len *= size
    return 1e-5 * max(8.0, reduce_len ** 0.5 * 4)
