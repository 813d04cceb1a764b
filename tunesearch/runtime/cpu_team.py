"""How many threads a model's calls use on a machine that other work shares.

A parallel loop of OpenMP ends in a barrier: when the system takes one of the team's threads off
its core (the machine runs other processes), the whole kernel waits for the scheduler to give it
back, a time slice of milliseconds for a kernel of microseconds. onnxruntime's pool sidesteps
this (the caller runs the work no worker has claimed); with OpenMP, the way out is a smaller
team. A `Team` watches the latency of whole calls and picks, per call, the team with the lower
recent median: all threads, or the calling thread alone (each tried twice at the start, after a
first call that warms up and is not counted). It keeps trying the other choice now and then, less
often each time it loses, so a machine that grows quiet gets its threads back.
On a quiet machine the full team wins every comparison and nothing changes.

The team limit is OpenMP's nthreads-var of the calling thread (omp_set_num_threads), which every
kernel reads as the cap of its `num_threads` (runtime/render/c_support.py, TEAM).
"""
from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Callable

RECENT = 8              # calls per choice whose median is compared
FIRST_RETRY = 16        # calls before the losing choice is tried again, doubled per loss
LAST_RETRY = 1024


class Team:
    """Chooses the team size of each call from the latencies of earlier calls."""

    def __init__(self, threads: int, swap_limit: Callable[[int], int],
                 clock: Callable[[], float] = time.perf_counter):
        """swap_limit(n) sets the calling thread's OpenMP thread limit to n and returns the
        limit it replaces."""
        self.threads = threads
        self._clock = clock
        self._swap_limit = swap_limit
        self._recent = {threads: deque(maxlen=RECENT), 1: deque(maxlen=RECENT)}
        self._retry_in = FIRST_RETRY
        self._until_retry = FIRST_RETRY
        self._retrying = False
        self._warm = True

    def run(self, call: Callable[[], None]) -> None:
        """Make one call with the chosen team and time it. A smaller team's limit holds for
        this call only: other work of the thread keeps its own."""
        if self.threads <= 1:
            call()
            return
        size = self._next_size()
        previous = self._swap_limit(size) if size != self.threads else None
        start = self._clock()
        try:
            call()
        finally:
            seconds = self._clock() - start
            if previous is not None:
                self._swap_limit(previous)
            if self._warm:
                self._warm = False  # the first call starts OpenMP's threads and touches
                return              # fresh buffers: it says nothing of the team's speed
            if self._retrying:
                # a retry that beats one thread's median is tried again soon, else later;
                # a winner's older samples date from the busy time that made it lose, so
                # they go: the full team runs next, and keeps running while it is faster
                won = seconds < self._median(1)
                self._retry_in = FIRST_RETRY if won else min(LAST_RETRY, 2 * self._retry_in)
                self._until_retry = self._retry_in
                self._retrying = False
                if won:
                    self._recent[size].clear()
            self._recent[size].append(seconds)

    def _median(self, size: int) -> float:
        return statistics.median(self._recent[size])

    def _next_size(self) -> int:
        full, alone = self._recent[self.threads], self._recent[1]
        if len(full) < 2:
            return self.threads   # the full team first, until it has a median
        if len(alone) < 2:        # then two calls on one thread, to compare with: on a
            return 1              # busy machine every full-team call may stall alike
        if self._median(self.threads) <= self._median(1):
            return self.threads
        self._until_retry -= 1    # one thread has been faster lately: the full team now and then
        if self._until_retry > 0:
            return 1
        self._retrying = True
        return self.threads
