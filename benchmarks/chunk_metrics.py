"""Benchmark: token-level chunk metrics over a whole run against a per-query Python interval loop.

The peer is the approach of Chroma's chunking_evaluation (``BaseEvaluation._full_precision_score`` and
``_scores_from_dataset_and_retrievals``): for each query, Python lists of (start, end) ranges, a merge of the
reference ranges, pairwise intersections of every retrieved unit with every reference, a union of those
intersections, and sums of range lengths. That package is not installed here (it pulls in chromadb and an
embedding API), so its range algebra is re-implemented below in the same style, on token positions rather
than characters; both sides must agree to 1e-12 on every query.

10,000 queries x 50 retrieved units x 1-4 evidence spans on a line of 5M positional tokens.
Run: python benchmarks/chunk_metrics.py [--queries N] [--units K] [--repeat R]

``--tiny`` runs 200 queries x 10 units, best of 1: a smoke run for CI
(tests/test_benchmarks_run.py), whose figures mean nothing.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ragassay.metrics.tokens import token_metrics


def _union_ranges(ranges):
    ranges = sorted(ranges)
    out = []
    for s, e in ranges:
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _intersect(a, b):
    s, e = max(a[0], b[0]), min(a[1], b[1])
    return (s, e) if s < e else None


def _sum_ranges(ranges):
    return sum(e - s for s, e in ranges)


def loop_metrics(n, ev, ret):
    """Per query: recall, precision, IoU the way the Chroma evaluation computes them, one query at a time."""
    recall, precision, iou = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    for q in range(n):
        refs = _union_ranges(ev.get(q, []))
        units = ret.get(q, [])
        hits = []
        for u in units:
            for r in refs:
                x = _intersect(u, r)
                if x is not None:
                    hits.append(x)
        inter = _sum_ranges(_union_ranges(hits))
        n_e = _sum_ranges(refs)
        n_r = sum(e - s for s, e in units)
        if n_e:
            recall[q] = inter / n_e
        if n_r:
            precision[q] = inter / n_r
        if n_e + n_r - inter:
            iou[q] = inter / (n_e + n_r - inter)
    return recall, precision, iou


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--units", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tiny", action="store_true", help="200 queries x 10 units, best of 1 (CI)")
    args = ap.parse_args()
    if args.tiny:
        args.queries, args.units, args.repeat = 200, 10, 1
    rng = np.random.default_rng(0)
    n, k, line = args.queries, args.units, 5_000_000
    n_ev = rng.integers(1, 5, size=n)
    ev_q = np.repeat(np.arange(n), n_ev)
    centre = rng.integers(0, line - 2_000, size=n)
    ev_lo = centre[ev_q] + rng.integers(0, 1_000, size=len(ev_q))
    ev_hi = ev_lo + rng.integers(5, 80, size=len(ev_q))
    ret_q = np.repeat(np.arange(n), k)
    # half of the units near the query's evidence, half anywhere: realistic hit rates, overlaps included
    near = rng.random(len(ret_q)) < 0.5
    ret_lo = np.where(near, centre[ret_q] + rng.integers(0, 1_200, size=len(ret_q)),
                      rng.integers(0, line - 400, size=len(ret_q)))
    ret_hi = ret_lo + rng.integers(50, 400, size=len(ret_q))

    ev_d: dict[int, list] = {}
    for q, a, b in zip(ev_q.tolist(), ev_lo.tolist(), ev_hi.tolist(), strict=True):
        ev_d.setdefault(q, []).append((a, b))
    ret_d: dict[int, list] = {}
    for q, a, b in zip(ret_q.tolist(), ret_lo.tolist(), ret_hi.tolist(), strict=True):
        ret_d.setdefault(q, []).append((a, b))

    t_ours = min(_time(lambda: token_metrics(n, ev_q, ev_lo, ev_hi, ret_q, ret_lo, ret_hi))
                 for _ in range(args.repeat))
    t_loop = min(_time(lambda: loop_metrics(n, ev_d, ret_d)) for _ in range(args.repeat))
    m = token_metrics(n, ev_q, ev_lo, ev_hi, ret_q, ret_lo, ret_hi)
    ref = loop_metrics(n, ev_d, ret_d)
    for name, a, b in zip(("recall", "precision", "iou"), (m.recall, m.precision, m.iou), ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12, equal_nan=True, err_msg=name)
    print(f"{n:,} queries x {k} units ({len(ev_q):,} evidence spans); values equal on every query")
    print(f"{'implementation':<34} {'best (ms)':>10} {'ratio':>8}")
    print(f"{'per-query interval loop (Chroma)':<34} {t_loop * 1e3:>10.1f} {1.0:>8.1f}")
    print(f"{'ragassay token_metrics':<34} {t_ours * 1e3:>10.1f} {t_loop / t_ours:>7.1f}x")
    print(f"mean recall {np.nanmean(m.recall):.4f}  precision {np.nanmean(m.precision):.4f}  "
          f"IoU {np.nanmean(m.iou):.4f}")


def _time(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
