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


class RankedLists:
    """Ranked (row, score) lists of many queries in three flat arrays.

    Query q's list, best first, is ``rows[offsets[q]:offsets[q + 1]]`` with its ``scores``. Indexing gives
    that (rows, scores) pair as views, so a batch's lists cost three arrays, not one pair per query.
    """

    __slots__ = ("offsets", "rows", "scores")

    def __init__(self, offsets: np.ndarray, rows: np.ndarray, scores: np.ndarray):
        self.offsets, self.rows, self.scores = offsets, rows, scores

    @classmethod
    def from_pairs(cls, pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> RankedLists:
        lens = np.fromiter((len(r) for r, _ in pairs), dtype=np.int64, count=len(pairs))
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        rows = np.concatenate([np.asarray(r, dtype=np.int64) for r, _ in pairs]) if len(pairs) else \
            np.zeros(0, dtype=np.int64)
        scores = np.concatenate([np.asarray(v, dtype=np.float64) for _, v in pairs]) if len(pairs) else \
            np.zeros(0, dtype=np.float64)
        return cls(offsets, rows, scores)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, q: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.offsets[q], self.offsets[q + 1]
        return self.rows[a:b], self.scores[a:b]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def query_of_item(self) -> np.ndarray:
        return np.repeat(np.arange(len(self), dtype=np.int64), self.lengths())

    def ranks(self) -> np.ndarray:
        """1-based rank of every item within its query's list."""
        return np.arange(len(self.rows), dtype=np.int64) - np.repeat(self.offsets[:-1], self.lengths()) + 1


def fuse_batch(
    branches: Mapping[str, RankedLists | Sequence[tuple[np.ndarray, np.ndarray]]],
    method: str = "rrf",
    k: float = 60.0,
    weights: Mapping[str, float] | None = None,
    depth: int | None = None,
    tiebreak: np.ndarray | None = None,
) -> RankedLists:
    """:func:`rrf` / :func:`weighted` for many queries at once, on integer unit rows, as array operations.

    ``branches[name]`` holds each query's (rows, scores) list of that branch, best first, rows unique
    within it (a :class:`RankedLists` or a sequence of pairs). Same formulas and tie keys as the dict
    versions; ``tiebreak[row]`` is the rank of the row's unit_id in sorted string order (without it, ties
    fall to the row number). Every contribution is computed elementwise as the dict version computes it
    and added in sorted branch order with ``np.add.at`` (which applies them in sequence), so every fused
    score equals the dict version's bit for bit. Returns each query's (rows int64, scores float64), at
    most ``depth`` long.
    """
    if method not in ("rrf", "weighted"):
        raise ValueError(f"unknown fusion method {method!r}; use rrf or weighted")
    w = dict(weights or {})
    if method == "weighted":
        unknown = set(w) - set(branches)
        if unknown:
            raise ValueError(f"fusion weights name branches that are not enabled: {sorted(unknown)}")
    lists = {b: v if isinstance(v, RankedLists) else RankedLists.from_pairs(v) for b, v in branches.items()}
    nq = max((len(v) for v in lists.values()), default=0)
    qs, rows, contrib, ranks = [], [], [], []
    for name in sorted(lists):
        lst = lists[name]
        if not len(lst.rows):
            continue
        rk = lst.ranks()
        if method == "rrf":
            c = 1.0 / (k + rk)
        else:
            lens = lst.lengths()
            nonempty = lst.offsets[:-1][lens > 0]
            lo = np.repeat(np.minimum.reduceat(lst.scores, nonempty), lens[lens > 0])
            hi = np.repeat(np.maximum.reduceat(lst.scores, nonempty), lens[lens > 0])
            flat = hi == lo
            norm = np.ones(len(lst.scores))
            norm[~flat] = (lst.scores[~flat] - lo[~flat]) / (hi[~flat] - lo[~flat])
            c = w.get(name, 1.0) * norm
        qs.append(lst.query_of_item())
        rows.append(lst.rows)
        contrib.append(c)
        ranks.append(rk)
    if not qs:
        return RankedLists(np.zeros(nq + 1, dtype=np.int64), np.zeros(0, dtype=np.int64),
                           np.zeros(0, dtype=np.float64))
    q_all, r_all = np.concatenate(qs), np.concatenate(rows)
    if len(qs) == 1:
        # one branch: every (query, row) cell occurs once, already grouped by query
        cq, cr, score, best = q_all, r_all, contrib[0] + 0.0, ranks[0]
    else:
        width = int(r_all.max()) + 1
        cell, inv = np.unique(q_all * width + r_all, return_inverse=True)
        score = np.zeros(len(cell), dtype=np.float64)
        np.add.at(score, inv, np.concatenate(contrib))
        best = np.full(len(cell), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(best, inv, np.concatenate(ranks))
        cq, cr = cell // width, cell % width
    tie = cr if tiebreak is None else np.asarray(tiebreak)[cr]
    order = np.lexsort((tie, best, -score, cq))
    cq, cr, score = cq[order], cr[order], score[order]
    starts = np.searchsorted(cq, np.arange(nq + 1))
    if depth is not None:
        keep = np.arange(len(cq)) - starts[cq] < depth
        cq, cr, score = cq[keep], cr[keep], score[keep]
        starts = np.searchsorted(cq, np.arange(nq + 1))
    return RankedLists(starts.astype(np.int64), cr.astype(np.int64), score)
