"""The write path's cheaper steps, pinned to what they replace: the batch's pairs and its duplicate check
from integer codes (against a Python set and the old DuckDB grouping), dictionary-encoded string columns
stored exactly as plain ones (NULL, NaN, replacement, resume), the bulk block's DuckDB thread cap, and the
summary that reads each item's first row with the first metric (against the whole sorted table)."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ragassay.analysis.summary import run_summary, stored_run_summary
from ragassay.errors import SchemaError
from ragassay.store import RunRecord, Store
from ragassay.store.db import _normalize_rows, _pair_rows

COLUMNS = ("query_id, trial, metric, value, defined, stratum, judged_fraction, latency_ms, tokens_in, "
           "tokens_out, cost, trace_id")


def _batch(rng, qids, metrics, trials=(0,), *, nan_share=0.2):
    """Rows metric-major as the scorer emits them, with NaN values, NULL strata/latencies/trace ids."""
    keys = [(q, t) for q in qids for t in trials]
    n, m = len(keys), len(metrics)
    value = rng.random(n * m)
    value[rng.random(n * m) < nan_share] = np.nan
    lat = rng.gamma(2.0, 50.0, n)
    lat_mask = rng.random(n) < 0.1
    jf = rng.random(n)
    jf[rng.random(n) < 0.1] = np.nan
    strata = [None if i % 11 == 0 else ("ä-s" if i % 3 else "b") for i in range(n)]
    tile = np.tile(np.arange(n), m)
    return pa.table({
        "query_id": pa.array([k[0] for k in keys]).take(pa.array(tile)),
        "trial": pa.array(np.asarray([k[1] for k in keys], dtype=np.int32)).take(pa.array(tile)),
        "metric": pa.array(np.repeat(np.asarray(metrics, dtype=object), n).tolist(), pa.string()),
        "value": pa.array(value),
        "stratum": pa.array(strata, pa.string()).take(pa.array(tile)),
        "judged_fraction": pa.array(jf, mask=np.isnan(jf)).take(pa.array(tile)),
        "latency_ms": pa.array(lat, mask=lat_mask).take(pa.array(tile)),
        "trace_id": pa.array([None if i % 7 == 0 else f"t{i}" for i in range(n)], pa.string()).take(pa.array(tile)),
    })


def _as_dictionaries(table: pa.Table) -> pa.Table:
    """The same rows with every string column an Arrow dictionary (as a scorer can build them for free)."""
    return pa.table({c: pc.dictionary_encode(table[c]) if table[c].type == pa.string() else table[c]
                     for c in table.column_names})


def _done(table: pa.Table):
    pairs = sorted(set(zip(pc.cast(table["query_id"], pa.string()).to_pylist(), table["trial"].to_pylist(),
                           strict=True)))
    return [(q, t, "done", None) for q, t in pairs]


def _stored(store: Store, run: str) -> list[tuple]:
    """The run's rows sorted by key, floats as their bit patterns' repr so NaN and -0.0 compare exactly."""
    rows = store.connection.execute(
        f"SELECT {COLUMNS} FROM results WHERE run_id = ? ORDER BY query_id, trial, metric", [run]).fetchall()
    return [tuple(repr(v) if isinstance(v, float) else v for v in r) for r in rows]


def _types(store: Store) -> list[tuple]:
    return store.connection.execute("SELECT column_name, data_type FROM duckdb_columns() "
                                    "WHERE table_name = 'results' ORDER BY column_index").fetchall()


# ------------------------------------------------------------------ pairs and the duplicate check
@pytest.mark.parametrize("big_trials", [False, True])  # True: trial numbers too sparse for the code table
def test_pair_rows_and_uniqueness_equal_a_python_set(big_trials):
    rng = np.random.default_rng(3)
    for _ in range(40):
        n = int(rng.integers(1, 400))
        q = rng.integers(0, 30, n)
        t = rng.integers(0, 3, n) * (10_000_000 if big_trials else 1)
        m = rng.integers(0, 6, n)
        table = _normalize_rows({"query_id": [f"q{i}" for i in q], "trial": t.tolist(),
                                 "metric": [f"m{i}" for i in m], "value": rng.random(n).tolist()})
        rows, unique = _pair_rows(table)
        keys = list(zip(q.tolist(), t.tolist(), strict=True))
        assert sorted(keys[i] for i in rows) == sorted(set(keys))  # exactly one row of each pair
        assert unique == (len(set(zip(q.tolist(), t.tolist(), m.tolist(), strict=True))) == n)
        # the same answer when the string columns come as dictionaries
        rows_d, unique_d = _pair_rows(_normalize_rows(_as_dictionaries(table)))
        assert sorted(keys[i] for i in rows_d) == sorted(set(keys)) and unique_d == unique


def test_pair_hashes_equal_the_old_grouping_in_duckdb(tmp_path):
    """The hashes the writer remembers stored pairs by: as the old per-row GROUP BY computed them."""
    rng = np.random.default_rng(5)
    table = _normalize_rows(_batch(rng, [f"q{i}" for i in rng.permutation(300)], ["b", "a", "c"], (0, 2)))
    with Store.open(tmp_path / "s.duckdb") as st:
        rows, unique = _pair_rows(table)
        got = st._pair_hashes(table, rows)
        st.connection.register("t", table)
        want = st.connection.execute("SELECT hash(query_id, trial) AS h FROM t GROUP BY ALL ORDER BY h").fetchnumpy()
    assert unique and got.dtype == np.uint64 and got.tolist() == np.asarray(want["h"], np.uint64).tolist()


def test_a_dictionary_that_repeats_a_metric_is_still_a_duplicate_key(tmp_path):
    """Two dictionary entries spelling the same metric are one key: the batch is refused, nothing stored."""
    metric = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()), pa.array(["rr", "rr"]))
    rows = pa.table({"query_id": ["q0", "q0", "q1"], "trial": pa.array([0, 0, 0], pa.int32()), "metric": metric,
                     "value": [0.1, 0.2, 0.3]})
    with Store.open(tmp_path / "s.duckdb") as st:
        run = st.create_run(RunRecord(name="r"))
        with pytest.raises(SchemaError, match=r"1 key\(s\).*appear more than once.*'q0'"):
            st.write_batch(run, rows, done=[("q0", 0, "done", None)])
        assert _stored(st, run) == [] and st.done_keys(run) == set()


def test_a_dictionary_holding_a_null_query_id_is_refused_like_a_plain_null():
    qid = pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int8()), pa.array(["q0", None]))
    with pytest.raises(SchemaError, match=r"column 'query_id' is null in 1 row\(s\), first at row 1"):
        _normalize_rows({"query_id": qid, "metric": ["a", "a"], "value": [0.1, 0.2]})


def test_judged_fraction_range_check_without_numpy_still_refuses_and_passes_nan_and_null():
    ok = _normalize_rows({"query_id": ["a", "b", "c"], "metric": ["m"] * 3, "value": [0.1, 0.2, 0.3],
                          "judged_fraction": pa.array([0.0, None, math.nan])})
    assert ok["judged_fraction"].null_count == 1
    assert _normalize_rows({"query_id": ["a"], "metric": ["m"], "value": [0.1],
                            "judged_fraction": pa.array([None], pa.float64())}).num_rows == 1
    with pytest.raises(SchemaError, match=r"judged_fraction must lie in \[0, 1\].*got \[0.5, 1.5\]"):
        _normalize_rows({"query_id": ["a", "b", "c"], "metric": ["m"] * 3, "value": [0.1, 0.2, 0.3],
                         "judged_fraction": pa.array([0.5, None, 1.5])})


# ------------------------------------------------------------------ dictionary columns store equal rows
def _write_rounds(st: Store, run: str, batches, dictionaries: bool) -> None:
    for table in batches:
        st.write_batch(run, _as_dictionaries(table) if dictionaries else table, done=_done(table))


def test_dictionary_columns_store_the_same_rows_and_types_as_strings_with_replacement(tmp_path):
    """Three batches, the third re-scoring half of the first with new values (rows replaced) plus new pairs:
    plain and dictionary-encoded inputs end in identical tables, equal to a last-write-wins oracle."""
    rng = np.random.default_rng(11)
    metrics = ["recall@10", "mrr@10", "answer_f1"]
    a = _batch(rng, [f"q{i:03d}" for i in range(0, 100)], metrics, (0, 1))
    b = _batch(rng, [f"q{i:03d}" for i in range(100, 180)], metrics, (0, 1))
    c = _batch(rng, [f"q{i:03d}" for i in range(50, 130)] + ["q900"], metrics, (0, 1))
    stored = {}
    for dictionaries in (False, True):
        with Store.open(tmp_path / f"{dictionaries}.duckdb") as st:
            run = st.create_run(RunRecord(name="r"))
            _write_rounds(st, run, [a, b, c], dictionaries)
            st.finish_run(run)  # the uniqueness check passes (the writer's own bookkeeping)
            assert st._own_rows == {}
            stored[dictionaries] = (_stored(st, run), _types(st), st.done_keys(run))
    assert stored[True] == stored[False]
    oracle = {}
    for table in (a, b, c):
        for r in table.to_pylist():
            oracle[(r["query_id"], r["trial"], r["metric"])] = r["value"]
    rows = stored[True][0]
    assert len(rows) == len(oracle) == 181 * 2 * 3
    for r in rows:
        want = oracle[(r[0], r[1], r[2])]
        if math.isnan(want):
            assert r[3] is None and r[4] is False  # undefined: NULL and defined = false, never 0
        else:
            assert r[3] == repr(want) and r[4] is True


def test_dictionary_batches_resume_after_an_unfinished_run_without_loss_or_duplicates(tmp_path):
    """A run left 'running' (the writer was killed between batches) is resumed by writing every batch
    again, as `score --resume` re-sends work: no row lost or doubled, and finish_run's full check passes."""
    rng = np.random.default_rng(13)
    metrics = ["b", "a"]
    batches = [_batch(rng, [f"q{i:03d}" for i in range(s, s + 40)], metrics) for s in range(0, 200, 40)]
    path = tmp_path / "s.duckdb"
    with Store.open(path) as st:
        run = st.create_run(RunRecord(name="r"))
        _write_rounds(st, run, batches[:3], dictionaries=True)
    with Store.open(path) as st:
        done = st.resume_run(run)
        assert done == {(f"q{i:03d}", 0) for i in range(120)}
        _write_rounds(st, run, batches, dictionaries=True)
        assert run not in st._own_rows  # a resumed run is checked in full at finish
        st.finish_run(run)
        got = _stored(st, run)
    with Store.open(tmp_path / "plain.duckdb") as st:
        other = st.create_run(RunRecord(name="r"))
        _write_rounds(st, other, batches, dictionaries=False)
        assert _stored(st, other) == got
    assert len(got) == 200 * 2 and len({r[:3] for r in got}) == len(got)


# ------------------------------------------------------------------ the bulk block's DuckDB threads
def test_memory_limited_caps_duckdb_threads_inside_the_block_and_restores_them(tmp_path):
    with Store.open(tmp_path / "s.duckdb") as st:
        con = st.connection
        setting = "SELECT current_setting('threads')"
        con.execute("SET threads = 3")
        with st.memory_limited():
            assert con.execute(setting).fetchall()[0][0] == 1
        assert con.execute(setting).fetchall()[0][0] == 3
        with pytest.raises(RuntimeError), st.memory_limited():
            raise RuntimeError("boom")
        assert con.execute(setting).fetchall()[0][0] == 3
        with st.memory_limited(threads=None):
            assert con.execute(setting).fetchall()[0][0] == 3
        with st.memory_limited(threads=8):  # a cap, never a raise
            assert con.execute(setting).fetchall()[0][0] == 3


# ------------------------------------------------------------------ the summary's first-metric items
def _json(summary: dict) -> str:
    return json.dumps(summary)


class _Recording:
    """The store's connection, recording the SQL of each ``sql`` call (which queries the summary ran)."""

    def __init__(self, con):
        self._con, self.queries = con, []

    def sql(self, query, **kw):
        self.queries.append(query)
        return self._con.sql(query, **kw)

    def __getattr__(self, name):
        return getattr(self._con, name)


def test_summary_of_a_rectangular_run_equals_the_whole_table_bit_for_bit(tmp_path):
    """Every metric has every item (the path that reads latency and judged fraction with the first metric):
    items written out of order, latencies that differ between an item's rows (the smallest metric's counts),
    NULL and NaN values, and a first-seen metric order that is not the name order."""
    rng = np.random.default_rng(17)
    qids = [f"q{i:05d}" for i in rng.permutation(3000)]
    metrics = ["zz_last", "recall@fusion_depth", "answer_f1", "mrr@10"]
    with Store.open(tmp_path / "s.duckdb") as st:
        run = st.create_run(RunRecord(name="r"))
        for part in np.array_split(np.arange(len(qids)), 5):
            table = _batch(rng, [qids[i] for i in part], metrics, (0, 1))
            lat = table["latency_ms"].to_numpy(zero_copy_only=False) + rng.random(table.num_rows)
            table = table.set_column(table.schema.get_field_index("latency_ms"), "latency_ms", pa.array(lat))
            st.write_batch(run, _as_dictionaries(table), done=_done(table))
        st.finish_run(run)
        st._con = rec = _Recording(st._con)
        got = stored_run_summary(st, run)
        want = run_summary(st.results(run))
    assert _json(got) == _json(want)
    assert got["n_items"] == 6000 and 0 < got["latency_ms"]["n"] < 6000  # NaN latencies are not measured
    assert not any("arg_min" in q for q in rec.queries)  # the items came with the first metric


def test_summary_with_a_duplicate_row_behind_the_writer_counts_items_once(tmp_path):
    """A row inserted twice through the raw connection: the first metric then lists an item twice, so the
    summary takes its items from the grouped query, as the whole-table summary does."""
    rng = np.random.default_rng(19)
    with Store.open(tmp_path / "s.duckdb") as st:
        run = st.create_run(RunRecord(name="r"))
        table = _batch(rng, [f"q{i:03d}" for i in range(50)], ["a", "b"], (0,), nan_share=0.0)
        st.write_batch(run, table, done=_done(table))
        st.connection.execute("INSERT INTO results SELECT * FROM results WHERE run_id = ? AND query_id = 'q007' "
                              "AND metric = 'a'", [run])
        st._con = rec = _Recording(st._con)
        got = stored_run_summary(st, run)
        want = run_summary(st.results(run))
    assert sum("arg_min" in q for q in rec.queries) == 1
    assert got["n_items"] == want["n_items"] == 50
    assert got["latency_ms"] == want["latency_ms"] and got["judged_fraction"] == want["judged_fraction"]
    assert got["n_rows"] == want["n_rows"] == 101
