"""LLM judge clients: one module per provider SDK, sharing ``base.JudgeClient`` (retries, concurrency,
spend cap, the store as the cache, and the providers' batch APIs for ``mode="batch"``). The SDKs are
imported only when a client opens."""

from ragassay.judges.providers.anthropic import AnthropicJudge
from ragassay.judges.providers.base import (
           BatchPolicy,
           JudgeClient,
           JudgeRun,
           JudgeStopped,
           Price,
           RetryPolicy,
           price_table,
)
from ragassay.judges.providers.openai import OpenAIJudge

__all__ = ["AnthropicJudge", "BatchPolicy", "JudgeClient", "JudgeRun", "JudgeStopped", "OpenAIJudge", "Price",
           "RetryPolicy", "price_table"]
