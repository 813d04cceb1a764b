"""How many generated cases the fuzz tests tried, summed over the xdist workers and printed at
the end of the run ("fuzz: N generated cases tried"). The hooks are imported by tests/conftest.py,
which the xdist controller loads (it collects no test, so it never loads tests/fuzz/conftest.py).
"""
from __future__ import annotations

import pytest

_tried = [0]  # cases tried in this process; on the controller, also those of finished workers
_KEY = "tunesearch_fuzz_cases"


def tried() -> None:
    """Count one generated case."""
    _tried[0] += 1


def pytest_sessionfinish(session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the count to the controller
        workeroutput[_KEY] = _tried[0]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    _tried[0] += getattr(node, "workeroutput", {}).get(_KEY, 0)


def pytest_terminal_summary(terminalreporter) -> None:
    if _tried[0]:
        terminalreporter.write_line(f"fuzz: {_tried[0]} generated cases tried")
