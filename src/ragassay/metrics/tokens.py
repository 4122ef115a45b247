"""The offline token counter, token-level chunk metrics (spec §5.2) as interval arithmetic over a whole run,
and the chunking report card.

The counter, ``regex-wordpunct-v1``: a token is a maximal run of word characters or one non-space, non-word
character (regex ``\\w+|[^\\w\\s]``, Unicode-aware). It is not any model's tokenizer; it is stable across
machines and versions so budgets are comparable between runs. The pipeline sizes chunks and packs its budget
with it (``ragassay.pipeline.tokens`` names it there), the corpus check counts drift with it, and its name is
recorded in every run header. It lives here, the lowest layer that uses it.

Tokens are *positional* identities: token ``i`` of document ``d`` (that counter), never vocabulary ids, so
"the" in an irrelevant chunk is not a hit. A :class:`TokenSpace` lays every document's tokens end to end on
one integer line, so a span of canonical characters becomes a half-open token interval ``[lo, hi)`` and a
whole run becomes a few flat arrays.

For query q with evidence tokens ``t_e`` (the union of its evidence spans) and retrieved units ``R``:

* recall     = |t_e ∩ t_r| / |t_e|
* precision  = |t_e ∩ t_r| / Σ_{u∈R} |u|       (redundant tokens of overlapping units count every time)
* IoU        = |t_e ∩ t_r| / (|t_e| + Σ_{u∈R} |u| - |t_e ∩ t_r|)   (the union with redundancy paid, as in
  the Chroma report, so overlapping chunkers pay for repeats here too)
* Precision_Ω = precision when R is every unit of the chunking that holds an evidence token

where ``t_r`` is the *set* of retrieved tokens (Smith & Troynikov 2024, Chroma technical report). Undefined is
not zero: recall and Precision_Ω are NaN for a query without evidence, precision NaN when nothing was
retrieved, IoU NaN when both sets are empty.

Everything is computed over all queries at once on padded (queries x units) matrices: a row-wise sort and
cumulative maximum make each query's intervals disjoint without changing their union, after which unions are
sums of lengths and the intersection is the summed pairwise overlap of two disjoint families.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

TOKEN_COUNTER_NAME = "regex-wordpunct-v1"
_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Number of regex-wordpunct-v1 tokens in ``text`` (0 for empty or whitespace-only text)."""
    return len(_TOKEN.findall(text))


def token_spans(text: str) -> np.ndarray:
    """(n, 2) int64 array of [start, end) character offsets of the tokens of ``text``."""
    spans = [m.span() for m in _TOKEN.finditer(text)]
    return np.array(spans, dtype=np.int64).reshape(-1, 2)


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


def _padded(q: np.ndarray, lo: np.ndarray, hi: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, width) matrices of each query's intervals, padded with empty [0, 0)."""
    if len(q) and (np.diff(q) < 0).any():
        order = np.argsort(q, kind="stable")
        q, lo, hi = q[order], lo[order], hi[order]
    counts = np.bincount(q, minlength=n)[:n]
    width = int(counts.max()) if len(q) else 0
    if len(q) == n * width:  # every query has the same number of intervals: a reshape, no scatter
        return lo.reshape(n, width), hi.reshape(n, width)
    flat = q * width + (np.arange(len(q)) - np.repeat(np.cumsum(counts) - counts, counts))
    L = np.zeros(n * width, dtype=np.int64)
    H = np.zeros(n * width, dtype=np.int64)
    L[flat] = lo
    H[flat] = hi
    return L.reshape(n, width), H.reshape(n, width)
    return L, H


def _disjoint(L: np.ndarray, H: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's intervals made pairwise disjoint with the same union: sort by start, then start each
    interval where everything before it ends (an interval already covered becomes empty)."""
    order = np.argsort(L, axis=1)
    L = np.take_along_axis(L, order, axis=1)
    H = np.take_along_axis(H, order, axis=1)
    reach = np.maximum.accumulate(H, axis=1)
    L[:, 1:] = np.maximum(L[:, 1:], reach[:, :-1])
    return L, np.maximum(H, L)


def _covered(L: np.ndarray, H: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Length of [a, b) covered by one flat family of disjoint intervals sorted by start (and so by end)."""
    lengths = H - L
    before = np.concatenate([[0], np.cumsum(lengths)])

    def upto(x: np.ndarray) -> np.ndarray:  # covered length of (-inf, x)
        i = np.searchsorted(L, x, side="right") - 1
        j = np.maximum(i, 0)
        inside = np.clip(x - L[j], 0, lengths[j])
        return np.where(i >= 0, before[j] + inside, 0)

    return upto(b) - upto(a)

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


def _counts_numpy(n_queries, ev_q, ev_lo, ev_hi, ret_q, ret_lo, ret_hi):
    """(|t_e|, |t_r| with multiplicity, |t_e ∩ t_r|) per query, in numpy: the reference the compiled kernel
    is held to."""
    LE, HE = _disjoint(*_padded(ev_q, ev_lo, ev_hi, n_queries))
    LR, HR = _disjoint(*_padded(ret_q, ret_lo, ret_hi, n_queries))
    n_e = (HE - LE).sum(axis=1).astype(np.float64)
    n_r = np.bincount(ret_q, weights=(ret_hi - ret_lo).astype(np.float64), minlength=n_queries)[:n_queries]
    # Each query's block of the line starts at query * stride, so the rows laid end to end form one sorted,
    # disjoint family, and each evidence interval's overlap with its own query's units is a lookup.
    stride = int(max(HE.max(initial=0), HR.max(initial=0))) + 1
    if stride * max(n_queries, 1) >= 2**62:
        raise ValueError("token coordinates too large to give every query its own block")
    shift = (np.arange(n_queries, dtype=np.int64) * stride)[:, None]
    covered = _covered((LR + shift).ravel(), (HR + shift).ravel(), (LE + shift).ravel(), (HE + shift).ravel())
    inter = covered.reshape(LE.shape).sum(axis=1).astype(np.float64)
    return n_e, n_r, inter


def _csr(q: np.ndarray, lo: np.ndarray, hi: np.ndarray, n: int):
    if len(q) and (np.diff(q) < 0).any():
        order = np.argsort(q, kind="stable")
        q, lo, hi = q[order], lo[order], hi[order]
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(q, minlength=n)[:n], out=off[1:])
    return off, np.ascontiguousarray(lo), np.ascontiguousarray(hi)


def _counts_jit_csr(n_queries, ev_q, ev_lo, ev_hi, ret_q, ret_lo, ret_hi):
    from ragassay.metrics._interval_kernels import interval_counts

    eo, el, eh = _csr(ev_q, ev_lo, ev_hi, n_queries)
    ro, rl, rh = _csr(ret_q, ret_lo, ret_hi, n_queries)
    return interval_counts(eo, el, eh, ro, rl, rh)


def token_metrics(n_queries: int, ev_q, ev_lo, ev_hi, ret_q, ret_lo, ret_hi, *, engine: str = "jit") -> TokenMetrics:
    """Token recall, precision and IoU of every query of a run at once.

    ``ev_*``: evidence token intervals with their query index (overlapping evidence counts once);
    ``ret_*``: retrieved unit intervals (a multiset: each unit's length is paid in full). ``engine="jit"``
    runs one compiled pass over the run (numba, cached after the first call); ``"numpy"`` gives the same
    integers with array operations only.
    """
    if engine not in ("jit", "numpy"):
        raise ValueError(f"engine must be jit or numpy, got {engine!r}")
    ev_q, ev_lo, ev_hi = (np.asarray(x, dtype=np.int64) for x in (ev_q, ev_lo, ev_hi))
    ret_q, ret_lo, ret_hi = (np.asarray(x, dtype=np.int64) for x in (ret_q, ret_lo, ret_hi))
    _check("evidence", ev_q, ev_lo, ev_hi, n_queries)
    _check("retrieved", ret_q, ret_lo, ret_hi, n_queries)
    counts = _counts_numpy if engine == "numpy" else _counts_jit_csr
    n_e, n_r, inter = counts(n_queries, ev_q, ev_lo, ev_hi, ret_q, ret_lo, ret_hi)
    with np.errstate(invalid="ignore", divide="ignore"):
        recall = np.where(n_e > 0, inter / n_e, np.nan)
        precision = np.where(n_r > 0, inter / n_r, np.nan)
        union = n_e + n_r - inter
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
