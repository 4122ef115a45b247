"""The store's judge_calls table: validation, the cache lookup, and stores written before the table existed."""

import duckdb
import pytest

from ragassay.errors import InputError, SchemaError
from ragassay.store import RunRecord, Store


def _call(run_id, item="support:0", sha="a" * 64, outcome="ok", cache_hit=False, **kw):
    return {"run_id": run_id, "query_id": "q1", "trial": 0, "item": item, "judge": "support",
            "request_sha": sha, "provider": "openai", "model": "m", "outcome": outcome, "attempts": 1,
            "cache_hit": cache_hit, "verdict": {"label": "supported"}, "cost": 0.001, **kw}


def test_round_trip_and_a_paid_call_is_never_replaced(store, run_id):
    assert store.record_judge_calls([_call(run_id), _call(run_id, item="support:1", outcome="refused")]) == 2
    # the same request again (a later cache hit, or a re-run's malformed answer) leaves the paid row alone
    store.record_judge_calls([_call(run_id, outcome="malformed", reason="not JSON")])
    store.record_judge_calls([_call(run_id, cache_hit=True, cost=0.0, attempts=0)])
    rows = store.judge_calls(run_id)
    assert [(r["item"], r["outcome"], r["cost"]) for r in rows] == [("support:0", "ok", 0.001),
                                                                   ("support:1", "refused", 0.001)]
    assert store.judge_call(run_id, "q1", 0, "support:1")["outcome"] == "refused"
    assert store.judge_call(run_id, "q1", 0, "nope") is None


def test_the_same_item_under_other_settings_is_a_row_of_its_own(store, run_id):
    store.record_judge_calls([_call(run_id, sha="a" * 64, cost=0.002)])
    store.record_judge_calls([_call(run_id, sha="b" * 64, cost=0.005, effort="high")])
    rows = store.judge_calls(run_id)
    assert [(r["request_sha"][0], r["cost"]) for r in rows] == [("a", 0.002), ("b", 0.005)]
    assert sum(r["cost"] for r in rows) == pytest.approx(0.007)
    assert store.judge_call(run_id, "q1", 0, "support:0")["request_sha"] == "b" * 64


def test_an_error_or_a_cache_hit_is_replaced_by_the_next_answer(store, run_id):
    store.record_judge_calls([_call(run_id, outcome="error", verdict=None, cost=0.0),
                              _call(run_id, item="hit", cache_hit=True, cost=0.0, attempts=0)])
    store.record_judge_calls([_call(run_id, outcome="ok", cost=0.003), _call(run_id, item="hit", cost=0.004)])
    rows = store.judge_calls(run_id)
    assert [(r["item"], r["outcome"], r["cache_hit"], r["cost"]) for r in rows] == [
        ("hit", "ok", False, 0.004), ("support:0", "ok", False, 0.003)]


def test_a_store_keyed_without_the_request_sha_moves_to_the_append_only_key(tmp_path):
    path = tmp_path / "old.duckdb"
    with Store.open(path) as s:
        run_id = s.create_run(RunRecord(name="old"))
        s.record_judge_calls([_call(run_id, cost=0.01)])
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE jc AS SELECT * FROM judge_calls")
    con.execute("DROP TABLE judge_calls")
    old_ddl = ("CREATE TABLE judge_calls AS SELECT * FROM jc LIMIT 0")
    con.execute(old_ddl)
    con.execute("ALTER TABLE judge_calls ADD PRIMARY KEY (run_id, query_id, trial, item)")
    con.execute("INSERT INTO judge_calls SELECT * FROM jc")
    con.execute("CREATE INDEX judge_calls_request_sha ON judge_calls (request_sha)")  # as the old DDL made it
    con.execute("DROP TABLE jc")
    con.close()
    with Store.open(path, read_only=True) as s:
        assert [r["cost"] for r in s.judge_calls(run_id)] == [0.01]
    with Store.open(path) as s:
        s.record_judge_calls([_call(run_id, sha="b" * 64, cost=0.02)])
        assert [r["cost"] for r in s.judge_calls(run_id)] == [0.01, 0.02]
    con = duckdb.connect(str(path), read_only=True)
    key = con.execute("SELECT constraint_column_names FROM duckdb_constraints() WHERE table_name = 'judge_calls' "
                      "AND constraint_type = 'PRIMARY KEY'").fetchone()[0]
    con.close()
    assert key == ["run_id", "query_id", "trial", "item", "request_sha"]


def test_cache_lookup_skips_errors_and_puts_paid_originals_first(store, run_id):
    other = store.create_run(RunRecord(name="other"))
    store.record_judge_calls([
        _call(other, sha="s1", cache_hit=True, cost=0.0),
        _call(run_id, sha="s1"),
        _call(run_id, item="e", sha="s2", outcome="error", verdict=None, cost=0.0),
    ])
    found = store.cached_judge_calls(["s1", "s2", "s3"])
    assert [(r["request_sha"], r["run_id"], r["cache_hit"]) for r in found] == [
        ("s1", run_id, False), ("s1", other, True)]
    assert store.cached_judge_calls([]) == []


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"outcome": "passed"}, "outcome 'passed' must be one of"),
        ({"attempts": -1}, "attempts = -1 must be an integer >= 0"),
        ({"trial": True}, "trial = True must be an integer"),
        ({"cache_hit": 1}, "cache_hit must be true or false"),
        ({"cost": float("nan")}, "cost = nan must be a finite number"),
        ({"verdict": "yes"}, "verdict must be a mapping or null"),
        ({"colour": "red"}, "unknown column(s) ['colour']"),
        ({"model": None}, "required column(s) ['model'] missing"),
    ],
)
def test_bad_records_reject_the_whole_batch(store, run_id, change, fragment):
    with pytest.raises(SchemaError) as err:
        store.record_judge_calls([_call(run_id, item="fine"), {**_call(run_id), **change}])
    assert fragment in str(err.value) and "judge call 1" in str(err.value)
    assert store.judge_calls(run_id) == []


def test_unknown_run_and_duplicate_keys_are_refused(store, run_id):
    with pytest.raises(InputError, match="is not in"):
        store.record_judge_calls([_call("01ARZ3NDEKTSV4RRFFQ69G5FAV")])
    with pytest.raises(SchemaError, match="appears twice in one batch"):
        store.record_judge_calls([_call(run_id), _call(run_id)])
    assert store.judge_calls(run_id) == []


def test_a_store_from_before_judge_calls_opens_and_gains_the_table(tmp_path):
    path = tmp_path / "old.duckdb"
    with Store.open(path) as s:
        run_id = s.create_run(RunRecord(name="old"))
    con = duckdb.connect(str(path))
    con.execute("DROP TABLE judge_calls")
    con.close()
    with Store.open(path, read_only=True) as s:
        assert s.judge_calls(run_id) == [] and s.cached_judge_calls(["x"]) == []
        assert s.judge_call(run_id, "q", 0, "i") is None
    with Store.open(path) as s:
        s.record_judge_calls([_call(run_id)])
        assert len(s.judge_calls(run_id)) == 1 and s.get_run(run_id).name == "old"


def test_export_carries_judge_calls_of_the_chosen_runs(store, run_id, tmp_path):
    import pyarrow.parquet as pq

    other = store.create_run(RunRecord(name="other"))
    store.record_judge_calls([_call(run_id), _call(run_id, item="support:1"), _call(other, sha="b" * 64)])
    paths = store.export_parquet(tmp_path / "export", run_ids=[run_id])
    back = pq.read_table(paths["judge_calls"])
    assert back["run_id"].to_pylist() == [run_id, run_id]
    assert back["item"].to_pylist() == ["support:0", "support:1"]
    everything = store.export_parquet(tmp_path / "all")
    assert pq.read_table(everything["judge_calls"]).num_rows == 3
