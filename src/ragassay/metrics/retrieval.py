"""Vectorized ranking metrics over a :class:`GradeMatrix`.

Every metric is an array reduction over the judged entries of the whole run (per-row ``bincount`` sums in
rank order); there is no per-query Python loop. With ``Semantics.trec_eval()`` the values equal trec_eval's
(via pytrec_eval) to 1e-9, and terms are added in trec_eval's order, so in practice bit for bit.
Per query, with rel_i = [grade at rank i >= relevance_level], R = number of relevant labels of the query,
N = number of judged non-relevant labels, k a cutoff:

recall@k = sum_{i<=k} rel_i / R                 precision@k = sum_{i<=k} rel_i / k (k even if fewer results)
success@k = [sum_{i<=k} rel_i > 0]              rr(@k) = 1 / rank of the first relevant (within k), else 0
ap(@k) = sum_{i(<=k)} rel_i * P@i / R           ndcg(@k) = DCG@k / IDCG@k, DCG = sum gain(g_i) / log2(i+1)
rprec = sum_{i<=R} rel_i / R                     bpref = 1/R sum_{relevant retrieved r} (1 - min(n_r, R)/min(R, N))
judged@k = judged docs in top k / min(k, number returned)
where n_r is the number of judged non-relevant documents ranked above r (unjudged ones are skipped).

trec_eval's set and count measures: num_ret = ranks returned, num_rel = R, num_rel_ret = relevant returned;
set_precision = num_rel_ret / num_ret, set_recall = num_rel_ret / R, set_f = 2PR / (P + R) (0 when P + R = 0).
iprec(r=x) = max precision at any rank holding floor(x R + 0.9) relevant (trec_eval; 0 when none), 11pt_avg its mean over x = 0, 0.1,
..., 1; dcg(@k) = DCG@k unnormalized; gm_map = AP per query floored at 1e-5, averaged geometrically;
infap = inferred AP (Yilmaz & Aslam, CIKM 2006) as trec_eval computes it, where a negative qrels grade marks a
pooled but unjudged document and a document absent from the qrels is outside the pool;
err(@k) comes from :mod:`ragassay.metrics.extra`. RBP and the parameterised tool spellings are computed by
:mod:`ragassay.metrics.measures` on top of this module (RBP's residual is kept in
``MetricResult.extra["residual"]``).

Undefined values are NaN, never 0: recall, success, rr, ap, ndcg, rprec, bpref, set_recall, set_f, iprec,
11pt_avg, infap, gm_map and err when R = 0 (ndcg when IDCG = 0), judged@k and set_precision for an empty ranking.
Means skip NaN and report how many were skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ragassay.errors import InputError
from ragassay.metrics import extra
from ragassay.metrics.matrix import GradeMatrix
from ragassay.metrics.names import IPREC_LEVELS, Metric
from ragassay.metrics.semantics import Semantics, tie_rule


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
        """Mean over defined queries (geometric for gm_map, as trec_eval); NaN when no query is defined."""
        if not self.n_defined:
            return float("nan")
        if self.metric.geometric:
            return float(np.exp(np.nanmean(np.log(self.values))))
        return float(np.nanmean(self.values))

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
    """Shared intermediates for one (matrix, semantics) pair, computed once on demand.

    Everything reduces over the matrix's judged entries (row, col, grade): unjudged ranks contribute to no
    metric except through their rank position, so sums are per-row ``bincount``s in rank order (the order
    trec_eval adds terms in) and cost O(judged results) rather than O(queries x depth).
    """

    def __init__(self, gm: GradeMatrix, sem: Semantics):
        self.gm = gm
        self.sem = sem
        self.nq = gm.n_queries
        self.depth = gm.depth
        self.row, self.col, self.grade = gm.entries
        self.labels = gm.label_cache if gm.label_cache is not None else {}

    def label_term(self, key: tuple, compute):
        """A value that depends only on the labels (``gm.judged``), kept in the matrix's label cache."""
        judged = self.gm.judged
        kept = self.labels.get(key)
        if kept is not None and kept[0] is judged:  # the same read-only labels the value was computed from
            return kept[1]
        value = compute()
        value.flags.writeable = False
        self.labels[key] = (judged, value)
        return value

    def per_row(self, rows: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(rows, weights=weights, minlength=self.nq).astype(np.float64)

    @cached_property
    def rel(self) -> np.ndarray:
        return self.grade >= self.sem.relevance_level

    @cached_property
    def rel_at(self) -> np.ndarray:
        return np.flatnonzero(self.rel)

    @cached_property
    def rel_row(self) -> np.ndarray:
        return self.row.take(self.rel_at)

    @cached_property
    def rel_col(self) -> np.ndarray:
        return self.col.take(self.rel_at)

    @cached_property
    def rel_rank(self) -> np.ndarray:
        """1-based position of each relevant entry among its row's relevant entries (= cumulative relevant)."""
        return (self.before_in_row(self.rel, self.rel_at) + 1).astype(np.float64)

    @cached_property
    def row_start(self) -> np.ndarray:
        """Index of each row's first entry (rows are contiguous but need not come in row order)."""
        row = self.row
        first = np.flatnonzero(np.r_[True, row[1:] != row[:-1]]) if len(row) else np.zeros(0, dtype=np.int64)
        start = np.zeros(self.nq, dtype=np.int64)
        start[row[first]] = first
        return start

    def before_in_row(self, flags: np.ndarray, at: np.ndarray) -> np.ndarray:
        """For the entries ``at``: how many flagged entries of the same row come before each (a running total
        minus the running total at the row's first entry)."""
        before = np.zeros(len(flags) + 1, dtype=np.int64)
        np.cumsum(flags, out=before[1:])
        return before[at] - before[self.row_start[self.row[at]]]

    @cached_property
    def n_rel(self) -> np.ndarray:
        def count():
            with np.errstate(invalid="ignore"):
                return np.count_nonzero(self.gm.judged >= self.sem.relevance_level, axis=1).astype(np.float64)

        return self.label_term(("n_rel", self.sem.relevance_level), count)

    def _judged_labels(self, g: np.ndarray) -> np.ndarray:
        ok = ~np.isnan(g)
        if self.sem.negatives == "unjudged":
            with np.errstate(invalid="ignore"):
                ok &= g >= 0
        return ok

    @cached_property
    def n_nonrel(self) -> np.ndarray:
        def count():
            j = self.gm.judged
            with np.errstate(invalid="ignore"):
                return np.count_nonzero(self._judged_labels(j) & (j < self.sem.relevance_level), axis=1)

        return self.label_term(("n_nonrel", self.sem.relevance_level, self.sem.negatives), count)

    def idcg(self, k: int | None) -> np.ndarray:
        """Ideal DCG of each query at cutoff ``k`` (None = all judged), summed rank by rank like trec_eval."""

        def ideal():
            judged = self.gm.judged
            ki = judged.shape[1] if k is None else min(k, judged.shape[1])
            gains = _gain(judged[:, :ki], self.sem.gain) / np.log2(np.arange(2.0, ki + 2.0))
            total = np.zeros(self.nq)
            for j in range(ki):  # added rank by rank, the order of the DCG side and of trec_eval
                total += gains[:, j]
            return total

        return self.label_term(("idcg", k, self.sem.gain), ideal)

    @cached_property
    def judged_run(self) -> np.ndarray:
        return self._judged_labels(self.grade)

    @cached_property
    def rel_retrieved(self) -> np.ndarray:
        return self.per_row(self.rel_row)

    def hits(self, k: int) -> np.ndarray:
        if k >= self.depth:
            return self.rel_retrieved
        return self.per_row(self.rel_row[self.rel_col < k])

    def defined(self, x: np.ndarray) -> np.ndarray:
        """``x`` where the query has a relevant label, NaN elsewhere."""
        return np.where(self.n_rel > 0, x, np.nan)

    def per_rel(self, x: np.ndarray) -> np.ndarray:
        r = self.n_rel
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(r > 0, x / np.where(r > 0, r, 1.0), np.nan)

    def ratio(self, num: np.ndarray, den: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)

    def dcg(self, k: int | None) -> np.ndarray:
        kk = self.depth if k is None else min(k, self.depth)
        keep = self.col < kk
        # log2(rank + 1) looked up per rank, the same values as computing it per entry
        gains = _gain(self.grade[keep], self.sem.gain) / np.log2(np.arange(2.0, kk + 2.0))[self.col[keep]]
        return self.per_row(self.row[keep], gains)

    def iprec(self, level: float) -> np.ndarray:
        """Interpolated precision: the highest precision at a relevant rank whose recall reaches ``level``
        (precision only rises at relevant ranks, so these are the only candidates). As trec_eval, the level
        becomes a count of relevant documents, floor(level * R + 0.9), so 0.7 of R = 3 is reached at 2."""
        precision = self.rel_rank / (self.rel_col + 1.0)
        reach = self.rel_rank >= np.floor(level * self.n_rel[self.rel_row] + 0.9)
        out = np.zeros(self.nq)
        np.maximum.at(out, self.rel_row[reach], precision[reach])
        return self.defined(out)

    def infap(self) -> np.ndarray:
        """trec_eval's infAP: at each relevant rank j (0-based), 1 for j = 0, else 1/(j+1) + j/(j+1) *
        (pooled above / j) * ((relevant above + eps) / (judged above + 2 eps)), summed and divided by R."""
        pool_unjudged = self.grade < 0
        nonrel = (self.grade >= 0) & ~self.rel
        at = self.rel_at
        rel_above = self.rel_rank - 1.0
        nonrel_above = self.before_in_row(nonrel, at).astype(np.float64)
        pooled_above = self.before_in_row(pool_unjudged, at) + nonrel_above + rel_above
        j = self.rel_col.astype(np.float64)
        eps = 0.00001  # trec_eval's INFAP_EPSILON
        with np.errstate(invalid="ignore", divide="ignore"):
            later = (1.0 / (j + 1.0) + (j / (j + 1.0)) * (pooled_above / j)
                     * ((rel_above + eps) / (rel_above + nonrel_above + 2 * eps)))
        terms = np.where(j == 0, 1.0, later)
        return self.per_rel(self.per_row(self.rel_row, terms))

    def values(self, m: Metric) -> np.ndarray:
        k = m.k
        name = m.name
        if name == "recall":
            return self.per_rel(self.hits(k))
        if name == "precision":
            return self.hits(k) / k
        if name == "success":
            return self.defined((self.hits(k) > 0).astype(np.float64))
        if name == "rr":
            first = self.rel_rank == 1
            if k is not None:
                first &= self.rel_col < k
            rr = np.zeros(self.nq)
            rr[self.rel_row[first]] = 1.0 / (self.rel_col[first] + 1.0)
            return self.defined(rr)
        if name == "ap":
            terms = self.rel_rank / (self.rel_col + 1.0)
            keep = slice(None) if k is None else self.rel_col < k
            return self.per_rel(self.per_row(self.rel_row[keep], terms[keep]))
        if name == "ndcg":
            return self.ratio(self.dcg(k), self.idcg(k))
        if name == "dcg":
            return self.dcg(k)
        if name == "rprec":
            return self.per_rel(self.per_row(self.rel_row[self.rel_col < self.n_rel[self.rel_row]]))
        if name == "bpref":
            # judged non-relevant entries ranked above each relevant one, counted within its row
            above = self.before_in_row(self.judged_run & ~self.rel, self.rel_at)
            r = self.n_rel[self.rel_row]
            denom = np.minimum(r, self.n_nonrel[self.rel_row]).astype(np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                pen = np.where(above > 0, np.minimum(above, r) / np.where(denom > 0, denom, 1.0), 0.0)
            return self.per_rel(self.per_row(self.rel_row, 1.0 - pen))
        if name == "judged":
            shown = np.minimum(self.gm.lengths, k).astype(np.float64)
            count = self.per_row(self.row[self.judged_run & (self.col < k)])
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(shown > 0, count / np.where(shown > 0, shown, 1.0), np.nan)
        if name == "num_ret":
            return self.gm.lengths.astype(np.float64)
        if name == "num_rel":
            return self.n_rel.copy()
        if name == "num_rel_ret":
            return self.rel_retrieved.copy()
        if name == "set_precision":
            return self.ratio(self.rel_retrieved, self.gm.lengths.astype(np.float64))
        if name == "set_recall":
            return self.per_rel(self.rel_retrieved)
        if name == "set_f":
            p = np.nan_to_num(self.ratio(self.rel_retrieved, self.gm.lengths.astype(np.float64)))
            r = np.nan_to_num(self.per_rel(self.rel_retrieved))
            return self.defined(np.nan_to_num(self.ratio(2.0 * p * r, p + r)))  # nothing relevant returned: 0
        if name == "iprec":
            return self.iprec(m.r)
        if name == "11pt_avg":
            total = np.zeros(self.nq)
            for level in IPREC_LEVELS:  # added level by level, as trec_eval sums them
                total += self.iprec(level)
            return total / len(IPREC_LEVELS)
        if name == "infap":
            return self.infap()
        if name == "gm_map":
            return np.maximum(self.values(Metric("ap")), 0.00001)  # trec_eval's MIN_GEO_MEAN floor
        if name == "err":
            return extra.err(self.gm, k)
        raise InputError(f"metric {m} has no implementation")  # unreachable: Metric validates names


def evaluate(
    matrix: GradeMatrix,
    metrics: Iterable[str | Metric],
    semantics: Semantics | None = None,
) -> dict[Metric, MetricResult]:
    """Compute each metric for every query of ``matrix``; keys are the parsed :class:`Metric` objects."""
    sem = semantics or Semantics()
    if matrix.ties != "given" and tie_rule(matrix.ties) != sem.ties:
        raise InputError(f"matrix was ordered with ties={matrix.ties!r} but semantics say ties={sem.ties!r}")
    parsed = [Metric.parse(m) for m in metrics]
    if not parsed:
        raise InputError("no metrics requested: pass at least one, e.g. ndcg@10")
    run = _Run(matrix, sem)
    n_missing = int(np.count_nonzero(matrix.missing))
    out = {}
    for m in dict.fromkeys(parsed):
        out[m] = MetricResult(m, sem, matrix.query_ids, run.values(m), n_missing=n_missing)
    return out
