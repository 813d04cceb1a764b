"""The torch-like Tensor front end: every operation is recorded lazily and built from the small
op set; `.numpy()` realizes it through the runtime.

    >>> from tunesearch.tensor import Tensor
    >>> (Tensor([[1.0, 2.0], [3.0, 4.0]]) @ Tensor([[1.0], [1.0]])).numpy()
    array([[3.],
           [7.]], dtype=float32)

`tensor.py` holds the Tensor class (creation, realization, arithmetic on the op set, reductions,
matmul); its other ops come from mixins: `movement.py` (reshape, permute, pad, ... and cat, stack,
split), `unary.py` (unary math), `nn.py` (convolution, pooling, normalizations); `index.py` is
basic indexing. A bad shape, axis or argument raises `ShapeError` (from `tunesearch.errors`).

Realizing runs each kernel with the config a lookup of tuned configs chooses
(`tunesearch.runtime.lookup.TunedConfigs`): the one passed to `realize`/`numpy`, else the
process's `default_lookup()` (`lookups.py`; its miss policy is `search.on_miss`).
"""
from tunesearch.errors import ShapeError
from tunesearch.tensor.lookups import default_lookup
from tunesearch.tensor.tensor import Tensor

__all__ = ["Tensor", "ShapeError", "default_lookup"]
