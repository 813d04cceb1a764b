"""Fixtures of the search tests."""
from __future__ import annotations

import pytest

from tests.search import faulty


@pytest.fixture(scope="module")
def faulty_device():
    """The name of the fault-planting CPU device, registered for one test module only (so that
    suites which run over every registered device never meet it)."""
    with faulty.registered() as name:
        yield name
