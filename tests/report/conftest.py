"""Fixtures for the report tests; the data builder lives in report_fixtures.py so tests can import it."""

from __future__ import annotations

import pytest
from report_fixtures import make_data


@pytest.fixture
def data() -> dict:
    return make_data()


@pytest.fixture
def hostile_data() -> dict:
    return make_data(hostile=True)
