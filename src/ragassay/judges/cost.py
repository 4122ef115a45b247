"""The cost line (spec §16): calls, tokens, cache-hit share, spend, latency percentiles and a projection.

Computed from a judge run's call records. ``spend`` is what this run paid. The projection per 1,000 queries
prices every call of the run (cache hits at what their paid original cost, from the store), so a fully
cached rerun still projects what a fresh run of that size would cost. Calls answered through a provider's
batch API (the store's ``judge_batches`` lists the shas each collected batch billed) were priced at the
batch rates; the line counts them, so a spend is never read as sync-priced when it was not.

A cascaded run adds :class:`CascadeCost`: the routes, both tiers' spend and time, and what the cascade saved
against tier 2 judging every support judgement. Tier 2's cost (or time) on the judgements it did not see is
estimated from the ones it did, as their mean per call; a saving with nothing to estimate from is undefined.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ragassay.judges.protocol import PAID_OUTCOMES, CallRecord


@dataclass(frozen=True)
class CostLine:
    calls: int
    paid_calls: int
    cache_hits: int
    errors: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    spend: float
    p50_latency_ms: float
    p95_latency_ms: float
    queries: int
    per_1000_queries: float
    batch_calls: int = 0
    cascade: CascadeCost | None = None

    @property
    def cache_hit_share(self) -> float:
        return self.cache_hits / self.calls if self.calls else math.nan

    def to_dict(self) -> dict:
        out = {**asdict(self), "cache_hit_share": self.cache_hit_share}
        out["cascade"] = None if self.cascade is None else self.cascade.to_dict()
        return out

    def text(self) -> str:
        """The cost line; a cascade's line follows on a second line."""
        if self.cascade is None:
            return self._calls_text()
        if self.calls == 0:
            return f"cost: no LLM calls (both tiers are local judges), spend ${self.spend:.4f}\n{self.cascade.text()}"
        return f"{self._calls_text()}\n{self.cascade.text()}"

    def _calls_text(self) -> str:
        share = "n/a" if math.isnan(self.cache_hit_share) else f"{self.cache_hit_share:.0%}"
        lat = "n/a" if math.isnan(self.p50_latency_ms) else \
            f"p50 {self.p50_latency_ms:.0f} ms, p95 {self.p95_latency_ms:.0f} ms"
        proj = "n/a" if math.isnan(self.per_1000_queries) else f"${self.per_1000_queries:.2f}"
        batch = f", {self.batch_calls} via batch at batch prices" if self.batch_calls else ""
        return (f"cost: {self.calls} calls ({self.paid_calls} paid{batch}, {self.errors} errors), "
                f"{self.input_tokens:,} in / {self.output_tokens:,} out tokens ({self.cached_tokens:,} cached), "
                f"cache hits {share}, spend ${self.spend:.4f}, latency {lat}, {proj} per 1,000 queries")


@dataclass(frozen=True)
class CascadeCost:
    """What a cascade did on a run's support judgements and what it saved against tier 2 alone.

    N = auto_pass + auto_fail + escalated judgements; tier 2 made ``tier2_calls`` of them (the escalated
    ones). Tier 1 is a local judge and costs nothing. With c̄₂ = ``tier2_cost`` / ``tier2_calls`` (cache hits
    priced at their paid original), cost saved = 1 - ``tier2_cost`` / (N · c̄₂): undefined when tier 2 made
    no call or cost nothing. With t̄₂ = mean time of the tier-2 judgements timed in this run (a cache hit is
    not timed), latency saved = 1 - (T₁ + ``tier2_calls`` · t̄₂) / (N · t̄₂), T₁ = tier 1's time on all N:
    undefined when no tier-2 judgement was timed. Times are summed per judgement, not wall-clock."""

    tier1: str
    tier2: str
    auto_pass: int
    auto_fail: int
    escalated: int
    tier1_latency_ms: float
    tier2_calls: int
    tier2_spend: float
    tier2_cost: float
    tier2_timed: int
    tier2_latency_ms: float

    @property
    def judgements(self) -> int:
        return self.auto_pass + self.auto_fail + self.escalated

    @property
    def escalated_share(self) -> float:
        return self.escalated / self.judgements if self.judgements else math.nan

    def cost_saved(self) -> tuple[float, str | None]:
        """(saving, None) or (NaN, why it is undefined)."""
        if self.tier2_calls == 0:
            return math.nan, "no tier-2 call was made"
        if self.tier2_cost <= 0:
            return math.nan, "tier 2 costs nothing"
        alone = self.tier2_cost / self.tier2_calls * self.judgements
        return 1.0 - self.tier2_cost / alone, None

    def latency_saved(self) -> tuple[float, str | None]:
        """(saving, None) or (NaN, why it is undefined)."""
        if self.tier2_timed == 0:
            return math.nan, "no tier-2 judgement was timed in this run (cache hits are not)"
        per = self.tier2_latency_ms / self.tier2_timed
        if per <= 0:
            return math.nan, "tier 2 took no measurable time"
        return 1.0 - (self.tier1_latency_ms + self.tier2_calls * per) / (self.judgements * per), None

    def to_dict(self) -> dict:
        cost, cost_why = self.cost_saved()
        lat, lat_why = self.latency_saved()
        return {**asdict(self), "judgements": self.judgements, "escalated_share": self.escalated_share,
                "tier2_cost_per_call": self.tier2_cost / self.tier2_calls if self.tier2_calls else math.nan,
                "tier2_ms_per_judgement": self.tier2_latency_ms / self.tier2_timed if self.tier2_timed else math.nan,
                "cost_saved": cost, "cost_saved_undefined": cost_why,
                "latency_saved": lat, "latency_saved_undefined": lat_why}

    def text(self) -> str:
        n = self.judgements
        share = "n/a" if math.isnan(self.escalated_share) else f"{self.escalated_share:.0%}"
        cost, cost_why = self.cost_saved()
        lat, lat_why = self.latency_saved()
        if cost_why:
            cost_s = f"cost saved undefined ({cost_why})"
        else:
            cost_s = (f"cost saved {cost:.0%} vs tier 2 on all {n} (estimated from {self.tier2_calls} tier-2 calls "
                      f"at ${self.tier2_cost / self.tier2_calls:.6f} each)")
        if lat_why:
            lat_s = f"latency saved undefined ({lat_why})"
        else:
            lat_s = (f"latency saved {lat:.0%} vs tier 2 on all {n} (estimated from {self.tier2_timed} timed tier-2 "
                     f"judgements at {self.tier2_latency_ms / self.tier2_timed:.2f} ms each)")
        return (f"cascade {self.tier1} → {self.tier2} on {n} support judgements: escalated {self.escalated} "
                f"({share}), auto-pass {self.auto_pass}, auto-fail {self.auto_fail}; tier 1 $0 (local), "
                f"{self.tier1_latency_ms:.1f} ms; tier 2 judged {self.tier2_calls}, spend ${self.tier2_spend:.4f} "
                f"(priced ${self.tier2_cost:.4f}), {self.tier2_latency_ms:.1f} ms over {self.tier2_timed} timed; "
                f"{cost_s}; {lat_s}")


def priced_costs(records: Sequence[CallRecord], store=None) -> list[float]:
    """Each record's cost at what it was paid: its own, or for a cache hit its paid original's (from the
    store; 0 when the original is gone or no store is given)."""
    hits = sorted({r.request_sha for r in records if r.cache_hit})
    originals = {}
    if hits and store is not None:
        originals = {row["request_sha"]: row["cost"] or 0.0 for row in store.cached_judge_calls(hits)
                     if not row["cache_hit"]}
    return [originals.get(r.request_sha, 0.0) if r.cache_hit else r.cost for r in records]


def cascade_cost(tier1: str, tier2: str, routes: Mapping[str, int], tier1_records: Sequence[CallRecord],
                 tier2_records: Sequence[CallRecord], store=None) -> CascadeCost:
    """The :class:`CascadeCost` of a routed run: ``routes`` counts auto_pass, auto_fail and escalated; the
    records are tier 1's judgements (every routed one) and tier 2's (the escalated ones)."""
    timed = [r for r in tier2_records if not r.cache_hit and r.outcome in PAID_OUTCOMES and r.latency_ms is not None]
    return CascadeCost(
        tier1=tier1, tier2=tier2, auto_pass=routes.get("auto_pass", 0), auto_fail=routes.get("auto_fail", 0),
        escalated=routes.get("escalated", 0),
        tier1_latency_ms=float(sum(r.latency_ms or 0.0 for r in tier1_records)),
        tier2_calls=len(tier2_records), tier2_spend=float(sum(r.cost for r in tier2_records)),
        tier2_cost=float(sum(priced_costs(tier2_records, store))), tier2_timed=len(timed),
        tier2_latency_ms=float(sum(r.latency_ms for r in timed)),
    )


def cost_line(records: Sequence[CallRecord], queries: int, store=None, cascade: CascadeCost | None = None
              ) -> CostLine:
    """The cost line of one judge run over ``queries`` (query, trial) pairs (``cascade``: its routes and
    saving, for a cascaded run)."""
    paid = [r for r in records if not r.cache_hit and r.outcome in PAID_OUTCOMES]
    lat = np.array([r.latency_ms for r in paid if r.latency_ms is not None], dtype=float)
    full = sum(priced_costs(records, store))
    batched = set() if store is None else store.batch_billed_shas(sorted({r.request_sha for r in paid}))
    return CostLine(
        calls=len(records), paid_calls=len(paid), cache_hits=sum(r.cache_hit for r in records),
        errors=sum(1 for r in records if r.outcome == "error"),
        input_tokens=sum(r.input_tokens for r in records), output_tokens=sum(r.output_tokens for r in records),
        cached_tokens=sum(r.cached_tokens for r in records), spend=sum(r.cost for r in records),
        p50_latency_ms=float(np.percentile(lat, 50)) if lat.size else math.nan,
        p95_latency_ms=float(np.percentile(lat, 95)) if lat.size else math.nan,
        queries=queries, per_1000_queries=full / queries * 1000 if queries else math.nan,
        batch_calls=sum(1 for r in paid if r.request_sha in batched), cascade=cascade,
    )


__all__ = ["CascadeCost", "CostLine", "cascade_cost", "cost_line", "priced_costs"]
