"""The judge protocol: typed verdicts, the six outcomes, requests and the record of every call.

A judge turns a request (a frozen rubric as the system prefix, the item as the user message, a verdict type)
into exactly one ``Judgement``: an outcome, the typed verdict when there is one, and a ``CallRecord`` that
pins what produced it (provider, model id, rubric sha, prompt-template sha, sampling settings) and what it
cost. Outcomes (spec §10.2, §10.5, §11.4–§11.5):

- ``ok``            a verdict that validates against its schema;
- ``cannot_judge``  a valid verdict whose escape hatch is set — counted, never scored;
- ``refused``       the provider declined (Anthropic ``stop_reason: refusal``; OpenAI ``refusal`` or
                    ``content_filter``), checked before any content is read;
- ``truncated``     output stopped at ``max_tokens``;
- ``malformed``     a complete response that is not JSON or does not match the verdict schema;
- ``error``         no usable response after the retry budget (or a non-retryable HTTP error).

Only ``error`` was not billed, so only ``error`` is retried by a later run; the others answer an identical
later request from the store.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

Outcome = Literal["ok", "cannot_judge", "refused", "truncated", "malformed", "error"]
OUTCOMES: tuple[str, ...] = get_args(Outcome)
PAID_OUTCOMES: tuple[str, ...] = ("ok", "cannot_judge", "refused", "truncated", "malformed")


def sha256_text(text: str) -> str:
    """sha256 hex of UTF-8 text: the rubric sha and the prompt-template sha are this over the exact bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------- verdicts
class Verdict(BaseModel):
    """Base of every verdict. ``justification`` comes first on purpose (a judge that reasons before it
    decides agrees with humans more, and leaves something to audit); ``cannot_judge`` is the escape hatch:
    when true the item ends as outcome ``cannot_judge`` and its other fields are not scored.

    Every field is required and extra keys are forbidden, so the JSON schema is valid for strict structured
    output on both providers (Anthropic ``output_config.format``, OpenAI ``json_schema`` with ``strict``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    justification: str
    cannot_judge: bool

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """The schema sent to the provider (pydantic's, which sets ``additionalProperties: false``).
        Built once per class: generating it costs about a millisecond, paid three times per call otherwise.
        Callers must not mutate it."""
        return _schema_of(cls)


class ClaimsVerdict(Verdict):
    """Decomposition of an answer into atomic, self-contained claims (§10.2). No claims is a valid result:
    faithfulness of such an answer is undefined, not 1."""

    claims: list[str]


class SupportVerdict(Verdict):
    """Does the context support one claim? ``quote`` must be verbatim context text when ``label`` is
    ``supported``; the caller checks it (a quote not found is counted as ``quote_not_found``)."""

    label: Literal["supported", "unsupported", "insufficient_context"]
    quote: str | None


class RelevanceVerdict(Verdict):
    """Does the answer address the question asked (§10.3)?"""

    label: Literal["relevant", "partially_relevant", "irrelevant"]


class CriterionVerdict(Verdict):
    """One rubric criterion against the reference answer, on a 3-point scale (§10.4, §11.4); criteria are
    combined with fixed weights in code, never by the model."""

    criterion: str
    label: Literal["pass", "partial", "fail"]


class NuggetAssignment(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    nugget_id: str
    label: Literal["support", "partial_support", "not_support"]


class NuggetVerdict(Verdict):
    """Nugget assignment for one answer (§10.9): one label per nugget of the question."""

    assignments: list[NuggetAssignment]


@functools.cache
def _schema_of(cls: type[Verdict]) -> dict[str, Any]:
    return cls.model_json_schema()


# ---------------------------------------------------------------------------------------------- requests
@dataclass(frozen=True)
class ItemKey:
    """Where a judgement belongs: joined to ``results`` by (run_id, query_id, trial); ``item`` names the
    judgement inside it (``claims``, ``support:3``, ``nugget:n2``)."""

    run_id: str
    query_id: str
    trial: int
    item: str


@dataclass(frozen=True)
class JudgeRequest:
    """One judge call to make. ``system`` is the frozen rubric (the cacheable prefix), ``user`` the item.

    ``rubric_sha`` and ``prompt_sha`` pin the rubric file and the prompt template the ``user`` text was
    rendered from; they default to the sha of ``system`` and of ``user`` when not given."""

    key: ItemKey
    judge: str
    verdict_type: type[Verdict]
    system: str
    user: str
    rubric_sha: str = ""
    prompt_sha: str = ""

    def __post_init__(self) -> None:
        if not self.rubric_sha:
            object.__setattr__(self, "rubric_sha", sha256_text(self.system))
        if not self.prompt_sha:
            object.__setattr__(self, "prompt_sha", sha256_text(self.user))


@dataclass(frozen=True)
class Sampling:
    """The judge identity beyond the prompt (§10.8, §11.6): model id, effort, temperature, top_p, max_tokens
    and the thinking budget. Every field decides the response, so every field is in the request sha."""

    model: str
    max_tokens: int = 1024
    temperature: float | None = None
    effort: str | None = None
    top_p: float | None = None
    thinking_budget: int | None = None


def request_sha(provider: str, sampling: Sampling, request: JudgeRequest) -> str:
    """sha256 of everything that decides the response: provider, model, sampling settings, rubric, user
    text and the verdict schema. The item key is not part of it, so the same question asked for another
    run, query or trial is answered from the cache. The base URL and the API key are not part of it either
    (the key must never be hashed into a stored value that could be brute-forced)."""
    body = {
        "provider": provider,
        "model": sampling.model,
        "max_tokens": sampling.max_tokens,
        "temperature": sampling.temperature,
        "effort": sampling.effort,
        "system": request.system,
        "user": request.user,
        "schema": request.verdict_type.json_schema(),
    }
    # settings added later enter the sha only when set, so every request made before them keeps its sha
    # (and its paid answer in the cache)
    for key in ("top_p", "thinking_budget"):
        if getattr(sampling, key) is not None:
            body[key] = getattr(sampling, key)
    blob = json.dumps(
        body,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------- records
class CallRecord(BaseModel):
    """One row of the store's ``judge_calls``: the pins, the outcome and the bill of one judgement.

    A cache hit is a row with ``cache_hit = true``, ``attempts = 0`` and zero tokens and cost: nothing was
    paid for it in this run (the paid original is the row with the same ``request_sha`` and
    ``cache_hit = false``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    query_id: str
    trial: int = Field(ge=0)
    item: str
    judge: str
    request_sha: str
    provider: str
    model: str
    rubric_sha: str | None
    prompt_sha: str | None
    temperature: float | None
    effort: str | None
    max_tokens: int | None
    outcome: Outcome
    reason: str | None = None
    verdict: dict[str, Any] | None = None
    stop_reason: str | None = None
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cached_tokens: int = Field(default=0, ge=0)
    cost: float = Field(default=0.0, ge=0)
    latency_ms: float | None = None
    attempts: int = Field(default=0, ge=0)
    cache_hit: bool = False
    created_at: datetime | None = None

    def to_row(self) -> dict[str, Any]:
        return self.model_dump()


@dataclass(frozen=True)
class Judgement:
    """The result for one request: its record and, for ``ok`` and ``cannot_judge``, the typed verdict."""

    record: CallRecord
    verdict: Verdict | None = field(default=None)

    @property
    def outcome(self) -> str:
        return self.record.outcome


def parse_verdict(verdict_type: type[Verdict], text: str | None) -> tuple[Outcome, Verdict | None, str | None]:
    """Classify a complete (not refused, not truncated) response body: ``ok``, ``cannot_judge`` or
    ``malformed`` with the reason. Nothing that fails the schema is ever turned into a verdict."""
    if text is None or not text.strip():
        return "malformed", None, "empty response"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return "malformed", None, f"not JSON ({exc.msg} at char {exc.pos})"
    if not isinstance(data, Mapping):
        return "malformed", None, f"expected a JSON object, got {type(data).__name__}"
    try:
        verdict = verdict_type.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        return "malformed", None, f"does not match {verdict_type.__name__}: {where}: {first['msg']}"
    if verdict.cannot_judge:
        return "cannot_judge", verdict, verdict.justification
    return "ok", verdict, None


__all__ = [
    "OUTCOMES",
    "PAID_OUTCOMES",
    "CallRecord",
    "ClaimsVerdict",
    "CriterionVerdict",
    "ItemKey",
    "JudgeRequest",
    "Judgement",
    "NuggetAssignment",
    "NuggetVerdict",
    "Outcome",
    "RelevanceVerdict",
    "Sampling",
    "SupportVerdict",
    "Verdict",
    "parse_verdict",
    "request_sha",
    "sha256_text",
]
