"""The CI gate: fail a build only on a regression that is both credible and large enough to matter.

Statistical checks, per metric in the policy (direction-aware: for lower-is-better metrics a rise is the
regression):
- FAIL when the whole CI lies on the regression side of zero and the drop is at least ``min_effect``;
- WARN when the whole CI lies on the regression side but the drop is smaller than ``min_effect``;
- PASS otherwise (no credible regression, whatever the point estimate says).

Hard checks fail regardless of statistics: trace schema failures, invalid citations, cost per query over
budget, p95 latency over the SLO, judged fraction under a floor. The overall verdict is the worst check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragassay.analysis.compare import Comparison, compare_runs
from ragassay.analysis.directions import higher_is_better
from ragassay.errors import InputError

ORDER = {"PASS": 0, "WARN": 1, "FAIL": 2}


class MetricPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min_effect: float = Field(gt=0)


class HardPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_schema_failures: int | None = Field(default=0, ge=0)
    min_citation_validity: float | None = Field(default=1.0, ge=0, le=1)
    max_cost_per_query: float | None = Field(default=None, ge=0)
    max_p95_latency_ms: float | None = Field(default=None, gt=0)
    min_judged_fraction: float | None = Field(default=None, ge=0, le=1)


class GatePolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    confidence: float = Field(default=0.95, gt=0, lt=1)
    n_resamples: int = Field(default=10_000, ge=100)
    seed: int = 0
    metrics: dict[str, MetricPolicy] = Field(default_factory=lambda: {
        "recall@fusion_depth": MetricPolicy(min_effect=0.03),
        "ndcg@final_k": MetricPolicy(min_effect=0.03),
    })
    hard: HardPolicy = Field(default_factory=HardPolicy)


def load_policy(path: str | Path | None) -> GatePolicy:
    if path is None:
        return GatePolicy()
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such gate policy file")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise InputError(f"{p}:{mark.line + 1 if mark else 1}: invalid YAML ({getattr(e, 'problem', e)})") from e
    try:
        return GatePolicy.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors())
        raise InputError(f"{p}: invalid gate policy ({problems})") from e


@dataclass(frozen=True)
class Check:
    name: str
    kind: str  # "statistical" | "hard"
    verdict: str
    detail: str
    value: float | None = None
    threshold: float | None = None

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in self.__dict__.items()}


@dataclass
class GateResult:
    verdict: str
    checks: list[Check]
    comparison: Comparison | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict == "FAIL" else 0

    def to_dict(self) -> dict:
        out = {"verdict": self.verdict, "exit_code": self.exit_code, "checks": [c.to_dict() for c in self.checks],
               "notes": self.notes}
        if self.comparison is not None:
            out["baseline"] = {"run_id": self.comparison.run_a.run_id, "name": self.comparison.run_a.name}
            out["candidate"] = {"run_id": self.comparison.run_b.run_id, "name": self.comparison.run_b.name}
        return out


def statistical_check(metric: str, delta: float, lo: float, hi: float, min_effect: float,
                      defined: bool = True, confidence: float = 0.95) -> Check:
    """Verdict for one metric from its paired delta (B − A) and CI."""
    if not defined or any(math.isnan(x) for x in (delta, lo, hi)):
        return Check(metric, "statistical", "WARN", "undefined: no paired values to compare", delta, min_effect)
    higher = higher_is_better(metric)
    drop, ci_worst, ci_best = (-delta, -hi, -lo) if higher else (delta, lo, hi)
    ci_text = f"Δ {delta:+.3f}, {confidence:.0%} CI [{lo:+.3f}, {hi:+.3f}], minimum effect {min_effect:g}"
    if ci_worst > 0 and ci_best > 0:  # whole interval on the regression side
        if drop >= min_effect:
            return Check(metric, "statistical", "FAIL", f"credible regression ≥ minimum effect ({ci_text})",
                         delta, min_effect)
        return Check(metric, "statistical", "WARN", f"credible regression below the minimum effect ({ci_text})",
                     delta, min_effect)
    return Check(metric, "statistical", "PASS", f"no credible regression ({ci_text})", delta, min_effect)


def hard_checks(policy: HardPolicy, run, results) -> list[Check]:
    """Checks on the candidate run alone. ``results`` is its result table (pyarrow)."""
    checks: list[Check] = []
    extra = run.extra or {}
    if policy.max_schema_failures is not None:
        n_bad = int(extra.get("schema_failures", 0))
        checks.append(Check("schema_failures", "hard", "FAIL" if n_bad > policy.max_schema_failures else "PASS",
                            f"{n_bad} malformed trace record(s); allowed {policy.max_schema_failures}",
                            n_bad, policy.max_schema_failures))
    cols = results.to_pydict()
    metric = np.asarray(cols["metric"], dtype=object)
    value = np.asarray([np.nan if v is None else v for v in cols["value"]], dtype=float)
    if policy.min_citation_validity is not None:
        v = value[(metric == "citation_validity") & ~np.isnan(value)]
        if len(v):
            mean = float(v.mean())
            n_invalid = int(np.count_nonzero(v < 1))
            checks.append(Check("citation_validity", "hard",
                                "FAIL" if mean < policy.min_citation_validity else "PASS",
                                f"mean {mean:.3f} over {len(v)} cited answers ({n_invalid} with an invalid "
                                f"citation); floor {policy.min_citation_validity:g}", mean,
                                policy.min_citation_validity))
        else:
            checks.append(Check("citation_validity", "hard", "PASS", "no cited answers to check"))
    # per (query, trial) columns: take one row per trace
    first = _first_metric_rows(cols)
    if policy.max_cost_per_query is not None:
        cost = np.asarray([cols["cost"][i] for i in first if cols["cost"][i] is not None], dtype=float)
        if len(cost):
            mean = float(cost.mean())
            checks.append(Check("cost_per_query", "hard", "FAIL" if mean > policy.max_cost_per_query else "PASS",
                                f"mean cost {mean:.4g} per query; budget {policy.max_cost_per_query:g}", mean,
                                policy.max_cost_per_query))
        else:
            checks.append(Check("cost_per_query", "hard", "WARN", "no cost recorded; cannot check the budget"))
    if policy.max_p95_latency_ms is not None:
        lat = np.asarray([cols["latency_ms"][i] for i in first if cols["latency_ms"][i] is not None], dtype=float)
        if len(lat):
            p95 = float(np.percentile(lat, 95))
            checks.append(Check("p95_latency_ms", "hard", "FAIL" if p95 > policy.max_p95_latency_ms else "PASS",
                                f"p95 {p95:.1f} ms over {len(lat)} queries; SLO {policy.max_p95_latency_ms:g} ms",
                                p95, policy.max_p95_latency_ms))
        else:
            checks.append(Check("p95_latency_ms", "hard", "WARN", "no latency recorded; cannot check the SLO"))
    if policy.min_judged_fraction is not None:
        jf = np.asarray([cols["judged_fraction"][i] for i in first if cols["judged_fraction"][i] is not None],
                        dtype=float)
        if len(jf):
            mean = float(jf.mean())
            checks.append(Check("judged_fraction", "hard", "FAIL" if mean < policy.min_judged_fraction else "PASS",
                                f"mean judged fraction {mean:.3f}; floor {policy.min_judged_fraction:g}", mean,
                                policy.min_judged_fraction))
        else:
            checks.append(Check("judged_fraction", "hard", "PASS",
                                "not applicable: span labels judge every unit (no pooled qrels)"))
    return checks


def _first_metric_rows(cols: dict) -> list[int]:
    seen, out = set(), []
    for i, (q, t) in enumerate(zip(cols["query_id"], cols["trial"], strict=True)):
        if (q, t) not in seen:
            seen.add((q, t))
            out.append(i)
    return out


def run_gate(store, base: str, cand: str, policy: GatePolicy, *, rebaseline: bool = False) -> GateResult:
    metrics = list(policy.metrics)
    comp = compare_runs(store, base, cand, metrics=metrics, n_resamples=policy.n_resamples, seed=policy.seed,
                        confidence=policy.confidence, rebaseline=rebaseline, strata=False,
                        min_effect={m: p.min_effect for m, p in policy.metrics.items()})
    checks = []
    for m, pol in policy.metrics.items():
        row = comp.overall(m)
        checks.append(statistical_check(m, row.delta, row.ci_low, row.ci_high, pol.min_effect, row.defined,
                                        policy.confidence))
    run_b = comp.run_b
    checks += hard_checks(policy.hard, run_b, store.results(run_b.run_id))
    verdict = max((c.verdict for c in checks), key=ORDER.__getitem__, default="PASS")
    return GateResult(verdict, checks, comp)
