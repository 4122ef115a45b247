"""Results store write/read speed: 1,000,000 result rows into a fresh DuckDB file, then the pivot back.

Setup: 10,000 queries x 100 metrics x 1 trial (5% of values NaN = undefined), written with
``Store.write_batch`` in batches of 200 queries (20,000 rows) with their done markers, each batch one
transaction as a resumable run writes them, then ``finish_run`` (which checks the run's keys once). Then
``results_wide`` over all 100 metrics. Prints rows/s, wall and CPU times, the file size, the largest
``duckdb_memory()`` total seen after a batch and the process's RSS growth over the write (``/proc``; Linux).
On a shared machine trust the CPU time more than the wall time. Batches are built before the clock starts so
the timing is the store's alone.

The writes run inside ``Store.memory_limited`` as ``score`` runs them (512 MB, one DuckDB thread); ``--threads
N`` caps DuckDB at N threads instead (0: DuckDB's default, one per core).

``--keyed`` also writes the same batches into a version-1 store (``results`` with its primary key, as
before schema version 2), each in its own child process, so the two layouts are compared in one run.

    python benchmarks/store_write.py [--queries 10000] [--metrics 100] [--trials 1] [--batch-queries 200]
                                     [--threads 1] [--keyed]

``--tiny`` writes 200 queries x 10 metrics in batches of 50 queries: a smoke run for CI
(tests/test_benchmarks_run.py), whose figures mean nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
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


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def duckdb_mb(store: Store) -> float:
    return store.connection.execute("SELECT sum(memory_usage_bytes) / 2**20 FROM duckdb_memory()").fetchone()[0]


def make_keyed(path: Path) -> None:
    """A version-1 store: the current tables, ``results`` with the primary key schema version 1 had."""
    with Store.open(path) as store:
        store.connection.execute("ALTER TABLE results ADD PRIMARY KEY (run_id, query_id, trial, metric)")
        store.connection.execute("UPDATE schema_info SET version = 1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--metrics", type=int, default=100)
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--batch-queries", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1, help="DuckDB threads while writing (0 = DuckDB's default)")
    ap.add_argument("--keyed", action="store_true", help="also measure a version-1 (keyed) store")
    ap.add_argument("--tiny", action="store_true", help="200 queries x 10 metrics, batches of 50 (CI)")
    ap.add_argument("--layout", choices=("unkeyed", "keyed"), default="unkeyed", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tiny:
        args.queries, args.metrics, args.batch_queries = 200, 10, 50
    if args.keyed:
        base = [a for a in sys.argv[1:] if a != "--keyed"]
        for layout in ("unkeyed", "keyed"):
            print(f"== {layout} results table" + (" (schema version 2)" if layout == "unkeyed" else
                                                 " (schema version 1)"), flush=True)
            subprocess.run([sys.executable, __file__, *base, "--layout", layout], check=True)
        return

    batches, metric_names = make_batches(args.queries, args.metrics, args.trials, args.batch_queries)
    n_rows = sum(b[0].num_rows for b in batches)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.duckdb"
        if args.layout == "keyed":
            make_keyed(path)
        rss0, duck_peak = rss_mb(), 0.0
        t0, c0 = time.perf_counter(), cpu_s()
        with Store.open(path) as store, store.memory_limited(threads=args.threads or None):
            run_id = store.create_run(RunRecord(name="bench", trials=args.trials))
            for rows, done in batches:
                store.write_batch(run_id, rows, done=done)
                duck_peak = max(duck_peak, duckdb_mb(store))
            rss_peak = rss_mb()
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
    print(f"memory            duckdb_memory() up to {duck_peak:,.0f} MB; RSS {rss0:,.0f} MB before the writes, "
          f"{rss_peak:,.0f} MB after the last batch; peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")


if __name__ == "__main__":
    main()
