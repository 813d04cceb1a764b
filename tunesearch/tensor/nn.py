"""Neural-network ops on Tensor, each built from movement ops, elementwise ops and sum/max."""
from __future__ import annotations

import math
from typing import Sequence

from tunesearch.errors import ShapeError


def _pair(value, n: int = 2) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (list, tuple)) else (value,) * n


class NNMixin:
    __slots__ = ()

    def softmax(self, axis: int = -1):
        shifted = self - self.max(axis, keepdim=True)
        e = shifted.exp()
        return e / e.sum(axis, keepdim=True)

    def log_softmax(self, axis: int = -1):
        shifted = self - self.max(axis, keepdim=True)
        return shifted - shifted.exp().sum(axis, keepdim=True).log()

    def linear(self, weight, bias=None):
        out = self @ weight.T
        return out + bias if bias is not None else out

    def _pool(self, kernel: Sequence[int], stride, dilation):
        """Sliding windows over the last len(kernel) axes: (..., out..., kernel...).
        Built from repeat (expand + reshape), shrink and permute."""
        k_ = tuple(kernel)
        n = len(k_)
        s_, d_ = _pair(stride, n), _pair(dilation, n)
        noop = list(self.shape[:-n])
        i_ = self.shape[-n:]
        o_ = [(i - d * (k - 1) - 1) // s + 1 for i, d, k, s in zip(i_, d_, k_, s_)]
        if any(o <= 0 for o in o_):
            raise ShapeError(f"pool: window {k_} (dilation {d_}) does not fit input {i_}")
        m = len(noop)
        if all(k <= s for k, s in zip(k_, s_)) and all(d == 1 for d in d_):
            # windows do not overlap: pad to a multiple of the stride and split each axis
            x = self.pad([(0, 0)] * m + [(0, max(0, o * s - i)) for i, o, s in zip(i_, o_, s_)])
            x = x.shrink([(0, s) for s in noop] + [(0, o * s) for o, s in zip(o_, s_)])
            x = x.reshape(noop + [v for o, s in zip(o_, s_) for v in (o, s)])
            x = x.shrink([(0, s) for s in noop] + [p for o, k in zip(o_, k_)
                                                   for p in ((0, o), (0, k))])
            return x.permute(list(range(m)) + [m + 2 * i for i in range(n)] +
                             [m + 2 * i + 1 for i in range(n)])
        # repeat so no padding is needed, then slice the windows out by dilation and stride
        reps = [math.ceil(k * (i + d) / i) for k, i, d in zip(k_, i_, d_)]
        x = self.reshape(noop + [v for i in i_ for v in (1, i)])
        x = x.expand(noop + [v for r, i in zip(reps, i_) for v in (r, i)])
        x = x.reshape(noop + [r * i for r, i in zip(reps, i_)])
        x = x.shrink([(0, s) for s in noop] + [(0, k * (i + d)) for k, i, d in zip(k_, i_, d_)])
        x = x.reshape(noop + [v for k, i, d in zip(k_, i_, d_) for v in (k, i + d)])
        x = x.shrink([(0, s) for s in noop] + [p for k, o, s in zip(k_, o_, s_)
                                               for p in ((0, k), (0, o * s))])
        x = x.reshape(noop + [v for k, o, s in zip(k_, o_, s_) for v in (k, o, s)])
        x = x.shrink([(0, s) for s in noop] + [p for k, o in zip(k_, o_)
                                               for p in ((0, k), (0, o), (0, 1))])
        x = x.reshape(noop + [v for k, o in zip(k_, o_) for v in (k, o)])
        return x.permute(list(range(m)) + [m + 2 * i + 1 for i in range(n)] +
                         [m + 2 * i for i in range(n)])

    def _pad_spatial(self, padding, n: int, value: float = 0.0):
        if isinstance(padding, int):
            pads = [(padding, padding)] * n
        elif len(padding) == n:
            pads = [(p, p) for p in padding]
        else:  # ONNX order: begins then ends
            pads = list(zip(padding[:n], padding[n:]))
        if all(p == (0, 0) for p in pads):
            return self
        return self.pad([(0, 0)] * (self.ndim - n) + pads, value)

    def conv2d(self, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
        """NCHW input, (Cout, Cin/groups, kh, kw) weight: windows times weight, summed."""
        n_sp = weight.ndim - 2
        if self.ndim != n_sp + 2:
            raise ShapeError(f"conv: input {self.shape} and weight {weight.shape} need "
                             f"{n_sp + 2} dims each")
        bs, cin = self.shape[:2]
        cout, cin_g = weight.shape[:2]
        if cin != cin_g * groups or cout % groups:
            raise ShapeError(f"conv: input channels {cin} do not match weight {weight.shape} "
                             f"with groups={groups}")
        x = self._pad_spatial(padding, n_sp)._pool(weight.shape[2:], stride, dilation)
        out_sp = x.shape[2:2 + n_sp]
        rcout = cout // groups
        # (bs, groups, 1, cin_g, out..., k...) * (1, groups, rcout, cin_g, 1.., k...)
        x = x.reshape(bs, groups, 1, cin_g, *out_sp, *weight.shape[2:])
        x = x.expand(bs, groups, rcout, cin_g, *out_sp, *weight.shape[2:])
        w = weight.reshape(1, groups, rcout, cin_g, *([1] * n_sp), *weight.shape[2:])
        axes = [3] + [4 + n_sp + i for i in range(n_sp)]
        out = (x * w).sum(axes).reshape(bs, cout, *out_sp)
        if bias is not None:
            out = out + bias.reshape(1, cout, *([1] * n_sp))
        return out

    def max_pool2d(self, kernel_size=2, stride=None, padding=0, dilation=1):
        k = _pair(kernel_size, 2) if not isinstance(kernel_size, (list, tuple)) else kernel_size
        n = len(k)
        x = self._pad_spatial(padding, n, value=-math.inf)
        return x._pool(k, stride if stride is not None else k, dilation).max(
            tuple(range(-n, 0)))

    def avg_pool2d(self, kernel_size=2, stride=None, padding=0, count_include_pad=True):
        k = _pair(kernel_size, 2) if not isinstance(kernel_size, (list, tuple)) else kernel_size
        n = len(k)
        s = stride if stride is not None else k
        axes = tuple(range(-n, 0))
        summed = self._pad_spatial(padding, n)._pool(k, s, 1).sum(axes)
        if count_include_pad:
            return summed * (1.0 / math.prod(k))
        ones = self._const(1.0).shrink([(0, 1)] * (self.ndim - n) + [(0, d) for d in
                                                                     self.shape[-n:]])
        counts = ones._pad_spatial(padding, n)._pool(k, s, 1).sum(axes)
        return summed / counts

    def batchnorm(self, weight, bias, mean, invstd):
        """Inference batch norm over axis 1: (x - mean) * invstd * weight + bias."""
        shape = [1, -1] + [1] * (self.ndim - 2)
        x = self - mean.reshape(shape)
        if weight is not None:
            x = x * (weight * invstd).reshape(shape)
        else:
            x = x * invstd.reshape(shape)
        return x + bias.reshape(shape) if bias is not None else x

    def layernorm(self, axis=-1, eps: float = 1e-5, weight=None, bias=None):
        axes = tuple(range(axis % self.ndim, self.ndim)) if isinstance(axis, int) else axis
        x = self - self.mean(axes, keepdim=True)
        x = x * ((x * x).mean(axes, keepdim=True) + eps).rsqrt()
        if weight is not None:
            x = x * weight
        return x + bias if bias is not None else x

    def group_norm(self, groups: int, weight=None, bias=None, eps: float = 1e-5):
        bs, c = self.shape[:2]
        x = self.reshape(bs, groups, -1).layernorm(-1, eps).reshape(self.shape)
        shape = [1, c] + [1] * (self.ndim - 2)
        if weight is not None:
            x = x * weight.reshape(shape)
        return x + bias.reshape(shape) if bias is not None else x
