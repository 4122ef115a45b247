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
