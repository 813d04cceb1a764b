"""Fixtures of the database tests: fresh SQLite files and fresh PostgreSQL databases."""
from __future__ import annotations

import uuid
from dataclasses import dataclass

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tunesearch.db import DeviceRecord, KernelRecord, ResultRecord, TrialRecord


def _libpq_url(sqlalchemy_url: str, database: str | None = None) -> str:
    url = make_url(sqlalchemy_url).set(drivername="postgresql")
    if database is not None:
        url = url.set(database=database)
    return url.render_as_string(hide_password=False)


@pytest.fixture
def pg_url(postgres_url):
    """A new, empty PostgreSQL database for one test, dropped afterwards."""
    name = f"ts_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_libpq_url(postgres_url), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    yield url
    with psycopg.connect(_libpq_url(postgres_url), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path / 'results.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """An empty database of each supported backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.db'}"
    return request.getfixturevalue("pg_url")


@dataclass(frozen=True)
class Make:
    """Small, distinct records for tests."""

    def kernel(self, i: int = 0, space_version: int = 1) -> KernelRecord:
        return KernelRecord(key=f"k_{i:04x}cafe", name=f"r_{i}_64_64", canonical=f"store(b0, {i})",
                            ops="mul sum", shapes="64x64x64", space_version=space_version)

    def device(self, i: int = 0) -> DeviceRecord:
        return DeviceRecord(key=f"d_{i:04x}beef", backend="cpu", name=f"CPU {i}",
                            fingerprint={"threads": 2 + i, "isa": "avx512", "driver": "gcc 12"})

    def result(self, time_s: float = 1e-3, **changes) -> ResultRecord:
        fields = dict(config={"local": [4, 4], "order": [1, 0], "unroll": 2}, time_s=time_s,
                      spread=0.02, gflops=2.0 / time_s, gbps=0.5 / time_s,
                      default_time_s=4e-3, speedup=4e-3 / time_s, trials=32, sampler="tpe",
                      tunesearch_version="0.1.0", host="test-host")
        fields.update(changes)
        return ResultRecord(**fields)

    def trial(self, number: int, time_s: float | None = 1e-3,
              error: str | None = None) -> TrialRecord:
        return TrialRecord(number=number, config={"unroll": number}, time_s=time_s, error=error)


@pytest.fixture
def make() -> Make:
    return Make()
