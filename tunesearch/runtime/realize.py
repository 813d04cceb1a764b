"""The programs kernels run as: built once per process by (kernel key, config, packed operands)
and cached in memory (a plan, `lowering.plan`, runs them in order).
"""
from __future__ import annotations

import sys
import time
from typing import Callable

from tunesearch import settings
from tunesearch.graph.kernel import Kernel
from tunesearch.runtime.device import Device, Program, Source
from tunesearch.space.config import Config

_programs: dict[tuple[str, str, Config], Program] = {}


def clear_programs() -> None:
    """Forget the programs built in this process: each is built again on its next use (from the
    device's compile cache)."""
    _programs.clear()


def _nothing_to_compute(kernel: Kernel) -> Program:
    """The program of a kernel whose output is empty (ONNX allows zero-size tensors): there is
    no element to compute, so nothing is compiled and nothing runs."""
    def run(buffers) -> None:
        pass

    def timed(buffers) -> float:
        return 0.0

    return Program(run, timed, Source("", kernel.name, kernel.key, len(kernel.buffers)))


def get_program(kernel: Kernel, device: Device, config: Config,
                prepacked: frozenset[int] = frozenset()) -> Program:
    """The program of kernel under config (built once per process); prepacked: the buffers it
    receives already packed (Device.prepack)."""
    key = (kernel.key, device.name, config, prepacked)
    if key not in _programs and kernel.buffers[0].size == 0:
        _programs[key] = _nothing_to_compute(kernel)
    if key not in _programs:
        if settings.debug() >= 4:
            print(device.render(kernel, config, prepacked).text, file=sys.stderr)
        _programs[key] = device.build(kernel, config, prepacked)
    return _programs[key]


def timed_run(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
