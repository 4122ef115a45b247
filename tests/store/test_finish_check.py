"""finish_run skips the full uniqueness scan only when the writer's own bookkeeping proves the run clean:
the run was created by this Store and holds exactly the rows its writes account for. Every other case -
a second writer, a raw INSERT or DELETE behind the writer, a resumed run - still gets the SQL check."""

from __future__ import annotations

import numpy as np
import pytest

from ragassay.errors import SchemaError
from ragassay.store import RunRecord, Store

DUP = r"key\(s\) \(query_id, trial, metric\) are stored more than once"


def _rows(keys, values):
    return {"query_id": [k[0] for k in keys], "trial": [k[1] for k in keys], "metric": [k[2] for k in keys],
            "value": list(values)}


def _counts(store, run):
    """(rows, distinct keys) of the run, by exact grouping: the oracle for 'no key twice'."""
    return store.connection.execute(
        "SELECT count(*), count(DISTINCT (query_id, trial, metric)) FROM results WHERE run_id = ?", [run]
    ).fetchone()


def _random_batches(store, run, rng, n_batches=12):
    for _ in range(n_batches):
        keys = sorted({(f"q{rng.integers(0, 40)}", int(rng.integers(0, 2)), str(rng.choice(["rr", "ap", "p@5"])))
                       for _ in range(int(rng.integers(1, 30)))})
        store.write_batch(run, _rows(keys, rng.random(len(keys))))


def test_the_proof_holds_exactly_for_a_run_this_store_created_and_alone_wrote(tmp_path):
    rng = np.random.default_rng(3)
    with Store.open(tmp_path / "f.duckdb") as store:
        run = store.create_run(RunRecord(name="r"))
        _random_batches(store, run, rng)  # overlapping batches: many go down the delete-then-append path
        n, k = _counts(store, run)
        assert n == k and store._own_rows[run] == n
        assert store._session_proves_unique(run)
        store.finish_run(run)
        assert store.get_run(run).status == "complete"
        # a resumed run may hold rows from before this session: no proof, the full check runs
        store.resume_run(run)
        _random_batches(store, run, rng, 3)
        assert not store._session_proves_unique(run)
        store.finish_run(run)
        assert _counts(store, run)[0] == _counts(store, run)[1]


def test_a_duplicate_inserted_behind_the_writer_of_a_fresh_run_is_caught(tmp_path):
    with Store.open(tmp_path / "f.duckdb") as store:
        run = store.create_run(RunRecord(name="r"))
        store.write_batch(run, _rows([(f"q{i}", 0, m) for i in range(20) for m in ("rr", "ap")], [0.5] * 40))
        store.connection.execute("INSERT INTO results SELECT * FROM results WHERE run_id = ? AND query_id = 'q4' "
                                 "AND metric = 'rr'", [run])
        store.write_batch(run, _rows([("q4", 0, "ap"), ("q30", 0, "rr")], [0.1, 0.2]))
        assert not store._session_proves_unique(run)
        with pytest.raises(SchemaError, match=DUP + r".*\('q4', 0, 'rr'\) 2 times"):
            store.finish_run(run)
        assert store.get_run(run).status == "running"


def test_a_raw_delete_behind_the_writer_is_checked_in_full_and_passes(tmp_path):
    with Store.open(tmp_path / "f.duckdb") as store:
        run = store.create_run(RunRecord(name="r"))
        store.write_batch(run, _rows([(f"q{i}", 0, "rr") for i in range(10)], [0.5] * 10))
        store.connection.execute("DELETE FROM results WHERE run_id = ? AND query_id = 'q3'", [run])
        assert not store._session_proves_unique(run)
        store.finish_run(run)
        assert store.get_run(run).status == "complete" and _counts(store, run) == (9, 9)


def test_a_second_writer_is_caught_whichever_store_created_the_run(tmp_path):
    path = tmp_path / "f.duckdb"
    with Store.open(path) as a, Store.open(path) as b:
        run = a.create_run(RunRecord(name="r"))
        a.write_batch(run, _rows([("q0", 0, "rr"), ("q1", 0, "rr")], [0.1, 0.2]))
        b.write_batch(run, _rows([("q1", 0, "rr"), ("q2", 0, "rr")], [0.3, 0.4]))  # b loaded a's pairs: replaces q1
        assert _counts(a, run) == (3, 3)
        b.write_batch(run, _rows([("q3", 0, "rr")], [0.5]))
        a.write_batch(run, _rows([("q3", 0, "rr")], [0.6]))  # a never stored q3: a plain append, a duplicate
        assert _counts(a, run) == (5, 4)
        assert not a._session_proves_unique(run)
        for writer in (b, a):  # b has no proof for a run it did not create; a's count is off
            with pytest.raises(SchemaError, match=DUP + r".*\('q3', 0, 'rr'\) 2 times"):
                writer.finish_run(run)


def test_a_reopened_store_checks_a_crashed_run_in_full(tmp_path):
    path = tmp_path / "f.duckdb"
    with Store.open(path) as a, Store.open(path) as b:
        run = a.create_run(RunRecord(name="r"))
        b.write_batch(run, _rows([("q0", 0, "rr")], [0.1]))
        a.write_batch(run, _rows([("q0", 0, "rr")], [0.2]))
    with Store.open(path) as store:  # the two writers died; a new session resumes the run
        store.resume_run(run)
        store.write_batch(run, _rows([("q1", 0, "rr")], [0.3]))
        with pytest.raises(SchemaError, match=DUP + r".*\('q0', 0, 'rr'\) 2 times"):
            store.finish_run(run)
