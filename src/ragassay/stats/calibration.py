"""Calibration of probability scores against binary labels, isotonic recalibration, and the three-way
cascade band (auto-pass / escalate / auto-fail) under declared miss budgets.

Convention: ``p`` is the model's probability that an item is in the positive class ``y = 1`` (for a judge
tier: the item is BAD, the class the judge exists to catch). Low p auto-passes, high p auto-fails.
References: Guo et al., "On Calibration of Modern Neural Networks" (ICML 2017) for ECE; Brier (1950);
Zadrozny & Elkan (2002) for isotonic recalibration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import isotonic_regression

from ragassay.errors import InputError
from ragassay.stats._validate import as_float_vector, check_prob, same_length


def _scores_labels(p, y) -> tuple[np.ndarray, np.ndarray]:
    pv = as_float_vector(p, "scores", allow_nan=False)
    yv = as_float_vector(y, "labels", allow_nan=False)
    same_length(pv, yv, "scores", "labels")
    if ((pv < 0) | (pv > 1)).any():
        raise InputError(
            f"scores must be probabilities in [0, 1]; got values like {pv[(pv < 0) | (pv > 1)][:3].tolist()}"
        )
    if not np.isin(yv, (0.0, 1.0)).all():
        raise InputError(
            f"labels must be binary 0/1, got {np.unique(yv[~np.isin(yv, (0.0, 1.0))])[:5].tolist()}"
        )
    return pv, yv


@dataclass(frozen=True)
class ReliabilityBin:
    lo: float
    hi: float
    count: int
    mean_score: float
    frac_positive: float

    def to_dict(self) -> dict:
        return {
            "lo": self.lo,
            "hi": self.hi,
            "count": self.count,
            "mean_score": self.mean_score,
            "frac_positive": self.frac_positive,
        }


@dataclass(frozen=True)
class Reliability:
    ece: float
    bins: tuple[ReliabilityBin, ...]
    n: int

    def to_dict(self) -> dict:
        return {"ece": self.ece, "n": self.n, "bins": [b.to_dict() for b in self.bins]}


def reliability(p, y, *, bins: int = 10) -> Reliability:
    """Equal-width reliability diagram and expected calibration error.

    Bin b holds scores in [b/B, (b+1)/B), the last bin also 1.0. ECE = sum_b (n_b / n) |mean(p_b) - mean(y_b)|.
    Empty bins are omitted (they carry no weight). ECE below ~0.05 means thresholds on p are usable as
    probabilities; above it, recalibrate (:func:`fit_isotonic`) before choosing thresholds.

    Differs from ``sklearn.calibration.calibration_curve(strategy="uniform")`` only for a score exactly on an
    inner edge (``np.linspace(0, 1, B + 1)[1:-1]``): scikit-learn's bins are (lo, hi] (``searchsorted`` to the
    left), so it puts such a score one bin lower than here. Every other score bins identically.
    """
    if int(bins) != bins or bins < 1:
        raise InputError(f"bins must be a positive integer, got {bins}")
    pv, yv = _scores_labels(p, y)
    # Edges from linspace (as scikit-learn), not p * bins, which can round across an edge; the right-sided
    # search makes bins half-open [lo, hi), the convention stated above (scikit-learn's are (lo, hi]).
    edges = np.linspace(0.0, 1.0, bins + 1)
    idx = np.searchsorted(edges[1:-1], pv, side="right")
    count = np.bincount(idx, minlength=bins)
    sum_p = np.bincount(idx, weights=pv, minlength=bins)
    sum_y = np.bincount(idx, weights=yv, minlength=bins)
    rows = []
    ece = 0.0
    for b in np.flatnonzero(count):
        mp, fy = sum_p[b] / count[b], sum_y[b] / count[b]
        ece += count[b] / pv.size * abs(mp - fy)
        rows.append(ReliabilityBin(float(edges[b]), float(edges[b + 1]), int(count[b]), float(mp), float(fy)))
    return Reliability(ece=float(ece), bins=tuple(rows), n=int(pv.size))


def brier_score(p, y) -> float:
    """Brier score: mean of (p - y)^2; 0 is perfect, 0.25 is a constant 0.5 forecast."""
    pv, yv = _scores_labels(p, y)
    return float(np.mean((pv - yv) ** 2))


@dataclass(frozen=True)
class IsotonicMap:
    """A fitted monotone (non-decreasing) map from raw score to calibrated probability, stored as its
    breakpoints so it can be versioned and re-applied without sklearn. Outside the fitted range the map
    is clipped to its end values; between breakpoints it interpolates linearly, as sklearn does."""

    x: tuple[float, ...]
    y: tuple[float, ...]

    def predict(self, p) -> np.ndarray:
        pv = as_float_vector(p, "scores", allow_nan=False, min_len=0)
        return np.interp(pv, np.asarray(self.x), np.asarray(self.y))

    def to_dict(self) -> dict:
        return {"x": list(self.x), "y": list(self.y)}


def fit_isotonic(p_fit, y_fit) -> IsotonicMap:
    """Fit isotonic regression of labels on scores on the fitting split only; apply it to other splits
    with :meth:`IsotonicMap.predict`. Ranking is preserved (AUC unchanged) while thresholds regain meaning."""
    pv, yv = _scores_labels(p_fit, y_fit)
    if pv.size < 2:
        raise InputError(f"fit_isotonic needs at least 2 labelled items, got {pv.size}")
    # Pool items with equal scores (weighted by count), then the pool-adjacent-violators fit of scipy;
    # this is what sklearn's IsotonicRegression does, and the tests hold the two to the same predictions.
    xs, inverse, counts = np.unique(pv, return_inverse=True, return_counts=True)
    means = np.bincount(inverse, weights=yv) / counts
    fitted = np.clip(isotonic_regression(means, weights=counts.astype(float), increasing=True).x, 0.0, 1.0)
    # Interior points of a constant run change no interpolated value: keep each run's two ends.
    keep = np.ones(len(xs), dtype=bool)
    if len(xs) > 2:
        keep[1:-1] = (fitted[1:-1] != fitted[:-2]) | (fitted[1:-1] != fitted[2:])
    return IsotonicMap(tuple(map(float, xs[keep])), tuple(map(float, fitted[keep])))


@dataclass(frozen=True)
class Band:
    """A cascade band: p < lo auto-passes, p > hi auto-fails, lo <= p <= hi escalates.

    Rates are realized on the data the band is evaluated on: ``false_pass_rate`` = share of positive
    (bad) items auto-passed, ``false_fail_rate`` = share of negative (good) items auto-failed.
    """

    lo: float
    hi: float
    escalation_rate: float
    pass_rate: float
    fail_rate: float
    false_pass_rate: float
    false_fail_rate: float
    n: int
    n_positive: int
    n_negative: int

    def decide(self, p) -> np.ndarray:
        """Route scores: array of 'pass', 'fail' or 'escalate'."""
        pv = as_float_vector(p, "scores", allow_nan=False, min_len=0)
        return np.where(pv < self.lo, "pass", np.where(pv > self.hi, "fail", "escalate"))

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def evaluate_band(p, y, lo: float, hi: float) -> Band:
    """Realized escalation and error rates of the band (lo, hi) on a labelled split; use it to report a
    band on a split other than the one it was picked on."""
    pv, yv = _scores_labels(p, y)
    if not lo <= hi:
        raise InputError(f"band needs lo <= hi, got lo={lo}, hi={hi}")
    pos, neg = yv == 1, yv == 0
    if not pos.any() or not neg.any():
        raise InputError(
            f"labels need both classes to measure a band; got {int(pos.sum())} positive, {int(neg.sum())} negative"
        )
    passed, failed = pv < lo, pv > hi
    return Band(
        lo=float(lo),
        hi=float(hi),
        escalation_rate=float(np.mean(~passed & ~failed)),
        pass_rate=float(passed.mean()),
        fail_rate=float(failed.mean()),
        false_pass_rate=float((passed & pos).sum() / pos.sum()),
        false_fail_rate=float((failed & neg).sum() / neg.sum()),
        n=int(pv.size),
        n_positive=int(pos.sum()),
        n_negative=int(neg.sum()),
    )


def pick_band(p, y, max_false_pass: float = 0.02, max_false_fail: float = 0.02) -> Band:
    """Widest auto-decision band whose misses stay within the declared budgets on these labels.

    With P the positive (bad) scores and N the negative (good) scores, k_P = floor(max_false_pass |P|) and
    k_N = floor(max_false_fail |N|): lo is the (k_P + 1)-th smallest positive score, so at most k_P bad
    items score strictly below it (auto-pass); hi is the (k_N + 1)-th largest negative score, so at most
    k_N good items score strictly above it (auto-fail). If lo > hi the classes separate at these budgets
    and both collapse to the midpoint, which meets both limits and escalates only ties at the cut.
    Pick on one split and report with :func:`evaluate_band` on another: on its own data it looks better
    than it is.
    """
    check_prob(max_false_pass, "max_false_pass", open_low=False)
    check_prob(max_false_fail, "max_false_fail", open_low=False)
    pv, yv = _scores_labels(p, y)
    pos = np.sort(pv[yv == 1])
    neg = np.sort(pv[yv == 0])[::-1]
    if pos.size == 0 or neg.size == 0:
        raise InputError(
            f"pick_band needs both classes in labels; got {pos.size} positive, {neg.size} negative"
        )
    k_pos = int(np.floor(max_false_pass * pos.size + 1e-12))
    k_neg = int(np.floor(max_false_fail * neg.size + 1e-12))
    lo = float(pos[k_pos])
    hi = float(neg[k_neg])
    if lo > hi:
        lo = hi = (lo + hi) / 2.0
    return evaluate_band(pv, yv, lo, hi)
