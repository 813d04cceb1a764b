"""Running a schedule: each kernel's config chosen by the lookup the front end passes in
(`runtime.lookup.TunedConfigs`), programs cached, each kernel that ran recorded for DEBUG and
GRAPH (`kernel_run`).

Compiled programs are cached in memory by (kernel key, config).
"""
from __future__ import annotations

import sys
import time
from typing import Callable

from tunesearch import settings
from tunesearch.graph.kernel import Kernel
from tunesearch.graph.schedule import ScheduleItem
from tunesearch.runtime import graphviz, kernel_run
from tunesearch.runtime.device import Device, Program, Source, get_device
from tunesearch.runtime.kernel_run import KernelRun
from tunesearch.runtime.lookup import TunedConfigs
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


def run_schedule(items: list[ScheduleItem], lookup: TunedConfigs) -> None:
    """Run every kernel of a schedule, in order, realizing each item's output node; each kernel
    runs with the config `lookup` chooses for it."""
    kernel_run.print_schedule("schedule", [item.kernel for item in items])
    traced = kernel_run.tracing()
    written: set[int] = set()
    for item in items:
        device = get_device(item.out.device)
        kernel = item.kernel
        choice = lookup.choose(kernel, device)
        program = get_program(kernel, device, choice.config)
        # the pieces of a concatenation write their slices of one buffer
        out = item.out.realized if id(item.out) in written else \
            device.alloc(kernel.buffers[0].size, kernel.buffers[0].dtype)
        written.add(id(item.out))
        buffers = [out] + [node.realized for node in item.inputs]
        if traced:
            seconds = program.timed(buffers)
            kernel_run.record(KernelRun.of(kernel, device.name, seconds, choice.config,
                                           choice.tuned, buffers))
        else:
            program(buffers)
        item.out.realized = out
    if items:
        graphviz.save_graph()


def timed_run(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
