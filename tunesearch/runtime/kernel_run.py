"""What DEBUG prints and GRAPH draws: one record per kernel that ran, for every path that runs
kernels (a Tensor program's schedule and a model's replayed plan).

Both paths build a `KernelRun` and hand it to `record`, which prints the DEBUG=2 line (and the
DEBUG=3 config) and, with GRAPH=1, keeps it for the drawing. A Tensor program's kernels add up
over the process; a model call starts the drawing anew (`begin_call`), so the picture shows one
call of the model. graphviz.py draws what is kept.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Sequence

from tunesearch import settings
from tunesearch.graph.kernel import Kernel
from tunesearch.runtime.device import Buffer
from tunesearch.space.config import Config


@dataclass(frozen=True)
class KernelRun:
    """A kernel that ran: its time measured by the device, the config it ran with (`tuned` when
    that config came from the database), and the buffers it wrote and read, by their serial
    numbers (`Buffer.serial`, unique in the process, so a recycled buffer keeps its number)."""
    kernel: Kernel
    device: str
    seconds: float
    config: Config
    tuned: bool
    writes: int
    reads: tuple[int, ...]

    @classmethod
    def of(cls, kernel: Kernel, device: str, seconds: float, config: Config, tuned: bool,
           buffers: Sequence[Buffer]) -> "KernelRun":
        """The record of a launch on `buffers` (the output first, as the kernel lists them)."""
        return cls(kernel, device, seconds, config, tuned, buffers[0].serial,
                   tuple(b.serial for b in buffers[1:]))

    @property
    def gflops(self) -> float:
        return self.kernel.flops / max(self.seconds, 1e-9) / 1e9

    @property
    def gbps(self) -> float:
        return self.kernel.bytes / max(self.seconds, 1e-9) / 1e9

    def debug_line(self) -> str:
        """The DEBUG=2 line: device, kernel, launch size, time, GFLOPS, GB/s, tuned or default."""
        launch = "x".join(map(str, self.kernel.out_shape or (1,)))
        return (f"{self.device:<9} {self.kernel.name:<28} launch {launch:<16}"
                f" {max(self.seconds, 1e-9) * 1e6:10.1f} us {self.gflops:9.2f} GFLOPS"
                f" {self.gbps:8.2f} GB/s  {'tuned' if self.tuned else 'default'}")


# GRAPH=1: the kernels drawn, and labels of the buffers a model call reads and returns
_drawn: list[KernelRun] = []
_buffer_labels: dict[int, str] = {}


def tracing() -> bool:
    """Whether kernels are timed one by one and recorded (DEBUG=2 and up, or GRAPH=1)."""
    return settings.debug() >= 2 or settings.graph()


def print_schedule(what: str, kernels: Sequence[Kernel], n_tuned: int | None = None) -> None:
    """The DEBUG=1 summary of the kernels about to run."""
    if settings.debug() >= 1 and kernels:
        tuned = f", {n_tuned} tuned" if n_tuned is not None else ""
        names = " ".join(k.name for k in kernels)
        print(f"{what}: {len(kernels)} kernel{'s' * (len(kernels) != 1)}{tuned}: {names}",
              file=sys.stderr)


def begin_call(buffer_labels: dict[int, str]) -> None:
    """A model call starts: the drawing restarts, with names for its input and output buffers
    (by serial number)."""
    if settings.graph():
        _drawn.clear()
        _buffer_labels.clear()
        _buffer_labels.update(buffer_labels)


def record(run: KernelRun) -> None:
    """A kernel ran: print it at DEBUG=2 (its config at DEBUG=3) and keep it for GRAPH=1."""
    debug = settings.debug()
    if debug >= 2:
        print(run.debug_line(), file=sys.stderr)
    if debug >= 3:
        print(f"    config: {run.config}", file=sys.stderr)
    if settings.graph():
        _drawn.append(run)


def drawn() -> tuple[list[KernelRun], dict[int, str]]:
    """The kernels kept for GRAPH=1 since the drawing last restarted, and the labels of the
    buffers a model call reads and returns (by serial number)."""
    return list(_drawn), dict(_buffer_labels)
