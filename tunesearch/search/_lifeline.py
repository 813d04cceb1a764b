"""Helper processes that never outlive the process that started them.

A `tune` killed with SIGKILL runs no cleanup: its workers, runner and compile processes would be
reparented to init and go on for minutes. Two mechanisms, so that one failing is not enough:
Linux's `prctl(PR_SET_PDEATHSIG)` sends a signal the moment the parent dies (it is tied to the
thread that started the child, hence the second), and a thread that polls the parent's pid.

    stop_with_parent()        # a worker: SIGTERM becomes Ctrl-C, it releases its lease and ends
    exit_with_parent()        # a runner or compile process: it has nothing to save, it exits
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
POLL_S = 1.0       # how often the parent's pid is checked
GRACE_S = 20.0     # how long a worker may take to release its lease before it is ended anyway


def _set_parent_death_signal(sig: int) -> bool:
    """Ask Linux to send `sig` to this process when its parent dies; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int, on_orphan) -> None:
    def run() -> None:
        while os.getppid() == parent:
            time.sleep(POLL_S)
        on_orphan()
    threading.Thread(target=run, name="parent-watch", daemon=True).start()


def exit_with_parent(parent: int | None = None) -> None:
    """End this process as soon as its parent is gone (a process with nothing to save).

    parent: the pid this process was started by (default: its parent now). Only the poll
    thread: the death signal is tied to the thread that started us, and a runner may be started
    from a thread that ends long before its process does."""
    parent = os.getppid() if parent is None else parent
    if os.getppid() != parent:
        os._exit(1)
    _watch(parent, lambda: os._exit(1))


def stop_with_parent(parent: int | None = None, grace_s: float = GRACE_S) -> None:
    """Stop this worker within seconds of its parent's death: SIGTERM (sent by the kernel, or
    by the poll thread) raises KeyboardInterrupt in the main thread once, which ends the tuning
    as Ctrl-C does, releasing the lease; grace_s after it the process ends regardless."""
    parent = os.getppid() if parent is None else parent
    stopping = threading.Event()

    def give_up() -> None:
        time.sleep(grace_s)
        os._exit(1)

    def on_term(signum, frame) -> None:
        if stopping.is_set():  # the second word of the same news: the stop is under way
            return
        stopping.set()
        threading.Thread(target=give_up, name="stop-grace", daemon=True).start()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    _set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent:  # it died before the death signal was asked for
        os.kill(os.getpid(), signal.SIGTERM)
    _watch(parent, lambda: os.kill(os.getpid(), signal.SIGTERM))
