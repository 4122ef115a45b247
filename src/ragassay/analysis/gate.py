"""The CI gate: fail a build only on a regression that is both credible and large enough to matter, and
never pass a build the data could not have failed.

Statistical checks, per metric in the policy (direction-aware: for lower-is-better metrics a rise is the
regression). A regression is *credible* when the whole CI lies on the regression side of zero and the
Benjamini-Hochberg adjusted p (across the policy's metrics) is below 1 - confidence — the numbers printed
beside the verdict:
- FAIL when a credible regression is at least ``min_effect``;
- WARN when a credible regression is smaller than ``min_effect``;
- PASS when the CI's regression-side end is nearer than ``min_effect`` (the data rule out a drop of that size);
- WARN "underpowered" otherwise when the minimum detectable effect at this n (80% power) exceeds
  ``min_effect``: the gate could not have seen a regression of that size, so it cannot pass; the detail gives
  the n that would (:func:`ragassay.stats.n_for_mde`);
- PASS otherwise (no credible regression, and enough power to have seen one).

A metric scored by a judge (faithfulness, citation precision/recall, ...) decides nothing unless that judge has
a validation record for the same full pins (model, rubric sha, prompt sha, settings), on the metric's scale,
meeting the policy's ``judge`` floor on the intervals (default: the lower end of the kappa CI >= 0.6 and of
every class recall CI >= 0.5, over at least 100 items and 10 per class; docs/judge-validation.md): otherwise
its check is WARN with status ``unvalidated`` — it can neither PASS nor FAIL the build. The check names the
record it used.

With ``labels`` (human values of judge metrics on a random subsample of each run's answers, docs/ppi.md), a
judge metric the labels cover is decided on its PPI-corrected difference (the corrected interval, its normal p
BH-adjusted with the other metrics' bootstrap p, MDE from its standard error); the raw judge delta is named
beside it. When every label used says ``labelled_by: human``, the corrected figure decides even for an
unvalidated judge (status ``ppi``): its interval holds whatever the judge's errors.

Coverage is checked before any statistic is trusted (spec §14's hard gates): the candidate FAILS when its error
rate or its refusal rate rises credibly (paired interval and BH-adjusted p, as for the metrics; allowed rise
``max_error_rise`` / ``max_refusal_rise``, default 0), or when a gated metric compares less than
``min_compared_share`` (default 90%) of the pairs the baseline scored — a pipeline that errors on half its
questions is otherwise measured only on the half it answered. ``missing: worst`` on a metric scores a pair
undefined on one side as that metric's worst value instead (refused, at its line in the policy, for a metric
with no worst value). What cannot be measured is WARN, never PASS: a gated metric the baseline scored on no
pair, a rate only the candidate records. These checks are listed first.

Hard checks fail regardless of statistics: trace schema failures, retrieved units that failed validation
against the corpus (either run), invalid citations, cost per query over budget, p95 latency over the SLO,
judged fraction under a floor. A figure a run does not record is a WARN ("unknown"), never a PASS. The
overall verdict is the worst check.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ragassay.analysis.compare import UNBOUNDED, Comparison, _p_text, _pct_text, compare_runs, outcome_unit
from ragassay.analysis.directions import higher_is_better
from ragassay.analysis.ppi import gate_figures
from ragassay.errors import InputError
from ragassay.metrics.agent import is_trajectory
from ragassay.metrics.names import canonical_name
from ragassay.stats import n_for_mde
from ragassay.yamlio import line_of, load_yaml_node

ORDER = {"PASS": 0, "WARN": 1, "FAIL": 2}
POWER = 0.80
_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class MetricPolicy(BaseModel):
    model_config = _STRICT
    min_effect: float = Field(gt=0)
    # "excluded": a pair undefined on one side is left out (and counted by the coverage checks);
    # "worst": it is scored, the undefined side taking the metric's worst value (0, or 1 if lower is better)
    missing: Literal["excluded", "worst"] = "excluded"
    # agent trajectory diagnostics (tool_call_f1, steps, loops, redundant_query_rate, hop sufficiency) are
    # read when the outcome drops, not gated on (spec §12.2): a policy must opt in per metric
    allow_trajectory: bool = False


class HardPolicy(BaseModel):
    model_config = _STRICT
    max_schema_failures: int | None = Field(default=0, ge=0)
    max_unit_failures: int | None = Field(default=0, ge=0)
    # coverage (spec §14's hard gates): a credible rise in the candidate's error or refusal rate above these
    # fails; so does a gated metric compared on less than this share of the pairs the baseline scored
    max_error_rise: float | None = Field(default=0.0, ge=0, le=1)
    max_refusal_rise: float | None = Field(default=0.0, ge=0, le=1)
    min_compared_share: float | None = Field(default=0.9, gt=0, le=1)
    min_citation_validity: float | None = Field(default=1.0, ge=0, le=1)
    max_cost_per_query: float | None = Field(default=None, ge=0)
    max_p95_latency_ms: float | None = Field(default=None, gt=0)
    min_judged_fraction: float | None = Field(default=None, ge=0, le=1)


class JudgeFloorPolicy(BaseModel):
    """The validation floor (judges/validate.py ``Floor``): on the lower ends of the intervals, with minimum
    counts; ``label_set`` (a version prefix) makes only validations on that label set count."""
    model_config = _STRICT
    min_kappa: float = Field(default=0.6, ge=-1, le=1)
    min_class_recall: float = Field(default=0.5, ge=0, le=1)
    min_per_class: int = Field(default=10, ge=1)
    min_items: int = Field(default=100, ge=1)
    label_set: str | None = Field(default=None, min_length=6, pattern=r"^[0-9a-f]+$")
    allow_automated_labels: bool = False

    def floor(self):
        from ragassay.judges.validate import Floor

        return Floor(self.min_kappa, self.min_class_recall, self.min_per_class, self.min_items,
                     self.allow_automated_labels)


class GatePolicy(BaseModel):
    model_config = _STRICT
    confidence: float = Field(default=0.95, gt=0, lt=1)
    n_resamples: int = Field(default=10_000, ge=100, le=1_000_000)
    seed: int = Field(default=0, ge=0)
    metrics: dict[str, MetricPolicy] = Field(default_factory=lambda: {
        "recall@fusion_depth": MetricPolicy(min_effect=0.03),
        "ndcg@final_k": MetricPolicy(min_effect=0.03),
    }, min_length=1)
    hard: HardPolicy = Field(default_factory=HardPolicy)
    judge: JudgeFloorPolicy = Field(default_factory=JudgeFloorPolicy)

    @field_validator("metrics")
    @classmethod
    def _effects_in_range(cls, metrics: dict[str, MetricPolicy]) -> dict[str, MetricPolicy]:
        # any accepted spelling (nDCG@final_k, P@5) names the stored metric (ndcg@final_k, precision@5)
        # Each message starts "<key as written>.<field>: " so that load_policy points at that line.
        canonical: dict[str, MetricPolicy] = {}
        for m, p in metrics.items():
            try:
                name = canonical_name(m)
            except InputError as exc:  # a name ragassay does not compute: reported at its line in the file
                raise ValueError(f"{m}.min_effect: {exc}") from None
            if name in canonical:
                raise ValueError(f"{m}.min_effect: names the same metric as another entry ({name}); keep one")
            if name not in UNBOUNDED and p.min_effect > 1:
                raise ValueError(f"{m}.min_effect: {p.min_effect:g} is out of range: {name} lies in [0, 1], so "
                                 f"its minimum effect must be in (0, 1]")
            if is_trajectory(name) and not p.allow_trajectory:
                raise ValueError(f"{m}.allow_trajectory: {name} is an agent trajectory diagnostic, recorded on "
                                 "every run but not a pass/fail criterion (grade the outcome: task_success, "
                                 "partial_credit); to gate on it anyway, add `allow_trajectory: true` under it")
            if name in UNBOUNDED and p.missing == "worst":
                raise ValueError(f"{m}.missing: worst needs a bounded metric; {name} has no worst value, so "
                                 "use `missing: excluded`")
            canonical[name] = p
        return canonical


def load_policy(path: str | Path | None) -> GatePolicy:
    """The policy in ``path`` (the built-in one for None); every problem is a `file:line: field: message`."""
    if path is None:
        return GatePolicy()
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such gate policy file")
    data, node = load_yaml_node(p, "gate policy")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"{p}: a gate policy is a mapping (confidence, metrics, hard), got a "
                         f"{type(data).__name__}; see docs/runs.md")
    try:
        return GatePolicy.model_validate(data)
    except ValidationError as e:
        lines = []
        for x in e.errors():
            loc = tuple(x["loc"])
            msg = x["msg"].removeprefix("Value error, ")
            named = _METRIC_FIELD.match(msg) if loc == ("metrics",) and x["type"] == "value_error" else None
            if named:
                # the metrics check names its entry and field: point at that line, not at `metrics:`
                loc, msg = ("metrics", named[1], named[2]), named[3]
            line = line_of(node, loc) if node is not None else None
            where = f"{p}:{line}" if line else str(p)
            field_path = ".".join(map(str, loc))
            got = "" if x["type"] in ("value_error", "missing", "extra_forbidden") else f" (got {_short(x.get('input'))})"
            lines.append(f"{where}: {field_path + ': ' if field_path else ''}{msg}{got}")
        raise InputError(f"{p}: invalid gate policy; fix these fields (see docs/runs.md):\n"
                         + "\n".join(lines)) from e


# "<metric key>.<field>: message", as GatePolicy's metrics check words it
_METRIC_FIELD = re.compile(r"(.*?)\.(min_effect|missing|allow_trajectory): (.*)", re.S)


def _short(v: object, limit: int = 60) -> str:
    text = repr(v)
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass(frozen=True)
class Check:
    name: str
    kind: str  # "statistical" | "hard"
    verdict: str
    detail: str
    value: float | None = None
    threshold: float | None = None
    status: str | None = None  # "unvalidated" for a judge metric whose judge has not met the floor

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
                      defined: bool = True, confidence: float = 0.95, *, p_adj: float | None = None,
                      mde: float | None = None, n: int | None = None, sigma_d: float | None = None) -> Check:
    """Verdict for one metric from its paired delta (B − A), CI, BH-adjusted p and MDE.

    ``p_adj`` None means no multiplicity adjustment applies (a single test): the CI alone decides. ``mde``
    None skips the power check (a caller with no per-query spread); NaN means it could not be estimated.
    """
    if not defined or any(math.isnan(x) for x in (delta, lo, hi)):
        return Check(metric, "statistical", "WARN", "undefined: no paired values to compare", delta, min_effect)
    higher = higher_is_better(metric)
    drop, ci_worst, ci_best = (-delta, -hi, -lo) if higher else (delta, lo, hi)
    alpha = 1 - confidence
    p_text = "" if p_adj is None else f", BH-adjusted p {_p_text(p_adj)}"
    ci_text = f"Δ {delta:+.3f}, {confidence:.0%} CI [{lo:+.3f}, {hi:+.3f}]{p_text}, minimum effect {min_effect:g}"
    significant = p_adj is None or p_adj < alpha
    if ci_worst > 0 and ci_best > 0 and significant:  # whole interval on the regression side
        if drop >= min_effect:
            return Check(metric, "statistical", "FAIL", f"credible regression ≥ minimum effect ({ci_text})",
                         delta, min_effect)
        return Check(metric, "statistical", "WARN", f"credible regression below the minimum effect ({ci_text})",
                     delta, min_effect)
    if ci_best < min_effect:
        # the interval itself rules out a drop as large as the minimum effect, whatever the power was
        return Check(metric, "statistical", "PASS", f"no credible regression; the CI excludes a drop of the "
                     f"minimum effect ({ci_text})", delta, min_effect)
    if mde is not None:
        at_n = f" at n = {n}" if n is not None else ""
        if mde != mde:
            return Check(metric, "statistical", "WARN", f"underpowered: the minimum detectable effect cannot be "
                         f"estimated{at_n} (fewer than 2 paired values); no regression could be detected "
                         f"({ci_text})", delta, min_effect)
        if mde > min_effect:
            need = ""
            if sigma_d is not None and sigma_d == sigma_d:
                need = f"; need n ≈ {n_for_mde(min_effect, sigma_d, alpha=alpha, power=POWER):,}"
            return Check(metric, "statistical", "WARN",
                         f"underpowered: MDE {mde:.3g} > threshold {min_effect:g}{at_n} ({POWER:.0%} power){need}; "
                         f"no credible regression, but one of the threshold's size could be missed ({ci_text})",
                         delta, min_effect)
    return Check(metric, "statistical", "PASS", f"no credible regression ({ci_text})", delta, min_effect)


def _failure_check(name: str, runs, limit: int | None, what: str, fix: str) -> Check | None:
    """A hard check on a count each run records in ``extra`` (absent = the run predates the count)."""
    if limit is None:
        return None
    counts, unknown = [], []
    for role, rec in runs:
        v = (rec.extra or {}).get(name)
        if isinstance(v, int) and not isinstance(v, bool):
            counts.append((role, rec, v))
        else:
            unknown.append((role, rec))
    bad = [(role, rec, v) for role, rec, v in counts if v > limit]
    if bad:
        listed = "; ".join(f"{role} {rec.name}: {v}" for role, rec, v in bad)
        total = sum(v for _, _, v in bad)
        return Check(name, "hard", "FAIL", f"{total} {what} ({listed}); allowed {limit}; {fix}", total, limit)
    if unknown:
        listed = ", ".join(f"{role} {rec.name}" for role, rec in unknown)
        return Check(name, "hard", "WARN", f"unknown for {listed}: the run records no {name} (scored before the "
                     f"check existed); re-score it to check", None, limit)
    total = sum(v for _, _, v in counts)
    return Check(name, "hard", "PASS", f"{total} {what}; allowed {limit}", total, limit)


def coverage_checks(policy: HardPolicy, comp: Comparison, confidence: float = 0.95) -> list[Check]:
    """The hard checks on coverage (spec §14): the candidate's error and refusal rates, paired on (query,
    trial) with the metrics' rule for a credible change (the whole CI above zero and the BH-adjusted p below
    1 - confidence, BH across the two rates), and the share of the baseline's scored pairs each gated metric
    still compares. A missing trace counts as an error. A rate neither run records is not applicable; one
    only the baseline records FAILS (the candidate's answer stage is gone); one only the candidate records,
    or too few pairs to compare, is WARN: a figure that cannot be measured never passes."""
    checks: list[Check] = []
    out = comp.coverage.get("outcomes") or {}
    mix_a, mix_b = out.get("a"), out.get("b")
    rates = {r.metric: r for r in comp.coverage.get("rates", [])}
    recorded = comp.coverage.get("recorded") or {}
    unit = outcome_unit(comp)
    alpha = 1 - confidence
    if mix_a is not None and mix_b is None and policy.max_error_rise is not None:
        # the candidate lost its answer stage altogether: no outcome to compare is the largest loss, not "n/a"
        answered = mix_a["n"] - mix_a["error"]
        return [Check("error_rate", "hard", "FAIL", f"the candidate records no generation outcome (no answer, "
                      f"abstention, refusal or error) on any question, where the baseline gave one on "
                      f"{answered} of {mix_a['n']}: its answer stage is gone", None, policy.max_error_rise),
                *_share_checks(policy, comp)]
    for metric, limit, what in (("error", policy.max_error_rise, "errored"),
                                ("refused", policy.max_refusal_rise, "was refused")):
        if limit is None:
            continue
        name = "error_rate" if metric == "error" else "refusal_rate"
        row = rates.get(metric)
        if row is None:
            sides = [role for role, key in (("baseline", "a"), ("candidate", "b")) if metric in recorded.get(key, ())]
            if not sides:
                checks.append(Check(name, "hard", "PASS", f"not applicable: neither run records `{metric}` rows",
                                    None, limit))
            else:
                other = "candidate" if sides == ["baseline"] else "baseline"
                checks.append(Check(name, "hard", "WARN", f"unknown: only the {sides[0]} records `{metric}`, the "
                                    f"{other} does not, so a rise cannot be measured; score both runs with a "
                                    "generation stage to check", None, limit))
            continue
        if not row.defined:
            checks.append(Check(name, "hard", "WARN", f"undefined: no paired values to compare ({row.reason})",
                                None, limit))
            continue
        key = "error" if metric == "error" else "refused"
        counts = ""
        if mix_a and mix_b:
            counts = (f"; the candidate {what} on {mix_b[key]} of {mix_b['n']} {unit}, the baseline on "
                      f"{mix_a[key]} of {mix_a['n']}")
        text = (f"{name.replace('_', ' ')} {_pct_text(row.mean_a)} → {_pct_text(row.mean_b)} (Δ {row.delta:+.3f}, "
                f"{confidence:.0%} CI [{row.ci_low:+.3f}, {row.ci_high:+.3f}], BH-adjusted p {_p_text(row.p_adj)}, "
                f"n = {row.n}){counts}")
        credible = row.ci_low > 0 and row.p_adj < alpha
        if credible and row.delta > limit:
            checks.append(Check(name, "hard", "FAIL", f"credible rise in the {text}; allowed rise {limit:g}",
                                row.delta, limit))
        else:
            checks.append(Check(name, "hard", "PASS", f"no credible rise above {limit:g} in the {text}",
                                row.delta, limit))
    return checks + _share_checks(policy, comp)


def _share_checks(policy: HardPolicy, comp: Comparison) -> list[Check]:
    """The compared-pairs check: every gated metric compares at least ``min_compared_share`` of the pairs the
    baseline scored (``CompareRow.compared_share``). A metric the baseline scored on no pair has no share:
    WARN, since its coverage (and under ``missing: worst`` its whole comparison) rests on nothing."""
    if policy.min_compared_share is None:
        return []
    floor = policy.min_compared_share
    rows = [r for r in comp.rows if r.stratum == "all"]
    parts, bad, blind = [], [], []
    for r in rows:
        if not r.n_a_defined:
            part = (f"{r.metric}: the baseline scored no pair ({r.n_b_defined} scored by the candidate), so what "
                    "the candidate lost cannot be counted")
            blind.append(part)
        else:
            how = f", {r.filled} scored as worst" if r.missing == "worst" and r.filled else ""
            part = (f"{r.metric}: {r.n_a_compared} of the {r.n_a_defined} pairs the baseline scored, "
                    f"{_pct_text(r.compared_share)}; {r.lost} lost (undefined for the candidate){how}")
            if r.compared_share < floor:
                bad.append(part)
        parts.append(part)
    shares = [r.compared_share for r in rows if r.n_a_defined]
    lowest = min(shares) if shares else None
    if bad:
        return [Check("compared_pairs", "hard", "FAIL", "the comparison lost pairs: " + "; ".join(bad + blind)
                      + f"; each gated metric must compare at least {floor:.0%} of the baseline's pairs (a "
                      "candidate that stops answering is not measured on the questions it lost; set `missing: "
                      "worst` on a metric to score them as its worst value)", lowest, floor)]
    if blind:
        return [Check("compared_pairs", "hard", "WARN", "unknown: " + "; ".join(parts) + f"; floor {floor:.0%}",
                      lowest, floor)]
    return [Check("compared_pairs", "hard", "PASS", "; ".join(parts) + f"; floor {floor:.0%}", lowest, floor)]


def hard_checks(policy: HardPolicy, run, results, baseline=None) -> list[Check]:
    """Checks on the candidate run (``results`` is its result table, pyarrow); the unit-validation count is
    checked on the baseline too, since a bad unit corrupts either side of a comparison."""
    checks: list[Check] = []
    extra = run.extra or {}
    if policy.max_schema_failures is not None:
        n_bad = int(extra.get("schema_failures", 0))
        checks.append(Check("schema_failures", "hard", "FAIL" if n_bad > policy.max_schema_failures else "PASS",
                            f"{n_bad} malformed trace record(s); allowed {policy.max_schema_failures}",
                            n_bad, policy.max_schema_failures))
    roles = [("candidate", run)] + ([("baseline", baseline)] if baseline is not None else [])
    unit = _failure_check("unit_failures", roles, policy.max_unit_failures,
                          "retrieved units failed validation against the corpus",
                          "see `ragassay runs --json` for the examples")
    if unit is not None:
        checks.append(unit)
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
        checks.append(_judged_check(cols, policy.min_judged_fraction))
    return checks


def _judged_check(cols: dict, floor: float) -> Check:
    """Mean over (query, trial) of the judged fraction stored on that trace's rows (any row that has one:
    scoring may store it on some metric rows only). "Not applicable" only when no row has one."""
    per_trace: dict[tuple, float] = {}
    traces = set()
    for q, t, jf in zip(cols["query_id"], cols["trial"], cols["judged_fraction"], strict=True):
        traces.add((q, t))
        if jf is not None and jf == jf and (q, t) not in per_trace:
            per_trace[(q, t)] = float(jf)
    if not per_trace:
        return Check("judged_fraction", "hard", "PASS",
                     "not applicable: no result row records a judged fraction")
    mean = float(np.mean(list(per_trace.values())))
    missing = len(traces) - len(per_trace)
    undefined = f" ({missing} with none: empty lists)" if missing else ""
    return Check("judged_fraction", "hard", "FAIL" if mean < floor else "PASS",
                 f"mean judged fraction {mean:.3f} over {len(per_trace)} queries{undefined}; floor {floor:g}",
                 mean, floor)


def _first_metric_rows(cols: dict) -> list[int]:
    seen, out = set(), []
    for i, (q, t) in enumerate(zip(cols["query_id"], cols["trial"], strict=True)):
        if (q, t) not in seen:
            seen.add((q, t))
            out.append(i)
    return out


def ppi_check(metric: str, ppi: dict, min_effect: float, confidence: float, raw_delta: float) -> Check:
    """The statistical check of a judge metric on its PPI-corrected difference (analysis/ppi.py
    ``gate_figures``), the raw judge delta named beside it."""
    head = f"PPI-corrected (n labelled = {ppi['n_text']})"
    if "undefined" in ppi:
        return Check(metric, "statistical", "WARN", f"{head}: undefined ({ppi['undefined']}); raw judge Δ "
                     f"{raw_delta:+.3f}", None, min_effect)
    c = statistical_check(metric, ppi["delta"], ppi["ci_low"], ppi["ci_high"], min_effect, True, confidence,
                          p_adj=ppi["p_adj"], mde=ppi["mde"])
    return Check(metric, c.kind, c.verdict, f"{head}: {c.detail}; raw judge Δ {raw_delta:+.3f}", c.value,
                 c.threshold)


def run_gate(store, base: str, cand: str, policy: GatePolicy, *, rebaseline: bool = False,
             labels=None) -> GateResult:
    """The gate of ``cand`` against ``base`` under ``policy``. ``labels`` (a PPI labels file): a judge metric
    it covers is decided on its PPI-corrected difference (docs/ppi.md); when every label used says
    ``labelled_by: human`` that decision stands even for an unvalidated judge (status ``ppi``)."""
    metrics = list(policy.metrics)
    comp = compare_runs(store, base, cand, metrics=metrics, n_resamples=policy.n_resamples, seed=policy.seed,
                        confidence=policy.confidence, rebaseline=rebaseline, strata=False,
                        min_effect={m: p.min_effect for m, p in policy.metrics.items()},
                        judge_floor=policy.judge.floor(), judge_label_set=policy.judge.label_set,
                        missing_worst=[m for m, p in policy.metrics.items() if p.missing == "worst"],
                        labels=labels)
    # coverage first: a statistic over the pairs a candidate still answered means little if it lost the rest
    checks = coverage_checks(policy.hard, comp, policy.confidence)
    status = {s["metric"]: s for s in comp.judge_validation}
    corrected = gate_figures(comp, policy.confidence, POWER) if comp.ppi else {}
    for m, pol in policy.metrics.items():
        row = comp.overall(m)
        check = statistical_check(m, row.delta, row.ci_low, row.ci_high, pol.min_effect, row.defined,
                                  policy.confidence, p_adj=row.p_adj, mde=row.mde, n=row.n, sigma_d=row.sigma_d)
        ppi = corrected.get(m)
        too_few = ppi.get("too_few") if ppi is not None else None
        if too_few:
            ppi = None  # a handful of labels decides nothing: the judge's own figure (and status) stands
        if ppi is not None:
            # human labels of a random subsample correct the judge: the decision rests on the corrected figure
            check = ppi_check(m, ppi, pol.min_effect, policy.confidence, row.delta)
        if ppi is not None and ppi.get("human") and m in status and status[m]["status"] == "unvalidated":
            # the corrected interval holds whatever the judge's errors: it rests on the human labels
            check = Check(m, check.kind, check.verdict, f"{check.detail}; judge unvalidated "
                          f"({'; '.join(status[m]['reasons'])}), decided on the human-label correction",
                          check.value, check.threshold, status="ppi")
        elif m in status and status[m]["status"] == "unvalidated":
            # An unmeasured classifier decides nothing: report what the data say, but never PASS or FAIL on it.
            check = Check(m, "statistical", "WARN", f"unvalidated judge, cannot pass or fail: "
                          f"{'; '.join(status[m]['reasons'])}; validate it with `ragassay judge validate` "
                          f"(would have been {check.verdict}: {check.detail})", check.value, check.threshold,
                          status="unvalidated")
        elif m in status:
            check = Check(m, check.kind, check.verdict, f"{check.detail}; judge validated: "
                          f"{'; '.join(status[m]['reasons'])}", check.value, check.threshold, status="validated")
        if too_few:
            check = Check(check.name, check.kind, check.verdict, f"{check.detail}; {too_few}", check.value,
                          check.threshold, status=check.status)
        checks.append(check)
    checks += hard_checks(policy.hard, comp.run_b, store.results(comp.run_b.run_id), baseline=comp.run_a)
    verdict = max((c.verdict for c in checks), key=ORDER.__getitem__, default="PASS")
    notes = [f"rebaselined: {k} {a} (A) vs {b} (B)" for k, a, b in comp.pin_differences]
    return GateResult(verdict, checks, comp, notes)
