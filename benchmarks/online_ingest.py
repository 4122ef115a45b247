"""Production traffic in: a simulated month of 100,000 requests through `ragassay online ingest`,
`ragassay online signals` and `ragassay online judge` (local lexical judge on a 2% sample, failures oversampled
5x), each run as a whole `ragassay` process (wall time, CPU, peak RSS of that process).

    python benchmarks/online_ingest.py [--records 100000] [--days 30]

Also measured: the same ingest at a quarter of the records, a re-ingest of the same file (skipped by its
sha256), the rephrase rule against the simulator's ground truth (precision and recall), and the judged
faithfulness, weighted and unweighted, against the simulator's true rate (``supported_answers / answered``).
The judge must be validated: as tests/online/test_judge_sample.py does, the script stores a validation record
meeting the floor for the local judge's pins (a benchmark shortcut, not a validation).

``--tiny`` runs 3,000 requests over 3 days: a smoke run for CI (tests/test_benchmarks_run.py), whose figures
mean nothing.

Figures on the development machine (2 cores shared with other work, so wall times vary by up to 2x; Python
3.11, DuckDB 2.0.1). 100,000 requests over 30 days:

    simulate 100000 records over 30 days: 3.31 s wall, 92.9 MB JSONL
    ingest 100000 records: 4.51 s wall, 3.43 s CPU, 22,168 records/s, peak RSS 474 MB, 3.3 MB Parquet in 30 files
    ingest 25000 records: 2.13 s wall, peak RSS 328 MB (memory at a quarter of the records)
    re-ingest of the same file (skipped by sha256): 0.72 s wall
    signals over 30 days: 1.55 s wall, peak RSS 190 MB
    rephrase rule vs simulated truth: precision 0.972 recall 0.986 (7300 true rephrases)
    judge (local lexical) on a 2% sample, failures x5, over 30 days: 1.78 s wall, 2.01 s CPU, peak RSS 256 MB, 3043 requests judged (1217 with a failure signal) of 100000
    faithfulness: weighted 0.869 [0.860, 0.879] (n=2725), unweighted 0.651, simulator's truth 0.874

With ``--records 1000000`` (931 MB of JSONL): simulate 26 s wall; ingest 21.4 s wall, 25.3 s CPU, peak RSS
574 MB, a quarter (250,000) 531 MB; signals 0.9 s, 192 MB; judge 7.2 s wall, 8.5 s CPU, peak RSS 372 MB
for 29,484 judged requests; faithfulness weighted 0.874 [0.871, 0.877], unweighted 0.660, truth 0.873. The
ingest's peak is its reading pass (one batch of 16,384 records, with their texts) plus DuckDB's working memory,
capped at its 256 MB memory limit by spilling to disk. The judge's design pass holds the sampling columns of
every record in the window as Arrow columns (no Python object per record), so it grows slowly with the records.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNNER = ("import sys\n"
          "from ragassay.cli import app\n"
          "app.COMMANDS.setdefault('online', ('online', 'Production traffic.'))\n"
          "app.main(sys.argv[1:])\n")


def run(args: list[str], stdout: Path | None = None) -> tuple[float, float, float]:
    """``ragassay ARGS`` in a process of its own: (wall s, CPU s, peak RSS MB) of that process. Its standard
    output goes to the file ``stdout`` (default: discarded); its standard error to a temporary file, read
    after it exits."""
    t0 = time.perf_counter()
    with (open(stdout, "wb") if stdout else open(os.devnull, "wb")) as out, tempfile.TemporaryFile() as errf:
        proc = subprocess.Popen([sys.executable, "-c", RUNNER, *args], stdout=out, stderr=errf,
                                env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        errf.seek(0)
        err = errf.read().decode(errors="replace")
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"ragassay {' '.join(args)} exited {proc.returncode}:\n{err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main(records: int, days: int) -> None:
    import duckdb

    from ragassay.online.simulate import simulate
    from ragassay.online.store import open_records, record_files

    with tempfile.TemporaryDirectory(prefix="ragassay-bench-") as tmp:
        tmp = Path(tmp)
        src = tmp / "traffic.jsonl"
        t0 = time.perf_counter()
        sim = simulate(src, records=records, days=days, seed=0, keep_truth=True)
        print(f"simulate {records} records over {days} days: {time.perf_counter() - t0:.2f} s wall, "
              f"{src.stat().st_size / 1e6:.1f} MB JSONL")
        store = tmp / "s.duckdb"
        wall, cpu, rss = run(["online", "ingest", str(src), "--store", str(store)])
        size = sum(p.stat().st_size for p in record_files(store)) / 1e6
        print(f"ingest {records} records: {wall:.2f} s wall, {cpu:.2f} s CPU, {records / wall:,.0f} records/s, "
              f"peak RSS {rss:.0f} MB, {size:.1f} MB Parquet in {len(record_files(store))} files")
        quarter = records // 4
        part = tmp / "quarter.jsonl"
        with src.open("rb") as f, part.open("wb") as g:
            for _, line in zip(range(quarter), f, strict=False):
                g.write(line)
        wall_q, _, rss_q = run(["online", "ingest", str(part), "--store", str(tmp / "q.duckdb")])
        print(f"ingest {quarter} records: {wall_q:.2f} s wall, peak RSS {rss_q:.0f} MB (memory at a quarter of the "
              "records)")
        wall, _, _ = run(["online", "ingest", str(src), "--store", str(store)])
        print(f"re-ingest of the same file (skipped by sha256): {wall:.2f} s wall")
        wall, _, rss = run(["online", "signals", "--store", str(store), "--json"])
        print(f"signals over {days} days: {wall:.2f} s wall, peak RSS {rss:.0f} MB")
        con = duckdb.connect()
        flagged = {r[0] for r in con.execute(f"SELECT request_id FROM {open_records(con, store)} WHERE rephrased")
                   .fetchall()}
        con.close()
        hit = len(flagged & sim.truth_rephrased)
        precision = hit / len(flagged) if flagged else float("nan")
        recall = hit / len(sim.truth_rephrased) if sim.truth_rephrased else float("nan")
        print(f"rephrase rule vs simulated truth: precision {precision:.3f} recall {recall:.3f} "
              f"({len(sim.truth_rephrased)} true rephrases)")
        judge_step(tmp, store, sim.supported_answers / sim.answered, days)


def judge_step(tmp: Path, store: Path, truth: float, days: int) -> None:
    """``online judge --sample 2% --oversample failures=5`` with the local lexical judge, against the simulator's
    true faithfulness. The judge must be validated; as in tests/online/test_judge_sample.py, a validation
    record that meets the floor is stored for its pins (a benchmark shortcut, not a validation)."""
    import json

    from ragassay.judges.config import judge_settings, load_judge_config
    from ragassay.store import Store

    cfg_path = tmp / "judge.yaml"
    cfg_path.write_text(json.dumps({"provider": "local", "model": "lexical", "metrics": ["faithfulness"]}))
    pins = load_judge_config(cfg_path).pins()
    ci = {"value": 0.85, "ci_low": 0.75, "ci_high": 0.92, "defined": True}
    with Store.open(store) as st:
        st.record_judge_validation({
            "judge_model": pins["judge_model"], "rubric_sha": pins["rubric_sha"], "prompt_sha": pins["prompt_sha"],
            "judge_settings": judge_settings(pins), "kind": "support", "scale": "binary",
            "label_set_version": "ab" * 32, "labelled_by": "human", "n_items": 150, "n": 150, "kappa": 0.85,
            "kappa_low": 0.75, "kappa_high": 0.92, "min_class_recall": 0.8,
            "figures": {"scale": "binary", "kappa": ci, "per_class": [
                {"label": c, "support": 50, "recall": {"value": 0.85, "ci_low": 0.7, "ci_high": 0.95}}
                for c in ("a", "b", "c")]}})
    out = tmp / "judge.json"
    wall, cpu, rss = run(["online", "judge", "--store", str(store), "--judge", str(cfg_path), "--sample", "2%",
                          "--oversample", "failures=5", "--json"], stdout=out)
    rep = json.loads(out.read_text())
    c = rep["counts"]
    print(f"judge (local lexical) on a 2% sample, failures x5, over {days} days: {wall:.2f} s wall, {cpu:.2f} s CPU, "
          f"peak RSS {rss:.0f} MB, {c['judged_now']} requests judged ({c['sampled_failures']} with a failure "
          f"signal) of {c['records']}")
    row = next(r for r in rep["quality"] if r["metric"] == "faithfulness" and r["day"] == "all"
               and r["stratum"] == "all")
    print(f"faithfulness: weighted {row['value']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}] "
          f"(n={row['n_defined']}), unweighted {row['unweighted']:.3f}, simulator's truth {truth:.3f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--tiny", action="store_true", help="3,000 requests over 3 days (CI smoke run)")
    a = ap.parse_args()
    if a.tiny:
        a.records, a.days = 3000, 3
    main(a.records, a.days)
