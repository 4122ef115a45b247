"""Paired comparison of two stored runs: per metric x stratum deltas with bootstrap CIs, W/L/T, MDE,
Benjamini-Hochberg across the table, a verdict against a minimum meaningful effect, the config diff and
claim sentences (spec §1.2, §13).

Pairing is on (query_id, trial). With several trials per query the bootstrap resamples whole queries
(clustered), since trials of one query are not independent evidence.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

import numpy as np

from ragassay.analysis.directions import higher_is_better
from ragassay.errors import InputError, PinMismatchError
from ragassay.stats import adjust_pvalues, bootstrap_deltas, mde_paired

PINS = ("dataset_version", "corpus_digest", "metric_version")
DEFAULT_MIN_EFFECT = 0.02
HEADLINE_METRICS = ("recall@fusion_depth", "recall@final_k", "ndcg@final_k", "recall@context", "answer_f1",
                    "abstention_recall", "over_refusal")


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

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}


@dataclass
class Comparison:
    run_a: object
    run_b: object
    rows: list[CompareRow]
    config_diff: list[tuple[str, object, object]]
    claims: list[str]
    pin_differences: list[tuple[str, object, object]] = field(default_factory=list)
    settings: dict = field(default_factory=dict)

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
            "config_diff": [{"key": k, "a": a, "b": b} for k, a, b in self.config_diff],
            "claims": self.claims,
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


def pin_differences(a, b) -> list[tuple[str, object, object]]:
    return [(p, getattr(a, p), getattr(b, p)) for p in PINS if getattr(a, p) != getattr(b, p)]


def _verdict(delta: float, lo: float, hi: float, min_effect: float, higher: bool, defined: bool) -> str:
    if not defined:
        return "undefined"
    d, lo_, hi_ = (delta, lo, hi) if higher else (-delta, -hi, -lo)
    if lo_ > 0:
        return "improved" if d >= min_effect else "improved, below minimum effect"
    if hi_ < 0:
        return "regressed" if -d >= min_effect else "regressed, below minimum effect"
    if -min_effect < lo_ and hi_ < min_effect:
        return f"equivalent within ±{min_effect:g}"
    return "no credible change"


def compare_wide(a_ids, a_strata, a_values, b_ids, b_values, metrics, *, min_effect=DEFAULT_MIN_EFFECT,
                 n_resamples=10_000, seed=0, confidence=0.95, strata=True) -> list[CompareRow]:
    """Compare two runs given as wide matrices (rows keyed by (query_id, trial), one column per metric)."""
    index_b = {k: i for i, k in enumerate(b_ids)}
    common = [i for i, k in enumerate(a_ids) if k in index_b]
    if not common:
        raise InputError("the two runs share no (query_id, trial) pairs; compare runs of the same golden set")
    ia = np.asarray(common)
    ib = np.asarray([index_b[a_ids[i]] for i in common])
    A, B = a_values[ia], b_values[ib]
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
            eff = min_effect.get(m, DEFAULT_MIN_EFFECT) if isinstance(min_effect, dict) else float(min_effect)
            higher = higher_is_better(m)
            both = ok
            rows.append(CompareRow(
                metric=m, stratum=stratum, n=md.n, n_excluded=md.n_excluded,
                mean_a=float(np.mean(a[both, j])) if both.any() else float("nan"),
                mean_b=float(np.mean(b[both, j])) if both.any() else float("nan"),
                delta=md.delta, ci_low=md.ci_low, ci_high=md.ci_high, p=md.p_value, p_adj=float("nan"),
                wins=md.wins if higher else md.losses, losses=md.losses if higher else md.wins, ties=md.ties,
                sigma_d=sd, mde=mde, min_effect=eff, higher_is_better=higher,
                verdict=_verdict(md.delta, md.ci_low, md.ci_high, eff, higher, md.defined),
                defined=md.defined, reason=md.reason,
            ))
    adj = adjust_pvalues(np.asarray([r.p for r in rows], dtype=float), "bh")
    return [CompareRow(**{**asdict(r), "p_adj": float(p)}) for r, p in zip(rows, adj, strict=True)]


def _fmt(x: float) -> str:
    return f"{x:.2f}" if abs(x) >= 0.005 or x == 0 else f"{x:.3f}"


def _signed(x: float) -> str:
    return ("+" if x >= 0 else "−") + _fmt(abs(x))


def _value_text(v: object) -> str:
    if isinstance(v, int | float) and not isinstance(v, bool) and abs(v) >= 1000:
        return f"{v:,}"
    return "unset" if v is None else str(v)


def claim_sentence(row: CompareRow, run_a, run_b, diff: list[tuple[str, object, object]],
                   confidence: float = 0.95) -> str:
    """A one-sentence claim in the spirit of spec §1.2: dataset and n, hit rule, what changed, the interval."""
    cfg = flatten_config(run_b.config)
    budget = cfg.get("packer.budget_tokens")
    # the budget qualifies a claim only when both runs packed under it (oracle context is not budgeted)
    at_budget = f" at a {budget:,}-token budget" if isinstance(budget, int) and not cfg.get("oracle") and not any(
        k in ("packer.budget_tokens", "oracle") for k, _, _ in diff) else ""
    if diff:
        shown = "; ".join(f"{k} {_value_text(a)} → {_value_text(b)}" for k, a, b in diff[:4])
        more = f" and {len(diff) - 4} more" if len(diff) > 4 else ""
        changed = f"changed: {shown}{more}; all else pinned"
    else:
        changed = "configs identical (a repeat run)"
    scope = "" if row.stratum == "all" else f" on the {row.stratum} stratum"
    return (f"{row.metric}{at_budget}{scope} went from {_fmt(row.mean_a)} to {_fmt(row.mean_b)} "
            f"({_signed(row.delta)}, {confidence:.0%} paired-bootstrap CI [{_signed(row.ci_low)}, "
            f"{_signed(row.ci_high)}], n = {row.n}, {row.wins} wins / {row.losses} losses / {row.ties} ties, "
            f"{run_b.hit_rule} hit rule, dataset {run_b.dataset_version}; {changed}) — {row.verdict}.")


def compare_runs(store, run_a: str, run_b: str, *, metrics=None, min_effect=DEFAULT_MIN_EFFECT,
                 n_resamples: int = 10_000, seed: int = 0, confidence: float = 0.95, rebaseline: bool = False,
                 strata: bool = True) -> Comparison:
    """Compare stored runs A (baseline) and B (candidate); refuses differing pins unless ``rebaseline``."""
    ra, rb = store.get_run(run_a), store.get_run(run_b)
    pins = pin_differences(ra, rb)
    if pins and not rebaseline:
        lines = [f"  {p}: {a} (A) vs {b} (B)" for p, a, b in pins]
        raise PinMismatchError("runs are not comparable; differing pins:\n" + "\n".join(lines)
                               + "\nre-run both on the same golden set and metric version, or pass --rebaseline")
    ma = _metric_names(store, ra.run_id)
    mb = _metric_names(store, rb.run_id)
    wanted = [m for m in ma if m in set(mb)] if metrics is None else list(metrics)
    if not wanted:
        raise InputError(f"runs {ra.name} and {rb.name} have no metric in common")
    missing = [m for m in wanted if m not in set(ma) or m not in set(mb)]
    if missing:
        raise InputError(f"metric(s) {missing} missing from one of the runs; have {sorted(set(ma) & set(mb))}")
    qa, ta, sa, va = store.results_wide(ra.run_id, wanted)
    qb, tb, _, vb = store.results_wide(rb.run_id, wanted)
    a_ids = list(zip(qa, ta, strict=True))
    b_ids = list(zip(qb, tb, strict=True))
    rows = compare_wide(a_ids, sa, va, b_ids, vb, wanted, min_effect=min_effect, n_resamples=n_resamples,
                        seed=seed, confidence=confidence, strata=strata)
    diff = config_diff(ra.config, rb.config)
    headline = [r for r in rows if r.stratum == "all" and r.metric in HEADLINE_METRICS and r.defined]
    claims = [claim_sentence(r, ra, rb, diff, confidence) for r in headline]
    settings = {"n_resamples": n_resamples, "seed": seed, "confidence": confidence, "multiplicity": "bh",
                "min_effect": min_effect, "pairing": "(query_id, trial)"}
    return Comparison(ra, rb, rows, diff, claims, pins, settings)


def _metric_names(store, run_id: str) -> list[str]:
    return store.metrics(run_id)
