"""The unkeyed results table (schema version 2): appends without a DuckDB index, replacement and duplicate
detection kept by the writer, one uniqueness check per run at finish, and version-1 stores still usable."""

import duckdb
import numpy as np
import pytest

from ragassay.errors import SchemaError
from ragassay.store import SCHEMA_VERSION, RunRecord, Store

# The DDL of the results store as of schema version 1 (before this change), copied verbatim so the test
# does not depend on the code under test to build an old store.
V1_DDL = """
CREATE TABLE schema_info (version INTEGER NOT NULL, created_at TIMESTAMP NOT NULL, ragassay_version VARCHAR);
CREATE TABLE runs (
    run_id VARCHAR PRIMARY KEY, name VARCHAR NOT NULL,
    status VARCHAR NOT NULL CHECK (status IN ('running', 'complete', 'failed')),
    created_at TIMESTAMP NOT NULL, finished_at TIMESTAMP, git_sha VARCHAR, dataset_version VARCHAR,
    corpus_digest VARCHAR, golden_sha256 VARCHAR, config JSON, config_sha VARCHAR, metric_version VARCHAR,
    judge_model VARCHAR, rubric_sha VARCHAR, gain VARCHAR, relevance_threshold INTEGER, hit_rule VARCHAR,
    ties VARCHAR, trials INTEGER, n_queries INTEGER, source VARCHAR NOT NULL, ragassay_version VARCHAR,
    extra JSON
);
CREATE TABLE results (
    run_id VARCHAR NOT NULL, query_id VARCHAR NOT NULL, trial INTEGER NOT NULL, metric VARCHAR NOT NULL,
    value DOUBLE, defined BOOLEAN NOT NULL, stratum VARCHAR, judged_fraction DOUBLE, latency_ms DOUBLE,
    tokens_in INTEGER, tokens_out INTEGER, cost DOUBLE, trace_id VARCHAR,
    PRIMARY KEY (run_id, query_id, trial, metric)
);
CREATE TABLE query_status (
    run_id VARCHAR NOT NULL, query_id VARCHAR NOT NULL, trial INTEGER NOT NULL,
    status VARCHAR NOT NULL CHECK (status IN ('done', 'error')), error VARCHAR, written_at TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, query_id, trial)
);
"""
V1_RUN = "01JAAAAAAAAAAAAAAAAAAAAAAA"


def _rows(keys, values):
    return {"query_id": [k[0] for k in keys], "trial": [k[1] for k in keys], "metric": [k[2] for k in keys],
            "value": list(values)}


def _stored(store, run):
    return {(r["query_id"], r["trial"], r["metric"]): r["value"] for r in store.results(run).to_pylist()}


def _n_rows(store, run):
    return store.connection.execute("SELECT count(*) FROM results WHERE run_id = ?", [run]).fetchone()[0]


def test_new_store_is_version_2_and_its_results_table_has_no_key_or_index(tmp_path):
    with Store.open(tmp_path / "r.duckdb") as store:
        con = store.connection
        assert SCHEMA_VERSION == 2
        assert con.execute("SELECT version FROM schema_info").fetchall() == [(2,)]
        kinds = con.execute("SELECT table_name, constraint_type FROM duckdb_constraints() "
                            "WHERE constraint_type IN ('PRIMARY KEY', 'UNIQUE')").fetchall()
        assert ("results", "PRIMARY KEY") not in kinds and ("query_status", "PRIMARY KEY") in kinds
        assert con.execute("SELECT count(*) FROM duckdb_indexes() WHERE table_name = 'results'").fetchone() == (0,)


def test_random_overlapping_batches_across_a_reopen_end_as_last_write_wins(tmp_path):
    """Oracle: a dict updated batch by batch. Keys repeat across batches (replacement), across a close and
    reopen (the writer's memory of stored pairs is rebuilt from the table) and across a resume."""
    rng = np.random.default_rng(7)
    path = tmp_path / "r.duckdb"
    universe = [(f"q{q:03d}", t, f"m{m}") for q in range(60) for t in range(2) for m in range(4)]
    expected: dict = {}

    def write_some(store, run, n_batches):
        for _ in range(n_batches):
            pick = rng.choice(len(universe), size=int(rng.integers(1, 40)), replace=False)
            keys = [universe[i] for i in pick]
            values = np.round(rng.random(len(keys)), 6)
            done = sorted({(q, t, "done", None) for q, t, _ in keys})
            store.write_batch(run, _rows(keys, values), done=done)
            expected.update(zip(keys, values.tolist(), strict=True))

    with Store.open(path) as store:
        run = store.create_run(RunRecord(name="r"))
        write_some(store, run, 12)
        other = store.create_run(RunRecord(name="other"))  # same keys in another run never collide
        store.write_batch(other, _rows(universe[:10], [1.0] * 10))
    with Store.open(path) as store:
        write_some(store, run, 12)
        store.finish_run(run)
        store.resume_run(run)
        write_some(store, run, 6)
        store.finish_run(run)
        assert _stored(store, run) == expected
        assert _n_rows(store, run) == len(expected)
        assert _n_rows(store, other) == 10
        assert store.done_keys(run) == {(q, t) for q, t, _ in expected}


def test_duplicate_key_inside_one_batch_is_rejected_even_beside_fresh_pairs(tmp_path):
    with Store.open(tmp_path / "r.duckdb") as store:
        run = store.create_run(RunRecord(name="r"))
        store.write_batch(run, _rows([("q0", 0, "rr")], [0.5]))
        keys = [("q1", 0, "rr"), ("q1", 0, "ap"), ("q2", 1, "rr"), ("q2", 1, "rr")]
        with pytest.raises(SchemaError, match=r"1 key\(s\).*appear more than once.*'q2'"):
            store.write_batch(run, _rows(keys, [0.1, 0.2, 0.3, 0.4]), done=[("q2", 1, "done", None)])
        assert _stored(store, run) == {("q0", 0, "rr"): 0.5} and store.done_keys(run) == set()
        # The refused batch left no trace in the writer's memory: the same pairs then append normally.
        store.write_batch(run, _rows(keys[:3], [0.1, 0.2, 0.3]))
        store.finish_run(run)
        assert _n_rows(store, run) == 4


def test_a_pair_mistaken_for_stored_takes_the_exact_replace_path_and_loses_nothing(tmp_path):
    """What a 64-bit hash collision does: the batch deletes the rows it would replace (none) and appends."""
    with Store.open(tmp_path / "r.duckdb") as store:
        run = store.create_run(RunRecord(name="r"))
        store.write_batch(run, _rows([("q0", 0, "rr"), ("q0", 0, "ap")], [0.5, 0.25]))
        h = store.connection.execute("SELECT hash('q1', 0::INTEGER)").fetchone()[0]
        store._pairs[run] = np.sort(np.append(store._pairs[run], np.uint64(h)))
        store.write_batch(run, _rows([("q1", 0, "rr")], [0.75]))
        store.finish_run(run)
        assert _stored(store, run) == {("q0", 0, "rr"): 0.5, ("q0", 0, "ap"): 0.25, ("q1", 0, "rr"): 0.75}


def test_two_writers_of_one_run_are_caught_when_the_run_finishes(tmp_path):
    path = tmp_path / "r.duckdb"
    with Store.open(path) as a, Store.open(path) as b:
        run = a.create_run(RunRecord(name="r"))
        b.write_batch(run, _rows([("q0", 0, "rr"), ("q0", 0, "ap")], [0.5, 0.25]))
        a.write_batch(run, _rows([("q0", 0, "rr"), ("q1", 0, "rr")], [0.1, 0.2]))  # a never saw b's rows
        with pytest.raises(SchemaError, match=r"1 key\(s\).*stored more than once.*'q0', 0, 'rr'\) 2 times"):
            a.finish_run(run)
        assert a.get_run(run).status == "running"


def test_finish_passes_a_clean_run_and_refuses_a_duplicate_inserted_behind_the_writer(tmp_path):
    with Store.open(tmp_path / "r.duckdb") as store:
        run = store.create_run(RunRecord(name="r"))
        store.write_batch(run, _rows([(f"q{i}", 0, m) for i in range(50) for m in ("rr", "ap")], [0.5] * 100))
        store.finish_run(run)
        assert store.get_run(run).status == "complete" and store.get_run(run).n_queries == 50
        store.resume_run(run)
        store.connection.execute("INSERT INTO results SELECT * FROM results WHERE run_id = ? AND query_id IN "
                                 "('q3', 'q7') AND metric = 'ap'", [run])
        with pytest.raises(SchemaError, match=r"2 key\(s\).*'q3', 0, 'ap'\) 2 times"):
            store.finish_run(run, "failed")


def _v1_store(path):
    con = duckdb.connect(str(path))
    con.execute(V1_DDL)
    con.execute("INSERT INTO schema_info VALUES (1, now()::TIMESTAMP, '0.1.0')")
    con.execute("INSERT INTO runs (run_id, name, status, created_at, source, trials) "
                "VALUES (?, 'old', 'complete', now()::TIMESTAMP, 'pipeline', 1)", [V1_RUN])
    con.execute("INSERT INTO results (run_id, query_id, trial, metric, value, defined, stratum) VALUES "
                "(?, 'q1', 0, 'rr', 0.5, true, 's'), (?, 'q1', 0, 'ap', NULL, false, 's'), "
                "(?, 'q2', 0, 'rr', 1.0, true, 't')", [V1_RUN] * 3)
    con.execute("INSERT INTO query_status VALUES (?, 'q1', 0, 'done', NULL, now()::TIMESTAMP), "
                "(?, 'q2', 0, 'done', NULL, now()::TIMESTAMP)", [V1_RUN] * 2)
    con.close()


def test_a_version_1_store_opens_read_only_and_reads_as_before(tmp_path):
    path = tmp_path / "old.duckdb"
    _v1_store(path)
    with Store.open(path, read_only=True) as store:
        assert store.get_run("old").run_id == V1_RUN
        assert _stored(store, V1_RUN) == {("q1", 0, "ap"): None, ("q1", 0, "rr"): 0.5, ("q2", 0, "rr"): 1.0}
        wide = store.results_wide(V1_RUN, ["rr", "ap"])
        assert wide.query_ids.tolist() == ["q1", "q2"] and wide.strata.tolist() == ["s", "t"]
        np.testing.assert_array_equal(wide.values, [[0.5, np.nan], [1.0, np.nan]])


def test_a_version_1_store_is_written_through_its_key_and_stays_version_1(tmp_path):
    path = tmp_path / "old.duckdb"
    _v1_store(path)
    with Store.open(path) as store:
        store.resume_run(V1_RUN)
        store.write_batch(V1_RUN, _rows([("q1", 0, "rr"), ("q3", 0, "rr")], [0.9, 0.3]),
                          done=[("q1", 0, "done", None), ("q3", 0, "done", None)])
        with pytest.raises(SchemaError, match="appear more than once"):
            store.write_batch(V1_RUN, _rows([("q2", 0, "rr"), ("q2", 0, "rr")], [0.0, 0.1]))
        store.finish_run(V1_RUN)
        assert _stored(store, V1_RUN) == {("q1", 0, "ap"): None, ("q1", 0, "rr"): 0.9, ("q2", 0, "rr"): 1.0,
                                          ("q3", 0, "rr"): 0.3}
        assert store.done_keys(V1_RUN) == {("q1", 0), ("q2", 0), ("q3", 0)}
        new = store.create_run(RunRecord(name="new"))
        store.write_batch(new, _rows([("q1", 0, "rr")], [0.4]))
        store.finish_run(new)
        con = store.connection
        assert con.execute("SELECT version FROM schema_info").fetchall() == [(1,)]
        assert con.execute("SELECT count(*) FROM duckdb_constraints() WHERE table_name = 'results' "
                           "AND constraint_type = 'PRIMARY KEY'").fetchone() == (1,)


def test_doctor_reports_the_stores_own_schema_version_not_the_newest(tmp_path):
    from ragassay.cli.doctor import store_checks

    old, new = tmp_path / "old.duckdb", tmp_path / "new.duckdb"
    _v1_store(old)
    Store.open(new).close()
    assert store_checks(old)[0].detail == f"{old}: schema version 1, 1 run(s)"
    assert store_checks(new)[0].detail == f"{new}: schema version 2, 0 run(s)"


def test_memory_limited_sets_duckdbs_limit_inside_the_block_and_restores_it(tmp_path):
    with Store.open(tmp_path / "s.duckdb") as st:
        setting = "SELECT current_setting('memory_limit')"
        before = st.connection.execute(setting).fetchall()[0][0]
        with st.memory_limited("300MB"):
            inside = st.connection.execute(setting).fetchall()[0][0]
        assert st.connection.execute(setting).fetchall()[0][0] == before
        with pytest.raises(RuntimeError), st.memory_limited("300MB"):
            raise RuntimeError("boom")
        assert st.connection.execute(setting).fetchall()[0][0] == before
    assert inside == "286.1 MiB"  # 300 MB as DuckDB prints it
