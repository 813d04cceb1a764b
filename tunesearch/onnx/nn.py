"""ONNX operators for networks: pooling, normalizations, LRN, Pad and Resize (convolutions and
the window geometry are in conv.py, Resize's linear and cubic weights in interpolate.py)."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from tunesearch.onnx.conv import window_geometry
from tunesearch.onnx.interpolate import resize_axis, resize_matrix, source_position
from tunesearch.onnx.registry import axis_of, register
from tunesearch.onnx.shape import gather_known
from tunesearch.tensor import Tensor


# ---- pooling

def _pool_geometry(ctx, x: Tensor):
    """kernel, strides, pads, dilations and ceil_mode of a pool node, in Tensor's terms."""
    kernel = list(ctx.attr("kernel_shape"))
    strides, dilations, pads = window_geometry(ctx, x.shape[2:], kernel)
    return kernel, strides, pads, dilations, bool(ctx.attr("ceil_mode", 0))


def _check_maxpool(ctx) -> Optional[str]:
    return "MaxPool with the Indices output" if ctx.n_outputs > 1 else None


@register("MaxPool", check=_check_maxpool)
def max_pool(ctx, x):
    x = ctx.tensor(x)
    kernel, strides, pads, dilations, ceil_mode = _pool_geometry(ctx, x)
    return x.max_pool2d(kernel, strides, pads, dilations, ceil_mode)


@register("AveragePool")
def average_pool(ctx, x):
    x = ctx.tensor(x)
    kernel, strides, pads, dilations, ceil_mode = _pool_geometry(ctx, x)
    return x.avg_pool2d(kernel, strides, pads, bool(ctx.attr("count_include_pad", 0)),
                        ceil_mode, dilations)


@register("GlobalAveragePool")
def global_average_pool(ctx, x):
    x = ctx.tensor(x)
    return x.mean(tuple(range(2, x.ndim)), keepdim=True)


@register("GlobalMaxPool")
def global_max_pool(ctx, x):
    x = ctx.tensor(x)
    return x.max(tuple(range(2, x.ndim)), keepdim=True)


@register("LRN")
def lrn(ctx, x):
    return ctx.tensor(x).local_response_norm(ctx.attr("size"), ctx.attr("alpha", 1e-4),
                                             ctx.attr("beta", 0.75), ctx.attr("bias", 1.0))


# ---- normalizations

def _channel_shape(x: Tensor) -> tuple[int, ...]:
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _check_batchnorm(ctx) -> Optional[str]:
    if ctx.n_outputs > 1 and (ctx.opset >= 14 or ctx.attr("training_mode", 0)):
        return "BatchNormalization with running-statistics outputs (training)"
    return None


@register("BatchNormalization", check=_check_batchnorm)
def batch_norm(ctx, x, scale, bias, mean, var):
    """Inference: the given mean and variance. Training mode (opset 14+, output Y only): the
    batch's own statistics over every axis but the channel, as onnxruntime computes them."""
    x = ctx.tensor(x)
    eps = ctx.attr("epsilon", 1e-5)
    shape = _channel_shape(x)
    if ctx.attr("training_mode", 0):
        axes = (0,) + tuple(range(2, x.ndim))
        normalized, _, _ = x.normalized(axes, eps)
        return normalized * ctx.tensor(scale).reshape(shape) + ctx.tensor(bias).reshape(shape)
    if all(isinstance(v, np.ndarray) for v in (scale, bias, mean, var)):
        a = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
        b = bias.astype(np.float64) - mean.astype(np.float64) * a
        return x * ctx.tensor(a.astype(np.float32).reshape(shape)) + \
            ctx.tensor(b.astype(np.float32).reshape(shape))
    scale, bias, mean, var = (ctx.tensor(v).reshape(shape) for v in (scale, bias, mean, var))
    return (x - mean) * ((var + eps).rsqrt() * scale) + bias


@register("InstanceNormalization")
def instance_norm(ctx, x, scale, bias):
    x = ctx.tensor(x)
    y, _, _ = x.normalized(tuple(range(2, x.ndim)), ctx.attr("epsilon", 1e-5))
    shape = _channel_shape(x)
    return y * ctx.tensor(scale).reshape(shape) + ctx.tensor(bias).reshape(shape)


@register("LayerNormalization")
def layer_norm(ctx, x, scale, bias=None):
    x = ctx.tensor(x)
    axis = axis_of(ctx.attr("axis", -1), x.ndim)
    y, mean, inv = x.normalized(tuple(range(axis, x.ndim)), ctx.attr("epsilon", 1e-5))
    y = y * ctx.tensor(scale)
    if bias is not None:
        y = y + ctx.tensor(bias)
    return y, mean, inv


@register("GroupNormalization")
def group_norm(ctx, x, scale, bias):
    x = ctx.tensor(x).materialize()
    groups, channels = ctx.attr("num_groups"), x.shape[1]
    grouped = x.reshape(x.shape[0], groups, -1)
    y, _, _ = grouped.normalized((2,), ctx.attr("epsilon", 1e-5))
    y = y.reshape(x.shape)
    per_channel = []
    for v in (scale, bias):
        if math.prod(v.shape) == groups != channels:  # opset 18: one value per group
            v = np.repeat(v, channels // groups) if isinstance(v, np.ndarray) else \
                v.reshape(groups, 1).expand(groups, channels // groups).reshape(channels)
        per_channel.append(ctx.tensor(v).reshape(_channel_shape(x)))
    return y * per_channel[0] + per_channel[1]


# ---- Pad and Resize

@register("Pad", known=(1, 2, 3))
def pad(ctx, x, pads=None, value=None, axes=None):
    x = ctx.tensor(x)
    mode = ctx.attr("mode", "constant")
    if ctx.opset < 11:
        flat, fill = list(ctx.attr("pads", ctx.attr("paddings"))), ctx.attr("value", 0.0)
    else:
        flat = ctx.ints(pads, "pads")
        fill = 0 if value is None or value.size == 0 else ctx.host(value, "value").reshape(-1)[0]
    dims = list(range(x.ndim)) if axes is None else \
        [axis_of(a, x.ndim) for a in ctx.ints(axes, "axes")]
    pairs = [(0, 0)] * x.ndim
    for i, axis in enumerate(dims):
        pairs[axis] = (flat[i], flat[i + len(dims)])
    if mode == "constant":
        fill = float(fill) if x.dtype.is_float else int(fill)
        return x.pad(pairs, fill).cast(x.dtype)
    inner = [(max(0, -b), s - max(0, -e)) for (b, e), s in zip(pairs, x.shape)]
    x = x.shrink(inner)
    for axis, (b, e) in enumerate(pairs):
        b, e = max(b, 0), max(e, 0)
        if b == e == 0:
            continue
        size = x.shape[axis]

        def take(lo: int, hi: int, x=x, axis=axis) -> Tensor:
            return x.shrink([(lo, hi) if a == axis else (0, s) for a, s in enumerate(x.shape)])
        if mode == "edge":
            left = [take(0, 1)] * b
            right = [take(size - 1, size)] * e
        elif mode == "reflect":
            left = [take(i, i + 1) for i in range(b, 0, -1)]
            right = [take(size - 1 - i, size - i) for i in range(1, e + 1)]
        elif mode == "wrap":
            left = [take(size - b, size)] if b else []
            right = [take(0, e)] if e else []
        else:
            raise ctx.error(f"mode {mode!r} is not supported")
        x = Tensor.cat(left + [x] + right, dim=axis)
    return x


def _check_resize(ctx) -> Optional[str]:
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        return f"{ctx.op} with mode={mode}"
    if mode == "nearest" and ctx.attr("coordinate_transformation_mode") == "tf_crop_and_resize":
        return f"{ctx.op} with mode=nearest and coordinate_transformation_mode=tf_crop_and_resize"
    return None


def nearest_indices(ctx, size: int, out: int, scale: float) -> np.ndarray:
    """The input index that output position y reads, for each y, by the node's rounding rules."""
    mode = ctx.attr("coordinate_transformation_mode",
                    "asymmetric" if ctx.op == "Upsample" or ctx.opset < 11 else "half_pixel")
    x = source_position(mode, np.arange(out, dtype=np.float64), size, out, out, scale)
    if mode == "pytorch_half_pixel" and out <= 1:
        x = np.zeros(out)
    rounding = ctx.attr("nearest_mode", "round_prefer_floor")
    if ctx.op == "Upsample" or ctx.opset < 11:
        rounding = "floor"
    pick = {"round_prefer_floor": lambda v: np.ceil(v - 0.5),
            "round_prefer_ceil": lambda v: np.floor(v + 0.5),
            "floor": np.floor, "ceil": np.ceil}[rounding]
    return np.clip(pick(x), 0, size - 1).astype(np.int64)


@register("Resize", "Upsample", check=_check_resize, known=(1, 2, 3))
def resize(ctx, x, roi=None, scales=None, sizes=None):
    x = ctx.tensor(x)
    if ctx.op == "Upsample" or ctx.opset < 11:
        scales, sizes, roi = (ctx.attr("scales") if roi is None else roi), None, None
    axes = [axis_of(a, x.ndim) for a in ctx.attr("axes", range(x.ndim))]
    in_sizes = [x.shape[a] for a in axes]
    if sizes is not None and math.prod(np.shape(sizes)) > 0:
        wanted = ctx.ints(sizes, "sizes")
        ratios = [w / i for w, i in zip(wanted, in_sizes)]
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            ratio = min(ratios) if policy == "not_larger" else max(ratios)
            ratios = [ratio] * len(axes)
            wanted = [int(math.floor(ratio * i + 0.5)) for i in in_sizes]
    else:
        ratios = [float(v) for v in np.asarray(ctx.host(scales, "scales")).reshape(-1)]
        wanted = [int(math.floor(i * r)) for i, r in zip(in_sizes, ratios)]
    method = ctx.attr("mode", "nearest")
    windows = [None] * len(axes)
    if ctx.attr("coordinate_transformation_mode") == "tf_crop_and_resize":
        box = [float(v) for v in np.asarray(ctx.host(roi, "roi")).reshape(-1)]
        windows = list(zip(box[:len(axes)], box[len(axes):]))
    for axis, size, out, ratio, window in zip(axes, in_sizes, wanted, ratios, windows):
        if method == "nearest":
            idx = nearest_indices(ctx, size, out, ratio)
            if out != size or np.any(idx != np.arange(size)):
                x = gather_known(x, axis, idx)
            continue
        weights, outside = resize_matrix(ctx, method, size, out, ratio, window)
        if out != size or outside.any() or not np.allclose(weights, np.eye(size)):
            x = resize_axis(ctx, x, axis, weights, outside)
    return x
