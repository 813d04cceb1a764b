"""A catalogue of kernels that covers the shapes codegen must get right, for conformance tests."""
from __future__ import annotations

import numpy as np

from tunesearch import Tensor, dtypes
from tunesearch.graph.kernel import Kernel
from tunesearch.graph.schedule import create_schedule


def _r(*shape, seed=0):
    return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32),
                  device="reference")


def _windows_conv(x: Tensor, w: Tensor) -> Tensor:
    """A convolution over one strided view of the padded input, reduced over channel x window
    axes without merging them (the reduce axes only chain inside a panel)."""
    cout, cin, kh, kw = w.shape
    outs = [x.shape[2] - kh + 3, x.shape[3] - kw + 3]
    cols = x.windows((kh, kw), (1, 1), (1, 1), [(1, 1), (1, 1)], outs)
    cols = cols.reshape(1, 1, cin, *outs, kh, kw)
    return (cols * w.reshape(1, cout, cin, 1, 1, kh, kw)).sum((2, 5, 6))


def _cases():
    a = _r(33, 1)
    yield "broadcast_mul_add", a * _r(1, 17, seed=1) + _r(17, seed=2)
    yield "fma_3d_odd", _r(7, 13, 5) * _r(7, 13, 5, seed=1) + _r(7, 13, 5, seed=2)
    yield "sum_last_axis", _r(37, 53).sum(1)
    yield "sum_first_axis", _r(37, 53).sum(0)
    yield "max_middle_axis", _r(5, 31, 7).max(1)
    yield "sum_all", _r(1000).sum()
    yield "matmul_square", _r(64, 64) @ _r(64, 64, seed=1)
    yield "matmul_skinny", _r(3, 129) @ _r(129, 67, seed=1)
    yield "matmul_prime", _r(31, 37) @ _r(37, 41, seed=1)
    yield "matmul_transposed", _r(29, 23).T @ _r(29, 19, seed=1)
    yield "batched_matmul", _r(3, 17, 19) @ _r(3, 19, 23, seed=1)
    yield "matmul_bias_relu", (_r(16, 24) @ _r(24, 40, seed=1) + _r(40, seed=2)).relu()
    # pieces of a concatenation: kernels that write one slice of their output buffer
    yield "concat_pieces", Tensor.cat([_r(16, 7), (_r(16, 24) @ _r(24, 40, seed=1)).relu(),
                                       _r(16, 5, seed=3).exp()], dim=1)
    # a padded matmul: the matmul writes the interior of the padded buffer, constants its border
    yield "pad_pieces", (_r(16, 24) @ _r(24, 40, seed=1) + 1).relu().pad(((1, 2), (0, 3)), 0.5)
    yield "conv2d_stride_pad", _r(2, 3, 9, 9).conv2d(_r(4, 3, 3, 3, seed=1), stride=2, padding=1)
    yield "conv2d_groups", _r(1, 4, 8, 8).conv2d(_r(6, 2, 3, 3, seed=1), groups=2, padding=1)
    yield "conv2d_windows", _windows_conv(_r(1, 5, 7, 9), _r(6, 5, 3, 3, seed=1))
    yield "softmax", _r(9, 33).softmax(1)
    yield "layernorm", _r(13, 24).layernorm()
    yield "max_pool", _r(1, 3, 8, 8).max_pool2d(2)
    yield "avg_pool_pad", _r(1, 3, 9, 9).avg_pool2d(3, 2, 1)
    # reads at computed positions: the index buffers get random ints in [-50, 50), so some
    # count from the end and some fall outside the axis (zeros)
    ids = Tensor(np.arange(21, dtype=np.int32).reshape(3, 7) * 3 - 20, device="reference")
    yield "embedding", _r(40, 24).take(ids, 0) + _r(7, 24, seed=1)
    yield "take_middle_axis", _r(5, 30, 6).take(ids.reshape(21)[:4], 1)
    yield "gather_elements", _r(9, 13).gather(1, ids.reshape(21)[:18].reshape(9, 2) % 13)
    yield "embedding_layernorm", (_r(40, 24).take(ids, 0) * 2.0).layernorm()
    yield "reduce_then_gather", _r(3, 7, 24).sum(2) + _r(40, seed=1).take(ids, 0)
    ints = Tensor(np.arange(-20, 40, dtype=np.int32).reshape(6, 10), device="reference")
    yield "int_mod_div_where", ((ints % 7) + (ints // 3)).maximum(ints * 2).where(ints, 1) \
        if False else (ints > 3).where(ints % 7, ints // 3)


def catalogue() -> list[tuple[str, Kernel]]:
    """(name, kernel) for every kernel the catalogue's cases schedule, deduplicated by key."""
    out, seen = [], set()
    for name, tensor in _cases():
        items = create_schedule([tensor.node])
        for i, item in enumerate(items):
            if item.kernel.key in seen:
                continue
            seen.add(item.kernel.key)
            out.append((name if len(items) == 1 else f"{name}.{i}", item.kernel))
    return out


def random_inputs(kernel: Kernel, seed: int = 0) -> list[np.ndarray]:
    """Random (never all-zero) inputs for buffers 1..n of a kernel."""
    rng = np.random.default_rng(seed)
    out = []
    for spec in kernel.buffers[1:]:
        if spec.dtype is dtypes.bool:
            out.append(rng.random(spec.size) < 0.5)
        elif spec.dtype is dtypes.int32:
            out.append(rng.integers(-50, 50, spec.size).astype(np.int32))
        else:
            out.append(rng.standard_normal(spec.size).astype(spec.dtype.np))
    return out
