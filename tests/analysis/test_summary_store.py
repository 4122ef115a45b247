"""`stored_run_summary` (one metric at a time from the store) against `run_summary` of the whole sorted
result table, the summary `score` and `run` printed before: equal bit for bit (compared as JSON, where
every float is its shortest round-trip repr and NaN is spelled out)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ragassay.analysis.demo import demo_config_dir
from ragassay.analysis.runner import load_inputs, score_traces_into_store
from ragassay.analysis.summary import run_summary, stored_run_summary
from ragassay.pipeline import Pipeline
from ragassay.store import RunRecord, Store
from ragassay.trace import write_traces


def _same(st: Store, run_id: str) -> dict:
    want = run_summary(st.results(run_id))
    got = stored_run_summary(st, run_id)
    assert json.dumps(got) == json.dumps(want)
    return want


@pytest.mark.parametrize("config", ["hybrid_rerank", "oracle"])
def test_equal_on_the_bundled_demo(config, tmp_path):
    corpus, golden = load_inputs(None, None)
    pipe = Pipeline.from_config(demo_config_dir() / f"{config}.yaml", corpus)
    header, traces = pipe.run(golden.queries, trials=2, progress=False, dataset_version=golden.dataset_version)
    path = write_traces(tmp_path / "t.jsonl", header, traces)
    with Store.open(tmp_path / "s.duckdb") as st:
        run_id, _ = score_traces_into_store(st, path, corpus, golden)
        want = _same(st, run_id)
    assert want["n_items"] == 2 * len(golden) and len(want["metrics"]) >= 9
    assert len(want["strata"]) > 1
    assert want["judged_fraction"]["n"] + want["judged_fraction"]["n_undefined"] == 2 * len(golden)


def _record(name: str) -> RunRecord:
    return RunRecord(name=name, dataset_version="ds@1", corpus_digest="sha256:c", metric_version="m1",
                     config={"name": name}, hit_rule="any_overlap", gain="exp", relevance_threshold=2,
                     ties="given", trials=2)


def test_equal_on_10k_random_items_written_out_of_order(tmp_path):
    """10,000 queries x 2 trials: metrics that first appear late (their label order is where they first
    appear), NaN values, NULL latencies and judged fractions, latencies that differ between an item's
    rows (only its first row, the smallest metric, counts), strata with non-ASCII names, and batches
    written in shuffled order so storage order is not the sorted order."""
    rng = np.random.default_rng(7)
    n, trials = 10_000, 2
    qids = np.asarray([f"q{i:05d}" for i in rng.permutation(n)], dtype=object)
    strata = np.asarray(["zeta", "ä-stratum", "alpha", "b"], dtype=object)[rng.integers(0, 4, n)]
    sorted_pos = np.argsort(np.argsort(qids))
    metrics = {"recall@fusion_depth": 0, "answer_f1": 0, "mrr@10": 5_000, "a_late": 9_990, "zz": 0}
    with Store.open(tmp_path / "s.duckdb") as st:
        run_id = st.create_run(_record("random"))
        for part in np.array_split(rng.permutation(n), 7):
            cols = {k: [] for k in ("query_id", "trial", "metric", "value", "stratum", "latency_ms",
                                    "judged_fraction")}
            for m, after in metrics.items():
                for t in range(trials):
                    # a metric present only for the queries sorted from position `after` on
                    rows = part[sorted_pos[part] >= after]
                    v = rng.random(len(rows)) * 10.0 ** rng.integers(-3, 4, len(rows))
                    v[rng.random(len(rows)) < 0.2] = np.nan
                    lat = rng.random(len(rows)) * 100
                    jf = rng.random(len(rows))
                    cols["query_id"] += qids[rows].tolist()
                    cols["trial"] += [t] * len(rows)
                    cols["metric"] += [m] * len(rows)
                    cols["value"] += v.tolist()
                    cols["stratum"] += strata[rows].tolist()
                    cols["latency_ms"] += [None if x < 5 else x for x in lat.tolist()]
                    cols["judged_fraction"] += [None if x < 0.1 else x for x in jf.tolist()]
            st.write_batch(run_id, cols)
        want = _same(st, run_id)
        empty = st.create_run(_record("empty"))
        assert _same(st, empty) == {"metrics": [], "strata": [], "per_stratum": [], "latency_ms": None,
                                    "judged_fraction": {"mean": None, "n": 0, "n_undefined": 0},
                                    "n_rows": 0, "n_items": 0}
    assert want["n_items"] == n * trials
    assert {r["metric"]: r["n_defined"] + r["n_undefined"] for r in want["metrics"]}["a_late"] == 10 * trials
    # the metric first seen last (a_late) is the last label of every stratum's block
    assert [r["metric"] for r in want["per_stratum"]][-1] == "a_late"
    assert sum(r["n_defined"] + r["n_undefined"] for r in want["metrics"]) == want["n_rows"]
    assert 0 < want["latency_ms"]["n"] < n * trials and 0 < want["judged_fraction"]["n_undefined"]


@pytest.mark.parametrize("n_metrics", [0, 1, 2, 5])
def test_metric_rows_fetched_two_at_a_time_come_in_order_and_equal_a_serial_fetch(tmp_path, n_metrics):
    import threading

    from ragassay.analysis.summary import _sorted_metric_rows

    rng = np.random.default_rng(n_metrics)
    names = [f"m{k}" for k in range(n_metrics)]
    with Store.open(tmp_path / "s.duckdb") as st:
        run_id = st.create_run(_record("fetch"))
        n = 300
        rows = {"query_id": [f"q{i}" for i in rng.permutation(n) for _ in names],
                "trial": [0] * (n * n_metrics), "metric": names * n,
                "value": rng.random(n * n_metrics).tolist(), "stratum": ["s"] * (n * n_metrics),
                "latency_ms": rng.random(n * n_metrics).tolist(), "judged_fraction": [None] * (n * n_metrics)}
        if n_metrics:
            st.write_batch(run_id, rows)
        got = list(_sorted_metric_rows(st.connection, run_id, names))
        want = [st.connection.sql(f"SELECT query_id, trial, value, stratum{', latency_ms, judged_fraction' if i == 0 else ''} "
                                  "FROM results WHERE run_id = $r AND metric = $m ORDER BY query_id, trial",
                                  params={"r": run_id, "m": m}).to_arrow_table() for i, m in enumerate(names)]
    assert len(got) == n_metrics and all(g.equals(w) for g, w in zip(got, want, strict=True))
    assert all(g.num_rows == n for g in got)
    assert not any(t.name.startswith("ragassay-summary") for t in threading.enumerate())
