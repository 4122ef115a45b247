"""The eval layer's own cost (spec §16, §11.7): what judging a stored run cost, what the same calls would cost
under the other pricing choices, and a monthly projection.

Everything comes from the run's ``judge_calls`` rows (the call records; a call's ``input_tokens`` count every
input token, ``cached_tokens`` the prompt-cache reads among them) and the run's judge summary:

- spend as paid = Σ ``cost`` of the run's rows (a store cache hit paid nothing in this run);
- the four modelled figures price the run's LLM calls with a judge config's prices (the store records no
  prices, so they need ``--judge``): with price P per million tokens and, per call, i input, c cache-read and
  o output tokens, *uncached* = (i·P.input + o·P.output)/1e6 and *cached prefix* = ((i-c)·P.input +
  c·P.cached_input + o·P.output)/1e6, each at the sync prices and at the batch prices (a batch discounts
  cache reads by the same factor, ``Price.batch``). Cache writes are not recorded apart from input, so they
  are priced as plain input. A store cache hit is priced with its paid original's tokens (what a fresh run
  pays); one whose original is gone is unpriced, and a figure with any unpriced call is undefined;
- deterministic-first = (auto-pass + auto-fail) / support judgements of a cascaded run (tier 1 is local, so
  those made no LLM call); a run judged without a cascade did not measure it;
- monthly = cost per judged answer × the tier's items × runs per month (one trial per item per run), where
  the cost per judged answer is the fresh-run cost (cache hits at their paid original) over the judged
  (query, trial) answers; labelling = hours × hourly rate.

Undefined figures are None with the reason, never 0. A run judged by a local judge made no LLM call: its
spend and every modelled figure are 0, and they are reported as such.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragassay.errors import InputError
from ragassay.judges.cost import cost_line, priced_costs
from ragassay.judges.protocol import PAID_OUTCOMES, CallRecord
from ragassay.judges.providers.base import Price

SCENARIOS = ("sync_uncached", "sync_cached", "batch_uncached", "batch_cached")
# Integer columns a store written by an older ragassay may hold as NULL; a missing count is a zero count.
_COUNTS = ("input_tokens", "output_tokens", "cached_tokens", "attempts")


@dataclass(frozen=True)
class Scenario:
    """One modelled figure: USD, or None with the reason it is undefined."""

    usd: float | None
    undefined: str | None = None


@dataclass(frozen=True)
class Tier:
    """A tier of a ``golden status --tiers-out`` file."""

    name: str
    n_items: int
    expected_ms: float | None
    dataset_version: str | None
    path: str


@dataclass(frozen=True)
class RunCost:
    run_id: str
    run_name: str
    judge_model: str | None
    answers: int | None
    calls: int
    llm_calls: int
    local_calls: int
    paid_calls: int
    cache_hits: int
    errors: int
    batch_calls: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    spend: float | None
    fresh_cost: float | None
    scenarios: dict[str, Scenario]
    prices_from: str | None
    deterministic_first: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    dataset_version: str | None = None

    @property
    def cache_hit_share(self) -> float:
        """Store cache hits / calls; NaN with no call."""
        return self.cache_hits / self.calls if self.calls else math.nan

    @property
    def cached_input_share(self) -> float:
        """Prompt-cache reads / input tokens; NaN with no input token."""
        return self.cached_tokens / self.input_tokens if self.input_tokens else math.nan

    @property
    def per_answer(self) -> float | None:
        """Fresh-run cost per judged (query, trial) answer; None when either is unknown."""
        if self.fresh_cost is None or not self.answers:
            return None
        return self.fresh_cost / self.answers


@dataclass(frozen=True)
class Projection:
    """The monthly projection: per run, its cost per judged answer × items × runs."""

    tier: Tier
    runs_per_month: int

    def monthly(self, run: RunCost) -> dict[str, Any]:
        n = self.tier.n_items * self.runs_per_month
        per = run.per_answer
        if per is None:
            why = ("the run was not judged" if run.judge_model is None and not run.calls
                   else "the cost per judged answer is undefined (no judged answers, or a cache hit whose paid "
                        "original is gone)")
            as_run = Scenario(None, why)
        else:
            as_run = Scenario(per * n)
        modelled = {}
        for name, s in run.scenarios.items():
            if s.usd is None or not run.answers:
                modelled[name] = Scenario(None, s.undefined or "no judged answers")
            else:
                modelled[name] = Scenario(s.usd / run.answers * n)
        return {"as_run": as_run, **modelled}


def _record(row: Mapping[str, Any]) -> CallRecord:
    data = {**row, **{k: row.get(k) or 0 for k in _COUNTS}, "cost": row.get("cost") or 0.0}
    return CallRecord(**data)


def _is_llm(r: CallRecord) -> bool:
    return r.provider != "local"


def _scenario_costs(tokens: Sequence[tuple[str, int, int, int]], unpriced_hits: int,
                    prices: Mapping[str, Price] | None, prices_from: str | None) -> dict[str, Scenario]:
    """The four modelled figures of LLM calls given as (model, input, cached, output) tokens."""
    if unpriced_hits:
        why = f"{unpriced_hits} cache hit(s) whose paid original is no longer in the store have no tokens to price"
        return {s: Scenario(None, why) for s in SCENARIOS}
    if not tokens:
        return {s: Scenario(0.0) for s in SCENARIOS}
    if prices is None:
        why = "the store records no prices with the calls: pass --judge JUDGE.yaml with the model's prices"
        return {s: Scenario(None, why) for s in SCENARIOS}
    missing = sorted({m for m, *_ in tokens if m not in prices})
    if missing:
        why = f"{prices_from} has no prices for model(s) {missing}"
        return {s: Scenario(None, why) for s in SCENARIOS}
    no_batch = sorted({m for m, *_ in tokens if not prices[m].has_batch})
    out = {}
    for mode in ("sync", "batch"):
        if mode == "batch" and no_batch:
            why = f"{prices_from} has no batch_input/batch_output for model(s) {no_batch}"
            out["batch_uncached"] = out["batch_cached"] = Scenario(None, why)
            continue
        table = {m: (prices[m].batch() if mode == "batch" else prices[m]) for m in {m for m, *_ in tokens}}
        out[f"{mode}_uncached"] = Scenario(sum(table[m].cost(i, o) for m, i, c, o in tokens))
        out[f"{mode}_cached"] = Scenario(sum(table[m].cost(i - c, o, c) for m, i, c, o in tokens))
    return {s: out[s] for s in SCENARIOS}


def _deterministic_first(summary: Mapping[str, Any] | None) -> dict[str, Any]:
    cascade = (summary or {}).get("cascade")
    if not cascade:
        return {"share": None, "undefined": "not measured: the run was not judged with a cascade"}
    routes = cascade.get("routes") or {}
    decided = int(routes.get("auto_pass", 0)) + int(routes.get("auto_fail", 0))
    total = decided + int(routes.get("escalated", 0))
    out = {"tier1": cascade.get("tier1"), "tier2": cascade.get("tier2"), "decided": decided, "judgements": total,
           "basis": "support judgements the local tier 1 decided (auto-pass + auto-fail) / all it routed"}
    if not total:
        return {**out, "share": None, "undefined": "the cascade routed no support judgement"}
    return {**out, "share": decided / total}


def run_cost(store, run_ref: str, prices: Mapping[str, Price] | None = None, prices_from: str | None = None
             ) -> RunCost:
    """The :class:`RunCost` of stored run ``run_ref`` (``prices``: a judge config's price table, read from
    ``prices_from``, for the modelled figures)."""
    rec = store.get_run(run_ref)
    extra = rec.extra or {}
    pins, summary = extra.get("judge"), extra.get("judge_summary")
    records = [_record(r) for r in store.judge_calls(rec.run_id)]
    answers = (summary or {}).get("items")
    if answers is None and records:
        answers = len({(r.query_id, r.trial) for r in records})
    notes = []
    judge_model = (pins or {}).get("judge_model") or rec.judge_model
    if judge_model is None and not records:
        notes.append("the run was not judged: no judge pins and no judge calls in the store")
        undefined = {s: Scenario(None, "the run was not judged") for s in SCENARIOS}
        return RunCost(rec.run_id, rec.name, None, None, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, None, None, undefined,
                       prices_from, _deterministic_first(None), notes, rec.dataset_version)
    line = cost_line(records, answers or 0, store)
    llm = [r for r in records if _is_llm(r) and r.outcome in PAID_OUTCOMES]
    hit_shas = sorted({r.request_sha for r in llm if r.cache_hit})
    originals = {}
    if hit_shas:
        originals = {row["request_sha"]: _record(row) for row in store.cached_judge_calls(hit_shas)
                     if not row["cache_hit"]}
    tokens, unpriced = [], 0
    for r in llm:
        src = originals.get(r.request_sha) if r.cache_hit else r
        if src is None:
            unpriced += 1
        else:
            tokens.append((src.model, src.input_tokens, src.cached_tokens, src.output_tokens))
    fresh = None if unpriced else float(sum(priced_costs(records, store)))
    if not llm and str(judge_model or "").startswith("local:"):
        notes.append(f"judged by the local judge {judge_model}: no LLM call was made, so the spend and every "
                     "modelled figure are $0")
    return RunCost(
        run_id=rec.run_id, run_name=rec.name, judge_model=judge_model, answers=answers, calls=line.calls,
        llm_calls=sum(1 for r in records if _is_llm(r)), local_calls=sum(1 for r in records if not _is_llm(r)),
        paid_calls=line.paid_calls, cache_hits=line.cache_hits, errors=line.errors, batch_calls=line.batch_calls,
        input_tokens=line.input_tokens, output_tokens=line.output_tokens, cached_tokens=line.cached_tokens,
        spend=line.spend, fresh_cost=fresh, scenarios=_scenario_costs(tokens, unpriced, prices, prices_from),
        prices_from=prices_from, deterministic_first=_deterministic_first(summary), notes=notes,
        dataset_version=rec.dataset_version,
    )


def load_tier(path: str | Path, name: str) -> Tier:
    """Tier ``name`` of a ``golden status --tiers-out`` file; a malformed file or an unknown tier is an
    ``InputError`` saying what to do."""
    from ragassay.yamlio import load_yaml

    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such tier file; write one with `ragassay golden status --tiers-out {p}`")
    data = load_yaml(p, "tier file")
    tiers = data.get("tiers") if isinstance(data, dict) else None
    if not isinstance(tiers, dict):
        raise InputError(f"{p}: not a tier file (no 'tiers' mapping); write one with `ragassay golden status "
                         "--tiers-out`")
    if name not in tiers:
        raise InputError(f"{p}: no tier {name!r}; pick one of {sorted(tiers)} with --tier")
    tier = tiers[name]
    n = tier.get("n") if isinstance(tier, dict) else None
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InputError(f"{p}: tier {name}: 'n' must be the tier's item count (an integer >= 0), got {n!r}")
    ids = tier.get("query_ids")
    if isinstance(ids, list) and len(ids) != n:
        raise InputError(f"{p}: tier {name}: n = {n} but {len(ids)} query ids are listed; rewrite the file with "
                         "`ragassay golden status --tiers-out`")
    ms = tier.get("expected_ms")
    return Tier(name, n, float(ms) if isinstance(ms, int | float) and not isinstance(ms, bool) else None,
                data.get("dataset_version"), str(p))


def labelling_cost(hours: float | None, rate: float | None) -> Scenario:
    """Labelling USD per month = hours × hourly rate; None when either is not given."""
    if hours is None or rate is None:
        return Scenario(None, "not given (--labelling-hours H --hourly-rate R)")
    for flag, v in (("--labelling-hours", hours), ("--hourly-rate", rate)):
        if not math.isfinite(v) or v < 0:
            raise InputError(f"{flag} {v}: give a number >= 0")
    return Scenario(hours * rate)


def _scenario(s: Scenario) -> dict[str, Any]:
    return {"usd": s.usd, "undefined": s.undefined}


def cost_report(runs: Sequence[RunCost], projection: Projection | None, labelling: Scenario) -> dict[str, Any]:
    """The machine form of ``ragassay cost``: per run its figures (each with the basis it is computed from),
    the projection and labelling; a run's monthly total = projected as-run cost + labelling, None when
    either is undefined."""
    out_runs = []
    for r in runs:
        monthly = None if projection is None else projection.monthly(r)
        notes = list(r.notes)
        if projection is not None and projection.tier.dataset_version not in (None, r.dataset_version):
            notes.append(f"the tier file is of golden version {projection.tier.dataset_version}, the run of "
                         f"{r.dataset_version}: the projection prices that set's items at this run's cost per answer")
        total = None
        if monthly is not None and monthly["as_run"].usd is not None and labelling.usd is not None:
            total = monthly["as_run"].usd + labelling.usd
        out_runs.append({
            "run_id": r.run_id, "run_name": r.run_name, "judge_model": r.judge_model, "judged_answers": r.answers,
            "calls": {"total": r.calls, "llm": r.llm_calls, "local": r.local_calls, "paid": r.paid_calls,
                      "cache_hits": r.cache_hits, "errors": r.errors, "billed_via_batch": r.batch_calls},
            "tokens": {"input": r.input_tokens, "output": r.output_tokens, "cache_reads": r.cached_tokens},
            "cache_hit_share": r.cache_hit_share, "cached_input_share": r.cached_input_share,
            "spend": r.spend, "spend_basis": "sum of the run's judge_calls.cost, as paid",
            "fresh_cost": r.fresh_cost, "per_judged_answer": r.per_answer,
            "fresh_cost_basis": "the run's calls with cache hits priced at their paid original (a fresh run)",
            "modelled": {k: _scenario(v) for k, v in r.scenarios.items()},
            "modelled_basis": (f"the run's LLM call tokens at the prices in {r.prices_from}" if r.prices_from
                               else "the run's LLM call tokens at a judge config's prices (--judge)"),
            "deterministic_first": r.deterministic_first,
            "monthly": None if monthly is None else {k: _scenario(v) for k, v in monthly.items()},
            "monthly_total": total, "notes": notes,
        })
    proj = None
    if projection is not None:
        t = projection.tier
        proj = {"tier": t.name, "items": t.n_items, "expected_ms_per_trial": t.expected_ms,
                "tier_dataset_version": t.dataset_version, "tiers_file": t.path,
                "runs_per_month": projection.runs_per_month,
                "basis": "cost per judged answer x the tier's items x runs per month (one trial per item)"}
    return {"runs": out_runs, "projection": proj,
            "labelling": {**_scenario(labelling), "basis": "hours x hourly rate, per month"}}


__all__ = ["SCENARIOS", "Projection", "RunCost", "Scenario", "Tier", "cost_report", "labelling_cost", "load_tier",
           "run_cost"]
