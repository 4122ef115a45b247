"""Scoring traces against a golden set: one value per (query, trial, metric), at every stage tap.

Labels come from evidence spans at scoring time (:mod:`ragassay.golden.labels`), so any chunking is
scored against the same key. Span-level semantics, stated once:

- **recall@k** = relevant evidence spans (grade >= threshold) hit by any of the top k units / relevant
  spans of the query. Two units hitting the same span count it once; one unit hitting two spans counts both.
- **ranking metrics** (ndcg, rr, precision, success, ap) run on unit grades where each evidence span is
  credited once, to the first unit that hits it: a unit's grade is the highest grade among the spans it
  is first to hit (0 if it only repeats spans already hit above it). Ideal gains are the evidence grades.
  Redundant units therefore earn nothing, and nDCG cannot exceed 1.
- A query with no relevant evidence (a negative query) has recall, ndcg, rr, ap and success undefined.

Stage taps (metric names): ``recall@<branch>_depth`` per retrieval branch over its whole candidate list;
``recall@fusion_depth`` over the fused list; on the final list (reranked if present, else fused) the
cutoffs ``recall@k``, ``ndcg@k``, ``precision@k`` and ``recall@final_k``, ``ndcg@final_k``,
``rr@final_k``, ``success@final_k``; ``recall@context`` over the packed context; rerank movement
indicators (``rerank_rescued``, ``rerank_broke``, ``rerank_kept``, ``rerank_missed_both`` at final_k);
and generation metrics (see :func:`_generation_rows`).

Every unit is checked against the corpus first (:func:`ragassay.trace.validate_units`). A unit that fails
keeps its rank but is credited with nothing (it hits no evidence and counts as unjudged), and it is
counted and reported; it is never silently "not relevant".

Undefined, not zero: ``recall@context`` and ``context_tokens`` are NaN for a trace that reports no units at
any stage (an answer-only trace has nothing to measure), and ``context_tokens`` is NaN when the packed
units carry no token counts and the trace gives no ``packed_tokens``. A missing or ``error`` trace is
scored as empty (0): a failure must cost the system.

Per row, ``judged_fraction`` is the share of the final list's top final_k units that overlap any labelled
evidence span of the query (any grade, 0 included); NaN for an empty list.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np
import pyarrow as pa

from ragassay.errors import InputError
from ragassay.golden import EvidenceIndex, GoldenSet, HitRule
from ragassay.metrics import GradeMatrix, Semantics, evaluate
from ragassay.metrics.generation import answer_tokens, token_f1_codes
from ragassay.metrics.semantics import tie_rule
from ragassay.trace import Citation, RunHeader, Trace, Unit, UnitCheck, validate_units
from ragassay.trace.schema import dense_codes, first_index_codes

METRIC_VERSION = "ragassay-metrics-1"
DEFAULT_CUTOFFS = (1, 5, 10)
DEFAULT_FINAL_K = 10
MAX_GRADE = 3


@dataclass(frozen=True)
class ScoringOptions:
    """The definitional choices of a scored run, checked when made (bad values raise :class:`InputError`)."""

    hit_rule: str = "any_overlap"
    relevance_threshold: int = 2
    gain: str = "exp"
    ties: str = "given"
    cutoffs: tuple[int, ...] = DEFAULT_CUTOFFS

    def __post_init__(self) -> None:
        HitRule.parse(self.hit_rule)
        t = self.relevance_threshold
        if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= MAX_GRADE:
            raise InputError(f"relevance threshold {t!r} is outside the grade scale 0-{MAX_GRADE}; relevant "
                             f"means grade >= threshold, so use 1, 2 or 3 (--threshold)")
        if self.gain not in ("exp", "linear"):
            raise InputError(f"unknown gain {self.gain!r}; use exp or linear (--gain)")
        if not self.cutoffs or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.cutoffs):
            raise InputError(f"cutoffs {self.cutoffs!r} must be positive integers, e.g. (1, 5, 10)")
        # one spelling per rule, so 'trec_eval' and 'trec_eval9' are the same pin in compare and gate
        object.__setattr__(self, "ties", tie_rule(self.ties))
        self.semantics()

    def semantics(self) -> Semantics:
        return Semantics(relevance_level=self.relevance_threshold, gain=self.gain, ties=self.ties)

    def pins(self) -> dict:
        return {"hit_rule": str(HitRule.parse(self.hit_rule)), "relevance_threshold": self.relevance_threshold,
                "gain": self.gain, "ties": self.ties, "metric_version": METRIC_VERSION}


def manifest_gain(manifest: dict | None) -> str:
    """The nDCG gain a golden set's manifest says its grades are meant for (``generator.gain``: a BEIR import
    says ``linear``, as BEIR reports nDCG), else ``exp``."""
    gen = (manifest or {}).get("generator")
    gain = gen.get("gain") if isinstance(gen, dict) else None
    return gain if gain in ("exp", "linear") else "exp"


@dataclass
class ScoredRun:
    """Result rows as parallel columns, plus what could not be scored and why."""

    columns: dict[str, list] = field(default_factory=dict)
    n_traces: int = 0
    missing: list[tuple[str, int]] = field(default_factory=list)  # (query_id, trial) with no trace
    unknown: list[str] = field(default_factory=list)  # trace query ids the golden set lacks
    final_k: int = DEFAULT_FINAL_K
    metrics: list[str] = field(default_factory=list)
    unit_check: UnitCheck = field(default_factory=UnitCheck)  # units that failed validation (not credited)

    def __len__(self) -> int:
        return len(self.columns.get("metric", []))


class Labels:
    """The golden set's evidence as arrays, built once per run and shared by every batch it scores."""

    def __init__(self, golden: GoldenSet, options: ScoringOptions):
        self.golden, self.options = golden, options
        self.index = idx = EvidenceIndex(golden)
        self.relevant_ev = idx.grade >= options.relevance_threshold
        ev_query = idx.key // idx.n_docs
        self.n_rel_by_query = np.bincount(ev_query[self.relevant_ev],
                                          minlength=len(golden.queries)).astype(np.float64)
        self._judged_counts, self._judged = _judged_by_query(idx)
        self.stratum = pa.array(list(map(attrgetter("stratum"), golden.queries)), pa.string())
        self._answers: _References | None = None

    @property
    def judged_by_query(self) -> dict[str, list[int]]:
        """Each query's labelled grades, descending (a repeated id: its last query's)."""
        return {q.query_id: sorted((e.grade for e in q.evidence), reverse=True) for q in self.golden.queries}

    def judged_matrix(self, query_codes: np.ndarray) -> np.ndarray:
        """Each row's labelled grades, descending, NaN-padded to the widest of these rows (at least 1)."""
        width = int(self._judged_counts[query_codes].max(initial=0)) or 1
        return self._judged[query_codes, :width]

    @property
    def references(self) -> _References:
        """Reference answers as token codes, built on first use (only runs with a generator need them)."""
        if self._answers is None:
            self._answers = _References(self.golden)
        return self._answers


class _References:
    """Per golden query (in golden-set order): answerable, whether it has a reference answer, and the
    reference's normalized tokens as codes into ``vocab`` (laid end to end, ``offsets`` per query)."""

    def __init__(self, golden: GoldenSet):
        qs = golden.queries
        self.answerable = np.fromiter((bool(q.answerable) for q in qs), dtype=bool, count=len(qs))
        self.has_ref = np.fromiter((bool(q.reference_answer) for q in qs), dtype=bool, count=len(qs))
        words, counts = answer_tokens([q.reference_answer if q.reference_answer else "" for q in qs])
        self.codes, self.vocab = first_index_codes(words)
        self.counts = counts
        self.offsets = np.cumsum(counts) - counts

    def gather(self, query_codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The reference token codes of these queries end to end, and their counts."""
        counts = self.counts[query_codes]
        start = np.repeat(self.offsets[query_codes] - np.cumsum(counts) + counts, counts)
        return self.codes[start + np.arange(int(counts.sum()))], counts


def _tap_of_lists(idx: EvidenceIndex, query_codes: np.ndarray, lists: Sequence[Sequence[Unit]], rule: HitRule,
                  bad: Sequence[set[int]] | None = None) -> _Tap:
    """A :class:`_Tap` over unit objects; ``bad[i]`` holds the positions in list i that failed validation."""
    lengths = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
    total = int(lengths.sum())
    dc = np.fromiter((idx.doc_codes.get(u.doc_id, -1) for x in lists for u in x), dtype=np.int64, count=total)
    if bad is not None:
        offsets = np.cumsum(lengths) - lengths
        drop = [offsets[i] + p for i, ps in enumerate(bad) for p in ps if p < lengths[i]]
        dc[np.asarray(drop, dtype=np.int64)] = -1
    starts = np.fromiter((u.start for x in lists for u in x), dtype=np.int64, count=total)
    ends = np.fromiter((u.end for x in lists for u in x), dtype=np.int64, count=total)
    return _Tap(idx, query_codes, lengths, dc, starts, ends, rule)


class _Tap:
    """Span-credited grades and first-hit ranks for one ranked list per scored row.

    ``lengths`` per row; per unit (row after row, in rank order) ``dc`` its evidence-index doc code (-1 for
    a doc without evidence or a unit that failed validation: it keeps its rank but can hit nothing),
    ``starts`` and ``ends``.
    """

    def __init__(self, idx: EvidenceIndex, query_codes: np.ndarray, lengths: np.ndarray, dc: np.ndarray,
                 starts: np.ndarray, ends: np.ndarray, rule: HitRule):
        self.lengths = lengths
        n_rows = len(lengths)
        owner = np.repeat(np.arange(n_rows), lengths)
        rank = np.arange(len(dc)) - np.repeat(np.cumsum(lengths) - lengths, lengths) + 1
        qc = query_codes[owner]
        keys = np.where((dc >= 0) & (qc >= 0), qc * idx.n_docs + dc, -1)
        self._owner, self._rank, self._keys, self._starts, self._ends = owner, rank, keys, starts, ends
        unit, ev = idx.hit_pairs(keys, starts, ends, rule)
        # first rank at which each (row, evidence) pair is hit
        row_of, rank_of = owner[unit], rank[unit]
        order = np.lexsort((rank_of, ev, row_of))
        row_of, rank_of, ev, unit = row_of[order], rank_of[order], ev[order], unit[order]
        first = np.ones(len(order), dtype=bool)
        first[1:] = (row_of[1:] != row_of[:-1]) | (ev[1:] != ev[:-1])
        self.hit_row, self.hit_ev, self.hit_rank = row_of[first], ev[first], rank_of[first]
        # credited grade per unit: max grade among the spans it is the first to hit
        credited = np.zeros(len(dc), dtype=np.float64)
        np.maximum.at(credited, unit[first], idx.grade[ev[first]])
        width = int(self.lengths.max(initial=0))
        self.grades = np.full((n_rows, width), np.nan)
        self.grades[owner, rank - 1] = credited
        self.n_rows = n_rows

    def recall_at(self, k: np.ndarray | int, relevant_ev: np.ndarray, n_rel: np.ndarray) -> np.ndarray:
        """Span-level recall@k per row; k may differ per row (an array) or be None-like (np.inf)."""
        kk = np.broadcast_to(np.asarray(k, dtype=np.float64), (self.n_rows,))
        ok = relevant_ev[self.hit_ev] & (self.hit_rank <= kk[self.hit_row])
        hits = np.bincount(self.hit_row[ok], minlength=self.n_rows).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n_rel > 0, hits / np.maximum(n_rel, 1), np.nan)

    def judged_fraction(self, idx: EvidenceIndex, k: int) -> np.ndarray:
        """Per row: share of the top k units that overlap any labelled span of the query; NaN if empty."""
        unit, _ = idx.hit_pairs(self._keys, self._starts, self._ends, HitRule("any_overlap"))
        touched = np.zeros(len(self._keys), dtype=bool)
        touched[unit] = True
        top = self._rank <= k
        num = np.bincount(self._owner[top & touched], minlength=self.n_rows).astype(np.float64)
        den = np.minimum(self.lengths, k).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 0, num / np.maximum(den, 1), np.nan)


def score_traces(golden: GoldenSet, traces: Iterable[Trace], header: RunHeader | None = None,
                 options: ScoringOptions | None = None, *, trials: Sequence[int] | None = None,
                 keys: Sequence[tuple[str, int]] | None = None, corpus: Any = None,
                 lines: Mapping[tuple[str, int], int] | None = None, labels: Labels | None = None) -> ScoredRun:
    """Score every (golden query, trial) — or just ``keys`` — queries without a trace are scored as empty
    and listed in ``missing``; traces of queries the golden set lacks are listed in ``unknown``.

    With ``corpus`` (a :class:`~ragassay.corpus.Corpus`, or a mapping doc_id -> canonical text) every unit is
    validated first and the failures, located by ``lines`` when given, are in ``ScoredRun.unit_check``;
    citations are checked against its document lengths. ``labels`` (from :class:`Labels`) saves rebuilding
    the evidence arrays when a run is scored batch by batch.
    """
    opt = options or ScoringOptions()
    rule = HitRule.parse(opt.hit_rule)
    lab = labels if labels is not None and labels.golden is golden and labels.options == opt \
        else Labels(golden, opt)
    idx, relevant_ev = lab.index, lab.relevant_ev
    traces = list(traces)
    check = validate_units(traces, corpus, lines) if corpus is not None else UnitCheck()
    doc_lengths = _doc_lengths(corpus)
    by_key = {t.key: t for t in traces}
    unknown = sorted({t.query_id for t in traces if t.query_id not in golden})
    trial_ids = sorted(set(trials) if trials is not None else ({t.trial for t in traces} or {0}))
    rows: list[tuple[str, int]] = (list(keys) if keys is not None
                                   else [(q.query_id, tr) for tr in trial_ids for q in golden.queries])
    missing = [k for k in rows if k not in by_key]
    row_traces = [by_key.get(k) for k in rows]
    n = len(rows)

    query_codes = np.fromiter((idx.query_codes[q] for q, _ in rows), dtype=np.int64, count=n)
    n_rel = lab.n_rel_by_query[query_codes]
    sem = opt.semantics()
    final_k = _final_k(header)

    cols: dict[str, list] = {k: [] for k in ("query_id", "trial", "metric", "value")}

    def emit(metric: str, values: np.ndarray) -> None:
        cols["query_id"].extend(q for q, _ in rows)
        cols["trial"].extend(tr for _, tr in rows)
        cols["metric"].extend([metric] * n)
        cols["value"].extend(float(v) for v in values)

    def tap(lists, names) -> _Tap:
        bad = [check.bad_positions(k, nm) if rt is not None else set()
               for k, rt, nm in zip(rows, row_traces, names, strict=True)] if check.count else None
        return _tap_of_lists(idx, query_codes, lists, rule, bad)

    def ranking(t: _Tap, metrics: list[str]) -> dict[str, np.ndarray]:
        gm = GradeMatrix(query_ids=np.asarray([f"{q}\x00{tr}" for q, tr in rows], dtype=object),
                         grades=t.grades if t.grades.shape[1] else np.full((n, 1), np.nan),
                         lengths=t.lengths, judged=lab.judged_matrix(query_codes),
                         missing=np.asarray([rt is None for rt in row_traces]))
        res = evaluate(gm, metrics, sem)
        return {str(m): r.values for m, r in res.items()}

    branch_names = sorted({b for t in traces for b in t.branches})
    for b in branch_names:
        t = tap([rt.branches.get(b, []) if rt else [] for rt in row_traces], [f"branches.{b}"] * n)
        emit(f"recall@{b}_depth", t.recall_at(np.inf, relevant_ev, n_rel))
    # Which metrics exist depends on the traces' structure (a retrieval stage, a reranker, a generator),
    # never on whether a batch happens to have empty lists, so every batch of a run has the same metrics.
    has_retrieval = any(rt is not None and (rt.fused or rt.branches) for rt in row_traces)
    has_generation = any(rt is not None and (rt.outcome is not None or rt.packed) for rt in row_traces)
    fused = tap([rt.fused if rt else [] for rt in row_traces], ["fused"] * n)
    if has_retrieval:
        emit("recall@fusion_depth", fused.recall_at(np.inf, relevant_ev, n_rel))
    has_rerank = any(rt is not None and rt.reranked is not None for rt in row_traces)
    final_lists = [(rt.reranked if rt.reranked is not None else rt.fused) if rt else [] for rt in row_traces]
    final_names = ["reranked" if rt is not None and rt.reranked is not None else "fused" for rt in row_traces]
    final = tap(final_lists, final_names) if has_rerank else fused
    if has_retrieval:
        ranked = ranking(final, ranking_metric_names(opt.cutoffs, final_k))
        for name, values in final_list_rows(final, ranked, opt.cutoffs, final_k, relevant_ev, n_rel):
            emit(name, values)
    if has_rerank:
        for name, values in rerank_rows(fused, final, final_k, relevant_ev, n_rel):
            emit(name, values)
    if has_generation:
        silent = np.fromiter((rt is not None and rt.outcome != "error" and not any(u for _, u in rt.unit_lists())
                              for rt in row_traces), dtype=bool, count=n)
        context = tap([rt.packed if rt else [] for rt in row_traces], ["packed"] * n)
        emit("recall@context", np.where(silent, np.nan, context.recall_at(np.inf, relevant_ev, n_rel)))
        emit("context_tokens", np.asarray([_context_tokens(rt) for rt in row_traces], dtype=float))
    if any(rt is not None and rt.outcome is not None for rt in row_traces):
        for name, values in _generation_rows(lab.references, query_codes, GenerationColumns.from_traces(row_traces),
                                             doc_lengths):
            emit(name, values)

    # per-row context columns, repeated for each metric row
    n_metrics = len(cols["metric"]) // n if n else 0
    stratum = [golden[q].stratum for q, _ in rows]
    latency = [rt.durations_ms.get("total") if rt else None for rt in row_traces]
    judged = final.judged_fraction(idx, final_k)
    cols["stratum"] = stratum * n_metrics
    cols["latency_ms"] = latency * n_metrics
    cols["tokens_in"] = [rt.tokens_in if rt else None for rt in row_traces] * n_metrics
    cols["tokens_out"] = [rt.tokens_out if rt else None for rt in row_traces] * n_metrics
    cols["cost"] = [rt.cost if rt else None for rt in row_traces] * n_metrics
    cols["trace_id"] = [rt.trace_id if rt else None for rt in row_traces] * n_metrics
    cols["judged_fraction"] = [None if np.isnan(j) else float(j) for j in judged] * n_metrics
    metrics = list(dict.fromkeys(cols["metric"]))
    return ScoredRun(cols, len(traces), missing, unknown, final_k, metrics, check)


def _context_tokens(rt: Trace | None) -> float:
    """Tokens the packer delivered: a missing or failed trace delivered 0; NaN when nothing says how many
    (no unit at any stage, or packed units without token counts and no ``packed_tokens``)."""
    if rt is None or rt.outcome == "error":
        return 0.0
    if rt.packed_tokens or (rt.packed and all(u.tokens is not None for u in rt.packed)):
        return float(rt.packed_tokens)
    if rt.packed or not any(u for _, u in rt.unit_lists()):
        return float("nan")
    return 0.0


def _doc_lengths(corpus: Any) -> dict[str, int] | None:
    if corpus is None:
        return None
    docs = getattr(corpus, "docs", corpus)
    return {d: len(getattr(v, "text", v)) for d, v in docs.items()}


def ranking_metric_names(cutoffs: Sequence[int], final_k: int) -> list[str]:
    """The ranking metrics the final list is evaluated for (ndcg, precision at each cutoff; the @final_k set)."""
    return ([f"ndcg@{k}" for k in cutoffs] + [f"precision@{k}" for k in cutoffs]
            + [f"ndcg@{final_k}", f"rr@{final_k}", f"success@{final_k}"])


def final_list_rows(final: _Tap, ranked: dict[str, np.ndarray], cutoffs: Sequence[int], final_k: int,
                    relevant_ev: np.ndarray, n_rel: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    """The final list's metric rows in their stored order; ``ranked`` holds the values of
    :func:`ranking_metric_names`. Shared by the whole-run and the streaming scorer."""
    for k in cutoffs:
        yield f"recall@{k}", final.recall_at(k, relevant_ev, n_rel)
    for k in cutoffs:
        yield f"ndcg@{k}", ranked[f"ndcg@{k}"]
    for k in cutoffs:
        yield f"precision@{k}", ranked[f"precision@{k}"]
    yield "recall@final_k", final.recall_at(final_k, relevant_ev, n_rel)
    yield "ndcg@final_k", ranked[f"ndcg@{final_k}"]
    yield "rr@final_k", ranked[f"rr@{final_k}"]
    yield "success@final_k", ranked[f"success@{final_k}"]


def rerank_rows(fused: _Tap, final: _Tap, final_k: int, relevant_ev: np.ndarray,
                n_rel: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    """Rerank movement at final_k per row: rescued, broke, kept, missed both (undefined without evidence)."""
    pre_hit = fused.recall_at(final_k, relevant_ev, n_rel) > 0
    post_hit = final.recall_at(final_k, relevant_ev, n_rel) > 0
    defined = n_rel > 0
    for name, mask in (("rerank_rescued", post_hit & ~pre_hit), ("rerank_broke", pre_hit & ~post_hit),
                       ("rerank_kept", pre_hit & post_hit), ("rerank_missed_both", ~pre_hit & ~post_hit)):
        yield name, np.where(defined, mask.astype(np.float64), np.nan)


def _judged_by_query(idx: EvidenceIndex) -> tuple[np.ndarray, np.ndarray]:
    """Per golden query, the count of its labelled grades and the :func:`_judged_matrix` row of them
    (descending, NaN-padded), from the evidence index's arrays in golden-set order; a repeated query id
    gets the grades of its last query, as a dict by id would give."""
    counts, grades = idx.evidence_counts, idx.grades_in_order
    owner = np.repeat(np.arange(len(counts)), counts)
    order = np.lexsort((-grades, owner))
    flat = grades[order].astype(np.float64)
    out = np.full((len(counts), int(counts.max(initial=0)) or 1), np.nan)
    out[owner, np.arange(len(flat)) - np.repeat(np.cumsum(counts) - counts, counts)] = flat
    code = idx.query_code_of
    if not np.array_equal(code, np.arange(len(code))):
        counts = counts[code]
        out = out[code, :int(counts.max(initial=0)) or 1]
    return counts, out


def _judged_matrix(judged_lists: Sequence[Sequence[int]]) -> np.ndarray:
    """Each list (grades already in descending order) as a row, NaN-padded to the longest (at least 1)."""
    counts = np.fromiter(map(len, judged_lists), dtype=np.int64, count=len(judged_lists))
    out = np.full((len(judged_lists), int(counts.max(initial=0)) or 1), np.nan)
    flat = np.fromiter(itertools.chain.from_iterable(judged_lists), dtype=np.float64, count=int(counts.sum()))
    within = np.arange(len(flat)) - np.repeat(np.cumsum(counts) - counts, counts)
    out[np.repeat(np.arange(len(counts)), counts), within] = flat
    return out


def _final_k(header: RunHeader | None) -> int:
    cfg = (header.config if header else {}) or {}
    rr = cfg.get("reranker") or {}
    k = rr.get("final_k") if isinstance(rr, dict) else None
    return int(k) if k else DEFAULT_FINAL_K


# outcome codes of GenerationColumns.outcome; a missing trace is an error
OUTCOME_CODES = {None: 0, "answered": 1, "abstained": 2, "refused": 3, "error": 4}
_NONE, _ANSWERED, _ABSTAINED, _REFUSED, _ERROR = range(5)


@dataclass
class GenerationColumns:
    """What the generation metrics read from each scored row's trace, as columns.

    Per row: ``outcome`` (:data:`OUTCOME_CODES`) and ``answer``. Per citation: its ``cite_row``, unit id,
    doc id (None when not given), span (``cite_span`` marks the citations that give one). Per packed unit:
    its ``packed_row``, unit id, doc id and span, each row's units in list order.
    """

    outcome: np.ndarray
    answer: Sequence[str | None]
    cite_row: np.ndarray
    cite_unit: Sequence[str]
    cite_doc: Sequence[str | None]
    cite_start: np.ndarray  # float64: exact below 2**53, and any offset above that is past every document
    cite_end: np.ndarray
    cite_span: np.ndarray
    packed_row: np.ndarray
    packed_unit: Sequence[str]
    packed_doc: Sequence[str]
    packed_start: np.ndarray
    packed_end: np.ndarray

    @classmethod
    def of(cls, outcome: np.ndarray, answer: Sequence[str | None], cited: Sequence[tuple[int, Sequence[Citation]]],
           packed: tuple[np.ndarray, Sequence[str], Sequence[str], np.ndarray, np.ndarray]) -> GenerationColumns:
        """Citations from ``cited`` ((row, citation list) pairs) and the packed units as (row, unit id, doc id,
        start, end) columns."""
        per = [c for _, c in cited]
        cites = list(itertools.chain.from_iterable(per))
        rows = np.repeat(np.fromiter((i for i, _ in cited), dtype=np.int64, count=len(cited)),
                         np.fromiter(map(len, per), dtype=np.int64, count=len(per)))
        start = _offsets(list(map(attrgetter("start"), cites)))
        return cls(outcome, answer, rows, list(map(attrgetter("unit_id"), cites)),
                   list(map(attrgetter("doc_id"), cites)), start, _offsets(list(map(attrgetter("end"), cites))),
                   ~np.isnan(start), *packed)

    @classmethod
    def from_traces(cls, row_traces: Sequence[Trace | None]) -> GenerationColumns:
        present = [(i, rt) for i, rt in enumerate(row_traces) if rt is not None]
        outcome = np.full(len(row_traces), _ERROR, dtype=np.int8)
        outcome[[i for i, _ in present]] = [OUTCOME_CODES[rt.outcome] for _, rt in present]
        units = [(i, u) for i, rt in present for u in rt.packed]
        k = len(units)
        packed = (np.fromiter((i for i, _ in units), dtype=np.int64, count=k), [u.unit_id for _, u in units],
                  [u.doc_id for _, u in units], np.fromiter((u.start for _, u in units), dtype=np.int64, count=k),
                  np.fromiter((u.end for _, u in units), dtype=np.int64, count=k))
        return cls.of(outcome, [rt.answer if rt is not None else None for rt in row_traces],
                      [(i, rt.citations) for i, rt in present], packed)


def _offsets(values: list[int | None]) -> np.ndarray:
    """Citation offsets (ints >= 0, or None) as float64 with NaN for None; beyond float range, clamped."""
    try:
        return np.asarray(values, dtype=np.float64)
    except OverflowError:
        return np.asarray([None if v is None else min(v, 2**64) for v in values], dtype=np.float64)


def _generation_rows(refs: _References, query_codes: np.ndarray, g: GenerationColumns,
                     doc_lengths: Mapping[str, int] | None) -> list[tuple[str, np.ndarray]]:
    """Per-query generation metrics, over all rows at once.

    - ``answer_f1``, ``answer_em``: SQuAD-normalized token F1 / exact match against the reference answer,
      for answerable queries; an abstention scores 0 (the question had an answer); refusals, errors and
      missing traces are undefined here and counted by ``refused`` / ``error``.
    - ``abstention_recall``: on unanswerable queries, 1 when the system abstained, 0 when it answered.
    - ``over_refusal``: on answerable queries, 1 when the system abstained, 0 when it answered.
    - ``refused``, ``error``: 1 when the provider refused / the pipeline failed (or the trace is missing).
    - ``citation_validity``: share of an answer's citations that resolve to a packed unit (the last one with
      that unit id) whose span — the citation's own doc and span where it gives them — lies inside its
      document; undefined for an answer without citations.
    """
    oc = g.outcome
    answerable, has_ref = refs.answerable[query_codes], refs.has_ref[query_codes]
    answered, abstained = oc == _ANSWERED, oc == _ABSTAINED
    live = answered | abstained
    f1 = np.where(live & answerable & has_ref & abstained, 0.0, np.nan)
    em = f1.copy()
    scored = np.flatnonzero(answered & answerable & has_ref)
    words, counts = answer_tokens([g.answer[i] or "" for i in scored.tolist()])
    pred = np.fromiter(map(refs.vocab.get, words, itertools.repeat(-1)), dtype=np.int64, count=len(words))
    gold, gold_counts = refs.gather(query_codes[scored])
    f1[scored], em[scored] = token_f1_codes(pred, counts, gold, gold_counts)
    over = np.where(live & answerable, abstained, np.nan)
    abst_recall = np.where(live & ~answerable, abstained, np.nan)
    refused = (oc == _REFUSED).astype(np.float64)
    error = ((oc == _ERROR) | (oc == _NONE)).astype(np.float64)
    return [("answer_f1", f1), ("answer_em", em), ("abstention_recall", abst_recall), ("over_refusal", over),
            ("refused", refused), ("error", error), ("citation_validity", _citation_validity(g, answered, doc_lengths))]


def _citation_validity(g: GenerationColumns, answered: np.ndarray,
                       doc_lengths: Mapping[str, int] | None) -> np.ndarray:
    """``citation_validity`` per row (see :func:`_generation_rows`); rows of answers that cite something."""
    n = len(answered)
    n_cite = np.bincount(g.cite_row, minlength=n)
    checked = answered & (n_cite > 0)
    out = np.full(n, np.nan)
    if not checked.any():
        return out
    sel = np.flatnonzero(checked[g.cite_row])
    n_packed = len(g.packed_unit)
    codes, _ = first_index_codes(list(g.packed_unit) + [g.cite_unit[i] for i in sel.tolist()])
    width = max(len(codes), 1)
    pk = g.packed_row * width + codes[:n_packed]
    ck = g.cite_row[sel] * width + codes[n_packed:]
    # the unit a citation resolves to: the last packed unit of its row with its unit id
    order = np.argsort(pk, kind="stable")
    sk = pk[order]
    last = np.ones(len(sk), dtype=bool)
    last[:-1] = sk[1:] != sk[:-1]
    uk, ui = sk[last], order[last]
    j = np.minimum(np.searchsorted(uk, ck), max(len(uk) - 1, 0))
    found = np.flatnonzero(uk[j] == ck) if len(uk) else np.zeros(0, dtype=np.int64)
    unit, cite = ui[j[found]], sel[found]
    span = g.cite_span[cite]
    s = np.where(span, g.cite_start[cite], g.packed_start[unit])
    e = np.where(span, g.cite_end[cite], g.packed_end[unit])
    if doc_lengths is None:
        ok = np.ones(len(cite), dtype=bool)
    else:
        given = _objects(g.cite_doc)[cite]
        docs = np.where(np.fromiter(map(bool, given), dtype=bool, count=len(given)), given,
                        _objects(g.packed_doc)[unit])
        code, distinct = dense_codes(docs.tolist())
        length = np.fromiter(map(doc_lengths.get, distinct, itertools.repeat(-1)), dtype=np.int64,
                             count=len(distinct))[code]
        ok = (length >= 0) & (0 <= s) & (s <= e) & (e <= length)
    valid = np.bincount(g.cite_row[cite[ok]], minlength=n)
    out[checked] = valid[checked] / n_cite[checked]
    return out


def _objects(values: Sequence) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out
