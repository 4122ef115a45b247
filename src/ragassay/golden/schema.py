"""Golden-set records: the authoring form (quotes) and the built form (resolved spans)."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

STRATA = ("lexical", "paraphrase", "multi_hop", "long_tail", "tabular", "negative", "temporal")
SOURCES = ("human", "llm", "production")
MAX_GRADE = 3


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Nugget(_Strict):
    """An atomic fact a good answer should contain; `vital` ones it must contain (spec §10.9)."""

    id: str = Field(min_length=1)
    text: str = Field(min_length=1)
    vital: bool = True


class AuthoredEvidence(_Strict):
    """A verbatim quote from one document and its graded relevance to the query (0–3)."""

    doc_id: str = Field(min_length=1)
    quote: str = Field(min_length=1)
    grade: int
    occurrence: int | None = Field(default=None, ge=1, description="1-based, for a quote that repeats")


class AuthoredQuery(_Strict):
    query_id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    stratum: str = Field(min_length=1, pattern=r"^[a-z][a-z0-9_]*$")
    tags: list[str] = Field(default_factory=list)
    answerable: bool = True
    evidence: list[AuthoredEvidence] = Field(default_factory=list)
    reference_answer: str | None = None
    nuggets: list[Nugget] = Field(default_factory=list)
    source: Literal["human", "llm", "production"] = "human"
    created: dt.date | None = None

    @field_validator("created", mode="before")
    @classmethod
    def _date(cls, v):
        if isinstance(v, dt.datetime):
            return v.date()
        return v


class Evidence(_Strict):
    """A resolved evidence span: canonical offsets ``[start, end)`` into ``doc_id``."""

    doc_id: str
    start: int
    end: int
    grade: int
    quote: str
    match: Literal["exact", "whitespace", "punctuation"] = "exact"


class GoldenQuery(_Strict):
    query_id: str
    question: str
    stratum: str
    tags: list[str] = Field(default_factory=list)
    answerable: bool
    evidence: list[Evidence] = Field(default_factory=list)
    reference_answer: str | None = None
    nuggets: list[Nugget] = Field(default_factory=list)
    source: str = "human"
    created: str | None = None

    def relevant(self, threshold: int = 2) -> list[Evidence]:
        return [e for e in self.evidence if e.grade >= threshold]
