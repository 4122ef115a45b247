"""Vector indexes over L2-normalized rows: exact inner product and faiss HNSW.

Both return, per query, the ``k`` best (row, score) pairs sorted by score descending with ties broken by
the lower row number, so results are deterministic. HNSW is approximate; its recall against the exact
index is an index metric (ANN recall), tuned by ``ef_search``.
"""

from __future__ import annotations

import numpy as np


def _topk_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of each row of a (q, n) score matrix: (ids (q, k), scores (q, k)), score desc then id asc."""
    q, n = scores.shape
    k = min(k, n)
    if k == 0:
        return np.zeros((q, 0), dtype=np.int64), np.zeros((q, 0), dtype=np.float32)
    if k < n:
        # argpartition finds the k-th value; everything >= it is kept so ties at the boundary resolve by id.
        kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1 : k]
        ids_out = np.empty((q, k), dtype=np.int64)
        for r in range(q):
            cand = np.flatnonzero(scores[r] >= kth[r, 0])
            order = np.lexsort((cand, -scores[r, cand]))[:k]
            ids_out[r] = cand[order]
    else:
        ids_out = np.lexsort((np.broadcast_to(np.arange(n), scores.shape), -scores), axis=1)[:, :k]
    return ids_out, np.take_along_axis(scores, ids_out, axis=1)


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
