"""Results store write/read speed: 1,000,000 result rows into a fresh DuckDB file, then the pivot back.

Setup: 10,000 queries x 100 metrics x 1 trial (5% of values NaN = undefined), written with
``Store.write_batch`` in batches of 200 queries (20,000 rows) with their done markers, each batch one
transaction as a resumable run writes them. Then ``results_wide`` over all 100 metrics. Prints rows/s, wall
and CPU times and peak RSS (``resource.getrusage``; Linux reports KiB). On a shared machine trust the CPU
time more than the wall time. Batches are built before the clock starts so
the timing is the store's alone.

    python benchmarks/store_write.py [--queries 10000] [--metrics 100] [--trials 1] [--batch-queries 200]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from ragassay.store import RunRecord, Store


def make_batches(n_queries: int, n_metrics: int, n_trials: int, per: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    qids = pa.array([f"q{i:06d}" for i in range(n_queries)])
    metrics = pa.array([f"metric{j:03d}@10" for j in range(n_metrics)])
    strata = pa.array([f"s{i % 7}" for i in range(n_queries)])
    batches = []
    for start in range(0, n_queries, per):
        q = np.arange(start, min(start + per, n_queries))
        qi = np.repeat(q, n_trials * n_metrics)
        ti = np.tile(np.repeat(np.arange(n_trials, dtype=np.int32), n_metrics), len(q))
        mi = np.tile(np.arange(n_metrics), len(q) * n_trials)
        value = rng.random(len(qi))
        value[rng.random(len(qi)) < 0.05] = np.nan
        rows = pa.table(
            {
                "query_id": qids.take(qi),
                "trial": ti,
                "metric": metrics.take(mi),
                "value": value,
                "stratum": strata.take(qi),
                "latency_ms": rng.gamma(2.0, 50.0, len(qi)),
            }
        )
        done = [(qids[i].as_py(), t, "done", None) for i in q for t in range(n_trials)]
        batches.append((rows, done))
    return batches, metrics.to_pylist()


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def peak_rss_mb() -> float:
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024 if sys.platform != "darwin" else kib / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--metrics", type=int, default=100)
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--batch-queries", type=int, default=200)
    args = ap.parse_args()

    batches, metric_names = make_batches(args.queries, args.metrics, args.trials, args.batch_queries)
    n_rows = sum(b[0].num_rows for b in batches)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.duckdb"
        t0, c0 = time.perf_counter(), cpu_s()
        with Store.open(path) as store:
            run_id = store.create_run(RunRecord(name="bench", trials=args.trials))
            for rows, done in batches:
                store.write_batch(run_id, rows, done=done)
            store.finish_run(run_id)
        write_s, write_cpu = time.perf_counter() - t0, cpu_s() - c0

        t0, c0 = time.perf_counter(), cpu_s()
        with Store.open(path, read_only=True) as store:
            wide = store.results_wide(run_id, metric_names)
        read_s, read_cpu = time.perf_counter() - t0, cpu_s() - c0
        size_mb = path.stat().st_size / 2**20

    n_undefined = int(np.isnan(wide.values).sum())
    print(f"rows written      {n_rows:,} in {len(batches)} batches of {batches[0][0].num_rows:,} rows")
    print(
        f"write (open..close) {write_s:6.2f} s wall, {write_cpu:5.2f} s CPU   {n_rows / write_s:,.0f} rows/s   "
        f"file {size_mb:.0f} MB"
    )
    print(
        f"results_wide      {read_s:6.2f} s wall, {read_cpu:5.2f} s CPU   shape {wide.values.shape}, "
        f"{n_undefined:,} undefined (NaN)"
    )
    print(f"peak RSS          {peak_rss_mb():,.0f} MB")


if __name__ == "__main__":
    main()
