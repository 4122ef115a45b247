"""Kappa vs scikit-learn, Krippendorff's alpha vs the krippendorff package, tau-b vs scipy, judge report."""

import krippendorff
import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import cohen_kappa_score, precision_recall_fscore_support

from ragassay.errors import InputError
from ragassay.stats import cohen_kappa, judge_report, kendall_tau_b, krippendorff_alpha


def test_spec_80_percent_agreement_gives_kappa_052():
    # 100 items: 60 both yes, 20 both no, 10 + 10 disagreements; each rater says yes 70% of the time.
    a = np.r_[["yes"] * 60, ["no"] * 20, ["yes"] * 10, ["no"] * 10]
    b = np.r_[["yes"] * 60, ["no"] * 20, ["no"] * 10, ["yes"] * 10]
    k = cohen_kappa(a, b)
    assert k == pytest.approx((0.80 - 0.58) / 0.42, abs=1e-12)
    assert round(k, 2) == 0.52
    assert k == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)


def test_spec_always_pass_judge_is_88_percent_accurate_with_kappa_zero():
    human = np.r_[["fail"] * 12, ["pass"] * 88]
    judge = np.array(["pass"] * 100)
    rep = judge_report(human, judge)
    assert rep.accuracy == pytest.approx(0.88)
    assert rep.kappa == 0.0
    fail = next(c for c in rep.per_class if c.label == "fail")
    assert fail.recall == 0.0 and np.isnan(fail.precision) and fail.support == 12 and fail.predicted == 0
    assert rep.human_dist == {"fail": 12, "pass": 88} and rep.judge_dist == {"fail": 0, "pass": 100}
    assert rep.n_undefined == 1


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_kappa_matches_sklearn(seed, weights):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 4, 120)
    b = np.where(rng.random(120) < 0.6, a, rng.integers(0, 4, 120))
    assert cohen_kappa(a, b, weights=weights) == pytest.approx(
        cohen_kappa_score(a, b, weights=weights), abs=1e-12
    )


def test_kappa_with_declared_label_order_matches_sklearn():
    a = ["low", "mid", "high", "mid", "low", "high", "mid"]
    b = ["low", "high", "high", "mid", "mid", "high", "low"]
    order = ["low", "mid", "high"]
    assert cohen_kappa(a, b, weights="linear", labels=order) == pytest.approx(
        cohen_kappa_score(a, b, weights="linear", labels=order), abs=1e-12
    )
    with pytest.raises(InputError, match="not in the declared labels"):
        cohen_kappa(a, b, labels=["low", "mid"])


def test_kappa_labels_differences_from_sklearn_are_the_documented_ones():
    a = ["low", "mid", "high", "mid", "low", "high", "mid"]
    b = ["low", "high", "high", "mid", "mid", "high", "low"]
    # a declared but unused label changes nothing, in either library
    wide = ["low", "mid", "high", "extra"]
    for w in (None, "linear", "quadratic"):
        assert cohen_kappa(a, b, weights=w, labels=wide) == pytest.approx(
            cohen_kappa_score(a, b, weights=w, labels=wide), abs=1e-12
        )
    # (1) labels leaving out an observed value: scikit-learn drops the 3 items that use "high" and scores
    # the other 4 (low/low, mid/mid, low/mid, mid/low: p_o = 1/2, p_e = (2*2 + 2*2)/16 = 1/2, kappa = 0)
    # where all 7 items give p_o = 4/7, p_e = 16/49, kappa = 12/33; we raise
    assert cohen_kappa_score(a, b, labels=["low", "mid"]) == pytest.approx(0.0, abs=1e-12)
    assert cohen_kappa(a, b) == pytest.approx(12 / 33, abs=1e-12) == cohen_kappa_score(a, b)
    assert cohen_kappa([x for x, y in zip(a, b, strict=True) if "high" not in (x, y)],
                       [y for x, y in zip(a, b, strict=True) if "high" not in (x, y)]) == pytest.approx(0.0)
    with pytest.raises(InputError, match=r"observed values \['high'\] are not in the declared labels"):
        cohen_kappa(a, b, labels=["low", "mid"])
    # (2) undefined kappa: scikit-learn warns and returns NaN; we raise
    with pytest.warns(UserWarning):
        assert np.isnan(cohen_kappa_score(["y", "y"], ["y", "y"]))
    with pytest.raises(InputError, match="kappa is undefined"):
        cohen_kappa(["y", "y"], ["y", "y"])


def test_kappa_degenerate_inputs():
    with pytest.raises(InputError, match="undefined"):
        cohen_kappa([1, 1, 1], [1, 1, 1])
    with pytest.raises(InputError, match="same items"):
        cohen_kappa([1, 0], [1])
    with pytest.raises(InputError, match="empty"):
        cohen_kappa([], [])
    with pytest.raises(InputError, match="NaN"):
        cohen_kappa([1.0, np.nan], [1.0, 0.0])
    with pytest.raises(InputError, match="weights"):
        cohen_kappa([0, 1], [1, 0], weights="cubic")
    # One rater constant, the other not: defined, and no better than chance.
    assert cohen_kappa([1, 1, 1, 1], [1, 0, 1, 0]) == 0.0


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval", "ratio"])
def test_krippendorff_alpha_matches_package(seed, level):
    rng = np.random.default_rng(seed)
    raters, units = int(rng.integers(2, 6)), int(rng.integers(10, 60))
    truth = rng.integers(1, 6, units)
    data = np.where(rng.random((raters, units)) < 0.7, truth, rng.integers(1, 6, (raters, units))).astype(
        float
    )
    data[rng.random(data.shape) < 0.25] = np.nan
    ours = krippendorff_alpha(data, level)
    ref = krippendorff.alpha(reliability_data=data, level_of_measurement=level)
    assert ours == pytest.approx(ref, abs=1e-10)


def test_krippendorff_two_raters_nominal_is_close_to_kappa_and_perfect_is_one():
    rng = np.random.default_rng(9)
    a = rng.integers(0, 3, 400)
    b = np.where(rng.random(400) < 0.7, a, rng.integers(0, 3, 400))
    # For two raters alpha differs from kappa only by the small-sample factor and pooled marginals.
    assert krippendorff_alpha(np.vstack([a, b])) == pytest.approx(cohen_kappa(a, b), abs=0.01)
    assert krippendorff_alpha(np.vstack([a, a, a])) == 1.0


def test_krippendorff_degenerate_inputs():
    with pytest.raises(InputError, match="undefined"):
        krippendorff_alpha([[1, 1, 1], [1, 1, 1]])
    with pytest.raises(InputError, match="undefined"):
        krippendorff_alpha([[1, np.nan], [np.nan, 2]])  # no unit rated twice
    with pytest.raises(InputError, match="level"):
        krippendorff_alpha([[1, 2], [2, 1]], level="circular")
    with pytest.raises(InputError, match="matrix"):
        krippendorff_alpha([1, 2, 3])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kendall_tau_b_matches_scipy_with_ties(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 5, 60).astype(float)
    y = x + rng.integers(-2, 3, 60)
    tau, p = kendall_tau_b(x, y)
    ref = stats.kendalltau(x, y, variant="b")
    assert tau == pytest.approx(ref.statistic, abs=1e-12)
    assert p == pytest.approx(ref.pvalue, rel=1e-10)


def test_kendall_degenerate_inputs():
    with pytest.raises(InputError, match="constant"):
        kendall_tau_b([1, 1, 1], [1, 2, 3])
    with pytest.raises(InputError, match="at least 2"):
        kendall_tau_b([1, np.nan], [2, 3])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_judge_report_matches_sklearn(seed):
    rng = np.random.default_rng(seed)
    human = rng.integers(0, 3, 150)
    judge = np.where(rng.random(150) < 0.7, human, rng.integers(0, 3, 150))
    rep = judge_report(human, judge)
    prec, rec, _, sup = precision_recall_fscore_support(human, judge, labels=[0, 1, 2], zero_division=np.nan)
    assert rep.accuracy == pytest.approx((human == judge).mean())
    assert rep.kappa == pytest.approx(cohen_kappa_score(human, judge))
    for i, c in enumerate(rep.per_class):
        assert c.label == i
        assert (
            c.precision == pytest.approx(prec[i])
            and c.recall == pytest.approx(rec[i])
            and c.support == sup[i]
        )
    assert sum(rep.judge_dist.values()) == sum(rep.human_dist.values()) == rep.n == 150
    assert rep.to_dict()["per_class"][0]["label"] == 0


def test_judge_report_with_single_shared_class_reports_undefined_kappa():
    rep = judge_report(["pass"] * 5, ["pass"] * 5)
    assert rep.accuracy == 1.0 and np.isnan(rep.kappa) and "undefined" in rep.kappa_reason
