"""Anthropic Messages API judge client, through the real ``anthropic`` SDK.

The verdict schema goes in ``output_config.format`` (structured output, so the response text is JSON of the
verdict type by construction); the rubric is the system prompt, marked ``cache_control: ephemeral`` so it is
the cached prefix across items (§11.5). ``stop_reason`` is read before any content: ``refusal`` is outcome
``refused`` (an HTTP 200 with no verdict, §10.5), ``max_tokens`` is ``truncated``. The SDK's own retries are
off (``max_retries=0``): ``JudgeClient`` retries, so attempts are counted and ``retry-after`` is honoured
in one place.
"""

from __future__ import annotations

from typing import Any

from ragassay.errors import InputError
from ragassay.judges.protocol import JudgeRequest
from ragassay.judges.providers.base import (
    RETRYABLE_STATUS,
    JudgeClient,
    ProviderError,
    Response,
    retry_after_seconds,
)


class AnthropicJudge(JudgeClient):
    """Judge through ``AsyncAnthropic(...).messages.create``; ``base_url`` points it anywhere (tests use a
    local server). Temperature is sent only when set, since current Claude models reject it (§10.8)."""

    provider = "anthropic"
    api_key_env = "ANTHROPIC_API_KEY"

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

    async def _send(self, request: JudgeRequest, timeout: float) -> Response:
        sdk = self._sdk
        output_config: dict[str, Any] = {
            "format": {"type": "json_schema", "schema": request.verdict_type.json_schema()}
        }
        if self.sampling.effort is not None:
            output_config["effort"] = self.sampling.effort
        kwargs: dict[str, Any] = {}
        if self.sampling.temperature is not None:
            kwargs["temperature"] = self.sampling.temperature
        try:
            message = await self._client.messages.create(
                model=self.sampling.model,
                max_tokens=self.sampling.max_tokens,
                system=[{"type": "text", "text": request.system, "cache_control": {"type": "ephemeral"}}],
                messages=[{"role": "user", "content": request.user}],
                output_config=output_config,
                timeout=timeout,
                **kwargs,
            )
        except sdk.APIStatusError as exc:
            detail = exc.api_message or exc.message
            raise ProviderError(
                f"HTTP {exc.status_code}: {detail}"[:500],
                status=exc.status_code,
                retryable=exc.status_code in RETRYABLE_STATUS,
                retry_after=retry_after_seconds(exc.response.headers),
            ) from exc
        except sdk.APITimeoutError as exc:
            raise ProviderError(f"timed out after {timeout:g}s", retryable=True) from exc
        except sdk.APIConnectionError as exc:
            raise ProviderError(f"connection error: {exc.message}", retryable=True) from exc
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
            return Response("refused", stop_reason, None, refusal=f"refusal ({category or 'no category'})",
                            **tokens)
        if stop_reason in ("max_tokens", "model_context_window_exceeded"):
            return Response("truncated", stop_reason, None, **tokens)
        text = "".join(block.text for block in message.content if getattr(block, "type", None) == "text")
        return Response("complete", stop_reason, text, **tokens)


__all__ = ["AnthropicJudge"]
