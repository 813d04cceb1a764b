"""The leases under load on a real PostgreSQL server: N worker processes share a model-sized work
table through the real LeaseBoard and Store, the measurement replaced by short random sleeps, a few
workers killed (SIGKILL) while they hold a lease. Prints claims and finishes per second and claim
latencies, and checks that every lease ended done exactly once, that no two claims of a lease
overlapped, and that each killed worker's lease was taken over; exits 1 if a check fails.

    python scripts/bench_leases.py [--workers 16 32] [--runs 3] [--kernels 500] [--db URL]

Without --db it starts a throwaway server on 127.0.0.1 (tests/pg_server.py) with PostgreSQL's
default max_connections (100), and each run gets a new database. With --db the runs share that
database, each under a device key of its own. The workers are tests/lease_load.py's.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import os
import platform
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
# a lease), leases taken over after their worker died, renewals refused, claims that found
# nothing, the most connections the server had open, the run's wall time
COLUMNS = {"claims_per_s": ".0f", "finishes_per_s": ".0f", "claim_p50_ms": ".1f",
           "claim_p99_ms": ".1f", "expired": ".0f", "renews_refused": ".0f",
           "empty_claims": ".0f", "peak_connections": ".0f", "wall_s": ".1f"}


def one_run(server: str, shared: bool, plan: LoadPlan) -> tuple[dict, list[str]]:
    """One load run on a new database (or, shared, the given one); its figures and problems."""
    url = server if shared else new_database(server, "ts_load")
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


def _row(n_workers: int, plan: LoadPlan, leases: int, figures: dict, label: str) -> str:
    cells = [label, str(n_workers), str(plan.n_kernels), str(leases)]
    cells += [format(figures[name], spec) for name, spec in COLUMNS.items()]
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--kernels", type=int, default=500)
    parser.add_argument("--kills", type=int, default=None, help="default: workers / 8")
    parser.add_argument("--ttl", type=float, default=2.0)
    parser.add_argument("--db", help="a PostgreSQL URL to use instead of a throwaway server")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        server = args.db or stack.enter_context(throwaway_postgres(max_connections=100))
        print(f"# {datetime.date.today()}, {platform.node()}, {os.cpu_count()} CPU(s), "
              f"PostgreSQL {server_version(server)}, Python {platform.python_version()}")
        plan = LoadPlan(ttl_s=args.ttl)
        print(f"# {args.kernels} kernels in models of {plan.kernels_per_model} (each model's "
              f"first kernel: one lease per worker), lease TTL {plan.ttl_s:g} s, {plan.renews} "
              f"renewals a lease, {plan.step_s[0] * 1e3:.0f}-{plan.step_s[1] * 1e3:.0f} ms "
              f"apart; {plan.joins} workers register the work again midway\n")
        head = ["run", "workers", "kernels", "leases", *COLUMNS]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        failed = False
        for n_workers in args.workers:
            kills = args.kills if args.kills is not None else max(1, n_workers // 8)
            plan = LoadPlan(n_workers=n_workers, n_kernels=args.kernels, kills=kills,
                            ttl_s=args.ttl)
            leases = sum(plan.slots().values())
            runs = []
            for r in range(args.runs):
                plan = dataclasses.replace(plan, seed=r,
                                           device_key=f"load-{uuid.uuid4().hex[:8]}")
                figures, problems = one_run(server, args.db is not None, plan)
                for problem in problems:
                    print(f"CHECK FAILED ({n_workers} workers, run {r + 1}): {problem}")
                failed |= bool(problems)
                if figures:
                    runs.append(figures)
                    print(_row(n_workers, plan, leases, figures, f"{r + 1}"), flush=True)
            if len(runs) > 1:
                medians = {name: statistics.median(f[name] for f in runs) for name in COLUMNS}
                print(_row(n_workers, plan, leases, medians, "median"), flush=True)
        print("\nchecks: " + ("FAILED" if failed else
                              "every lease done exactly once, no overlapping claims, every "
                              "killed worker's lease taken over, every kernel has a result"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
