"""The cost line (spec §16): calls, tokens, cache-hit share, spend, latency percentiles and a projection.

Computed from a judge run's call records. ``spend`` is what this run paid. The projection per 1,000 queries
prices every call of the run (cache hits at what their paid original cost, from the store), so a fully
cached rerun still projects what a fresh run of that size would cost. Calls answered through a provider's
batch API (the store's ``judge_batches`` lists the shas each collected batch billed) were priced at the
batch rates; the line counts them, so a spend is never read as sync-priced when it was not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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

    @property
    def cache_hit_share(self) -> float:
        return self.cache_hits / self.calls if self.calls else math.nan

    def to_dict(self) -> dict:
        return {**asdict(self), "cache_hit_share": self.cache_hit_share}

    def text(self) -> str:
        share = "n/a" if math.isnan(self.cache_hit_share) else f"{self.cache_hit_share:.0%}"
        lat = "n/a" if math.isnan(self.p50_latency_ms) else \
            f"p50 {self.p50_latency_ms:.0f} ms, p95 {self.p95_latency_ms:.0f} ms"
        proj = "n/a" if math.isnan(self.per_1000_queries) else f"${self.per_1000_queries:.2f}"
        batch = f", {self.batch_calls} via batch at batch prices" if self.batch_calls else ""
        return (f"cost: {self.calls} calls ({self.paid_calls} paid{batch}, {self.errors} errors), "
                f"{self.input_tokens:,} in / {self.output_tokens:,} out tokens ({self.cached_tokens:,} cached), "
                f"cache hits {share}, spend ${self.spend:.4f}, latency {lat}, {proj} per 1,000 queries")


def cost_line(records: Sequence[CallRecord], queries: int, store=None) -> CostLine:
    """The cost line of one judge run over ``queries`` (query, trial) pairs."""
    paid = [r for r in records if not r.cache_hit and r.outcome in PAID_OUTCOMES]
    hits = [r for r in records if r.cache_hit]
    lat = np.array([r.latency_ms for r in paid if r.latency_ms is not None], dtype=float)
    full = sum(r.cost for r in records if not r.cache_hit)
    if hits and store is not None:
        originals = {row["request_sha"]: row["cost"] or 0.0
                     for row in store.cached_judge_calls(sorted({r.request_sha for r in hits}))
                     if not row["cache_hit"]}
        full += sum(originals.get(r.request_sha, 0.0) for r in hits)
    batched = set() if store is None else store.batch_billed_shas(sorted({r.request_sha for r in paid}))
    return CostLine(
        calls=len(records), paid_calls=len(paid), cache_hits=len(hits),
        errors=sum(1 for r in records if r.outcome == "error"),
        input_tokens=sum(r.input_tokens for r in records), output_tokens=sum(r.output_tokens for r in records),
        cached_tokens=sum(r.cached_tokens for r in records), spend=sum(r.cost for r in records),
        p50_latency_ms=float(np.percentile(lat, 50)) if lat.size else math.nan,
        p95_latency_ms=float(np.percentile(lat, 95)) if lat.size else math.nan,
        queries=queries, per_1000_queries=full / queries * 1000 if queries else math.nan,
        batch_calls=sum(1 for r in paid if r.request_sha in batched),
    )


__all__ = ["CostLine", "cost_line"]
