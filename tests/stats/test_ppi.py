"""Prediction-powered means (ragassay.stats.ppi) against ppi_py 0.2.3, a closed form written out here, and
simulated coverage.

ppi_py (PyPI ``ppi-python`` 0.2.3) needs numba, statsmodels, pandas and gdown, which the project does not
depend on; its figures below were computed once in a scratch venv with ``ppi_py.ppi_mean_pointestimate``,
``ppi_py.ppi_mean_ci(alpha=0.05)`` and ``ppi_py.classical_mean_ci`` on the data of :func:`_data` (built from
uniform draws only, whose stream numpy keeps stable), labelled = U, unlabelled = the rest; the paired rows
are ppi_py on the per-item differences.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from ragassay.errors import InputError
from ragassay.stats.ppi import (
    effective_labels,
    labels_needed,
    ppi_mean,
    ppi_mean_many,
    ppi_paired_difference,
    ppi_paired_difference_many,
    ppi_variance,
)

# ppi_py 0.2.3: (estimate, ci_low, ci_high) of the mean and of the shared-label difference B - A
PPI_PY = {
    ("binary", 1.0): ((0.5829545454545455, 0.4981470134580815, 0.6677620774510096),
                      (-0.017045454545454544, -0.1252508733892621, 0.091159964298353)),
    ("binary", 0.5): ((0.5873106060606061, 0.514999979833101, 0.6596212322881113),
                      (0.008143939393939394, -0.0638681337404072, 0.080156012528286)),
    ("binary", "tuned"): ((0.5870667879554923, 0.5148126135230355, 0.659320962387949),
                          (0.017284204718093752, -0.050479103885091955, 0.08504751332127945)),
    ("bounded", 1.0): ((0.48994756469637923, 0.46442939162020713, 0.5154657377725513),
                       (0.04103913700037397, 0.01887748576733035, 0.06320078823341758)),
    ("bounded", 0.5): ((0.47094293274011245, 0.43682356885279516, 0.5050622966274297),
                       (0.031114435869071158, 0.019447673409072733, 0.042781198329069584)),
    ("bounded", "tuned"): ((0.48994756469637923, 0.46442939162020713, 0.5154657377725513),
                           (0.021653138837549, 0.016521410238607464, 0.02678486743649054)),
}
PPI_PY_CLASSICAL = {"binary": (0.5037232293352037, 0.6796101039981296),
                    "bounded": (0.40071212487547236, 0.503164476692219)}


def _data(seed: int, kind: str, big: int = 1000, n: int = 120):
    rng = np.random.default_rng(seed)
    u1, u2, u3, u4, u5 = (rng.random(big) for _ in range(5))
    if kind == "binary":
        y = (u1 < 0.6).astype(float)
        f = np.where(u2 < 0.85, y, 1 - y)
        yb = np.where(u4 < 0.2, 1 - y, y)
        fb = np.where(u5 < 0.85, yb, 1 - yb)
    else:
        y = u1
        f = np.clip(0.7 * y + 0.2 + 0.3 * (u2 - 0.5), 0, 1)
        yb = np.clip(y + 0.1 * (u4 - 0.3), 0, 1)
        fb = np.clip(0.7 * yb + 0.25 + 0.3 * (u5 - 0.5), 0, 1)
    return f, y, fb, yb, np.argsort(u3)[:n]


@pytest.mark.parametrize("kind", ["binary", "bounded"])
@pytest.mark.parametrize("lam", [1.0, 0.5, "tuned"])
def test_mean_and_shared_difference_equal_ppi_py(kind, lam):
    f, y, fb, yb, lab = _data(1 if kind == "binary" else 2, kind)
    mean = ppi_mean(f, lab, y[lab], lam=lam)
    diff = ppi_paired_difference(f, lab, y[lab], fb, lab, yb[lab], lam=lam)
    want_mean, want_diff = PPI_PY[(kind, lam)]
    np.testing.assert_allclose((mean.estimate, mean.ci_low, mean.ci_high), want_mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose((diff.estimate, diff.ci_low, diff.ci_high), want_diff, rtol=0, atol=1e-12)
    np.testing.assert_allclose((mean.classical_low, mean.classical_high), PPI_PY_CLASSICAL[kind], atol=1e-12)
    assert diff.mode == "shared" and mean.n_labelled == 120 and mean.n_items == 1000


def test_tuned_lam_is_the_closed_form_and_clipped():
    f, y, _, _, lab = _data(1, "binary")
    m = np.zeros(f.size, bool)
    m[lab] = True
    n, nu = m.sum(), (~m).sum()
    cov = np.mean((y[m] - y[m].mean()) * (f[m] - f[m].mean()))
    want = cov / ((1 + n / nu) * np.var(f, ddof=1))
    got = ppi_mean(f, m, y[m], lam="tuned")
    assert got.lam == pytest.approx(want, abs=1e-15) and 0 < got.lam < 1
    # a predictor anti-correlated with the labels gets lam 0: the labels-only mean, exactly
    anti = ppi_mean(1 - y, m, y[m], lam="tuned")
    assert anti.lam == 0.0
    assert anti.estimate == pytest.approx(y[m].mean(), abs=1e-15)
    assert anti.se == pytest.approx(anti.classical_se, abs=1e-15)
    # a constant predictor: lam 0 (any lam gives the same estimate)
    assert ppi_mean(np.full(f.size, 0.7), m, y[m], lam="tuned").lam == 0.0


def _separate_by_hand(fa, la, ya, fb, lb, yb, lam_a, lam_b, z):
    """The separate-labels difference written out item by item: two PPI means and the covariance of two
    item means over sets S, T, |S n T| / (|S| |T|) * cov over S n T (ddof 0)."""
    big = len(fa)
    ua = [i for i in range(big) if i not in set(la)]
    ub = [i for i in range(big) if i not in set(lb)]
    ra = {i: ya[k] - lam_a * fa[i] for k, i in enumerate(la)}
    rb = {i: yb[k] - lam_b * fb[i] for k, i in enumerate(lb)}
    xa = {i: lam_a * fa[i] for i in ua}
    xb = {i: lam_b * fb[i] for i in ub}

    def mean(d):
        return sum(d.values()) / len(d)

    def var(d):
        mu = mean(d)
        return sum((v - mu) ** 2 for v in d.values()) / len(d)

    def cov(dx, dy):
        both = sorted(set(dx) & set(dy))
        if not both:
            return 0.0
        mx = sum(dx[i] for i in both) / len(both)
        my = sum(dy[i] for i in both) / len(both)
        c = sum((dx[i] - mx) * (dy[i] - my) for i in both) / len(both)
        return len(both) / (len(dx) * len(dy)) * c

    ta, tb = mean(xa) + mean(ra), mean(xb) + mean(rb)
    va = var(xa) / len(xa) + var(ra) / len(ra)
    vb = var(xb) / len(xb) + var(rb) / len(rb)
    c = cov(xa, xb) + cov(xa, rb) + cov(ra, xb) + cov(ra, rb)
    se = math.sqrt(va + vb - 2 * c)
    return tb - ta, tb - ta - z * se, tb - ta + z * se


@pytest.mark.parametrize("lam", [1.0, 0.3])
def test_separate_labels_difference_equals_the_closed_form(lam):
    f, y, fb, yb, _ = _data(3, "bounded", big=60)
    rng = np.random.default_rng(7)
    la = sorted(rng.choice(60, 15, replace=False).tolist())
    lb = sorted(set(la[:6]) | set(rng.choice(60, 12, replace=False).tolist()))
    got = ppi_paired_difference(f, la, y[la], fb, lb, yb[lb], lam=lam, confidence=0.9)
    want = _separate_by_hand(f, la, y[la], fb, lb, yb[lb], lam, lam, norm.ppf(0.95))
    assert got.mode == "separate" and got.n_labelled == (len(la), len(lb))
    np.testing.assert_allclose((got.estimate, got.ci_low, got.ci_high), want, rtol=1e-12)


def test_separate_labels_reduce_to_shared_when_the_sets_are_equal():
    """The four-covariance variance on equal sets is the differenced variance (the cross terms vanish)."""
    f, y, fb, yb, lab = _data(4, "bounded", big=200, n=40)
    shared = ppi_paired_difference(f, lab, y[lab], fb, lab, yb[lab], lam=1.0)
    m = np.zeros(200, bool)
    m[lab] = True
    many = ppi_paired_difference_many(f[None], m[None], y[None], fb[None], m[None], yb[None], lam=1.0)
    assert many["estimate"][0] == pytest.approx(shared.estimate, abs=1e-14)
    from ragassay.stats.ppi import _separate_core

    sep = _separate_core(f[None], m[None], y[None], fb[None], m[None], yb[None], 1.0)
    assert math.sqrt(sep["var"][0]) == pytest.approx(shared.se, rel=1e-12)


# ------------------------------------------------------------------------------------------ simulation
R, BIG, N_LAB = 1000, 600, 80


def _lenient_judge(y, u):
    """A judge that passes 95% of the good items and 30% of the bad ones: biased upwards."""
    return np.where(y == 1, u < 0.95, u < 0.30).astype(float)


def _masks(rng, r, big, n):
    order = np.argsort(rng.random((r, big)), axis=1)[:, :n]
    m = np.zeros((r, big), bool)
    np.put_along_axis(m, order, True, axis=1)
    return m


@pytest.mark.parametrize("lam", [1.0, "tuned"])
def test_mean_interval_covers_at_nominal_95(lam):
    rng = np.random.default_rng(11)
    y = (rng.random((R, BIG)) < 0.6).astype(float)
    f = _lenient_judge(y, rng.random((R, BIG)))
    out = ppi_mean_many(f, _masks(rng, R, BIG, N_LAB), y, lam=lam)
    cover = np.mean((out["ci_low"] <= 0.6) & (0.6 <= out["ci_high"]))
    assert cover >= 0.93, cover
    # and the judge's own mean misses the truth by its bias, which the correction removes
    assert out["predictor_mean"].mean() == pytest.approx(0.6 * 0.95 + 0.4 * 0.30, abs=0.005)
    assert out["estimate"].mean() == pytest.approx(0.6, abs=0.005)


@pytest.mark.parametrize("design", ["shared", "separate"])
@pytest.mark.parametrize("lam", [1.0, "tuned"])
def test_paired_difference_interval_covers_at_nominal_95(design, lam):
    rng = np.random.default_rng(12 if design == "shared" else 13)
    ya = (rng.random((R, BIG)) < 0.6).astype(float)
    # B keeps 80% of A's passes and passes half of A's failures: E = 0.48 + 0.20 = 0.68, a true gain of 0.08
    u = rng.random((R, BIG))
    yb = np.where(ya == 1, u < 0.8, u < 0.5).astype(float)
    fa, fb = _lenient_judge(ya, rng.random((R, BIG))), _lenient_judge(yb, rng.random((R, BIG)))
    ma = _masks(rng, R, BIG, N_LAB)
    mb = ma if design == "shared" else _masks(rng, R, BIG, N_LAB)
    out = ppi_paired_difference_many(fa, ma, ya, fb, mb, yb, lam=lam)
    cover = np.mean((out["ci_low"] <= 0.08) & (0.08 <= out["ci_high"]))
    assert cover >= 0.93, cover
    assert out["estimate"].mean() == pytest.approx(0.08, abs=0.005)


def test_ppi_is_narrower_than_labels_only_with_a_good_judge():
    rng = np.random.default_rng(14)
    y = (rng.random((R, BIG)) < 0.6).astype(float)
    good = np.where(rng.random((R, BIG)) < 0.95, y, 1 - y)  # 95% accurate, unbiased flips
    out = ppi_mean_many(good, _masks(rng, R, BIG, N_LAB), y, lam=1.0)
    ppi_w = out["ci_high"] - out["ci_low"]
    cl_w = out["classical_high"] - out["classical_low"]
    assert np.median(ppi_w / cl_w) < 0.75
    # the predicted ratio from the population figures: Var(PPI) = Var(Y - f) / n + Var(f) / N_U against
    # Var(Y) / n, with P(Y != f) = 0.05, E(Y - f) = 0.6 - 0.59, Var(f) = 0.59 * 0.41, Var(Y) = 0.24
    var_ppi = (0.05 - 0.01 ** 2) / N_LAB + 0.59 * 0.41 / (BIG - N_LAB)
    want = math.sqrt(var_ppi / (0.24 / N_LAB))
    assert np.median(ppi_w / cl_w) == pytest.approx(want, abs=0.02)


def test_corrected_mean_removes_a_known_judge_bias():
    """One data set: the judge adds +0.2 to every item; the corrected mean lands on the label mean."""
    rng = np.random.default_rng(15)
    y = rng.random(2000) * 0.8
    f = np.clip(y + 0.2 + rng.normal(0, 0.05, 2000), 0, 1)
    lab = rng.choice(2000, 150, replace=False)
    got = ppi_mean(f, lab, y[lab])
    assert f.mean() - y.mean() == pytest.approx(0.2, abs=0.01)
    assert got.estimate == pytest.approx(y.mean(), abs=0.01)
    assert got.ci_low <= y.mean() <= got.ci_high
    assert got.effective_n > 5 * 150  # a judge this good is worth many labels


def test_tuned_variance_formula_matches_simulation():
    rng = np.random.default_rng(16)
    y = rng.random((R, BIG))
    f = np.clip(y + rng.normal(0, 0.15, (R, BIG)), -1, 2)
    rho = np.corrcoef(y.ravel(), f.ravel())[0, 1]
    out = ppi_mean_many(f, _masks(rng, R, BIG, N_LAB), y, lam="tuned")
    want = ppi_variance(N_LAB, BIG, math.sqrt(1 / 12), rho)
    assert out["estimate"].var() == pytest.approx(want, rel=0.12)


# ------------------------------------------------------------------------------------------ labels needed
def test_variance_formula_edges():
    assert ppi_variance(50, 500, 0.5, 0.0) == pytest.approx(0.25 / 50)
    assert ppi_variance(500, 500, 0.5, 0.9) == pytest.approx(0.25 / 500)
    assert effective_labels(100, 10**9, 0.9) == pytest.approx(100 / (1 - 0.81), rel=1e-6)
    assert effective_labels(100, 100, 0.9) == pytest.approx(100)


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.8, 0.9, 0.95])
def test_labels_needed_is_the_smallest_n_meeting_the_width(rho):
    z = norm.ppf(0.975)
    got = labels_needed(0.03, 0.5, rho, 5000)
    n = got["ppi"]
    assert z * math.sqrt(ppi_variance(n, 5000, 0.5, rho)) <= 0.03 + 1e-12
    if n > 1:
        assert z * math.sqrt(ppi_variance(n - 1, 5000, 0.5, rho)) > 0.03
    assert got["classical"] == math.ceil((z * 0.5 / 0.03) ** 2)  # 1068
    if rho == 0.0:
        assert n == got["classical"]


def test_labels_needed_says_when_no_budget_reaches_the_width():
    got = labels_needed(0.01, 0.5, 0.9, 1000)  # sigma/sqrt(1000) * 1.96 = 0.031 > 0.01 even fully labelled
    assert got["ppi"] is None and got["saving"] is None
    assert labels_needed(0.05, 0.5, 0.9, None)["ppi"] == math.ceil((1 - 0.81) * (norm.ppf(0.975) * 0.5 / 0.05) ** 2)


# ------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize(("call", "message"), [
    (lambda: ppi_mean([0.5, np.nan, 1], [0, 1], [1, 0]), "NaN"),
    (lambda: ppi_mean([0.5, 0.2, 1], [0, 1], [1, np.nan]), "NaN"),
    (lambda: ppi_mean([0.5, 0.2, 1], [0, 1], [1]), "1 label"),
    (lambda: ppi_mean([0.5, 0.2, 1], [0], [1]), "at least 2"),
    (lambda: ppi_mean([0.5, 0.2, 1], [0, 3], [1, 0]), "not an item"),
    (lambda: ppi_mean([0.5, 0.2, 1], [1, 1], [1, 0]), "more than once"),
    (lambda: ppi_mean([0.5, 0.2, 1.5], [0, 1], [1, 0]), "outside [0, 1]"),
    (lambda: ppi_mean([0.5, 0.2, 1], [0, 1], [2, 0]), "outside [0, 1]"),
    (lambda: ppi_mean([0.5, 0.2, 1], [True, False], [1]), "one entry per item"),
    (lambda: ppi_mean([0.5, 0.2, 1], [0, 1], [1, 0], lam=1.5), "lam must lie"),
    (lambda: ppi_mean([0.5, 0.2, 1], [0, 1], [1, 0], lam="auto"), "tuned"),
    (lambda: ppi_paired_difference([0.5, 0.2, 1], [0, 1], [1, 0], [0.5, 0.2], [0, 1], [1, 0]), "paired item"),
])
def test_bad_inputs_are_refused_with_a_reason(call, message):
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        call()


def test_unbounded_scale_is_allowed_when_asked():
    got = ppi_mean([5.0, 7.0, 9.0, 11.0], [0, 1], [6.0, 7.5], bounds=None)
    # lam 1: mean_U(f) + mean_L(y - f) = 10 + (1 + 0.5)/2
    assert got.estimate == pytest.approx(10.75)
