import pytest

from ragassay.store import Store


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "r.duckdb") as st:
        yield st
