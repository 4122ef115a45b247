"""Golden-set records: the authoring form (quotes) and the built form (resolved spans)."""

from __future__ import annotations

import datetime as dt
import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, field_validator

STRATA = ("lexical", "paraphrase", "multi_hop", "long_tail", "tabular", "negative", "temporal")
SOURCES = ("human", "llm", "production", "synthetic")
MAX_GRADE = 3

# Authoring files are typed by hand: `grade: "3"` or `answerable: "false"` is a mistake to report, not a value
# to coerce (pydantic's lax mode would turn "false" into False and "3" into 3 without a word).
StrictInt = Annotated[int, Strict()]
StrictBool = Annotated[bool, Strict()]


def _identifier(v: str) -> str:
    # An id is written into TREC files and tables, where whitespace would split it.
    if not v or any(c.isspace() or not c.isprintable() for c in v):
        raise ValueError("must be non-empty, without whitespace or control characters")
    return v


def _not_blank(v: str) -> str:
    if not v.strip():
        raise ValueError("must contain non-whitespace text")
    return v


Identifier = Annotated[str, AfterValidator(_identifier)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Nugget(_Strict):
    """An atomic fact a good answer should contain; `vital` ones it must contain (spec §10.9)."""

    id: Identifier
    text: str = Field(min_length=1)
    vital: StrictBool = True

    _text = field_validator("text")(_not_blank)


class AuthoredEvidence(_Strict):
    """A verbatim quote from one document and its graded relevance to the query (0–3)."""

    doc_id: str = Field(min_length=1)
    quote: str = Field(min_length=1)
    grade: StrictInt
    occurrence: StrictInt | None = Field(default=None, ge=1, description="1-based, for a quote that repeats")

    _quote = field_validator("quote")(_not_blank)


class AuthoredQuery(_Strict):
    query_id: Identifier
    question: str = Field(min_length=1)
    stratum: str = Field(min_length=1, pattern=r"^[a-z][a-z0-9_]*$")
    tags: list[str] = Field(default_factory=list)
    answerable: StrictBool = True
    evidence: list[AuthoredEvidence] = Field(default_factory=list)
    reference_answer: str | None = None
    nuggets: list[Nugget] = Field(default_factory=list)
    source: Literal["human", "llm", "production", "synthetic"] = "human"
    created: dt.date | None = None

    _question = field_validator("question")(_not_blank)

    @field_validator("created", mode="before")
    @classmethod
    def _date(cls, v):
        if isinstance(v, dt.datetime):
            return v.date()
        if isinstance(v, int | float):
            # pydantic would read a number as seconds since 1970; an author meant a date
            raise ValueError("must be a date written as YYYY-MM-DD")
        return v


def _kappa(v: Any) -> Any:
    if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or math.isnan(v)):
        raise ValueError("must be a number between -1 and 1")
    return v


class AuthoredMeta(_Strict):
    """The top-level keys of an authoring file (YAML mapping, or the JSONL `{"type": "meta"}` line)."""

    dataset: str | None = None
    dataset_version: str | None = None
    description: str | None = None
    annotators: list[str] = Field(default_factory=list)
    kappa_binary: float | None = Field(default=None, ge=-1, le=1)
    kappa_graded: float | None = Field(default=None, ge=-1, le=1)
    hit_rule: str = "any_overlap"
    relevance_threshold: StrictInt = Field(default=2, ge=1, le=MAX_GRADE)
    generator: dict[str, Any] = Field(default_factory=lambda: {"kind": "human"})

    _k = field_validator("kappa_binary", "kappa_graded", mode="before")(_kappa)

    @field_validator("dataset", "dataset_version")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        return None if v is None else _not_blank(v)


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
