"""The OpenAI judge posts its body itself (skipping the SDK's per-call TypedDict transform, about 1 ms of CPU):
the request it sends must be the one ``chat.completions.create`` would send, byte for byte in content."""

from __future__ import annotations

import asyncio
import json

import httpx2
import openai
import pytest
from openai._utils import async_maybe_transform
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

from ragassay.judges.protocol import (
    ClaimsVerdict,
    CriterionVerdict,
    ItemKey,
    JudgeRequest,
    NuggetVerdict,
    RelevanceVerdict,
    Sampling,
    SupportVerdict,
)
from ragassay.judges.providers import OpenAIJudge, Price

VERDICTS = [ClaimsVerdict, SupportVerdict, RelevanceVerdict, CriterionVerdict, NuggetVerdict]
SAMPLINGS = [Sampling("m", max_tokens=64), Sampling("m", max_tokens=300, temperature=0.3, effort="low")]
ANSWER = {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
          "choices": [{"index": 0, "finish_reason": "stop",
                       "message": {"role": "assistant", "content": '{"label": "supported"}', "refusal": None}}],
          "usage": {"prompt_tokens": 120, "completion_tokens": 9, "total_tokens": 129,
                    "prompt_tokens_details": {"cached_tokens": 100}}}


def _request(verdict) -> JudgeRequest:
    return JudgeRequest(ItemKey("r", "q1", 0, "x:0"), "support", verdict, "RUBRIC: ünïcode «rubric»",
                        'claim: "quoted" text\nwith a newline [[item:x]]')


@pytest.mark.parametrize("param", ["max_completion_tokens", "max_tokens"])
@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["plain", "temperature+effort"])
@pytest.mark.parametrize("verdict", VERDICTS, ids=lambda v: v.__name__)
def test_the_sdk_transform_leaves_every_judge_body_unchanged(verdict, sampling, param):
    judge = OpenAIJudge(sampling, {"m": Price(0, 0)}, api_key="sk-test", max_tokens_param=param)
    body = judge._body(_request(verdict))
    assert asyncio.run(async_maybe_transform(body, CompletionCreateParamsNonStreaming)) == body


def test_the_sent_request_equals_what_chat_completions_create_sends():
    seen: list[httpx2.Request] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, json=ANSWER)

    async def both():
        judge = OpenAIJudge(SAMPLINGS[1], {"m": Price(0, 0)}, api_key="sk-test", base_url="http://127.0.0.1:9/v1")
        await judge._open()
        sdk = openai.AsyncOpenAI(api_key="sk-test", base_url="http://127.0.0.1:9/v1", max_retries=0,
                                 http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(answer)))
        await judge._client.close()
        judge._client = sdk
        request = _request(SupportVerdict)
        ours = await judge._send(request, 5.0)
        await sdk.chat.completions.create(**judge._body(request), timeout=5.0)
        await sdk.close()
        return ours

    ours = asyncio.run(both())
    mine, theirs = seen
    assert (mine.method, mine.url) == (theirs.method, theirs.url) == ("POST", "http://127.0.0.1:9/v1/chat/completions")
    assert json.loads(mine.content) == json.loads(theirs.content)
    # the same headers but the per-request ones (a fresh idempotency key; the retry count is the same)
    differ = {"x-stainless-idempotency-key"} if "x-stainless-idempotency-key" in theirs.headers else set()
    assert {k: v for k, v in mine.headers.items() if k not in differ} == \
        {k: v for k, v in theirs.headers.items() if k not in differ}
    assert mine.headers["authorization"] == "Bearer sk-test"
    assert mine.extensions["timeout"] == theirs.extensions["timeout"]
    # and the answer is read the same way: tokens net of the cached prefix
    assert (ours.stop, ours.text, ours.input_tokens, ours.cached_tokens, ours.output_tokens) == (
        "complete", '{"label": "supported"}', 20, 100, 9)
