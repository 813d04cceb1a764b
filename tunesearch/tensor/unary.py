"""Unary math on Tensor, each built from the op set's unary ops (exp2, log2, sqrt, reciprocal, sin)
and arithmetic."""
from __future__ import annotations

import math

from tunesearch.graph.ops import UnaryOps

LOG2_E = math.log2(math.e)
LN_2 = math.log(2)


class UnaryMixin:
    __slots__ = ()

    def exp2(self): return self._unary(UnaryOps.EXP2)
    def log2(self): return self._unary(UnaryOps.LOG2)
    def sqrt(self): return self._unary(UnaryOps.SQRT)
    def reciprocal(self): return self._unary(UnaryOps.RECIP)
    def sin(self): return self._unary(UnaryOps.SIN)
    def cos(self): return ((math.pi / 2) - self.float()).sin()
    def exp(self): return (self.float() * LOG2_E).exp2()
    def log(self): return self.log2() * LN_2
    def rsqrt(self): return self.sqrt().reciprocal()
    def relu(self): return self.maximum(0.0 if self.dtype.is_float else 0)
    def sigmoid(self): return (1.0 + (-self.float()).exp()).reciprocal()
    def tanh(self): return 2.0 * (2.0 * self.float()).sigmoid() - 1.0
    def abs(self): return self.maximum(-self)
    def sign(self): return (self > 0).float() - (self < 0).float()
    def square(self): return self * self
    def leaky_relu(self, slope: float = 0.01): return (self < 0).where(self * slope, self)
    def clip(self, lo=None, hi=None):
        out = self
        if lo is not None:
            out = out.maximum(lo)
        if hi is not None:
            out = out.minimum(hi)
        return out

    def floor(self):
        t = self.int().float()  # truncates toward zero
        return (self < t).where(t - 1.0, t)

    def ceil(self): return -((-self).floor())
    def round(self): return (self + 0.5).floor()

    def erf(self):
        # Abramowitz-Stegun 7.1.26 (max error 1.5e-7), sign restored
        x = self.float()
        ax = x.abs()
        t = (1.0 + 0.3275911 * ax).reciprocal()
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (
            -1.453152027 + t * 1.061405429))))
        y = 1.0 - poly * (-(ax * ax)).exp()
        return (x < 0).where(-y, y)

    def gelu(self, approximate: str = "none"):
        x = self.float()
        if approximate == "tanh":
            return 0.5 * x * (1.0 + (0.7978845608 * (x + 0.044715 * x * x * x)).tanh())
        return 0.5 * x * (1.0 + (x * 0.7071067811865476).erf())
