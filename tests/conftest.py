"""Shared test fixtures."""
from __future__ import annotations

import contextlib
import os
import signal

import pytest

from tests.pg_server import NoPostgres, throwaway_postgres

PG_URL_ENV = "TUNESEARCH_TEST_PG_URL"


def pytest_configure(config):
    """Ctrl-C as a terminal delivers it, also where the tests were started as a background job
    (`cmd &` in a script starts it with SIGINT ignored, and Python then keeps it ignored, as
    tunesearch does): the Ctrl-C tests send it to this process and to commands started from
    it, which get Python's own handler back on exec."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def postgres_url():
    """A SQLAlchemy URL of a PostgreSQL server for this test session.

    `$TUNESEARCH_TEST_PG_URL` if set; otherwise a throwaway server (tests/pg_server.py), stopped
    and removed at the end.
    """
    if os.environ.get(PG_URL_ENV):
        yield os.environ[PG_URL_ENV]
        return
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(throwaway_postgres(max_connections=60))
        except NoPostgres as err:
            pytest.skip(f"{err}; install PostgreSQL or set {PG_URL_ENV}")
        yield url


# the count of generated fuzz cases, summed over xdist workers, in the run's summary
from tests.fuzz.counting import (  # noqa: E402,F401
    pytest_sessionfinish, pytest_terminal_summary, pytest_testnodedown,
)

