"""A two-tier judge cascade (spec §11.7–§11.8), validated as a whole against human labels.

Tier 1 is a cheap judge that emits a score (a local judge); tier 2 is the strong judge. Tier 1's score is
read as P(bad) = 1 - support score, recalibrated with an isotonic map fitted on the fit split, and a band
(lo, hi) is picked on the fit split for the declared miss budgets (:func:`ragassay.stats.calibration.pick_band`):
below lo the item auto-passes (supported), above hi it auto-fails (not supported), inside it goes to tier 2.

On the report split (never the one the band was picked on) the cascade is compared with humans next to each
tier alone, with paired bootstrap CIs: kappa, raw agreement and fail-class recall of tier 1, tier 2 and the
cascade; kappa(cascade) - kappa(tier 2) (the cascade should stay within noise of tier 2); the share of items
escalated; and the cost and latency saved against running tier 2 on everything,
1 - sum(c1 + escalated * c2) / sum(c2). A saving is undefined when tier 2 costs nothing (or its latency was
not measured) on these items.

A scored run is routed through a cascade named in its judge config by :mod:`ragassay.judges.routing`, with
the same P(bad); its band applies to the raw P(bad), not to the isotonic recalibration picked here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ragassay.judges.labels import LabelledItem
from ragassay.judges.routing import p_bad
from ragassay.judges.validate import (
    DEFAULT_RESAMPLES,
    Judged,
    _ci,
    _conf_stack,
    _kappa,
    _per_class,
    fit_split,
    weights_for,
)

_CLASSES = ("not_supported", "supported")


def _binary(label: str) -> int:
    return 1 if label == "supported" else 0


def _ratio_saved(c1: np.ndarray, c2: np.ndarray, esc: np.ndarray, ix: np.ndarray) -> tuple[float, np.ndarray]:
    full = c2[ix].sum(axis=1)
    used = (c1[ix] + esc[ix] * c2[ix]).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        boots = np.where(full > 0, 1.0 - used / np.where(full > 0, full, 1.0), np.nan)
    full0, used0 = c2.sum(), (c1 + esc * c2).sum()
    return (1.0 - used0 / full0 if full0 > 0 else math.nan), boots


def cascade_figures(items: Sequence[LabelledItem], tier1: Sequence[Judged], tier2: Sequence[Judged], *,
                    max_false_pass: float = 0.02, max_false_fail: float = 0.02,
                    n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, confidence: float = 0.95) -> dict:
    """Validate the cascade (tier 1 scores routed by a band, tier 2 inside it) on the report split."""
    from ragassay.stats.calibration import fit_isotonic, pick_band

    usable = [k for k, (it, a, b) in enumerate(zip(items, tier1, tier2, strict=True))
              if it.label != "cannot_tell" and a.label is not None and math.isfinite(a.score) and b.label is not None]
    out: dict = {"n_items": len(items), "n_usable": len(usable), "max_false_pass": max_false_pass,
                 "max_false_fail": max_false_fail, "confidence": confidence, "n_resamples": n_resamples}
    if len(usable) < 4:
        out["undefined"] = "fewer than 4 items with a human label, a tier-1 score and a tier-2 verdict"
        return out
    ids = [items[k].item_id for k in usable]
    fit = fit_split(ids)
    h = np.array([_binary(items[k].label) for k in usable])
    p = np.array([p_bad(tier1[k].score) for k in usable])
    y = 1 - h
    if len(np.unique(y[fit])) < 2 or (~fit).sum() < 2:
        out["undefined"] = "the fit split needs both classes and the report split at least 2 items"
        return out
    iso = fit_isotonic(p[fit], y[fit])
    band = pick_band(iso.predict(p[fit]), y[fit], max_false_pass, max_false_fail)
    rep = ~fit
    route = band.decide(iso.predict(p[rep]))
    t1 = np.array([_binary(tier1[k].label) for k in usable])[rep]
    t2 = np.array([_binary(tier2[k].label) for k in usable])[rep]
    casc = np.where(route == "pass", 1, np.where(route == "fail", 0, t2))
    hr = h[rep]
    esc = (route == "escalate").astype(np.float64)
    n = hr.size
    ix = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
    w = weights_for("binary", 2)
    tiers = {}
    kap_boot = {}
    for name, pred in (("tier1", t1), ("tier2", t2), ("cascade", casc)):
        conf, boot = _conf_stack(hr, pred, 2, None), _conf_stack(hr, pred, 2, ix)
        kap_boot[name] = _kappa(boot, w)
        _, r, _ = _per_class(conf)
        _, br, _ = _per_class(boot)
        tiers[name] = {"kappa": _ci(float(_kappa(conf, w)), kap_boot[name], confidence),
                       "agreement": _ci(float(np.mean(pred == hr)), (pred[ix] == hr[ix]).mean(axis=1), confidence),
                       "fail_recall": _ci(float(r[0]), br[:, 0], confidence)}
    k_c, k_2 = tiers["cascade"]["kappa"]["value"], tiers["tier2"]["kappa"]["value"]
    diff = (k_c - k_2) if k_c is not None and k_2 is not None else math.nan
    c1 = np.array([tier1[k].cost for k in usable])[rep]
    c2 = np.array([tier2[k].cost for k in usable])[rep]
    l1 = np.array([tier1[k].latency_ms for k in usable], dtype=np.float64)[rep]
    l2 = np.array([tier2[k].latency_ms for k in usable], dtype=np.float64)[rep]
    cost_point, cost_boot = _ratio_saved(c1, c2, esc, ix)
    out.update({
        "n_fit": int(fit.sum()), "n_report": int(n), "isotonic": iso.to_dict(),
        "band": {"lo": band.lo, "hi": band.hi, "fit": band.to_dict()},
        "tiers": tiers,
        "kappa_cascade_minus_tier2": _ci(diff, kap_boot["cascade"] - kap_boot["tier2"], confidence),
        "escalated": _ci(float(esc.mean()), esc[ix].mean(axis=1), confidence),
        "routes": {r: int((route == r).sum()) for r in ("pass", "escalate", "fail")},
        "cost": {"tier2_alone": float(c2.sum()), "cascade": float((c1 + esc * c2).sum()),
                 "saved": _ci(cost_point, cost_boot, confidence)},
    })
    if np.isfinite(l1).all() and np.isfinite(l2).all():
        lat_point, lat_boot = _ratio_saved(l1, l2, esc, ix)
        out["latency"] = {"tier2_alone_ms": float(l2.sum()), "cascade_ms": float((l1 + esc * l2).sum()),
                          "saved": _ci(lat_point, lat_boot, confidence)}
    else:
        out["latency"] = {"undefined": f"{int((~np.isfinite(l2)).sum())} tier-2 item(s) without a measured "
                                       "latency (a cache hit whose original is gone)"}
    return out


__all__ = ["cascade_figures"]
