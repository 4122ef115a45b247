"""Benchmark: whole-process wall time of the ragassay command line, start-up included.

Times, each as a fresh process (subprocess, best of ``--repeat``):

- ``ragassay --help`` and ``ragassay --version`` (target: ``--help`` <= 0.3 s);
- ``ragassay trec QRELS RUN -m ndcg@10 -m recall@100 -m ap --json`` on 10,000 queries x 100 retrieved docs
  (the synthetic data of ``retrieval_metrics.py``, written as TREC files to a temp dir), side by side with the
  five-line pytrec_eval script below on the same files and measures (target: ragassay >= 2x faster).

Each figure is reported as wall time and as the child's CPU time (user + sys, from ``RUSAGE_CHILDREN``), which a
busy shared machine disturbs less; both are the best of the repeats. The two tools' means are compared too, so
a fast wrong answer cannot pass. Run:
``python benchmarks/cli_startup.py [--queries N] [--depth D] [--repeat R]``

``--tiny`` runs 200 queries x 30 docs, best of 1: a smoke run for CI
(tests/test_benchmarks_run.py), whose figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# The peer: what a user writes to score TREC files with pytrec_eval (file parsing included, like ragassay trec).
PYTREC_SCRIPT = """\
import sys, json, pytrec_eval
qrels = pytrec_eval.parse_qrel(open(sys.argv[1]))
run = pytrec_eval.parse_run(open(sys.argv[2]))
res = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100", "map"}).evaluate(run)
print(json.dumps({m: sum(q[m] for q in res.values()) / len(res) for m in ("ndcg_cut_10", "recall_100", "map")}))
"""
OURS_TO_PTE = {"ndcg@10": "ndcg_cut_10", "recall@100": "recall_100", "ap": "map"}


def ragassay_cmd() -> list[str]:
    """The installed console script next to this interpreter (what a user runs), else the module entry."""
    script = shutil.which("ragassay", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-c", "from ragassay.cli.app import main; main()"]


def best_of(cmd: list[str], repeat: int) -> tuple[float, float, str]:
    """Best wall time and best CPU time (user + sys) of ``repeat`` runs of ``cmd`` as a new process, and the
    last run's stdout. Children run one at a time, so the change in RUSAGE_CHILDREN is this child's own."""
    best, best_cpu, out = float("inf"), float("inf"), ""
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        elapsed = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed with exit {proc.returncode}:\n{proc.stderr}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        best, best_cpu, out = min(best, elapsed), min(best_cpu, cpu), proc.stdout
    return best, best_cpu, out


def write_files(folder: Path, n_queries: int, depth: int) -> tuple[Path, Path]:
    sys.path.insert(0, str(HERE))
    from retrieval_metrics import synthesize

    from ragassay.metrics.trec import write_qrels, write_run

    (rq, rd, rs), (qq, qd, qg) = synthesize(n_queries, depth)
    qrels, run = folder / "qrels.txt", folder / "run.txt"
    write_qrels(qrels, qq, qd, qg)
    write_run(run, rq, rd, rs)
    return qrels, run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5, help="best of N, every timing a fresh process")
    ap.add_argument("--tiny", action="store_true", help="200 queries x 30 docs, best of 1 (CI)")
    args = ap.parse_args()
    if args.tiny:
        args.queries, args.depth, args.repeat = 200, 30, 1
    cli = ragassay_cmd()
    print(f"whole process, best of {args.repeat} (wall | CPU user+sys); ragassay = {' '.join(cli)}; "
          f"load average {os.getloadavg()[0]:.2f}")
    for label, extra in (("ragassay --help", ["--help"]), ("ragassay --version", ["--version"])):
        t, cpu, _ = best_of(cli + extra, args.repeat)
        print(f"  {label:<34} {t:7.3f} s | {cpu:6.3f} s")
    with tempfile.TemporaryDirectory() as tmp:
        qrels, run = write_files(Path(tmp), args.queries, args.depth)
        script = Path(tmp) / "pte.py"
        script.write_text(PYTREC_SCRIPT)
        ours_cmd = cli + ["trec", str(qrels), str(run), "-m", "ndcg@10", "-m", "recall@100", "-m", "ap", "--json"]
        pte_cmd = [sys.executable, str(script), str(qrels), str(run)]
        # the two tools take turns, so a burst of load from elsewhere falls on both rather than on one
        ours_runs, pte_runs = [], []
        for _ in range(args.repeat):
            ours_runs.append(best_of(ours_cmd, 1))
            pte_runs.append(best_of(pte_cmd, 1))
    t_ours, cpu_ours = min(r[0] for r in ours_runs), min(r[1] for r in ours_runs)
    t_pte, cpu_pte = min(r[0] for r in pte_runs), min(r[1] for r in pte_runs)
    ours = {OURS_TO_PTE[m]: v["mean"] for m, v in json.loads(ours_runs[-1][2])["metrics"].items()}
    pte = json.loads(pte_runs[-1][2])
    gap = max(abs(ours[m] - pte[m]) for m in pte)
    workload = f"{args.queries:,} queries x {args.depth} docs"
    print(f"  {'ragassay trec (' + workload + ')':<34} {t_ours:7.3f} s | {cpu_ours:6.3f} s")
    print(f"  {'pytrec_eval script (same files)':<34} {t_pte:7.3f} s | {cpu_pte:6.3f} s")
    print(f"  ratio pytrec_eval / ragassay trec: {t_pte / t_ours:.2f}x wall, {cpu_pte / cpu_ours:.2f}x CPU   "
          f"(largest |mean difference| {gap:.1e}; load average now {os.getloadavg()[0]:.2f})")
    if gap > 1e-9:
        raise SystemExit(f"the means disagree: ragassay {ours} vs pytrec_eval {pte}")


if __name__ == "__main__":
    main()
