"""Neural-network ops on Tensor: softmax, norms and linear built here from the op set;
convolutions and pools in the form the device's lowering chooses (tunesearch.lowering)."""
from __future__ import annotations

from tunesearch.errors import ShapeError
from tunesearch.lowering import (average_pool, convolution, local_response_norm,
                                 materialize_as_stored, max_pool)
from tunesearch.runtime.device import get_device


def _pair(value, n: int = 2) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (list, tuple)) else (value,) * n


def _pads(padding, n: int) -> list[tuple[int, int]]:
    """(before, after) per spatial axis from an int, one int per axis, ONNX's begins then
    ends, or pairs."""
    if isinstance(padding, int):
        return [(padding, padding)] * n
    padding = list(padding)
    if len(padding) == n and all(isinstance(p, (list, tuple)) for p in padding):
        return [tuple(p) for p in padding]
    if len(padding) == n:
        return [(p, p) for p in padding]
    if len(padding) == 2 * n:
        return list(zip(padding[:n], padding[n:]))
    raise ShapeError(f"padding {padding}: give an int, {n} ints, {2 * n} ints (begins then "
                     f"ends) or {n} (before, after) pairs")


class NNMixin:
    __slots__ = ()

    def softmax(self, axis: int = -1):
        # its input written once, with the work that made it: the max and the exp read it
        # (the scheduler computes a reduce once anyway, but a scale and a mask applied to a
        # matrix product would run in both kernels, reading the mask twice)
        x = self.materialize()
        shifted = x - x.max(axis, keepdim=True)
        e = shifted.exp()
        if get_device(self.device).space_family == "cpu":
            # a CPU's exp is a dozen vector instructions, more than a pass over the result in
            # cache: written once, the sum and the division read it rather than each computing
            # it (a GPU's exp is one instruction, the extra pass through memory would cost more)
            e = e.materialize()
        return e / e.sum(axis, keepdim=True)

    def log_softmax(self, axis: int = -1):
        x = self.materialize()  # as for softmax
        shifted = x - x.max(axis, keepdim=True)
        return shifted - shifted.exp().sum(axis, keepdim=True).log()

    def linear(self, weight, bias=None):
        out = self @ weight.T
        return out + bias if bias is not None else out

    def conv2d(self, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
        """Convolution of an NC... input with a (Cout, Cin/groups, kernel...) weight over
        len(kernel) spatial axes (so 1-d and 3-d too). weight and bias may be Tensors or numpy
        arrays (a constant, laid out for its form once); padding an int, one per axis, ONNX's
        begins then ends, or (before, after) pairs. The form (windows in place, channels last,
        im2col) is the device's choice (tunesearch.lowering.conv)."""
        n = weight.ndim - 2
        return convolution(self, weight, bias, groups, _pair(stride, n), _pair(dilation, n),
                           _pads(padding, n))

    def max_pool2d(self, kernel_size=2, stride=None, padding=0, dilation=1,
                   ceil_mode: bool = False):
        """The largest element of each window over the last len(kernel_size) axes (an int
        kernel_size: two); stride defaults to the kernel."""
        k = _pair(kernel_size, 2)
        n = len(k)
        return max_pool(self, k, _pair(stride if stride is not None else k, n),
                        _pair(dilation, n), _pads(padding, n), ceil_mode)

    def avg_pool2d(self, kernel_size=2, stride=None, padding=0, count_include_pad=True,
                   ceil_mode: bool = False, dilation=1):
        """The mean of each window; with count_include_pad the padding counts as taps."""
        k = _pair(kernel_size, 2)
        n = len(k)
        return average_pool(self, k, _pair(stride if stride is not None else k, n),
                            _pair(dilation, n), _pads(padding, n), ceil_mode,
                            count_include_pad)

    def local_response_norm(self, size: int, alpha: float = 1e-4, beta: float = 0.75,
                            bias: float = 1.0):
        """x / (bias + alpha / size * sum of squares over `size` neighbouring channels) **
        beta (AlexNet's LRN, ONNX's)."""
        return local_response_norm(self, size, alpha, beta, bias)

    def materialize_as_stored(self):
        """This value written to a buffer of its own in the layout its producer stores it in
        (channels last after a channels-last convolution), for several readers to share."""
        return materialize_as_stored(self)

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
        x = self.normalized(axes, eps)[0]
        if weight is not None:
            x = x * weight
        return x + bias if bias is not None else x

    def normalized(self, axes: tuple[int, ...], eps: float = 1e-5):
        """(self - mean) / sqrt(var + eps) over axes, with the mean and 1 / sqrt(var + eps)
        (ONNX's LayerNormalization returns both). The input is written once, as for softmax:
        the mean, the variance and the result read it."""
        src = self.materialize()
        mean = src.mean(axes, keepdim=True)
        centered = src - mean
        inv = ((centered * centered).mean(axes, keepdim=True) + eps).rsqrt()
        return centered * inv, mean, inv

    def group_norm(self, groups: int, weight=None, bias=None, eps: float = 1e-5):
        bs, c = self.shape[:2]
        x = self.reshape(bs, groups, -1).layernorm(-1, eps).reshape(self.shape)
        shape = [1, c] + [1] * (self.ndim - 2)
        if weight is not None:
            x = x * weight.reshape(shape)
        return x + bias.reshape(shape) if bias is not None else x
