"""Vectorized ranking metrics over a :class:`GradeMatrix`.

Every metric is an array reduction over the whole run (cumsum, take, a log2 discount table); there is no
per-query Python loop. With ``Semantics.trec_eval()`` the values equal trec_eval's (via pytrec_eval) to 1e-9.
Per query, with rel_i = [grade at rank i >= relevance_level], R = number of relevant labels of the query,
N = number of judged non-relevant labels, k a cutoff:

recall@k = sum_{i<=k} rel_i / R                 precision@k = sum_{i<=k} rel_i / k (k even if fewer results)
success@k = [sum_{i<=k} rel_i > 0]              rr(@k) = 1 / rank of the first relevant (within k), else 0
ap(@k) = sum_{i(<=k)} rel_i * P@i / R           ndcg(@k) = DCG@k / IDCG@k, DCG = sum gain(g_i) / log2(i+1)
rprec = sum_{i<=R} rel_i / R                     bpref = 1/R sum_{relevant retrieved r} (1 - min(n_r, R)/min(R, N))
judged@k = judged docs in top k / min(k, number returned)
where n_r is the number of judged non-relevant documents ranked above r (unjudged ones are skipped).

Undefined values are NaN, never 0: recall, success, rr, ap, ndcg, rprec and bpref when R = 0 (ndcg when
IDCG = 0), judged@k for an empty ranking. Means skip NaN and report how many were skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ragassay.errors import InputError
from ragassay.metrics.matrix import GradeMatrix
from ragassay.metrics.names import Metric
from ragassay.metrics.semantics import Semantics


@dataclass(frozen=True, eq=False)
class MetricResult:
    """Per-query values of one metric under recorded semantics; ``mean()`` ignores undefined (NaN) queries."""

    metric: Metric
    semantics: Semantics
    query_ids: np.ndarray
    values: np.ndarray
    n_missing: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def n_defined(self) -> int:
        return int(np.count_nonzero(~np.isnan(self.values)))

    @property
    def n_undefined(self) -> int:
        return int(np.count_nonzero(np.isnan(self.values)))

    def mean(self) -> float:
        """Mean over defined queries; NaN when no query is defined."""
        return float(np.nanmean(self.values)) if self.n_defined else float("nan")

    def per_query(self) -> dict[str, float]:
        return {str(q): float(v) for q, v in zip(self.query_ids, self.values, strict=True)}

    def summary(self) -> dict[str, object]:
        return {
            "metric": str(self.metric),
            "mean": self.mean(),
            "n_defined": self.n_defined,
            "n_undefined": self.n_undefined,
            "n_missing": self.n_missing,
            "semantics": self.semantics.as_dict(),
        }


def _gain(g: np.ndarray, kind: str) -> np.ndarray:
    pos = np.where(np.isnan(g) | (g <= 0), 0.0, g)
    return np.exp2(pos) - 1.0 if kind == "exp" else pos


class _Run:
    """Shared intermediate arrays for one (matrix, semantics) pair, computed once on demand."""

    def __init__(self, gm: GradeMatrix, sem: Semantics):
        self.gm = gm
        self.sem = sem
        self.depth = gm.depth
        self.ranks = np.arange(1, self.depth + 1, dtype=np.float64)

    @cached_property
    def rel(self) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return self.gm.grades >= self.sem.relevance_level

    @cached_property
    def cum_rel(self) -> np.ndarray:
        return np.cumsum(self.rel, axis=1, dtype=np.float64)

    @cached_property
    def n_rel(self) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return np.count_nonzero(self.gm.judged >= self.sem.relevance_level, axis=1).astype(np.float64)

    def _judged_labels(self, g: np.ndarray) -> np.ndarray:
        ok = ~np.isnan(g)
        if self.sem.negatives == "unjudged":
            with np.errstate(invalid="ignore"):
                ok &= g >= 0
        return ok

    @cached_property
    def n_nonrel(self) -> np.ndarray:
        j = self.gm.judged
        with np.errstate(invalid="ignore"):
            return np.count_nonzero(self._judged_labels(j) & (j < self.sem.relevance_level), axis=1)

    @cached_property
    def judged_run(self) -> np.ndarray:
        return self._judged_labels(self.gm.grades)

    @cached_property
    def ap_terms(self) -> np.ndarray:
        return np.where(self.rel, self.cum_rel / self.ranks, 0.0)

    @cached_property
    def gains(self) -> np.ndarray:
        return _gain(self.gm.grades, self.sem.gain)

    @cached_property
    def ideal(self) -> np.ndarray:
        return _gain(self.gm.judged, self.sem.gain)

    def discount(self, n: int) -> np.ndarray:
        return 1.0 / np.log2(np.arange(2, n + 2, dtype=np.float64))

    def hits(self, k: int) -> np.ndarray:
        if self.depth == 0:
            return np.zeros(self.gm.n_queries)
        return self.cum_rel[:, min(k, self.depth) - 1]

    def per_rel(self, x: np.ndarray) -> np.ndarray:
        r = self.n_rel
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(r > 0, x / np.where(r > 0, r, 1.0), np.nan)

    def compute(self, m: Metric) -> np.ndarray:
        k = m.k
        name = m.name
        if name == "recall":
            return self.per_rel(self.hits(k))
        if name == "precision":
            return self.hits(k) / k
        if name == "success":
            return self.per_rel((self.hits(k) > 0).astype(np.float64) * self.n_rel)
        if name == "rr":
            rel = self.rel if k is None else self.rel[:, :k]
            first = np.argmax(rel, axis=1) if rel.shape[1] else np.zeros(self.gm.n_queries, dtype=np.int64)
            any_hit = rel.any(axis=1)
            rr = np.where(any_hit, 1.0 / (first + 1.0), 0.0)
            return self.per_rel(rr * self.n_rel)
        if name == "ap":
            terms = self.ap_terms if k is None else self.ap_terms[:, :k]
            return self.per_rel(terms.sum(axis=1))
        if name == "ndcg":
            kk = self.depth if k is None else min(k, self.depth)
            dcg = (self.gains[:, :kk] * self.discount(kk)).sum(axis=1)
            ki = self.ideal.shape[1] if k is None else min(k, self.ideal.shape[1])
            idcg = (self.ideal[:, :ki] * self.discount(ki)).sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(idcg > 0, dcg / np.where(idcg > 0, idcg, 1.0), np.nan)
        if name == "rprec":
            r = self.n_rel.astype(np.int64)
            if self.depth == 0:
                return self.per_rel(np.zeros(self.gm.n_queries))
            idx = np.clip(np.minimum(r, self.depth) - 1, 0, None)
            at_r = np.take_along_axis(self.cum_rel, idx[:, None], axis=1)[:, 0]
            return self.per_rel(np.where(r > 0, at_r, 0.0))
        if name == "bpref":
            nonrel = self.judged_run & ~self.rel
            above = np.cumsum(nonrel, axis=1)
            r = self.n_rel[:, None]
            denom = np.minimum(r, self.n_nonrel[:, None]).astype(np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                pen = np.where(above > 0, np.minimum(above, r) / np.where(denom > 0, denom, 1.0), 0.0)
            return self.per_rel(np.where(self.rel, 1.0 - pen, 0.0).sum(axis=1))
        if name == "judged":
            shown = np.minimum(self.gm.lengths, k).astype(np.float64)
            count = self.judged_run[:, :k].sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(shown > 0, count / np.where(shown > 0, shown, 1.0), np.nan)
        raise InputError(f"metric {m} has no implementation")  # unreachable: Metric validates names


def evaluate(
    matrix: GradeMatrix,
    metrics: Iterable[str | Metric],
    semantics: Semantics | None = None,
) -> dict[Metric, MetricResult]:
    """Compute each metric for every query of ``matrix``; keys are the parsed :class:`Metric` objects."""
    sem = semantics or Semantics()
    if matrix.ties != sem.ties and matrix.ties != "given":
        raise InputError(f"matrix was ordered with ties={matrix.ties!r} but semantics say ties={sem.ties!r}")
    parsed = [Metric.parse(m) for m in metrics]
    if not parsed:
        raise InputError("no metrics requested: pass at least one, e.g. ndcg@10")
    run = _Run(matrix, sem)
    n_missing = int(np.count_nonzero(matrix.missing))
    return {
        m: MetricResult(m, sem, matrix.query_ids, run.compute(m), n_missing=n_missing)
        for m in dict.fromkeys(parsed)
    }
