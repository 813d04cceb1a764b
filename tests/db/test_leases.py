"""Leases: on PostgreSQL where transactions interleave (what one worker commits in the middle of
another's transaction), and what a stopping worker gives back, on both backends."""
from __future__ import annotations

import threading

from tunesearch.db import Store
from tunesearch.db.leases import DONE, RUNNING, WAITING, LeaseBoard, WorkItem


def test_a_registration_during_a_finish_leaves_the_finished_lease_done(pg_url, make, monkeypatch):
    """A machine that joins registers the kernels while a worker finishes one: the worker stores
    the result and finishes its lease between the registration's look at the results and its
    update of the leases. The registration must not reopen that lease: its kernel is tuned."""
    device, kernel = make.device(), make.kernel()
    items = [WorkItem(kernel.key, kernel.name)]
    with Store(pg_url) as store, Store(pg_url) as worker_store:
        board, worker_board = LeaseBoard(store), LeaseBoard(worker_store)
        assert board.register("model", device.key, items) == 1
        claim = worker_board.claim("worker", device.key, [kernel.key])
        looked = LeaseBoard._tuned

        def look_then_let_the_worker_finish(connection, device_key, kernel_keys):
            tuned = looked(connection, device_key, kernel_keys)
            finisher = threading.Thread(target=lambda: (
                worker_store.record(kernel, device, make.result()),
                worker_board.finish(claim, DONE, trials=5)))
            finisher.start()
            finisher.join(timeout=30)
            assert not finisher.is_alive()
            return tuned

        monkeypatch.setattr(LeaseBoard, "_tuned", staticmethod(look_then_let_the_worker_finish))
        assert board.register("model", device.key, items) == 0
        [lease] = board.leases(device.key)[1]
        assert (lease.state, lease.trials) == (DONE, 5)


def test_a_stopping_worker_gives_back_every_lease_it_holds_and_no_other(store_url, make):
    """What a worker does as it stops, whatever its Claims in hand say: its running leases go
    back to waiting, its open claims end as released; another worker's lease stays its own."""
    device = make.device()
    kernels = [make.kernel(i) for i in range(3)]
    with Store(store_url) as store:
        board = LeaseBoard(store)
        board.register("model", device.key, [WorkItem(k.key, k.name) for k in kernels])
        mine = [board.claim("stopping", device.key, [k.key]) for k in kernels[:2]]
        theirs = board.claim("other", device.key, [kernels[2].key])
        assert board.release_worker("stopping", "interrupted") == 2
        assert board.release_worker("stopping") == 0  # nothing held any more
        states = {lease.kernel_key: (lease.state, lease.worker)
                  for lease in board.leases(device.key)[1]}
        assert states == {kernels[0].key: (WAITING, None), kernels[1].key: (WAITING, None),
                          kernels[2].key: (RUNNING, "other")}
        outcomes = {(c.worker, c.outcome) for c in board.claims(device.key)}
        assert outcomes == {("stopping", "released"), ("other", None)}
        assert board.renew(theirs, 3) and not board.renew(mine[0], 3)
