"""What a kernel is, as far as the CPU space cares: a matmul at heart (its row and column axes,
and which operand is the column side), and which of its loads can be staged in panels."""
from __future__ import annotations

from tunesearch.graph.kernel import Kernel


def packable(kernel: Kernel) -> tuple[int, ...]:
    """Loads that can be staged in a panel: one view per buffer, read along the reduce."""
    if not kernel.n_reduce:
        return ()
    views: dict[int, set] = {}
    for node in kernel.loads():
        views.setdefault(node.arg[0], set()).add(node.arg[1])
    out = []
    for index, vs in sorted(views.items()):
        if len(vs) == 1:
            view = next(iter(vs))
            if any(view.strides[a] != 0 for a in range(kernel.n_out, len(kernel.domain))):
                out.append(index)
    return tuple(out)


def subsets(items: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every subset of items, as tuples in their order (the empty one first)."""
    out = [()]
    for item in items:
        out += [s + (item,) for s in out]
    return out


def gemm_axes(kernel: Kernel) -> tuple[int, int, int] | None:
    """(row axis, column axis, buffer of the column side) where the kernel is a matmul at
    heart: two loads read along the reduce, one varying along output axes the other does not.
    The column axis is one its load reads contiguously where there is one (the vector lanes)."""
    n_out, domain = kernel.n_out, kernel.domain
    reads = [(n.arg[0], n.arg[1]) for n in kernel.loads()
             if any(n.arg[1].strides[a] for a in range(n_out, len(domain)))]
    own: dict[int, list[int]] = {}
    for axis in range(n_out):
        if domain[axis] == 1:
            continue
        varying = {b for b, v in reads if v.strides[axis] != 0}
        if len(varying) == 1:
            own.setdefault(varying.pop(), []).append(axis)
    if len(own) < 2:
        return None
    views = dict(reads)

    def col_score(item):
        buf, axes = item
        best = max(axes, key=lambda a: (abs(views[buf].strides[a]) == 1, a))
        return (abs(views[buf].strides[best]) == 1, domain[best] >= 16, best), best, buf
    (_, col, b_side), *_ = sorted((col_score(i) for i in own.items()), reverse=True)
    rows = [a for buf, axes in own.items() if buf != b_side for a in axes]
    row = max(rows, key=lambda a: (domain[a], a))
    return row, col, b_side
