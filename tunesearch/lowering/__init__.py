"""Lowering: the device-aware forms between the graph the front ends build and the kernels.

Both front ends reach it through the same `Tensor` calls (`conv2d`, the pools,
`local_response_norm`, `materialize_as_stored`), so one computation becomes one graph and one set
of kernels whether it was written with `Tensor` or loaded from ONNX. It reads the device's target
model (vector width, registers, caches) to choose layouts: `conv.py` the convolution forms
(windows in place, channels last, im2col, host-packed weights), `pool.py` pools in the layout
their input lies in, `windows.py` the views they read. `plan.py` runs a schedule over and over
(buffers pooled, constants packed once), for models and Tensor programs alike.
"""
from tunesearch.lowering.conv import convolution
from tunesearch.lowering.pool import average_pool, local_response_norm, max_pool
from tunesearch.lowering.windows import (materialize_as_stored, output_sizes,
                                         stored_channels_last, window_pads)

__all__ = ["average_pool", "convolution", "local_response_norm", "materialize_as_stored",
           "max_pool", "output_sizes", "stored_channels_last", "window_pads"]
