"""Cascade and user-model metrics: ERR@k and rank-biased precision (with its residual), vectorized.

Both reduce over a :class:`~ragassay.metrics.matrix.GradeMatrix`'s judged entries (row, col, grade), so
their cost follows the number of judged results, not queries x depth. An unjudged rank contributes nothing
to the value; RBP's residual says how much it could still move.
"""

from __future__ import annotations

import numpy as np

from ragassay.errors import InputError
from ragassay.metrics.matrix import GradeMatrix

ERR_MAX_GRADE = 4  # gdeval's constant, which ir_measures' ERR@k runs


def _cutoff(entries: tuple[np.ndarray, np.ndarray, np.ndarray], k: int | None):
    row, col, grade = entries
    if k is None:
        return row, col, grade
    keep = col < k
    return row[keep], col[keep], grade[keep]


def err(gm: GradeMatrix, k: int | None = None, *, max_grade: float = ERR_MAX_GRADE) -> np.ndarray:
    """Expected reciprocal rank (Chapelle et al., CIKM 2009) of every query at cutoff ``k``.

    ERR@k = sum_r (1/r) R_r prod_{i<r} (1 - R_i), with R = (2^g - 1) / 2^max_grade for grade g clipped to
    [0, max_grade]. ``max_grade`` defaults to 4, the constant of gdeval (what ir_measures' ERR@k runs), so
    values match it. Edge case: a query with no judged grade above 0 has no ideal ranking and its ERR is
    NaN (undefined), not 0.
    """
    if max_grade <= 0:
        raise InputError(f"ERR max_grade {max_grade!r} must be positive")
    row, col, grade = _cutoff(gm.entries, k)
    stop = (np.exp2(np.clip(grade, 0.0, max_grade)) - 1.0) / np.exp2(max_grade)
    # prod_{i<r} (1 - R_i) within each row as an exclusive running sum of logs; entries come row-contiguous
    # in ascending rank, so the row's running sum starts at its first entry. R < 1 always, so log1p is finite.
    logs = np.log1p(-stop)
    run = np.concatenate(([0.0], np.cumsum(logs)))
    first = np.flatnonzero(np.r_[True, row[1:] != row[:-1]]) if len(row) else np.zeros(0, dtype=np.int64)
    start = np.repeat(first, np.diff(np.r_[first, len(row)]))
    reach = np.exp(run[:-1] - run[start])
    total = np.bincount(row, weights=reach * stop / (col + 1.0), minlength=gm.n_queries)
    with np.errstate(invalid="ignore"):
        has_rel = np.any(gm.judged > 0, axis=1)
    return np.where(has_rel, total, np.nan)


def rbp(gm: GradeMatrix, p: float, *, relevance_level: float = 1, k: int | None = None
        ) -> tuple[np.ndarray, np.ndarray]:
    """Rank-biased precision (Moffat & Zobel, TOIS 2008) and its residual, per query.

    RBP = (1 - p) sum_r p^(r-1) rel_r with rel binary (grade >= ``relevance_level``), over ranks up to
    ``k`` (all returned ranks when None). The residual is the most the value could still rise: the weight of
    the unjudged ranks up to the evaluation depth plus p^depth for everything below it (the depth is ``k``
    when given, else the ranking's length), which is 1 minus the weight of the judged ranks. RBP is defined for every query (no
    normalization by the relevant count), so a query with nothing relevant scores 0, not NaN.
    """
    if not 0.0 < p < 1.0:
        raise InputError(f"rbp p={p!r}: the persistence must lie strictly between 0 and 1")
    row, col, grade = _cutoff(gm.entries, k)
    weight = (1.0 - p) * np.power(p, col.astype(np.float64))
    value = np.bincount(row, weights=weight * (grade >= relevance_level), minlength=gm.n_queries)
    # ranks 1..depth weigh 1 - p^depth and all below weigh p^depth: what is not judged is 1 - judged weight
    residual = 1.0 - np.bincount(row, weights=weight, minlength=gm.n_queries)
    return value, residual
