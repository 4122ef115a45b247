"""Vector indexes over L2-normalized rows: exact inner product and faiss HNSW.

Both return, per query, the ``k`` best (row, score) pairs sorted by score descending with ties broken by
the lower row number, so results are deterministic. HNSW is approximate; its recall against the exact
index is an index metric (ANN recall), tuned by ``ef_search``.
"""

from __future__ import annotations

import numpy as np


def top_k_flat(scores: np.ndarray, k: int, positive: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``k`` best entries of every row of a (q, n) score matrix, all rows at once.

    Order within a row: score descending, then column ascending. ``positive`` keeps only scores > 0 (a
    row may then hold fewer than ``k``). Returns flat ``(offsets (q + 1,), cols, vals)``: row r's entries
    are ``cols[offsets[r]:offsets[r + 1]]``. One partition finds each row's k-th value; everything at or
    above it is a candidate, so ties at the boundary resolve by column as a full sort would.
    """
    q, n = scores.shape
    k = min(k, n)
    if k == 0 or q == 0:
        return np.zeros(q + 1, dtype=np.int64), np.zeros(0, dtype=np.int64), scores[:0, 0]
    if k < n:
        kth = np.partition(scores, n - k, axis=1)[:, n - k : n - k + 1]
        keep = scores >= kth
        if positive:
            keep &= scores > 0
    else:
        keep = scores > 0 if positive else np.ones(scores.shape, dtype=bool)
    r, c = np.nonzero(keep)
    v = scores[r, c]
    order = np.lexsort((c, -v, r))
    r, c, v = r[order], c[order], v[order]
    starts = np.searchsorted(r, np.arange(q + 1))
    sel = np.arange(len(r)) - starts[r] < k
    r, c, v = r[sel], c[sel], v[sel]
    return np.searchsorted(r, np.arange(q + 1)), c.astype(np.int64), v


def _topk_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of each row of a (q, n) score matrix: (ids (q, k), scores (q, k)), score desc then id asc."""
    q, n = scores.shape
    k = min(k, n)
    _, cols, vals = top_k_flat(scores, k)
    return cols.reshape(q, k), vals.reshape(q, k)


class ExactIndex:
    """Brute-force inner product (cosine on normalized rows)."""

    kind = "exact"

    def __init__(self, vectors: np.ndarray):
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        # One product per query row: BLAS sums in a shape-dependent order, and a query's scores must not
        # depend on which other queries share the batch (bit-identical to searching it alone).
        vt = self.vectors.T
        scores = np.empty((q.shape[0], self.vectors.shape[0]), dtype=np.float32)
        for r in range(q.shape[0]):
            scores[r] = q[r : r + 1] @ vt
        return _topk_rows(scores, k)


class HNSWIndex:
    """faiss IndexHNSWFlat with inner-product metric; single-threaded for reproducible builds."""

    kind = "hnsw"

    def __init__(self, vectors: np.ndarray, m: int = 32, ef_construction: int = 64, ef_search: int = 64):
        import faiss

        faiss.omp_set_num_threads(1)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.n, dim = vectors.shape
        self.index = faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = ef_construction
        self.index.add(vectors)
        self.index.hnsw.efSearch = ef_search

    @property
    def ef_search(self) -> int:
        return int(self.index.hnsw.efSearch)

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        self.index.hnsw.efSearch = int(value)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        k = min(k, self.n)
        scores, ids = self.index.search(q, k)
        out_ids, out_scores = [], []
        for r in range(q.shape[0]):
            keep = ids[r] >= 0  # faiss pads with -1 when fewer than k are reachable
            i, s = ids[r][keep].astype(np.int64), scores[r][keep]
            order = np.lexsort((i, -s))
            out_ids.append(i[order])
            out_scores.append(s[order])
        width = max((len(x) for x in out_ids), default=0)
        ids_arr = np.full((q.shape[0], width), -1, dtype=np.int64)
        sc_arr = np.full((q.shape[0], width), -np.inf, dtype=np.float32)
        for r, (i, s) in enumerate(zip(out_ids, out_scores, strict=True)):
            ids_arr[r, : len(i)], sc_arr[r, : len(s)] = i, s
        return ids_arr, sc_arr


def build_index(vectors: np.ndarray, kind: str, m: int = 32, ef_construction: int = 64, ef_search: int = 64):
    if kind == "exact":
        return ExactIndex(vectors)
    if kind == "hnsw":
        return HNSWIndex(vectors, m=m, ef_construction=ef_construction, ef_search=ef_search)
    raise ValueError(f"unknown index kind {kind!r}; use exact or hnsw")
