"""Benchmark: score a partitioned Parquet trace dataset of FILES × TRACES on a local 2-CPU Ray cluster, and
report the driver's peak RSS (target: under 1 GB at 1,000,000 traces) and the workers'.

Input: the corpus, golden set and trace generator of ``benchmarks/score_scale.py`` (imported, not copied)
with ``--units`` fused units per trace (default 10, not its 50: 1M traces × 50 units would need ~25 GB of
JSON on the way and hours on 2 shared cores). ``--traces`` queries make the golden set; file k of the dataset
holds every query's trial k, so FILES × TRACES traces are one run.

The cluster is started by a helper process (``ray.init(num_cpus=2)``) and the driver is ``ragassay score DIR
--executor ray:ADDRESS``, its own process: its peak RSS and CPU seconds come from ``os.wait4`` (no Ray
process is its child). The workers' peak RSS is each worker process's VmHWM read before the cluster stops.

Usage: python benchmarks/ray_score_scale.py [--files 20] [--traces 50000] [--units 10] [--docs 2000] [--keep DIR]

``--tiny`` scores 2 files x 200 traces of 5 units over 200 documents: a smoke run for CI
(tests/test_benchmarks_run.py), whose figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import score_scale  # noqa: E402

from ragassay.trace.parquet import HEADER_KEY, TRACE_SCHEMA, trace_row  # noqa: E402


def build(root: Path, files: int, traces: int, units: int, n_docs: int = score_scale.N_DOCS) -> dict:
    score_scale.UNITS = units
    paths = score_scale.build(root, traces, n_docs=n_docs)
    ds = root / f"dataset{files}x{traces}"
    if ds.exists():
        return {**paths, "dataset": ds}
    with paths["traces"].open("rb") as fh:
        header = json.loads(fh.readline())
        header.pop("type")
        rows = [trace_row(json.loads(line)) for line in fh]
    schema = TRACE_SCHEMA.with_metadata({HEADER_KEY: json.dumps(header)})
    base = pa.Table.from_pylist(rows, schema=schema)
    del rows
    ds.mkdir()
    for k in range(files):
        t = base.set_column(base.schema.get_field_index("trial"), "trial",
                            pa.array([k] * base.num_rows, pa.int64()))
        t = t.set_column(t.schema.get_field_index("trace_id"), "trace_id",
                         pc.binary_join_element_wise(base.column("trace_id"), str(k), "/"))
        pq.write_table(t, ds / f"part-{k:03d}.parquet", row_group_size=8192)
    return {**paths, "dataset": ds}


HEAD = """
import sys, ray
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=300 * 1024 * 1024)
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()
ray.shutdown()
"""


def _worker_peaks(root: int) -> dict[int, float]:
    """VmHWM (MB) of every Ray worker process alive now under ``root`` (the helper that started the cluster),
    by pid: only this cluster's, not those of another Ray cluster on the same machine."""
    procs: dict[int, tuple[int, bytes]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            procs[int(pid)] = (ppid, Path(f"/proc/{pid}/cmdline").read_bytes())
        except (OSError, ValueError, IndexError):
            continue
    tree, grew = {root}, True
    while grew:
        more = {p for p, (pp, _) in procs.items() if pp in tree} - tree
        tree |= more
        grew = bool(more)
    out = {}
    for pid in tree - {root}:
        cmd = procs[pid][1]
        if not (cmd.startswith(b"ray::") or b"default_worker.py" in cmd):
            continue
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    out[pid] = int(line.split()[1]) / 1024
        except OSError:
            continue
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--traces", type=int, default=50_000, help="queries, and traces per file")
    ap.add_argument("--units", type=int, default=10)
    ap.add_argument("--docs", type=int, default=score_scale.N_DOCS, help="documents in the synthetic corpus")
    ap.add_argument("--keep", type=Path, default=None, help="build/reuse the inputs here")
    ap.add_argument("--tiny", action="store_true", help="2 files x 200 traces, 5 units, 200 documents (CI)")
    args = ap.parse_args()
    if args.tiny:
        args.files, args.traces, args.units, args.docs = 2, 200, 5, 200
    root = args.keep or Path(tempfile.mkdtemp(prefix="ray-score-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    paths = build(root, args.files, args.traces, args.units, args.docs)
    print(f"inputs: {args.files} files x {args.traces:,} traces, {args.units} fused units each "
          f"({sum(f.stat().st_size for f in paths['dataset'].glob('*.parquet')) / 1e6:.0f} MB Parquet), "
          f"built in {time.perf_counter() - t0:.0f} s", flush=True)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_AUTH_MODE": "disabled",
           "TOKENIZERS_PARALLELISM": "false"}
    # the cluster lives in a helper process of its own and stops when the helper's stdin closes: never
    # `ray stop`, which would stop every Ray cluster on the machine
    head = subprocess.Popen([sys.executable, "-c", HEAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        address = head.stdout.readline().strip()
        store = root / "ray.duckdb"
        store.unlink(missing_ok=True)
        cmd = [str(Path(sys.executable).with_name("ragassay")), "score", str(paths["dataset"]), "--golden",
               str(paths["golden"]), "--corpus", str(paths["corpus"]), "--store", str(store), "--executor",
               f"ray:{address}", "--json"]
        # a job's workers exit with its driver: sample their high-water marks while it runs
        peaks: dict[int, float] = {}
        stop = threading.Event()

        def sample() -> None:
            # often enough to see the workers of a run that lasts a second or two
            while not stop.wait(0.25):
                peaks.update(_worker_peaks(head.pid))

        watcher = threading.Thread(target=sample, daemon=True)
        watcher.start()
        try:
            wall, rss, out, cpu = score_scale._run(cmd)
        finally:
            stop.set()
            watcher.join()
        workers = sorted(peaks.values())[-2:]
    finally:
        head.stdin.close()
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
    info = json.loads(out)["import"]
    load = os.getloadavg()
    print(f"scored {info['n_traces']:,} traces ({info['schema_failures']} problems, {info['missing']} missing) "
          f"on 2 Ray workers in {wall:.1f} s wall")
    print(f"driver: peak RSS {rss:,.0f} MB, CPU {cpu:.1f} s (user + system)")
    if workers:
        print(f"workers (the two largest): peak RSS {', '.join(f'{w:,.0f}' for w in sorted(workers))} MB")
    else:
        print("workers: none seen alive by the sampler (peak RSS not measured)")
    print(f"load average after: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
