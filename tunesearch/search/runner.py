"""The processes that measurement runs in: a pool of compilers and one isolated runner.

Both are spawned (not forked: the tuner has threads) with the device registry of the parent,
ignore Ctrl-C (the tuner handles it and shuts them down), and are restarted when they die. The
runner is killed when a candidate runs past its hard timeout, and ends itself when its device is
lost (a GPU kernel faulted); a compile that runs past its deadline has its compiler killed, and the
pool process that ran it lives on. Compile processes get what they need from the tuner's device
(Device.compile_settings: the GPU's architecture), so they never open the device themselves.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import statistics
import threading
import time
from concurrent.futures import ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from tunesearch.graph.kernel import Kernel
from tunesearch.runtime.device import CompileError, Source
from tunesearch.search import _runner_child as runner_child
from tunesearch.space.config import Config

_SPAWN = multiprocessing.get_context("spawn")


def machine_cores() -> int:
    """The cores this process may use: the size of the compile pool."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def _children_ignore_ctrl_c():
    """Start processes with Ctrl-C ignored from their first instruction (an ignored signal
    stays ignored across exec, and Python keeps it so), not only once they run our code."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "the runner process stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            return f"the runner process died with signal {-code}"
        if name in ("SIGSEGV", "SIGBUS"):  # the runner fences every buffer with guard pages
            return (f"the runner process died with {name}: an access out of bounds of the "
                    "kernel's buffers (a guard page, a write into an input) or another invalid "
                    "address")
        return f"the runner process died with {name}"
    return f"the runner process exited with status {code}"


class Runner:
    """The reused process that candidates run in (see _runner_child.py for its protocol)."""

    def __init__(self, device_name: str, start_timeout_s: float = 120.0):
        self.device_name, self.start_timeout_s = device_name, start_timeout_s
        self._process = None
        self._conn = None
        self._setup: tuple | None = None   # the current kernel's buffers, resent after a restart
        self._loaded: str | None = None    # the kernel whose buffers the live process holds
        self._started = False
        self.restarts = 0                  # processes started again after one died or hung

    def _start(self) -> str | None:
        parent, child = _SPAWN.Pipe()
        process = _SPAWN.Process(target=runner_child.serve, daemon=True, name="tunesearch-runner",
                                 args=(child, self.device_name, runner_child.spawnable(self.device_name)))
        with _children_ignore_ctrl_c():
            process.start()
        self._started = True
        child.close()
        self._process, self._conn, self._loaded = process, parent, None
        reply = self._receive(self.start_timeout_s)
        if reply[0] != "ready":
            self.kill()
            return f"the runner process could not start: {reply[2]}"
        return None

    def _receive(self, timeout_s: float) -> tuple:
        try:
            if not self._conn.poll(timeout_s):
                self.kill()
                return ("error", "timeout", f"no answer within the hard limit of "
                        f"{timeout_s:.3g} s; the runner process was killed")
            reply = self._conn.recv()
        except (EOFError, OSError):
            self._process.join(5)
            reason = _describe_exit(self._process.exitcode)
            self.kill()
            return ("error", "crash", reason)
        if reply[0] == "error" and reply[3:] == (runner_child.RESTART,):
            self._process.join(10)  # it exits by itself; the next run starts a new one
            self.kill()
            return reply[:3]
        return reply

    def load(self, kernel_key: str, buffer_specs, inputs, fill, guard,
             kernel: Kernel | None = None) -> None:
        """The buffers of the kernel the next runs are for; sent once, kept by the process.
        kernel: needed only for runs that read inputs packed ahead (see run)."""
        self._setup = (kernel_key, buffer_specs, inputs, fill, guard, kernel)

    def run(self, artifact: bytes, source: Source, timing: runner_child.Timing, timeout_s: float,
            config: Config | None = None, layouts: dict | None = None) -> tuple:
        """One candidate: ("done", first, times, guard_ok, changed) or ("error", kind, message).
        layouts: the inputs the program reads packed ahead (compile_candidate), which the
        process packs from its inputs for config."""
        if self._process is None or not self._process.is_alive():
            self.kill()
            self.restarts += self._started
            problem = self._start()
            if problem:
                return ("error", "crash", problem)
        try:
            if self._loaded != self._setup[0]:
                self._conn.send(("setup", *self._setup))
                reply = self._receive(max(self.start_timeout_s, timeout_s))
                if reply[0] != "ready":
                    return reply
                self._loaded = self._setup[0]
            self._conn.send(("run", artifact, source, timing, config, layouts or {}))
            return self._receive(timeout_s)
        except (BrokenPipeError, OSError):
            self.kill()
            return ("error", "crash", "the runner process died before the run")
        except BaseException:  # Ctrl-C while a reply is due: the pipe is out of step now
            self.kill()
            raise

    def kill(self) -> None:
        if self._process is not None:
            if self._process.is_alive():
                self._process.kill()
            self._process.join(5)
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = self._loaded = None

    def close(self) -> None:
        if self._process is not None and self._process.is_alive():
            try:
                self._conn.send(("stop",))
                self._process.join(2)
            except (BrokenPipeError, OSError):
                pass
        self.kill()


def _init_compiler(registry: dict[str, str], device_name: str,
                   compile_settings: dict[str, Any]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.setpgrp()  # its own process group: killing it also kills the compiler it runs
    runner_child.register_devices(registry)
    from tunesearch.runtime.device import use_for_compiling
    use_for_compiling(device_name, compile_settings)  # never opens the device (a GPU context)


def compile_candidate(device_name: str, kernel: Kernel, config: Config,
                      constants: frozenset[int] = frozenset()) -> tuple:
    """Render and compile one config: ("ok", source, artifact, seconds, layouts) or ("compile",
    message). constants: the kernel's buffers that never change where it runs (a model's
    weights); layouts: those the program reads packed ahead, as Device.prepack_layouts."""
    from tunesearch.runtime.device import get_device
    device = get_device(device_name)
    start = time.perf_counter()
    try:
        layouts = device.prepack_layouts(kernel, config, constants)
        source = device.render(kernel, config, frozenset(layouts))
        return ("ok", source, device.compile(source), time.perf_counter() - start, layouts)
    except CompileError as exc:
        return ("compile", str(exc))
    except Exception as exc:  # noqa: BLE001  (a renderer bug fails this config, not the tuner)
        return ("compile", f"{type(exc).__name__} while rendering or compiling: {exc}")


class CompilePool:
    """Compiles candidates in parallel, one process per core.

    A compile that takes `slow_factor` times the median so far (at least min_timeout_s, at most
    timeout_s) fails its config: a huge unrolled block is not worth the wait in a timed search.
    """

    def __init__(self, device_name: str, workers: int | None = None, timeout_s: float = 300.0,
                 min_timeout_s: float = 5.0, slow_factor: float = 5.0):
        self.device_name, self.timeout_s = device_name, timeout_s
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
            from tunesearch.runtime.device import get_device
            compile_settings = get_device(self.device_name).compile_settings()
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=_SPAWN, initializer=_init_compiler,
                initargs=(runner_child.spawnable(self.device_name), self.device_name,
                          compile_settings))
        return self._pool

    def submit(self, kernel: Kernel, configs: list[Config],
               constants: frozenset[int] = frozenset()) -> list:
        """Start compiling; collect() waits for the results. The caller may work meanwhile."""
        try:
            with _children_ignore_ctrl_c():  # the pool starts its processes on submit
                return [self._executor().submit(compile_candidate, self.device_name, kernel, c,
                                                constants)
                        for c in configs]
        except BrokenProcessPool:
            self._discard()
            return [None] * len(configs)

    def collect(self, futures: list) -> list[tuple]:
        """One result per submitted config, in order (see compile_candidate)."""
        deadline = self.deadline(len(futures))
        live = [f for f in futures if f is not None]
        _, pending = wait(live, timeout=deadline)
        if pending:  # too slow: stop its compiler, so the pool and its other work survive
            self._kill_compilers()
            if wait(pending, timeout=10.0)[1]:
                self._discard()
        out: list[tuple[Any, ...]] = []
        for future in futures:
            if future is None:
                out.append(("compile", "the compiler pool broke; it was restarted"))
            elif future in pending:
                out.append(("compile", f"the compiler did not finish within {deadline:.3g} s"))
            elif future.exception() is not None:
                self._discard()
                out.append(("compile", f"the compiler process died: {future.exception()}"))
            else:
                out.append(future.result())
                if out[-1][0] == "ok":
                    self._durations.append(out[-1][3])
        return out

    def compile(self, kernel: Kernel, configs: list[Config],
                constants: frozenset[int] = frozenset()) -> list[tuple]:
        return self.collect(self.submit(kernel, configs, constants))

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
