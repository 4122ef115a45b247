"""OpenAI Chat Completions judge client, through the real ``openai`` SDK, for any compatible ``base_url``.

The verdict schema goes in ``response_format`` as a strict ``json_schema``; the rubric is the system message
(OpenAI caches a repeated prompt prefix automatically; ``cached_tokens`` is read from the usage). A non-null
``message.refusal`` or ``finish_reason: content_filter`` is outcome ``refused``; ``finish_reason: length`` is
``truncated``. Any OpenAI-compatible server (vLLM, Ollama, llama.cpp's server) works through ``base_url``;
``max_tokens_param`` picks ``max_completion_tokens`` (OpenAI's current name) or ``max_tokens`` (what most
local servers read). The SDK's own retries are off: ``JudgeClient`` retries.

With ``mode="batch"`` the same bodies go through the Batch API: a JSONL file of ``/v1/chat/completions``
requests (``custom_id`` = request sha) uploaded with ``files.create(purpose="batch")``, ``batches.create``
with the 24 h window, ``batches.retrieve`` until it ends, then the output and error files from
``files.content``; ``providers.base`` (``judge_batched``) drives create, poll and merge.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from ragassay.errors import InputError
from ragassay.judges.protocol import JudgeRequest
from ragassay.judges.providers.base import (
    BatchState,
    JudgeClient,
    Response,
    sdk_errors,
)

_ENDED = ("completed", "failed", "expired", "cancelled")


class OpenAIJudge(JudgeClient):
    """Judge through ``AsyncOpenAI(...).chat.completions.create``."""

    provider = "openai"
    api_key_env = "OPENAI_API_KEY"
    batch_api = True
    # The Batch API takes up to 50,000 requests (and 200 MB) per input file.
    max_batch_requests = 50_000
    setting_keywords = {"temperature": "temperature", "top_p": "top_p", "effort": "reasoning_effort",
                        "thinking_budget": None}

    @classmethod
    def sdk_create(cls) -> Any:
        try:
            from openai.resources.chat.completions import AsyncCompletions
        except ImportError:
            return None
        return AsyncCompletions.create

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

    def _body(self, request: JudgeRequest) -> dict[str, Any]:
        """The Chat Completions body of one request: the same for a direct call and a batch line."""
        body: dict[str, Any] = {
            "model": self.sampling.model,
            "messages": [{"role": "system", "content": request.system},
                         {"role": "user", "content": request.user}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": request.verdict_type.__name__,
                                "schema": request.verdict_type.json_schema(), "strict": True},
            },
            self.max_tokens_param: self.sampling.max_tokens,
        }
        if self.sampling.temperature is not None:
            body["temperature"] = self.sampling.temperature
        if self.sampling.top_p is not None:
            body["top_p"] = self.sampling.top_p
        if self.sampling.effort is not None:
            body["reasoning_effort"] = self.sampling.effort
        return body

    def _classified(self, timeout: float):
        """The SDK's exceptions as ``ProviderError`` (status, retryable, retry-after)."""
        return sdk_errors(self._sdk, timeout)

    async def _send(self, request: JudgeRequest, timeout: float) -> Response:
        # chat.completions.create first walks the body through the SDK's TypedDict transform, about 1 ms of CPU a
        # call (measured; a fifth to a third of the client's whole per-call cost), which returns this body
        # unchanged: it holds only strings, numbers and the schema dict (tests/judges/test_throughput_body.py
        # pins that). The client's own post sends it to the same endpoint, with the same auth and timeout, and
        # parses the same ChatCompletion.
        with self._classified(timeout):
            completion = await self._client.post(
                "/chat/completions", body=self._body(request), cast_to=self._sdk.types.chat.ChatCompletion,
                options={"timeout": timeout, "security": {"bearer_auth": True}})
        return _response(completion)

    # -- Batch API
    async def _batch_create(self, items: Sequence[tuple[str, JudgeRequest]], timeout: float) -> str:
        lines = [json.dumps({"custom_id": sha, "method": "POST", "url": "/v1/chat/completions",
                             "body": self._body(r)}, ensure_ascii=False) for sha, r in items]
        data = ("\n".join(lines) + "\n").encode("utf-8")
        with self._classified(timeout):
            upload = await self._client.files.create(
                file=("ragassay-judge-batch.jsonl", data, "application/jsonl"), purpose="batch", timeout=timeout)
            batch = await self._client.batches.create(
                input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h",
                timeout=timeout)
        return batch.id

    async def _batch_poll(self, batch_id: str, timeout: float) -> BatchState:
        with self._classified(timeout):
            batch = await self._client.batches.retrieve(batch_id, timeout=timeout)
        errors = [e.message or e.code or "" for e in (batch.errors.data or [])] if batch.errors else []
        return BatchState(batch_id, batch.status in _ENDED, batch.status,
                          files=tuple(f for f in (batch.output_file_id, batch.error_file_id) if f),
                          detail="; ".join(e for e in errors if e)[:500] or None)

    async def _batch_results(self, state: BatchState, timeout: float) -> dict[str, Response | str]:
        """Each custom_id's answer from the output file (a ``Response`` for HTTP 200) and the error file (why
        there is none: the request's HTTP error, or ``batch_expired`` — neither billed)."""
        chat = self._sdk.types.chat.ChatCompletion
        out: dict[str, Response | str] = {}
        for file_id in state.files:
            with self._classified(timeout):
                content = await self._client.files.content(file_id, timeout=timeout)
            for raw in content.text.splitlines():
                if not raw.strip():
                    continue
                line = json.loads(raw)
                custom_id = line.get("custom_id")
                if not isinstance(custom_id, str):
                    continue
                response, error = line.get("response") or {}, line.get("error")
                status = response.get("status_code")
                if error:
                    out[custom_id] = f"batch request {error.get('code')}: {error.get('message')}"[:500]
                elif status == 200:
                    out[custom_id] = _response(chat.model_validate(response.get("body")))
                else:
                    message = ((response.get("body") or {}).get("error") or {}).get("message")
                    out[custom_id] = f"batch request HTTP {status}: {message}"[:500]
        return out


def _response(completion: Any) -> Response:
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
