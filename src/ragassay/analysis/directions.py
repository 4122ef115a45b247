"""Which way is better for each metric: everything is higher-is-better except a few named ones."""

from __future__ import annotations

from ragassay.metrics.agent import LOWER_IS_BETTER as _AGENT_LOWER
from ragassay.metrics.claims import LOWER_IS_BETTER as _CLAIMS_LOWER

LOWER_IS_BETTER = frozenset({"over_refusal", "rerank_broke", "refused", "error", "context_tokens"}) | _AGENT_LOWER | _CLAIMS_LOWER


def higher_is_better(metric: str) -> bool:
    return metric not in LOWER_IS_BETTER
