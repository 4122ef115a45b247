"""Ablations with declared expectations and a placebo (spec 34.3).

An ablation file declares the intervention and what it should do, before the runs::

    name: rerank-on
    baseline: hybrid.yaml              # pipeline config, relative to this file
    intervention: {reranker: {kind: lexical, final_k: 5}}   # deep-merged into the baseline config
    placebo: {}                        # a change that should do nothing; {} re-runs the baseline as is
    metric: answer_f1
    margin: 0.02                       # equivalence margin for "none" (and for the placebo)
    alpha: 0.05
    expectations:
      - {stratum: multi_hop, expect: help}
      - {stratum: lexical, expect: hurt}
      - {stratum: negative, expect: none}   # the control: no material change
      - {stratum: all, expect: help}

Verdicts, on the paired per-query differences (intervention - baseline, trials averaged):
``help``/``hurt`` are *confirmed* when the (1 - alpha) bootstrap interval excludes 0 in the expected
direction, *contradicted* when it excludes 0 the other way, else *inconclusive*. ``none`` is *confirmed* by
TOST (both one-sided tests below alpha within +-margin), *contradicted* when the interval lies wholly outside
the margin, else *inconclusive* (a flat-looking control is not evidence of equivalence). The placebo must be
confirmed equivalent over all queries. Differences that are all exactly equal (a deterministic pipeline
re-run gives all zeros) have no variance for TOST: they count as equivalent when their value is inside the
margin, which is exact for that degenerate case.
"""

from __future__ import annotations

import copy
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from ragassay.analysis.compare import comparable_runs
from ragassay.analysis.slicing import paired_scores
from ragassay.errors import InputError, SchemaError
from ragassay.stats import bootstrap_deltas, tost
from ragassay.store import Store
from ragassay.yamlio import load_yaml

EXPECT = ("help", "hurt", "none")


@dataclass(frozen=True)
class Expectation:
    stratum: str
    expect: str


@dataclass(frozen=True)
class AblationSpec:
    name: str
    baseline: Path
    intervention: dict
    placebo: dict = field(default_factory=dict)
    metric: str = "answer_f1"
    margin: float = 0.02
    alpha: float = 0.05
    expectations: tuple[Expectation, ...] = ()


def load_ablation(path: str | Path) -> AblationSpec:
    """Read and check an ablation file; every problem is reported against the file."""
    path = Path(path)
    data = load_yaml(path, "ablation spec")
    if not isinstance(data, dict):
        raise SchemaError(f"{path}: an ablation file is a mapping (name, baseline, intervention, expectations, ...)")
    problems = []
    unknown = set(data) - {"name", "baseline", "intervention", "placebo", "metric", "margin", "alpha",
                           "expectations"}
    if unknown:
        problems.append(f"unknown key(s) {sorted(unknown)}")
    if not isinstance(data.get("baseline"), str):
        problems.append("baseline: give the baseline pipeline config path")
    if not isinstance(data.get("intervention"), dict) or not data.get("intervention"):
        problems.append("intervention: give the config changes as a non-empty mapping")
    if not isinstance(data.get("placebo", {}), dict):
        problems.append("placebo: must be a mapping of config changes ({} re-runs the baseline)")
    margin, alpha = data.get("margin", 0.02), data.get("alpha", 0.05)
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not margin > 0:
        problems.append(f"margin: must be a number > 0, got {margin!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha < 0.5:
        problems.append(f"alpha: must be in (0, 0.5), got {alpha!r}")
    exps = []
    raw = data.get("expectations")
    if not isinstance(raw, list) or not raw:
        problems.append("expectations: list at least one {stratum: ..., expect: help|hurt|none}")
    else:
        for i, e in enumerate(raw, 1):
            if not isinstance(e, dict) or not isinstance(e.get("stratum"), str) or e.get("expect") not in EXPECT:
                problems.append(f"expectations[{i}]: need stratum (a name, or 'all') and expect: help, hurt or none")
            else:
                exps.append(Expectation(e["stratum"], e["expect"]))
    if problems:
        raise SchemaError("\n".join(f"{path}: {p}" for p in problems))
    base = Path(data["baseline"])
    base = base if base.is_absolute() else path.parent / base
    if not base.exists():
        raise InputError(f"{path}: baseline config {base} does not exist")
    return AblationSpec(str(data.get("name") or path.stem), base, data["intervention"], data.get("placebo") or {},
                        str(data.get("metric", "answer_f1")), float(margin), float(alpha), tuple(exps))


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def verdict(diffs, expect: str, *, margin: float, alpha: float, n_resamples: int = 2_000, seed: int = 0) -> dict:
    """One expectation's verdict on paired differences (module docstring)."""
    d = np.asarray(diffs, dtype=float)
    d = d[~np.isnan(d)]
    if d.size == 0:
        return {"verdict": "inconclusive", "n": 0, "reason": "no paired query with a value in both runs"}
    boot = bootstrap_deltas(d, metrics=["d"], n_resamples=n_resamples, confidence=1 - alpha, seed=seed)["d"]
    out = {"n": int(d.size), "delta": float(d.mean()), "ci_low": boot.ci_low, "ci_high": boot.ci_high,
           "wins": boot.wins, "losses": boot.losses, "ties": boot.ties}
    if expect in ("help", "hurt"):
        sign = 1 if expect == "help" else -1
        lo, hi = (boot.ci_low, boot.ci_high) if sign == 1 else (-boot.ci_high, -boot.ci_low)
        v = "confirmed" if lo > 0 else "contradicted" if hi < 0 else "inconclusive"
        if not boot.defined:  # one item, or no variation: the interval is a point
            m = sign * float(d.mean())
            v = "inconclusive" if d.size < 2 else ("confirmed" if m > 0 else "contradicted" if m < 0 else
                                                     "inconclusive")
        return {**out, "verdict": v}
    t = tost(d, margin=margin, alpha=alpha)
    if not t.defined:
        same = d.size > 0 and bool(np.all(d == d[0]))
        equivalent = same and abs(float(d[0])) < margin
        return {**out, "verdict": "confirmed" if equivalent else ("contradicted" if same else "inconclusive"),
                "tost": t.to_dict()}
    outside = t.extra["ci_low"] >= margin or t.extra["ci_high"] <= -margin
    v = "confirmed" if t.extra["equivalent"] else "contradicted" if outside else "inconclusive"
    return {**out, "verdict": v, "tost": t.to_dict()}


def evaluate_ablation(store: Store, spec: AblationSpec, baseline: str, intervention: str, placebo: str | None, *,
                      n_resamples: int = 2_000, seed: int = 0, rebaseline: bool = False) -> dict:
    """Verdicts for every declared expectation and for the placebo, over stored runs (which must be comparable:
    differing pins are refused unless ``rebaseline``, and then listed)."""
    _, diffs = comparable_runs(store, [r for r in (baseline, intervention, placebo) if r], [spec.metric],
                               rebaseline=rebaseline)
    qids, strata, a, b = paired_scores(store, baseline, intervention, spec.metric)
    strata = np.asarray([s if s is not None else "(none)" for s in strata], dtype=object)
    rows = []
    for e in spec.expectations:
        mask = np.ones(qids.size, dtype=bool) if e.stratum == "all" else strata == e.stratum
        if not mask.any():
            raise InputError(f"ablation {spec.name!r}: stratum {e.stratum!r} has no query; strata here: "
                             f"{sorted(set(strata.tolist()))}")
        rows.append({"stratum": e.stratum, "expect": e.expect, "role": "control" if e.expect == "none" else "target",
                     **verdict((b - a)[mask], e.expect, margin=spec.margin, alpha=spec.alpha,
                               n_resamples=n_resamples, seed=seed)})
    plac = None
    if placebo is not None:
        _, _, pa, pb = paired_scores(store, baseline, placebo, spec.metric)
        plac = verdict(pb - pa, "none", margin=spec.margin, alpha=spec.alpha, n_resamples=n_resamples, seed=seed)
        plac["passed"] = plac["verdict"] == "confirmed"
    runs = {k: {"run_id": store.get_run(r).run_id, "name": store.get_run(r).name}
            for k, r in (("baseline", baseline), ("intervention", intervention), ("placebo", placebo)) if r}
    return {"name": spec.name, "metric": spec.metric, "margin": spec.margin, "alpha": spec.alpha,
            "intervention": spec.intervention, "placebo_change": spec.placebo, "runs": runs,
            "rebaselined": bool(diffs), "pin_differences": diffs,
            "expectations": rows, "placebo": plac,
            "counts": {v: sum(r["verdict"] == v for r in rows) for v in ("confirmed", "contradicted", "inconclusive")}}


def run_ablation(store: Store, spec: AblationSpec, corpus, golden, *, trials: int = 1, n_resamples: int = 2_000,
                 seed: int = 0, progress=None, **run_kw) -> dict:
    """Run baseline, intervention and placebo through the reference pipeline, store them, and evaluate."""
    from ragassay.analysis.runner import run_pipeline_into_store

    base_cfg = load_yaml(spec.baseline, "pipeline config")
    if not isinstance(base_cfg, dict):
        raise SchemaError(f"{spec.baseline}: the baseline pipeline config must be a mapping")
    arms = {"baseline": base_cfg, "intervention": _merge(base_cfg, spec.intervention),
            "placebo": _merge(base_cfg, spec.placebo)}
    ids = {}
    with tempfile.TemporaryDirectory(prefix="ragassay-ablation-") as tmp:
        for arm, cfg in arms.items():
            cfg = {**cfg, "name": f"{spec.name}:{arm}"}
            p = Path(tmp) / f"{arm}.yaml"
            p.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
            ids[arm], _ = run_pipeline_into_store(store, p, corpus, golden, trials=trials, name=f"{spec.name}:{arm}",
                                                  progress=(lambda d, n, arm=arm: progress(arm, d, n))
                                                  if progress else None, **run_kw)
    return evaluate_ablation(store, spec, ids["baseline"], ids["intervention"], ids["placebo"],
                             n_resamples=n_resamples, seed=seed)


def ablation_report_section(store: Store, spec: AblationSpec, baseline: str, intervention: str,
                            placebo: str | None = None, **kw) -> dict:
    """Report data for the ablation section (JSON-serializable)."""
    return {"kind": "ablation", **evaluate_ablation(store, spec, baseline, intervention, placebo, **kw)}
