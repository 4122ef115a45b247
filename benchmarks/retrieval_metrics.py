"""Benchmark: ragassay's ranking metrics against pytrec_eval, ranx and ir_measures on one synthetic run.

10,000 queries x 100 retrieved docs; each query has 3-7 graded relevant docs and some judged non-relevant
ones. Metrics: nDCG@10, recall@100, AP, RR, bpref, judged@10 (pytrec_eval: ndcg_cut_10, recall_100, map,
recip_rank, bpref; it has no judged measure). Run: python benchmarks/retrieval_metrics.py [--queries N]
[--depth D] [--repeat R] [--mem-repeat R]; ``--tiny`` runs 200 queries x 30 docs, best of 1: a smoke run for
CI (tests/test_benchmarks_run.py), whose figures mean nothing.

Inputs, the same for every tool. "files": TREC qrels and run files on disk; the timing covers parsing both,
indexing the labels and scoring. "memory": the labels are indexed once beforehand by every tool (ragassay
``Qrels.from_arrays``, pytrec_eval ``RelevanceEvaluator``, ranx ``Qrels``); the run arrives in each tool's own
in-memory form, for ragassay Arrow string columns (qid, docid) and a float64 numpy score column, i.e. what
pyarrow, pandas or polars hand a user, for the others dict[qid][docid] = score. Inside ragassay's timing: hashing
the ids, grouping and rank-order checks, the duplicate-doc check, the join with the labels, the grade matrix and
the metrics. ragassay uses one worker thread besides the caller (``RAGASSAY_THREADS=1`` turns it off; that row
is printed too); pyarrow's CSV reader uses threads; pytrec_eval, ranx (warm, numba) and ir_measures run as
they come. Every tool is timed best-of-``--repeat`` from files and best-of-``--mem-repeat`` in memory, ranx
cold once (its first call includes compilation).

From the second run this long in a process, ragassay takes its compiled (numba) join; loading numba and the
cached kernels costs 0.6-1 s once per process, so a single run keeps the numpy join. The "1st" and "2nd" rows
time the first two evaluations in a fresh interpreter, and the "numpy" row the numpy join
(``RAGASSAY_JIT=0``), which gives the same values without numba.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from ragassay.metrics import Qrels, Run, Semantics, build_grade_matrix, evaluate, read_qrels, read_run
from ragassay.metrics.trec import write_qrels, write_run

OURS = ["ndcg@10", "recall@100", "ap", "rr", "bpref", "judged@10"]
PTE = {"ndcg_cut.10", "recall.100", "map", "recip_rank", "bpref"}
RANX = ["ndcg@10", "recall@100", "map", "mrr"]
IRM = ["nDCG@10", "R@100", "AP", "RR", "Bpref", "Judged@10"]


def synthesize(n_queries: int, depth: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    qids = np.char.add("q", np.arange(n_queries).astype(str))
    # distinct docs within a ranking (x * depth + a permutation of 0..depth-1), overlapping across queries
    docs = rng.integers(0, 2_000_000 // depth, size=(n_queries, depth)) * depth + rng.permuted(
        np.tile(np.arange(depth), (n_queries, 1)), axis=1
    )
    run_q = np.repeat(qids, depth)
    run_d = np.char.add("d", docs.ravel().astype(str))
    scores = np.sort(rng.random((n_queries, depth)), axis=1)[:, ::-1].ravel() * 100
    n_rel = rng.integers(3, 8, size=n_queries)
    n_non = rng.integers(5, 15, size=n_queries)
    rows_q, rows_d, rows_g = [], [], []
    for i in range(n_queries):
        # half the relevant docs are retrieved at random ranks, the rest are unretrieved ids
        # a query judges up to 21 docs: a shallower run draws all its ranks, and the coin flips follow the ranks
        # drawn (at the default depth the cap is never reached, so the draws are what they always were)
        ranks = rng.choice(depth, size=min(n_rel[i] + n_non[i], depth), replace=False)
        retrieved = docs[i, ranks]
        take = rng.random(len(ranks)) < 0.6
        ids = np.where(take, retrieved, rng.integers(2_000_000, 3_000_000, size=len(ranks)))
        ids = np.unique(ids)
        k = min(len(ids), n_rel[i])
        grades = np.r_[rng.integers(1, 4, size=k), np.zeros(len(ids) - k, dtype=np.int64)]
        rows_q.append(np.full(len(ids), qids[i]))
        rows_d.append(np.char.add("d", ids.astype(str)))
        rows_g.append(grades)
    return (run_q, run_d, scores), (np.concatenate(rows_q), np.concatenate(rows_d), np.concatenate(rows_g))


FIRST_CALLS = """
import sys, time
sys.path.insert(0, {here!r})
import pyarrow as pa
from retrieval_metrics import OURS, synthesize
from ragassay.metrics import Qrels, Run, Semantics, build_grade_matrix, evaluate
(rq, rd, rs), (qq, qd, qg) = synthesize({queries}, {depth})
qrels, cols = Qrels.from_arrays(qq, qd, qg), (pa.array(rq), pa.array(rd), rs)
for _ in range(2):
    t0 = time.perf_counter()
    evaluate(build_grade_matrix(qrels, Run.from_arrays(*cols), ties="trec_eval"), OURS, Semantics.trec_eval())
    print(time.perf_counter() - t0)
"""


def first_calls(queries: int, depth: int) -> list[float]:
    """Seconds of ragassay's first two in-memory evaluations in a fresh interpreter (kernels compiled
    beforehand): the first takes the numpy join, the second loads numba and the cached kernels."""
    code = FIRST_CALLS.format(here=str(Path(__file__).parent), queries=queries, depth=depth)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)  # fills numba's cache
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return [float(x) for x in out.split()]


def timed(fn, repeat: int = 3):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5, help="best of N for the file timings")
    ap.add_argument(
        "--mem-repeat", type=int, default=10, help="best of N for the in-memory timings (every tool alike)"
    )
    ap.add_argument("--tiny", action="store_true", help="200 queries x 30 docs, best of 1 (CI)")
    args = ap.parse_args()
    if args.tiny:
        args.queries, args.depth, args.repeat, args.mem_repeat = 200, 30, 1, 1
    import pytrec_eval

    (rq, rd, rs), (qq, qd, qg) = synthesize(args.queries, args.depth)
    sem = Semantics.trec_eval()
    rows: list[tuple[str, str, float, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        qrels_path, run_path = Path(tmp) / "qrels.txt", Path(tmp) / "run.txt"
        write_qrels(qrels_path, qq, qd, qg)
        write_run(run_path, rq, rd, rs)
        print(
            f"{args.queries} queries x {args.depth} docs; qrels {len(qq)} lines; best of {args.repeat} "
            f"(files), {args.mem_repeat} (memory); "
            f"{os.cpu_count()} cores"
        )

        def ours_files():
            q, r = read_qrels(qrels_path), read_run(run_path)
            return evaluate(build_grade_matrix(q, r, ties="trec_eval"), OURS, sem)

        t, ours = timed(ours_files, args.repeat)
        rows.append(("files", "ragassay", t, "read qrels+run, dup check, join, sort check, 6 metrics"))

        def pte_files():
            with open(qrels_path) as f:
                qrels = pytrec_eval.parse_qrel(f)
            with open(run_path) as f:
                run = pytrec_eval.parse_run(f)
            return pytrec_eval.RelevanceEvaluator(qrels, PTE).evaluate(run)

        t, pte = timed(pte_files, args.repeat)
        rows.append(("files", "pytrec_eval", t, "parse_qrel+parse_run, build evaluator, 5 metrics"))

        import ir_measures

        def irm_files():
            qrels = list(ir_measures.read_trec_qrels(str(qrels_path)))
            run = list(ir_measures.read_trec_run(str(run_path)))
            return ir_measures.calc_aggregate([ir_measures.parse_measure(m) for m in IRM], qrels, run)

        t, irm = timed(irm_files, args.repeat)
        rows.append(("files", "ir_measures", t, "read qrels+run, 6 metrics"))

        from ranx import Qrels as RQrels
        from ranx import Run as RRun
        from ranx import evaluate as rx_eval

        def ranx_files():
            qrels = RQrels.from_file(str(qrels_path), kind="trec")
            run = RRun.from_file(str(run_path), kind="trec")
            return rx_eval(qrels, run, RANX, make_comparable=True)

        t0 = time.perf_counter()
        ranx_files()
        rows.append(("files", "ranx (cold)", time.perf_counter() - t0, "first call: includes numba JIT"))
        t, rx = timed(ranx_files, args.repeat)
        rows.append(("files", "ranx (warm)", t, "read qrels+run, 4 metrics"))

    # in memory: the labels are indexed once (like pytrec_eval's evaluator); the run arrives as columns
    qrels_idx = Qrels.from_arrays(qq, qd, qg)
    cols = (pa.array(rq), pa.array(rd), rs)

    def ours_mem():
        run = Run.from_arrays(*cols)
        return evaluate(build_grade_matrix(qrels_idx, run, ties="trec_eval"), OURS, sem)

    t, ours_m = timed(ours_mem, args.mem_repeat)
    rows.append(("memory", "ragassay", t, "arrow string columns -> hash, dup check, join, matrix, 6 metrics"))
    qrels_d: dict[str, dict[str, int]] = {}
    for a, b, g in zip(qq.tolist(), qd.tolist(), qg.tolist(), strict=True):
        qrels_d.setdefault(a, {})[b] = int(g)
    run_d: dict[str, dict[str, float]] = {}
    for a, b, s in zip(rq.tolist(), rd.tolist(), rs.tolist(), strict=True):
        run_d.setdefault(a, {})[b] = float(s)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels_d, PTE)
    t, _ = timed(lambda: evaluator.evaluate(run_d), args.mem_repeat)
    rows.append(("memory", "pytrec_eval", t, "evaluate(run dict) with a prebuilt evaluator, 5 metrics"))
    rxq, rxr = RQrels(qrels_d), RRun(run_d)
    rx_eval(rxq, rxr, RANX)
    t, _ = timed(lambda: rx_eval(rxq, rxr, RANX), args.mem_repeat)
    rows.append(("memory", "ranx (warm)", t, "evaluate(prebuilt Qrels, Run), 4 metrics"))
    t, _ = timed(
        lambda: ir_measures.calc_aggregate([ir_measures.parse_measure(m) for m in IRM], qrels_d, run_d),
        args.mem_repeat,
    )
    rows.append(("memory", "ir_measures", t, "calc_aggregate(dict qrels, dict run), 6 metrics"))

    os.environ["RAGASSAY_THREADS"] = "1"
    t, _ = timed(ours_mem, args.mem_repeat)
    del os.environ["RAGASSAY_THREADS"]
    rows.append(("memory", "ragassay 1thr", t, "as ragassay, all on the calling thread"))

    os.environ["RAGASSAY_JIT"] = "0"
    t, _ = timed(ours_mem, args.mem_repeat)
    del os.environ["RAGASSAY_JIT"]
    rows.append(("memory", "ragassay numpy", t, "as ragassay, with the numpy join (no numba)"))
    first, second = first_calls(args.queries, args.depth)
    rows.append(("memory", "ragassay 1st", first, "first call in a fresh process: the numpy join"))
    rows.append(("memory", "ragassay 2nd", second, "second call there: loads numba and the cached kernels"))

    def ours_mem_nodup():
        run = Run.from_arrays(*cols)
        return evaluate(
            build_grade_matrix(qrels_idx, run, ties="trec_eval", check_duplicates=False), OURS, sem
        )

    t, _ = timed(ours_mem_nodup, args.mem_repeat)
    rows.append(("memory", "ragassay -dup", t, "as ragassay, without the duplicate-doc check"))

    # agreement check so the timings compare like with like
    mean = {str(m): r.mean() for m, r in ours.items()}
    ref = {
        name: float(np.mean([v[key] for v in pte.values()]))
        for name, key in [
            ("ndcg@10", "ndcg_cut_10"),
            ("recall@100", "recall_100"),
            ("ap", "map"),
            ("rr", "recip_rank"),
            ("bpref", "bpref"),
        ]
    }
    worst = max(abs(mean[k] - v) for k, v in ref.items())
    by_name = {str(m): r for m, r in ours.items()}
    same = total = 0
    for name, key in [("ndcg@10", "ndcg_cut_10"), ("recall@100", "recall_100"), ("ap", "map")] + [
        ("rr", "recip_rank"),
        ("bpref", "bpref"),
    ]:
        per_query = by_name[name].per_query()
        for qid, values in pte.items():
            total += 1
            same += per_query[qid] == values[key]
    print(f"per-query values identical to pytrec_eval (bit for bit): {same} of {total}")
    mem_worst = max(abs(ours_m[m].mean() - r.mean()) for m, r in ours.items())
    print(f"max |ragassay - pytrec_eval| over means: {worst:.2e}; files vs memory: {mem_worst:.2e}")
    print(
        f"ranx ndcg@10 {rx['ndcg@10']:.6f} vs ragassay {mean['ndcg@10']:.6f}; ir_measures Judged@10 "
        f"{irm[ir_measures.parse_measure('Judged@10')]:.6f} vs ragassay {mean['judged@10']:.6f}"
    )
    print(f"\n{'input':7} {'tool':14} {'seconds':>9} {'ragassay x faster':>18}  includes")
    base = {r[0]: r[2] for r in rows if r[1] == "ragassay"}
    for src, tool, t, what in rows:
        print(f"{src:7} {tool:14} {t:9.3f} {t / base[src]:18.1f}  {what}")


if __name__ == "__main__":
    main()
