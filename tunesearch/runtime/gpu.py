"""What the OpenCL and CUDA devices share: host copies around a transfer call of their own, and
rendering through the GPU lowering in their dialect."""
from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np

from tunesearch.graph.kernel import Kernel
from tunesearch.runtime.device import Buffer, Device, Source
from tunesearch.codegen.gpu import render_gpu
from tunesearch.codegen.gpu_dialects import GPUDialect
from tunesearch.space.config import Config


class GPUDevice(Device):
    dialect: GPUDialect

    @abstractmethod
    def _to_device(self, handle: Any, host: np.ndarray) -> None:
        """Copy a contiguous, non-empty host array into device memory; returns when done."""

    @abstractmethod
    def _to_host(self, host: np.ndarray, handle: Any) -> None:
        """Copy device memory into a contiguous, non-empty host array; returns when done."""

    def copyin(self, buffer: Buffer, array: np.ndarray) -> None:
        host = np.ascontiguousarray(array, buffer.dtype.np).reshape(-1)
        if host.size:
            self._to_device(buffer.handle, host)

    def copyout(self, buffer: Buffer) -> np.ndarray:
        host = np.empty(buffer.size, buffer.dtype.np)
        if host.size:
            self._to_host(host, buffer.handle)
        return host

    def render(self, kernel: Kernel, config: Config,
               prepacked: frozenset[int] = frozenset()) -> Source:
        text, global_size, local_size = render_gpu(kernel, config, self.dialect, kernel.name)
        return Source(text, kernel.name, kernel.key, len(kernel.buffers), global_size,
                      local_size)
