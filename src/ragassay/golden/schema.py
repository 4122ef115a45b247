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
    """A verbatim quote from one document and its graded relevance to the query (0–3); ``hop`` (1-based) names
    the hop of a multi-hop item this evidence serves (spec §12: retrieval sufficiency per hop)."""

    doc_id: str = Field(min_length=1)
    quote: str = Field(min_length=1)
    grade: StrictInt
    occurrence: StrictInt | None = Field(default=None, ge=1, description="1-based, for a quote that repeats")
    hop: StrictInt | None = Field(default=None, ge=1, le=2**31)

    _quote = field_validator("quote")(_not_blank)


def _is_none(v: Any) -> bool:
    return v is None


def _is_empty(v: Any) -> bool:
    return not v


class Subgoal(_Strict):
    """One weighted sub-goal of an agent task, for partial credit (spec §12.3): a verifier scores it 0–1."""

    id: Identifier
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    description: str | None = None

    @field_validator("weight", mode="before")
    @classmethod
    def _number(cls, v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError("must be a number > 0")
        return v


class ExpectedTool(_Strict):
    """A tool call the task should make: its ``name`` and, when given, the ``arguments`` it should carry
    (compared as canonical JSON; absent: any arguments match)."""

    name: str = Field(min_length=1)
    arguments: dict[str, Any] | None = None


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
    subgoals: list[Subgoal] = Field(default_factory=list)
    expected_tools: list[ExpectedTool] = Field(default_factory=list)

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
    # agent fields (spec §12), written only when given, so a plain set's built file is what it was
    hop: int | None = Field(default=None, ge=1, exclude_if=_is_none)


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
    subgoals: list[Subgoal] = Field(default_factory=list, exclude_if=_is_empty)
    expected_tools: list[ExpectedTool] = Field(default_factory=list, exclude_if=_is_empty)

    @property
    def hops(self) -> int:
        """The number of hops the evidence names (0: not a multi-hop item)."""
        return max((e.hop for e in self.evidence if e.hop is not None), default=0)

    def relevant(self, threshold: int = 2) -> list[Evidence]:
        return [e for e in self.evidence if e.grade >= threshold]
