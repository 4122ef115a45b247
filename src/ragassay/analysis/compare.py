"""Paired comparison of two stored runs: per metric x stratum deltas with bootstrap CIs, W/L/T, MDE,
Benjamini-Hochberg across the table, a verdict against a minimum meaningful effect, the config diff and
claim sentences (spec §1.2, §13).

Pairing is on (query_id, trial). With several trials per query the bootstrap resamples whole queries
(clustered), since trials of one query are not independent evidence.

A verdict uses only what the table prints: a change is credible when its CI excludes zero AND its
Benjamini-Hochberg adjusted p (across the whole table) is below 1 - confidence. Every scoring definition is a
pin (:data:`PINS`); runs whose pins differ are refused unless rebaselined. ``final_k`` is pinned per metric:
the ``@final_k`` metrics and the rerank indicators of runs with different final_k measure different depths,
so they are refused (never renamed), while every other metric is still compared.

A metric scored by a judge is marked ``unvalidated`` (in ``judge_validation`` and in its claim sentence) when
that judge has no validation record for the same pins meeting the floor (docs/judge-validation.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from ragassay.analysis.directions import higher_is_better
from ragassay.analysis.summary import STAGES, stage_of
from ragassay.errors import InputError, PinMismatchError
from ragassay.metrics.agent import UNBOUNDED as AGENT_UNBOUNDED
from ragassay.stats import adjust_pvalues, bootstrap_deltas, mde_paired

# Every definitional choice a number depends on. `cutoffs` is derived from the run's `name@<int>` metrics
# (it is not stored) and is None for a run without ranked metrics, which conflicts with nothing.
PINS = ("dataset_version", "corpus_digest", "metric_version", "hit_rule", "gain", "relevance_threshold", "ties",
        "cutoffs", "judge_model", "rubric_sha", "judge_prompt_sha", "judge_settings")
# The judge pins are None for a run no judge scored; like cutoffs, an absent pin conflicts with nothing
# (such a run has no judge metrics to compare). judge_settings is every other setting that can move a verdict
# (sampling, thinking budget, structured-output mode, a cascade): ragassay.judges.config.judge_settings.
JUDGE_PINS = ("judge_model", "rubric_sha", "judge_prompt_sha", "judge_settings")
# The agent verifier (extra["agent"], written by agent scoring): what decided task success, partial credit and
# silent failure. `verifier` is its module:function (or command and timeout), `verifier_source_sha` the sha256
# of its module file. Checked only when one of those outcome metrics is compared (the trajectory metrics never
# ask the verifier); None for a run scored without one, which conflicts with nothing, as an unjudged run.
AGENT_PINS = ("verifier", "verifier_source_sha")
# The claims judge (extra["claims_judge"], written by `judge claims`): checked only when a claim metric is
# compared; None for a run never judged for claims, which conflicts with nothing.
CLAIMS_PINS = ("claims_judge_model", "claims_rubric_sha", "claims_prompt_sha", "claims_settings", "claims_relevance")
OPTIONAL_PINS = ("cutoffs", *JUDGE_PINS, *AGENT_PINS, *CLAIMS_PINS)
# scoring's fallback when a run's config names no reranker.final_k (analysis/scoring.py `_final_k`)
SCORING_DEFAULT_FINAL_K = 10
DEFAULT_MIN_EFFECT = 0.02
# metrics whose values are not confined to [0, 1]: a minimum effect above 1 can make sense, and they have no
# worst value (so no missing-as-worst); the gate's policy reads this set too
UNBOUNDED = frozenset({"context_tokens"}) | AGENT_UNBOUNDED  # agent: steps, loops, wall ms, cost
# the per-(query, trial) outcome indicators scoring stores (analysis/scoring.py): their paired change is part
# of every comparison's coverage, and the gate's hard checks rest on it
RATE_METRICS = ("error", "refused")
ABSTAIN_METRICS = ("over_refusal", "abstention_recall")
HEADLINE_METRICS = ("recall@fusion_depth", "recall@final_k", "ndcg@final_k", "recall@context", "answer_f1",
                    "abstention_recall", "over_refusal")
# The metrics of the report's stage table, in the order a query flows through the pipeline within each stage.
STAGE_METRICS = ("recall@bm25_depth", "recall@dense_depth", "recall@fusion_depth", "recall@final_k",
                 "ndcg@final_k", "rr@final_k", "recall@context", "context_tokens", "answer_f1", "answer_em",
                 "abstention_recall", "over_refusal", "refused", "error", "citation_validity")
_STAGE_ORDER = {m: i for i, m in enumerate(STAGE_METRICS)}


def stage_key(metric: str) -> tuple:
    """Pipeline order of a metric name: its stage (:data:`ragassay.analysis.summary.STAGES`), then its place in
    :data:`STAGE_METRICS`, then the name itself, so metrics outside that list follow within their stage by name.
    Both compare's claims and the report's stage table sort by it."""
    return STAGES.index(stage_of(metric)), _STAGE_ORDER.get(metric, len(_STAGE_ORDER)), metric


@dataclass(frozen=True)
class CompareRow:
    metric: str
    stratum: str
    n: int
    n_excluded: int
    mean_a: float
    mean_b: float
    delta: float
    ci_low: float
    ci_high: float
    p: float
    p_adj: float
    wins: int
    losses: int
    ties: int
    sigma_d: float
    mde: float
    min_effect: float
    higher_is_better: bool
    verdict: str
    defined: bool = True
    reason: str | None = None
    # coverage: paired (query, trial) keys, how many each side defines, and the pairs one side lost
    n_pairs: int = 0
    n_a_defined: int = 0
    n_b_defined: int = 0
    lost: int = 0          # defined for A (the baseline), undefined for B
    gained: int = 0        # defined for B, undefined for A
    missing: str = "excluded"   # "excluded": one-sided undefined pairs are left out; "worst": scored as worst
    filled: int = 0        # one-sided undefined values scored as the worst value ("worst" only)

    @property
    def n_a_compared(self) -> int:
        """Of the pairs the baseline defines, how many are compared: every one under missing-as-worst, else
        those the candidate defines too (n_a_defined − lost)."""
        return self.n_a_defined - (0 if self.missing == "worst" else self.lost)

    @property
    def compared_share(self) -> float:
        """n_a_compared / n_a_defined: of the pairs the baseline defines, the share still compared (NaN when
        the baseline defines none). Pairs only the candidate defines do not raise it above 1."""
        return self.n_a_compared / self.n_a_defined if self.n_a_defined else math.nan

    def to_dict(self) -> dict:
        out = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}
        share = self.compared_share
        out["n_a_compared"] = self.n_a_compared
        out["compared_share"] = None if math.isnan(share) else share
        return out


@dataclass
class Comparison:
    run_a: object
    run_b: object
    rows: list[CompareRow]
    config_diff: list[tuple[str, object, object]]
    claims: list[str]
    pin_differences: list[tuple[str, object, object]] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    excluded: list[tuple[str, str]] = field(default_factory=list)  # (metric, why it was not compared)
    delivered_tokens: tuple[float | None, float | None] = (None, None)
    # one entry per compared judge metric: {metric, status: validated | unvalidated, reasons}
    judge_validation: list[dict] = field(default_factory=list)
    # golden items, paired keys, each side's outcome mix and the paired error / refusal rate rows
    coverage: dict = field(default_factory=dict)
    # one entry per judge metric the --labels file covers: the PPI-corrected difference beside the raw judge
    # means (analysis/ppi.py ``paired_ppi``)
    ppi: list[dict] = field(default_factory=list)

    def claim(self, row: CompareRow) -> str:
        """The claim sentence for one row, with the pins and tokens this comparison measured; a claim resting
        on an unvalidated judge says so."""
        text = claim_sentence(row, self.run_a, self.run_b, self.config_diff, self.settings.get("confidence", 0.95),
                              pins=self.pin_differences, tokens=self.delivered_tokens)
        st = next((s for s in self.judge_validation if s["metric"] == row.metric), None)
        if st is not None and st["status"] == "unvalidated":
            text += f" [rests on an unvalidated judge: {'; '.join(st['reasons'])}]"
        return text

    def overall(self, metric: str) -> CompareRow | None:
        for r in self.rows:
            if r.metric == metric and r.stratum == "all":
                return r
        return None

    def to_dict(self) -> dict:
        return {
            "baseline": {"run_id": self.run_a.run_id, "name": self.run_a.name},
            "candidate": {"run_id": self.run_b.run_id, "name": self.run_b.name},
            "settings": self.settings,
            "pin_differences": [{"pin": k, "a": a, "b": b} for k, a, b in self.pin_differences],
            "excluded_metrics": [{"metric": m, "reason": why} for m, why in self.excluded],
            "delivered_tokens": {"a": self.delivered_tokens[0], "b": self.delivered_tokens[1]},
            "config_diff": [{"key": k, "a": a, "b": b} for k, a, b in self.config_diff],
            "claims": self.claims,
            "judge_validation": self.judge_validation,
            "ppi": self.ppi,
            "coverage": {**{k: v for k, v in self.coverage.items() if k != "rates"},
                         "rates": [r.to_dict() for r in self.coverage.get("rates", [])]},
            "rows": [r.to_dict() for r in self.rows],
        }


def flatten_config(cfg: object, prefix: str = "") -> dict[str, object]:
    if isinstance(cfg, str):
        try:
            cfg = json.loads(cfg)
        except json.JSONDecodeError:
            return {prefix or "config": cfg}
    if isinstance(cfg, dict):
        out: dict[str, object] = {}
        for k in sorted(cfg):
            out.update(flatten_config(cfg[k], f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: cfg}


def config_diff(a: object, b: object) -> list[tuple[str, object, object]]:
    """Dotted keys whose values differ between two configs (missing keys show as None). The run name is
    left out: it labels a run, it does not configure it."""
    fa, fb = flatten_config(a), flatten_config(b)
    keys = sorted((set(fa) | set(fb)) - {"name"})
    return [(k, fa.get(k), fb.get(k)) for k in keys if fa.get(k) != fb.get(k)]


def cutoffs_of(metrics) -> tuple[int, ...] | None:
    """The integer depths a run was scored at, from its metric names (`recall@5`, `ndcg@10`); None if none."""
    ks = {int(k) for m in metrics for _, _, k in [str(m).partition("@")] if k.isdigit()}
    return tuple(sorted(ks)) or None


def depends_on_final_k(metric: str) -> bool:
    """Metrics measured at the run's final_k: the `@final_k` names and the rerank movement indicators."""
    return metric.endswith("@final_k") or metric.startswith("rerank_")


def final_k_of(rec, metrics) -> int | None:
    """The final_k a run's `@final_k` metrics were scored at (as scoring derives it), None if it has none."""
    if not any(depends_on_final_k(m) for m in metrics):
        return None
    stored = (rec.extra or {}).get("final_k")
    if isinstance(stored, int) and not isinstance(stored, bool):
        return stored
    cfg = rec.config if isinstance(rec.config, dict) else {}
    rr = cfg.get("reranker")
    k = rr.get("final_k") if isinstance(rr, dict) else None
    return int(k) if isinstance(k, int) and not isinstance(k, bool) and k > 0 else SCORING_DEFAULT_FINAL_K


def run_pins(rec, metrics) -> dict[str, object]:
    """Every pin of a stored run, the derived ones (cutoffs, final_k) included."""
    from ragassay.judges.config import judge_settings

    out = {p: getattr(rec, p) for p in PINS if p not in ("cutoffs", "judge_prompt_sha", "judge_settings")}
    out["cutoffs"] = cutoffs_of(metrics)
    judge = (rec.extra or {}).get("judge")
    out["judge_prompt_sha"] = judge.get("prompt_sha") if isinstance(judge, dict) else None
    out["judge_settings"] = judge_settings(judge)
    out["final_k"] = final_k_of(rec, metrics)
    out.update(verifier_pins(rec))
    out.update(claims_judge_pins(rec))
    return out


def verifier_pins(rec) -> dict[str, object]:
    """The :data:`AGENT_PINS` of a stored run (None when it was scored without a verifier)."""
    agent = (rec.extra or {}).get("agent")
    ver = agent.get("verifier") if isinstance(agent, dict) else None
    if not isinstance(ver, dict):
        return dict.fromkeys(AGENT_PINS)
    if ver.get("kind") == "command":
        timeout = ver.get("timeout_s")
        shown = f"command {ver.get('cmd')!r}" + (f" (timeout {timeout:g} s)" if isinstance(timeout, int | float)
                                                 else "")
        return {"verifier": shown, "verifier_source_sha": None}
    return {"verifier": ver.get("spec"), "verifier_source_sha": ver.get("source_sha256")}


def claims_judge_pins(rec) -> dict[str, object]:
    """The :data:`CLAIMS_PINS` of a stored run (None when it was never judged for claims)."""
    pins = (rec.extra or {}).get("claims_judge")
    pins = pins if isinstance(pins, dict) else {}
    return {p: _hashable(pins.get(p.removeprefix("claims_"))) for p in CLAIMS_PINS}


def _hashable(v: object) -> object:
    """A pin value compared by equality and printed: a mapping or list as its sorted JSON."""
    return json.dumps(v, sort_keys=True, default=str) if isinstance(v, dict | list) else v


def pin_differences(a, b, metrics_a=(), metrics_b=(), pins=PINS) -> list[tuple[str, object, object]]:
    """(pin, A, B) for every pin that differs. An underived pin (no ranked metrics) conflicts with nothing."""
    pa, pb = run_pins(a, metrics_a), run_pins(b, metrics_b)
    return [(p, pa[p], pb[p]) for p in pins
            if pa[p] != pb[p] and not (p in OPTIONAL_PINS and (pa[p] is None or pb[p] is None))]


REBASELINE_HINT = ("re-score them under the same definitions (golden set, corpus, metric version, hit rule, gain, "
                   "threshold, ties, cutoffs, judge, agent verifier, claims judge), or pass --rebaseline to "
                   "compare anyway")


def check_comparable(store, run_refs, *, pins=PINS, rebaseline: bool = False, roles=None, hint=REBASELINE_HINT):
    """The one comparability check of every command that pairs or pools runs (compare, gate, every
    ``analyze`` subcommand): the stored records of ``run_refs``, or a ``PinMismatchError`` naming each pin in
    ``pins`` on which a run differs from the first one (the golden-set version, the corpus digest, the
    scoring definitions). ``rebaseline`` lets differing runs through; the caller must then say so.
    ``roles`` labels the runs in the message (compare: ``("A", "B")``; default: their names); ``hint`` is its
    last line (what to do)."""
    recs = [store.get_run(r) for r in run_refs]
    names = [store.metrics(r.run_id) for r in recs]
    labels = [r.name for r in recs] if roles is None else list(roles)
    lines = []
    for rec, ms, label in zip(recs[1:], names[1:], labels[1:], strict=True):
        lines += [f"  {p}: {_value_text(a)} ({labels[0]}) vs {_value_text(b)} ({label})"
                  for p, a, b in pin_differences(recs[0], rec, names[0], ms, pins)]
    if lines and not rebaseline:
        shown = [r.name if roles is None else f"{r.name} ({role})" for r, role in zip(recs, labels, strict=True)]
        raise PinMismatchError(f"runs {', '.join(shown[:-1])} and {shown[-1]} are not comparable; differing pins:\n"
                               + "\n".join(lines) + "\n" + hint)
    return recs


def _verdict(delta: float, lo: float, hi: float, min_effect: float, higher: bool, defined: bool,
             p_adj: float = 0.0, alpha: float = 0.05) -> str:
    """Credible = the CI excludes 0 and the BH-adjusted p is below alpha; both are printed beside it."""
    if not defined:
        return "undefined"
    d, lo_, hi_ = (delta, lo, hi) if higher else (-delta, -hi, -lo)
    significant = p_adj < alpha  # False for NaN
    if significant and lo_ > 0:
        return "improved" if d >= min_effect else "improved, below minimum effect"
    if significant and hi_ < 0:
        return "regressed" if -d >= min_effect else "regressed, below minimum effect"
    if -min_effect < lo_ and hi_ < min_effect:
        return f"equivalent within ±{min_effect:g}"
    if lo_ > 0 or hi_ < 0:
        return "no credible change after BH adjustment"
    return "no credible change"


def pins_for(metrics) -> tuple[str, ...]:
    """The pins a figure over ``metrics`` rests on: every pin ``compare`` checks, less the judge pins when
    none of the metrics is a judge metric (a judge change cannot move them), plus :func:`extra_pins_for`."""
    from ragassay.judges.validate import METRIC_KIND

    if any(m in METRIC_KIND for m in metrics):
        return PINS + extra_pins_for(metrics)
    return tuple(p for p in PINS if p not in JUDGE_PINS) + extra_pins_for(metrics)


def extra_pins_for(metrics) -> tuple[str, ...]:
    """The agent verifier's pins when ``metrics`` hold an outcome metric it decided (task_success,
    partial_credit, silent_failure), the claims judge's when they hold a claim metric; else nothing."""
    from ragassay.metrics.agent import OUTCOME_METRICS
    from ragassay.metrics.claims import CLAIM_METRICS

    ms = set(metrics)
    return (AGENT_PINS if ms & set(OUTCOME_METRICS) else ()) + (CLAIMS_PINS if ms & set(CLAIM_METRICS) else ())


def comparable_runs(store, run_refs, metrics, *, rebaseline: bool = False) -> tuple[list, list[dict]]:
    """(run records, pin differences) of runs an analysis pairs or pools: ``compare``'s one check
    (``check_comparable``) over :func:`pins_for` ``metrics``, which raises ``PinMismatchError`` naming every
    differing pin unless ``rebaseline``. Each difference is ``{pin, run_a, a, run_b, b}`` against the first
    run; it is empty unless the runs were rebaselined."""
    pins = pins_for(metrics)
    recs = check_comparable(store, list(run_refs), pins=pins, rebaseline=rebaseline)
    first = recs[0]
    have = store.metrics(first.run_id)
    diffs = [{"pin": p, "run_a": first.name, "a": a, "run_b": r.name, "b": b}
             for r in recs[1:] for p, a, b in pin_differences(first, r, have, store.metrics(r.run_id), pins)]
    return recs, diffs


def check_min_effect(min_effect, *, source: str = "--min-effect") -> None:
    """A minimum meaningful effect is a finite number >= 0 (a dict gives one per metric)."""
    items = min_effect.items() if isinstance(min_effect, dict) else [(None, min_effect)]
    for m, v in items:
        ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
        if not ok:
            where = f"{source} for {m}" if m is not None else source
            raise InputError(f"{where}: the minimum effect must be a finite number >= 0, got {v!r}")


def _check_settings(n_resamples: int, confidence: float) -> None:
    if not isinstance(n_resamples, int) or isinstance(n_resamples, bool) or not 100 <= n_resamples <= 1_000_000:
        raise InputError(f"--resamples must be an integer between 100 and 1,000,000, got {n_resamples!r}")
    if not isinstance(confidence, int | float) or not 0 < confidence < 1:
        raise InputError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")


def worst_value(metric: str) -> float:
    """The worst value of a metric bounded in [0, 1]: 0 when higher is better, 1 when lower is better."""
    if metric in UNBOUNDED:
        raise InputError(f"{metric}: missing-as-worst needs a bounded metric; {metric} has no worst value")
    return 0.0 if higher_is_better(metric) else 1.0


def compare_wide(a_ids, a_strata, a_values, b_ids, b_values, metrics, *, min_effect=DEFAULT_MIN_EFFECT,
                 n_resamples=10_000, seed=0, confidence=0.95, strata=True, missing_worst=()) -> list[CompareRow]:
    """Compare two runs given as wide matrices (rows keyed by (query_id, trial), one column per metric).

    A pair defined on one side only is left out of its metric and counted (``lost``: A defined, B not;
    ``gained``: the reverse). For the metrics in ``missing_worst`` it is scored instead, the undefined side
    taking the metric's worst value (:func:`worst_value`): a candidate that stops answering then pays for it."""
    index_b = {k: i for i, k in enumerate(b_ids)}
    common = [i for i, k in enumerate(a_ids) if k in index_b]
    if not common:
        raise InputError("the two runs share no (query_id, trial) pairs; compare runs of the same golden set")
    ia = np.asarray(common)
    ib = np.asarray([index_b[a_ids[i]] for i in common])
    A, B = a_values[ia].copy(), b_values[ib].copy()
    da, db = ~np.isnan(A), ~np.isnan(B)
    worst = set(missing_worst)
    filled = np.zeros_like(da)
    for j, m in enumerate(metrics):
        if m in worst:
            w = worst_value(m)
            one_a, one_b = da[:, j] & ~db[:, j], db[:, j] & ~da[:, j]
            B[one_a, j], A[one_b, j] = w, w
            filled[:, j] = one_a | one_b
    qids = np.asarray([a_ids[i][0] for i in common], dtype=object)
    strat = np.asarray([a_strata[i] for i in common], dtype=object)
    clustered = len(set(qids.tolist())) < len(qids)
    groups = [("all", np.ones(len(common), dtype=bool))]
    if strata:
        groups += [(s, strat == s) for s in sorted(set(strat.tolist()))]
    rows: list[CompareRow] = []
    for stratum, mask in groups:
        a, b = A[mask], B[mask]
        d = b - a
        res = bootstrap_deltas(d, metrics=list(metrics), clusters=qids[mask] if clustered else None,
                               n_resamples=n_resamples, seed=seed, confidence=confidence)
        for j, md in enumerate(res.metrics):
            m = metrics[j]
            if md.n == 0 and stratum != "all":
                continue  # the metric is undefined on every item of this stratum (e.g. recall on negatives)
            col = d[:, j]
            ok = ~np.isnan(col)
            sd = float(np.std(col[ok], ddof=1)) if ok.sum() >= 2 else float("nan")
            mde = mde_paired(int(ok.sum()), sd, alpha=1 - confidence) if ok.sum() >= 2 and sd == sd else float("nan")
            eff = (min_effect.get(m, min_effect.get("*", DEFAULT_MIN_EFFECT)) if isinstance(min_effect, dict)
                   else float(min_effect))
            higher = higher_is_better(m)
            both = ok
            ga, gb = da[mask, j], db[mask, j]
            rows.append(CompareRow(
                metric=m, stratum=stratum, n=md.n, n_excluded=md.n_excluded,
                mean_a=float(np.mean(a[both, j])) if both.any() else float("nan"),
                mean_b=float(np.mean(b[both, j])) if both.any() else float("nan"),
                delta=md.delta, ci_low=md.ci_low, ci_high=md.ci_high, p=md.p_value, p_adj=float("nan"),
                wins=md.wins if higher else md.losses, losses=md.losses if higher else md.wins, ties=md.ties,
                sigma_d=sd, mde=mde, min_effect=eff, higher_is_better=higher, verdict="",
                defined=md.defined, reason=md.reason, n_pairs=int(mask.sum()), n_a_defined=int(ga.sum()),
                n_b_defined=int(gb.sum()), lost=int((ga & ~gb).sum()), gained=int((gb & ~ga).sum()),
                missing="worst" if m in worst else "excluded", filled=int(filled[mask, j].sum()),
            ))
    # one BH family: the whole table
    return _adjusted(rows, confidence)


def _adjusted(rows: list[CompareRow], confidence: float) -> list[CompareRow]:
    """``rows`` as one Benjamini-Hochberg family: each row's adjusted p from the raw ones, and its verdict,
    which is decided only once the adjusted p is known."""
    adj = adjust_pvalues(np.asarray([r.p for r in rows], dtype=float), "bh")
    alpha = 1 - confidence
    return [replace(r, p_adj=float(p), verdict=_verdict(r.delta, r.ci_low, r.ci_high, r.min_effect,
                                                          r.higher_is_better, r.defined, float(p), alpha))
            for r, p in zip(rows, adj, strict=True)]


def _fmt(x: float) -> str:
    return f"{x:.2f}" if abs(x) >= 0.005 or x == 0 else f"{x:.3f}"


def _signed(x: float) -> str:
    return ("+" if x >= 0 else "−") + _fmt(abs(x))


def _value_text(v: object) -> str:
    if isinstance(v, int | float) and not isinstance(v, bool) and abs(v) >= 1000:
        return f"{v:,}"
    return "unset" if v is None else str(v)


def _both(a: object, b: object) -> str:
    """`a` when both runs agree, else `a (A) / b (B)`."""
    return _value_text(a) if a == b else f"{_value_text(a)} (A) / {_value_text(b)} (B)"


def _tokens_text(tokens, run_a, run_b) -> str:
    """" at 491 (A) / 512 (B) tokens delivered (budget 1,000)": a budget is named only beside the tokens the
    packer actually delivered (a final_k cap can leave most of it unused)."""
    ta, tb = tokens if tokens is not None else (None, None)
    if ta is None or tb is None:
        return ""
    budgets = []
    for rec in (run_a, run_b):
        cfg = flatten_config(rec.config)
        b = cfg.get("packer.budget_tokens")
        budgets.append(b if isinstance(b, int) and not isinstance(b, bool) and not cfg.get("oracle") else None)
    shown = f"{ta:,.0f}" if round(ta) == round(tb) else f"{ta:,.0f} (A) / {tb:,.0f} (B)"
    if budgets[0] == budgets[1]:
        budget = f" (budget {budgets[0]:,})" if budgets[0] is not None else ""
    else:
        budget = " (budget " + " / ".join(f"{'none' if x is None else f'{x:,}'} ({s})"
                                          for x, s in zip(budgets, "AB", strict=True)) + ")"
    return f" at {shown} tokens delivered{budget}"


def claim_sentence(row: CompareRow, run_a, run_b, diff: list[tuple[str, object, object]],
                   confidence: float = 0.95, *, pins: list[tuple[str, object, object]] = (),
                   tokens: tuple[float | None, float | None] | None = None) -> str:
    """A one-sentence claim in the spirit of spec §1.2: dataset and n, hit rule, what changed, the interval.

    ``pins`` are the differing pins of a rebaselined comparison: they are listed, and the sentence then never
    says "all else pinned" or "configs identical". ``tokens`` are the mean context tokens delivered by A and B.
    """
    parts = []
    if pins:
        parts.append("rebaselined across differing pins: "
                     + "; ".join(f"{k} {_value_text(a)} → {_value_text(b)}" for k, a, b in pins))
    if diff:
        shown = "; ".join(f"{k} {_value_text(a)} → {_value_text(b)}" for k, a, b in diff[:4])
        more = f" and {len(diff) - 4} more" if len(diff) > 4 else ""
        parts.append(f"changed: {shown}{more}" + ("" if pins else "; all else pinned"))
    elif not pins:
        parts.append("configs identical (a repeat run)")
    else:
        parts.append("same pipeline config")
    changed = "; ".join(parts)
    scope = "" if row.stratum == "all" else f" on the {row.stratum} stratum"
    lost = ""
    if row.missing == "worst" and row.filled:
        lost = f", {row.filled} pair(s) undefined on one side scored as the worst value"
    elif row.lost or row.gained:
        lost = (f", {row.lost} of the {row.n_a_defined} pairs A scored lost (undefined for B) and left out"
                + (f", {row.gained} gained" if row.gained else ""))
    return (f"{row.metric}{_tokens_text(tokens, run_a, run_b)}{scope} went from {_fmt(row.mean_a)} to "
            f"{_fmt(row.mean_b)} ({_signed(row.delta)}, {confidence:.0%} paired-bootstrap CI "
            f"[{_signed(row.ci_low)}, {_signed(row.ci_high)}], BH-adjusted p {_p_text(row.p_adj)}, n = {row.n}{lost}, "
            f"{row.wins} wins / {row.losses} losses / {row.ties} ties, "
            f"{_both(run_a.hit_rule, run_b.hit_rule)} hit rule, "
            f"dataset {_both(run_a.dataset_version, run_b.dataset_version)}; {changed}) — {row.verdict}.")


def _p_text(p: float) -> str:
    if p != p:
        return "undefined"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def delivered_tokens(store, run_id: str) -> float | None:
    """Mean of a run's `context_tokens` rows over the defined ones (None when it has none)."""
    if "context_tokens" not in set(store.metrics(run_id)):
        return None
    v = np.asarray([np.nan if x is None else x for x in store.results(run_id, ["context_tokens"])
                    .column("value").to_pylist()], dtype=float)
    v = v[~np.isnan(v)]
    return float(v.mean()) if v.size else None


def compare_runs(store, run_a: str, run_b: str, *, metrics=None, min_effect=DEFAULT_MIN_EFFECT,
                 n_resamples: int = 10_000, seed: int = 0, confidence: float = 0.95, rebaseline: bool = False,
                 strata: bool = True, judge_floor=None, judge_label_set: str | None = None,
                 missing_worst=(), labels=None) -> Comparison:
    """Compare stored runs A (baseline) and B (candidate); refuses differing pins unless ``rebaseline``.

    Metrics measured at final_k are refused when the runs' final_k differ: asked for explicitly, that is an
    error; in the default "all shared metrics" they are left out and listed in ``Comparison.excluded``.

    Coverage is part of the comparison: every row counts its pairs and those one side lost, and
    ``Comparison.coverage`` holds the golden items, the paired keys, each side's outcome mix (answered,
    abstained, refused, error) and the paired change in the error and refusal rates. ``missing_worst`` names
    metrics whose one-sided undefined pairs are scored as the worst value instead of left out.

    ``labels`` (a PPI labels file or :class:`ragassay.analysis.ppi.PPILabels`): human values of judge metrics
    for a random subsample of each run's answers; every compared metric it covers gets a PPI-corrected
    difference in ``Comparison.ppi`` beside the raw rows, which stay the judge's (docs/ppi.md).
    """
    check_min_effect(min_effect)
    _check_settings(n_resamples, confidence)
    ids = [store.get_run(r).run_id for r in (run_a, run_b)]
    ma = _metric_names(store, ids[0])
    mb = _metric_names(store, ids[1])
    # the verifier and claims-judge pins count when a metric they decide is compared (the judge pins: always)
    checked = PINS + extra_pins_for([m for m in ma if m in set(mb)] if metrics is None else metrics)
    ra, rb = check_comparable(store, ids, pins=checked, rebaseline=rebaseline, roles=("A", "B"))
    pins = pin_differences(ra, rb, ma, mb, checked)
    shared = [m for m in ma if m in set(mb)]
    wanted = shared if metrics is None else list(dict.fromkeys(metrics))
    if not wanted:
        raise InputError(f"runs {ra.name} and {rb.name} have no metric in common")
    missing = [m for m in wanted if m not in set(ma) or m not in set(mb)]
    if missing:
        raise InputError(f"metric(s) {missing} missing from one of the runs; have {sorted(set(ma) & set(mb))}")
    if isinstance(min_effect, dict):
        unknown = sorted(set(min_effect) - set(wanted) - {"*"})
        if unknown:
            raise InputError(f"--min-effect names {', '.join(unknown)}, which is not among the compared metrics "
                             f"({', '.join(wanted[:8])}{'…' if len(wanted) > 8 else ''})")
    excluded: list[tuple[str, str]] = []
    ka, kb = final_k_of(ra, ma), final_k_of(rb, mb)
    if ka is not None and kb is not None and ka != kb:
        at_k = sorted(set(cutoffs_of(ma) or ()) & set(cutoffs_of(mb) or ()))
        instead = f"; compare a fixed depth both runs have instead ({', '.join(f'@{k}' for k in at_k)})" \
            if at_k else ""
        why = f"final_k differs: {ka} (A) vs {kb} (B), so it measures different depths{instead}"
        refused = [m for m in wanted if depends_on_final_k(m)]
        if metrics is not None and refused:
            raise InputError(f"{', '.join(refused)}: not a like-for-like comparison; {why}")
        excluded = [(m, why) for m in refused]
        wanted = [m for m in wanted if not depends_on_final_k(m)]
        if not wanted:
            raise InputError(f"runs {ra.name} and {rb.name} share only metrics measured at final_k; {why}")
    worst = list(dict.fromkeys(missing_worst))
    stray = [m for m in worst if m not in wanted]
    if stray:
        raise InputError(f"missing-as-worst names {', '.join(stray)}, which is not among the compared metrics "
                         f"({', '.join(wanted[:8])}{'…' if len(wanted) > 8 else ''}); name a compared metric")
    for m in worst:
        worst_value(m)
    # the outcome columns each run has (a run without a generation stage has none: its mix is None)
    outcome_cols = (*RATE_METRICS, *ABSTAIN_METRICS)
    cols_a = wanted + [m for m in outcome_cols if m not in wanted and m in set(ma)]
    cols_b = wanted + [m for m in outcome_cols if m not in wanted and m in set(mb)]
    qa, ta, sa, va = store.results_wide(ra.run_id, cols_a)
    qb, tb, _, vb = store.results_wide(rb.run_id, cols_b)
    a_ids = list(zip(qa, ta, strict=True))
    b_ids = list(zip(qb, tb, strict=True))
    k = len(wanted)
    rows = compare_wide(a_ids, sa, va[:, :k], b_ids, vb[:, :k], wanted, min_effect=min_effect,
                        n_resamples=n_resamples, seed=seed, confidence=confidence, strata=strata,
                        missing_worst=worst)
    at_b = {key: i for i, key in enumerate(b_ids)}
    pa = np.asarray([i for i, key in enumerate(a_ids) if key in at_b], dtype=np.int64)
    pb = np.asarray([at_b[a_ids[i]] for i in pa], dtype=np.int64)
    rates = [m for m in RATE_METRICS if m in set(ma) and m in set(mb)]
    coverage = {"golden_items": {"a": ra.n_queries, "b": rb.n_queries},
                "trials": {"a": ra.trials, "b": rb.trials},
                "keys": {"a": len(a_ids), "b": len(b_ids), "paired": len(pa)},
                # the outcome mix of the paired keys, the ones the rates are computed on
                "outcomes": {"a": outcome_mix(dict(zip(cols_a, va[pa].T, strict=True))),
                             "b": outcome_mix(dict(zip(cols_b, vb[pb].T, strict=True)))},
                "recorded": {"a": [m for m in RATE_METRICS if m in set(ma)],
                             "b": [m for m in RATE_METRICS if m in set(mb)]},
                "missing_worst": worst,
                "golden_sources": {"a": (ra.extra or {}).get("golden_sources"),
                                   "b": (rb.extra or {}).get("golden_sources")},
                "rates": _rate_rows(rows, rates, (a_ids, sa, va, cols_a), (b_ids, vb, cols_b),
                                    n_resamples=n_resamples, seed=seed, confidence=confidence)}
    diff = config_diff(ra.config, rb.config)
    settings = {"n_resamples": n_resamples, "seed": seed, "confidence": confidence, "multiplicity": "bh",
                "min_effect": min_effect, "pairing": "(query_id, trial)",
                "credible": "CI excludes 0 and BH-adjusted p < 1 - confidence"}
    comp = Comparison(ra, rb, rows, diff, [], pins, settings, excluded,
                      (delivered_tokens(store, ra.run_id), delivered_tokens(store, rb.run_id)), coverage=coverage)
    comp.judge_validation = judge_validation(store, (ra, rb), wanted, judge_floor, label_set=judge_label_set)
    if labels is not None:
        from ragassay.analysis.ppi import comparison_ppi

        comp.ppi = comparison_ppi(store, ra.run_id, rb.run_id, labels, wanted, confidence=confidence)
    judged = {s["metric"] for s in comp.judge_validation}
    # claims read in the order a query flows through the pipeline (retrieval first), as the report's tables do
    headline = sorted((r for r in rows if r.stratum == "all" and (r.metric in HEADLINE_METRICS or r.metric in judged)
                       and r.defined), key=lambda r: stage_key(r.metric))
    comp.claims = [comp.claim(r) for r in headline] + coverage_claims(comp)
    return comp


def _rate_rows(rows: list[CompareRow], rates: list[str], a, b, *, n_resamples: int, seed: int,
               confidence: float) -> list[CompareRow]:
    """The paired error and refusal rate rows: their own Benjamini-Hochberg family, every rise credible at
    any size (min_effect 0). A rate the table already compares is not resampled again: its row is the same
    resamples (a metric's depend only on the seed and its valid pairs), adjusted in this family instead."""
    if not rates:
        return []
    got = {r.metric: replace(r, min_effect=0.0) for r in rows if r.stratum == "all" and r.metric in rates}
    fresh = [m for m in rates if m not in got]
    if fresh:
        (a_ids, sa, va, cols_a), (b_ids, vb, cols_b) = a, b
        got.update((r.metric, r) for r in compare_wide(
            a_ids, sa, va[:, [cols_a.index(m) for m in fresh]], b_ids, vb[:, [cols_b.index(m) for m in fresh]],
            fresh, min_effect=0.0, n_resamples=n_resamples, seed=seed, confidence=confidence, strata=False))
    return _adjusted([got[m] for m in rates], confidence)


def coverage_lines(comp) -> list[str]:
    """The coverage of a comparison in words: the paired keys (and the unpaired ones left out), each side's
    outcome mix and the paired error and refusal rates over those keys, and the pairs a side lost (the
    ``lost`` column, :func:`lost_text`)."""
    cov = comp.coverage
    if not cov:
        return []
    gold, trials, keys = cov["golden_items"], cov["trials"], cov["keys"]
    head = f"coverage: {keys['paired']} paired (query, trial) of {_both(gold['a'], gold['b'])} golden items"
    if trials["a"] != 1 or trials["b"] != 1:
        head += f" × {_both(trials['a'], trials['b'])} trials"
    if keys["a"] != keys["paired"] or keys["b"] != keys["paired"]:
        head += (f"; unpaired, so left out of everything below: {keys['a'] - keys['paired']} of A's "
                 f"{keys['a']}, {keys['b'] - keys['paired']} of B's {keys['b']}")
    lines = [head]
    mixes = cov["outcomes"]
    if mixes["a"] or mixes["b"]:
        def mix(m):
            if m is None:
                return "none recorded (no generation stage)"
            return ", ".join(f"{k} {m[k]}" for k in ("answered", "abstained", "refused", "error"))
        lines.append(f"  outcomes A: {mix(mixes['a'])} | B: {mix(mixes['b'])}")
    for r in cov.get("rates", []):
        name = "error rate" if r.metric == "error" else "refusal rate"
        if not r.defined:
            lines.append(f"  {name}: undefined ({r.reason})")
            continue
        lines.append(f"  {name} {_pct_text(r.mean_a)} → {_pct_text(r.mean_b)} (Δ {_signed(r.delta)} "
                     f"[{_signed(r.ci_low)}, {_signed(r.ci_high)}], p(BH) {_p_text(r.p_adj)}): {r.verdict}")
    lost = [r for r in comp.rows if r.stratum == "all" and r.lost and r.missing == "excluded"]
    if lost:
        lines.append("  pairs lost (defined for A, undefined for B, left out): "
                     + "; ".join(f"{r.metric} {r.lost} of {r.n_a_defined}" for r in lost))
    if cov.get("missing_worst"):
        lines.append("  missing-as-worst: " + ", ".join(cov["missing_worst"]))
    synthetic = synthetic_note(cov.get("golden_sources") or {})
    if synthetic:
        lines.append(f"  {synthetic}")
    return lines


def synthetic_note(sources: dict) -> str | None:
    """The line a comparison carries when its golden set is synthetic (``ragassay golden synth``): on a purely
    synthetic set the means are no absolute quality, only the deltas between the runs mean something; on a
    partly synthetic one, the share. None when no run records a synthetic item (or records no sources)."""
    mix = sources.get("b") or sources.get("a") or {}
    n, k = sum(mix.values()), mix.get("synthetic", 0)
    if not k:
        return None
    if k == n:
        return (f"golden set: all {n} items synthetic — read the deltas, not the absolute means (a synthetic "
                "set flatters lexical retrieval; see docs/labels.md)")
    return f"golden set: {k} of {n} items synthetic ({k / n:.0%}); the absolute means lean on them"


def lost_text(missing: str | None, lost: int, gained: int = 0, filled: int = 0) -> str:
    """The ``lost`` cell of a comparison row, in every table that shows one: the pairs the baseline scored
    and the candidate left undefined (``(+n)``: the reverse, gained), or ``k as worst`` when the metric
    scores its one-sided undefined pairs as the worst value."""
    if missing == "worst":
        return f"{filled} as worst"
    return f"{lost}" + (f" (+{gained})" if gained else "")


def number_text(x, signed: bool = False, undefined: str = "undefined") -> str:
    """A mean, delta or interval end in a comparison table: three decimals (signed with ``signed``);
    None or NaN is ``undefined``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return undefined
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def _pct_text(x) -> str:
    return "undefined" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1%}"


def outcome_unit(comp: Comparison) -> str:
    """What the outcome counts count: questions when both runs ran each once, else (query, trial) pairs."""
    trials = comp.coverage.get("trials") or {}
    return "questions" if trials.get("a", 1) == 1 and trials.get("b", 1) == 1 else "(query, trial) pairs"


def coverage_claims(comp: Comparison) -> list[str]:
    """A claim for each credible change in the error or refusal rate: what the paired metrics cannot show,
    since a lost answer leaves them undefined."""
    out = []
    mixes = comp.coverage.get("outcomes") or {}
    for r in comp.coverage.get("rates", []):
        if not r.defined or r.verdict.startswith(("no credible", "equivalent", "undefined")):
            continue
        what = "error" if r.metric == "error" else "refusal"
        key = "error" if r.metric == "error" else "refused"
        a, b = mixes.get("a"), mixes.get("b")
        counts = ""
        if a and b:
            counts = (f" ({a[key]} → {b[key]} of {b['n']} (query, trial) pairs)" if a["n"] == b["n"]
                      else f" ({a[key]} of {a['n']} → {b[key]} of {b['n']} (query, trial) pairs)")
        out.append(f"{what} rate went from {r.mean_a:.1%} to {r.mean_b:.1%}{counts} ({_signed(r.delta)}, "
                   f"{comp.settings.get('confidence', 0.95):.0%} paired-bootstrap CI [{_signed(r.ci_low)}, "
                   f"{_signed(r.ci_high)}], BH-adjusted p {_p_text(r.p_adj)}) — {r.verdict}; metrics a lost "
                   "answer leaves undefined are compared only on the pairs both runs scored.")
    return out


def outcome_mix(cols: dict[str, np.ndarray]) -> dict | None:
    """How (query, trial) keys ended: answered, abstained, refused, error (a missing trace is an error),
    from the 0/1 indicators scoring stores (``error``, ``refused``; an abstention is ``over_refusal`` or
    ``abstention_recall`` = 1), each key in one class, error first. ``n`` counts the keys with an ``error``
    value, so ``error / n`` is the mean the paired error rate takes over the same keys (and likewise for
    refused). None for a run with no generation stage (no ``error`` rows)."""
    if "error" not in cols:
        return None
    recorded = ~np.isnan(cols["error"])
    error = cols["error"][recorded] == 1
    refused = (cols["refused"][recorded] == 1) & ~error if "refused" in cols else np.zeros(len(error), bool)
    abst = np.zeros(len(error), dtype=bool)
    for m in ABSTAIN_METRICS:
        if m in cols:
            abst |= cols[m][recorded] == 1
    abst &= ~error & ~refused
    n = len(error)
    counts = {"answered": int(n - error.sum() - refused.sum() - abst.sum()), "abstained": int(abst.sum()),
              "refused": int(refused.sum()), "error": int(error.sum())}
    return {"n": n, **counts, "error_rate": counts["error"] / n if n else None,
            "refused_rate": counts["refused"] / n if n else None}


def judge_validation(store, runs, metrics, floor=None, *, label_set: str | None = None) -> list[dict]:
    """Validation status of every judge metric among ``metrics``: ``validated`` only when each run that a
    judge scored has a matching validation record (the judge's full pins, the metric's scale; on
    ``label_set`` when given) meeting ``floor`` (judges/validate.py ``Floor``: on the intervals, with minimum
    counts)."""
    from ragassay.judges.validate import Floor, judge_status

    floor = floor or Floor()
    out = []
    for m in metrics:
        found = [s for s in (judge_status(store, rec, m, floor, label_set_version=label_set) for rec in runs)
                 if s is not None]
        if found:
            bad = [why for st, why in found if st == "unvalidated"]
            out.append({"metric": m, "status": "unvalidated" if bad else "validated",
                        "reasons": bad or [why for _, why in found]})
    return out


def _metric_names(store, run_id: str) -> list[str]:
    return store.metrics(run_id)
