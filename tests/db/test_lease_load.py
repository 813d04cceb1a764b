"""The leases under load (tests/lease_load.py, a small version of scripts/bench_leases.py): worker
processes claim, renew and finish a work table on a real database, some of them killed while they
hold a lease, and nothing is lost, held twice at once, or finished twice."""
from __future__ import annotations

import dataclasses

from sqlalchemy import create_engine, text

from tests.lease_load import LoadPlan, check, run_load


def _run_clean(url: str, plan: LoadPlan, folder):
    run = run_load(url, plan, folder)
    assert check(url, plan, run) == []
    figures = run.figures()
    assert len(run.killed) == plan.kills
    assert figures["finishes"] == sum(plan.slots().values())  # each lease once, by the workers
    assert figures["claims"] >= figures["finishes"] + plan.kills  # the killed workers' leases
    assert len(run.of("joined")) == plan.joins
    return run


def test_sixteen_workers_on_postgresql(pg_url, tmp_path):
    plan = LoadPlan(n_workers=16, n_kernels=100, kills=2, joins=2, ttl_s=1.5, timeout_s=120)
    run = _run_clean(pg_url, plan, tmp_path)
    assert len({e["worker"] for e in run.of("finish")}) > 8  # the work was spread out


def test_a_few_workers_on_sqlite_and_the_checks_see_what_goes_wrong(tmp_path):
    url = f"sqlite:///{tmp_path / 'leases.db'}"
    plan = LoadPlan(n_workers=4, n_kernels=30, kernels_per_model=15, kills=1, joins=1,
                    ttl_s=1.0, timeout_s=60)
    events = tmp_path / "events"
    events.mkdir()
    run = _run_clean(url, plan, events)

    finish = run.of("finish")[0]
    twice = dataclasses.replace(run, events=run.events + [finish])
    assert check(url, plan, twice) == [
        f"lease {finish['lease'][0]}/{finish['lease'][1]} finished 2 times by the workers' count"]

    engine = create_engine(url)
    with engine.begin() as connection:
        # the first claim of a lease that was taken over now ends long after it was
        connection.execute(text(
            "UPDATE lease_claims SET ended_at = '2999-01-01 00:00:00.000000' WHERE id = "
            "(SELECT min(id) FROM lease_claims WHERE outcome = 'expired')"))
        connection.execute(text("UPDATE leases SET state = 'waiting' WHERE id = "
                                "(SELECT max(id) FROM leases)"))
    engine.dispose()
    problems = check(url, plan, run)
    assert len(problems) == 2, problems
    assert "ended waiting, not done" in problems[0]
    assert "overlaps" in problems[1]

