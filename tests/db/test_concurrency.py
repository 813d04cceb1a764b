"""Several processes writing one database at once: nothing lost, never "database is locked"."""
from __future__ import annotations

import multiprocessing
import random
import traceback

from tunesearch.db import Store

PROCESSES = 4
RECORDS = 50
SHARED_KERNELS = 10  # every process races on these, so the best-only rule is contended too


def _times(seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    return [[rng.uniform(1e-4, 1e-2) for _ in range(RECORDS)] for _ in range(PROCESSES)]


def _writer(url: str, worker: int, times: list[float], make, barrier, errors) -> None:
    try:
        barrier.wait(timeout=30)  # all open the (possibly new) database at the same moment
        with Store(url) as store:
            for i, time_s in enumerate(times):
                kernel = make.kernel(i % SHARED_KERNELS)
                own = make.kernel(1000 + worker * RECORDS + i)
                store.record(kernel, make.device(), make.result(time_s, host=f"w{worker}"),
                             [make.trial(worker * 1000 + i, time_s)])
                store.record(own, make.device(), make.result(time_s))
    except BaseException:  # noqa: BLE001 - the parent reports it
        errors.put(f"worker {worker}: {traceback.format_exc()}")
        raise SystemExit(1) from None


def _run_writers(url: str, make) -> None:
    context = multiprocessing.get_context("fork")  # workers open their own Store after the fork
    barrier, errors = context.Barrier(PROCESSES), context.Queue()
    times = _times(seed=7)
    workers = [context.Process(target=_writer, args=(url, w, times[w], make, barrier, errors))
               for w in range(PROCESSES)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert not failures, "\n".join(failures)
    assert [worker.exitcode for worker in workers] == [0] * PROCESSES

    with Store(url) as store:
        stats = store.stats()
        assert stats["results"] == SHARED_KERNELS + PROCESSES * RECORDS
        assert stats["trials"] == PROCESSES * RECORDS
        assert stats["devices"] == 1
        for k in range(SHARED_KERNELS):
            # the independent reference: the minimum over every time any process offered
            offered = [(times[w][i], w) for w in range(PROCESSES)
                       for i in range(k, RECORDS, SHARED_KERNELS)]
            best_time, best_worker = min(offered)
            best = store.lookup(make.kernel(k).key, make.device().key)
            assert (best.time_s, best.host) == (best_time, f"w{best_worker}")
            assert len(store.trials(make.kernel(k).key, make.device().key)) == len(offered)
        for w in range(PROCESSES):
            for i in range(RECORDS):
                own = store.lookup(make.kernel(1000 + w * RECORDS + i).key, make.device().key)
                assert own.time_s == times[w][i]


def test_concurrent_writers_sqlite(tmp_path, make):
    _run_writers(f"sqlite:///{tmp_path / 'shared.db'}", make)


def test_concurrent_writers_postgresql(pg_url, make):
    _run_writers(pg_url, make)


def test_a_store_opened_before_fork_works_in_the_child(tmp_path, make):
    store = Store(tmp_path / "forked.db")
    store.record(make.kernel(0), make.device(), make.result(1e-3))  # the pool holds a connection
    context = multiprocessing.get_context("fork")
    child = context.Process(target=_record_in_child, args=(store, make))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert store.lookup(make.kernel(0).key, make.device().key).time_s == 1e-3  # parent unharmed
    assert store.lookup(make.kernel(1).key, make.device().key).time_s == 2e-3
    store.close()


def _record_in_child(store: Store, make) -> None:
    assert store.lookup(make.kernel(0).key, make.device().key).time_s == 1e-3
    store.record(make.kernel(1), make.device(), make.result(2e-3))
