"""What a kernel is, as far as the CPU space cares: a matmul at heart (its row and column axes,
which operand is the column side, its batch axes), which of its loads can be staged in panels,
and where its output axes lie inside every pad's mask."""
from __future__ import annotations

from tunesearch.graph.kernel import Kernel
from tunesearch.graph.view import View


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


def reduce_reads(kernel: Kernel) -> list[tuple[int, View]]:
    """(buffer, view) of each load that steps through the reduce."""
    n_out, domain = kernel.n_out, kernel.domain
    return [(n.arg[0], n.arg[1]) for n in kernel.loads()
            if any(n.arg[1].strides[a] for a in range(n_out, len(domain)))]


def batch_axes(kernel: Kernel) -> set[int]:
    """The output axes of a matmul-like kernel (gemm_axes) along which every load that steps
    through the reduce moves: groups of a grouped convolution, heads of attention. Not a
    depthwise convolution's channels: it is no matmul (its weights move along the channels
    only), and its channels are its vector lanes."""
    if gemm_axes(kernel) is None:
        return set()
    views = [view for _, view in reduce_reads(kernel)]
    return {a for a in range(kernel.n_out)
            if kernel.domain[a] > 1 and all(v.strides[a] for v in views)}


def gemm_axes(kernel: Kernel) -> tuple[int, int, int] | None:
    """(row axis, column axis, buffer of the column side) where the kernel is a matmul at
    heart: two loads read along the reduce, one varying along output axes the other does not.
    The column axis is one its load reads contiguously where there is one (the vector lanes)."""
    n_out, domain = kernel.n_out, kernel.domain
    reads = reduce_reads(kernel)
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


def interior_ranges(kernel: Kernel) -> dict[int, tuple[int, int]]:
    """Per output axis that some view masks (a pad), the range of indices inside every mask on
    it. A block within these ranges on every such axis runs without the tests: the C
    renderer's block function takes a flag `inner`, and the full blocks are called with it
    constant, once 1 and once 0, so the compiler makes an unmasked copy that vectorizes (a
    masked read does not); where the lanes' axis is masked besides others it has a flag of its
    own, `inlanes`, and a block whose other axes lie inside runs a third copy that tests only
    its lanes."""
    ranges: dict[int, tuple[int, int]] = {}
    for a, lo, hi, size in _masked_ranges(kernel):
        if a < kernel.n_out:
            old = ranges.get(a, (0, size))
            ranges[a] = (max(old[0], lo), min(old[1], hi))
    return ranges


def masked_axes(kernel: Kernel) -> set[int]:
    """The axes of the kernel's domain, output and reduce, on which some read or constant is
    masked."""
    return {a for a, *_ in _masked_ranges(kernel)}


def _masked_ranges(kernel: Kernel) -> list[tuple[int, int, int, int]]:
    """(axis, lo, hi, size) of every range a read's or a constant's mask limits its view to."""
    return [(a, lo, hi, size) for node in kernel.expr.walk()
            if node.op in ("load", "const") and node.arg[1].mask is not None
            for a, ((lo, hi), size) in enumerate(zip(node.arg[1].mask, node.arg[1].shape))
            if (lo, hi) != (0, size)]
