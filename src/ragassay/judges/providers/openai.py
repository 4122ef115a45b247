"""OpenAI Chat Completions judge client, through the real ``openai`` SDK, for any compatible ``base_url``.

The verdict schema goes in ``response_format`` as a strict ``json_schema``; the rubric is the system message
(OpenAI caches a repeated prompt prefix automatically; ``cached_tokens`` is read from the usage). A non-null
``message.refusal`` or ``finish_reason: content_filter`` is outcome ``refused``; ``finish_reason: length`` is
``truncated``. Any OpenAI-compatible server (vLLM, Ollama, llama.cpp's server) works through ``base_url``;
``max_tokens_param`` picks ``max_completion_tokens`` (OpenAI's current name) or ``max_tokens`` (what most
local servers read). The SDK's own retries are off: ``JudgeClient`` retries.
"""

from __future__ import annotations

from typing import Any, Literal

from ragassay.errors import InputError
from ragassay.judges.protocol import JudgeRequest
from ragassay.judges.providers.base import (
    RETRYABLE_STATUS,
    JudgeClient,
    ProviderError,
    Response,
    retry_after_seconds,
)


class OpenAIJudge(JudgeClient):
    """Judge through ``AsyncOpenAI(...).chat.completions.create``."""

    provider = "openai"
    api_key_env = "OPENAI_API_KEY"

    def __init__(self, *args: Any, max_tokens_param: Literal["max_completion_tokens", "max_tokens"] =
                 "max_completion_tokens", **kwargs: Any):
        super().__init__(*args, **kwargs)
        if max_tokens_param not in ("max_completion_tokens", "max_tokens"):
            raise InputError(f"max_tokens_param = {max_tokens_param!r} must be 'max_completion_tokens' or "
                             "'max_tokens'")
        self.max_tokens_param = max_tokens_param

    async def _open(self) -> None:
        try:
            import openai
        except ImportError as exc:
            raise InputError("the openai judge needs the 'openai' package: pip install 'ragassay[llm]'") from exc
        self._sdk = openai
        self._client = openai.AsyncOpenAI(
            api_key=self._api_key, base_url=self.base_url, max_retries=0, timeout=self.retry.timeout_s
        )

    async def _close(self) -> None:
        await self._client.close()

    async def _send(self, request: JudgeRequest, timeout: float) -> Response:
        sdk = self._sdk
        kwargs: dict[str, Any] = {self.max_tokens_param: self.sampling.max_tokens}
        if self.sampling.temperature is not None:
            kwargs["temperature"] = self.sampling.temperature
        if self.sampling.effort is not None:
            kwargs["reasoning_effort"] = self.sampling.effort
        try:
            completion = await self._client.chat.completions.create(
                model=self.sampling.model,
                messages=[{"role": "system", "content": request.system},
                          {"role": "user", "content": request.user}],
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": request.verdict_type.__name__,
                                    "schema": request.verdict_type.json_schema(), "strict": True},
                },
                timeout=timeout,
                **kwargs,
            )
        except sdk.APIStatusError as exc:
            raise ProviderError(
                f"HTTP {exc.status_code}: {exc.message}"[:500],
                status=exc.status_code,
                retryable=exc.status_code in RETRYABLE_STATUS,
                retry_after=retry_after_seconds(exc.response.headers),
            ) from exc
        except sdk.APITimeoutError as exc:
            raise ProviderError(f"timed out after {timeout:g}s", retryable=True) from exc
        except sdk.APIConnectionError as exc:
            raise ProviderError(f"connection error: {exc.message}", retryable=True) from exc
        usage = completion.usage
        prompt = usage.prompt_tokens if usage is not None else 0
        details = usage.prompt_tokens_details if usage is not None else None
        cached = (details.cached_tokens or 0) if details is not None else 0
        tokens = {
            "input_tokens": max(0, (prompt or 0) - cached),
            "output_tokens": (usage.completion_tokens or 0) if usage is not None else 0,
            "cached_tokens": cached,
        }
        if not completion.choices:
            return Response("complete", None, None, **tokens)
        choice = completion.choices[0]
        finish = choice.finish_reason
        if choice.message.refusal is not None or finish == "content_filter":
            return Response("refused", finish, None, refusal=choice.message.refusal or "content_filter", **tokens)
        if finish == "length":
            return Response("truncated", finish, None, **tokens)
        return Response("complete", finish, choice.message.content, **tokens)


__all__ = ["OpenAIJudge"]
