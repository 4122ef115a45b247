"""Results as a dataset: the partitioned export read back by DuckDB and pyarrow, and compared in place."""

import json

import duckdb
import numpy as np
import pyarrow.dataset as pads
import pytest
from tests.analysis.conftest import make_run

from ragassay.analysis.compare import compare_runs
from ragassay.cli.app import main
from ragassay.errors import InputError
from ragassay.store import Store
from ragassay.store.parquet import ParquetResults

N = 120


def _cli(args):
    with pytest.raises(SystemExit) as e:
        main(args)
    return e.value.code or 0


@pytest.fixture
def db(tmp_path):
    rng = np.random.default_rng(7)
    a = rng.random(N)
    b = np.clip(a + rng.normal(0.15, 0.1, N), 0, 1)
    # Undefined values must stay undefined (NaN stored as NULL) through the export.
    b[::17] = np.nan
    path = tmp_path / "r.duckdb"
    with Store.open(path) as st:
        ids = [make_run(st, "base", {"ndcg@final_k": a, "recall@final_k": (a > 0.5).astype(float)}),
               make_run(st, "cand", {"ndcg@final_k": b, "recall@final_k": (b > 0.5).astype(float)}),
               make_run(st, "other", {"ndcg@final_k": a[:10]})]
    return path, ids


def _sorted(table):
    return table.select(sorted(table.column_names)).sort_by(
        [("run_id", "ascending"), ("query_id", "ascending"), ("trial", "ascending"), ("metric", "ascending")]
    ).to_pylist()


def test_partitioned_export_is_read_back_by_duckdb_and_pyarrow_with_equal_rows(db, tmp_path):
    path, ids = db
    out = tmp_path / "ds"
    with Store.open(path, read_only=True) as st:
        paths = st.export_parquet(out, partitioned=True)
        stored = st._con.sql("SELECT * FROM results").to_arrow_table()
        stored_runs = st._con.sql("SELECT run_id FROM runs ORDER BY run_id").fetchall()
    assert paths["results"] == out / "results"
    assert sorted(p.name for p in (out / "results").iterdir()) == sorted(f"run_id={i}" for i in ids)
    assert all((out / "results" / f"run_id={i}" / "part-0.parquet").is_file() for i in ids)
    via_duckdb = duckdb.sql(
        f"SELECT * FROM read_parquet('{out}/results/*/*.parquet', hive_partitioning=true)").to_arrow_table()
    via_arrow = pads.dataset(out / "results", format="parquet", partitioning="hive").to_table()
    expected = _sorted(stored)
    assert len(expected) == 2 * 2 * N + 10
    assert _sorted(via_duckdb) == expected
    assert _sorted(via_arrow) == expected
    assert duckdb.sql(f"SELECT run_id FROM '{out}/runs.parquet' ORDER BY run_id").fetchall() == stored_runs
    status = pads.dataset(out / "query_status", format="parquet", partitioning="hive").to_table()
    assert status.num_rows == 2 * N + 10


def test_a_partitioned_export_of_some_runs_keeps_only_those(db, tmp_path):
    path, ids = db
    out = tmp_path / "ds"
    with Store.open(path, read_only=True) as st:
        st.export_parquet(out, partitioned=True)
        st.export_parquet(out, [ids[0]], partitioned=True)
    assert [p.name for p in (out / "results").iterdir()] == [f"run_id={ids[0]}"]
    assert duckdb.sql(f"SELECT run_id FROM '{out}/runs.parquet'").fetchall() == [(ids[0],)]


def test_compare_from_parquet_equals_compare_on_the_store(db, tmp_path, capsys):
    path, ids = db
    out = tmp_path / "ds"
    assert _cli(["export", "--partitioned", "-o", str(out), "--store", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"] == str(out / "results")
    with Store.open(path, read_only=True) as st, ParquetResults.open(out) as pq:
        on_store = compare_runs(st, "base", "cand", n_resamples=2000, seed=3).to_dict()
        on_parquet = compare_runs(pq, "base", "cand", n_resamples=2000, seed=3).to_dict()
        wide_s, wide_p = st.results_wide(ids[1], ["ndcg@final_k"]), pq.results_wide(ids[1], ["ndcg@final_k"])
    assert on_parquet == on_store
    assert on_store["rows"] and on_store["claims"]
    np.testing.assert_array_equal(wide_p.values, wide_s.values)
    assert np.isnan(wide_p.values).sum() == len(range(0, N, 17))

    args = ["compare", "base", "cand", "--resamples", "2000", "--json"]
    assert _cli([*args, "--store", str(path)]) == 0
    from_store = json.loads(capsys.readouterr().out)
    assert _cli([*args, "--from-parquet", str(out)]) == 0
    from_parquet = json.loads(capsys.readouterr().out)
    assert from_parquet["rows"] == from_store["rows"] and from_parquet["claims"] == from_store["claims"]


def test_parquet_results_refuses_what_is_not_a_partitioned_export_and_any_write(db, tmp_path, capsys):
    path, _ = db
    with pytest.raises(InputError, match="no such folder"):
        ParquetResults.open(tmp_path / "missing")
    flat = tmp_path / "flat"
    with Store.open(path, read_only=True) as st:
        st.export_parquet(flat)
        st.export_parquet(tmp_path / "ds", partitioned=True)
    with pytest.raises(InputError, match="not a partitioned export"):
        ParquetResults.open(flat)
    assert _cli(["compare", "base", "cand", "--from-parquet", str(flat)]) == 2
    assert "not a partitioned export" in capsys.readouterr().err
    with ParquetResults.open(tmp_path / "ds") as pq, pytest.raises(InputError, match="read-only"):
        pq.finish_run(pq.get_run("base").run_id)
