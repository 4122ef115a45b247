"""ANN index evaluation: recall against exact search, latency, cost, filtered search, churn, quantization.

Two different "recalls" live here and are never mixed up:

* **ANN recall@k** (a property of the index): the share of the exact top-k of the *same* vectors that the
  approximate index returned, ``|returned ∩ exact_k| / k``. No labels are needed.
* **retrieval recall@k** (a property of the whole pipeline): the share of a query's relevant golden
  evidence spans hit by the top-k units (:func:`ragassay.golden.labels.span_recall_at_k`, the definition
  used when scoring runs; it reads golden labels, so it lives with them, a layer above this module).

Ground truth is exact inner-product search in float64. So that BLAS summation order (thread count, SIMD
width) cannot move a result, a returned id counts as a true neighbour when its float64 score is at least
the exact k-th score minus ``tie_tol``: ties (and near-ties below the tolerance) at the k-th place are all
correct answers, and the count per query is capped at k. With no ties this is exactly
``|returned ∩ exact top-k| / k``.

Vectors are compared by inner product (cosine when rows are L2-normalized, as the reference pipeline's
are). Index kinds are faiss structures: ``flat`` (exact), ``hnsw`` (knob ``efSearch``), ``ivf`` (knob
``nprobe``), ``sq8`` (8-bit scalar quantization), ``pq`` (product quantization) and ``binary`` (sign bits,
Hamming search, then exact rescoring of ``rescore`` x k candidates with the float vectors).

References: Aumüller et al., "ANN-Benchmarks" (2020) for recall@k against exact search and the
recall/throughput curve; Malkov & Yashunin (2018) for HNSW; Jégou et al. (2011) for PQ.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ragassay.errors import InputError

KINDS = ("flat", "hnsw", "ivf", "sq8", "pq", "binary")
KNOBS = {"hnsw": "efSearch", "ivf": "nprobe", "binary": "rescore"}
DEFAULT_TIE_TOL = 1e-6
_GT_CHUNK_BYTES = 64 * 1024 * 1024


# ---- validation ----------------------------------------------------------------------------------------

def as_vectors(x, name: str, dim: int | None = None) -> np.ndarray:
    """``x`` as a C-contiguous float32 (n, d) matrix of finite values; InputError naming ``name`` otherwise."""
    a = np.asarray(x)
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
        raise InputError(f"{name}: need a non-empty 2-D array (rows x dims), got shape {a.shape}")
    if a.dtype.kind not in "fiu":
        raise InputError(f"{name}: need numeric vectors, got dtype {a.dtype}")
    a = np.ascontiguousarray(a, dtype=np.float32)
    if not np.isfinite(a).all():
        raise InputError(f"{name}: contains NaN or infinite values; remove or re-embed those rows")
    if dim is not None and a.shape[1] != dim:
        raise InputError(f"{name}: vectors have {a.shape[1]} dims but the base vectors have {dim}")
    return a


def _check_k(k: int, n: int) -> int:
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(f"k must be a positive integer, got {k!r}")
    return int(min(k, n))


# ---- exact ground truth and ANN recall -----------------------------------------------------------------

@dataclass(frozen=True)
class GroundTruth:
    """Exact top-k per query: ids and float64 scores sorted by score descending then id ascending (-1 /
    -inf pad rows with fewer than k allowed vectors); ``kth`` is the score every true neighbour reaches and
    ``n_true`` how many neighbours each query can have (min(k, allowed vectors))."""

    ids: np.ndarray
    scores: np.ndarray
    kth: np.ndarray
    n_true: np.ndarray
    k: int


def exact_topk(base, queries, k: int, allowed: np.ndarray | None = None) -> GroundTruth:
    """Exact inner-product top-k of each query over ``base`` (only rows where ``allowed`` is True)."""
    base = as_vectors(base, "base")
    queries = as_vectors(queries, "queries", base.shape[1])
    n = base.shape[0]
    k = _check_k(k, n)
    mask = None
    if allowed is not None:
        mask = np.asarray(allowed, dtype=bool)
        if mask.shape != (n,):
            raise InputError(f"allowed: need one flag per base vector ({n}), got shape {mask.shape}")
    b64 = base.astype(np.float64)
    q = queries.shape[0]
    ids = np.full((q, k), -1, dtype=np.int64)
    scores = np.full((q, k), -np.inf)
    rows = max(1, _GT_CHUNK_BYTES // (8 * n))
    for s in range(0, q, rows):
        sc = queries[s : s + rows].astype(np.float64) @ b64.T
        if mask is not None:
            sc[:, ~mask] = -np.inf
        part = np.argpartition(-sc, k - 1, axis=1)[:, :k] if k < n else np.broadcast_to(np.arange(n), sc.shape)
        ps = np.take_along_axis(sc, part, axis=1)
        order = np.lexsort((part, -ps), axis=1)
        ids[s : s + rows] = np.take_along_axis(part, order, axis=1)
        scores[s : s + rows] = np.take_along_axis(ps, order, axis=1)
    n_allowed = n if mask is None else int(mask.sum())
    ids[~np.isfinite(scores)] = -1
    n_true = np.full(q, min(k, n_allowed), dtype=np.int64)
    kth = np.where(n_true > 0, scores[np.arange(q), np.maximum(n_true - 1, 0)], np.inf)
    return GroundTruth(ids=ids, scores=scores, kth=kth, n_true=n_true, k=k)


def ann_recall(found: np.ndarray, base, queries, truth: GroundTruth, *, allowed: np.ndarray | None = None,
               tie_tol: float = DEFAULT_TIE_TOL) -> np.ndarray:
    """Per-query ANN recall@k of ``found`` ((q, >=k) ids, -1 = no result) against ``truth``.

    recall_i = min(#{distinct returned j among the first k: allowed, score(q_i, x_j) >= kth_i - tie_tol},
    n_true_i) / n_true_i, with score the float64 inner product; NaN (undefined) when the query can have
    no neighbour at all (n_true = 0: nothing passes the filter).
    """
    base = as_vectors(base, "base")
    queries = as_vectors(queries, "queries", base.shape[1])
    found = np.asarray(found, dtype=np.int64)[:, : truth.k]
    if found.ndim != 2 or found.shape[0] != queries.shape[0]:
        raise InputError(f"found: need one row of ids per query ({queries.shape[0]}), got shape {found.shape}")
    valid = (found >= 0) & (found < base.shape[0])
    if allowed is not None:
        valid &= np.asarray(allowed, dtype=bool)[np.where(valid, found, 0)]
    # a repeated id counts once: sort each row and drop equal neighbours
    srt = np.sort(np.where(valid, found, -1), axis=1)
    first = np.ones_like(srt, dtype=bool)
    first[:, 1:] = srt[:, 1:] != srt[:, :-1]
    keep = first & (srt >= 0)
    safe = np.where(keep, srt, 0)
    sc = np.einsum("qd,qkd->qk", queries.astype(np.float64), base[safe].astype(np.float64))
    hits = (keep & (sc >= truth.kth[:, None] - tie_tol)).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(truth.n_true > 0, np.minimum(hits, truth.n_true) / truth.n_true, np.nan)


def recall_summary(r: np.ndarray, target: float = 0.9) -> dict:
    """Mean ANN recall with its hard tail: p10, minimum, and the share of queries below ``target``."""
    ok = r[~np.isnan(r)]
    if ok.size == 0:
        return {"recall": math.nan, "recall_p10": math.nan, "recall_min": math.nan,
                f"share_below_{target:g}": math.nan, "n_queries": 0, "n_undefined": int(r.size)}
    return {"recall": float(ok.mean()), "recall_p10": float(np.percentile(ok, 10)),
            "recall_min": float(ok.min()), f"share_below_{target:g}": float((ok < target).mean()),
            "n_queries": int(ok.size), "n_undefined": int(r.size - ok.size)}


# ---- indexes -------------------------------------------------------------------------------------------

def _bitmap_selector(allowed: np.ndarray):
    import faiss

    bits = np.packbits(np.asarray(allowed, dtype=bool), bitorder="little")
    sel = faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bits))
    sel._bits = bits  # the selector reads the numpy buffer; keep it alive as long as the selector
    return sel


class AnnIndex:
    """One faiss index over float32 rows (ids = row numbers) with a uniform search call.

    ``search(queries, k, knob=None, allowed=None)`` returns (q, k) ids (-1 pads). ``knob`` is efSearch
    (hnsw), nprobe (ivf) or the rescoring factor (binary). ``allowed`` filters during the search (faiss
    ID selector; the graph or lists are traversed as usual and only allowed ids are returned).
    """

    def __init__(self, kind: str, vectors: np.ndarray, *, m: int = 32, ef_construction: int = 64,
                 nlist: int | None = None, pq_m: int | None = None, pq_bits: int | None = None,
                 threads: int = 1, seed: int = 0):
        import faiss

        if kind not in KINDS:
            raise InputError(f"unknown index kind {kind!r}; use one of {', '.join(KINDS)}")
        x = as_vectors(vectors, "vectors")
        self.kind, self.n, self.dim = kind, x.shape[0], x.shape[1]
        self.params: dict = {}
        self._next_id = self.n
        self._ext = np.arange(self.n, dtype=np.int64) if kind == "flat" else None
        faiss.omp_set_num_threads(threads)
        if kind == "flat":
            self.index = faiss.IndexFlatIP(self.dim)
        elif kind == "hnsw":
            self.index = faiss.IndexHNSWFlat(self.dim, m, faiss.METRIC_INNER_PRODUCT)
            self.index.hnsw.efConstruction = ef_construction
            self.params = {"M": m, "efConstruction": ef_construction}
        elif kind == "ivf":
            # sqrt(n) lists, but never fewer than k-means' ~39 training points per centroid
            nlist = nlist or max(1, min(int(round(math.sqrt(self.n))), self.n // 39))
            self._quantizer = faiss.IndexFlatIP(self.dim)
            self.index = faiss.IndexIVFFlat(self._quantizer, self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
            self.index.cp.seed = seed
            self.params = {"nlist": nlist}
        elif kind == "sq8":
            self.index = faiss.IndexScalarQuantizer(self.dim, faiss.ScalarQuantizer.QT_8bit,
                                                    faiss.METRIC_INNER_PRODUCT)
        elif kind == "pq":
            pq_m = pq_m or _largest_divisor(self.dim, max(1, self.dim // 4))
            if self.dim % pq_m:
                raise InputError(f"pq_m={pq_m} must divide the dimension {self.dim}")
            # k-means wants ~39 training points per centroid; fewer bits on small sets keep it well posed
            pq_bits = pq_bits or int(min(8, max(1, math.floor(math.log2(max(self.n, 78) / 39)))))
            self.index = faiss.IndexPQ(self.dim, pq_m, pq_bits, faiss.METRIC_INNER_PRODUCT)
            self.index.pq.cp.seed = seed
            self.params = {"m": pq_m, "nbits": pq_bits}
        else:
            nbits = -(-self.dim // 8) * 8
            self.index = faiss.IndexBinaryFlat(nbits)
            self._float = x
            self.params = {"bits": nbits}
        if kind == "binary":
            self.index.add(self._codes(x))
        else:
            if not self.index.is_trained:
                self.index.train(x)
            self.index.add(x)
        faiss.omp_set_num_threads(1)

    def _codes(self, x: np.ndarray) -> np.ndarray:
        bits = np.zeros((x.shape[0], self.params["bits"]), dtype=bool)
        bits[:, : self.dim] = x > 0
        return np.packbits(bits, axis=1)

    @property
    def knob(self) -> str | None:
        return KNOBS.get(self.kind)

    def add(self, vectors: np.ndarray) -> None:
        """Append rows; they get the next ids (ids are never reused after a removal)."""
        x = as_vectors(vectors, "vectors", self.dim)
        new = np.arange(self._next_id, self._next_id + x.shape[0], dtype=np.int64)
        if self.kind == "binary":
            self.index.add(self._codes(x))
            self._float = np.vstack([self._float, x])
        elif self.kind == "ivf":
            self.index.add_with_ids(x, new)
        else:
            self.index.add(x)
        if self._ext is not None:
            self._ext = np.concatenate([self._ext, new])
        self._next_id += x.shape[0]
        self.n += x.shape[0]

    def remove(self, ids: np.ndarray) -> int:
        """Really delete ``ids`` (flat, ivf); graph, quantized flat and binary indexes cannot, see churn."""
        import faiss

        if self.kind not in ("flat", "ivf"):
            raise InputError(f"a faiss {self.kind} index cannot delete vectors; use tombstones (allowed=)")
        ids = np.asarray(ids, dtype=np.int64)
        if self.kind == "flat":
            # a flat index compacts on removal and renumbers its rows; _ext keeps the external ids
            pos = np.flatnonzero(np.isin(self._ext, ids))
            removed = int(self.index.remove_ids(faiss.IDSelectorBatch(pos)))
            self._ext = np.delete(self._ext, pos)
        else:
            removed = int(self.index.remove_ids(faiss.IDSelectorBatch(ids)))
        self.n -= removed
        return removed

    def nbytes(self) -> int:
        """Serialized size of the index (codes, graph links, centroids), the bytes a replica holds."""
        import faiss

        if self.kind == "binary":
            return int(faiss.serialize_index_binary(self.index).size)
        return int(faiss.serialize_index(self.index).size)

    def _params(self, knob, allowed):
        import faiss

        if allowed is None and self.kind not in ("hnsw", "ivf"):
            return None
        if allowed is not None and self.kind in ("sq8", "pq"):
            raise InputError(f"filtered search is not measured for the {self.kind} index; use flat, hnsw or ivf")
        if allowed is not None and self._ext is not None:
            allowed = np.asarray(allowed, dtype=bool)[self._ext]
        sel = _bitmap_selector(allowed) if allowed is not None else None
        if self.kind == "hnsw":
            p = faiss.SearchParametersHNSW(efSearch=int(knob if knob is not None else 16))
        elif self.kind == "ivf":
            p = faiss.SearchParametersIVF(nprobe=int(knob if knob is not None else 1))
        else:
            p = faiss.SearchParameters()
        if sel is not None:
            p.sel = sel
            p._sel = sel
        return p

    def search(self, queries: np.ndarray, k: int, knob: float | None = None,
               allowed: np.ndarray | None = None) -> np.ndarray:
        q = as_vectors(queries, "queries", self.dim)
        k = _check_k(k, self.n)
        if self.kind == "binary":
            if allowed is not None:
                raise InputError("filtered search is not measured for the binary index; use flat, hnsw or ivf")
            factor = float(knob if knob is not None else 4)
            cand = min(self.n, max(k, int(math.ceil(factor * k))))
            _, ids = self.index.search(self._codes(q), cand)
            safe = np.where(ids >= 0, ids, 0)
            sc = np.einsum("qd,qkd->qk", q, self._float[safe])
            sc[ids < 0] = -np.inf
            order = np.lexsort((ids, -sc), axis=1)[:, :k]
            out = np.take_along_axis(ids, order, axis=1)
            out[np.take_along_axis(sc, order, axis=1) == -np.inf] = -1
            return out
        _, ids = self.index.search(q, k, params=self._params(knob, allowed))
        ids = ids.astype(np.int64)
        if self._ext is not None:
            ids = np.where(ids >= 0, self._ext[np.maximum(ids, 0)], -1)
        return ids


def _largest_divisor(d: int, at_most: int) -> int:
    return max(m for m in range(1, at_most + 1) if d % m == 0)


# ---- build cost ----------------------------------------------------------------------------------------

def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class BuildCost:
    """Wall time of a build and the resident-memory growth it caused (peak over baseline, sampled every
    2 ms from /proc/self/statm; None where that file does not exist)."""

    seconds: float
    peak_bytes: int | None
    index_bytes: int
    n: int

    def to_dict(self) -> dict:
        return {"build_s": self.seconds, "peak_build_bytes": self.peak_bytes, "index_bytes": self.index_bytes,
                "bytes_per_vector": self.index_bytes / self.n}


def build_with_cost(kind: str, vectors, **params) -> tuple[AnnIndex, BuildCost]:
    """Build an :class:`AnnIndex` while timing it and sampling the process's resident memory."""
    base = _rss_bytes()
    peak = [base or 0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.002):
            r = _rss_bytes()
            if r is not None and r > peak[0]:
                peak[0] = r

    th = threading.Thread(target=sample, daemon=True) if base is not None else None
    if th is not None:
        th.start()
    t = time.perf_counter()
    try:
        idx = AnnIndex(kind, vectors, **params)
    finally:
        secs = time.perf_counter() - t
        stop.set()
        if th is not None:
            th.join()
    end = _rss_bytes()
    if end is not None and end > peak[0]:
        peak[0] = end
    growth = None if base is None else max(0, peak[0] - base)
    return idx, BuildCost(seconds=secs, peak_bytes=growth, index_bytes=idx.nbytes(), n=idx.n)


# ---- the recall / latency curve ------------------------------------------------------------------------

def ann_curve(index: AnnIndex, base, queries, k: int, values: Sequence[float], *,
              truth: GroundTruth | None = None, tie_tol: float = DEFAULT_TIE_TOL) -> dict:
    """ANN recall@k (mean, p10, min, share < 0.9) and batch throughput at each knob value."""
    base = as_vectors(base, "base")
    queries = as_vectors(queries, "queries", base.shape[1])
    truth = truth or exact_topk(base, queries, k)
    if index.knob is None and len(values) > 1:
        raise InputError(f"a {index.kind} index has no search knob; give one value or use hnsw, ivf or binary")
    points = []
    for v in values:
        t = time.perf_counter()
        found = index.search(queries, k, knob=v)
        secs = time.perf_counter() - t
        pt = {"value": v, **recall_summary(ann_recall(found, base, queries, truth, tie_tol=tie_tol)),
              "qps": queries.shape[0] / secs if secs > 0 else math.inf}
        points.append(pt)
    return {"kind": index.kind, "knob": index.knob, "k": truth.k, "params": index.params, "points": points}


def knob_for_target(curve: dict, target: float = 0.99) -> float | None:
    """The smallest knob value whose mean ANN recall reaches ``target`` (None if none does)."""
    ok = [p["value"] for p in curve["points"] if p["recall"] >= target]
    return min(ok) if ok else None


def latency_percentiles(index: AnnIndex, queries, k: int, *, knob: float | None = None, concurrency: int = 1,
                        repeats: int = 1) -> dict:
    """Per-request latency (one query per call) with ``concurrency`` client threads issuing requests at once.

    faiss releases the GIL while it searches, so the threads contend for cores as real clients would. Each
    search uses one OpenMP thread; the percentiles are over every request (linear interpolation).
    """
    import faiss

    q = as_vectors(queries, "queries", index.dim)
    if concurrency < 1:
        raise InputError(f"concurrency must be at least 1, got {concurrency}")
    faiss.omp_set_num_threads(1)
    reqs = np.tile(np.arange(q.shape[0]), repeats)
    lat = np.empty(reqs.size)

    def worker(w: int) -> None:
        # OpenMP's thread count is per calling thread: without this each client would fan out again
        faiss.omp_set_num_threads(1)
        for j in range(w, reqs.size, concurrency):
            t = time.perf_counter()
            index.search(q[reqs[j] : reqs[j] + 1], k, knob=knob)
            lat[j] = (time.perf_counter() - t) * 1000.0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        list(ex.map(worker, range(concurrency)))
    wall = time.perf_counter() - t0
    p50, p95, p99 = np.percentile(lat, [50, 95, 99])
    return {"concurrency": concurrency, "knob": knob, "n_requests": int(reqs.size), "p50_ms": float(p50),
            "p95_ms": float(p95), "p99_ms": float(p99), "qps": reqs.size / wall}


# ---- filtered search -----------------------------------------------------------------------------------

def selectivity_mask(n: int, selectivity: float, seed: int = 0) -> np.ndarray:
    """A random metadata filter passing round(selectivity * n) rows (at least one)."""
    if not 0 < selectivity <= 1:
        raise InputError(f"selectivity must be in (0, 1], got {selectivity}")
    rng = np.random.default_rng(seed)
    mask = np.zeros(n, dtype=bool)
    mask[rng.choice(n, size=max(1, int(round(selectivity * n))), replace=False)] = True
    return mask


def filtered_search(index: AnnIndex, queries, k: int, allowed: np.ndarray, strategy: str, *,
                    knob: float | None = None, fetch_k: int | None = None) -> np.ndarray:
    """Top-k among ``allowed`` rows by one of two strategies (ids (q, k), -1 where fewer were found):

    * ``pre``: the filter is applied inside the search (faiss ID selector), so only allowed rows are ever
      candidates;
    * ``post``: an unfiltered search for ``fetch_k`` (default 10 x k) candidates, then the disallowed ones
      are dropped and the first k survivors kept; a rare filter leaves few or none.
    """
    if strategy == "pre":
        return index.search(queries, k, knob=knob, allowed=allowed)
    if strategy != "post":
        raise InputError(f"unknown filter strategy {strategy!r}; use pre or post")
    fetch = min(index.n, fetch_k or 10 * k)
    ids = index.search(queries, fetch, knob=knob)
    ok = (ids >= 0) & np.asarray(allowed, dtype=bool)[np.where(ids >= 0, ids, 0)]
    # stable sort puts the survivors first in their original rank order
    order = np.argsort(~ok, axis=1, kind="stable")[:, :k]
    out = np.take_along_axis(ids, order, axis=1)
    out[~np.take_along_axis(ok, order, axis=1)] = -1
    return out


def filtered_recall(index: AnnIndex, base, queries, k: int, *, selectivities: Sequence[float] = (0.001, 0.01, 0.1),
                    knob: float | None = None, fetch_k: int | None = None, seed: int = 0,
                    tie_tol: float = DEFAULT_TIE_TOL) -> list[dict]:
    """ANN recall@k against the exact filtered top-k, per selectivity and strategy (pre, post)."""
    base = as_vectors(base, "base")
    queries = as_vectors(queries, "queries", base.shape[1])
    rows = []
    for s in selectivities:
        mask = selectivity_mask(base.shape[0], s, seed)
        truth = exact_topk(base, queries, k, allowed=mask)
        for strategy in ("pre", "post"):
            t = time.perf_counter()
            found = filtered_search(index, queries, k, mask, strategy, knob=knob, fetch_k=fetch_k)
            secs = time.perf_counter() - t
            r = ann_recall(found, base, queries, truth, allowed=mask, tie_tol=tie_tol)
            rows.append({"selectivity": s, "n_allowed": int(mask.sum()), "strategy": strategy,
                         "mean_returned": float((found >= 0).sum(axis=1).mean()),
                         "ms_per_query": secs * 1000.0 / queries.shape[0], **recall_summary(r)})
    return rows


# ---- churn ---------------------------------------------------------------------------------------------

def churn_recall(kind: str, base, queries, k: int, *, delete_frac: float = 0.1, insert_frac: float = 0.1,
                 rounds: int = 4, knob: float | None = None, seed: int = 0, tie_tol: float = DEFAULT_TIE_TOL,
                 **params) -> dict:
    """ANN recall after simulated churn, beside a fresh build over the same live vectors.

    The last ``insert_frac`` of ``base`` is held out; the index is built on the rest, then over ``rounds``
    rounds a random ``delete_frac`` of the initial rows is deleted and the held-out rows are inserted.
    Deletes are real removals where faiss supports them (flat, ivf) and tombstones (filtered out at search
    time, as graph stores do until they compact) for hnsw and the quantized flat kinds. Recall is against
    exact search over the live rows; ``recall_delta`` = after churn - fresh build.
    """
    base = as_vectors(base, "base")
    queries = as_vectors(queries, "queries", base.shape[1])
    n = base.shape[0]
    if not (0 <= delete_frac < 1 and 0 <= insert_frac < 1):
        raise InputError("delete_frac and insert_frac must be in [0, 1)")
    if rounds < 1:
        raise InputError(f"rounds must be at least 1, got {rounds}")
    n0 = n - int(round(insert_frac * n))
    rng = np.random.default_rng(seed)
    deleted = rng.choice(n0, size=int(round(delete_frac * n0)), replace=False)
    index = AnnIndex(kind, base[:n0], seed=seed, **params)
    truth0 = exact_topk(base[:n0], queries, k)
    before = ann_recall(index.search(queries, k, knob=knob), base[:n0], queries, truth0, tie_tol=tie_tol)
    live = np.zeros(n, dtype=bool)
    live[:n0] = True
    tombstones = kind not in ("flat", "ivf")
    for dels, ins in zip(np.array_split(deleted, rounds), np.array_split(np.arange(n0, n), rounds), strict=True):
        if not tombstones:
            index.remove(dels)
        live[dels] = False
        if ins.size:
            index.add(base[ins])
            live[ins] = True
    truth = exact_topk(base, queries, k, allowed=live)
    if tombstones:
        found = index.search(queries, k, knob=knob, allowed=live) if kind != "binary" else filtered_search(
            index, queries, k, live, "post", knob=None, fetch_k=int(math.ceil((knob or 4) * k / live.mean())))
    else:
        found = index.search(queries, k, knob=knob)
    after = ann_recall(found, base, queries, truth, allowed=live, tie_tol=tie_tol)
    live_ids = np.flatnonzero(live)
    fresh = AnnIndex(kind, base[live_ids], seed=seed, **params)
    fresh_found = fresh.search(queries, k, knob=knob)
    fresh_found = np.where(fresh_found >= 0, live_ids[np.maximum(fresh_found, 0)], -1)
    rebuilt = ann_recall(fresh_found, base, queries, truth, allowed=live, tie_tol=tie_tol)
    ra, rb = float(np.nanmean(after)), float(np.nanmean(rebuilt))
    return {"kind": kind, "knob": knob, "rounds": rounds, "deleted": int(deleted.size),
            "inserted": int(n - n0), "n_live": int(live.sum()),
            "delete_mode": "tombstone" if tombstones else "remove",
            "recall_before": float(np.nanmean(before)), "recall_after_churn": ra, "recall_fresh_build": rb,
            "recall_delta": ra - rb}


# ---- the quantization Pareto table ---------------------------------------------------------------------

@dataclass(frozen=True)
class IndexConfig:
    """One point of the quantization table: a name, an index kind, build parameters and the knob value."""

    name: str
    kind: str
    knob: float | None = None
    params: dict = field(default_factory=dict)


DEFAULT_PARETO = (
    IndexConfig("flat", "flat"),
    IndexConfig("hnsw", "hnsw", 64, {"m": 32, "ef_construction": 64}),
    IndexConfig("sq8", "sq8"),
    IndexConfig("pq", "pq"),
    IndexConfig("binary+rescore", "binary", 4),
)


def pareto_front(rows: Sequence[dict], maximize: Sequence[str], minimize: Sequence[str]) -> list[bool]:
    """True for each row no other row dominates. Row a dominates b when a is at least as good on every
    column (>= on ``maximize``, <= on ``minimize``) and strictly better on one. A missing or NaN value is
    the worst possible on its column, so an unmeasured figure never makes a point look better."""
    def vec(r: dict) -> np.ndarray:
        out = []
        for c in maximize:
            v = r.get(c)
            out.append(-math.inf if v is None or v != v else float(v))
        for c in minimize:
            v = r.get(c)
            out.append(-math.inf if v is None or v != v else -float(v))
        return np.asarray(out)

    m = np.array([vec(r) for r in rows]).reshape(len(rows), -1)
    ge = (m[:, None, :] >= m[None, :, :]).all(axis=2)
    gt = (m[:, None, :] > m[None, :, :]).any(axis=2)
    dominated = (ge & gt).any(axis=0)
    return [not bool(d) for d in dominated]


def pareto_table(base, queries, *, k: int = 50, configs: Sequence[IndexConfig] = DEFAULT_PARETO,
                 retrieval_recall: Callable[[AnnIndex, IndexConfig], float] | None = None,
                 concurrency: int = 1, tie_tol: float = DEFAULT_TIE_TOL) -> dict:
    """ANN recall@k, retrieval recall (when ``retrieval_recall`` is given), bytes per vector, p95 latency and
    build time per index config, with the Pareto-optimal rows flagged (max both recalls, min bytes and p95).

    ``retrieval_recall(index, config)`` returns the golden set's mean retrieval recall through that index,
    so an index is judged by what users lose as well as by neighbour overlap.
    """
    base = as_vectors(base, "base")
    queries = as_vectors(queries, "queries", base.shape[1])
    truth = exact_topk(base, queries, k)
    rows = []
    for cfg in configs:
        idx, cost = build_with_cost(cfg.kind, base, **cfg.params)
        r = ann_recall(idx.search(queries, truth.k, knob=cfg.knob), base, queries, truth, tie_tol=tie_tol)
        lat = latency_percentiles(idx, queries, truth.k, knob=cfg.knob, concurrency=concurrency)
        row = {"config": cfg.name, "kind": cfg.kind, "knob": cfg.knob, "params": idx.params,
               f"ann_recall@{truth.k}": float(np.nanmean(r)),
               "retrieval_recall@10": None if retrieval_recall is None else float(retrieval_recall(idx, cfg)),
               **cost.to_dict(), "p95_ms": lat["p95_ms"]}
        if cfg.kind == "binary":
            # rescoring reads the float vectors, which sit beside the codes (often on disk)
            row["rescore_bytes_per_vector"] = 4 * base.shape[1]
        rows.append(row)
    maximize = [f"ann_recall@{truth.k}"] + (["retrieval_recall@10"] if retrieval_recall is not None else [])
    front = pareto_front(rows, maximize, ["bytes_per_vector", "p95_ms"])
    for row, f in zip(rows, front, strict=True):
        row["pareto"] = f
    return {"k": truth.k, "n": base.shape[0], "dim": base.shape[1], "concurrency": concurrency,
            "maximize": maximize, "minimize": ["bytes_per_vector", "p95_ms"], "rows": rows}


# ---- synthetic data and the report section -------------------------------------------------------------

def clustered_vectors(n: int, dim: int, *, n_queries: int = 0, n_clusters: int = 100, spread: float = 1.0,
                      seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(base, queries): L2-normalized float32 rows drawn from Gaussian clusters around random unit centres,
    queries from the same clusters as the base (ANN recall depends on the query distribution). ``spread``
    is the noise norm relative to the centre's. A stand-in for embeddings, which are clustered, not uniform."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_clusters, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)

    def draw(m: int) -> np.ndarray:
        x = centres[rng.integers(0, n_clusters, m)] + spread / math.sqrt(dim) * rng.standard_normal((m, dim))
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    return draw(n), draw(n_queries)


def index_report_section(index_eval: dict | None = None, embed_check: dict | None = None) -> dict:
    """Data for the report's index/embedding section (JSON-serializable): the output of ``ragassay
    index-eval --json`` and/or ``ragassay embed-check --json`` arranged as titled tables.

    Each table is ``{"title", "columns", "rows"}`` with rows as lists in column order; undefined values are
    None. Missing inputs simply leave their tables out.
    """
    def clean(v):
        if isinstance(v, float) and v != v:
            return None
        if isinstance(v, (np.floating, np.integer)):
            return clean(v.item())
        return v

    def table(title: str, rows: list[dict], columns: list[str]) -> dict:
        return {"title": title, "columns": columns, "rows": [[clean(r.get(c)) for c in columns] for r in rows]}

    tables, notes = [], []
    ie = index_eval or {}
    if ie.get("curve"):
        c = ie["curve"]
        tables.append(table(f"ANN recall@{c['k']} vs {c['knob']} ({c['kind']})", c["points"],
                            ["value", "recall", "recall_p10", "recall_min", "share_below_0.9", "qps"]))
        if ie.get("knob_for_target") is not None:
            notes.append(f"{c['knob']} = {ie['knob_for_target']} is the smallest value reaching mean ANN recall "
                         f"{ie.get('target')}")
    if ie.get("latency"):
        tables.append(table("Query latency", ie["latency"],
                            ["concurrency", "knob", "n_requests", "p50_ms", "p95_ms", "p99_ms", "qps"]))
    if ie.get("build"):
        tables.append(table("Build cost", [ie["build"]],
                            ["build_s", "peak_build_bytes", "index_bytes", "bytes_per_vector"]))
    if ie.get("filtered"):
        tables.append(table("Filtered ANN recall", ie["filtered"],
                            ["selectivity", "n_allowed", "strategy", "recall", "recall_p10", "mean_returned",
                             "ms_per_query"]))
    if ie.get("churn"):
        tables.append(table("Recall after churn", [ie["churn"]],
                            ["kind", "rounds", "deleted", "inserted", "delete_mode", "recall_before",
                             "recall_after_churn", "recall_fresh_build", "recall_delta"]))
    if ie.get("pareto"):
        p = ie["pareto"]
        tables.append(table("Quantization Pareto table", p["rows"],
                            ["config", f"ann_recall@{p['k']}", "retrieval_recall@10", "bytes_per_vector",
                             "p95_ms", "build_s", "pareto"]))
    ec = embed_check or {}
    if ec.get("gap"):
        tables.append(table("Query-positive vs query-random similarity gap", [ec["gap"]],
                            ["n", "mean_positive", "mean_random", "gap", "ci_low", "ci_high"]))
    if ec.get("top1"):
        t = ec["top1"]
        tables.append(table("Top-1 similarity distribution", [t], ["n", "mean", "p5", "p50", "p95", "spread"]))
    if ec.get("duplicates"):
        tables.append(table("Near-duplicate collapse", [ec["duplicates"]],
                            ["n", "threshold", "collapse_rate", "removable_rate", "n_groups"]))
    if ec.get("truncation"):
        tables.append(table("Truncation at the model's limit", [ec["truncation"]],
                            ["n", "max_tokens", "truncated", "rate", "p95_tokens", "max_seen"]))
    if ec.get("drift"):
        tables.append(table("Drift probe", [ec["drift"]],
                            ["n", "k", "spearman", "kendall", "overlap_at_k", "self_cosine"]))
    return {"title": "Embeddings and index", "tables": tables, "notes": notes}
