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

**Projected** figures (:func:`project_judging`, ``ragassay cost RUN --judge J --project``) answer a different
question: what would judging this run's answers with the LLM judge of config J cost? They come from no call
record. The run's traces are read, and the judge's own request builders (``judges.metrics.first_stage`` and
``support_requests``) render every request the judge would send, with the answer's sentences
(``judges.local.split_claims``) standing in for the claims the LLM's claims call would return. Each request's
tokens are counted with ragassay's local counter (``regex-wordpunct-v1``, not the provider's tokenizer: an
estimate), as its system prompt (the rubric, identical across the calls of one kind: the cacheable prefix)
plus its user message (the item). Every call is assumed to write ``output_tokens`` tokens. With n calls,
input I, output O = n·o and, for the kinds whose prefix p_k reaches ``min_cached_prefix``, R = Σ p over
their calls less one p_k per kind (cache reads) and W = Σ_k p_k (one cache write per kind):

- *uncached* = (I·P.input + O·P.output)/1e6;
- *cached prefix* = ((I-R-W)·P.input + R·P.cached_input + W·P.cache_write + O·P.output)/1e6;

each at the sync prices and at ``Price.batch()``. Deterministic-first runs the config's cascade tier 1 over
every support judgement (claim against the answer's packed context) and routes it with the band exactly as a
judged run does (``judges.routing.route``); the auto-pass and auto-fail claims' support calls are removed and
the four figures priced again. Projected figures are labelled so and never summed with spend as paid.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragassay.errors import InputError
from ragassay.judges.cost import cost_line, priced_costs
from ragassay.judges.protocol import PAID_OUTCOMES, CallRecord
from ragassay.judges.providers.base import Price, price_table
from ragassay.metrics.tokens import TOKEN_COUNTER_NAME, count_tokens

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


# --------------------------------------------------------------------------------------- projected judging
# Output tokens per call when --output-tokens is not given: the spec's own per-claim assumption (§11.7's
# worked example, 150 out), since no call was made to measure one.
DEFAULT_OUTPUT_TOKENS = 150
# The smallest prefix a provider caches: OpenAI caches prompts from 1,024 tokens, Anthropic from 512 to 4,096
# by model (1,024 for Sonnet 5, spec §11.5). A shorter rubric is not cached at all.
DEFAULT_MIN_CACHED_PREFIX = 1024
DECIDED_ROUTES = ("auto_pass", "auto_fail")
PROJECTED = "projected"


@dataclass(frozen=True)
class PlannedCall:
    """One request the judge would send: its tokens as the cacheable prefix (the system prompt, the rubric of
    its kind) and the per-item rest (the user message), and, for a support call under a cascade, tier 1's
    route (``auto_pass``, ``auto_fail`` or ``escalated``)."""

    query_id: str
    trial: int
    item: str
    kind: str
    prefix_tokens: int
    rest_tokens: int
    route: str | None = None

    @property
    def input_tokens(self) -> int:
        return self.prefix_tokens + self.rest_tokens

    @property
    def decided(self) -> bool:
        return self.route in DECIDED_ROUTES


def plan_calls(run_id: str, items: Sequence, cfg, tier1=None) -> list[PlannedCall]:
    """The requests an LLM judge with config ``cfg`` would send for ``items`` (``judges.metrics.JudgeItem``),
    rendered by the judge's own builders; the claims are the answers' sentences. With ``tier1`` (the config's
    cascade tier 1) every support call carries its route under the config's band."""
    from ragassay.judges.config import CASCADE_METRICS
    from ragassay.judges.local import split_claims
    from ragassay.judges.metrics import first_stage, support_requests
    from ragassay.judges.routing import p_bad, route

    criteria = cfg.rubric_criteria()
    prefix: dict[str, int] = {}

    def planned(req, r: str | None = None) -> PlannedCall:
        if req.judge not in prefix:
            prefix[req.judge] = count_tokens(req.system)
        return PlannedCall(req.key.query_id, req.key.trial, req.key.item, req.judge, prefix[req.judge],
                           count_tokens(req.user), r)

    calls = [planned(r) for r in first_stage(run_id, items, metrics=cfg.metrics, criteria=criteria)]
    if not set(CASCADE_METRICS) & set(cfg.metrics):
        return calls
    band = cfg.cascade.band if cfg.cascade is not None else None
    for it in items:
        claims = split_claims(it.answer) if it.answered else []
        if not claims:
            continue
        requests = support_requests(run_id, it, claims, metrics=cfg.metrics, criteria=criteria)
        if tier1 is None or band is None:
            calls += [planned(r) for r in requests]
            continue
        verdicts = tier1.judge_many(claims, it.context)
        calls += [planned(r, route(p_bad(v.score), v, band.lo, band.hi))
                  for r, v in zip(requests, verdicts, strict=True)]
    return calls


def price_calls(calls: Sequence[PlannedCall], price: Price, output_tokens: int, min_cached_prefix: int,
                batch_reason: str | None = None) -> dict[str, Scenario]:
    """The four figures of ``calls`` at ``price`` (module docstring); the batch pair is undefined with
    ``batch_reason`` when the price has no batch prices."""
    inp = sum(c.input_tokens for c in calls)
    out = len(calls) * output_tokens
    cacheable = [c for c in calls if c.prefix_tokens >= max(min_cached_prefix, 1)]
    writes = sum({c.kind: c.prefix_tokens for c in cacheable}.values())
    reads = sum(c.prefix_tokens for c in cacheable) - writes
    figures = {}
    for mode in ("sync", "batch"):
        if mode == "batch" and not price.has_batch:
            figures["batch_uncached"] = figures["batch_cached"] = Scenario(None, batch_reason)
            continue
        p = price.batch() if mode == "batch" else price
        figures[f"{mode}_uncached"] = Scenario(p.cost(inp, out))
        figures[f"{mode}_cached"] = Scenario(p.cost(inp - reads - writes, out, reads, writes))
    return {s: figures[s] for s in SCENARIOS}


def kinds_of(calls: Sequence[PlannedCall], min_cached_prefix: int) -> dict[str, dict[str, Any]]:
    """Per request kind: calls, its prefix tokens, its input tokens and whether its prefix is cached."""
    out: dict[str, dict[str, Any]] = {}
    for c in calls:
        k = out.setdefault(c.kind, {"calls": 0, "prefix_tokens": c.prefix_tokens, "input_tokens": 0,
                                    "prefix_cached": c.prefix_tokens >= max(min_cached_prefix, 1)})
        k["calls"] += 1
        k["input_tokens"] += c.input_tokens
    return out


def _ratio(num: Scenario, den: Scenario) -> dict[str, Any]:
    if num.usd is None or den.usd is None:
        return {"value": None, "undefined": num.undefined or den.undefined}
    if not den.usd > 0:
        return {"value": None, "undefined": "the denominator is $0 (no call to price)"}
    return {"value": num.usd / den.usd, "undefined": None}


@dataclass(frozen=True)
class JudgingProjection:
    """What judging one stored run's answers with an LLM judge config would cost (module docstring)."""

    run_id: str
    run_name: str
    judge_model: str
    judge_config: str
    answers: int
    answered: int
    calls: tuple[PlannedCall, ...]
    output_tokens: int
    output_basis: str
    min_cached_prefix: int
    figures: dict[str, Scenario]
    deterministic_first: dict[str, Any]
    figures_deterministic_first: dict[str, Scenario]
    trace_problems: int = 0
    notes: tuple[str, ...] = ()

    @property
    def kinds(self) -> dict[str, dict[str, Any]]:
        return kinds_of(self.calls, self.min_cached_prefix)

    @property
    def ratios(self) -> dict[str, dict[str, Any]]:
        """sync uncached over batch with the cached prefix, without and with deterministic-first."""
        top = self.figures["sync_uncached"]
        return {"sync_uncached_over_batch_cached": _ratio(top, self.figures["batch_cached"]),
                "sync_uncached_over_batch_cached_deterministic_first":
                    _ratio(top, self.figures_deterministic_first["batch_cached"])}

    def monthly(self, projection: Projection) -> dict[str, dict[str, Scenario]]:
        """Each figure per answer × the tier's items × runs per month."""
        n = projection.tier.n_items * projection.runs_per_month
        out = {}
        for name, figs in (("all_calls", self.figures), ("deterministic_first", self.figures_deterministic_first)):
            out[name] = {s: (Scenario(None, v.undefined or "the run has no answers") if v.usd is None
                             or not self.answers else Scenario(v.usd / self.answers * n)) for s, v in figs.items()}
        return out

    def to_dict(self, projection: Projection | None = None) -> dict[str, Any]:
        inp = sum(c.input_tokens for c in self.calls)
        prefix = sum(c.prefix_tokens for c in self.calls)
        by_kind = self.kinds
        saving = {}
        for s in SCENARIOS:
            a, b = self.figures[s].usd, self.figures_deterministic_first[s].usd
            saving[s] = None if a is None or b is None else a - b
        return {
            "label": PROJECTED, "judge_model": self.judge_model, "judge_config": self.judge_config,
            "basis": "the requests the judge config would send for the run's traced answers (the answer's "
                     "sentences as its claims), tokens by the local counter, priced at the config's prices; "
                     "no call was made",
            "answers": self.answers, "answered": self.answered,
            "calls": {"total": len(self.calls), "by_kind": {k: v["calls"] for k, v in by_kind.items()}},
            "tokens": {"counter": TOKEN_COUNTER_NAME, "estimate": TOKEN_NOTE, "input": inp, "cacheable_prefix": prefix,
                       "per_item": inp - prefix, "output": len(self.calls) * self.output_tokens,
                       "output_per_call": self.output_tokens, "output_basis": self.output_basis},
            "kinds": by_kind, "min_cached_prefix": self.min_cached_prefix,
            "figures": {k: _scenario(v) for k, v in self.figures.items()},
            "deterministic_first": self.deterministic_first,
            "figures_deterministic_first": {k: _scenario(v) for k, v in self.figures_deterministic_first.items()},
            "saving_deterministic_first": saving,
            "ratios": self.ratios,
            "monthly": None if projection is None else {
                k: {s: _scenario(v) for s, v in figs.items()} for k, figs in self.monthly(projection).items()},
            "trace_problems": self.trace_problems, "notes": list(self.notes),
        }


TOKEN_NOTE = (f"token counts are ragassay's local counter ({TOKEN_COUNTER_NAME}), not the provider's tokenizer: "
              "an estimate")


def project_items(run_id: str, run_name: str, items: Sequence, cfg, judge_config: str, *,
                  output_tokens: int | None = None, min_cached_prefix: int = DEFAULT_MIN_CACHED_PREFIX,
                  trace_problems: int = 0) -> JudgingProjection:
    """The :class:`JudgingProjection` of judge items (``judges.metrics.JudgeItem``) with config ``cfg`` (an LLM
    judge) read from ``judge_config``; ``output_tokens`` per call defaults to :data:`DEFAULT_OUTPUT_TOKENS`."""
    from ragassay.judges.config import build_tier1

    if cfg.provider == "local":
        raise InputError(f"{judge_config}: a local judge makes no call, so there is nothing to project; pass an "
                         "LLM judge config (provider anthropic or openai, with prices)")
    if output_tokens is not None and (isinstance(output_tokens, bool) or output_tokens < 1):
        raise InputError(f"--output-tokens {output_tokens}: give a whole number >= 1")
    if min_cached_prefix < 0:
        raise InputError(f"--min-cached-prefix {min_cached_prefix}: give a whole number >= 0")
    if output_tokens is None:
        output_tokens = min(DEFAULT_OUTPUT_TOKENS, cfg.max_tokens)
        basis = (f"assumed: the default {DEFAULT_OUTPUT_TOKENS} per call (docs/cost.md)" if output_tokens
                 == DEFAULT_OUTPUT_TOKENS else f"assumed: the config's max_tokens {cfg.max_tokens}, below the "
                 f"default {DEFAULT_OUTPUT_TOKENS}")
    else:
        basis = f"assumed: --output-tokens {output_tokens} (the config's max_tokens {cfg.max_tokens} is the ceiling)"
    if output_tokens > cfg.max_tokens:
        raise InputError(f"--output-tokens {output_tokens} is above the config's max_tokens ({cfg.max_tokens}): a "
                         "call cannot write more; give at most that")
    price = price_table(cfg.prices, where=f"{judge_config}: prices")[cfg.model]
    tier1 = build_tier1(cfg)
    calls = tuple(plan_calls(run_id, items, cfg, tier1))
    no_batch = f"{judge_config} has no batch_input/batch_output for model {cfg.model}"
    figures = price_calls(calls, price, output_tokens, min_cached_prefix, no_batch)
    support = [c for c in calls if c.kind == "support"]
    if tier1 is None:
        why = (f"not measured: {judge_config} names no cascade (add cascade: {{tier1: {{model: lexical}}, band: "
               "{lo: ..., hi: ...}} to route the support judgements through a local tier 1)")
        df = {"share": None, "undefined": why}
        figures_df = {s: Scenario(None, why) for s in SCENARIOS}
    else:
        routes = Counter(c.route for c in support)
        decided = sum(routes[r] for r in DECIDED_ROUTES)
        df = {"tier1": f"local:{cfg.cascade.tier1.model}", "threshold": cfg.cascade.tier1.resolved_threshold(),
              "band": {"lo": cfg.cascade.band.lo, "hi": cfg.cascade.band.hi},
              "routes": {r: routes[r] for r in ("auto_pass", "auto_fail", "escalated")},
              "decided": decided, "judgements": len(support), "calls_removed": decided,
              "share": decided / len(support) if support else None,
              "undefined": None if support else "no support judgement to route (no answered claim)",
              "basis": "support judgements tier 1 decides (auto-pass + auto-fail) / all support judgements; "
                       "their calls are removed from the figures with deterministic-first (a cascade routes "
                       "support judgements only: the claims, relevance, criterion and nuggets calls stay)"}
        figures_df = price_calls([c for c in calls if not c.decided], price, output_tokens, min_cached_prefix,
                                 no_batch)
    notes = [TOKEN_NOTE + "; the verdict's JSON schema the client also sends is not counted",
             "claims: the answer's sentences stand in for the LLM's claims decomposition (one support call each)"]
    short = {k: v["prefix_tokens"] for k, v in kinds_of(calls, min_cached_prefix).items() if not v["prefix_cached"]}
    if short:
        notes.append(f"rubric prefixes below --min-cached-prefix {min_cached_prefix} tokens are not cached, so "
                     "the cached-prefix figures price them as plain input: "
                     + ", ".join(f"{k} {n}" for k, n in sorted(short.items())))
    if price.cached_input is None:
        notes.append(f"{judge_config} gives no cached_input price for {cfg.model}: cache reads are priced as input")
    if trace_problems:
        notes.append(f"{trace_problems} malformed trace record(s) were skipped: their answers are not projected")
    return JudgingProjection(run_id, run_name, cfg.pins()["judge_model"], judge_config, len(items),
                             sum(1 for it in items if it.answered), calls, output_tokens, basis, min_cached_prefix,
                             figures, df, figures_df, trace_problems, tuple(notes))


def project_judging(store, run_ref: str, cfg, judge_config: str, golden, corpus, *,
                    output_tokens: int | None = None, min_cached_prefix: int = DEFAULT_MIN_CACHED_PREFIX
                    ) -> JudgingProjection:
    """:func:`project_items` of stored run ``run_ref``'s answers, read from the traces the run recorded (and
    checked to be its own, as ``ragassay judge`` checks them); ``golden`` and ``corpus`` are the run's."""
    from ragassay.analysis.pool import NO_TRACES, traces_path
    from ragassay.judges.metrics import items_from
    from ragassay.judges.score import check_traces_of
    from ragassay.trace.io import read_traces

    rec = store.get_run(run_ref)
    path = traces_path(rec)
    if path is None:
        raise InputError(f"run {rec.name} ({rec.run_id}) {NO_TRACES}: a projection renders the judge's prompts "
                         "from the run's answers")
    if not path.is_file():
        raise InputError(f"run {rec.name} ({rec.run_id}): its traces {path} are not there; restore them, or score "
                         "the trace file again with `ragassay score TRACES --golden G`")
    if rec.dataset_version != golden.dataset_version:
        raise InputError(f"run {rec.name} was scored on golden version {rec.dataset_version}, but the golden set "
                         f"given is {golden.dataset_version}; pass the run's golden set with --golden")
    header, traces, problems = read_traces(path)
    unknown = sorted({t.query_id for t in traces} - set(golden.query_ids))
    if unknown:
        raise InputError(f"{path}: {len(unknown)} trace(s) name queries not in the golden set (first: "
                         f"{unknown[:3]}); pass the run's golden set with --golden")
    check_traces_of(store, rec, traces, header, f"the traces {path}", golden=golden)

    def unit_text(u) -> str:
        if u.text is not None:
            return u.text
        if u.doc_id not in corpus:
            raise InputError(f"{path}: packed unit {u.unit_id} names doc {u.doc_id!r}, which is not in the "
                             "corpus; pass the run's corpus with --corpus")
        return corpus[u.doc_id].text[u.start:u.end]

    return project_items(rec.run_id, rec.name, items_from(traces, golden, unit_text), cfg, judge_config,
                         output_tokens=output_tokens, min_cached_prefix=min_cached_prefix,
                         trace_problems=len(problems))


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


def cost_report(runs: Sequence[RunCost], projection: Projection | None, labelling: Scenario,
                projected: Sequence[JudgingProjection] | None = None) -> dict[str, Any]:
    """The machine form of ``ragassay cost``: per run its figures (each with the basis it is computed from),
    the projection and labelling; a run's monthly total = projected as-run cost + labelling, None when
    either is undefined. ``projected`` (one per run, in order): what judging the run with an LLM judge
    config would cost, under the run's ``projected`` key and nowhere else."""
    if projected is not None and len(projected) != len(runs):
        raise ValueError("one judging projection per run")
    out_runs = []
    for k, r in enumerate(runs):
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
            "projected": None if projected is None else projected[k].to_dict(projection),
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


# ------------------------------------------------------------------------------ `ragassay cost`, assembled
# The one assembly of `ragassay cost` and `Run.cost`: the arguments checked (each caller names its own
# arguments through ``spell``), the files read, then the report from an open store.
DEFAULT_TIER = "regression"
DEFAULT_RUNS_PER_MONTH = 30
_UNSET = object()


def cli_flag(name: str, value: Any = _UNSET) -> str:
    """An argument as the command line spells it: ``--runs-per-month 0``, ``--project``."""
    flag = "--" + name.replace("_", "-")
    return flag if value is _UNSET or value is True else f"{flag} {value}"


@dataclass(frozen=True)
class CostRequest:
    """What ``ragassay cost`` was asked, checked and read: the judge config and its prices (None without
    ``judge``), the monthly projection, the labelling cost, and for a judging projection the (corpus,
    golden set) and its token settings."""

    judge_config: str | None
    cfg: Any
    prices: Mapping[str, Price] | None
    projection: Projection | None
    labelling: Scenario
    inputs: tuple | None
    output_tokens: int | None
    min_cached_prefix: int


def cost_request(*, judge: str | Path | None = None, tiers: str | Path | None = None, tier: str | None = None,
                 runs_per_month: int | None = None, labelling_hours: float | None = None,
                 hourly_rate: float | None = None, project: bool = False, output_tokens: int | None = None,
                 min_cached_prefix: int | None = None, golden: Any = None, corpus: Any = None,
                 inputs: Any = None, spell=cli_flag) -> CostRequest:
    """Check ``ragassay cost``'s arguments (every problem at once, one line each, named by ``spell(name,
    value)``), then read the judge config, the tier file and, with ``project``, the corpus and golden set
    (``load_inputs(corpus, golden)``, or ``inputs()`` when the caller has its own way to get them)."""
    problems = []
    if tiers is None and tier is not None:
        problems.append(f"{spell('tier')} needs {spell('tiers', 'TIERS.yaml')} (written by `ragassay golden status "
                        "--tiers-out`)")
    if tiers is None and runs_per_month is not None:
        problems.append(f"{spell('runs_per_month')} needs {spell('tiers', 'TIERS.yaml')} (written by `ragassay golden "
                        "status --tiers-out`)")
    if runs_per_month is not None and runs_per_month < 1:
        problems.append(f"{spell('runs_per_month', runs_per_month)}: give a whole number >= 1")
    if (labelling_hours is None) != (hourly_rate is None):
        problems.append(f"{spell('labelling_hours')} and {spell('hourly_rate')} go together: labelling cost = hours "
                        "x rate")
    for name, v in (("labelling_hours", labelling_hours), ("hourly_rate", hourly_rate)):
        if v is not None and not (math.isfinite(v) and v >= 0):
            problems.append(f"{spell(name, v)}: give a number >= 0")
    if project and judge is None:
        problems.append(f"{spell('project', True)} needs {spell('judge', 'JUDGE.yaml')}: the LLM judge whose prompts "
                        "and prices to project (for example examples/judges/claude-sonnet-5.yaml)")
    for name, v in (("output_tokens", output_tokens), ("min_cached_prefix", min_cached_prefix),
                    ("golden", golden), ("corpus", corpus)):
        if v is not None and not project:
            problems.append(f"{spell(name)} shapes the projection: add {spell('project', True)} (and "
                            f"{spell('judge', 'JUDGE.yaml')})")
    if output_tokens is not None and output_tokens < 1:
        problems.append(f"{spell('output_tokens', output_tokens)}: give a whole number >= 1")
    if min_cached_prefix is not None and min_cached_prefix < 0:
        problems.append(f"{spell('min_cached_prefix', min_cached_prefix)}: give a whole number >= 0")
    if problems:
        raise InputError("\n".join(problems))
    labelling = labelling_cost(labelling_hours, hourly_rate)
    projection = None
    if tiers is not None:
        projection = Projection(load_tier(tiers, tier or DEFAULT_TIER), runs_per_month or DEFAULT_RUNS_PER_MONTH)
    prices = cfg = None
    if judge is not None:
        from ragassay.judges.config import load_judge_config

        cfg = load_judge_config(judge)
        prices = price_table(cfg.prices, where=f"{judge}: prices")
        if project and cfg.provider == "local":
            raise InputError(f"{judge}: a local judge makes no call, so there is nothing to project; pass an LLM "
                             "judge config (provider anthropic or openai, with prices), for example "
                             "examples/judges/claude-sonnet-5.yaml")
    got = None
    if project:
        if inputs is not None:
            got = inputs()
        else:
            from ragassay.analysis.runner import load_inputs

            got = load_inputs(corpus, golden)
    return CostRequest(None if judge is None else str(judge), cfg, prices, projection, labelling, got,
                       output_tokens, DEFAULT_MIN_CACHED_PREFIX if min_cached_prefix is None else min_cached_prefix)


def eval_cost_report(store, runs: Sequence[str], request: CostRequest) -> dict[str, Any]:
    """The dict ``ragassay cost RUNS --json`` prints: :func:`run_cost` of each run at the request's prices,
    with its judging projection when asked (:func:`project_judging`), through :func:`cost_report`."""
    costs = [run_cost(store, ref, request.prices, request.judge_config) for ref in runs]
    projected = None
    if request.inputs is not None:
        corp, gs = request.inputs
        projected = [project_judging(store, c.run_id, request.cfg, request.judge_config, gs, corp,
                                     output_tokens=request.output_tokens,
                                     min_cached_prefix=request.min_cached_prefix) for c in costs]
    return cost_report(costs, request.projection, request.labelling, projected)


__all__ = ["DEFAULT_MIN_CACHED_PREFIX", "DEFAULT_OUTPUT_TOKENS", "DEFAULT_RUNS_PER_MONTH", "DEFAULT_TIER",
           "PROJECTED", "SCENARIOS", "CostRequest", "JudgingProjection", "PlannedCall", "Projection", "RunCost",
           "Scenario", "Tier", "cli_flag", "cost_report", "cost_request", "eval_cost_report", "kinds_of",
           "labelling_cost", "load_tier", "plan_calls", "price_calls", "project_items", "project_judging",
           "run_cost"]
