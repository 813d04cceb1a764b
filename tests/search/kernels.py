"""Small kernels for the search tests, built through the front end."""
from __future__ import annotations

import numpy as np

from tunesearch import Tensor
from tunesearch.graph.kernel import Kernel
from tunesearch.graph.schedule import create_schedule


def _tensor(*shape: int) -> Tensor:
    return Tensor(np.ones(shape, np.float32), device="reference")


def kernel_of(tensor: Tensor) -> Kernel:
    """The one kernel that realizes tensor."""
    [item] = create_schedule([tensor.node])
    return item.kernel


def matmul(m: int, k: int, n: int) -> Kernel:
    return kernel_of(_tensor(m, k) @ _tensor(k, n))


def add(*shape: int) -> Kernel:
    return kernel_of(_tensor(*shape) + _tensor(*shape))
