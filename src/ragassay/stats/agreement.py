"""Agreement between raters: Cohen's kappa (plain and weighted), Krippendorff's alpha, Kendall's tau-b,
and a judge-vs-human report.

References: Cohen (1960, 1968); Krippendorff, *Content Analysis* (2004), ch. 11, and "Computing
Krippendorff's alpha-reliability" (2011); Kendall (1945) for tau-b.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats as sps

from ragassay.errors import InputError


def _labels_pair(a, b, name_a: str, name_b: str) -> tuple[np.ndarray, np.ndarray]:
    av = np.asarray(a)
    bv = np.asarray(b)
    if av.ndim != 1 or bv.ndim != 1:
        raise InputError(
            f"{name_a} and {name_b} must be 1-D label sequences, got shapes {av.shape}, {bv.shape}"
        )
    if av.shape != bv.shape:
        raise InputError(
            f"{name_a} and {name_b} must label the same items in the same order: lengths {av.size} and {bv.size}"
        )
    if av.size == 0:
        raise InputError(f"{name_a} and {name_b} are empty; need at least one labelled item")
    for name, v in ((name_a, av), (name_b, bv)):
        if v.dtype.kind == "f" and np.isnan(v).any():
            raise InputError(
                f"{name}: missing labels (NaN) at {np.flatnonzero(np.isnan(v))[:5].tolist()}; "
                "drop unlabelled items first (or use krippendorff_alpha, which allows gaps)"
            )
    return av, bv


def _confusion(a: np.ndarray, b: np.ndarray, labels: Sequence | None) -> tuple[np.ndarray, np.ndarray]:
    if labels is None:
        cats = np.unique(np.concatenate([a, b]))
    else:
        cats = np.asarray(labels)
        missing = np.setdiff1d(np.concatenate([a, b]), cats)
        if missing.size:
            raise InputError(f"labels: observed values {missing[:5].tolist()} are not in the declared labels")
    # Positions in the declared order (sorted order when none is declared), found by a sorted lookup.
    order = np.argsort(cats, kind="stable")
    ia = order[np.searchsorted(cats[order], a)]
    ib = order[np.searchsorted(cats[order], b)]
    k = cats.size
    conf = np.bincount(ia * k + ib, minlength=k * k).reshape(k, k).astype(np.float64)
    return conf, cats


def cohen_kappa(
    a, b, *, weights: Literal["linear", "quadratic"] | None = None, labels: Sequence | None = None
) -> float:
    """Cohen's kappa between two raters over the same items: kappa = (p_o - p_e) / (1 - p_e), with p_e from
    the product of the two raters' marginal label shares.

    Weighted (ordinal labels): kappa_w = 1 - sum(w O) / sum(w E), w_ij = |i - j| (linear) or (i - j)^2
    (quadratic) over label positions in sorted order (or the order of ``labels``), as in
    ``sklearn.metrics.cohen_kappa_score``. Raises InputError when chance agreement is total (both raters
    used one and the same label for every item), where kappa is 0/0.

    Where it differs from ``cohen_kappa_score``: (1) an observed value missing from ``labels`` raises
    InputError, while scikit-learn silently drops every item where either rater used it and scores the rest;
    (2) undefined kappa raises, while scikit-learn warns and returns ``replace_undefined_by`` (NaN);
    (3) there is no ``sample_weight``. With ``labels`` covering every observed value (extra, unused labels
    included) the values are the same.
    """
    av, bv = _labels_pair(a, b, "a", "b")
    conf, cats = _confusion(av, bv, labels)
    k = cats.size
    n = conf.sum()
    expected = np.outer(conf.sum(axis=1), conf.sum(axis=0)) / n
    if weights is None:
        w = 1.0 - np.eye(k)
    elif weights in ("linear", "quadratic"):
        idx = np.arange(k)
        diff = np.abs(idx[:, None] - idx[None, :]).astype(np.float64)
        w = diff if weights == "linear" else diff**2
    else:
        raise InputError(f"weights must be None, 'linear' or 'quadratic', got {weights!r}")
    den = float((w * expected).sum())
    if den == 0.0:
        raise InputError(
            f"kappa is undefined: both raters gave every item the same single label {cats.tolist()}; "
            "chance agreement is 1. Add items from other classes to measure agreement"
        )
    return float(1.0 - (w * conf).sum() / den)


_Level = Literal["nominal", "ordinal", "interval", "ratio"]


def krippendorff_alpha(reliability_data, level: _Level = "nominal") -> float:
    """Krippendorff's alpha for any number of raters with missing ratings.

    ``reliability_data`` is (raters x units), NaN where a rater did not rate a unit; values are numeric
    codes. alpha = 1 - D_o / D_e computed from the coincidence matrix o_ck = sum_u (n_uc n_uk - [c=k] n_uc)
    / (m_u - 1) over units with m_u >= 2 ratings: alpha = 1 - (n - 1) sum o_ck d2_ck / sum n_c n_k d2_ck.
    Distances d2: nominal [c != k]; interval (c - k)^2; ratio ((c - k)/(c + k))^2; ordinal
    (sum_{g between c and k} n_g - (n_c + n_k)/2)^2. Matches the ``krippendorff`` package.
    Raises InputError when fewer than two pairable values exist or only one value occurs (D_e = 0).
    """
    if level not in ("nominal", "ordinal", "interval", "ratio"):
        raise InputError(f"level must be nominal, ordinal, interval or ratio; got {level!r}")
    try:
        data = np.asarray(reliability_data, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"reliability_data must be numeric codes with NaN for missing ({exc})") from exc
    if data.ndim != 2 or data.size == 0:
        raise InputError(
            f"reliability_data must be a non-empty (raters x units) matrix, got shape {data.shape}"
        )
    if np.isinf(data).any():
        raise InputError("reliability_data contains infinite values; use NaN for a missing rating")
    values = np.unique(data[~np.isnan(data)])
    if level == "ratio" and (values < 0).any():
        raise InputError("ratio level needs non-negative values")
    v = values.size
    # counts[u, c]: how many raters put unit u in value c.
    counts = np.zeros((data.shape[1], v))
    rater_idx, unit_idx = np.nonzero(~np.isnan(data))
    np.add.at(counts, (unit_idx, np.searchsorted(values, data[rater_idx, unit_idx])), 1.0)
    m_u = counts.sum(axis=1)
    pairable = m_u >= 2
    counts, m_u = counts[pairable], m_u[pairable]
    if counts.shape[0] == 0 or v < 2:
        raise InputError(
            "krippendorff_alpha is undefined: need at least one unit rated twice and at least two distinct "
            f"values overall (found {int(pairable.sum())} pairable unit(s), {v} value(s))"
        )
    inv = 1.0 / (m_u - 1.0)
    coinc = (counts * inv[:, None]).T @ counts - np.diag((counts * inv[:, None]).sum(axis=0))
    n_c = coinc.sum(axis=1)
    n_tot = n_c.sum()
    if level == "nominal":
        d2 = 1.0 - np.eye(v)
    elif level == "interval":
        d2 = (values[:, None] - values[None, :]) ** 2
    elif level == "ratio":
        s = values[:, None] + values[None, :]
        with np.errstate(invalid="ignore", divide="ignore"):
            d2 = np.where(s == 0, 0.0, ((values[:, None] - values[None, :]) / s) ** 2)
    else:
        cum = np.cumsum(n_c)
        lo = np.minimum.outer(np.arange(v), np.arange(v))
        hi = np.maximum.outer(np.arange(v), np.arange(v))
        between = cum[hi] - np.where(lo > 0, cum[lo - 1], 0.0)
        d2 = (between - (n_c[:, None] + n_c[None, :]) / 2.0) ** 2
    d_e = float((np.outer(n_c, n_c) * d2).sum())
    if d_e == 0.0:
        raise InputError(
            "krippendorff_alpha is undefined: every pairable rating has the same value (D_e = 0)"
        )
    return float(1.0 - (n_tot - 1.0) * (coinc * d2).sum() / d_e)


def fleiss_kappa(table) -> float:
    """Fleiss' kappa for N items each rated by the same number m of raters into k categories.

    ``table`` is N x k counts (row i: how many raters put item i in each category). With P_i = (sum_j n_ij^2 - m)
    / (m(m - 1)), P_bar their mean, p_j the share of all ratings in category j and P_e = sum_j p_j^2:
    kappa = (P_bar - P_e) / (1 - P_e) (Fleiss 1971). Undefined (NaN) when P_e = 1 (every rating in one
    category). InputError for negative or non-integer counts, or rows with different rater counts or < 2 raters.
    """
    t = np.asarray(table, dtype=np.float64)
    if t.ndim != 2 or t.shape[0] < 1 or t.shape[1] < 2:
        raise InputError(f"fleiss_kappa: need an items x categories count table with >= 2 categories, got shape "
                         f"{t.shape}")
    if not np.all(np.isfinite(t)) or (t < 0).any() or (t != np.round(t)).any():
        raise InputError("fleiss_kappa: counts must be non-negative integers")
    raters = t.sum(axis=1)
    m = raters[0]
    if (raters != m).any():
        bad = int(np.flatnonzero(raters != m)[0])
        raise InputError(f"fleiss_kappa: every item needs the same number of ratings; item 0 has {m:g}, item {bad} "
                         f"has {raters[bad]:g}")
    if m < 2:
        raise InputError("fleiss_kappa: each item needs at least 2 ratings")
    p_item = ((t * t).sum(axis=1) - m) / (m * (m - 1))
    p_cat = t.sum(axis=0) / t.sum()
    p_e = float((p_cat * p_cat).sum())
    if p_e >= 1.0:
        return float("nan")
    return float((p_item.mean() - p_e) / (1.0 - p_e))


def kendall_tau_b(x, y) -> tuple[float, float]:
    """Kendall's tau-b (tie-corrected) and its two-sided p-value, via ``scipy.stats.kendalltau``.

    Pairs with NaN are dropped. Raises InputError when fewer than 2 pairs remain or either side is
    constant (tau-b is 0/0 there).
    """
    xv = np.asarray(x, dtype=np.float64)
    yv = np.asarray(y, dtype=np.float64)
    if xv.ndim != 1 or xv.shape != yv.shape:
        raise InputError(f"x and y must be 1-D and paired; got shapes {xv.shape}, {yv.shape}")
    keep = ~(np.isnan(xv) | np.isnan(yv))
    xv, yv = xv[keep], yv[keep]
    if xv.size < 2:
        raise InputError(f"kendall_tau_b needs at least 2 complete pairs, got {xv.size}")
    if np.all(xv == xv[0]) or np.all(yv == yv[0]):
        raise InputError("kendall_tau_b is undefined: one of the two rankings is constant")
    res = sps.kendalltau(xv, yv, variant="b")
    return float(res.statistic), float(res.pvalue)


@dataclass(frozen=True)
class ClassStats:
    label: object
    precision: float
    recall: float
    support: int
    predicted: int

    def to_dict(self) -> dict:
        return {
            "label": _plain(self.label),
            "precision": self.precision,
            "recall": self.recall,
            "support": self.support,
            "predicted": self.predicted,
        }


@dataclass(frozen=True)
class JudgeReport:
    """Judge-vs-human agreement. Precision of a class the judge never predicts, or recall of a class humans
    never use, is NaN (undefined), never 0; ``n_undefined`` counts them. ``kappa`` is NaN with
    ``kappa_reason`` when both label sets are one single identical class."""

    n: int
    accuracy: float
    kappa: float
    kappa_reason: str | None
    per_class: tuple[ClassStats, ...]
    human_dist: dict
    judge_dist: dict
    n_undefined: int

    def to_dict(self) -> dict:
        return {
            "n": self.n,
            "accuracy": self.accuracy,
            "kappa": self.kappa,
            "kappa_reason": self.kappa_reason,
            "per_class": [c.to_dict() for c in self.per_class],
            "human_dist": self.human_dist,
            "judge_dist": self.judge_dist,
            "n_undefined": self.n_undefined,
        }


def _plain(x):
    return x.item() if isinstance(x, np.generic) else x


def judge_report(human, judge, *, labels: Sequence | None = None) -> JudgeReport:
    """Accuracy, Cohen's kappa, per-class precision / recall / support, and both label distributions.

    Accuracy alone hides a judge that never flags the rare class; recall of that class and the two label
    distributions side by side show it at once.
    """
    h, j = _labels_pair(human, judge, "human", "judge")
    conf, cats = _confusion(h, j, labels)
    n = int(conf.sum())
    tp = np.diag(conf)
    support = conf.sum(axis=1)
    predicted = conf.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(predicted > 0, tp / predicted, np.nan)
        recall = np.where(support > 0, tp / support, np.nan)
    try:
        kappa, reason = cohen_kappa(h, j, labels=labels), None
    except InputError as exc:
        kappa, reason = float("nan"), str(exc)
    per = tuple(
        ClassStats(_plain(c), float(precision[i]), float(recall[i]), int(support[i]), int(predicted[i]))
        for i, c in enumerate(cats)
    )
    return JudgeReport(
        n=n,
        accuracy=float(tp.sum() / n),
        kappa=kappa,
        kappa_reason=reason,
        per_class=per,
        human_dist={_plain(c): int(support[i]) for i, c in enumerate(cats)},
        judge_dist={_plain(c): int(predicted[i]) for i, c in enumerate(cats)},
        n_undefined=int(np.isnan(precision).sum() + np.isnan(recall).sum()),
    )
