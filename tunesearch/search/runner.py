"""The runner: where built candidates run, checked and timed (MetaSchedule's runner, in TVM's
words), one kernel at a time.

    runner = ProcessRunner(DeviceSpec.of("cpu"))
    runner.load(RunSetup(kernel.key, buffer_specs, inputs, fill, guard, kernel))
    result = runner.run(RunRequest(built.artifact, built.source, Timing(), timeout_s=10.0))
    result.first, result.times        # or result.error, result.message

ProcessRunner runs them in one reused, isolated process (_runner_child.py holds it and its
protocol), spawned with the DeviceSpec it rebuilds the device from. The process ignores Ctrl-C
(the tuner handles it and shuts it down), is killed when a candidate runs past its hard timeout,
ends itself when its device is lost (a GPU kernel faulted), and is started again for the next
candidate when it died.
"""
from __future__ import annotations

import signal
from abc import ABC, abstractmethod

from tunesearch.search import _runner_child as runner_child
from tunesearch.search._spawn import SPAWN, children_ignore_ctrl_c
from tunesearch.search.messages import (DeviceSpec, Ready, RunRequest, RunResult, RunSetup,
                                        StopRequest)


class Runner(ABC):
    """Runs built candidates of the kernel loaded last; failures are RunResults with an error."""

    @abstractmethod
    def load(self, setup: RunSetup) -> None:
        """The kernel the next runs are for: its buffers, their values, the output's fill."""

    @abstractmethod
    def run(self, request: RunRequest) -> RunResult:
        """One candidate: its first output, its times and what it broke, or why it failed."""

    def close(self) -> None:
        pass


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


class ProcessRunner(Runner):
    """Runs candidates in a reused process of its own, restarted when one kills it."""

    def __init__(self, device: DeviceSpec, start_timeout_s: float = 120.0):
        self.device, self.start_timeout_s = device, start_timeout_s
        self._process = None
        self._conn = None
        self._setup: RunSetup | None = None  # the current kernel, sent again after a restart
        self._loaded: str | None = None      # the kernel whose buffers the live process holds
        self._started = False
        self.restarts = 0                    # processes started again after one died or hung

    def _start(self) -> str | None:
        parent, child = SPAWN.Pipe()
        process = SPAWN.Process(target=runner_child.serve, daemon=True, name="tunesearch-runner",
                                args=(child, self.device))
        with children_ignore_ctrl_c():
            process.start()
        self._started = True
        child.close()
        self._process, self._conn, self._loaded = process, parent, None
        reply = self._receive(self.start_timeout_s)
        if not isinstance(reply, Ready):
            self.kill()
            return f"the runner process could not start: {reply.message}"
        return None

    def _receive(self, timeout_s: float) -> Ready | RunResult:
        try:
            if not self._conn.poll(timeout_s):
                self.kill()
                return RunResult.failed("timeout", f"no answer within the hard limit of "
                                        f"{timeout_s:.3g} s; the runner process was killed")
            reply = self._conn.recv()
        except (EOFError, OSError):
            self._process.join(5)
            reason = _describe_exit(self._process.exitcode)
            self.kill()
            return RunResult.failed("crash", reason)
        if isinstance(reply, RunResult) and reply.restart:
            self._process.join(10)  # it exits by itself; the next run starts a new one
            self.kill()
        return reply

    def load(self, setup: RunSetup) -> None:
        """Sent once to the process, which keeps the buffers until another kernel is loaded.
        setup.kernel: needed only for runs that read inputs packed ahead (RunRequest.layouts),
        which the process packs from its inputs for the request's config."""
        self._setup = setup

    def run(self, request: RunRequest) -> RunResult:
        if self._process is None or not self._process.is_alive():
            self.kill()
            self.restarts += self._started
            problem = self._start()
            if problem:
                return RunResult.failed("crash", problem)
        try:
            if self._loaded != self._setup.kernel_key:
                self._conn.send(self._setup)
                reply = self._receive(max(self.start_timeout_s, request.timeout_s))
                if not isinstance(reply, Ready):
                    return reply
                self._loaded = self._setup.kernel_key
            self._conn.send(request)
            return self._receive(request.timeout_s)
        except (BrokenPipeError, OSError):
            self.kill()
            return RunResult.failed("crash", "the runner process died before the run")
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
                self._conn.send(StopRequest())
                self._process.join(2)
            except (BrokenPipeError, OSError):
                pass
        self.kill()
