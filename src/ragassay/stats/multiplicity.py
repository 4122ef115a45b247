"""Adjusted p-values for m simultaneous tests: Bonferroni, Holm (step-down FWER), Benjamini-Hochberg (FDR).

NaN p-values (tests that were undefined) pass through as NaN and are not counted in m: an undefined test
neither spends nor earns any error budget. Adjusted values are capped at 1 and returned in input order.
References: Holm (1979); Benjamini & Hochberg (1995). Matches statsmodels ``multipletests`` on the
non-NaN subset.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from ragassay.errors import InputError
from ragassay.stats._validate import as_float_vector

AdjustMethod = Literal["bonferroni", "holm", "bh"]
_ALIASES = {
    "bonferroni": "bonferroni",
    "holm": "holm",
    "bh": "bh",
    "fdr_bh": "bh",
    "benjamini-hochberg": "bh",
}


def adjust_pvalues(pvalues, method: AdjustMethod = "holm") -> np.ndarray:
    """Return adjusted p-values (same shape/order as the input).

    bonferroni: min(1, m p_i). holm: sorted ascending, p~_(i) = max_{j<=i} min(1, (m - j + 1) p_(j)).
    bh: sorted ascending, p~_(i) = min_{j>=i} min(1, m p_(j) / j).
    """
    key = _ALIASES.get(str(method).lower())
    if key is None:
        raise InputError(f"method must be one of bonferroni, holm, bh; got {method!r}")
    p = as_float_vector(pvalues, "pvalues", min_len=0)
    ok = ~np.isnan(p)
    if ((p[ok] < 0) | (p[ok] > 1)).any():
        raise InputError(f"pvalues must lie in [0, 1]; got {p[ok][(p[ok] < 0) | (p[ok] > 1)][:5].tolist()}")
    out = np.full(p.shape, np.nan)
    q = p[ok]
    m = q.size
    if m == 0:
        return out
    if key == "bonferroni":
        adj = np.minimum(1.0, q * m)
    else:
        order = np.argsort(q, kind="mergesort")
        sq = q[order]
        rank = np.arange(1, m + 1)
        if key == "holm":
            stepped = np.maximum.accumulate(np.minimum(1.0, (m - rank + 1) * sq))
        else:
            stepped = np.minimum.accumulate(np.minimum(1.0, m * sq / rank)[::-1])[::-1]
        adj = np.empty(m)
        adj[order] = stepped
    out[ok] = adj
    return out


def reject(pvalues, alpha: float = 0.05, method: AdjustMethod = "holm") -> np.ndarray:
    """Boolean rejections at family level ``alpha`` (adjusted p <= alpha); NaN p-values are never rejected."""
    adj = adjust_pvalues(pvalues, method)
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(adj), False, adj <= alpha)
