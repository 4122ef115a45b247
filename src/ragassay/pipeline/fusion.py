"""Rank fusion of retrieval branches.

* Reciprocal-rank fusion (Cormack, Clarke & Buettcher, SIGIR 2009): score(d) = sum_b 1 / (k + rank_b(d)),
  rank 1-based, a branch that did not return d contributes 0; k = 60 by default.
* Weighted score fusion: each branch's scores are min-max normalized over its own candidates
  ((s - min) / (max - min); all 1.0 when max == min), then score(d) = sum_b w_b * norm_b(d).

Ties are broken by the best (smallest) rank d had in any branch, then by unit_id, so fusion is deterministic.
Only the first ``depth`` fused candidates (fusion_depth) are returned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def rrf(branches: Mapping[str, Sequence[str]], k: float = 60.0, depth: int | None = None) -> list[tuple[str, float]]:
    """Fuse ranked id lists by reciprocal rank; returns (id, score) best first."""
    score: dict[str, float] = {}
    best: dict[str, int] = {}
    for name in sorted(branches):
        for r, uid in enumerate(branches[name], start=1):
            score[uid] = score.get(uid, 0.0) + 1.0 / (k + r)
            best[uid] = min(best.get(uid, r), r)
    order = sorted(score, key=lambda u: (-score[u], best[u], u))
    return [(u, score[u]) for u in order[:depth]]


def weighted(
    branches: Mapping[str, Sequence[tuple[str, float]]],
    weights: Mapping[str, float] | None = None,
    depth: int | None = None,
) -> list[tuple[str, float]]:
    """Fuse (id, score) lists by weighted min-max normalized scores; returns (id, score) best first."""
    weights = dict(weights or {})
    unknown = set(weights) - set(branches)
    if unknown:
        raise ValueError(f"fusion weights name branches that are not enabled: {sorted(unknown)}")
    score: dict[str, float] = {}
    best: dict[str, int] = {}
    for name in sorted(branches):
        items = branches[name]
        if not items:
            continue
        w = weights.get(name, 1.0)
        vals = [s for _, s in items]
        lo, hi = min(vals), max(vals)
        for r, (uid, s) in enumerate(items, start=1):
            norm = 1.0 if hi == lo else (s - lo) / (hi - lo)
            score[uid] = score.get(uid, 0.0) + w * norm
            best[uid] = min(best.get(uid, r), r)
    order = sorted(score, key=lambda u: (-score[u], best[u], u))
    return [(u, score[u]) for u in order[:depth]]


def fuse_batch(
    branches: Mapping[str, Sequence[tuple[np.ndarray, np.ndarray]]],
    method: str = "rrf",
    k: float = 60.0,
    weights: Mapping[str, float] | None = None,
    depth: int | None = None,
    tiebreak: np.ndarray | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`rrf` / :func:`weighted` for many queries at once, on integer unit rows.

    ``branches[name][q]`` is query q's (rows, scores) list of that branch, best first, rows unique within
    it. Same formulas and tie keys as the dict versions; ``tiebreak[row]`` is the rank of the row's
    unit_id in sorted string order (without it, ties fall to the row number). Contributions are added in
    sorted branch order with ``np.add.at`` (which applies them in sequence), so every fused score equals
    the dict version's bit for bit. Returns per query (rows int64, scores float64), at most ``depth`` long.
    """
    if method not in ("rrf", "weighted"):
        raise ValueError(f"unknown fusion method {method!r}; use rrf or weighted")
    w = dict(weights or {})
    if method == "weighted":
        unknown = set(w) - set(branches)
        if unknown:
            raise ValueError(f"fusion weights name branches that are not enabled: {sorted(unknown)}")
    nq = max((len(v) for v in branches.values()), default=0)
    qs, rows, contrib, ranks = [], [], [], []
    for name in sorted(branches):
        for q, (r, v) in enumerate(branches[name]):
            n = len(r)
            if not n:
                continue
            rk = np.arange(1, n + 1, dtype=np.int64)
            if method == "rrf":
                c = 1.0 / (k + rk)
            else:
                v = np.asarray(v, dtype=np.float64)
                lo, hi = v.min(), v.max()
                c = w.get(name, 1.0) * (np.ones(n) if hi == lo else (v - lo) / (hi - lo))
            qs.append(np.full(n, q, dtype=np.int64))
            rows.append(np.asarray(r, dtype=np.int64))
            contrib.append(c)
            ranks.append(rk)
    empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))
    if not qs:
        return [empty] * nq
    q_all, r_all = np.concatenate(qs), np.concatenate(rows)
    width = int(r_all.max()) + 1
    cell, inv = np.unique(q_all * width + r_all, return_inverse=True)
    score = np.zeros(len(cell), dtype=np.float64)
    np.add.at(score, inv, np.concatenate(contrib))
    best = np.full(len(cell), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(best, inv, np.concatenate(ranks))
    cq, cr = cell // width, cell % width
    tie = cr if tiebreak is None else np.asarray(tiebreak)[cr]
    order = np.lexsort((tie, best, -score, cq))
    bounds = np.searchsorted(cq[order], np.arange(nq + 1))
    out = []
    for q in range(nq):
        sel = order[bounds[q] : bounds[q + 1]][:depth]
        out.append((cr[sel], score[sel]))
    return out
