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
import math
import operator
import os
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

import ragassay

Outcome = Literal["answered", "abstained", "refused", "error"]


# Offsets, counts and trials are stored as 64-bit integers; a larger number is a schema error, not an
# overflow deep inside scoring.
_BIG = 2**53
Duration = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _Strict(BaseModel):
    # NaN and infinities are written as JSON's NaN / Infinity, as json.dumps writes them, so a trace file
    # round-trips a non-finite score (which validation then reports) instead of turning it into null
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


class Unit(_Strict):
    """One retrieved unit (chunk, passage, page, whole document) as canonical offsets [start, end).

    The span is checked against the corpus, not here: :func:`validate_units` checks every unit of a run
    at once (doc known, 0 <= start <= end <= document length, ``text`` equal to the canonical span, finite
    score, no repeats in a list), so one bad unit is reported with its line and the rest of its trace
    still scores.
    """

    unit_id: str = Field(min_length=1)
    doc_id: str = Field(min_length=1)
    start: int = Field(ge=-_BIG, le=_BIG)
    end: int = Field(ge=-_BIG, le=_BIG)
    score: float | None = None
    rank: int | None = Field(default=None, ge=1, le=_BIG)
    text: str | None = None
    tokens: int | None = Field(default=None, ge=0, le=_BIG)


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


StepKind = Literal["tool", "retrieval"]


def _is_none(v: Any) -> bool:
    return v is None


class Step(_Strict):
    """One step of an agent's trajectory (spec §12): a tool call or a retrieval call.

    A tool call has its ``name`` (the tool), ``arguments`` and a ``result_digest`` (sha256 hex of the result
    as the agent saw it; ``result`` may keep a short readable excerpt for transcripts). A retrieval call has
    its ``query`` and its ranked ``units`` (canonical offsets, checked against the corpus like every other
    unit list); ``hop`` says which hop of a multi-hop item it serves (1-based; absent: the retrieval steps
    are hops 1, 2, … in order). ``duration_ms``, ``tokens_in``/``tokens_out`` and ``cost`` are the step's own;
    ``error`` is the tool's or retriever's error message when the step failed.
    """

    kind: StepKind
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    result_digest: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    result: str | None = None
    query: str | None = None
    units: list[Unit] = Field(default_factory=list)
    hop: int | None = Field(default=None, ge=1, le=_BIG)
    duration_ms: Duration | None = None
    tokens_in: int | None = Field(default=None, ge=0, le=_BIG)
    tokens_out: int | None = Field(default=None, ge=0, le=_BIG)
    cost: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    error: str | None = None

    @model_validator(mode="after")
    def _kind(self) -> Step:
        if self.kind == "retrieval" and self.query is None:
            raise ValueError(f"retrieval step {self.name!r} needs its 'query'")
        if self.kind == "tool" and self.units:
            raise ValueError(f"tool step {self.name!r} has 'units': only a retrieval step returns ranked units")
        return self


class Trace(_Strict):
    """One (query, trial) through the pipeline.

    ``outcome`` is None for retrieval-only traces (e.g. imported TREC runs) that have no generation stage.
    ``packed_tokens`` must equal the sum of the packed units' token counts when all of them are known.
    """

    trace_id: str = Field(min_length=1)
    query_id: str = Field(min_length=1)
    trial: int = Field(default=0, ge=0, le=_BIG)
    question: str | None = None
    branches: dict[str, list[Unit]] = Field(default_factory=dict)
    fused: list[Unit] = Field(default_factory=list)
    reranked: list[Unit] | None = None
    packed: list[Unit] = Field(default_factory=list)
    packed_tokens: int = Field(default=0, ge=0, le=_BIG)
    cut: list[Unit] = Field(default_factory=list)
    answer: str | None = None
    citations: list[Citation] = Field(default_factory=list)
    outcome: Outcome | None = None
    error: str | None = None
    durations_ms: dict[str, Duration] = Field(default_factory=dict)
    tokens_in: int | None = Field(default=None, ge=0, le=_BIG)
    tokens_out: int | None = Field(default=None, ge=0, le=_BIG)
    cost: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    # agent fields, written only when present, so a plain RAG trace's line is what it was
    steps: list[Step] = Field(default_factory=list, exclude_if=operator.not_)
    claimed_success: bool | None = Field(default=None, exclude_if=_is_none)
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
        counts = [u.tokens for u in self.packed]
        if self.packed and all(c is not None for c in counts) and sum(counts) != self.packed_tokens:
            raise ValueError(
                f"packed_tokens {self.packed_tokens} != sum of packed unit tokens {sum(counts)}"
            )
        return self

    def unit_lists(self) -> list[tuple[str, list[Unit]]]:
        """Every list of units with its field name (``branches.<name>``, fused, reranked, packed, cut)."""
        out = [(f"branches.{name}", units) for name, units in self.branches.items()]
        out += [("fused", self.fused), ("reranked", self.reranked or []), ("packed", self.packed),
                ("cut", self.cut)]
        out += [(f"steps[{i}].units", s.units) for i, s in enumerate(self.steps) if s.units]
        return out

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


RAW_OFFSETS_HINT = "offsets look like raw-file offsets; traces must use canonical offsets, see docs/traces.md"


@dataclass(frozen=True)
class UnitFailure:
    """One unit that cannot be scored: which trace (and its file line, when read from a file), which list
    and position (0-based, as in the JSON array), and why."""

    query_id: str
    trial: int
    field: str
    position: int
    message: str
    line: int | None = None

    def __str__(self) -> str:
        return f"query {self.query_id} trial {self.trial} {self.field}[{self.position}]: {self.message}"

    def located(self, source: str | os.PathLike | None = None) -> str:
        """``source:line: query … field[i]: message`` (the parts that are known)."""
        where = [str(source)] if source is not None else []
        if self.line is not None:
            where.append(str(self.line) if where else f"line {self.line}")
        return ":".join(where) + ": " + str(self) if where else str(self)


@dataclass
class UnitCheck:
    """The outcome of :func:`validate_units`: every failure, and which units scoring must not credit."""

    failures: list[UnitFailure] = field(default_factory=list)
    bad_mask: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool), repr=False)
    # the units' doc ids as codes into doc_ids (distinct, in order of first use), for scorers to reuse
    doc_code: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)
    doc_ids: list[str] = field(default_factory=list, repr=False)
    _bad: dict[tuple[str, int, str], set[int]] = field(default_factory=dict, repr=False)

    @property
    def count(self) -> int:
        return len(self.failures)

    def bad_positions(self, key: tuple[str, int], field_name: str) -> set[int]:
        """0-based positions of the failing units in list ``field_name`` of the trace with ``key``."""
        return self._bad.get((key[0], key[1], field_name), set())

    def messages(self, source: str | os.PathLike | None = None, limit: int | None = None) -> list[str]:
        return [f.located(source) for f in self.failures[:limit]]


def _doc_hint(doc_id: str, known: Mapping[str, Any]) -> str:
    stem = os.path.splitext(doc_id)[0]
    if stem != doc_id and stem in known:
        return f" (did you mean {stem!r}?)"
    folded = {d.casefold(): d for d in known} if len(known) < 100_000 else {}
    guess = folded.get(doc_id.casefold()) or folded.get(stem.casefold())
    return f" (did you mean {guess!r}?)" if guess else ""


def _texts(corpus: Any) -> tuple[Mapping[str, Any], bool]:
    """(doc_id -> document or text, whether values are documents with ``.text`` and ``.raw``)."""
    docs = getattr(corpus, "docs", corpus)
    if not isinstance(docs, Mapping):
        raise TypeError("corpus must be a Corpus or a mapping of doc_id to canonical text")
    first = next(iter(docs.values()), "")
    return docs, not isinstance(first, str)


@dataclass
class UnitColumns:
    """Units of many ranked lists as parallel columns, list after list, each list in rank order.

    Per list: ``keys`` (the owning trace's (query_id, trial)), ``fields`` (``branches.<name>``, fused, ...)
    and ``lengths``. Per unit: ``unit_id`` and ``doc_id`` (sequences of str), ``start``, ``end`` (int64),
    ``score`` (float64, NaN where absent, with ``has_score``), ``text`` (None where absent; the whole
    column None when no unit has text) and ``rank`` (float64, NaN where absent: a rank is an integer in
    [1, 2**53], which float64 holds exactly, so ``int(rank[i])`` is the record's value). Every reader and
    :meth:`from_traces` fill ``rank`` (all NaN when no unit has one); a whole column None means its
    producer did not record ranks, read as absent everywhere (:meth:`ranks`). Scoring never reads it (a
    list's order is its ranking); it is carried so a converted or re-written dataset keeps it. Readers
    build these straight from parsed JSON; traces build them with :meth:`from_traces`.
    """

    keys: Sequence[tuple[str, int]]
    fields: Sequence[str]
    lengths: np.ndarray
    unit_id: Sequence[str]
    doc_id: Sequence[str]
    start: np.ndarray
    end: np.ndarray
    score: np.ndarray
    has_score: np.ndarray
    text: Sequence[str | None] | None
    rank: np.ndarray | None = None

    def ranks(self) -> np.ndarray:
        """The ``rank`` column, all NaN when the producer recorded none."""
        return self.rank if self.rank is not None else np.full(len(self.start), math.nan)

    @classmethod
    def from_traces(cls, traces: Sequence[Trace]) -> UnitColumns:
        lists = [(t.key, name, units) for t in traces for name, units in t.unit_lists() if units]
        units = [u for _, _, us in lists for u in us]
        n = len(units)
        texts = [u.text for u in units]
        return cls(keys=[k for k, _, _ in lists], fields=[f for _, f, _ in lists],
                   lengths=np.fromiter((len(us) for _, _, us in lists), dtype=np.int64, count=len(lists)),
                   unit_id=[u.unit_id for u in units], doc_id=[u.doc_id for u in units],
                   start=np.fromiter((u.start for u in units), dtype=np.int64, count=n),
                   end=np.fromiter((u.end for u in units), dtype=np.int64, count=n),
                   score=np.fromiter((math.nan if u.score is None else u.score for u in units), dtype=np.float64,
                                     count=n),
                   has_score=np.fromiter((u.score is not None for u in units), dtype=bool, count=n),
                   text=texts if any(x is not None for x in texts) else None,
                   rank=np.fromiter((math.nan if u.rank is None else u.rank for u in units), dtype=np.float64,
                                    count=n))


_FACT_COLUMNS = ("query_id", "trial", "trace_id", "outcome", "error", "answer", "packed_tokens", "reranked",
                 "branches", "citations", "total_ms", "tokens_in", "tokens_out", "cost")


@dataclass(eq=False)
class TraceFacts:
    """The record fields scoring reads, as columns over a batch's traces (entry i belongs to trace i), so a
    reader that parsed the batch as columns need not build a :class:`Trace` per record:

    ``query_id``, ``trial``, ``trace_id``, ``outcome``, ``error``, ``answer``, ``packed_tokens``,
    ``tokens_in``, ``tokens_out``, ``cost`` (the trace's values), ``reranked`` (whether the record has a
    reranked list, empty or not), ``branches`` (its branch names in its own order), ``citations`` (its
    Citation list) and ``total_ms`` (``durations_ms["total"]``, None when absent).

    :attr:`traces` gives the Trace objects themselves (units stripped, as the batch readers yield them),
    made on first use by ``make`` for the readers that defer them.
    """

    query_id: list[str]
    trial: list[int]
    trace_id: list[str]
    outcome: list[str | None]
    error: list[str | None]
    answer: list[str | None]
    packed_tokens: list[int]
    reranked: list[bool]
    branches: list[Sequence[str]]
    citations: list[list[Citation]]
    total_ms: list[float | None]
    tokens_in: list[int | None]
    tokens_out: list[int | None]
    cost: list[float | None]
    make: Any = field(default=None, repr=False)  # () -> list[Trace]
    _traces: list[Trace] | None = field(default=None, repr=False)

    @classmethod
    def from_traces(cls, traces: Sequence[Trace]) -> TraceFacts:
        traces = list(traces)

        def col(name):
            return list(map(operator.attrgetter(name), traces))
        return cls(col("query_id"), col("trial"), col("trace_id"), col("outcome"), col("error"), col("answer"),
                   col("packed_tokens"), [t.reranked is not None for t in traces],
                   [tuple(t.branches) for t in traces], col("citations"),
                   [t.durations_ms.get("total") for t in traces], col("tokens_in"), col("tokens_out"), col("cost"),
                   _traces=traces)

    @classmethod
    def empty(cls) -> TraceFacts:
        return cls.from_traces([])

    def __len__(self) -> int:
        return len(self.query_id)

    @property
    def keys(self) -> list[tuple[str, int]]:
        """Each trace's (query_id, trial)."""
        return list(zip(self.query_id, self.trial, strict=True))

    @property
    def traces(self) -> list[Trace]:
        if self._traces is None:
            self._traces = self.make()
        return self._traces

    def select(self, idx: Sequence[int]) -> TraceFacts:
        """The traces at positions ``idx`` (ints), in that order."""
        idx = list(idx)
        if idx == list(range(len(self))):
            return self
        get = operator.itemgetter(*idx) if len(idx) > 1 else None

        def pick(column: list) -> list:
            if not idx:
                return []
            return list(get(column)) if get is not None else [column[idx[0]]]
        out = TraceFacts(*(pick(getattr(self, name)) for name in _FACT_COLUMNS))
        out.make = lambda: pick(self.traces)
        return out

    @staticmethod
    def concat(parts: Sequence[TraceFacts]) -> TraceFacts:
        parts = [p for p in parts if len(p)]
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return TraceFacts.empty()
        out = TraceFacts(*([x for p in parts for x in getattr(p, name)] for name in _FACT_COLUMNS))
        out.make = lambda: [t for p in parts for t in p.traces]
        return out


def first_index_codes(values: Sequence[str]) -> tuple[np.ndarray, dict[str, int]]:
    """Per value, the index of its first occurrence (equal values, equal codes), and value -> that index.

    One C-level dict pass: cheaper than sorting strings or building an Arrow dictionary."""
    first: dict[str, int] = {}
    codes = np.fromiter(map(first.setdefault, values, range(len(values))), dtype=np.int64, count=len(values))
    return codes, first


class CodedStrings(Sequence):
    """A sequence of str held as its :func:`dense_codes` (``codes``, read-only, and ``distinct``), for a
    reader whose column was already hash-encoded: the codes are not computed again, and the str per value
    is made only when the sequence is iterated or sliced (scoring reads the codes, and a handful of values
    through :meth:`take`). Never mutated after it is built. Equal to any sequence of the same strs."""

    __slots__ = ("codes", "distinct", "_values")

    def __init__(self, codes: np.ndarray, distinct: list[str], values: list[str] | None = None):
        codes.flags.writeable = False
        self.codes, self.distinct, self._values = codes, distinct, values

    @property
    def values(self) -> list[str]:
        """Every value, as a list (made once)."""
        if self._values is None:
            self._values = np.asarray(self.distinct, dtype=object)[self.codes].tolist() if len(self.codes) else []
        return self._values

    def take(self, idx: np.ndarray | Sequence[int]) -> list[str]:
        """The values at positions ``idx``, as a list."""
        idx = np.asarray(idx, dtype=np.int64)
        if not len(idx):
            return []
        return np.asarray(self.distinct, dtype=object)[self.codes[idx]].tolist()

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.values[i]
        return self.distinct[self.codes[i]]

    def __iter__(self):
        return iter(self.values)

    def __contains__(self, value) -> bool:
        return value in self.distinct

    def __eq__(self, other) -> bool:
        if isinstance(other, CodedStrings):
            return self.values == other.values
        return isinstance(other, Sequence) and not isinstance(other, str) and self.values == list(other)

    __hash__ = None  # mutable-sequence semantics, as the list it stands for

    def __repr__(self) -> str:
        return f"CodedStrings({self.values!r})"

    def __reduce__(self):
        return CodedStrings, (np.array(self.codes), self.distinct)

    def __arrow_array__(self, type=None) -> pa.Array:
        out = pa.DictionaryArray.from_arrays(pa.array(self.codes, pa.int64()), pa.array(self.distinct, pa.string()))
        return out.cast(type or pa.string())


def take_strs(values: Sequence[str], idx: np.ndarray) -> list[str]:
    """``[values[i] for i in idx]``, from the codes when ``values`` is a :class:`CodedStrings`."""
    if type(values) is CodedStrings:
        return values.take(idx)
    return [values[i] for i in np.asarray(idx, dtype=np.int64).tolist()]


def dense_codes(values: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Per value, a code 0..k-1 (equal values, equal codes; numbered in order of first occurrence), and the
    k distinct values in that order.

    Arrow's hash encoding (about twice the speed of a dict pass on a batch's unit ids); strings Arrow cannot
    hold (lone surrogates, which the json module lets through) take the dict pass."""
    if type(values) is CodedStrings:
        return values.codes, list(values.distinct)
    try:
        enc = pa.array(values, pa.string()).dictionary_encode()
    except (pa.ArrowException, UnicodeError, TypeError):
        enc = None
    if enc is not None and not enc.indices.null_count:
        return enc.indices.to_numpy().astype(np.int64), enc.dictionary.to_pylist()
    codes, first = first_index_codes(values)
    rank = np.zeros(len(values), dtype=np.int64)
    rank[np.fromiter(first.values(), dtype=np.int64, count=len(first))] = np.arange(len(first))
    return rank[codes], list(first)


def _stable_order(keys: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The order sorting rows by ``keys`` (first most significant; ties keep row order) and, along it,
    which rows start a new group of equal keys. The keys become one mixed-radix int64 when their ranges
    allow (one stable argsort); otherwise a lexsort."""
    n = len(keys[0])
    bounds = [(int(k.min()), int(k.max())) for k in keys]
    if math.prod(hi - lo + 1 for lo, hi in bounds) < 2**63:
        code = np.zeros(n, dtype=np.int64)
        for k, (lo, hi) in zip(keys, bounds, strict=True):
            code = code * (hi - lo + 1) + (k - lo)
        order = np.argsort(code, kind="stable")
        new = np.ones(n, dtype=bool)
        ordered = code[order]
        new[1:] = ordered[1:] != ordered[:-1]
        return order, new
    order = np.lexsort(tuple(reversed(keys)))
    new = np.ones(n, dtype=bool)
    new[1:] = np.any([k[order][1:] != k[order][:-1] for k in keys], axis=0)
    return order, new


# corpus -> {doc_id: canonical length}: a run validates batch after batch against one corpus, so the
# per-document lengths are read once, not once per batch. Weak keys, so a corpus is not kept alive by it;
# plain mappings (not weakly referable, and mutable) are measured on each call.
_DOC_LENGTHS: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()


def _doc_lengths(corpus: Any, docs: Mapping[str, Any], rich: bool) -> dict[str, int]:
    try:
        return _DOC_LENGTHS[corpus]
    except (KeyError, TypeError):
        pass
    lengths = {doc: len(d.text if rich else d) for doc, d in docs.items()}
    if rich:
        try:
            _DOC_LENGTHS[corpus] = lengths
        except TypeError:
            pass
    return lengths


def validate_units(traces: Sequence[Trace], corpus: Any,
                   lines: Mapping[tuple[str, int], int] | None = None) -> UnitCheck:
    """Check every unit of every trace against the corpus, in array passes over the whole run.

    ``corpus`` is a :class:`~ragassay.corpus.Corpus` (or a mapping doc_id -> canonical text, which loses
    only the raw-offset diagnosis); ``lines`` maps a trace's (query_id, trial) to its line in the file it
    came from, so each failure can name it. A unit fails, for the first of these reasons that applies:
    its doc_id is not in the corpus (with a "did you mean" hint when it matches a doc_id once a file
    extension or letter case is dropped); ``start < 0``; ``end < start``; ``end`` past the end of the
    canonical document; ``text`` given and not equal to ``canonical_text[start:end]`` (diagnosed as raw-file
    offsets when it equals the raw text there); a NaN or infinite ``score``; the same unit (same unit_id,
    or same doc, start and end) earlier in the same list. Every unit is counted once.
    """
    return validate_unit_columns(UnitColumns.from_traces(traces), corpus, lines)


def validate_unit_columns(cols: UnitColumns, corpus: Any,
                          lines: Mapping[tuple[str, int], int] | None = None) -> UnitCheck:
    """:func:`validate_units` on columns; the result's ``bad_mask`` flags the failing units in column order."""
    docs, rich = _texts(corpus)
    n = len(cols.start)
    check = UnitCheck()
    check.bad_mask = np.zeros(n, dtype=bool)
    if not n:
        return check
    lengths = cols.lengths
    owner = np.repeat(np.arange(len(lengths)), lengths)
    pos = np.arange(n) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    doc_code, doc_ids = dense_codes(cols.doc_id)
    check.doc_code, check.doc_ids = doc_code, doc_ids
    known = _doc_lengths(corpus, docs, rich)
    doc_len = np.fromiter((known.get(doc, -1) for doc in doc_ids), dtype=np.int64, count=len(doc_ids))
    start, end, score = cols.start, cols.end, cols.score
    length = doc_len[doc_code]

    reason = np.zeros(n, dtype=np.int8)  # 0 = fine; otherwise the first failing check, numbered below

    def flag(code: int, mask: np.ndarray) -> None:
        reason[(reason == 0) & mask] = code

    flag(1, length < 0)
    flag(2, start < 0)
    flag(3, end < start)
    flag(4, end > length)
    text_bad = np.zeros(n, dtype=bool)
    if cols.text is not None:
        # only the few units that carry text are compared (a run's packed units), and of them the ones
        # still valid, so their doc exists and the span lies inside it
        texts = cols.text
        given = np.fromiter((i for i, x in enumerate(texts) if x is not None), dtype=np.int64)
        for i in given[reason[given] == 0].tolist():
            d = docs[doc_ids[doc_code[i]]]
            text_bad[i] = (d.text if rich else d)[start[i]:end[i]] != texts[i]
    flag(5, text_bad)
    flag(6, cols.has_score & ~np.isfinite(score))
    # repeats within one list: the same unit_id, or the same (doc, start, end), after its first occurrence
    # (a list's units are consecutive in position order, so ties in row order are ties in position order)
    uid_code, _ = dense_codes(cols.unit_id)
    first_of = np.full(n, -1, dtype=np.int64)
    for keys in ((owner, uid_code), (owner, doc_code, start, end)):
        order, new = _stable_order(keys)
        head = np.maximum.accumulate(np.where(new, np.arange(n), 0))
        repeat = order[~new]
        first_of[repeat] = np.where(first_of[repeat] >= 0, first_of[repeat], pos[order[head[~new]]])
    flag(7, first_of >= 0)

    for i in np.flatnonzero(reason):
        name, key, code = cols.fields[owner[i]], cols.keys[owner[i]], int(reason[i])
        uid, doc, s, e = cols.unit_id[i], cols.doc_id[i], int(start[i]), int(end[i])
        d = docs.get(doc)
        if code == 1:
            msg = f"doc {doc!r} is not in the corpus{_doc_hint(doc, docs)}"
        elif code == 2:
            msg = f"start {s} is negative; offsets count canonical characters from 0"
        elif code == 3:
            msg = f"end {e} < start {s}"
        elif code == 4:
            msg = f"span [{s}, {e}) runs past the end of doc {doc!r} ({int(length[i])} characters)"
            if rich and e <= len(d.raw):
                msg += f"; {RAW_OFFSETS_HINT}"
        elif code == 5:
            canon, text = (d.text if rich else d), cols.text[i]
            msg = f"text does not match the canonical text of doc {doc!r} at [{s}, {e})"
            if len(text) != e - s:
                msg += f" (text has {len(text)} characters, the span {e - s})"
            if rich and d.raw[s:e] == text and d.raw != canon:
                msg += f"; {RAW_OFFSETS_HINT}"
        elif code == 6:
            msg = f"score {float(score[i])} is not a finite number"
        else:
            msg = (f"unit {uid!r} repeats {name}[{int(first_of[i])}] (same unit_id or same span); a list "
                   "may name each unit once")
        check.failures.append(UnitFailure(key[0], key[1], name, int(pos[i]), msg,
                                          lines.get(key) if lines is not None else None))
        check._bad.setdefault((key[0], key[1], name), set()).add(int(pos[i]))
    check.bad_mask = reason > 0
    return check
