"""The reference device: kernels run through the numpy interpreter. Slow, simple, trusted."""
from __future__ import annotations

import base64
import functools
import pickle
import time

import numpy as np

from tunesearch.graph.dtypes import DType
from tunesearch.graph.kernel import Kernel
from tunesearch.runtime.device import Buffer, Device, DeviceInfo, Program, Source
from tunesearch.runtime.interpret import run_kernel
from tunesearch.space.config import Config
from tunesearch.space.target import Target


class ReferenceDevice(Device):
    name = "reference"

    @functools.cache
    def info(self) -> DeviceInfo:
        fingerprint = (("backend", "reference"), ("numpy", np.__version__))
        return DeviceInfo("reference", "numpy", fingerprint, Target(self.space_family))

    def alloc(self, size: int, dtype: DType) -> Buffer:
        return Buffer(self.name, size, dtype, np.zeros(size, dtype.np))

    def copyin(self, buffer: Buffer, array: np.ndarray) -> None:
        buffer.handle[:] = array.reshape(-1)

    def copyout(self, buffer: Buffer) -> np.ndarray:
        return buffer.handle.copy()

    def render(self, kernel: Kernel, config: Config,
               prepacked: frozenset[int] = frozenset()) -> Source:
        # the "source" is the kernel itself, so another process can load it
        text = base64.b64encode(pickle.dumps(kernel)).decode()
        return Source(text, kernel.name, kernel.key, len(kernel.buffers))

    def compile(self, source: Source) -> bytes:
        return base64.b64decode(source.text)

    def load(self, artifact: bytes, source: Source) -> Program:
        kernel = pickle.loads(artifact)

        def run(buffers: list[Buffer]) -> None:
            run_kernel(kernel, [b.handle for b in buffers[1:]], out=buffers[0].handle)

        def timed(buffers: list[Buffer]) -> float:
            start = time.perf_counter()
            run(buffers)
            return time.perf_counter() - start

        return Program(run, timed, source)
