"""Benchmark: `ragassay convert` of a JSONL trace file, then `ragassay score` of the dataset and of the JSONL.

Each command runs as its own process, one after the other, measured with ``os.wait4``: wall seconds, CPU
seconds (user + system; the machine may be shared, so both are printed, with the load average) and peak
RSS. The output dataset's size is printed beside the JSONL's, and the two scored runs are compared: the
same result rows and query status (written_at aside).

Usage: python benchmarks/convert_scale.py [TRACES.jsonl --golden G --corpus C] [--out DIR] [--rows-per-file N]
(the trace file of benchmarks/score_scale.py --keep DIR fits: DIR/traces100000.jsonl, DIR/golden100000,
DIR/corpus). Without TRACES.jsonl it builds those inputs first, ``--queries`` traces (default 100,000) over
``--docs`` documents, in OUT/inputs.

``--tiny`` builds 200 traces over 200 documents: a smoke run for CI (tests/test_benchmarks_run.py), whose
figures mean nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RAGASSAY = str(Path(sys.executable).with_name("ragassay"))


def measured(args: list[str]) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"{' '.join(args)} exited {code}:\n{err}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024}


def size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def same_runs(a: Path, b: Path) -> bool:
    from ragassay.store import Store

    with Store.open(a, read_only=True) as sa, Store.open(b, read_only=True) as sb:
        (ra,), (rb,) = sa.list_runs(), sb.list_runs()
        rows_a = sa.results(ra.run_id).drop_columns(["run_id"])
        rows_b = sb.results(rb.run_id).drop_columns(["run_id"])

        def status(st, run_id):
            return sorted((r["query_id"], r["trial"], r["status"], r["error"])
                          for r in st.query_status(run_id).to_pylist())

        return rows_a.equals(rows_b) and status(sa, ra.run_id) == status(sb, rb.run_id)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", type=Path, nargs="?")
    ap.add_argument("--golden", type=Path)
    ap.add_argument("--corpus", type=Path)
    ap.add_argument("--out", type=Path, default=Path("/tmp/convert-bench"))
    ap.add_argument("--rows-per-file", type=int, default=None)
    ap.add_argument("--queries", type=int, default=100_000, help="traces to build when TRACES is not given")
    ap.add_argument("--docs", type=int, default=2_000, help="documents to build when TRACES is not given")
    ap.add_argument("--tiny", action="store_true", help="build 200 traces over 200 documents (CI)")
    a = ap.parse_args()
    given = [x is not None for x in (a.traces, a.golden, a.corpus)]
    if any(given) and not all(given):
        ap.error("give TRACES.jsonl with --golden and --corpus, or none of them (to build synthetic inputs)")
    if a.tiny:
        a.queries, a.docs = 200, 200
    a.out.mkdir(parents=True, exist_ok=True)
    if a.traces is None:
        inputs = a.out / "inputs"
        measured([sys.executable, str(HERE / "score_scale.py"), "--build-only", str(a.queries), "--docs",
                  str(a.docs), "--keep", str(inputs)])
        a.traces, a.golden, a.corpus = (inputs / f"traces{a.queries}.jsonl", inputs / f"golden{a.queries}",
                                        inputs / "corpus")
    ds = a.out / "dataset"
    for p in (ds, a.out / "jsonl.duckdb", a.out / "parquet.duckdb"):
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    rows = ["--rows-per-file", str(a.rows_per_file)] if a.rows_per_file else []
    print(f"load average before: {os.getloadavg()}")
    results = {"convert": measured([RAGASSAY, "convert", str(a.traces), str(ds), *rows])}
    for name, src in (("score jsonl", a.traces), ("score parquet", ds)):
        db = a.out / f"{name.split()[1]}.duckdb"
        results[name] = measured([RAGASSAY, "score", str(src), "--golden", str(a.golden), "--corpus",
                                  str(a.corpus), "--store", str(db), "--json"])
    print(f"load average after: {os.getloadavg()}")
    print(f"{'step':<15}{'wall s':>9}{'CPU s':>9}{'peak RSS MiB':>14}")
    for name, r in results.items():
        print(f"{name:<15}{r['wall']:>9.2f}{r['cpu']:>9.2f}{r['rss_mib']:>14.0f}")
    print(f"JSONL {size(a.traces) / 1e6:,.1f} MB -> Parquet {size(ds) / 1e6:,.1f} MB "
          f"({len(list(ds.glob('*.parquet')))} files)")
    print("stored runs equal:", same_runs(a.out / "jsonl.duckdb", a.out / "parquet.duckdb"))


if __name__ == "__main__":
    main()
