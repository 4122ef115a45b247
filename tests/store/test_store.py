import math

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ragassay.errors import InputError, SchemaError
from ragassay.store import SCHEMA_VERSION, RunRecord, Store, config_digest, is_ulid, new_ulid


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "r.duckdb") as s:
        yield s


def _rows(qids, metrics, values, trials=None, strata=None):
    cols = {"query_id": qids, "metric": metrics, "value": values}
    if trials is not None:
        cols["trial"] = trials
    if strata is not None:
        cols["stratum"] = strata
    return cols


def _count(store, sql, params=()):
    return store.connection.execute(sql, list(params)).fetchall()[0][0]


def test_create_run_fills_id_time_status_and_config_sha(store):
    cfg = {"retriever": {"k": 10, "fusion": "rrf"}, "chunker": "sentence"}
    run_id = store.create_run(RunRecord(name="base", config=cfg, hit_rule="any_overlap", trials=2))
    rec = store.get_run(run_id)
    assert is_ulid(run_id) and rec.run_id == run_id
    assert rec.status == "running" and rec.finished_at is None and rec.created_at is not None
    assert rec.config == cfg
    assert rec.config_sha == config_digest(cfg) == config_digest({"chunker": "sentence", **cfg})
    assert rec.hit_rule == "any_overlap" and rec.trials == 2 and rec.source == "pipeline"


def test_rewriting_a_key_keeps_one_row_and_the_new_value_wins(store):
    run = store.create_run(RunRecord(name="r"))
    store.write_batch(run, _rows(["q1", "q1", "q2"], ["ndcg@10", "recall@10", "ndcg@10"], [0.5, 0.25, 0.75]))
    store.write_batch(run, _rows(["q1"], ["ndcg@10"], [0.9]), done=[("q1", 0, "done", None)])
    store.write_batch(run, _rows(["q1"], ["ndcg@10"], [0.9]), done=[("q1", 0, "done", None)])
    got = store.results(run).to_pylist()
    assert [(r["query_id"], r["metric"], r["value"]) for r in got] == [
        ("q1", "ndcg@10", 0.9),
        ("q1", "recall@10", 0.25),
        ("q2", "ndcg@10", 0.75),
    ]
    assert _count(store, "SELECT count(*) FROM query_status WHERE run_id = ?", [run]) == 1


def test_duplicate_key_inside_one_batch_is_rejected_and_nothing_lands(store):
    run = store.create_run(RunRecord(name="r"))
    with pytest.raises(SchemaError, match="appear more than once"):
        store.write_batch(run, _rows(["q1", "q1"], ["rr", "rr"], [0.1, 0.2]), done=[("q1", 0, "done", None)])
    assert store.results(run).num_rows == 0 and store.done_keys(run) == set()


class _FailOn:
    """Connection proxy that raises when a statement contains `needle` (a crash inside the transaction)."""

    def __init__(self, con, needle):
        self._con, self._needle = con, needle

    def execute(self, sql, *args, **kw):
        if self._needle in sql:
            raise RuntimeError("injected failure")
        return self._con.execute(sql, *args, **kw)

    def __getattr__(self, name):
        return getattr(self._con, name)


def test_failure_after_result_rows_rolls_back_the_whole_batch(store):
    run = store.create_run(RunRecord(name="r"))
    store.write_batch(run, _rows(["q0"], ["rr"], [1.0]), done=[("q0", 0, "done", None)])
    real = store._con
    store._con = _FailOn(real, "INTO query_status")
    with pytest.raises(RuntimeError, match="injected"):
        store.write_batch(run, _rows(["q1", "q1"], ["rr", "ap"], [0.5, 0.4]), done=[("q1", 0, "done", None)])
    # Also the replace path: existing keys re-written, then the failure — the old values must survive.
    with pytest.raises(RuntimeError, match="injected"):
        store.write_batch(run, _rows(["q0"], ["rr"], [0.0]), done=[("q0", 0, "done", None)])
    store._con = real
    assert [(r["query_id"], r["value"]) for r in store.results(run).to_pylist()] == [("q0", 1.0)]
    assert store.done_keys(run) == {("q0", 0)}
    # The connection is usable afterwards.
    store.write_batch(run, _rows(["q1"], ["rr"], [0.5]), done=[("q1", 0, "done", None)])
    assert store.done_keys(run) == {("q0", 0), ("q1", 0)}


def test_nan_and_null_are_stored_as_undefined_and_come_back_as_nan(store):
    run = store.create_run(RunRecord(name="r"))
    values = pa.array([0.5, float("nan"), None, 0.0], pa.float64())
    store.write_batch(run, _rows(["a", "b", "c", "d"], ["recall@5"] * 4, values))
    got = store.results(run)
    assert got["defined"].to_pylist() == [True, False, False, True]
    assert got["value"].to_pylist() == [0.5, None, None, 0.0]  # zero stays a defined zero
    assert _count(store, "SELECT count(*) FROM results WHERE NOT defined") == 2
    wide = store.results_wide(run, ["recall@5"])
    np.testing.assert_array_equal(np.isnan(wide.values[:, 0]), [False, True, True, False])
    assert wide.values[0, 0] == 0.5 and wide.values[3, 0] == 0.0


def test_results_wide_pivots_a_hand_case(store):
    run = store.create_run(RunRecord(name="r"))
    # Deliberately unsorted input, one missing cell (q2 trial 1 has no ap) and one undefined value.
    store.write_batch(
        run,
        _rows(
            ["q2", "q1", "q2", "q1", "q1", "q2", "q1", "q10"],
            ["rr", "rr", "rr", "ap", "ap", "ap", "rr", "rr"],
            [0.2, 1.0, 0.3, 0.5, float("nan"), 0.1, 0.0, 0.7],
            trials=[1, 0, 0, 0, 1, 0, 1, 0],
            strata=["hard", "easy", "hard", "easy", "easy", "hard", "easy", "easy"],
        ),
    )
    wide = store.results_wide(run, ["ap", "rr"])
    assert wide.query_ids.tolist() == ["q1", "q1", "q10", "q2", "q2"]
    assert wide.trials.tolist() == [0, 1, 0, 0, 1]
    assert wide.strata.tolist() == ["easy", "easy", "easy", "hard", "hard"]
    expected = np.array([[0.5, 1.0], [np.nan, 0.0], [np.nan, 0.7], [0.1, 0.3], [np.nan, 0.2]])
    np.testing.assert_array_equal(wide.values, expected)
    qid, trial, strata, values = wide  # unpacks as the 4-tuple
    np.testing.assert_array_equal(store.results_wide(run, ["rr"]).values[:, 0], values[:, 1])
    with pytest.raises(InputError, match=r"no rows for metric\(s\) \['ndcg@10'\]"):
        store.results_wide(run, ["ap", "ndcg@10"])


def test_results_wide_rejects_a_query_with_two_strata(store):
    run = store.create_run(RunRecord(name="r"))
    store.write_batch(run, _rows(["q1", "q1"], ["rr", "ap"], [1.0, 0.5], strata=["easy", "hard"]))
    with pytest.raises(SchemaError, match="different strata"):
        store.results_wide(run, ["rr"])


def test_get_run_by_prefix_by_name_latest_and_ambiguity_lists_candidates(store):
    import time

    t = int(time.time() * 1000)
    a = store.create_run(RunRecord(name="baseline", run_id=new_ulid(now_ms=t)))
    a2 = store.create_run(RunRecord(name="x", run_id=new_ulid(now_ms=t)))
    b = store.create_run(RunRecord(name="baseline", run_id=new_ulid(now_ms=t + 1)))
    c = store.create_run(RunRecord(name="other", run_id=new_ulid(now_ms=t + 86_400_000)))
    assert store.get_run("baseline").run_id == b  # latest with that name
    assert store.get_run(c[:9].lower()).run_id == c  # prefix, case-insensitive
    assert store.get_run(a).run_id == a
    common = a[:10]  # the 48-bit timestamp: shared by a and a2 only
    with pytest.raises(InputError) as err:
        store.get_run(common)
    msg = str(err.value)
    assert "ambiguous" in msg and "prefixes 2 runs" in msg and a in msg and a2 in msg and b not in msg
    with pytest.raises(InputError, match="no run matches 'nope'") as err:
        store.get_run("nope")
    assert c in str(err.value)  # recent runs are listed
    assert [r.run_id for r in store.list_runs()] == sorted([a, a2, b, c])


def test_finish_and_resume_change_status_and_writes_to_a_finished_run_are_refused(store):
    run = store.create_run(RunRecord(name="r"))
    store.write_batch(run, _rows(["q1", "q2"], ["rr", "rr"], [1.0, 0.5]), done=[("q1", 0, "done", None)])
    store.write_batch(run, _rows([], [], pa.array([], pa.float64())), done=[("q3", 0, "error", "timeout")])
    store.finish_run(run)
    rec = store.get_run(run)
    assert rec.status == "complete" and rec.finished_at >= rec.created_at and rec.n_queries == 2
    with pytest.raises(InputError, match="frozen"):
        store.write_batch(run, _rows(["q9"], ["rr"], [1.0]))
    assert store.resume_run(run) == {("q1", 0)}  # the errored query is retried, not skipped
    assert store.get_run(run).status == "running"
    status = store.query_status(run).to_pylist()
    assert [(r["query_id"], r["status"], r["error"]) for r in status] == [
        ("q1", "done", None),
        ("q3", "error", "timeout"),
    ]


def test_parquet_export_round_trips(store, tmp_path):
    r1 = store.create_run(RunRecord(name="a", config={"k": 5}, extra={"note": "x"}))
    r2 = store.create_run(RunRecord(name="b"))
    store.write_batch(
        r1,
        {
            "query_id": ["q1", "q1", "q2"],
            "trial": [0, 1, 0],
            "metric": ["ndcg@10"] * 3,
            "value": [0.5, float("nan"), 1.0],
            "stratum": ["s", "s", "t"],
            "judged_fraction": [1.0, 0.5, None],
            "latency_ms": [12.5, 13.0, 9.0],
            "tokens_in": [100, 120, 90],
            "tokens_out": [20, 25, 18],
            "cost": [0.001, 0.002, 0.001],
            "trace_id": ["t1", "t2", "t3"],
        },
        done=[("q1", 0, "done", None), ("q1", 1, "done", None), ("q2", 0, "done", None)],
    )
    store.write_batch(r2, _rows(["q1"], ["ndcg@10"], [0.25]))
    paths = store.export_parquet(tmp_path / "export", run_ids=[r1])
    assert set(paths) == {"runs", "results", "query_status", "judge_calls"}
    for table, ours in (("results", store.results(r1)), ("query_status", store.query_status(r1))):
        back = pq.read_table(paths[table])
        # Parquet marks NOT NULL columns as required; names, types and values must match exactly.
        assert [(f.name, f.type) for f in back.schema] == [(f.name, f.type) for f in ours.schema]
        assert back.cast(ours.schema).equals(ours)
    assert [f.name for f in pq.read_table(paths["results"]).schema if not f.nullable] == [
        "run_id",
        "query_id",
        "trial",
        "metric",
        "defined",
    ]
    runs = pq.read_table(paths["runs"])
    assert runs["run_id"].to_pylist() == [r1] and runs["name"].to_pylist() == ["a"]
    everything = store.export_parquet(tmp_path / "all")
    assert pq.read_table(everything["results"]).num_rows == 4
    assert pq.read_table(everything["runs"])["run_id"].to_pylist() == [r1, r2]


def test_bad_rows_raise_schema_errors_naming_the_problem(store):
    run = store.create_run(RunRecord(name="r"))
    with pytest.raises(SchemaError, match=r"unknown result column\(s\) \['score'\]"):
        store.write_batch(run, {"query_id": ["q"], "metric": ["rr"], "score": [1.0]})
    with pytest.raises(SchemaError, match=r"lack required column\(s\) \['value'\]"):
        store.write_batch(run, {"query_id": ["q"], "metric": ["rr"]})
    with pytest.raises(SchemaError, match="'query_id' is null in 1 row"):
        store.write_batch(run, _rows(["q", None], ["rr", "rr"], [1.0, 1.0]))
    with pytest.raises(SchemaError, match="infinite"):
        store.write_batch(run, _rows(["q"], ["rr"], [math.inf]))
    with pytest.raises(SchemaError, match="judged_fraction"):
        store.write_batch(run, {**_rows(["q"], ["rr"], [1.0]), "judged_fraction": [1.5]})
    with pytest.raises(SchemaError, match="'tokens_in' cannot be read"):
        store.write_batch(run, {**_rows(["q"], ["rr"], [1.0]), "tokens_in": [2**40]})
    with pytest.raises(SchemaError, match=r"'value' cannot be read as double \(Failed to parse"):
        store.write_batch(run, {"query_id": ["q"], "metric": ["rr"], "value": ["abc"]})
    with pytest.raises(SchemaError, match=r"'value' cannot be read as double \(Unsupported cast"):
        store.write_batch(run, {"query_id": ["q"], "metric": ["rr"], "value": [[1.0]]})
    with pytest.raises(SchemaError, match="status 'ok'"):
        store.write_batch(run, _rows(["q"], ["rr"], [1.0]), done=[("q", 0, "ok", None)])
    with pytest.raises(InputError, match="not in"):
        store.write_batch(new_ulid(), _rows(["q"], ["rr"], [1.0]))
    assert store.results(run).num_rows == 0


def test_schema_version_is_checked_on_open(tmp_path):
    path = tmp_path / "r.duckdb"
    Store.open(path).close()
    con = duckdb.connect(str(path))
    assert con.execute("SELECT version FROM schema_info").fetchall() == [(SCHEMA_VERSION,)]
    con.execute("UPDATE schema_info SET version = ?", [SCHEMA_VERSION + 1])
    con.close()
    with pytest.raises(SchemaError, match=f"schema version {SCHEMA_VERSION + 1}.*newer ragassay"):
        Store.open(path)
    with pytest.raises(SchemaError, match="newer ragassay"):
        Store.open(path, read_only=True)


def test_foreign_duckdb_file_and_missing_file_are_refused(tmp_path):
    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE t (x INTEGER)")
    con.close()
    with pytest.raises(SchemaError, match="not a ragassay results store"):
        Store.open(other)
    with pytest.raises(InputError, match="no results store here"):
        Store.open(tmp_path / "absent.duckdb", read_only=True)
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"not a database" * 100)
    with pytest.raises(SchemaError):
        Store.open(junk)


def test_read_only_store_reads_and_refuses_writes(tmp_path):
    path = tmp_path / "r.duckdb"
    with Store.open(path) as s:
        run = s.create_run(RunRecord(name="r"))
        s.write_batch(run, _rows(["q"], ["rr"], [0.5]))
    with Store.open(path, read_only=True) as s:
        assert s.results_wide("r", ["rr"]).values.tolist() == [[0.5]]
        with pytest.raises(InputError, match="read-only"):
            s.write_batch(run, _rows(["q"], ["rr"], [0.5]))
