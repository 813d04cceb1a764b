"""The layout of a panel: an operand staged for a CPU kernel in a blocked scratch layout [blocks
of the operand's output axes][reduce][lanes], zero past the edges. The space checks a panel's size
against its limits; code generation writes the offsets into it and fills it, in the C kernel or
on the host (codegen/panels.py)."""
from __future__ import annotations

import math

from tunesearch.graph.kernel import Kernel


def varies(view, axis: int) -> bool:
    """Whether a load through view reads different places (or is masked) along axis."""
    return view.strides[axis] != 0 or (view.mask is not None
                                       and view.mask[axis] != (0, view.shape[axis]))


class PackInfo:
    """A load staged in a scratch panel laid out [blocks of its axes][reduce][lanes of its axes]."""

    def __init__(self, kernel: Kernel, index: int, upcast: tuple[int, ...], ktile: int = 0):
        n_out = kernel.n_out
        views = [n.arg[1] for n in kernel.loads() if n.arg[0] == index]
        self.index, self.view = index, views[0]
        self.axes = [a for a in range(n_out) if any(varies(v, a) for v in views)]
        self.blocks = [math.ceil(kernel.domain[a] / upcast[a]) for a in self.axes]
        self.lanes = [upcast[a] for a in self.axes]
        # with a k tile the panel holds one tile of the first reduce axis, refilled per tile
        self.reduce = list(kernel.domain[n_out:])
        if 0 < ktile < self.reduce[0]:
            self.reduce[0] = ktile
        self.size = math.prod(self.blocks) * math.prod(self.reduce) * math.prod(self.lanes)
        self.dtype = kernel.buffers[index].dtype
