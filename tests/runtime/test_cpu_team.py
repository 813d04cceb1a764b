"""The team size of a model's calls on a shared machine: the full team while it is fastest, one
thread while a busy machine stalls the full team's barriers, the full team again once it is
quiet. Calls are simulated with a clock the test advances; the limit swap is the real one."""
from __future__ import annotations

import numpy as np

from tunesearch.runtime.cpu_team import FIRST_RETRY, Team


class Machine:
    """A clock and a call whose duration depends on the team the limit allows."""

    def __init__(self, threads: int, seconds):
        self.now, self.limit, self.threads = 0.0, threads, threads
        self.seconds = seconds        # seconds(team size, call number)
        self.sizes: list[int] = []

    def clock(self) -> float:
        return self.now

    def swap(self, n: int) -> int:
        previous, self.limit = self.limit, n
        return previous

    def call(self) -> None:
        size = min(self.limit, self.threads)
        self.now += self.seconds(size, len(self.sizes))
        self.sizes.append(size)


def run(machine: Machine, calls: int) -> Team:
    team = Team(machine.threads, machine.swap, machine.clock)
    for _ in range(calls):
        team.run(machine.call)
        assert machine.limit == machine.threads  # restored after every call
    return team


def test_a_quiet_machine_keeps_the_full_team():
    machine = Machine(2, lambda size, i: 1.0 if size == 2 else 1.7)
    run(machine, 500)
    # a warm-up call, then one thread tried twice, to compare
    assert machine.sizes[:5] == [2, 2, 2, 1, 1]
    assert set(machine.sizes[5:]) == {2}


def test_a_slow_first_call_does_not_count_against_the_full_team():
    # the first call starts OpenMP's threads and faults fresh pages in: far slower than any
    machine = Machine(2, lambda size, i: 50.0 if i == 0 else (1.0 if size == 2 else 1.7))
    run(machine, 100)
    assert machine.sizes[5:].count(1) == 0


def test_a_retry_that_wins_brings_the_full_team_back_at_once():
    quiet_from = 100

    def seconds(size, i):
        if size == 1:
            return 1.6
        return 1.0 if i >= quiet_from else 14.0
    machine = Machine(2, seconds)
    run(machine, 400)
    first_win = next(i for i, s in enumerate(machine.sizes) if s == 2 and i >= quiet_from)
    assert set(machine.sizes[first_win:]) == {2}


def test_a_machine_where_every_full_call_stalls_moves_to_one_thread():
    machine = Machine(2, lambda size, i: 14.0 if size == 2 else 1.6)
    run(machine, 200)
    assert machine.sizes.count(1) > 185


def test_a_busy_machine_moves_to_one_thread_and_retries_less_and_less():
    # the full team stalls every other call; one thread is steady
    machine = Machine(2, lambda size, i: (12.0 if i % 2 else 1.0) if size == 2 else 1.6)
    run(machine, 1000)
    alone = machine.sizes.count(1)
    assert alone > 950
    retries = [i for i, s in enumerate(machine.sizes) if s == 2 and i > 20]
    gaps = np.diff(retries)
    assert len(retries) >= 3 and gaps[-1] > gaps[0] >= FIRST_RETRY - 1


def test_the_full_team_comes_back_when_the_machine_grows_quiet():
    busy_until = 300

    def seconds(size, i):
        if size == 1:
            return 1.6
        return (15.0 if i % 2 else 1.0) if i < busy_until else 1.0
    machine = Machine(2, seconds)
    run(machine, 1200)
    assert machine.sizes[busy_until - 50:busy_until].count(1) > 40
    assert set(machine.sizes[-100:]) == {2}


def test_one_thread_never_swaps():
    machine = Machine(1, lambda size, i: 1.0)
    run(machine, 10)
    assert machine.sizes == [1] * 10


def test_the_chain_library_swaps_the_openmp_limit():
    from tunesearch.runtime.cpu import _chain_library
    from tunesearch.runtime.device import get_device
    lib = _chain_library(get_device("cpu"))
    previous = lib.swap_team_limit(1)
    assert previous >= 1
    assert lib.swap_team_limit(previous) == 1
    assert lib.swap_team_limit(previous) == previous
