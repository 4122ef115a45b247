"""ANN recall curve at scale: 100,000 synthetic clustered vectors (dim 64) x 8 efSearch values, end to end.

Times each phase (exact float64 ground truth, HNSW build, the 8-point recall curve) against the 60 s
target, and sets the ground-truth + recall step beside the per-query loop the handbook sketches for ANN
recall (argsort of ``vectors @ q`` per query, set intersection), run on a subset and scaled, with the
ratio and a check that both give the same recall.

    python benchmarks/ann_curve.py [--n 100000] [--dim 64] [--queries 1000] [--k 10] [--threads 2]

``--tiny`` runs 2,000 vectors, 50 queries and a 20-query loop: a smoke run for CI
(tests/test_benchmarks_run.py), whose figures mean nothing.
"""

from __future__ import annotations

import argparse
import time

import faiss
import numpy as np

from ragassay.metrics import ann

EF_VALUES = (8, 16, 24, 32, 48, 64, 96, 128)


def loop_recall(base: np.ndarray, queries: np.ndarray, found: np.ndarray, k: int) -> float:
    """The per-query sketch: full argsort of the scores of each query, set overlap with the index's ids."""
    hits = 0.0
    for q, f in zip(queries, found, strict=True):
        exact = set(np.argsort(-(base @ q))[:k].tolist())
        hits += len(exact & set(f[:k].tolist())) / k
    return hits / len(queries)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2, help="OpenMP threads for the HNSW build")
    ap.add_argument("--loop-queries", type=int, default=100, help="queries the per-query loop runs on")
    ap.add_argument("--tiny", action="store_true", help="2,000 vectors, 50 queries, a 20-query loop (CI)")
    args = ap.parse_args()
    if args.tiny:
        args.n, args.queries, args.loop_queries = 2_000, 50, 20

    t_all = time.perf_counter()
    t = time.perf_counter()
    base, queries = ann.clustered_vectors(args.n, args.dim, n_queries=args.queries, seed=0)
    t_data = time.perf_counter() - t

    t = time.perf_counter()
    truth = ann.exact_topk(base, queries, args.k)
    t_truth = time.perf_counter() - t

    index, cost = ann.build_with_cost("hnsw", base, m=16, ef_construction=64, threads=args.threads)

    t = time.perf_counter()
    curve = ann.ann_curve(index, base, queries, args.k, EF_VALUES, truth=truth)
    t_curve = time.perf_counter() - t
    total = time.perf_counter() - t_all

    print(f"{args.n:,} vectors x dim {args.dim}, {args.queries} queries, k={args.k}, faiss {faiss.__version__}")
    print(f"data {t_data:.2f} s | exact ground truth {t_truth:.2f} s | HNSW build (M=16, efC=64, "
          f"{args.threads} threads) {cost.seconds:.2f} s, {cost.index_bytes / args.n:.0f} bytes/vector, "
          f"peak +{(cost.peak_bytes or 0) / 2**20:.0f} MiB | curve {t_curve:.2f} s")
    print(f"{'efSearch':>8} {'recall':>8} {'p10':>6} {'min':>6} {'<0.9':>6} {'qps':>9}")
    for p in curve["points"]:
        print(f"{p['value']:>8} {p['recall']:>8.4f} {p['recall_p10']:>6.2f} {p['recall_min']:>6.2f} "
              f"{p['share_below_0.9']:>6.3f} {p['qps']:>9.0f}")
    print(f"TOTAL {total:.1f} s (target <= 60 s): {'OK' if total <= 60 else 'OVER'}")

    # ground truth + recall for one curve point: ragassay (chunked float64 matmul) vs the per-query loop
    m = min(args.loop_queries, args.queries)
    found = index.search(queries, args.k, knob=EF_VALUES[0])
    t = time.perf_counter()
    sub_truth = ann.exact_topk(base, queries[:m], args.k)
    ours = float(np.nanmean(ann.ann_recall(found[:m], base, queries[:m], sub_truth)))
    t_ours = time.perf_counter() - t
    t = time.perf_counter()
    ref = loop_recall(base, queries[:m], found[:m], args.k)
    t_loop = time.perf_counter() - t
    print(f"ground truth + recall on {m} queries: ragassay {t_ours * 1000:.0f} ms, per-query loop "
          f"{t_loop * 1000:.0f} ms, ratio {t_loop / t_ours:.1f}x; recall {ours:.4f} vs {ref:.4f}")


if __name__ == "__main__":
    main()
