"""`ragassay report` reads each run's rows once: the pivot the comparisons and sections slice is built from
those rows (not pivoted again in DuckDB) and must be exactly what ``Store.results_wide`` gives; the page data
built from rows read ahead must equal the data built by reading them itself; the Parquet file, encoded on a
worker thread, must hold the bytes a plain synchronous encoding gives."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ragassay.analysis.report_data import (
    QueriesParquet,
    ReadCache,
    _run_rows,
    build_report_data,
    read_runs,
    wide_from_rows,
)
from ragassay.errors import SchemaError
from ragassay.store import RunRecord, Store

METRICS = ("answer_f1", "recall@final_k", "abstention_recall", "refused", "zz_extra")


def _store(path, rows_by_run: dict) -> Store:
    st = Store.open(path)
    for name, rows in rows_by_run.items():
        rid = st.create_run(RunRecord(name=name, dataset_version="d", corpus_digest="c", metric_version="m",
                                      config={"name": name}, hit_rule="any_overlap", relevance_threshold=2,
                                      gain="exponential", ties="trec", trials=2))
        st.write_batch(rid, rows)
        st.finish_run(rid)
    return st


def _messy_rows(seed: int) -> dict:
    """Two trials, items missing some metrics, null values, null and mixed-case strata, ids that sort
    differently as bytes and as numbers."""
    rng = np.random.default_rng(seed)
    out = {k: [] for k in ("query_id", "trial", "metric", "value", "stratum", "latency_ms")}
    for q in range(60):
        qid = f"q{q}" if q % 7 else f"Q-{q:03d}"
        stratum = None if q % 11 == 0 else ("b" if q % 3 else "A")
        for trial in range(1 + (q % 4 == 0)):
            for m in METRICS:
                if rng.random() < 0.15:
                    continue  # this item has no row for this metric
                out["query_id"].append(qid)
                out["trial"].append(trial)
                out["metric"].append(m)
                out["value"].append(None if rng.random() < 0.1 else float(rng.random()))
                out["stratum"].append(stratum)
                out["latency_ms"].append(float(rng.gamma(2.0, 30.0)))
    return out


def test_pivot_from_rows_is_the_stores_pivot(tmp_path):
    with _store(tmp_path / "s.duckdb", {"a": _messy_rows(1), "b": _messy_rows(2)}) as st:
        for name in ("a", "b"):
            rid = st.get_run(name).run_id
            want = st.results_wide(rid, st.metrics(rid))
            got = wide_from_rows(_run_rows(st, rid), st.metrics(rid))
            assert list(got.query_ids) == list(want.query_ids)
            assert got.trials.dtype == want.trials.dtype and np.array_equal(got.trials, want.trials)
            assert list(got.strata) == list(want.strata) and None in list(got.strata)
            assert np.array_equal(got.values, want.values, equal_nan=True)
            assert np.isnan(got.values).any()
            # and the cache primed from the rows slices it as the store would
            cache = ReadCache(st)
            cache.prime(rid, _run_rows(st, rid))
            sub = ["refused", "answer_f1"]
            assert np.array_equal(cache.results_wide(rid, sub).values, st.results_wide(rid, sub).values,
                                  equal_nan=True)


def test_a_query_with_two_strata_is_left_to_the_store_which_refuses_it(tmp_path):
    rows = _messy_rows(3)
    i = rows["query_id"].index("q1")
    rows["stratum"][i] = "other"  # one of q1's rows disagrees
    with _store(tmp_path / "s.duckdb", {"a": rows}) as st:
        rid = st.get_run("a").run_id
        assert wide_from_rows(_run_rows(st, rid), st.metrics(rid)) is None
        cache = ReadCache(st)
        cache.prime(rid, _run_rows(st, rid))
        with pytest.raises(SchemaError, match="different strata"):
            cache.results_wide(rid, ["answer_f1"])


def test_a_repeated_cell_is_left_to_the_store():
    rows = pa.table({"query_id": ["q1", "q1", "q2"], "trial": pa.array([0, 0, 0], pa.int32()),
                     "metric": ["m", "m", "m"], "value": [1.0, 2.0, 3.0], "stratum": ["s", "s", "s"]})
    assert wide_from_rows(rows, ["m"]) is None
    ok = rows.slice(1)
    got = wide_from_rows(ok, ["m"])
    assert list(got.query_ids) == ["q1", "q2"] and got.values.tolist() == [[2.0], [3.0]]
    assert wide_from_rows(ok, ["other"]) is None  # a metric the caller did not name


def test_page_data_from_rows_read_ahead_equals_reading_them_itself(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from report_scale import build_inputs

    from ragassay.analysis.runner import load_inputs

    inputs = build_inputs(tmp_path / "in", 60)
    corpus, golden = load_inputs(inputs["corpus"], inputs["golden"])
    with Store.open(inputs["store"], read_only=True) as st:
        recs = [st.get_run(r) for r in inputs["runs"]]
        ids = [r.run_id for r in recs]
        plain_parquet, ahead_parquet = QueriesParquet(), QueriesParquet()
        plain = build_report_data(st, ids, golden, corpus, parquet=plain_parquet, analysis_resamples=200)
        cache = ReadCache(st)
        ahead = build_report_data(cache, ids, golden, corpus, runs_read=read_runs(cache, recs, ahead_parquet),
                                  analysis_resamples=200)
        assert set(cache._wide) == set(ids)  # the pivots came from the rows
        plain_bytes, ahead_bytes = plain_parquet.finish(), ahead_parquet.finish()
        # the oracle: the same rows encoded by hand, synchronously
        buf = io.BytesIO()
        writer = None
        for r in recs:
            rows = _run_rows(st, r.run_id)
            for batch in rows.select(list(QueriesParquet.COLUMNS)).to_batches(max_chunksize=200_000):
                n = batch.num_rows
                full = pa.RecordBatch.from_arrays(
                    [pa.array([r.run_id] * n), pa.array([r.name] * n), *batch.columns],
                    names=["run_id", "run_name", *QueriesParquet.COLUMNS])
                writer = writer or pq.ParquetWriter(buf, full.schema, compression="zstd")
                writer.write_batch(full)
        writer.close()
    for d in (plain, ahead):
        d.pop("generated_at")
    assert ahead == plain
    assert plain["latency"][0]["values_ms"] and plain["stage_table"]["rows"]
    assert plain_bytes == ahead_bytes == buf.getvalue()
    back = pq.read_table(io.BytesIO(ahead_bytes))
    assert back.num_rows == 2 * 60 * 15 and back.column("run_name").to_pylist()[0] == recs[0].name


def test_an_encoding_failure_is_raised_by_finish():
    sink = QueriesParquet()

    class Rec:
        run_id, name = "r", "n"

    sink.add(Rec, pa.table({"query_id": ["q"]}))  # no trial, metric, ... columns: the worker fails
    with pytest.raises(KeyError):
        sink.finish()
