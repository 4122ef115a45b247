"""Fixtures for judge tests: the local fake provider server (started per test, always stopped) and a store."""

import pytest
from tests.judges.fake_provider import FakeProvider

from ragassay.store import RunRecord, Store


@pytest.fixture
def fake_provider():
    server = FakeProvider(lifetime_s=120.0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "judge.duckdb") as s:
        yield s


@pytest.fixture
def run_id(store):
    return store.create_run(RunRecord(name="judged"))
