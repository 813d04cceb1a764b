"""The torch-like Tensor front end: every operation is recorded lazily and built from the small
op set; `.numpy()` realizes it through the runtime.

    >>> from tunesearch.tensor import Tensor
    >>> (Tensor([[1.0, 2.0], [3.0, 4.0]]) @ Tensor([[1.0], [1.0]])).numpy()
    array([[3.],
           [7.]], dtype=float32)

`tensor.py` holds the Tensor class, `nn.py` the neural-network ops (convolution, pooling,
normalizations) and `index.py` basic indexing. A bad shape, axis or argument raises `ShapeError`
(from `tunesearch.errors`).
"""
from tunesearch.errors import ShapeError
from tunesearch.tensor.tensor import Tensor

__all__ = ["Tensor", "ShapeError"]
