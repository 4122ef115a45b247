"""Anthropic Messages API judge client, through the real ``anthropic`` SDK.

The verdict schema goes in ``output_config.format`` (structured output, so the response text is JSON of the
verdict type by construction); the rubric is the system prompt, marked ``cache_control: ephemeral`` so it is
the cached prefix across items (§11.5). ``stop_reason`` is read before any content: ``refusal`` is outcome
``refused`` (an HTTP 200 with no verdict, §10.5), ``max_tokens`` is ``truncated``. The SDK's own retries are
off (``max_retries=0``): ``JudgeClient`` retries, so attempts are counted and ``retry-after`` is honoured
in one place.

With ``mode="batch"`` the same request bodies go through the Message Batches API
(``messages.batches.create`` / ``retrieve`` / ``results``), one request per distinct request sha with the
sha as its ``custom_id``; ``providers.base`` (``judge_batched``) drives create, poll and merge.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragassay.errors import InputError
from ragassay.judges.protocol import JudgeRequest
from ragassay.judges.providers.base import (
    BatchState,
    JudgeClient,
    Response,
    sdk_errors,
)


class AnthropicJudge(JudgeClient):
    """Judge through ``AsyncAnthropic(...).messages.create``; ``base_url`` points it anywhere (tests use a
    local server). Optional settings are sent only when set; the judge config refuses one the installed SDK
    does not take (anthropic 2.14's ``messages.create`` takes no ``temperature``)."""

    provider = "anthropic"
    api_key_env = "ANTHROPIC_API_KEY"
    batch_api = True
    # The Message Batches API takes up to 100,000 requests (and 256 MB) per batch.
    max_batch_requests = 100_000
    setting_keywords = {"temperature": "temperature", "top_p": "top_p", "effort": "output_config",
                        "thinking_budget": "thinking"}

    @classmethod
    def sdk_create(cls) -> Any:
        try:
            from anthropic.resources.messages import AsyncMessages
        except ImportError:
            return None
        return AsyncMessages.create

    async def _open(self) -> None:
        try:
            import anthropic
        except ImportError as exc:
            raise InputError("the anthropic judge needs the 'anthropic' package: pip install 'ragassay[llm]'"
                             ) from exc
        self._sdk = anthropic
        self._client = anthropic.AsyncAnthropic(
            api_key=self._api_key, base_url=self.base_url, max_retries=0, timeout=self.retry.timeout_s
        )

    async def _close(self) -> None:
        await self._client.close()

    def _params(self, request: JudgeRequest) -> dict[str, Any]:
        """The Messages API body of one request: the same for a direct call and a batch entry."""
        output_config: dict[str, Any] = {
            "format": {"type": "json_schema", "schema": request.verdict_type.json_schema()}
        }
        if self.sampling.effort is not None:
            output_config["effort"] = self.sampling.effort
        params: dict[str, Any] = {
            "model": self.sampling.model,
            "max_tokens": self.sampling.max_tokens,
            "system": [{"type": "text", "text": request.system, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": request.user}],
            "output_config": output_config,
        }
        if self.sampling.temperature is not None:
            params["temperature"] = self.sampling.temperature
        if self.sampling.top_p is not None:
            params["top_p"] = self.sampling.top_p
        if self.sampling.thinking_budget is not None:
            params["thinking"] = {"type": "enabled", "budget_tokens": self.sampling.thinking_budget}
        return params

    def _classified(self, timeout: float):
        """The SDK's exceptions as ``ProviderError`` (status, retryable, retry-after)."""
        return sdk_errors(self._sdk, timeout)

    async def _send(self, request: JudgeRequest, timeout: float) -> Response:
        with self._classified(timeout):
            message = await self._client.messages.create(**self._params(request), timeout=timeout)
        return _response(message)

    # -- Message Batches
    async def _batch_create(self, items: Sequence[tuple[str, JudgeRequest]], timeout: float) -> str:
        with self._classified(timeout):
            batch = await self._client.messages.batches.create(
                requests=[{"custom_id": sha, "params": self._params(r)} for sha, r in items], timeout=timeout)
        return batch.id

    async def _batch_poll(self, batch_id: str, timeout: float) -> BatchState:
        with self._classified(timeout):
            batch = await self._client.messages.batches.retrieve(batch_id, timeout=timeout)
        return BatchState(batch_id, batch.processing_status == "ended", batch.processing_status)

    async def _batch_results(self, state: BatchState, timeout: float) -> dict[str, Response | str]:
        """Each custom_id's answer: a ``Response`` for a succeeded request, else why it has none (errored,
        canceled, expired — none of them billed)."""
        out: dict[str, Response | str] = {}
        with self._classified(timeout):
            lines = await self._client.messages.batches.results(state.batch_id, timeout=timeout)
            async for line in lines:
                result = line.result
                if result.type == "succeeded":
                    out[line.custom_id] = _response(result.message)
                elif result.type == "errored":
                    error = result.error.error
                    out[line.custom_id] = f"batch request errored: {error.type}: {error.message}"[:500]
                else:
                    out[line.custom_id] = f"batch request {result.type} (not billed)"
        return out


def _response(message: Any) -> Response:
    usage = message.usage
    tokens = {
        "input_tokens": usage.input_tokens or 0,
        "output_tokens": usage.output_tokens or 0,
        "cached_tokens": usage.cache_read_input_tokens or 0,
        "cache_write_tokens": usage.cache_creation_input_tokens or 0,
    }
    stop_reason = message.stop_reason
    if stop_reason == "refusal":
        details = message.stop_details
        category = getattr(details, "category", None) if details is not None else None
        return Response("refused", stop_reason, None, refusal=f"refusal ({category or 'no category'})", **tokens)
    if stop_reason in ("max_tokens", "model_context_window_exceeded"):
        return Response("truncated", stop_reason, None, **tokens)
    text = "".join(block.text for block in message.content if getattr(block, "type", None) == "text")
    return Response("complete", stop_reason, text, **tokens)


__all__ = ["AnthropicJudge"]
