"""Leases on PostgreSQL where transactions interleave: what one worker commits in the middle of
another's transaction."""
from __future__ import annotations

import threading

from tunesearch.db import Store
from tunesearch.db.leases import DONE, LeaseBoard, WorkItem


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
