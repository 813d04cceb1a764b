"""Importing ONNX models: the graph becomes Tensor calls, the Tensor graph becomes kernels.

    >>> import numpy as np, tunesearch.onnx
    >>> model = tunesearch.onnx.load("tunesearch/examples/tiny_cnn.onnx")
    >>> out = model(np.zeros((1, 3, 32, 32), np.float32))     # {output name: array}

A model is traced once per set of input shapes: initializers become buffers, values known at import
are folded on the host, and the scheduled kernels, their compiled programs and every buffer are
kept as a plan. Each later call copies the inputs into the same input buffers and replays the same
programs, so a call costs the kernels plus a small launch overhead per kernel (`profile` measures
it). Kernels run with the tuned config for this device that the model's lookup finds
(`load(..., lookup=...)`, default: `tunesearch.tensor.default_lookup()`), else the default.

Bad input raises an OnnxImportError subclass with a one-line message: ModelNotFoundError,
NotOnnxError, ExternalDataError (external data missing, out of range or outside the model's
folder), InvalidModelError (opsets no ONNX release defines, tensor data that disagrees with its
shape, a value written twice, an output nothing produces), UnsupportedOperatorError (every
unsupported node, by name, in one message),
and UnboundDimensionError (a dynamic input dimension without a shape from `input_shapes`).
Inputs that do not fit a loaded model raise InputError. Zero-size tensors are valid ONNX and run:
a kernel with an empty output computes nothing.

The package: `model.py` (load, OnnxModel), `registry.py` (the operator registry, the node context,
the import errors), the operators by family (`elementwise.py`, `reduce.py`, `shape.py`,
`index.py`, `conv.py`, `nn.py` with `interpolate.py`), `rewrite.py` (graph rewrites before
tracing), `regions.py` (values read by several nodes that stay in one kernel), `files.py`
(reading a model and its external data). A model's calls replay a plan
(`tunesearch.lowering.plan`).
"""
from tunesearch.onnx.declared import InvalidModelError
from tunesearch.onnx.files import ExternalDataError, read_model
from tunesearch.onnx.model import GraphInfo, OnnxModel, Profile, load, supported_operators
from tunesearch.onnx.registry import (OPS, ModelNotFoundError, NodeContext, NotOnnxError,
                                      OnnxImportError, UnboundDimensionError,
                                      UnsupportedOperatorError, UnsupportedTypeError,
                                      internal_dtype, onnx_np_dtype,
                                      producible)
from tunesearch.onnx.signature import MAX_ELEMENTS, ONNX_DOMAINS, ValueInfo

__all__ = ["load", "OnnxModel", "ValueInfo", "GraphInfo", "Profile", "OnnxImportError",
           "ModelNotFoundError", "NotOnnxError", "UnsupportedOperatorError",
           "UnboundDimensionError", "UnsupportedTypeError", "ExternalDataError",
           "InvalidModelError",
           "supported_operators"]
