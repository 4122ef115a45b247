"""Route a judged run's support judgements through a two-tier cascade (spec §11.7–§11.8).

Every support judgement (one claim of an answer against the answer's packed context) is scored by tier 1,
a local judge; with P(bad) = 1 - score clipped to [0, 1] and the band (lo, hi):

- P(bad) < lo: **auto_pass**, the claim is supported with tier 1's verdict and its quote;
- P(bad) > hi: **auto_fail**, tier 1's not-supported verdict;
- otherwise, or when tier 1 gave no score: **escalated**, tier 2 judges the claim.

The config checks that tier 1's threshold agrees with the band, so tier 1's own label is ``supported`` on
every auto-pass and not on any auto-fail; a claim whose label still disagrees with its route (a score within
float rounding of the threshold) is escalated rather than stored with a contradicting verdict.

The metrics are then combined exactly as for a single judge. A local tier 2 takes the answer's sentences as
claims (:func:`ragassay.judges.local.score_sentence_claims`); an LLM tier 2 keeps its own claims
decomposition (one call per answer, as without a cascade), so a cascade changes who judges each claim but not
what the claims are, and a claim whose tier-2 call is not ``ok`` leaves the metric undefined as it does today.
Only the support judgements are routed: every other metric (relevance, correctness, nuggets,
numeric consistency) is tier 2's alone.

Each tier-1 judgement (and each local tier-2 one) becomes a ``judge_calls`` record: provider ``local``, cost 0,
its measured time, the route in ``reason`` and a request sha over what decides the verdict (the judge's name
with its version and threshold, the claim and the context texts). Tier 2's LLM calls are recorded by its client
as always, item ``support:<i>``, so a call paid by an uncascaded run is a cache hit here and the reverse.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ragassay.judges.cost import CascadeCost, cascade_cost
from ragassay.judges.local import LocalVerdict, score_sentence_claims
from ragassay.judges.metrics import (
    Criterion,
    JudgedMetrics,
    JudgeItem,
    _check_criteria,
    _kinds,
    _score_item,
    _verdict_or_reason,
    first_stage,
    run_requests,
    support_requests,
)
from ragassay.judges.protocol import CallRecord, Judgement, JudgeRequest, sha256_text

ROUTES = ("auto_pass", "auto_fail", "escalated")
# The stored metrics whose judgements a cascade routes.
COVERED_METRICS = ("faithfulness", "citation_precision", "citation_recall")


def p_bad(score: float) -> float:
    """P(bad) = 1 - support score, clipped to [0, 1] (an embedding cosine can be negative); NaN stays NaN."""
    return min(1.0, max(0.0, 1.0 - score)) if not math.isnan(score) else math.nan


def route_label(p: float, label: str | None, lo: float, hi: float) -> str:
    """The band rule, the one place it is written: ``auto_pass`` for P(bad) < lo with tier 1's label
    ``supported``, ``auto_fail`` for P(bad) > hi with any other label, else ``escalated``; NaN, no label (tier 1
    could not judge) or a label that contradicts the route escalates. Runs (:func:`route`) and validations
    (``validate.route_items``) both route through it."""
    if p < lo and label == "supported":
        return "auto_pass"
    if p > hi and label is not None and label != "supported":
        return "auto_fail"
    return "escalated"


def route(p: float, verdict: LocalVerdict, lo: float, hi: float) -> str:
    """:func:`route_label` of a tier-1 local verdict (no label when it could not judge)."""
    return route_label(p, None if verdict.verdict.cannot_judge else verdict.verdict.label, lo, hi)


@dataclass
class CascadeRouting:
    """What routing did on one run: tier 1's record for every routed judgement, tier 2's records for the
    escalated ones (its LLM calls, or its local judgements), and the count per route."""

    tier1: str
    tier2: str
    lo: float
    hi: float
    tier1_records: list[CallRecord] = field(default_factory=list)
    tier2_records: list[CallRecord] = field(default_factory=list)
    routes: Counter = field(default_factory=Counter)
    unscored: int = 0

    def summary(self) -> dict[str, Any]:
        """The run's judge-summary entry: tiers, band, the metrics routed and the count per route (``unscored``:
        escalated because tier 1 gave no score)."""
        return {"tier1": self.tier1, "tier2": self.tier2, "band": {"lo": self.lo, "hi": self.hi},
                "covers": list(COVERED_METRICS), "judgements": sum(self.routes.values()),
                "routes": {r: self.routes.get(r, 0) for r in ROUTES}, "unscored": self.unscored}

    def cost(self, store=None) -> CascadeCost:
        """The cascade's part of the cost line (tier-2 cache hits priced from ``store``)."""
        return cascade_cost(self.tier1, self.tier2, self.routes, self.tier1_records, self.tier2_records, store)

    def local_records(self) -> list[CallRecord]:
        """The records the routing itself must store: tier 1's, and tier 2's when tier 2 is local (an LLM
        client stores its own)."""
        return self.tier1_records + [r for r in self.tier2_records if r.provider == "local"]

    def decide(self, tier1, run_id: str, item: JudgeItem, index: int, claim: str
               ) -> tuple[str, LocalVerdict, CallRecord]:
        """Score ``claim`` with tier 1, route it, and log the decision."""
        verdict, ms = _timed(tier1, claim, item)
        p = p_bad(verdict.score)
        r = route(p, verdict, self.lo, self.hi)
        why = (f"{r}: no tier-1 score ({verdict.verdict.justification})" if math.isnan(p)
               else f"{r}: P(bad) {p:.4f}, band [{self.lo!r}, {self.hi!r}]")
        record = local_record(run_id, item, f"tier1:support:{index}", tier1, claim, verdict, ms, why)
        self.tier1_records.append(record)
        self.routes[r] += 1
        self.unscored += math.isnan(p)
        return r, verdict, record


def local_record(run_id: str, item: JudgeItem, name: str, judge, claim: str, verdict: LocalVerdict,
                 latency_ms: float, reason: str | None) -> CallRecord:
    """A local support judgement as a ``judge_calls`` record: cost 0, one attempt, never a cache hit."""
    key = {"judge": judge.name, "claim": claim, "context": [u.text for u in item.context]}
    sha = sha256_text(json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
    outcome = "cannot_judge" if verdict.verdict.cannot_judge else "ok"
    return CallRecord(run_id=run_id, query_id=item.query_id, trial=item.trial, item=name, judge="support",
                      request_sha=sha, provider="local", model=judge.method, rubric_sha=sha256_text(judge.name),
                      prompt_sha=sha256_text(judge.name), temperature=None, effort=None, max_tokens=None,
                      outcome=outcome, reason=reason, verdict=verdict.verdict.model_dump(mode="json"),
                      latency_ms=latency_ms, attempts=1)


def _timed(judge, claim: str, item: JudgeItem) -> tuple[LocalVerdict, float]:
    # One claim per call, so each judgement's time is its own (a batch would spread the context's cost).
    start = time.perf_counter()
    (verdict,) = judge.judge_many([claim], item.context)
    return verdict, (time.perf_counter() - start) * 1000.0


def route_local(run_id: str, items: Sequence[JudgeItem], tier1, tier2, *, lo: float, hi: float,
                numeric: bool = True) -> tuple[JudgedMetrics, CascadeRouting]:
    """A local cascade (tier 2 a local judge too): claims are the answer's sentences, each routed by tier 1
    and, when escalated, judged by tier 2; the metrics are :func:`~ragassay.judges.local.local_judge_items`'."""
    log = CascadeRouting(f"local:{tier1.method}", f"local:{tier2.method}", lo, hi)

    def verdicts_of(it: JudgeItem, claims: list[str]) -> list[LocalVerdict]:
        out = []
        for i, claim in enumerate(claims):
            r, verdict, _ = log.decide(tier1, run_id, it, i, claim)
            if r == "escalated":
                verdict, ms = _timed(tier2, claim, it)
                why = verdict.verdict.justification if verdict.verdict.cannot_judge else None
                log.tier2_records.append(local_record(run_id, it, f"tier2:support:{i}", tier2, claim, verdict, ms,
                                                      why))
            out.append(verdict)
        return out

    return score_sentence_claims(items, verdicts_of, numeric=numeric), log


def route_llm(client, run_id: str, items: Sequence[JudgeItem], tier1, *, tier2: str, lo: float, hi: float,
              metrics: Sequence[str], criteria: Sequence[Criterion]) -> tuple[JudgedMetrics, CascadeRouting]:
    """An LLM tier 2 (``client``, named ``tier2``): its first round of calls (claims, relevance, criteria,
    nuggets) as without a cascade, then each claim routed by tier 1 and only the escalated ones sent as support
    calls; every metric is combined by :func:`~ragassay.judges.metrics.judge_items`' own code."""
    _check_criteria(criteria)
    kinds = _kinds(metrics)
    log = CascadeRouting(f"local:{tier1.method}", tier2, lo, hi)
    out = JudgedMetrics()
    got = run_requests(client, first_stage(run_id, items, metrics=metrics, criteria=criteria), out)
    escalated: list[JudgeRequest] = []
    claims_of: dict[tuple[str, int], list[str] | None] = {}
    for it in items:
        if not (it.answered and "claims" in kinds):
            continue
        verdict, _ = _verdict_or_reason(got.get((it.query_id, it.trial, "claims")))
        claims = None if verdict is None else [c for c in verdict.claims if c.strip()]
        claims_of[(it.query_id, it.trial)] = claims
        for i, (claim, request) in enumerate(zip(claims or [], support_requests(
                run_id, it, claims or [], metrics=metrics, criteria=criteria), strict=True)):
            r, local, record = log.decide(tier1, run_id, it, i, claim)
            if r == "escalated":
                escalated.append(request)
            else:
                got[(it.query_id, it.trial, request.key.item)] = Judgement(record, local.verdict)
    if escalated and out.stopped is None:
        before = len(out.judgements)
        got.update(run_requests(client, escalated, out))
        log.tier2_records = [j.record for j in out.judgements[before:]]
    elif escalated:
        out.calls["not_started"] += len(escalated)
    for it in items:
        _score_item(it, kinds, metrics, criteria, got, claims_of.get((it.query_id, it.trial)), out)
    return out, log


__all__ = ["COVERED_METRICS", "ROUTES", "CascadeRouting", "local_record", "p_bad", "route", "route_label",
           "route_llm", "route_local"]
