"""Prediction-powered inference (PPI) for a mean and a paired difference of means.

A cheap predictor ``f`` (here: any score) is known on all N items; a trusted label ``Y`` on a random subsample
L of n of them. The other items are U (N_U = N - n). The PPI estimate of E[Y] (Angelopoulos et al. 2023,
"Prediction-powered inference", Science 382) corrects the predictor's mean by the mean error on the labelled
items; PPI++ (Angelopoulos, Duchi & Zrnic 2023, arXiv:2311.01453) scales the predictor by a power-tuning
``lam``:

    theta = lam * mean_U(f) + mean_L(Y - lam * f)
    se^2  = lam^2 * var_U(f) / N_U + var_L(Y - lam * f) / n        (variances with ddof = 0)
    CI    = theta -/+ z_{1-(1-c)/2} * se                            (CLT, normal quantile)

``lam = 1`` is plain PPI; ``lam = 0`` the labels-only (classical) mean. ``lam="tuned"`` estimates the
variance-minimizing value from the data, lam = cov_L(Y, f) / ((1 + n / N_U) * var_all(f)) (covariance with
ddof 0 over L, variance with ddof 1 over all N items), clipped to [0, 1]; a constant predictor gets lam = 0
(every lam gives the same estimate then). These are ``ppi_py`` 0.2.3's ``ppi_mean_ci`` conventions (its
unlabelled set is disjoint from the labelled one, as U is here), so the figures equal that package's.

The estimate is unbiased for any fixed lam whatever the predictor's bias, provided L is a random subsample of
the items, drawn independently of the scores and labels: labels chosen for the items that look wrong estimate
something else. The interval is a normal approximation; with few labels (under about 30) it is optimistic.

Paired difference of two arms scored on the same N items (B - A):

- **shared labels** (both arms labelled on the same items): PPI on the per-item differences f_B - f_A and
  Y_B - Y_A, one lam (tuned on the differences), exactly the mean formula above.
- **separate labels** (each arm its own labelled items): theta_B - theta_A with each arm's own lam, and
  Var = V_A + V_B - 2 Cov(theta_A, theta_B), where for two item means over sets S and T,
  Cov(mean_S x, mean_T y) = |S n T| / (|S| |T|) * cov(x, y), the covariance (ddof 0) taken over S n T; the four
  cross terms are (U_A, U_B) on lam_A f_A, lam_B f_B, (U_A, L_B), (L_A, U_B) and (L_A, L_B) on the rectifiers
  r = Y - lam f. An estimated variance that is not positive leaves the interval undefined.

A zero standard error (every label alike and nothing left to impute, e.g. lam = 0 over constant labels) leaves
the estimate undefined too: a zero-width normal interval from a finite sample is not a finding.

Labels needed (:func:`ppi_variance`, :func:`labels_needed`): with the tuned lam and N items in all, of which
n labelled, Var(theta) = sigma_Y^2 * ((1 - rho^2) / n + rho^2 / N), rho the correlation of f and Y; the
effective sample size (the labels-only n with the same variance) is sigma_Y^2 / Var(theta).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.special import ndtr, ndtri

from ragassay.errors import InputError
from ragassay.stats._validate import as_float_vector, check_prob

TUNED = "tuned"
MIN_LABELS = 2


# ------------------------------------------------------------------------------------------ results
@dataclass(frozen=True)
class PPIEstimate:
    """A prediction-powered mean (or difference of means) and, beside it, the figures it corrects.

    ``estimate``/``ci_low``/``ci_high``/``se``: the PPI figure; ``lam``: the power-tuning used;
    ``predictor_mean``: the uncorrected mean of the scores over all items; ``classical*``: the labels-only
    mean and its CLT interval; ``effective_n``: the number of labels the classical mean would need for the
    same variance (undefined when ``se`` is 0 or undefined); ``mode``: ``mean``, ``shared`` or ``separate``.
    """

    estimate: float
    ci_low: float
    ci_high: float
    se: float
    lam: float | tuple[float, float]
    n_items: int
    n_labelled: int | tuple[int, int]
    predictor_mean: float
    classical: float
    classical_low: float
    classical_high: float
    classical_se: float
    effective_n: float
    confidence: float
    mode: str = "mean"
    p_value: float = math.nan
    reason: str | None = None

    @property
    def defined(self) -> bool:
        return not math.isnan(self.estimate) and not math.isnan(self.se)

    def to_dict(self) -> dict:
        out = asdict(self)
        for k, v in out.items():
            if isinstance(v, float) and math.isnan(v):
                out[k] = None
            elif isinstance(v, tuple):
                out[k] = list(v)
        out["defined"] = self.defined
        return out


# ------------------------------------------------------------------------------------------ validation
def _bounds(bounds) -> tuple[float, float] | None:
    if bounds is None:
        return None
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise InputError(f"bounds must be a (low, high) pair of numbers or None, got {bounds!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise InputError(f"bounds must be finite with low < high, got ({lo}, {hi})")
    return lo, hi


def _in_bounds(x: np.ndarray, name: str, bounds: tuple[float, float] | None) -> None:
    if bounds is None:
        return
    bad = np.flatnonzero((x < bounds[0]) | (x > bounds[1]))
    if bad.size:
        raise InputError(f"{name}: {bad.size} value(s) outside [{bounds[0]:g}, {bounds[1]:g}] (first at position "
                         f"{int(bad[0])}: {x[bad[0]]!r}); scores and labels must be binary or bounded, on one scale")


def _lam(lam) -> float | str:
    if isinstance(lam, str):
        if lam != TUNED:
            raise InputError(f"lam must be a number in [0, 1] or {TUNED!r}, got {lam!r}")
        return TUNED
    if isinstance(lam, bool):
        raise InputError(f"lam must be a number in [0, 1] or {TUNED!r}, got {lam!r}")
    try:
        v = float(lam)
    except (TypeError, ValueError):
        raise InputError(f"lam must be a number in [0, 1] or {TUNED!r}, got {lam!r}") from None
    if not 0.0 <= v <= 1.0:
        raise InputError(f"lam must lie in [0, 1] (1 = PPI, 0 = labels only), got {v}")
    return v


def _labelled_mask(labelled, n_items: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(mask over the N items, the labelled positions in the order given) from a boolean mask of length N or
    integer positions; positions must be in range and unique (the labels name a subset of the items)."""
    arr = np.asarray(labelled)
    if arr.ndim != 1:
        raise InputError(f"{name}: expected a 1-D mask or list of item positions, got shape {arr.shape}")
    if arr.dtype == bool:
        if arr.size != n_items:
            raise InputError(f"{name}: a boolean mask needs one entry per item ({n_items}), got {arr.size}")
        return arr.copy(), np.flatnonzero(arr)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InputError(f"{name}: expected integer item positions or a boolean mask, got dtype {arr.dtype}")
    pos = arr.astype(np.int64)
    out = np.flatnonzero((pos < 0) | (pos >= n_items))
    if out.size:
        raise InputError(f"{name}: position {int(pos[out[0]])} is not an item (items are 0..{n_items - 1}); "
                         "labels must name items that were scored")
    uniq, counts = np.unique(pos, return_counts=True)
    if (counts > 1).any():
        raise InputError(f"{name}: item position {int(uniq[counts > 1][0])} is labelled more than once; give each "
                         "item one label")
    mask = np.zeros(n_items, dtype=bool)
    mask[pos] = True
    return mask, pos


def _arm(scores, labelled, labels, bounds, tag: str = "") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validated (scores, mask, labels spread over the items with 0 where unlabelled)."""
    f = as_float_vector(scores, f"scores{tag}", allow_nan=False, min_len=MIN_LABELS)
    mask, pos = _labelled_mask(labelled, f.size, f"labelled{tag}")
    y = as_float_vector(labels, f"labels{tag}", allow_nan=False, min_len=0)
    if y.size != pos.size:
        raise InputError(f"labels{tag}: {y.size} label(s) for {pos.size} labelled item(s); give one label per "
                         "labelled item, in the same order")
    if pos.size < MIN_LABELS:
        raise InputError(f"labels{tag}: PPI needs at least {MIN_LABELS} labelled items, got {pos.size}")
    _in_bounds(f, f"scores{tag}", bounds)
    _in_bounds(y, f"labels{tag}", bounds)
    full = np.zeros(f.size)
    full[pos] = y
    return f, mask, full


# ------------------------------------------------------------------------------------------ vectorized core
def _mmean(x: np.ndarray, m: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Row means of ``x`` over mask ``m`` (k = its row counts; NaN where k = 0)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(m, x, 0.0).sum(1) / k


def _mcov(x: np.ndarray, y: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row covariances (ddof 0) of ``x`` and ``y`` over mask ``m``, and the row counts (0 where empty)."""
    k = m.sum(1).astype(np.float64)
    mx, my = _mmean(x, m, k), _mmean(y, m, k)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.where(m, (x - mx[:, None]) * (y - my[:, None]), 0.0).sum(1) / k
    return np.where(k > 0, c, 0.0), k


def _tuned_lam(f: np.ndarray, y: np.ndarray, m: np.ndarray) -> np.ndarray:
    """PPI++'s lam for a mean: cov_L(Y, f) / ((1 + n / N_U) var_all(f)), clipped to [0, 1]; 0 for a constant
    predictor or when no item is unlabelled."""
    cov, n = _mcov(y, f, m)
    nu = (~m).sum(1).astype(np.float64)
    var_f = f.var(axis=1, ddof=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        lam = cov / ((1.0 + n / nu) * var_f)
    lam = np.where((var_f > 0) & (nu > 0) & np.isfinite(lam), lam, 0.0)
    return np.clip(lam, 0.0, 1.0)


def _mean_core(f: np.ndarray, m: np.ndarray, y: np.ndarray, lam) -> dict[str, np.ndarray]:
    """Row-wise PPI mean over (R, N) arrays: f scores, m labelled mask, y labels (ignored where not m)."""
    u = ~m
    n = m.sum(1).astype(np.float64)
    nu = u.sum(1).astype(np.float64)
    lam_v = _tuned_lam(f, y, m) if lam == TUNED else np.full(f.shape[0], float(lam))
    lam_v = np.where(nu > 0, lam_v, 0.0)  # every item labelled: nothing to impute, the labels-only mean
    r = y - lam_v[:, None] * f
    mean_fu = np.where(nu > 0, _mmean(f, u, np.maximum(nu, 1)), 0.0)
    est = lam_v * mean_fu + _mmean(r, m, n)
    var_fu, _ = _mcov(f, f, u)
    var_r, _ = _mcov(r, r, m)
    var = np.where(nu > 0, lam_v ** 2 * var_fu / np.maximum(nu, 1), 0.0) + var_r / n
    var_y, _ = _mcov(y, y, m)
    return {"est": est, "var": var, "lam": lam_v, "n": n, "nu": nu, "r": r, "classical": _mmean(y, m, n),
            "classical_var": var_y / n, "var_y": var_y, "predictor": f.mean(1)}


def _z(confidence: float) -> float:
    return float(ndtri(0.5 + check_prob(confidence, "confidence") / 2))


def _p_two_sided(est: np.ndarray, se: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return 2 * ndtr(-np.abs(est / se))


def _as_matrix(x, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2:
        raise InputError(f"{name}: expected an (R draws x N items) array, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise InputError(f"{name}: contains NaN or infinite values; every item needs a finite value")
    return arr


def _as_mask(x, shape: tuple[int, ...], name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype != bool or arr.shape != shape:
        raise InputError(f"{name}: expected a boolean mask of shape {shape}, got {arr.dtype} {arr.shape}")
    if (arr.sum(1) < MIN_LABELS).any():
        raise InputError(f"{name}: every draw needs at least {MIN_LABELS} labelled items")
    return arr


def ppi_mean_many(scores, labelled, labels, *, lam=1.0, confidence: float = 0.95) -> dict[str, np.ndarray]:
    """:func:`ppi_mean` for R data sets at once (simulation): (R, N) scores, an (R, N) boolean labelled mask
    and (R, N) labels (read only where labelled). Returns arrays of length R: ``estimate``, ``ci_low``,
    ``ci_high``, ``se``, ``lam``, ``classical``, ``classical_low``, ``classical_high``, ``predictor_mean``."""
    f = _as_matrix(scores, "scores")
    y = _as_matrix(np.where(np.asarray(labelled, dtype=bool), labels, 0.0), "labels")
    m = _as_mask(labelled, f.shape, "labelled")
    z = _z(confidence)
    c = _mean_core(f, m, y, _lam(lam))
    se, cse = np.sqrt(c["var"]), np.sqrt(c["classical_var"])
    return {"estimate": c["est"], "ci_low": c["est"] - z * se, "ci_high": c["est"] + z * se, "se": se,
            "lam": c["lam"], "classical": c["classical"], "classical_low": c["classical"] - z * cse,
            "classical_high": c["classical"] + z * cse, "predictor_mean": c["predictor"]}


def _separate_core(fa, ma, ya, fb, mb, yb, lam) -> dict[str, np.ndarray]:
    """Row-wise difference theta_B - theta_A of two PPI means with their own labelled sets, and its variance
    from the four cross-covariances of the shared items (module docstring)."""
    a, b = _mean_core(fa, ma, ya, lam), _mean_core(fb, mb, yb, lam)
    ua, ub = ~ma, ~mb
    xa_u, xb_u = a["lam"][:, None] * fa, b["lam"][:, None] * fb
    cov = np.zeros(fa.shape[0])
    for x, sx, y, sy in ((xa_u, ua, xb_u, ub), (xa_u, ua, b["r"], mb), (a["r"], ma, xb_u, ub),
                         (a["r"], ma, b["r"], mb)):
        c, k = _mcov(x, y, sx & sy)
        with np.errstate(invalid="ignore", divide="ignore"):
            w = k / (sx.sum(1) * sy.sum(1))
        cov += np.where(k > 0, w * c, 0.0)
    var = a["var"] + b["var"] - 2 * cov
    return {"est": b["est"] - a["est"], "var": np.where(var > 0, var, np.nan), "a": a, "b": b}


# ------------------------------------------------------------------------------------------ public
def _estimate(c: dict, z: float, confidence: float, *, mode: str, lam, n_items: int, n_labelled,
              predictor: float, classical: tuple[float, float], var_y: float, reason: str | None = None
              ) -> PPIEstimate:
    est, var = float(c["est"][0]), float(c["var"][0])
    se = math.sqrt(var) if var == var else math.nan
    if se != se:
        reason = reason or "the estimated variance of the difference is not positive (too few shared items)"
        est = math.nan
    elif se == 0:
        # every label (and every scaled score) alike: a normal interval of zero width claims certainty that
        # a finite sample cannot give
        reason = reason or ("no variation in the labels and scores the interval rests on: its width would be "
                            "0; label more items")
        est = se = math.nan
    cl, cvar = classical
    cse = math.sqrt(cvar) if cvar == cvar else math.nan
    eff = var_y / var if var == var and var > 0 and var_y == var_y else math.nan
    p = float(_p_two_sided(np.array([est]), np.array([se]))[0]) if se == se and se > 0 else math.nan
    return PPIEstimate(
        estimate=est, ci_low=est - z * se, ci_high=est + z * se, se=se, lam=lam, n_items=n_items,
        n_labelled=n_labelled, predictor_mean=predictor, classical=cl, classical_low=cl - z * cse,
        classical_high=cl + z * cse, classical_se=cse, effective_n=eff, confidence=confidence, mode=mode,
        p_value=p, reason=reason)


def ppi_mean(scores, labelled, labels, *, lam=1.0, confidence: float = 0.95,
             bounds: tuple[float, float] | None = (0.0, 1.0)) -> PPIEstimate:
    """Prediction-powered mean of the labels' quantity from ``scores`` on all N items and ``labels`` on the
    items ``labelled`` (a boolean mask of length N, or integer positions in the order of ``labels``).

    ``lam``: 1 (PPI, default), a fixed value in [0, 1], or ``"tuned"`` (PPI++). ``bounds``: the scale both
    scores and labels must lie on (default [0, 1]; None: any finite value). Refused: NaN or infinite values,
    labels of positions that are not items or of one item twice, fewer than 2 labels, values off the scale.
    Formula and reference: the module docstring. ``effective_n`` is var_L(Y) / se^2.
    """
    bounds = _bounds(bounds)
    lam = _lam(lam)
    f, m, y = _arm(scores, labelled, labels, bounds)
    z = _z(confidence)
    c = _mean_core(f[None], m[None], y[None], lam)
    return _estimate(c, z, confidence, mode="mean", lam=float(c["lam"][0]), n_items=f.size,
                     n_labelled=int(m.sum()), predictor=float(c["predictor"][0]),
                     classical=(float(c["classical"][0]), float(c["classical_var"][0])), var_y=float(c["var_y"][0]))


def ppi_paired_difference(scores_a, labelled_a, labels_a, scores_b, labelled_b, labels_b, *, lam=1.0,
                          confidence: float = 0.95, bounds: tuple[float, float] | None = (0.0, 1.0)
                          ) -> PPIEstimate:
    """Prediction-powered paired difference B - A of two arms scored on the same N items (position i is the
    same item in both). When both arms are labelled on the same items the labels are **shared**: PPI on the
    per-item differences (one lam). Otherwise each arm's own labels (**separate**): each arm's PPI mean with
    its own lam and the variance of the difference with the shared items' covariances (module docstring).

    The classical figure beside it is the labels-only difference: on the shared items in the shared mode,
    the difference of the two labels-only means (each arm's own variance, independent sets assumed when
    they do not overlap, the overlap's covariance when they do) in the separate mode.
    """
    bounds = _bounds(bounds)
    lam = _lam(lam)
    fa, ma, ya = _arm(scores_a, labelled_a, labels_a, bounds, " (A)")
    fb, mb, yb = _arm(scores_b, labelled_b, labels_b, bounds, " (B)")
    if fa.size != fb.size:
        raise InputError(f"scores (A) and scores (B) must be paired item by item: {fa.size} and {fb.size} items; "
                         "align both arms on the same items in the same order")
    z = _z(confidence)
    n = fa.size
    if np.array_equal(ma, mb):
        c = _mean_core((fb - fa)[None], ma[None], (yb - ya)[None], lam)
        return _estimate(c, z, confidence, mode="shared", lam=float(c["lam"][0]), n_items=n,
                         n_labelled=int(ma.sum()), predictor=float(c["predictor"][0]),
                         classical=(float(c["classical"][0]), float(c["classical_var"][0])),
                         var_y=float(c["var_y"][0]))
    c = _separate_core(fa[None], ma[None], ya[None], fb[None], mb[None], yb[None], lam)
    a, b = c["a"], c["b"]
    both = ma & mb
    cov_y = 0.0
    if both.sum() > 0:
        cy, k = _mcov(ya[None], yb[None], both[None])
        cov_y = float(k[0] * cy[0] / (ma.sum() * mb.sum()))
    cvar = float(a["classical_var"][0] + b["classical_var"][0]) - 2 * cov_y
    # the labels-only variance of the difference with the same number of labels per arm, for effective_n
    n_mean = (ma.sum() + mb.sum()) / 2
    var_y = cvar * n_mean if cvar > 0 else math.nan
    return _estimate(c, z, confidence, mode="separate", lam=(float(a["lam"][0]), float(b["lam"][0])), n_items=n,
                     n_labelled=(int(ma.sum()), int(mb.sum())), predictor=float(b["predictor"][0] - a["predictor"][0]),
                     classical=(float(b["classical"][0] - a["classical"][0]), cvar if cvar > 0 else math.nan),
                     var_y=var_y)


def ppi_paired_difference_many(scores_a, labelled_a, labels_a, scores_b, labelled_b, labels_b, *, lam=1.0,
                               confidence: float = 0.95) -> dict[str, np.ndarray]:
    """:func:`ppi_paired_difference` for R data sets at once, (R, N) arrays per arm (the labelled masks
    boolean); shared labels where a draw's two masks are equal, separate otherwise. Returns arrays of length
    R: ``estimate``, ``ci_low``, ``ci_high``, ``se``."""
    fa, fb = _as_matrix(scores_a, "scores (A)"), _as_matrix(scores_b, "scores (B)")
    if fa.shape != fb.shape:
        raise InputError(f"scores (A) and (B) must have the same shape, got {fa.shape} and {fb.shape}")
    ma, mb = _as_mask(labelled_a, fa.shape, "labelled (A)"), _as_mask(labelled_b, fb.shape, "labelled (B)")
    ya = _as_matrix(np.where(ma, labels_a, 0.0), "labels (A)")
    yb = _as_matrix(np.where(mb, labels_b, 0.0), "labels (B)")
    lam = _lam(lam)
    z = _z(confidence)
    shared = (ma == mb).all(1)
    est, var = np.empty(fa.shape[0]), np.empty(fa.shape[0])
    if shared.any():
        s = _mean_core((fb - fa)[shared], ma[shared], (yb - ya)[shared], lam)
        est[shared], var[shared] = s["est"], s["var"]
    if (~shared).any():
        k = ~shared
        s = _separate_core(fa[k], ma[k], ya[k], fb[k], mb[k], yb[k], lam)
        est[k], var[k] = s["est"], s["var"]
    se = np.sqrt(var)
    return {"estimate": est, "ci_low": est - z * se, "ci_high": est + z * se, "se": se}


# ------------------------------------------------------------------------------------------ labels needed
def ppi_variance(n_labelled: int, n_items: int, sigma_y: float, rho: float) -> float:
    """Variance of the PPI++ mean (optimal lam) with ``n_labelled`` of ``n_items`` labelled:
    sigma_y^2 * ((1 - rho^2) / n + rho^2 / N). rho = 0 gives the labels-only sigma_y^2 / n; n = N gives
    sigma_y^2 / N whatever rho."""
    n, big = _counts(n_labelled, n_items)
    s, r = _sigma_rho(sigma_y, rho)
    return s * s * ((1 - r * r) / n + r * r / big)


def effective_labels(n_labelled: int, n_items: int, rho: float) -> float:
    """The labels-only sample size with the same variance as PPI++ on ``n_labelled`` of ``n_items`` labels:
    n / (1 - rho^2 + rho^2 n / N) (sigma_y cancels)."""
    n, big = _counts(n_labelled, n_items)
    _, r = _sigma_rho(1.0, rho)
    return n / (1 - r * r + r * r * n / big)


def labels_needed(half_width: float, sigma_y: float, rho: float, n_items: int | None = None, *,
                  confidence: float = 0.95) -> dict:
    """Labels needed for a CI half-width of at most ``half_width``: by the classical mean,
    ceil((z sigma_y / h)^2), and by PPI++ with a predictor of correlation ``rho`` on ``n_items`` items (None:
    unlimited items), the smallest n with z^2 Var(theta) <= h^2, i.e. n >= (1 - rho^2) / (h^2 / (z sigma_y)^2 -
    rho^2 / N). ``ppi`` is None when even labelling every item is not enough (then the classical n exceeds N
    too)."""
    if not (isinstance(half_width, int | float) and math.isfinite(half_width) and half_width > 0):
        raise InputError(f"half_width must be a finite number > 0, got {half_width!r}")
    s, r = _sigma_rho(sigma_y, rho)
    z = _z(confidence)
    target = (half_width / (z * s)) ** 2 if s > 0 else math.inf
    classical = 1 if s == 0 else max(1, math.ceil(round(1 / target, 9)))
    if n_items is None:
        room = target
    else:
        _, big = _counts(1, n_items)
        room = target - r * r / big
    if room <= 0:
        ppi = None
    else:
        ppi = max(1, math.ceil(round((1 - r * r) / room, 9)))
        if n_items is not None and ppi > n_items:
            ppi = None
    return {"half_width": float(half_width), "confidence": confidence, "sigma_y": s, "rho": r,
            "n_items": n_items, "classical": classical, "ppi": ppi,
            "saving": None if ppi is None else 1 - ppi / classical}


def _counts(n_labelled, n_items) -> tuple[int, int]:
    for v, name in ((n_labelled, "n_labelled"), (n_items, "n_items")):
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise InputError(f"{name} must be a positive integer, got {v!r}")
    if n_labelled > n_items:
        raise InputError(f"n_labelled ({n_labelled}) cannot exceed n_items ({n_items})")
    return int(n_labelled), int(n_items)


def _sigma_rho(sigma_y, rho) -> tuple[float, float]:
    if not (isinstance(sigma_y, int | float) and math.isfinite(sigma_y) and sigma_y >= 0):
        raise InputError(f"sigma_y must be a finite number >= 0, got {sigma_y!r}")
    if not (isinstance(rho, int | float) and -1 <= rho <= 1):
        raise InputError(f"rho (the predictor-label correlation) must lie in [-1, 1], got {rho!r}")
    return float(sigma_y), float(rho)


__all__ = ["PPIEstimate", "TUNED", "effective_labels", "labels_needed", "ppi_mean", "ppi_mean_many",
           "ppi_paired_difference", "ppi_paired_difference_many", "ppi_variance"]
