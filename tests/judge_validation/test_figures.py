"""Validation figures against independent oracles (scikit-learn, statsmodels) on randomized data, and
constructed judges with known biases."""

import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from sklearn.calibration import calibration_curve
from sklearn.isotonic import IsotonicRegression
from sklearn.metrics import (
    brier_score_loss,
    cohen_kappa_score,
    confusion_matrix,
    precision_recall_fscore_support,
)

from ragassay.judges.cascade import cascade_figures
from ragassay.judges.labels import LabelledItem
from ragassay.judges.validate import (
    Judged,
    agreement_figures,
    calibration_figures,
    fit_split,
    position_swap,
    self_preference,
    validate_judgements,
    validation_record,
    validation_report_section,
    verbosity_slope,
)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("scale", "k", "weights"), [("binary", 2, None), ("ordinal", 3, "linear")])
def test_agreement_matches_scikit_learn_on_random_labels(seed, scale, k, weights):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 300))
    h = rng.integers(0, k, n)
    j = np.where(rng.random(n) < 0.7, h, rng.integers(0, k, n))
    f = agreement_figures(h, j, [f"c{i}" for i in range(k)], scale=scale, n_resamples=300, seed=seed)
    assert f["kappa"]["value"] == pytest.approx(cohen_kappa_score(h, j, weights=weights), abs=1e-12)
    assert f["kappa"]["ci_low"] < f["kappa"]["value"] < f["kappa"]["ci_high"]
    assert f["agreement"]["value"] == pytest.approx(np.mean(h == j))
    assert f["confusion"] == confusion_matrix(h, j, labels=list(range(k))).tolist()
    p, r, f1, support = precision_recall_fscore_support(h, j, labels=list(range(k)), zero_division=np.nan)
    for i, c in enumerate(f["per_class"]):
        assert c["precision"]["value"] == pytest.approx(p[i])
        assert c["recall"]["value"] == pytest.approx(r[i])
        assert c["f1"]["value"] == pytest.approx(f1[i])
        assert c["support"] == support[i]
    assert f["human_dist"] == {f"c{i}": int((h == i).sum()) for i in range(k)}
    assert f["judge_dist"] == {f"c{i}": int((j == i).sum()) for i in range(k)}


def test_a_class_the_judge_never_predicts_has_undefined_precision_not_zero():
    h = np.array([0] * 12 + [1] * 88)
    j = np.ones(100, dtype=int)  # the judge that passes everything: 88% accurate, kappa 0
    f = agreement_figures(h, j, ["bad", "good"], n_resamples=200)
    assert f["agreement"]["value"] == pytest.approx(0.88)
    assert f["kappa"]["value"] == pytest.approx(0.0)
    bad = f["per_class"][0]
    assert bad["recall"]["value"] == 0.0 and bad["precision"]["value"] is None and not bad["precision"]["defined"]


def test_verbosity_slope_matches_statsmodels_with_one_intercept_per_human_label():
    rng = np.random.default_rng(3)
    n = 240
    group = rng.integers(0, 3, n)
    length = rng.integers(5, 200, n).astype(float)
    score = (rng.random(n) < 0.2 + 0.2 * group + 0.002 * length).astype(float)
    got = verbosity_slope(length, score, group, n_resamples=500)
    fit = smf.ols("s ~ x + C(g)", pd.DataFrame({"s": score, "x": length, "g": group})).fit()
    assert got["value"] == pytest.approx(fit.params["x"] * 100, rel=1e-9)
    lo, hi = fit.conf_int().loc["x"] * 100
    # the bootstrap and the OLS intervals estimate the same thing: they overlap heavily
    assert got["ci_low"] < hi and lo < got["ci_high"]


def _items(labels, claims=None, fams=None):
    claims = claims or ["a claim"] * len(labels)
    fams = fams or [None] * len(labels)
    return [LabelledItem(f"i{k:04d}", "q", "ctx", c, lab, generator_family=f)
            for k, (lab, c, f) in enumerate(zip(labels, claims, fams, strict=True))]


def test_a_judge_that_favours_long_answers_shows_a_positive_verbosity_slope():
    rng = np.random.default_rng(7)
    n = 240
    labels = rng.choice(["supported", "unsupported"], n)
    lengths = rng.integers(3, 120, n)
    claims = [" ".join(["word"] * int(m)) for m in lengths]
    # right on the label, except that a long unsupported answer is called supported
    judged = [Judged("supported" if lab == "supported" or m > 60 else "unsupported")
              for lab, m in zip(labels, lengths, strict=True)]
    v = validate_judgements(_items(list(labels), claims), judged, n_resamples=1000)["verbosity"]
    assert v["value"] > 0 and v["ci_low"] > 0
    fair = [Judged(lab) for lab in labels]
    v0 = validate_judgements(_items(list(labels), claims), fair, n_resamples=200)["verbosity"]
    assert v0["value"] == pytest.approx(0.0, abs=1e-12)


def test_self_preference_is_lenience_on_the_own_family_minus_the_others():
    rng = np.random.default_rng(11)
    n = 200
    labels = rng.choice(["supported", "unsupported"], n)
    fams = ["acme" if k % 2 else "other" for k in range(n)]
    judged = [Judged("supported" if lab == "supported" or f == "acme" else "unsupported")
              for lab, f in zip(labels, fams, strict=True)]
    sp = validate_judgements(_items(list(labels), fams=fams), judged, judge_family="acme",
                             n_resamples=500)["self_preference"]
    h = np.array([lab == "supported" for lab in labels], dtype=float)
    jj = np.array([j.label == "supported" for j in judged], dtype=float)
    own = np.array([f == "acme" for f in fams])
    expect = (jj[own] - h[own]).mean() - (jj[~own] - h[~own]).mean()
    assert sp["value"] == pytest.approx(expect) and sp["ci_low"] > 0
    assert self_preference([True] * 5, [1] * 5, [0] * 5)["defined"] is False


def test_a_position_biased_pairwise_judge_shows_swap_disagreement():
    rng = np.random.default_rng(5)
    items = [("q", "c", f"x{k}", f"y{k}") for k in range(100)]
    better = {f"x{k}": rng.random() for k in range(100)} | {f"y{k}": rng.random() for k in range(100)}

    def fair(q, c, a, b):
        return "first" if better[a] > better[b] else "second"

    def biased(q, c, a, b):  # prefers the first slot unless the second is much better
        return "first" if better[a] + 0.3 > better[b] else "second"

    assert position_swap(fair, items, n_resamples=200)["disagreement"]["value"] == 0.0
    got = position_swap(biased, items, n_resamples=500)
    d = np.mean([(biased("", "", x, y) == "first") != (biased("", "", y, x) == "second") for _, _, x, y in items])
    assert got["disagreement"]["value"] == pytest.approx(d) and got["disagreement"]["ci_low"] > 0
    assert got["first_slot_rate"] > 0.5


def test_calibration_matches_scikit_learn_on_the_report_split():
    rng = np.random.default_rng(2)
    n = 400
    ids = [f"item-{k}" for k in range(n)]
    y = rng.integers(0, 2, n)
    # scores that rank well but are overconfident, never on a bin edge
    p = np.clip(np.where(y == 1, rng.beta(5, 2, n), rng.beta(2, 5, n)) * 0.999 + 0.0003, 0, 1)
    p = np.where(np.isclose(p * 10, np.round(p * 10)), p + 1e-4, p)
    cal = calibration_figures(ids, p, y, n_resamples=300)
    fit = fit_split(ids)
    rep = ~fit
    prob_true, prob_pred = calibration_curve(y[rep], p[rep], n_bins=10, strategy="uniform")
    bins = cal["raw"]["reliability"]
    assert [b["frac_positive"] for b in bins] == pytest.approx(list(prob_true))
    assert [b["mean_score"] for b in bins] == pytest.approx(list(prob_pred))
    assert cal["raw"]["brier"]["value"] == pytest.approx(brier_score_loss(y[rep], p[rep]))
    iso = IsotonicRegression(out_of_bounds="clip").fit(p[fit], y[fit])
    assert cal["recalibrated"]["brier"]["value"] == pytest.approx(brier_score_loss(y[rep], iso.predict(p[rep])))
    assert cal["band"]["lo"] <= cal["band"]["hi"] and cal["band"]["report"]["n"] == rep.sum()
    assert cal["n_fit"] + cal["n_report"] == n


def test_cascade_routes_by_the_band_and_matches_an_independent_recount():
    rng = np.random.default_rng(9)
    n = 300
    labels = rng.choice(["supported", "unsupported"], n, p=[0.7, 0.3])
    good = labels == "supported"
    score = np.clip(np.where(good, rng.beta(6, 2, n), rng.beta(2, 6, n)), 0, 1)
    tier1 = [Judged("supported" if s >= 0.5 else "unsupported", score=float(s), latency_ms=1.0) for s in score]
    strong = np.where(rng.random(n) < 0.95, good, ~good)
    tier2 = [Judged("supported" if s else "unsupported", cost=0.01, latency_ms=200.0) for s in strong]
    items = _items(list(labels))
    c = cascade_figures(items, tier1, tier2, max_false_pass=0.05, max_false_fail=0.05, n_resamples=400)
    # recount on the report split with the stated band, through scikit-learn
    from ragassay.stats.calibration import IsotonicMap

    rep = ~fit_split([it.item_id for it in items])
    iso = IsotonicMap(tuple(c["isotonic"]["x"]), tuple(c["isotonic"]["y"]))
    pr = iso.predict(1 - score[rep])
    route = np.where(pr < c["band"]["lo"], "pass", np.where(pr > c["band"]["hi"], "fail", "escalate"))
    casc = np.where(route == "pass", 1, np.where(route == "fail", 0, strong[rep].astype(int)))
    assert c["tiers"]["cascade"]["kappa"]["value"] == pytest.approx(cohen_kappa_score(good[rep].astype(int), casc))
    esc = (route == "escalate").mean()
    assert c["escalated"]["value"] == pytest.approx(esc)
    assert c["cost"]["saved"]["value"] == pytest.approx(1 - esc)
    assert c["latency"]["saved"]["value"] == pytest.approx(1 - (rep.sum() * 1.0 + esc * rep.sum() * 200) /
                                                           (rep.sum() * 200))
    assert c["routes"]["pass"] + c["routes"]["escalate"] + c["routes"]["fail"] == rep.sum()


def test_every_item_is_accounted_for_and_the_report_section_is_json():
    import json

    labels = ["supported", "unsupported", "cannot_tell", "partially_supported"] * 10
    judged = [Judged("supported"), Judged(None, "error"), Judged("supported"), Judged(None, "cannot_judge")] * 10
    f = validate_judgements(_items(labels), judged, n_resamples=100)
    assert f["n_used"] + sum(f["excluded"].values()) == 40
    assert f["excluded"] == {"human_cannot_tell": 10, "judge_cannot_judge": 10, "judge_error": 10}
    from ragassay.judges.labels import LabelSet

    rec = validation_record({"judge_model": "m", "rubric_sha": "r", "prompt_sha": "p"},
                            LabelSet("x", "v" * 64, tuple(_items(labels))), f)
    section = validation_report_section(rec)
    json.dumps(section, allow_nan=False)
    assert section["confusion"] == f["confusion"] and math.isclose(section["n"], 10)
