"""Every accepted measure name, computed with the meaning of the tool that spells it.

:func:`ragassay.metrics.retrieval.evaluate` reads each measure under one :class:`Semantics`. The names of
trec_eval, ir_measures and ranx (:mod:`ragassay.metrics.names`) also pin parameters per measure and name a few
measures of their own; :func:`evaluate` computes them all over the same :class:`GradeMatrix`:

- ``rel=N`` (``P(rel=2)@5``, ranx's ``-l2``) and ``gain=`` (``nDCG(dcg='exp-log2')``, ranx's ``*_burges``)
  replace the run's relevance level or gain for that measure, and the result records the semantics used;
- ``judged_only`` drops the documents without a judgment from each ranking first (trec_eval's ``-J``; with
  ``negatives="unjudged"`` a negative grade counts as unjudged, as in trec_eval), ``gains`` maps grades to
  gains before a linear nDCG (trec_eval's ``ndcg`` with gains, as ir_measures runs it);
- ``rbp(p=..)`` is graded RBP, (1 - p) sum_r p^(r-1) g_r with g_r the grade when positive (ir_measures'
  ``RBP`` without ``rel``, as trectools and ranx compute it); ``rbp(p=..,rel=N)`` is binary RBP with
  rel_r = [g_r >= N] (ir_measures' ``RBP(rel=N)``, cwl_eval). Both keep the residual: the weight
  (1 - p) p^(r-1) of the ranks without a judgment, plus p^depth past the list (times the top grade, it
  bounds how far graded RBP could still rise);
- ``hits(@k)`` = relevant documents in the top k (ranx), ``f1@k`` = 2 P@k R@k / (P@k + R@k) (ranx; 0 when
  nothing relevant is in the top k), ``set_relative_precision`` = num_rel_ret / min(num_ret, R) (trec_eval's
  set_relative_P), ``set_f(beta=b)`` = (1 + b) P R / (b P + R) with P, R the set precision and recall
  (trec_eval's set_F.b: b is not squared; 0 when nothing relevant is returned).

Undefined stays NaN: f1, set_relative_precision and set_f when R = 0 (set_relative_precision also when nothing
is returned); hits and RBP are always defined. :func:`summary` combines queries as the tools' summary lines do.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from ragassay.errors import InputError
from ragassay.metrics import extra
from ragassay.metrics.matrix import GradeMatrix
from ragassay.metrics.names import Metric, parse_measures
from ragassay.metrics.retrieval import MetricResult
from ragassay.metrics.retrieval import evaluate as evaluate_plain
from ragassay.metrics.semantics import Semantics

GM_MAP_FLOOR = 0.00001  # trec_eval's MIN_GEO_MEAN: a query with AP 0 counts at this floor in gm_map


def evaluate(
    matrix: GradeMatrix,
    measures: Iterable[str | Metric],
    semantics: Semantics | None = None,
) -> dict[Metric, MetricResult]:
    """Compute each measure (any accepted spelling; ``P.5,10`` counts as two) for every query of ``matrix``.

    Keys are the parsed :class:`Metric` objects in the order asked; each result's ``semantics`` is the one its
    values were computed under (the run's, with the measure's own ``rel`` and ``gain``).
    """
    sem = semantics or Semantics()
    parsed = list(dict.fromkeys(m for x in measures for m in parse_measures(x)))
    if not parsed:
        raise InputError("no metrics requested: pass at least one, e.g. ndcg@10")
    groups: dict[tuple, list[Metric]] = {}
    for m in parsed:
        groups.setdefault((m.judged_only, m.gains, _semantics(sem, m)), []).append(m)
    n_missing = int(np.count_nonzero(matrix.missing))
    out: dict[Metric, MetricResult] = {}
    for (judged_only, gains, s), members in groups.items():
        gm = _view(matrix, judged_only, gains, sem.negatives)
        base = {m: _base(m) for m in members}
        plain = evaluate_plain(gm, list(dict.fromkeys(b for b in base.values() if b is not None)), s) \
            if any(b is not None for b in base.values()) else {}
        for m in members:
            if base[m] is not None:
                r = plain[base[m]]
                values, extras = r.values, r.extra
            else:
                values, extras = _own(gm, m, s)
            out[m] = MetricResult(m, s, matrix.query_ids, values, n_missing=n_missing, extra=extras)
    return {m: out[m] for m in parsed}


def summary(result: MetricResult, undefined_as_zero: bool = False, mean: bool = False) -> float:
    """The value over all queries, combined as trec_eval's ``all`` line and ir_measures do: the sum for
    num_ret, num_rel and num_rel_ret, the geometric mean for gm_map, the mean otherwise (``mean=True``: the
    mean for the sums too). Undefined (NaN) queries are left out, or with ``undefined_as_zero`` count as 0
    (gm_map: its 1e-5 floor) as trec_eval, ir_measures and ranx count them; NaN when no query is defined."""
    agg = result.metric.aggregate
    if mean and agg == "sum":
        agg = "mean"
    values = result.values.astype(np.float64)
    if undefined_as_zero:
        values = np.where(np.isnan(values), GM_MAP_FLOOR if agg == "geometric" else 0.0, values)
    defined = values[~np.isnan(values)]
    if not len(defined):
        return float("nan")
    if agg == "sum":
        return float(np.sum(defined))
    if agg == "geometric":
        return float(np.exp(np.mean(np.log(defined))))
    return float(np.mean(defined))


def _semantics(sem: Semantics, m: Metric) -> Semantics:
    changes: dict = {}
    if m.rel is not None:
        changes["relevance_level"] = m.rel
    if m.gain is not None:
        changes["gain"] = m.gain
    elif m.gains is not None:
        changes["gain"] = "linear"  # mapped grades are the gains, as trec_eval's ndcg takes them
    return replace(sem, **changes) if changes else sem


def _base(m: Metric) -> Metric | None:
    """The plain metric ``retrieval.evaluate`` computes for ``m`` once its semantics and view are applied."""
    if m.name in ("rbp", "hits", "f1", "set_relative_precision") or m.beta is not None:
        return None
    return Metric(m.name, m.k, r=m.r)


def _view(gm: GradeMatrix, judged_only: bool, gains: tuple | None, negatives: str) -> GradeMatrix:
    """``gm`` with unjudged documents dropped from the rankings and/or grades mapped to gains."""
    if not judged_only and gains is None:
        return gm
    row, col, grade = gm.entries
    lengths, judged, cache = gm.lengths, gm.judged, gm.label_cache
    if judged_only:
        keep = grade >= 0 if negatives == "unjudged" else np.ones(len(grade), dtype=bool)
        row, grade = row[keep], grade[keep]
        lengths = np.bincount(row, minlength=gm.n_queries).astype(np.int64)
        # entries are row-contiguous in rank order: the new rank is the position within the row
        first = np.flatnonzero(np.r_[True, row[1:] != row[:-1]]) if len(row) else np.zeros(0, dtype=np.int64)
        col = np.arange(len(row)) - np.repeat(first, np.diff(np.r_[first, len(row)]))
    if gains is not None:
        table = dict(gains)

        def mapped(g: np.ndarray) -> np.ndarray:
            out = g.copy()
            for a, b in table.items():
                out[g == a] = b
            return out

        grade = mapped(grade)
        judged = -np.sort(-mapped(judged), axis=1)
        cache = None  # the label terms change with the gains
    return GradeMatrix(query_ids=gm.query_ids, lengths=lengths, judged=judged, missing=gm.missing,
                       ties=gm.ties, entries=(row, col, grade), label_cache=cache,
                       depth=int(lengths.max(initial=0)) if judged_only else gm.depth)


def _own(gm: GradeMatrix, m: Metric, sem: Semantics) -> tuple[np.ndarray, dict]:
    """The measures ``retrieval.evaluate`` has no formula for (module docstring)."""
    row, col, grade = gm.entries
    nq = gm.n_queries
    if m.name == "rbp":
        if m.rel is not None:
            value, residual = extra.rbp(gm, m.p, relevance_level=sem.relevance_level, k=m.k)
            return value, {"residual": residual}
        keep = slice(None) if m.k is None else col < m.k
        weight = (1.0 - m.p) * np.power(m.p, col[keep].astype(np.float64))
        value = np.bincount(row[keep], weights=weight * np.maximum(grade[keep], 0.0), minlength=nq)
        residual = 1.0 - np.bincount(row[keep], weights=weight, minlength=nq)
        return value, {"residual": residual}
    rel = grade >= sem.relevance_level
    with np.errstate(invalid="ignore"):
        n_rel = np.count_nonzero(gm.judged >= sem.relevance_level, axis=1).astype(np.float64)
    hits = np.bincount(row[rel if m.k is None else rel & (col < m.k)], minlength=nq).astype(np.float64)
    if m.name == "hits":
        return hits, {}
    with np.errstate(invalid="ignore", divide="ignore"):
        if m.name == "f1":
            p, r = hits / m.k, hits / n_rel
            f = np.where(hits > 0, 2.0 * ((p * r) / (p + r)), 0.0)
        elif m.name == "set_relative_precision":
            den = np.minimum(gm.lengths, n_rel)
            f = np.where(den > 0, hits / den, np.nan)
        else:  # set_f with beta
            p, r = np.where(gm.lengths > 0, hits / gm.lengths, 0.0), hits / n_rel
            f = np.where(hits > 0, (1.0 + m.beta) * p * r / (m.beta * p + r), 0.0)
    return np.where(n_rel > 0, f, np.nan), {}
