"""Resize's linear and cubic modes as one matrix per resized axis, built at import.

Each output position reads a few input positions with weights (two for linear, four for cubic,
more with antialias when downsampling); the weights follow the ONNX definition exactly (its
coordinate transformations, edge padding, exclude_outside, antialias, tf_crop_and_resize's
extrapolation), so they are computed once in numpy and the resize is a product with the
(output x input) matrix along that axis: a kernel the scheduler and tuner treat like any other.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from tunesearch.tensor import Tensor


def source_position(mode: str, y: np.ndarray, size: int, out: int, length: float,
                    scale: float, roi: Optional[tuple[float, float]] = None) -> np.ndarray:
    """The input coordinate each output position y maps to, by the coordinate transformation
    mode (the ONNX definitions): out is the output's length, length the one the ends of the
    axis are mapped by (the integer length for nearest, scale * size for the others)."""
    if mode == "align_corners":
        return y * (size - 1) / (length - 1) if length != 1 else np.zeros_like(y)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if length == 1:
            return np.full_like(y, (end - start) * (size - 1) / 2 + start * (size - 1))
        return y * (end - start) * (size - 1) / (length - 1) + start * (size - 1)
    if mode == "pytorch_half_pixel":
        return (y + 0.5) / scale - 0.5 if length != 1 else np.full_like(y, -0.5)
    if mode == "tf_half_pixel_for_nearest":
        return (y + 0.5) / scale
    if mode == "half_pixel_symmetric":
        return size / 2 * (1 - out / (scale * size)) + (y + 0.5) / scale - 0.5
    return (y + 0.5) / scale - 0.5  # half_pixel


def _coefficients(method: str, ratio: float, scale: float, cubic_a: float,
                  antialias: bool) -> np.ndarray:
    if method == "linear":
        if not antialias:
            return np.array([1 - ratio, ratio])
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, 2 - start) - ratio) * scale
        coeffs = np.clip(1 - np.abs(args), 0, 1)
        return coeffs / coeffs.sum()
    a = cubic_a
    if not antialias:
        r, s = ratio, 1 - ratio
        return np.array([((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
                         ((a + 2) * r - (a + 3)) * r * r + 1,
                         ((a + 2) * s - (a + 3)) * s * s + 1,
                         ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a])
    scale = min(scale, 1.0)
    start = int(np.floor(-2 / scale) + 1)
    x = np.abs(scale * (np.arange(start, 2 - start) - ratio))
    coeffs = np.where(x <= 1, (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1,
                      np.where(x < 2, a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a, 0.0))
    return coeffs / coeffs.sum()


def resize_matrix(ctx, method: str, size: int, out: int, scale: float,
                  roi: Optional[tuple[float, float]] = None) -> tuple[np.ndarray, np.ndarray]:
    """(the out x size weights, which output positions fall outside a crop's window)."""
    mode = ctx.attr("coordinate_transformation_mode", "half_pixel")
    exclude = bool(ctx.attr("exclude_outside", 0))
    antialias = bool(ctx.attr("antialias", 0))
    cubic_a = float(ctx.attr("cubic_coeff_a", -0.75))
    positions = source_position(mode, np.arange(out, dtype=np.float64), size, out,
                                scale * size, scale, roi)
    weights = np.zeros((out, size))
    outside = np.zeros(out, bool)
    for y, x in enumerate(positions):
        if mode == "tf_crop_and_resize" and (x < 0 or x > size - 1):
            outside[y] = True
            continue
        whole = math.floor(x)
        ratio = 1.0 if x == whole else x - whole
        coeffs = _coefficients(method, ratio, scale, cubic_a, antialias)
        n = len(coeffs)
        pad = math.ceil(n / 2)  # the input edge-padded by this much, as the definition reads it
        first = min(max(math.ceil(x + pad) - n // 2, 0), size + 2 * pad - n)
        index = np.arange(first, first + n) - pad
        if exclude:
            coeffs = np.where((index < 0) | (index >= size), 0.0, coeffs)
            coeffs = coeffs / coeffs.sum()
        np.add.at(weights[y], np.clip(index, 0, size - 1), coeffs)
    return weights, outside


def resize_axis(ctx, x: Tensor, axis: int, weights: np.ndarray, outside: np.ndarray) -> Tensor:
    """x resized along axis: the product of its rows along that axis with the weights."""
    order = [i for i in range(x.ndim) if i != axis] + [axis]
    moved = x.permute(tuple(order))
    rows = moved.reshape(-1, x.shape[axis]).materialize()
    out = rows.matmul(Tensor(weights.T.astype(np.float32), device=x.device))
    if outside.any():
        keep = Tensor(~outside.reshape(1, -1), device=x.device)
        out = keep.where(out, float(ctx.attr("extrapolation_value", 0.0)))
    out = out.reshape(moved.shape[:-1] + (weights.shape[0],))
    back = list(range(x.ndim - 1))
    back.insert(axis, x.ndim - 1)
    return out.permute(tuple(back)).cast(x.dtype)
