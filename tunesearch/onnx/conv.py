"""ONNX Conv and ConvTranspose: the attributes read into the geometry `Tensor.conv2d` takes
(pads from auto_pad; the pools in nn.py read theirs here too). The form each
convolution runs in is the lowering's choice (tunesearch.lowering.conv), as for a Tensor
program.
"""
from __future__ import annotations

import numpy as np

from tunesearch.onnx.registry import register

# ---- window geometry

def _spatial_pads(ctx, in_sp, kernel, strides, dilations) -> list[tuple[int, int]]:
    n = len(kernel)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for i, k, s, d in zip(in_sp, kernel, strides, dilations):
            total = max((-(-i // s) - 1) * s + (k - 1) * d + 1 - i, 0)
            small = total // 2
            pads.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
        return pads
    if auto == "VALID":
        return [(0, 0)] * n
    flat = ctx.attr("pads", [0] * (2 * n))
    return list(zip(flat[:n], flat[n:]))


def window_geometry(ctx, in_sp, kernel) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    """strides, dilations and (before, after) pads of a conv or pool node."""
    n = len(kernel)
    if n != len(in_sp) or any(k < 1 for k in kernel):
        raise ctx.error(f"kernel {list(kernel)} does not fit the input's {len(in_sp)} spatial "
                        "dims (one size of at least 1 for each)")
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    if len(strides) != n or len(dilations) != n or any(v < 1 for v in strides + dilations):
        raise ctx.error(f"strides {strides} and dilations {dilations} need {n} values each, "
                        "of at least 1")
    return strides, dilations, _spatial_pads(ctx, in_sp, kernel, strides, dilations)


@register("Conv")
def conv(ctx, x, w, bias=None):
    x = ctx.tensor(x)
    strides, dilations, pads = window_geometry(ctx, x.shape[2:], w.shape[2:])
    return x.conv2d(w, bias, strides, pads, dilations, ctx.attr("group", 1))


@register("ConvTranspose")
def conv_transpose(ctx, x, w, bias=None):
    """A convolution over the input with (stride - 1) zeros between elements, padded by
    dilation * (kernel - 1) less the pads, with the weight flipped and its channels swapped."""
    x = ctx.tensor(x)
    n, groups = x.ndim - 2, ctx.attr("group", 1)
    kernel = tuple(w.shape[2:])
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    extra = list(ctx.attr("output_padding", [0] * n))
    in_sp = x.shape[2:]
    full = [s * (i - 1) + o + (k - 1) * d + 1
            for i, s, o, k, d in zip(in_sp, strides, extra, kernel, dilations)]
    auto, shape = ctx.attr("auto_pad", "NOTSET"), ctx.attr("output_shape")
    if shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        target = list(shape)[-n:] if shape is not None else [i * s for i, s in zip(in_sp, strides)]
        totals = [f - t for f, t in zip(full, target)]
        upper = auto == "SAME_UPPER"
        pads = [(t // 2, t - t // 2) if upper else (t - t // 2, t // 2) for t in totals]
    elif auto == "VALID":
        pads = [(0, 0)] * n
    else:
        flat = ctx.attr("pads", [0] * (2 * n))
        pads = list(zip(flat[:n], flat[n:]))
    if any(s > 1 for s in strides):
        batch, cin = x.shape[:2]
        spread = x.reshape(batch, cin, *[v for i in in_sp for v in (i, 1)])
        spread = spread.pad([(0, 0), (0, 0)] + [p for s in strides for p in ((0, 0), (0, s - 1))])
        spread = spread.reshape(batch, cin, *[i * s for i, s in zip(in_sp, strides)])
        x = spread.shrink([(0, batch), (0, cin)] + [(0, (i - 1) * s + 1)
                                                    for i, s in zip(in_sp, strides)])
    cin, rc = w.shape[:2]
    cig = cin // groups
    if isinstance(w, np.ndarray):
        flipped = w.reshape(groups, cig, rc, *kernel).swapaxes(1, 2)
        flipped = np.flip(flipped, tuple(range(3, 3 + n))).reshape(groups * rc, cig, *kernel)
        weight = np.ascontiguousarray(flipped)
    else:
        weight = w.reshape(groups, cig, rc, *kernel).transpose(1, 2)
        weight = weight.flip(tuple(range(3, 3 + n))).reshape(groups * rc, cig, *kernel)
    conv_pads = [(d * (k - 1) - b, d * (k - 1) - e + o)
                 for d, k, (b, e), o in zip(dilations, kernel, pads, extra)]
    return x.conv2d(weight, bias, [1] * n, conv_pads, dilations, groups)
