"""The builder: renders and compiles configs of a kernel into artifacts the runner loads
(MetaSchedule's builder, in TVM's words).

    builder = ProcessPoolBuilder(DeviceSpec.of("cpu"))
    pending = builder.submit(kernel, configs)    # compiling starts
    ...                                          # the caller works meanwhile
    for built in builder.collect(pending):       # one BuildResult per config, in order
        built.artifact, built.layouts            # or built.error, built.message

ProcessPoolBuilder compiles in a pool of spawned processes, one per core, that ignore Ctrl-C
(the tuner handles it and shuts them down) and get what they need from the tuner's device
(Device.compile_settings: the GPU's architecture), so they never open the device themselves. A
compile that runs past its deadline has its compiler killed, and the pool process that ran it
lives on; a pool that broke is started again.
"""
from __future__ import annotations

import os
import signal
import statistics
import time
from abc import ABC, abstractmethod
from concurrent.futures import ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from tunesearch.graph.kernel import Kernel
from tunesearch.runtime.device import CompileError
from tunesearch.search._lifeline import exit_with_parent
from tunesearch.search._spawn import SPAWN, children_ignore_ctrl_c, machine_cores
from tunesearch.search.messages import BuildResult, DeviceSpec
from tunesearch.space.config import Config


class Builder(ABC):
    """Builds configs of a kernel: submit starts, collect waits, so the caller can work in
    between (the measurer computes the kernel's reference output meanwhile)."""

    @abstractmethod
    def submit(self, kernel: Kernel, configs: list[Config],
               constants: frozenset[int] = frozenset()) -> list:
        """Start building; returns what collect() takes. constants: the kernel's buffers that
        never change where it runs (a model's weights), which a config may read packed ahead."""

    @abstractmethod
    def collect(self, pending: list) -> list[BuildResult]:
        """One BuildResult per submitted config, in order; a failure is one with an error."""

    def build(self, kernel: Kernel, configs: list[Config],
              constants: frozenset[int] = frozenset()) -> list[BuildResult]:
        return self.collect(self.submit(kernel, configs, constants))

    def close(self) -> None:
        pass


def _init_compiler(device: DeviceSpec, compile_settings: dict[str, Any]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent()  # a tuner killed outright leaves no compile process behind
    os.setpgrp()  # its own process group: killing it also kills the compiler it runs
    device.use_for_compiling(compile_settings)  # never opens the device (a GPU context)


def compile_candidate(device: DeviceSpec, kernel: Kernel, config: Config,
                      constants: frozenset[int] = frozenset()) -> BuildResult:
    """Render and compile one config (in a compile process). The result's layouts: the
    constants the program reads packed ahead, as Device.prepack_layouts."""
    opened = device.open()
    start = time.perf_counter()
    try:
        layouts = opened.prepack_layouts(kernel, config, constants)
        source = opened.render(kernel, config, frozenset(layouts))
        return BuildResult(source, opened.compile(source), time.perf_counter() - start, layouts)
    except CompileError as exc:
        return BuildResult.failed("compile", str(exc))
    except Exception as exc:  # noqa: BLE001  (a renderer bug fails this config, not the tuner)
        return BuildResult.failed("compile",
                                  f"{type(exc).__name__} while rendering or compiling: {exc}")


class ProcessPoolBuilder(Builder):
    """Compiles candidates in parallel, one process per core.

    A compile that takes `slow_factor` times the median so far (at least min_timeout_s, at most
    timeout_s) fails its config: a huge unrolled block is not worth the wait in a timed search.
    """

    def __init__(self, device: DeviceSpec, workers: int | None = None, timeout_s: float = 300.0,
                 min_timeout_s: float = 5.0, slow_factor: float = 5.0):
        self.device, self.timeout_s = device, timeout_s
        self.min_timeout_s, self.slow_factor = min_timeout_s, slow_factor
        self.workers = workers or machine_cores()
        self._pool: ProcessPoolExecutor | None = None
        self._durations: list[float] = []

    def deadline(self, count: int) -> float:
        """Seconds a batch of count configs may take to compile."""
        rounds = -(-count // self.workers)
        if not self._durations:
            return self.timeout_s * rounds
        typical = statistics.median(self._durations[-50:])
        return rounds * min(self.timeout_s, max(self.min_timeout_s, self.slow_factor * typical))

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            compile_settings = self.device.open().compile_settings()
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=SPAWN, initializer=_init_compiler,
                initargs=(self.device, compile_settings))
        return self._pool

    def submit(self, kernel: Kernel, configs: list[Config],
               constants: frozenset[int] = frozenset()) -> list:
        try:
            with children_ignore_ctrl_c():  # the pool starts its processes on submit
                return [self._executor().submit(compile_candidate, self.device, kernel, c,
                                                constants)
                        for c in configs]
        except BrokenProcessPool:
            self._discard()
            return [None] * len(configs)

    def collect(self, pending: list) -> list[BuildResult]:
        deadline = self.deadline(len(pending))
        live = [f for f in pending if f is not None]
        _, late = wait(live, timeout=deadline)
        if late:  # too slow: stop its compiler, so the pool and its other work survive
            self._kill_compilers()
            if wait(late, timeout=10.0)[1]:
                self._discard()
        out: list[BuildResult] = []
        for future in pending:
            if future is None:
                out.append(BuildResult.failed("compile",
                                              "the compiler pool broke; it was restarted"))
            elif future in late:
                out.append(BuildResult.failed(
                    "compile", f"the compiler did not finish within {deadline:.3g} s"))
            elif future.exception() is not None:
                self._discard()
                out.append(BuildResult.failed(
                    "compile", f"the compiler process died: {future.exception()}"))
            else:
                out.append(future.result())
                if out[-1].ok:
                    self._durations.append(out[-1].seconds)
        return out

    def _members(self) -> list:
        return list(getattr(self._pool, "_processes", {}).values()) if self._pool else []

    def _kill_compilers(self) -> None:
        """Kill what the pool's processes run (each leads its own process group), not them."""
        leaders = {p.pid for p in self._members()}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                pid, group = int(stat.parent.name), int(fields[2])
            except (OSError, IndexError, ValueError):
                continue
            if group in leaders and pid not in leaders:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def _discard(self) -> None:
        if self._pool is None:
            return
        for process in self._members():
            try:
                os.killpg(process.pid, signal.SIGKILL)  # the process and its compiler
            except (ProcessLookupError, PermissionError):
                pass
            if process.is_alive():
                process.kill()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
