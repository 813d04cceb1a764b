"""How many worker processes a `tune` may start: what the machine and the database can serve.

    check_workers(4)                  # TuneError (one line) where this machine cannot serve 4
    check_workers(4, store)           # and where the PostgreSQL server has too few connections

Workers of one machine take turns timing on its device (search/device_lock.py); what they do in
parallel is compile, which takes a core each. Beyond WORKERS_PER_CORE workers per core (at least
MIN_BOUND) a worker only waits for a core or for the device, so more are refused before any
starts: run them on other machines that share the database, or on a Ray cluster (`--cluster`).

Each worker process keeps CONNECTIONS_PER_WORKER PostgreSQL connections open (one pool for the
results and leases, one for the Optuna studies, each PG_POOL_SIZE connections kept and up to
PG_POOL_OVERFLOW more for a moment); a server with max_connections 100 therefore serves about
45 workers across every machine. SQLite has no connection limit (its writers take turns).
"""
from __future__ import annotations

from sqlalchemy import text

from tunesearch.db._engine import PG_POOL_OVERFLOW, PG_POOL_SIZE
from tunesearch.search._spawn import machine_cores
from tunesearch.search.results import TuneError

WORKERS_PER_CORE = 2
MIN_BOUND = 4
CONNECTIONS_PER_WORKER = 2 * PG_POOL_SIZE
PEAK_CONNECTIONS_PER_WORKER = 2 * (PG_POOL_SIZE + PG_POOL_OVERFLOW)


def max_workers_here() -> int:
    """The most worker processes this machine serves (see the module docstring)."""
    return max(MIN_BOUND, WORKERS_PER_CORE * machine_cores())


def free_connections(store) -> int | None:
    """Connections the store's PostgreSQL server can still open for us (None: no limit)."""
    if store.url.split(":", 1)[0].split("+")[0] != "postgresql":
        return None

    def work(connection) -> int:
        row = connection.execute(text(
            "SELECT current_setting('max_connections')::int, "
            "current_setting('superuser_reserved_connections')::int, "
            "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
        )).one()
        return row[0] - row[1] - row[2]
    return store.read(work)


def check_workers(n_workers: int, store=None) -> None:
    """TuneError, one line, where n_workers is more than this machine (and the database of
    `store`, where given) can serve; nothing has started then."""
    if n_workers < 1:
        raise TuneError(f"--workers must be at least 1, not {n_workers}")
    bound = max_workers_here()
    if n_workers > bound:
        raise TuneError(
            f"--workers {n_workers} is more than this machine serves: at most {bound} "
            f"({WORKERS_PER_CORE} per core, {machine_cores()} core(s); timings take turns per "
            "device); run more on other machines that share the database, or use --cluster")
    if store is None or n_workers == 1:
        return
    free = free_connections(store)
    need = n_workers * CONNECTIONS_PER_WORKER
    if free is not None and need > free:
        raise TuneError(
            f"--workers {n_workers} needs {need} connections to {store.where} and the server "
            f"has {max(free, 0)} free (max_connections less those in use); start fewer "
            "workers or raise max_connections")
