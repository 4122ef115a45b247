"""Bad results-store paths at every command that opens a store: one clean error, nothing created or lost."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.malformed.conftest import tree_digest


def _setup(tmp_path: Path) -> Path:
    (tmp_path / "notdb.duckdb").write_text("these are my notes, not a database\n")
    (tmp_path / "adir.duckdb").mkdir()
    (tmp_path / "adir.duckdb" / "keep.txt").write_text("keep me\n")
    (tmp_path / "empty.duckdb").write_bytes(b"")
    return tmp_path


STORES = {
    "text file": ("notdb.duckdb", "not a readable DuckDB results store"),
    "directory": ("adir.duckdb", "not a readable DuckDB results store"),
    "empty file": ("empty.duckdb", "results store"),
    "under a file": ("notdb.duckdb/sub.duckdb", "no results store here"),
    "missing parent": ("nowhere/x.duckdb", "no results store here"),
}

READERS = {
    "runs": ["runs"],
    "compare": ["compare", "a", "b"],
    "gate": ["gate", "a", "b"],
    "report": ["report", "a", "-o", "out"],
    "export": ["export", "-o", "out"],
}


@pytest.mark.parametrize("store", list(STORES), ids=list(STORES))
@pytest.mark.parametrize("command", list(READERS), ids=list(READERS))
def test_reading_commands_refuse_a_bad_store_cleanly(cli, tmp_path, monkeypatch, store, command):
    monkeypatch.chdir(_setup(tmp_path))
    before = tree_digest(tmp_path)
    rel, fragment = STORES[store]
    res = cli(*READERS[command], "--store", rel)
    res.assert_clean_error(rel, fragment)
    assert tree_digest(tmp_path) == before  # nothing written, nothing lost
    assert not (tmp_path / "out").exists()
