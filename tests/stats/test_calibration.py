"""Reliability/ECE vs sklearn calibration_curve, Brier vs sklearn, isotonic map vs sklearn, cascade band."""

import numpy as np
import pytest
from sklearn.calibration import calibration_curve
from sklearn.isotonic import IsotonicRegression
from sklearn.metrics import brier_score_loss

from ragassay.errors import InputError
from ragassay.stats import brier_score, evaluate_band, fit_isotonic, pick_band, reliability


def scores(seed, n=400, shift=0.35):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(int)
    p = np.clip(rng.beta(2, 5, n) + shift * y, 0, 1)
    return p, y


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("bins", [5, 10, 15])
def test_reliability_bins_and_ece_match_sklearn_calibration_curve(seed, bins):
    p, y = scores(seed)
    p[:4] = [0.0, 0.3, 0.7, 1.0]  # values on bin edges
    rel = reliability(p, y, bins=bins)
    frac, mean_p = calibration_curve(y, p, n_bins=bins, strategy="uniform")
    np.testing.assert_allclose([b.frac_positive for b in rel.bins], frac, atol=1e-12)
    np.testing.assert_allclose([b.mean_score for b in rel.bins], mean_p, atol=1e-12)
    edges = np.linspace(0, 1, bins + 1)
    counts = np.bincount(np.searchsorted(edges[1:-1], p, side="right"), minlength=bins)
    counts = counts[counts > 0]
    assert rel.ece == pytest.approx(np.sum(counts / p.size * np.abs(frac - mean_p)), abs=1e-12)
    assert sum(b.count for b in rel.bins) == p.size


def test_a_score_on_an_inner_edge_lands_one_bin_higher_than_in_sklearn():
    # 4 bins, edges 0, .25, .5, .75, 1; 0.25 is an inner edge
    p, y = np.array([0.1, 0.25]), np.array([0, 1])
    rel = reliability(p, y, bins=4)
    # ours: [0, .25) holds 0.1, [.25, .5) holds 0.25 -> two bins, gaps |0.1 - 0| and |0.25 - 1|
    assert [(b.lo, b.count, b.mean_score, b.frac_positive) for b in rel.bins] == [(0.0, 1, 0.1, 0.0),
                                                                                  (0.25, 1, 0.25, 1.0)]
    assert rel.ece == pytest.approx(0.5 * 0.1 + 0.5 * 0.75, abs=1e-15)
    # scikit-learn: (lo, hi] puts 0.25 into the first bin with 0.1 -> one bin, mean 0.175, half positive
    frac, mean_p = calibration_curve(y, p, n_bins=4, strategy="uniform")
    np.testing.assert_allclose(mean_p, [0.175])
    np.testing.assert_allclose(frac, [0.5])
    # off the edges the two agree bin for bin
    q = np.array([0.1, 0.26, 0.6, 0.9])
    frac, mean_p = calibration_curve(np.array([0, 1, 1, 0]), q, n_bins=4, strategy="uniform")
    assert [b.mean_score for b in reliability(q, np.array([0, 1, 1, 0]), bins=4).bins] == list(mean_p)


def test_perfectly_calibrated_bins_have_zero_ece():
    p = np.repeat([0.25, 0.75], 8)
    y = np.r_[[1, 0, 0, 0] * 2, [1, 1, 1, 0] * 2]
    assert reliability(p, y).ece == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize("seed", [0, 1])
def test_brier_matches_sklearn(seed):
    p, y = scores(seed)
    assert brier_score(p, y) == pytest.approx(brier_score_loss(y, p), abs=1e-15)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_isotonic_map_fitted_on_one_split_matches_sklearn_on_another(seed):
    p, y = scores(seed, n=600)
    fit_p, fit_y = p[:300], y[:300]
    rep_p = np.r_[p[300:], 0.0, 1.0]  # includes points outside the fitted range: clipped to the ends
    iso = fit_isotonic(fit_p, fit_y)
    ref = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(fit_p, fit_y)
    np.testing.assert_allclose(iso.predict(rep_p), ref.predict(rep_p), atol=1e-12)
    assert np.all(np.diff(iso.predict(np.sort(rep_p))) >= 0)
    # Recalibration on held-out data lowers ECE for this miscalibrated score.
    rp, ry = p[300:], y[300:]
    assert reliability(iso.predict(rp), ry).ece < reliability(rp, ry).ece


def brute_force_band(p, y, fp, ff):
    """Oracle: the largest lo / smallest hi among data values meeting each budget, by exhaustive search."""
    bad, good = p[y == 1], p[y == 0]
    cands = np.unique(np.r_[p, 0.0, 1.0 + 1e-9])
    lo_ok = [c for c in cands if (bad < c).sum() <= np.floor(fp * bad.size + 1e-12)]
    hi_ok = [c for c in cands if (good > c).sum() <= np.floor(ff * good.size + 1e-12)]
    return max(lo_ok), min(hi_ok)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("budgets", [(0.02, 0.02), (0.1, 0.05), (0.0, 0.0)])
def test_pick_band_is_the_widest_band_within_budgets(seed, budgets):
    p, y = scores(seed, shift=0.3)
    band = pick_band(p, y, *budgets)
    assert band.false_pass_rate <= budgets[0] + 1e-12
    assert band.false_fail_rate <= budgets[1] + 1e-12
    lo, hi = brute_force_band(p, y, *budgets)
    if lo <= hi:
        assert (band.lo, band.hi) == (lo, hi)
    assert band.escalation_rate == pytest.approx(np.mean((p >= band.lo) & (p <= band.hi)))
    assert band.pass_rate + band.fail_rate + band.escalation_rate == pytest.approx(1.0)


def test_pick_band_on_separated_classes_collapses_to_one_cut():
    p = np.r_[np.linspace(0.0, 0.3, 50), np.linspace(0.7, 1.0, 50)]
    y = np.r_[np.zeros(50), np.ones(50)]
    band = pick_band(p, y, 0.0, 0.0)
    assert band.lo == band.hi == pytest.approx(0.5)
    assert band.escalation_rate == 0.0 and band.false_pass_rate == 0.0 and band.false_fail_rate == 0.0
    np.testing.assert_array_equal(band.decide([0.1, 0.5, 0.9]), ["pass", "escalate", "fail"])


def test_band_picked_on_fit_split_reported_on_other_split():
    p, y = scores(5, n=800, shift=0.3)
    band = pick_band(p[:400], y[:400], 0.05, 0.05)
    held = evaluate_band(p[400:], y[400:], band.lo, band.hi)
    assert (held.lo, held.hi) == (band.lo, band.hi) and held.n == 400
    bad = y[400:] == 1
    assert held.false_pass_rate == pytest.approx(np.mean(p[400:][bad] < band.lo))


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: pick_band([0.1, 0.2], [0, 0]), "both classes"),
        (lambda: pick_band([0.1, 1.2], [0, 1]), r"\[0, 1\]"),
        (lambda: pick_band([0.1, 0.2], [0, 2]), "binary"),
        (lambda: pick_band([0.1, 0.2], [0, 1], max_false_pass=1.0), "max_false_pass"),
        (lambda: reliability([0.1, np.nan], [0, 1]), "NaN"),
        (lambda: reliability([0.1], [0, 1]), "paired"),
        (lambda: reliability([0.1], [0], bins=0), "bins"),
        (lambda: evaluate_band([0.1, 0.9], [0, 1], 0.8, 0.2), "lo <= hi"),
        (lambda: fit_isotonic([0.1], [1]), "at least 2"),
    ],
)
def test_calibration_bad_inputs(call, match):
    with pytest.raises(InputError, match=match):
        call()
