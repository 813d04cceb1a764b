"""The leases under load on a real PostgreSQL server: N worker processes share a model-sized work
table through the real LeaseBoard and Store, the measurement replaced by short random sleeps, a few
workers killed (SIGKILL) while they hold a lease. Prints claims and finishes per second and claim
latencies, and checks that every lease ended done exactly once, that no two claims of a lease
overlapped, and that each killed worker's lease was taken over; exits 1 if a check fails.

    python scripts/bench_leases.py [--workers 16 32] [--runs 3] [--kernels 500] [--db URL]
    python scripts/bench_leases.py --sqlite      # then the same runs on a SQLite file, the peer

Without --db it starts a throwaway server on 127.0.0.1 (tests/pg_server.py) with PostgreSQL's
default max_connections (100), and each run gets a new database. With --db the runs share that
database, each under a device key of its own. The workers are tests/lease_load.py's; each keeps
one connection (the claims, renewals and results of one thread), where a real worker keeps two.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from tests.lease_load import LoadPlan, check, claim_outcomes, run_load  # noqa: E402
from tests.pg_server import new_database, server_version, throwaway_postgres  # noqa: E402
from tunesearch.db import Store  # noqa: E402
from tunesearch.search.capacity import CONNECTIONS_PER_WORKER, free_connections  # noqa: E402

# column -> its format: claims and finishes per second, claim latency (of the claims that got
# a lease), claims that expired and were taken over, leases that live workers found lost (a
# renewal or the finish refused), claims that found nothing, the most connections the server
# had open, the run's wall time
COLUMNS = {"claims_per_s": ".0f", "finishes_per_s": ".0f", "claim_p50_ms": ".1f",
           "claim_p99_ms": ".1f", "expired": ".0f", "lost": ".0f",
           "empty_claims": ".0f", "peak_connections": ".0f", "wall_s": ".1f"}


def one_run(url: str, plan: LoadPlan) -> tuple[dict, list[str]]:
    """One load run on the database of `url`; its figures and problems."""
    with Store(url) as store:
        free = free_connections(store)
    need = plan.n_workers * CONNECTIONS_PER_WORKER
    if free is not None and need > free:  # as `tune --workers` refuses (search/capacity.py)
        return {}, [f"{plan.n_workers} workers need {need} connections, the server has {free}"]
    with tempfile.TemporaryDirectory() as folder:
        run = run_load(url, plan, folder)
    problems = check(url, plan, run)
    figures = run.figures() | {"expired": claim_outcomes(url, plan).get("expired", 0)}
    return figures, problems


def sweep(backend: str, new_url, args) -> bool:
    """The runs of every worker count on one backend, a row each and their medians; whether
    every check held. new_url() gives each run its database."""
    ok = True
    for n_workers in args.workers:
        kills = args.kills if args.kills is not None else max(1, n_workers // 8)
        plan = LoadPlan(n_workers=n_workers, n_kernels=args.kernels, kills=kills, ttl_s=args.ttl)
        runs = []
        for r in range(args.runs):
            plan = dataclasses.replace(plan, seed=r, device_key=f"load-{uuid.uuid4().hex[:8]}")
            figures, problems = one_run(new_url(), plan)
            for problem in problems:
                print(f"CHECK FAILED ({backend}, {n_workers} workers, run {r + 1}): {problem}")
            ok &= not problems
            if figures:
                runs.append(figures)
                print(_row(backend, plan, figures, f"{r + 1}"), flush=True)
        if len(runs) > 1:
            medians = {name: statistics.median(f[name] for f in runs) for name in COLUMNS}
            print(_row(backend, plan, medians, "median"), flush=True)
    return ok


def _row(backend: str, plan: LoadPlan, figures: dict, label: str) -> str:
    cells = [backend, label, str(plan.n_workers), str(plan.n_kernels),
             str(sum(plan.slots().values()))]
    cells += [format(figures[name], spec) for name, spec in COLUMNS.items()]
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--kernels", type=int, default=500)
    parser.add_argument("--kills", type=int, default=None, help="default: workers / 8")
    parser.add_argument("--ttl", type=float, default=5.0)
    parser.add_argument("--db", help="a PostgreSQL URL to use instead of a throwaway server")
    parser.add_argument("--sqlite", action="store_true", help="the same runs on SQLite after")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        server = args.db or stack.enter_context(throwaway_postgres(max_connections=100))
        folder = stack.enter_context(tempfile.TemporaryDirectory())
        plan = LoadPlan(ttl_s=args.ttl)
        print(f"# {datetime.date.today()}, {platform.node()}, {os.cpu_count()} CPU(s), "
              f"PostgreSQL {server_version(server)}, SQLite {sqlite3.sqlite_version}, "
              f"Python {platform.python_version()}")
        print(f"# {args.kernels} kernels in models of {plan.kernels_per_model} (each model's "
              f"first kernel: one lease per worker), lease TTL {plan.ttl_s:g} s, {plan.renews} "
              f"renewals a lease, {plan.step_s[0] * 1e3:.0f}-{plan.step_s[1] * 1e3:.0f} ms "
              f"apart; {plan.joins} workers register the work again midway; "
              f"{args.kills if args.kills is not None else 'workers / 8'} killed holding a "
              "lease\n")
        head = ["database", "run", "workers", "kernels", "leases", *COLUMNS]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        ok = sweep("PostgreSQL", (lambda: server) if args.db else
                   (lambda: new_database(server, "ts_load")), args)
        if args.sqlite:
            ok &= sweep("SQLite", lambda: f"sqlite:///{folder}/{uuid.uuid4().hex[:8]}.db", args)
        print("\nchecks: " + ("FAILED" if not ok else
                              "every lease done exactly once, no overlapping claims, every "
                              "killed worker's lease taken over, every kernel has a result"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
