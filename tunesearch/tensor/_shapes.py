"""Shape arguments and the errors of Tensor ops: shared by the Tensor and its movement ops."""
from __future__ import annotations

from typing import Iterable

from tunesearch.errors import ShapeError


def shape_error(op: str, shapes, problem: str) -> ShapeError:
    """The error of an op that cannot take these shapes, naming the op, the shapes and why."""
    shapes = ", ".join(str(tuple(s)) for s in shapes)
    return ShapeError(f"{op}: {problem} (shapes {shapes})")


def shape_arg(shape) -> tuple[int, ...]:
    """A shape given as integers, or as one list or tuple of them."""
    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        shape = shape[0]
    try:
        return tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise ShapeError(f"a shape is a sequence of integers, got {shape!r}") from None


def broadcast_shape(a: Iterable[int], b: Iterable[int], op: str) -> tuple[int, ...]:
    """The shape two shapes broadcast to, numpy's rules."""
    a, b = tuple(a), tuple(b)
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x != y and 1 not in (x, y):
            raise shape_error(op, [a, b], "shapes do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(out)
