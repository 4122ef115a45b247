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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ragassay.golden import EvidenceIndex, GoldenSet, HitRule
from ragassay.metrics import GradeMatrix, Semantics, evaluate
from ragassay.metrics.generation import exact_match, token_f1
from ragassay.trace import RunHeader, Trace, Unit

METRIC_VERSION = "ragassay-metrics-1"
DEFAULT_CUTOFFS = (1, 5, 10)
DEFAULT_FINAL_K = 10

@dataclass(frozen=True)
class ScoringOptions:
    hit_rule: str = "any_overlap"
    relevance_threshold: int = 2
    gain: str = "exp"
    ties: str = "given"
    cutoffs: tuple[int, ...] = DEFAULT_CUTOFFS

    def semantics(self) -> Semantics:
        return Semantics(relevance_level=self.relevance_threshold, gain=self.gain, ties=self.ties)

    def pins(self) -> dict:
        return {"hit_rule": str(HitRule.parse(self.hit_rule)), "relevance_threshold": self.relevance_threshold,
                "gain": self.gain, "ties": self.ties, "metric_version": METRIC_VERSION}


@dataclass
class ScoredRun:
    """Result rows as parallel columns, plus what could not be scored and why."""

    columns: dict[str, list] = field(default_factory=dict)
    n_traces: int = 0
    missing: list[tuple[str, int]] = field(default_factory=list)  # (query_id, trial) with no trace
    unknown: list[str] = field(default_factory=list)  # trace query ids the golden set lacks
    final_k: int = DEFAULT_FINAL_K
    metrics: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.columns.get("metric", []))


def _flatten(lists: Sequence[Sequence[Unit]]):
    """Units of many ranked lists -> (list index, rank (1-based), doc_ids, starts, ends)."""
    lengths = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
    total = int(lengths.sum())
    owner = np.repeat(np.arange(len(lists)), lengths)
    rank = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths) + 1
    docs = [u.doc_id for x in lists for u in x]
    starts = np.fromiter((u.start for x in lists for u in x), dtype=np.int64, count=total)
    ends = np.fromiter((u.end for x in lists for u in x), dtype=np.int64, count=total)
    return lengths, owner, rank, docs, starts, ends


class _Tap:
    """Span-credited grades and first-hit ranks for one ranked list per scored row."""

    def __init__(self, idx: EvidenceIndex, query_codes: np.ndarray,
                 lists: Sequence[Sequence[Unit]], rule: HitRule):
        self.lengths, owner, rank, docs, starts, ends = _flatten(lists)
        n_rows = len(lists)
        dc = np.fromiter((idx.doc_codes.get(d, -1) for d in docs), dtype=np.int64, count=len(docs))
        qc = query_codes[owner]
        keys = np.where((dc >= 0) & (qc >= 0), qc * idx.n_docs + dc, -1)
        unit, ev = idx.hit_pairs(keys, starts, ends, rule)
        # first rank at which each (row, evidence) pair is hit
        row_of, rank_of = owner[unit], rank[unit]
        order = np.lexsort((rank_of, ev, row_of))
        row_of, rank_of, ev, unit = row_of[order], rank_of[order], ev[order], unit[order]
        first = np.ones(len(order), dtype=bool)
        first[1:] = (row_of[1:] != row_of[:-1]) | (ev[1:] != ev[:-1])
        self.hit_row, self.hit_ev, self.hit_rank = row_of[first], ev[first], rank_of[first]
        # credited grade per unit: max grade among the spans it is the first to hit
        credited = np.zeros(len(docs), dtype=np.float64)
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


def score_traces(golden: GoldenSet, traces: Iterable[Trace], header: RunHeader | None = None,
                 options: ScoringOptions | None = None, *, trials: Sequence[int] | None = None,
                 keys: Sequence[tuple[str, int]] | None = None,
                 doc_lengths: dict[str, int] | None = None) -> ScoredRun:
    """Score every (golden query, trial) — or just ``keys`` — queries without a trace are scored as empty
    and listed in ``missing``; traces of queries the golden set lacks are listed in ``unknown``."""
    opt = options or ScoringOptions()
    rule = HitRule.parse(opt.hit_rule)
    traces = list(traces)
    by_key = {t.key: t for t in traces}
    unknown = sorted({t.query_id for t in traces if t.query_id not in golden})
    trial_ids = sorted(set(trials) if trials is not None else ({t.trial for t in traces} or {0}))
    rows: list[tuple[str, int]] = (list(keys) if keys is not None
                                   else [(q.query_id, tr) for tr in trial_ids for q in golden.queries])
    missing = [k for k in rows if k not in by_key]
    row_traces = [by_key.get(k) for k in rows]
    n = len(rows)

    idx = EvidenceIndex(golden)
    query_codes = np.fromiter((idx.query_codes[q] for q, _ in rows), dtype=np.int64, count=n)
    relevant_ev = idx.grade >= opt.relevance_threshold
    ev_query = idx.key // idx.n_docs
    n_rel_by_query = np.bincount(ev_query[relevant_ev], minlength=len(golden.queries)).astype(np.float64)
    n_rel = n_rel_by_query[query_codes]
    judged_lists = [[e.grade for e in golden[q].evidence] for q, _ in rows]
    sem = opt.semantics()
    final_k = _final_k(header)

    cols: dict[str, list] = {k: [] for k in ("query_id", "trial", "metric", "value")}

    def emit(metric: str, values: np.ndarray) -> None:
        cols["query_id"].extend(q for q, _ in rows)
        cols["trial"].extend(tr for _, tr in rows)
        cols["metric"].extend([metric] * n)
        cols["value"].extend(float(v) for v in values)

    def tap(lists) -> _Tap:
        return _Tap(idx, query_codes, lists, rule)

    def ranking(t: _Tap, metrics: list[str]) -> dict[str, np.ndarray]:
        gm = GradeMatrix(query_ids=np.asarray([f"{q}\x00{tr}" for q, tr in rows], dtype=object),
                         grades=t.grades if t.grades.shape[1] else np.full((n, 1), np.nan),
                         lengths=t.lengths, judged=_judged_matrix(judged_lists),
                         missing=np.asarray([rt is None for rt in row_traces]))
        res = evaluate(gm, metrics, sem)
        return {str(m): r.values for m, r in res.items()}

    branch_names = sorted({b for t in traces for b in t.branches})
    for b in branch_names:
        t = tap([rt.branches.get(b, []) if rt else [] for rt in row_traces])
        emit(f"recall@{b}_depth", t.recall_at(np.inf, relevant_ev, n_rel))
    # Which metrics exist depends on the traces' structure (a retrieval stage, a reranker, a generator),
    # never on whether a batch happens to have empty lists, so every batch of a run has the same metrics.
    has_retrieval = any(rt is not None and (rt.fused or rt.branches) for rt in row_traces)
    has_generation = any(rt is not None and (rt.outcome is not None or rt.packed) for rt in row_traces)
    fused = tap([rt.fused if rt else [] for rt in row_traces])
    if has_retrieval:
        emit("recall@fusion_depth", fused.recall_at(np.inf, relevant_ev, n_rel))
    has_rerank = any(rt is not None and rt.reranked is not None for rt in row_traces)
    final_lists = [(rt.reranked if rt.reranked is not None else rt.fused) if rt else [] for rt in row_traces]
    final = tap(final_lists) if has_rerank else fused
    if has_retrieval:
        for k in opt.cutoffs:
            emit(f"recall@{k}", final.recall_at(k, relevant_ev, n_rel))
        ranked = ranking(final, [f"ndcg@{k}" for k in opt.cutoffs] + [f"precision@{k}" for k in opt.cutoffs]
                         + [f"ndcg@{final_k}", f"rr@{final_k}", f"success@{final_k}"])
        for k in opt.cutoffs:
            emit(f"ndcg@{k}", ranked[f"ndcg@{k}"])
        for k in opt.cutoffs:
            emit(f"precision@{k}", ranked[f"precision@{k}"])
        emit("recall@final_k", final.recall_at(final_k, relevant_ev, n_rel))
        emit("ndcg@final_k", ranked[f"ndcg@{final_k}"])
        emit("rr@final_k", ranked[f"rr@{final_k}"])
        emit("success@final_k", ranked[f"success@{final_k}"])
    if has_rerank:
        pre = fused.recall_at(final_k, relevant_ev, n_rel)
        post = final.recall_at(final_k, relevant_ev, n_rel)
        defined = n_rel > 0
        pre_hit, post_hit = pre > 0, post > 0
        for name, mask in (("rerank_rescued", post_hit & ~pre_hit), ("rerank_broke", pre_hit & ~post_hit),
                           ("rerank_kept", pre_hit & post_hit), ("rerank_missed_both", ~pre_hit & ~post_hit)):
            emit(name, np.where(defined, mask.astype(np.float64), np.nan))
    packed_lists = [rt.packed if rt else [] for rt in row_traces]
    if has_generation:
        emit("recall@context", tap(packed_lists).recall_at(np.inf, relevant_ev, n_rel))
        emit("context_tokens", np.asarray([rt.packed_tokens if rt else np.nan for rt in row_traces], dtype=float))
    if any(rt is not None and rt.outcome is not None for rt in row_traces):
        for name, values in _generation_rows(golden, rows, row_traces, doc_lengths):
            emit(name, values)

    # per-row context columns, repeated for each metric row
    n_metrics = len(cols["metric"]) // n if n else 0
    stratum = [golden[q].stratum for q, _ in rows]
    latency = [rt.durations_ms.get("total") if rt else None for rt in row_traces]
    cols["stratum"] = stratum * n_metrics
    cols["latency_ms"] = latency * n_metrics
    cols["tokens_in"] = [rt.tokens_in if rt else None for rt in row_traces] * n_metrics
    cols["tokens_out"] = [rt.tokens_out if rt else None for rt in row_traces] * n_metrics
    cols["cost"] = [rt.cost if rt else None for rt in row_traces] * n_metrics
    cols["trace_id"] = [rt.trace_id if rt else None for rt in row_traces] * n_metrics
    cols["judged_fraction"] = [None] * (n * n_metrics)
    metrics = list(dict.fromkeys(cols["metric"]))
    return ScoredRun(cols, len(traces), missing, unknown, final_k, metrics)


def _judged_matrix(judged_lists: list[list[int]]) -> np.ndarray:
    width = max((len(j) for j in judged_lists), default=0) or 1
    out = np.full((len(judged_lists), width), np.nan)
    for i, j in enumerate(judged_lists):
        if j:
            out[i, :len(j)] = sorted(j, reverse=True)
    return out


def _final_k(header: RunHeader | None) -> int:
    cfg = (header.config if header else {}) or {}
    rr = cfg.get("reranker") or {}
    k = rr.get("final_k") if isinstance(rr, dict) else None
    return int(k) if k else DEFAULT_FINAL_K


def _generation_rows(golden: GoldenSet, rows, row_traces, doc_lengths):
    """Per-query generation metrics.

    - ``answer_f1``, ``answer_em``: SQuAD-normalized token F1 / exact match against the reference answer,
      for answerable queries; an abstention scores 0 (the question had an answer); refusals, errors and
      missing traces are undefined here and counted by ``refused`` / ``error``.
    - ``abstention_recall``: on unanswerable queries, 1 when the system abstained, 0 when it answered.
    - ``over_refusal``: on answerable queries, 1 when the system abstained, 0 when it answered.
    - ``refused``, ``error``: 1 when the provider refused / the pipeline failed (or the trace is missing).
    - ``citation_validity``: share of an answer's citations that resolve to a packed unit whose span lies
      inside its document; undefined for an answer without citations.
    """
    n = len(rows)
    f1 = np.full(n, np.nan)
    em = np.full(n, np.nan)
    abst_recall = np.full(n, np.nan)
    over = np.full(n, np.nan)
    refused = np.zeros(n)
    error = np.zeros(n)
    cite = np.full(n, np.nan)
    for i, ((qid, _), rt) in enumerate(zip(rows, row_traces, strict=True)):
        q = golden[qid]
        outcome = rt.outcome if rt is not None else "error"
        if outcome == "refused":
            refused[i] = 1
            continue
        if outcome == "error" or outcome is None:
            error[i] = 1
            continue
        abstained = outcome == "abstained"
        if q.answerable:
            over[i] = float(abstained)
            if q.reference_answer:
                f1[i] = 0.0 if abstained else token_f1(rt.answer or "", [q.reference_answer])
                em[i] = 0.0 if abstained else exact_match(rt.answer or "", [q.reference_answer])
        else:
            abst_recall[i] = float(abstained)
        if rt.citations and not abstained:
            packed = {u.unit_id: u for u in rt.packed}
            ok = 0
            for c in rt.citations:
                u = packed.get(c.unit_id)
                if u is None:
                    continue
                doc, s, e = (c.doc_id or u.doc_id), (c.start if c.start is not None else u.start), \
                    (c.end if c.end is not None else u.end)
                length = doc_lengths.get(doc) if doc_lengths is not None else None
                if doc_lengths is None or (length is not None and 0 <= s <= e <= length):
                    ok += 1
            cite[i] = ok / len(rt.citations)
    return [("answer_f1", f1), ("answer_em", em), ("abstention_recall", abst_recall), ("over_refusal", over),
            ("refused", refused), ("error", error), ("citation_validity", cite)]
