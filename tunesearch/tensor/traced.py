"""A Tensor program run as a model runs: traced once per set of input shapes into a plan (its
buffers pooled, its constant operands packed once, its kernels launched in one sequence), then
replayed on every call with new arrays.

    >>> import numpy as np
    >>> from tunesearch import Tensor, traced
    >>> w = Tensor(np.ones((4, 3), np.float32))
    >>> double = traced(lambda x: (x @ w).relu() * 2)
    >>> double(np.ones((2, 4), np.float32))
    array([[8., 8., 8.],
           [8., 8., 8.]], dtype=float32)
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from tunesearch import settings
from tunesearch.errors import InputError
from tunesearch.graph.dtypes import dtypes
from tunesearch.lowering.plan import Plan
from tunesearch.runtime.device import get_device
from tunesearch.runtime.lookup import TunedConfigs
from tunesearch.tensor.lookups import default_lookup
from tunesearch.tensor.tensor import Tensor


class traced:
    """fn (Tensors in, a Tensor or a tuple of them out) as a replayable program. Each call takes
    numpy arrays, one per argument of fn, and returns numpy arrays. Tensors fn reads from
    outside its arguments (weights) are constants of the plan: change them and trace anew."""

    def __init__(self, fn: Callable, device: str | None = None,
                 lookup: TunedConfigs | None = None):
        self.fn, self.device, self.lookup = fn, device or settings.default_device(), lookup
        self._plans: dict[tuple, tuple[Plan, bool]] = {}

    def plan(self, *arrays: np.ndarray) -> Plan:
        """The plan for arguments shaped and typed like arrays (traced on first use)."""
        return self._plan([np.asarray(a) for a in arrays])[0]

    def _plan(self, arrays: list[np.ndarray]) -> tuple[Plan, bool]:
        key = tuple((a.shape, dtypes.from_numpy(a.dtype).name) for a in arrays)
        if key not in self._plans:
            inputs = {f"#{i}": Tensor.placeholder(a.shape, dtypes.from_numpy(a.dtype),
                                                  self.device)
                      for i, a in enumerate(arrays)}
            out = self.fn(*inputs.values())
            several = isinstance(out, (tuple, list))
            outs = list(out) if several else [out]
            if not all(isinstance(o, Tensor) for o in outs):
                raise InputError("a traced function returns a Tensor or a tuple of Tensors")
            lookup = self.lookup if self.lookup is not None else default_lookup()
            plan = Plan(get_device(self.device), inputs, outs, [o.dtype.np for o in outs],
                        [f"output {i}" for i in range(len(outs))], lookup=lookup)
            self._plans[key] = (plan, several)
        return self._plans[key]

    def __call__(self, *arrays):
        arrays = [np.asarray(a) for a in arrays]
        plan, several = self._plan(arrays)
        outs = plan.run({f"#{i}": a for i, a in enumerate(arrays)})
        return tuple(outs) if several else outs[0]
