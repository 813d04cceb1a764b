"""Starting the tuner's helper processes: spawned (not forked: the tuner has threads), on the
cores this process may use, with Ctrl-C left to the tuner."""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading

SPAWN = multiprocessing.get_context("spawn")


def machine_cores() -> int:
    """The cores this process may use: the size of the compile pool."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def children_ignore_ctrl_c():
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
