"""Store + compare at scale: write result rows for two runs and compare them over all metrics x strata with
10,000 paired-bootstrap resamples. Prints wall times and peak memory.

By default both readings of the target are measured: 1,000,000 rows in all (two runs of 5,000 queries x
100 metrics) and 1,000,000 rows per run (two runs of 10,000 queries x 100 metrics).

Usage: python benchmarks/store.py [n_queries_per_run] [n_metrics]

``--tiny`` runs two runs of 200 queries x 10 metrics once: a smoke run for CI (tests/test_benchmarks_run.py),
whose figures mean nothing.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from ragassay.analysis.compare import compare_runs
from ragassay.store import RunRecord, Store

STRATA = ("lexical", "paraphrase", "multi_hop", "long_tail", "tabular", "negative", "temporal")


def _rows(rng, n_queries: int, n_metrics: int, shift: float) -> dict:
    qids = np.asarray([f"q{i:06d}" for i in range(n_queries)], dtype=object)
    strata = np.asarray(STRATA, dtype=object)[np.arange(n_queries) % len(STRATA)]
    values = (rng.random((n_queries, n_metrics)) < 0.6 + shift).astype(np.float64)
    values[strata == "negative", : n_metrics // 2] = np.nan  # undefined on negatives, as recall is
    metrics = np.asarray([f"metric_{j:03d}@10" for j in range(n_metrics)], dtype=object)
    return {
        "query_id": np.repeat(qids, n_metrics),
        "trial": np.zeros(n_queries * n_metrics, dtype=np.int32),
        "metric": np.tile(metrics, n_queries),
        "value": values.ravel(),
        "stratum": np.repeat(strata, n_metrics),
        "latency_ms": np.repeat(rng.gamma(2.0, 20.0, n_queries), n_metrics),
    }


def main(n_queries: int = 5_000, n_metrics: int = 100, batch_queries: int = 500) -> dict:
    rng = np.random.default_rng(0)
    timings = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ragassay-store-bench-") as tmp, \
            Store.open(Path(tmp) / "bench.duckdb") as st:
        run_ids = []
        for name, shift in (("base", 0.0), ("cand", 0.02)):
            rid = st.create_run(RunRecord(name=name, dataset_version="bench@1", corpus_digest="sha256:bench",
                                          metric_version="bench", config={"shift": shift}, hit_rule="any_overlap"))
            rows = _rows(rng, n_queries, n_metrics, shift)
            step = batch_queries * n_metrics
            for s in range(0, n_queries * n_metrics, step):
                st.write_batch(rid, {k: v[s:s + step] for k, v in rows.items()})
            st.finish_run(rid)
            run_ids.append(rid)
        timings["write_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        comp = compare_runs(st, run_ids[0], run_ids[1], n_resamples=10_000)
        timings["compare_s"] = time.perf_counter() - t1
    timings["total_s"] = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    n_rows = 2 * n_queries * n_metrics
    print(f"store + compare: wrote {n_rows:,} rows (2 runs x {n_queries:,} queries x {n_metrics} metrics) in "
          f"{timings['write_s']:.2f} s; compare over {len(comp.rows):,} metric x stratum rows with 10,000 "
          f"resamples in {timings['compare_s']:.2f} s; total {timings['total_s']:.2f} s (target <= 10 s); "
          f"peak RSS {peak:,.0f} MB (target < 2,048 MB)")
    return {**timings, "rows": n_rows, "compare_rows": len(comp.rows), "peak_rss_mb": peak}


def cli() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("queries", nargs="?", type=int, help="queries per run (default: 5,000, then 10,000)")
    ap.add_argument("metrics", nargs="?", type=int, default=100)
    ap.add_argument("--tiny", action="store_true", help="200 queries x 10 metrics (CI)")
    args = ap.parse_args()
    if args.tiny:
        args.queries, args.metrics = 200, 10
    for n in [args.queries] if args.queries else [5_000, 10_000]:
        main(n, args.metrics)


if __name__ == "__main__":
    cli()
