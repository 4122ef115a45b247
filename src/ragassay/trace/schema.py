"""The Trace schema: what every pipeline under test emits, one record per (query, trial).

A trace keeps the output of each stage that can change the evidence the generator sees (the candidates of
each retrieval branch, the fused list, the reranked list, the packed context and what the packer cut) next
to the answer, its citations and the outcome, so each stage can be scored on its own ("stage taps").
Units carry canonical character offsets, never labels: relevance is derived at scoring time.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

import ragassay

Outcome = Literal["answered", "abstained", "refused", "error"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Unit(_Strict):
    """One retrieved unit (chunk, passage, page, whole document) as canonical offsets [start, end).

    Span consistency (end >= start, len(text) == end - start) is checked by the enclosing :class:`Trace`
    in one pass over all its units, which keeps validating a trace of hundreds of units cheap.
    """

    unit_id: str = Field(min_length=1)
    doc_id: str = Field(min_length=1)
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    score: float | None = None
    rank: int | None = Field(default=None, ge=1)
    text: str | None = None
    tokens: int | None = Field(default=None, ge=0)


class Citation(_Strict):
    """A citation to a unit, optionally narrowed to a canonical span inside it."""

    unit_id: str = Field(min_length=1)
    doc_id: str | None = None
    start: int | None = Field(default=None, ge=0)
    end: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _span(self) -> Citation:
        if (self.start is None) != (self.end is None):
            raise ValueError(f"citation {self.unit_id}: give both start and end or neither")
        if self.start is not None and self.end < self.start:
            raise ValueError(f"citation {self.unit_id}: end {self.end} < start {self.start}")
        return self


class Trace(_Strict):
    """One (query, trial) through the pipeline.

    ``outcome`` is None for retrieval-only traces (e.g. imported TREC runs) that have no generation stage.
    ``packed_tokens`` must equal the sum of the packed units' token counts when all of them are known.
    """

    trace_id: str = Field(min_length=1)
    query_id: str = Field(min_length=1)
    trial: int = Field(default=0, ge=0)
    question: str | None = None
    branches: dict[str, list[Unit]] = Field(default_factory=dict)
    fused: list[Unit] = Field(default_factory=list)
    reranked: list[Unit] | None = None
    packed: list[Unit] = Field(default_factory=list)
    packed_tokens: int = Field(default=0, ge=0)
    cut: list[Unit] = Field(default_factory=list)
    answer: str | None = None
    citations: list[Citation] = Field(default_factory=list)
    outcome: Outcome | None = None
    error: str | None = None
    durations_ms: dict[str, float] = Field(default_factory=dict)
    tokens_in: int | None = Field(default=None, ge=0)
    tokens_out: int | None = Field(default=None, ge=0)
    cost: float | None = Field(default=None, ge=0)
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("citations", mode="before")
    @classmethod
    def _bare_ids(cls, v: Any) -> Any:
        # Systems that cite by unit id only may write plain strings.
        if isinstance(v, list):
            return [{"unit_id": c} if isinstance(c, str) else c for c in v]
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Trace:
        if self.outcome == "error" and not self.error:
            raise ValueError("outcome 'error' needs an 'error' message")
        if self.outcome == "answered" and self.answer is None:
            raise ValueError("outcome 'answered' needs an 'answer'")
        for where, units in self._all_units():
            for u in units:
                if u.end < u.start:
                    raise ValueError(f"{where}: unit {u.unit_id}: end {u.end} < start {u.start}")
                if u.text is not None and len(u.text) != u.end - u.start:
                    raise ValueError(f"{where}: unit {u.unit_id}: text has {len(u.text)} characters but "
                                     f"the span [{u.start}, {u.end}) has {u.end - u.start}")
        counts = [u.tokens for u in self.packed]
        if self.packed and all(c is not None for c in counts) and sum(counts) != self.packed_tokens:
            raise ValueError(
                f"packed_tokens {self.packed_tokens} != sum of packed unit tokens {sum(counts)}"
            )
        return self

    def _all_units(self):
        for name, units in self.branches.items():
            yield f"branches.{name}", units
        yield "fused", self.fused
        yield "reranked", self.reranked or []
        yield "packed", self.packed
        yield "cut", self.cut

    @property
    def key(self) -> tuple[str, int]:
        return (self.query_id, self.trial)


def trusted_units(spans: Sequence[tuple[str, str, int, int, str | None, int | None]],
                  ranked: Iterable[tuple[int, tuple[int, float | None]]], with_text: bool = False) -> list[Unit]:
    """:class:`Unit` objects from values that trusted code produced, without validation.

    ``spans[i]`` is ``(unit_id, doc_id, start, end, text, tokens)`` of unit i; ``ranked`` yields
    ``(rank, (i, score))``; ``text`` is kept only when ``with_text``. For producers only (the reference
    pipeline builds tens of thousands per run): each result is equal to, and dumps the same JSON as,
    ``Unit(...)`` with the same values. It sets the four slots pydantic's own constructor sets
    (``Unit.model_construct`` does the same but costs more than validating). All fields are set, so the
    units share one fields-set object: pydantic only ever adds names to it, and every name is already
    there. Data read from outside is validated (:class:`Trace`, the JSONL reader).
    """
    new, setattr_ = object.__new__, object.__setattr__
    fields_set = set(Unit.model_fields)
    out = []
    for rank, (i, score) in ranked:
        uid, doc, a, b, text, tokens = spans[i]
        u = new(Unit)
        setattr_(u, "__dict__", {"unit_id": uid, "doc_id": doc, "start": a, "end": b, "score": score,
                                 "rank": rank, "text": text if with_text else None, "tokens": tokens})
        setattr_(u, "__pydantic_fields_set__", fields_set)
        setattr_(u, "__pydantic_extra__", None)
        setattr_(u, "__pydantic_private__", None)
        out.append(u)
    return out


class RunHeader(_Strict):
    """First record of a trace file: what produced the traces, pinned by hashes.

    ``config_sha`` is sha256 (hex) of the canonical JSON of ``config`` (see :func:`config_sha`).
    ``durations_ms`` holds one-off stages (chunk, embed, index); ``stats`` holds counts such as the number of
    chunks and how many exceeded the embedder's token limit.
    """

    run_name: str = Field(min_length=1)
    source: str = "reference-pipeline"
    config: dict[str, Any] = Field(default_factory=dict)
    config_sha: str = ""
    corpus_digest: str | None = None
    dataset_version: str | None = None
    created: str = Field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    token_counter: str | None = None
    ragassay_version: str = ragassay.__version__
    durations_ms: dict[str, float] = Field(default_factory=dict)
    stats: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _sha(self) -> RunHeader:
        want = config_sha(self.config)
        if not self.config_sha:
            self.config_sha = want
        elif self.config_sha != want:
            raise ValueError(
                f"config_sha {self.config_sha[:12]}… does not match the config (sha {want[:12]}…); "
                "the config was edited after the run, or the sha was computed differently"
            )
        return self


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys, no whitespace and raw (non-escaped) Unicode: the hashing form."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def config_sha(config: dict[str, Any]) -> str:
    """sha256 hex digest of ``canonical_json(config)`` encoded as UTF-8."""
    return hashlib.sha256(canonical_json(config).encode("utf-8")).hexdigest()


def make_trace_id(config_sha_hex: str, query_id: str, trial: int) -> str:
    """Stable id for one (run config, query, trial): the first 16 hex digits of a sha256."""
    return hashlib.sha256(f"{config_sha_hex}\x00{query_id}\x00{trial}".encode()).hexdigest()[:16]
