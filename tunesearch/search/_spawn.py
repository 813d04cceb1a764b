"""Starting the tuner's helper processes: spawned (not forked: the tuner has threads), on the
cores this process may use, with Ctrl-C left to the tuner."""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from multiprocessing import resource_tracker

SPAWN = multiprocessing.get_context("spawn")


def machine_cores() -> int:
    """The cores this process may use: the size of the compile pool."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def children_ignore_ctrl_c():
    """Start processes with Ctrl-C held off from their first instruction, not only once they
    run our code (which ignores it): the starting thread blocks SIGINT, and a child keeps that
    mask across exec. The tuner keeps its handler meanwhile, so a Ctrl-C that comes while a
    child starts is delivered when the block ends; ignoring it here would lose it. The
    resource tracker starts first: starting it unblocks SIGINT (the same guard, bpo-33613)."""
    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
