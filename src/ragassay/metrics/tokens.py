"""Token-level chunk metrics (spec §5.2) as interval arithmetic over a whole run, and the chunking report card.

Tokens are *positional* identities: token ``i`` of document ``d`` (regex-wordpunct-v1, the pipeline's
counter), never vocabulary ids, so "the" in an irrelevant chunk is not a hit. A :class:`TokenSpace` lays every
document's tokens end to end on one integer line, so a span of canonical characters becomes a half-open
token interval ``[lo, hi)`` and a whole run becomes a few flat arrays.

For query q with evidence tokens ``t_e`` (the union of its evidence spans) and retrieved units ``R``:

* recall     = |t_e ∩ t_r| / |t_e|
* precision  = |t_e ∩ t_r| / Σ_{u∈R} |u|       (redundant tokens of overlapping units count every time)
* IoU        = |t_e ∩ t_r| / |t_e ∪ t_r|
* Precision_Ω = precision when R is every unit of the chunking that holds an evidence token

where ``t_r`` is the *set* of retrieved tokens (Smith & Troynikov 2024, Chroma technical report). Undefined is
not zero: recall and Precision_Ω are NaN for a query without evidence, precision NaN when nothing was
retrieved, IoU NaN when both sets are empty.

Everything is computed with sorting, cumulative maxima and bincounts over all queries at once: each
query's intervals are shifted into a disjoint block of the line (``query * stride``), so one union / one
sweep serves every query.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ragassay.pipeline.tokens import TOKEN_COUNTER_NAME, token_spans


class TokenSpace:
    """Maps (doc_id, canonical char start, end) to global positional token intervals."""

    def __init__(self, docs: dict[str, str]):
        self.doc_ids = sorted(docs)
        self.index = {d: i for i, d in enumerate(self.doc_ids)}
        self.starts: list[np.ndarray] = []
        self.ends: list[np.ndarray] = []
        offsets = [0]
        for d in self.doc_ids:
            sp = token_spans(docs[d])
            self.starts.append(sp[:, 0])
            self.ends.append(sp[:, 1])
            offsets.append(offsets[-1] + len(sp))
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.counter = TOKEN_COUNTER_NAME

    @classmethod
    def from_corpus(cls, corpus) -> TokenSpace:
        return cls({d.doc_id: d.text for d in corpus})

    @property
    def n_tokens(self) -> int:
        return int(self.offsets[-1])

    def intervals(self, doc_ids: Iterable[str], starts, ends) -> tuple[np.ndarray, np.ndarray]:
        """Global token intervals ``[lo, hi)`` of character spans: a token is inside a span when it overlaps
        it. One searchsorted per document, not per span."""
        doc_ids = np.asarray(list(doc_ids), dtype=object)
        starts = np.asarray(starts, dtype=np.int64)
        ends = np.asarray(ends, dtype=np.int64)
        lo = np.zeros(len(starts), dtype=np.int64)
        hi = np.zeros(len(starts), dtype=np.int64)
        if len(starts) == 0:
            return lo, hi
        codes = np.fromiter((self.index.get(d, -1) for d in doc_ids), dtype=np.int64, count=len(doc_ids))
        if (codes < 0).any():
            unknown = sorted({str(d) for d in doc_ids[codes < 0]})[:5]
            raise KeyError(f"doc_id(s) not in the corpus: {unknown}")
        for c in np.unique(codes):
            m = codes == c
            ts, te = self.starts[c], self.ends[c]
            lo[m] = np.searchsorted(te, starts[m], side="right") + self.offsets[c]
            hi[m] = np.searchsorted(ts, ends[m], side="left") + self.offsets[c]
        return lo, np.maximum(hi, lo)


def _union(group: np.ndarray, lo: np.ndarray, hi: np.ndarray, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint, sorted intervals covering the union of each group's intervals (in shifted coordinates)."""
    keep = hi > lo
    s = group[keep] * stride + lo[keep]
    e = group[keep] * stride + hi[keep]
    if len(s) == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(s) - 1]
    return s[first], reach[last]


def _measure(s: np.ndarray, e: np.ndarray, stride: int, n: int) -> np.ndarray:
    return np.bincount(s // stride, weights=(e - s).astype(np.float64), minlength=n)[:n]


def _intersection(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], stride: int,
                  n: int) -> np.ndarray:
    """Per-group length covered by both unions (each a set of disjoint intervals): a +1/-1 sweep where
    the running coverage is 2."""
    pos = np.concatenate([a[0], b[0], a[1], b[1]])
    step = np.concatenate([np.ones(len(a[0]) + len(b[0]), np.int64), -np.ones(len(a[1]) + len(b[1]), np.int64)])
    if len(pos) == 0:
        return np.zeros(n)
    # ends sort before starts at the same position, so touching intervals do not count as overlapping
    order = np.lexsort((step, pos))
    pos, step = pos[order], step[order]
    cover = np.cumsum(step)
    seg = (cover[:-1] == 2)
    length = (pos[1:] - pos[:-1])[seg]
    return np.bincount(pos[:-1][seg] // stride, weights=length.astype(np.float64), minlength=n)[:n]


@dataclass(frozen=True)
class TokenMetrics:
    """Per-query arrays (length n_queries); NaN where undefined."""

    recall: np.ndarray
    precision: np.ndarray
    iou: np.ndarray
    evidence_tokens: np.ndarray
    retrieved_tokens: np.ndarray  # with multiplicity: the tokens paid for
    hit_tokens: np.ndarray

    def to_dict(self) -> dict:
        return {k: getattr(self, k).tolist() for k in
                ("recall", "precision", "iou", "evidence_tokens", "retrieved_tokens", "hit_tokens")}


def _check(name: str, q: np.ndarray, lo: np.ndarray, hi: np.ndarray, n: int) -> None:
    if not (len(q) == len(lo) == len(hi)):
        raise ValueError(f"{name}: query, lo and hi arrays differ in length ({len(q)}, {len(lo)}, {len(hi)})")
    if len(q) and (q.min() < 0 or q.max() >= n):
        raise ValueError(f"{name}: query index outside [0, {n})")
    if len(lo) and ((lo < 0).any() or (hi < lo).any()):
        raise ValueError(f"{name}: intervals need 0 <= lo <= hi")


def token_metrics(n_queries: int, ev_q, ev_lo, ev_hi, ret_q, ret_lo, ret_hi) -> TokenMetrics:
    """Token recall, precision and IoU of every query of a run at once.

    ``ev_*``: evidence token intervals with their query index (overlapping evidence counts once);
    ``ret_*``: retrieved unit intervals (a multiset: each unit's length is paid in full).
    """
    ev_q, ev_lo, ev_hi = (np.asarray(x, dtype=np.int64) for x in (ev_q, ev_lo, ev_hi))
    ret_q, ret_lo, ret_hi = (np.asarray(x, dtype=np.int64) for x in (ret_q, ret_lo, ret_hi))
    _check("evidence", ev_q, ev_lo, ev_hi, n_queries)
    _check("retrieved", ret_q, ret_lo, ret_hi, n_queries)
    top = max(int(ev_hi.max()) if len(ev_hi) else 0, int(ret_hi.max()) if len(ret_hi) else 0)
    stride = top + 1
    if n_queries and stride * n_queries >= 2**62:
        raise ValueError("token coordinates too large to give every query its own block")
    ue = _union(ev_q, ev_lo, ev_hi, stride)
    ur = _union(ret_q, ret_lo, ret_hi, stride)
    n_e = _measure(*ue, stride, n_queries)
    n_ru = _measure(*ur, stride, n_queries)
    n_r = np.bincount(ret_q, weights=(ret_hi - ret_lo).astype(np.float64), minlength=n_queries)[:n_queries]
    inter = _intersection(ue, ur, stride, n_queries)
    with np.errstate(invalid="ignore", divide="ignore"):
        recall = np.where(n_e > 0, inter / n_e, np.nan)
        precision = np.where(n_r > 0, inter / n_r, np.nan)
        union = n_e + n_ru - inter
        iou = np.where(union > 0, inter / union, np.nan)
    return TokenMetrics(recall, precision, iou, n_e, n_r, inter)


def units_holding(chunk_lo, chunk_hi, ev_q, ev_lo, ev_hi) -> tuple[np.ndarray, np.ndarray]:
    """(query, chunk index) pairs, deduplicated, of every chunk that shares a token with an evidence interval.

    Chunks must be sorted with non-decreasing starts *and* ends (true of every chunker here, overlapping or
    not), so the chunks touching ``[a, b)`` are one contiguous index range found by two searchsorted calls.
    """
    chunk_lo = np.asarray(chunk_lo, dtype=np.int64)
    chunk_hi = np.asarray(chunk_hi, dtype=np.int64)
    if len(chunk_lo) > 1 and ((np.diff(chunk_lo) < 0).any() or (np.diff(chunk_hi) < 0).any()):
        raise ValueError("chunks must be sorted with non-decreasing starts and ends")
    ev_q, ev_lo, ev_hi = (np.asarray(x, dtype=np.int64) for x in (ev_q, ev_lo, ev_hi))
    live = ev_hi > ev_lo
    ev_q, ev_lo, ev_hi = ev_q[live], ev_lo[live], ev_hi[live]
    first = np.searchsorted(chunk_hi, ev_lo, side="right")
    stop = np.searchsorted(chunk_lo, ev_hi, side="left")
    count = np.maximum(stop - first, 0)
    q = np.repeat(ev_q, count)
    # chunk index = first + 0..count-1 for each evidence interval
    within = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    c = np.repeat(first, count) + within
    key = np.unique(q * max(len(chunk_lo), 1) + c)
    return key // max(len(chunk_lo), 1), key % max(len(chunk_lo), 1)


def precision_omega(n_queries: int, chunk_lo, chunk_hi, ev_q, ev_lo, ev_hi) -> np.ndarray:
    """Precision_Ω per query: the precision of retrieving every chunk that holds an evidence token."""
    q, c = units_holding(chunk_lo, chunk_hi, ev_q, ev_lo, ev_hi)
    chunk_lo = np.asarray(chunk_lo, dtype=np.int64)
    chunk_hi = np.asarray(chunk_hi, dtype=np.int64)
    m = token_metrics(n_queries, ev_q, ev_lo, ev_hi, q, chunk_lo[c], chunk_hi[c])
    has_ev = np.bincount(np.asarray(ev_q, dtype=np.int64), minlength=n_queries)[:n_queries] > 0
    return np.where(has_ev, m.precision, np.nan)


def pack_prefix(q, rank, tokens, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``stop`` packer over a whole run: for each query, units in rank order while the running token
    total stays within ``budget``; the first unit that does not fit ends the context.

    Returns (keep mask in input order, tokens used per query index 0..max(q)).
    """
    q = np.asarray(q, dtype=np.int64)
    rank = np.asarray(rank, dtype=np.float64)
    tokens = np.asarray(tokens, dtype=np.int64)
    if (tokens < 0).any():
        raise ValueError("token counts must be >= 0")
    order = np.lexsort((rank, q))
    qs, ts = q[order], tokens[order]
    csum = np.cumsum(ts)
    start = np.r_[True, qs[1:] != qs[:-1]] if len(qs) else np.zeros(0, bool)
    base = np.maximum.accumulate(np.where(start, csum - ts, 0)) if len(qs) else csum
    running = csum - base
    keep_sorted = running <= budget
    keep = np.empty(len(q), dtype=bool)
    keep[order] = keep_sorted
    n = int(q.max()) + 1 if len(q) else 0
    used = np.bincount(q[keep], weights=tokens[keep].astype(np.float64), minlength=n)
    return keep, used


@dataclass(frozen=True)
class ReportCard:
    """What one chunking costs and how it cuts the answers (spec §5.4)."""

    n_chunks: int
    size_mean: float
    size_p50: float
    size_p95: float
    size_min: int
    size_max: int
    n_spans: int
    tokens_per_span_mean: float  # tokens of the chunks needed to deliver a span whole
    chunks_per_span_mean: float
    chunks_per_span_p95: float
    spans_split: int  # spans no single chunk contains
    precision_omega_mean: float
    build_ms: float | None

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and v != v else v) for k, v in self.__dict__.items()}


def report_card(chunk_lo, chunk_hi, span_lo, span_hi, *, build_ms: float | None = None,
                omega: np.ndarray | None = None) -> ReportCard:
    """Report card of a chunking (chunks sorted as in :func:`units_holding`) over a set of answer spans."""
    chunk_lo = np.asarray(chunk_lo, dtype=np.int64)
    chunk_hi = np.asarray(chunk_hi, dtype=np.int64)
    span_lo = np.asarray(span_lo, dtype=np.int64)
    span_hi = np.asarray(span_hi, dtype=np.int64)
    sizes = chunk_hi - chunk_lo
    idx = np.arange(len(span_lo), dtype=np.int64)
    sq, sc = units_holding(chunk_lo, chunk_hi, idx, span_lo, span_hi)
    per_span = np.bincount(sq, minlength=len(span_lo))[: len(span_lo)].astype(np.float64)
    tok = np.bincount(sq, weights=sizes[sc].astype(np.float64), minlength=len(span_lo))[: len(span_lo)]
    whole = np.zeros(len(span_lo), dtype=bool)
    inside = (chunk_lo[sc] <= span_lo[sq]) & (chunk_hi[sc] >= span_hi[sq])
    whole[sq[inside]] = True
    live = span_hi > span_lo
    nan = float("nan")
    return ReportCard(
        n_chunks=len(sizes),
        size_mean=float(sizes.mean()) if len(sizes) else nan,
        size_p50=float(np.percentile(sizes, 50)) if len(sizes) else nan,
        size_p95=float(np.percentile(sizes, 95)) if len(sizes) else nan,
        size_min=int(sizes.min()) if len(sizes) else 0,
        size_max=int(sizes.max()) if len(sizes) else 0,
        n_spans=int(live.sum()),
        tokens_per_span_mean=float(tok[live].mean()) if live.any() else nan,
        chunks_per_span_mean=float(per_span[live].mean()) if live.any() else nan,
        chunks_per_span_p95=float(np.percentile(per_span[live], 95)) if live.any() else nan,
        spans_split=int((live & ~whole).sum()),
        precision_omega_mean=float(np.nanmean(omega)) if omega is not None and np.isfinite(omega).any() else nan,
        build_ms=build_ms,
    )
