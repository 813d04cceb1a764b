"""A load test of the leases: N worker processes share a model-sized work table through the real
LeaseBoard and Store, with the measurement replaced by short random sleeps, and a few of them
killed (SIGKILL) while they hold a lease, so that leases expire and are taken over.

    plan = LoadPlan(n_workers=16, n_kernels=100, kills=2, ttl_s=1.5)
    run = run_load(url, plan, folder)          # registers, starts, kills, waits
    assert check(url, plan, run) == []         # nothing lost, no overlap, nothing done twice

Each worker loops as `search/worker.py` does: claim, renew a few times while it "measures",
store a result, finish the lease DONE; it stops when no lease is waiting or running. Some workers
register the work table again midway, as a machine that joins the run does. Every worker writes
what it saw (claims, confirmed renewals, finishes, with this machine's clock) to a file of its
own, line by line, so that the lines of a killed worker survive it. `check` compares them with
`lease_claims`. Used by tests/db/test_lease_load.py and scripts/bench_leases.py.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import statistics
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import text

from tunesearch.db import DeviceRecord, KernelRecord, ResultRecord, Store
from tunesearch.db.leases import DONE, LeaseBoard, WorkItem

# leeway when the workers' clock readings are compared: they are read before or after the
# database call they bracket, which stamps its own times rounded to microseconds
CLOCK_SLACK_S = 0.002


@dataclass(frozen=True)
class LoadPlan:
    """One load run: the work table, the workers and how long each holds a lease."""

    n_workers: int = 16
    n_kernels: int = 500
    kernels_per_model: int = 50  # each model's first kernel dominates: one slot per worker
    kills: int = 2               # workers killed while they hold a lease
    joins: int = 2               # workers that register the work table again midway
    ttl_s: float = 2.0
    renews: int = 3              # renewals per lease, one per measuring step
    step_s: tuple[float, float] = (0.005, 0.03)  # a measuring step sleeps this long
    poll_s: float = 0.1          # an idle worker's wait for a lease to expire
    seed: int = 0
    device_key: str = "load-test-device"
    timeout_s: float = 300.0

    def models(self) -> dict[str, list[WorkItem]]:
        """The work table, by model: kernel weights drawn from a long-tailed distribution;
        each model also runs the last kernel of the model before it (kernels are shared)."""
        rng = random.Random(self.seed)
        keys = [f"load_{i:05d}" for i in range(self.n_kernels)]
        out, previous = {}, None
        for m, first in enumerate(range(0, self.n_kernels, self.kernels_per_model)):
            mine = keys[first:first + self.kernels_per_model]
            rest = [rng.paretovariate(1.5) for _ in mine[1:]]
            scale = 0.4 / (sum(rest) or 1.0)
            items = [WorkItem(mine[0], f"r_{mine[0]}", 1, 0.6, max(1, self.n_workers))]
            items += [WorkItem(key, f"E_{key}", rng.randint(1, 4), share * scale)
                      for key, share in zip(mine[1:], rest)]
            out[f"model{m:02d}"] = items + ([previous] if previous is not None else [])
            previous = items[-1] if len(items) > 1 else None
        return out

    def slots(self) -> dict[str, int]:
        """Leases per kernel key."""
        return {item.kernel_key: item.slots for items in self.models().values()
                for item in items}


@dataclass
class LoadRun:
    """What one run measured, and how each worker ended."""

    wall_s: float
    exit_codes: dict[int, int | None]
    killed: dict[int, str]                # worker index -> the name of a worker killed
    events: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    peak_connections: int = 0  # the most the server had open to clients at once (PostgreSQL)

    def of(self, kind: str) -> list[dict]:
        return [event for event in self.events if event["kind"] == kind]

    def figures(self) -> dict:
        """Claims and finishes per second, and claim latencies (those that got a lease)."""
        claims, done = self.of("claim"), [e for e in self.of("finish") if e["ok"]]
        took = sorted(e["returned"] - e["sent"] for e in claims)
        return {
            "claims": len(claims), "finishes": len(done), "wall_s": self.wall_s,
            "claims_per_s": len(claims) / self.wall_s, "finishes_per_s": len(done) / self.wall_s,
            "claim_p50_ms": 1e3 * statistics.median(took) if took else float("nan"),
            "claim_p99_ms": 1e3 * took[min(len(took) - 1, int(0.99 * len(took)))]
            if took else float("nan"),
            "empty_claims": len(self.of("empty")),
            "lost": sum(1 for e in self.of("renew") + self.of("finish") if not e["ok"]),
            "peak_connections": self.peak_connections,
        }


def worker_name(index: int, pid: int) -> str:
    return f"load{index:02d}:{pid}"


# -- one worker ------------------------------------------------------------------------------

def _work(url: str, index: int, plan: LoadPlan, barrier, holding, folder: str) -> None:
    """The loop of one worker process; its events go to `folder/<index>.jsonl`."""
    name, rng = worker_name(index, os.getpid()), random.Random(plan.seed * 1000 + index)
    log = open(Path(folder) / f"{index}.jsonl", "a", buffering=1)

    def event(kind: str, **fields) -> None:
        log.write(json.dumps({"kind": kind, "worker": name, **fields}) + "\n")

    try:
        store = Store(url)
        board = LeaseBoard(store, ttl_s=plan.ttl_s)
        models = plan.models()
        keys = sorted(plan.slots())
        device = DeviceRecord(plan.device_key, "cpu", "load test", {"load": True})
        barrier.wait(timeout=plan.timeout_s)
        finished = 0
        while True:
            sent = time.time()
            claim = board.claim(name, plan.device_key, keys)
            if claim is None:
                event("empty", sent=sent)
                if board.pending(plan.device_key, keys) == 0:
                    break
                time.sleep(plan.poll_s)
                continue
            lease = [claim.kernel_key, claim.slot]
            event("claim", lease=lease, sent=sent, returned=time.time(), ok=True,
                  taken_over=claim.taken_over)
            holding[index] = 1  # the parent kills only while this is set: no result half stored
            held = True
            for step in range(plan.renews):
                time.sleep(rng.uniform(*plan.step_s))
                sent = time.time()
                held = board.renew(claim, claim.trials + step + 1)
                event("renew", lease=lease, sent=sent, ok=held)
                if not held:
                    break
            holding[index] = 0
            if held:
                store.record(KernelRecord(claim.kernel_key, f"k_{claim.kernel_key}", "", "", "",
                                          1), device, made_up_result(rng))
                held = board.finish(claim, DONE, trials=claim.trials + plan.renews)
                event("finish", lease=lease, returned=time.time(), ok=held)
            finished += held
            if index < plan.joins and finished == 2 + 3 * index:  # a machine joins the run
                for model, items in models.items():
                    board.register(model, plan.device_key, items)
                event("joined")
        store.close()
    except BaseException:  # noqa: BLE001 - the parent reports it
        event("error", text=traceback.format_exc())
        barrier.abort()  # the parent, if it still waits for everyone to start, stops waiting
        raise SystemExit(1) from None
    finally:
        log.close()


def made_up_result(rng: random.Random) -> ResultRecord:
    """A result as a worker stores it, with a made-up time."""
    time_s = rng.uniform(1e-5, 1e-3)
    return ResultRecord(config={"knobs": {"unroll": 2}}, time_s=time_s, spread=0.01,
                        gflops=1.0, gbps=1.0, default_time_s=2 * time_s, speedup=2.0,
                        trials=3, sampler="tpe", host="load-test")


# -- the run ---------------------------------------------------------------------------------

def register(url: str, plan: LoadPlan) -> int:
    """Register the work table (the database's schema is made on the way); the leases open."""
    with Store(url) as store:
        board = LeaseBoard(store, ttl_s=plan.ttl_s)
        return sum(board.register(model, plan.device_key, items)
                   for model, items in plan.models().items())


def run_load(url: str, plan: LoadPlan, folder: str | os.PathLike) -> LoadRun:
    """Register the work, start the workers together, kill `plan.kills` of them while they
    hold a lease (spread over the first half of the work), and wait for the rest to stop."""
    leases = register(url, plan)
    context = multiprocessing.get_context("fork")  # each worker opens its own Store
    barrier = context.Barrier(plan.n_workers + 1)
    holding = context.Array("i", plan.n_workers, lock=False)
    workers = [context.Process(target=_work, args=(url, i, plan, barrier, holding, str(folder)))
               for i in range(plan.n_workers)]
    for worker in workers:
        worker.start()
    barrier.wait(timeout=plan.timeout_s)
    start = time.perf_counter()
    deadline = start + plan.timeout_s
    killed, errors, peak = {}, [], None
    killable = range(plan.joins, plan.n_workers)  # the workers that join live to join
    victims = random.Random(plan.seed).sample(killable, min(plan.kills, len(killable) - 1))
    with Store(url) as store:
        board, keys = LeaseBoard(store, ttl_s=plan.ttl_s), sorted(plan.slots())
        while any(worker.is_alive() for worker in workers) and time.perf_counter() < deadline:
            connections = _client_connections(store)
            peak = connections if peak is None else max(peak, connections)
            if len(killed) < len(victims):
                victim = victims[len(killed)]
                open_share = 1 - 0.5 * (len(killed) + 1) / (len(victims) + 1)
                if holding[victim] and board.pending(plan.device_key, keys) <= open_share * leases:
                    os.kill(workers[victim].pid, signal.SIGKILL)
                    killed[victim] = worker_name(victim, workers[victim].pid)
            time.sleep(0.05)
    wall = time.perf_counter() - start
    if len(killed) < len(victims):
        errors.append(f"{len(victims) - len(killed)} worker(s) could not be killed holding a lease")
    for i, worker in enumerate(workers):
        if worker.is_alive():
            errors.append(f"worker {i} still running after {plan.timeout_s:.0f} s; killed")
            os.kill(worker.pid, signal.SIGKILL)
            worker.join()
    events = []
    for path in sorted(Path(folder).glob("*.jsonl")):
        events += [json.loads(line) for line in path.read_text().splitlines() if line]
    return LoadRun(wall, {i: w.exitcode for i, w in enumerate(workers)}, killed, events, errors,
                   peak or 0)


def _client_connections(store: Store) -> int:
    """Connections the server has open to clients, this process's included (0 on SQLite)."""
    if not store.url.startswith("postgresql"):
        return 0
    return store.read(lambda connection: connection.execute(text(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")
    ).scalar_one())


# -- the checks ------------------------------------------------------------------------------

def claim_outcomes(url: str, plan: LoadPlan) -> Counter:
    """How the run's claims ended, from `lease_claims`: done, expired (taken over), ..."""
    with Store(url) as store:
        return Counter(row.outcome for row in LeaseBoard(store).claims(plan.device_key))


def check(url: str, plan: LoadPlan, run: LoadRun) -> list[str]:
    """What went wrong, one line each; empty when every lease ended DONE exactly once, no two
    claims of a lease overlapped (by `lease_claims` and by the workers' own clocks), every
    kernel has a result, and each killed worker's lease was taken over."""
    problems = list(run.errors)
    problems += [f"worker {i} exited with {code}" for i, code in run.exit_codes.items()
                 if i not in run.killed and code != 0]
    problems += [f"worker error: {e['text'].strip().splitlines()[-1]}" for e in run.of("error")]
    slots = plan.slots()
    with Store(url) as store:
        board = LeaseBoard(store, ttl_s=plan.ttl_s)
        _, leases = board.leases(plan.device_key)
        claims = board.claims(plan.device_key)
        results = {row.kernel_key for row in store.list_results(plan.device_key)}
    expected = {(key, slot) for key, n in slots.items() for slot in range(n)}
    found = {(lease.kernel_key, lease.slot) for lease in leases}
    problems += [f"lease {key}/{slot} was never registered" for key, slot in expected - found]
    problems += [f"lease {lease.kernel_key}/{lease.slot} ended {lease.state}, not done"
                 for lease in leases if lease.state != DONE]
    problems += [f"kernel {key} has no result" for key in sorted(set(slots) - results)]
    by_lease = defaultdict(list)
    for row in claims:
        by_lease[(row.kernel_key, row.slot)].append(row)
    done_per_kernel: dict[str, int] = defaultdict(int)
    for (key, slot), rows in by_lease.items():
        outcomes = [row.outcome for row in rows]
        done_per_kernel[key] += outcomes.count("done")
        if outcomes.count("done") != 1 or outcomes[-1] != "done":
            problems.append(f"lease {key}/{slot} claims ended {outcomes}")
        for before, after in zip(rows, rows[1:]):
            if before.ended_at is None or before.ended_at > after.claimed_at:
                problems.append(f"lease {key}/{slot}: {before.worker}'s claim (ended "
                                f"{before.ended_at}) overlaps {after.worker}'s "
                                f"({after.claimed_at})")
    problems += [f"kernel {key} finished {done_per_kernel[key]} times, has {n} slot(s)"
                 for key, n in slots.items() if done_per_kernel[key] != n]
    problems += _check_workers_view(plan, run)
    expired = {row.worker for row in claims if row.outcome == "expired"}
    problems += [f"killed worker {name}'s lease was not taken over"
                 for name in run.killed.values() if name not in expired]
    return problems


def _check_workers_view(plan: LoadPlan, run: LoadRun) -> list[str]:
    """The same from the workers' events: one successful finish per lease, and a claim starts
    only after the one before it ended, where a claim that did not finish ended (for all its
    worker knew) one TTL after its last confirmed claim or renewal was sent."""
    problems, done = [], defaultdict(int)
    held: dict[tuple, list[list[float]]] = defaultdict(list)  # lease -> [start, end] per claim
    current: dict[str, list[float]] = {}  # worker -> the span of its latest claim
    for e in run.events:  # one worker's events are in order
        if e["kind"] not in ("claim", "renew", "finish") or not e["ok"]:
            continue
        if e["kind"] == "claim":
            current[e["worker"]] = [e["returned"], e["sent"] + plan.ttl_s]
            held[tuple(e["lease"])].append(current[e["worker"]])
        elif e["kind"] == "renew":
            current[e["worker"]][1] = e["sent"] + plan.ttl_s
        else:
            done[tuple(e["lease"])] += 1
            current[e["worker"]][1] = e["returned"]
    problems += [f"lease {key}/{slot} finished {n} times by the workers' count"
                 for (key, slot), n in done.items() if n != 1]
    for (key, slot), spans in held.items():
        spans.sort()
        for before, after in zip(spans, spans[1:]):
            if before[1] > after[0] + CLOCK_SLACK_S:
                problems.append(f"lease {key}/{slot}: two workers held it at once for "
                                f"{before[1] - after[0]:.3f} s by their clocks")
    return problems
