"""Running a schedule: tuned configs looked up, programs cached, each kernel that ran recorded
for DEBUG and GRAPH (`kernel_run`).

For each kernel the best config for this device key is looked up once per process (a miss, an
invalid record or a database error falls back to the heuristic default: a lookup never makes a
run fail). Compiled programs are cached in memory by (kernel key, config).
"""
from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

from tunesearch import settings
from tunesearch.graph.kernel import Kernel
from tunesearch.graph.schedule import ScheduleItem
from tunesearch.runtime import kernel_run
from tunesearch.runtime.device import Device, Program, Source, get_device
from tunesearch.runtime.kernel_run import KernelRun
from tunesearch.space.config import Config, ConfigError
from tunesearch.space.space import space_for


@dataclass(frozen=True)
class Choice:
    config: Config
    tuned: bool


# a hook the database layer installs: (kernel, device) -> stored config dict or None
Lookup = Callable[[Kernel, Device], Optional[dict]]
_choices: dict[tuple[str, str], Choice] = {}
_programs: dict[tuple[str, str, Config], Program] = {}


def _default_lookup(kernel: Kernel, device: Device) -> Optional[dict]:
    from tunesearch.runtime.tuned import db_lookup
    return db_lookup(kernel, device)


_lookup = _default_lookup


# installed by the front end: (kernel, device, trials) tunes a kernel and stores the winner
MissHandler = Callable[[Kernel, Device, int], None]
_miss_handler: Optional[MissHandler] = None


def set_miss_handler(fn: Optional[MissHandler]) -> None:
    """What to do when TUNESEARCH_TUNE=N and a kernel has no record (tinygrad's BEAM, but kept)."""
    global _miss_handler
    _miss_handler = fn


def set_lookup(fn: Optional[Lookup]) -> None:
    """Install the function that finds a stored config; clears the per-process cache."""
    global _lookup
    _lookup = fn
    _choices.clear()


def clear_caches() -> None:
    _choices.clear()
    _programs.clear()


def choose_config(kernel: Kernel, device: Device) -> Choice:
    """The config this kernel runs with here: a valid tuned record, else the default."""
    key = (kernel.key, device.name)
    if key in _choices:
        return _choices[key]
    space = space_for(kernel, device.info().target)
    choice = Choice(space.default(), False)
    if _lookup is not None and settings.use_db():
        stored = _stored(kernel, device)
        trials = settings.tune_on_miss()
        if stored is None and trials > 0 and _miss_handler is not None:
            _miss_handler(kernel, device, trials)
            stored = _stored(kernel, device)
        if stored is not None:
            try:
                config = Config.from_json(stored)
                reason = space.validate(config)
            except ConfigError as exc:
                reason = str(exc)
            if reason is None:
                choice = Choice(config, True)
            else:
                warnings.warn(f"ignoring the stored config of {kernel.name} ({kernel.key}): "
                              f"{reason}", stacklevel=2)
    _choices[key] = choice
    return choice


def _stored(kernel: Kernel, device: Device) -> Optional[dict]:
    try:
        return _lookup(kernel, device)
    except Exception as exc:  # the database is optional at run time
        warnings.warn(f"tuned-config lookup failed, using defaults: {exc}", stacklevel=3)
        return None


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


def run_schedule(items: list[ScheduleItem]) -> None:
    """Run every kernel of a schedule, in order, realizing each item's output node."""
    kernel_run.print_schedule("schedule", [item.kernel for item in items])
    traced = kernel_run.tracing()
    for item in items:
        device = get_device(item.out.device)
        kernel = item.kernel
        choice = choose_config(kernel, device)
        program = get_program(kernel, device, choice.config)
        out = device.alloc(kernel.buffers[0].size, kernel.buffers[0].dtype)
        buffers = [out] + [node.realized for node in item.inputs]
        if traced:
            seconds = program.timed(buffers)
            kernel_run.record(KernelRun.of(kernel, device.name, seconds, choice.config,
                                           choice.tuned, buffers))
        else:
            program(buffers)
        item.out.realized = out
    if items:
        kernel_run.save_graph()


def timed_run(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
