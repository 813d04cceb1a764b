"""Every Tensor op against numpy on random data, odd and prime sizes included."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tunesearch import ShapeError, Tensor

RNG = np.random.default_rng(0)


def rand(*shape, positive=False):
    x = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(x) + 0.1 if positive else x


def close(got, want, tol=1e-4):
    got = got.numpy() if isinstance(got, Tensor) else got
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


UNARY = [
    ("relu", lambda x: np.maximum(x, 0), False),
    ("sigmoid", lambda x: 1 / (1 + np.exp(-x)), False),
    ("tanh", np.tanh, False),
    ("exp", np.exp, False),
    ("log", np.log, True),
    ("sqrt", np.sqrt, True),
    ("abs", np.abs, False),
    ("sin", np.sin, False),
    ("cos", np.cos, False),
    ("reciprocal", lambda x: 1 / x, True),
    ("floor", np.floor, False),
    ("ceil", np.ceil, False),
    ("erf", lambda x: np.vectorize(math.erf)(x).astype(np.float32), False),
    ("gelu", lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))), False),
]


@pytest.mark.parametrize("name,ref,positive", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, ref, positive):
    x = rand(7, 13, positive=positive)
    close(getattr(Tensor(x), name)(), ref(x).astype(np.float32))


@pytest.mark.parametrize("shapes", [((5, 1, 3), (4, 1)), ((1,), (3, 7)), ((2, 3), (2, 3))])
def test_binary_broadcast(shapes):
    a, b = rand(*shapes[0]), rand(*shapes[1], positive=True)
    ta, tb = Tensor(a), Tensor(b)
    close(ta + tb, a + b)
    close(ta - tb, a - b)
    close(ta * tb, a * b)
    close(ta / tb, a / b)
    close(ta.maximum(tb), np.maximum(a, b))
    close(ta.minimum(tb), np.minimum(a, b))
    close((ta < tb), a < b)
    close((ta > tb), a > b)
    close(ta.eq(ta), np.ones_like(a, bool))
    close((ta < 0).where(ta, tb), np.where(a < 0, a, b))
    close(ta ** 2, a ** 2)
    close(tb ** 0.5, np.sqrt(b))
    close(tb ** 1.7, b ** 1.7, 1e-3)


@pytest.mark.parametrize("exponent", [0.25, 0.5, -0.75, 1.5, 2.75, -3.25])
def test_quarter_powers_by_square_roots(exponent):
    """x ** (k/4) as products of x, sqrt(x) and sqrt(sqrt(x)): as numpy's pow to a few ulp,
    NaN for a negative base (as numpy), 0 or inf at zero, inf at inf."""
    x = np.concatenate([RNG.uniform(1e-3, 50, 200), [0.0, np.inf, -2.0, 1.0]]).astype(np.float32)
    got = (Tensor(x) ** exponent).numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.power(x.astype(np.float64), exponent).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=2e-6)
    assert np.isnan(got[-2]) and got[-1] == 1.0


def test_integer_ops():
    a = RNG.integers(-20, 20, (6, 7)).astype(np.int32)
    b = RNG.integers(1, 6, (6, 7)).astype(np.int32)
    ta, tb = Tensor(a), Tensor(b)
    close(ta // tb, a // b)
    close(ta % tb, a % b)
    close(ta * tb + 3, a * b + 3)
    assert (ta // tb).numpy().dtype == np.int32


@pytest.mark.parametrize("axis", [None, 0, 1, 2, (0, 2), -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions(axis, keepdim):
    x = rand(5, 11, 7)
    t = Tensor(x)
    close(t.sum(axis, keepdim), x.sum(axis=axis, keepdims=keepdim), 1e-3)
    close(t.max(axis, keepdim), x.max(axis=axis, keepdims=keepdim))
    close(t.min(axis, keepdim), x.min(axis=axis, keepdims=keepdim))
    close(t.mean(axis, keepdim), x.mean(axis=axis, keepdims=keepdim))
    close(t.var(axis, keepdim), x.var(axis=axis, keepdims=keepdim, ddof=1), 1e-3)


def test_argmax():
    x = rand(6, 9)
    close(Tensor(x).argmax(1), x.argmax(1))


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 13, 5), (31, 37, 41), (64, 3, 129)])
def test_matmul(m, k, n):
    a, b = rand(m, k), rand(k, n)
    close(Tensor(a) @ Tensor(b), a @ b, 1e-3)


def test_matmul_batched_and_vectors():
    a, b = rand(3, 5, 7), rand(7, 4)
    close(Tensor(a) @ Tensor(b), a @ b, 1e-3)
    c, d = rand(2, 1, 5, 6), rand(3, 6, 2)
    close(Tensor(c) @ Tensor(d), c @ d, 1e-3)
    v = rand(7)
    close(Tensor(a) @ Tensor(v), a @ v, 1e-3)
    close(Tensor(v) @ Tensor(b), v @ b, 1e-3)


def test_softmax_family():
    x = rand(9, 17)
    e = np.exp(x - x.max(1, keepdims=True))
    close(Tensor(x).softmax(1), e / e.sum(1, keepdims=True))
    close(Tensor(x).log_softmax(1), np.log(e / e.sum(1, keepdims=True)), 1e-3)


def conv_ref(x, w, stride, pad, dil, groups):
    n, c, h, wd = x.shape
    co, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, co, oh, ow), np.float64)
    per = co // groups
    for o in range(co):
        g = o // per
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, i * dil:i * dil + stride * oh:stride,
                           j * dil:j * dil + stride * ow:stride]
                out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j])
    return out.astype(np.float32)


@pytest.mark.parametrize("stride,pad,dil,groups", [(1, 0, 1, 1), (2, 1, 1, 1), (1, 2, 2, 1),
                                                   (1, 1, 1, 2), (3, 1, 1, 4)])
def test_conv2d(stride, pad, dil, groups):
    x, w, b = rand(2, 4, 11, 9), rand(8, 4 // groups, 3, 3), rand(8)
    got = Tensor(x).conv2d(Tensor(w), Tensor(b), stride=stride, padding=pad, dilation=dil,
                           groups=groups)
    close(got, conv_ref(x, w, stride, pad, dil, groups) + b.reshape(1, 8, 1, 1), 1e-3)


def test_pools():
    x = rand(2, 3, 9, 8)
    close(Tensor(x).max_pool2d(2), x[:, :, :8].reshape(2, 3, 4, 2, 4, 2).max((3, 5)))
    close(Tensor(x).avg_pool2d(2), x[:, :, :8].reshape(2, 3, 4, 2, 4, 2).mean((3, 5)))
    got = Tensor(x).max_pool2d(3, 2, 1).numpy()
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    want = np.stack([xp[:, :, i:i + 9:2, j:j + 8:2][:, :, :5, :4]
                     for i in range(3) for j in range(3)]).max(0)
    close(got, want)


def test_norms():
    x = rand(4, 6, 5, 5)
    mean, var = x.mean((2, 3), keepdims=True), x.var((2, 3), keepdims=True)
    w, b = rand(6), rand(6)
    close(Tensor(x).layernorm((2, 3)), (x - mean) / np.sqrt(var + 1e-5), 1e-3)
    g = x.reshape(4, 2, -1)
    gn = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5))
    close(Tensor(x).group_norm(2, Tensor(w), Tensor(b)),
          gn.reshape(x.shape) * w.reshape(1, 6, 1, 1) + b.reshape(1, 6, 1, 1), 1e-3)
    m, v = rand(6), rand(6, positive=True)
    close(Tensor(x).batchnorm(Tensor(w), Tensor(b), Tensor(m), Tensor(1 / np.sqrt(v + 1e-5))),
          (x - m.reshape(1, 6, 1, 1)) / np.sqrt(v.reshape(1, 6, 1, 1) + 1e-5)
          * w.reshape(1, 6, 1, 1) + b.reshape(1, 6, 1, 1), 1e-3)


def test_movement_and_joining():
    x = rand(3, 4, 5)
    t = Tensor(x)
    close(t.permute(2, 0, 1), x.transpose(2, 0, 1))
    close(t.reshape(12, 5), x.reshape(12, 5))
    close(t.T, x.T)
    close(t.flip(1), x[:, ::-1])
    close(t.pad(((1, 2), (0, 0), (2, 1)), 3.0), np.pad(x, ((1, 2), (0, 0), (2, 1)),
                                                      constant_values=3.0))
    close(t[1, ::2, -3:], x[1, ::2, -3:])
    close(t[::-1, None, 1:3], x[::-1, None, 1:3])
    close(t[..., 0], x[..., 0])
    close(Tensor.cat([t, t * 2], 1), np.concatenate([x, x * 2], 1))
    close(Tensor.stack([t, t + 1], 0), np.stack([x, x + 1], 0))
    parts = t.split([1, 3], 1)
    close(parts[1], x[:, 1:])
    close(t.expand(2, 3, 4, 5), np.broadcast_to(x, (2, 3, 4, 5)))


def test_creation():
    close(Tensor.zeros(2, 3), np.zeros((2, 3)))
    close(Tensor.ones(4), np.ones(4))
    close(Tensor.full((2, 2), 7.0), np.full((2, 2), 7.0))
    close(Tensor.arange(2, 11, 3), np.arange(2, 11, 3))
    r = Tensor.rand(100, seed=1).numpy()
    assert r.min() >= 0 and r.max() < 1 and r.std() > 0.1
    assert abs(Tensor.randn(4000, seed=1).numpy().mean()) < 0.1


@pytest.mark.parametrize("call,match", [
    (lambda: Tensor(rand(2, 3)) + Tensor(rand(4, 3)), "do not broadcast"),
    (lambda: Tensor(rand(2, 3)).sum(2), "axis 2 is out of range"),
    (lambda: Tensor(rand(2, 3)).reshape(4, 2), "cannot reshape 6 elements"),
    (lambda: Tensor(rand(2, 3)) @ Tensor(rand(2, 3)), "inner dims differ"),
    (lambda: Tensor(rand(2, 3)).permute(0, 0), "not a permutation"),
    (lambda: Tensor(rand(2, 3)).expand(4, 3), "cannot expand"),
    (lambda: Tensor(np.array(["a"])), "unsupported dtype"),
])
def test_bad_input_raises_at_the_call(call, match):
    with pytest.raises((ShapeError, TypeError), match=match):
        call()
