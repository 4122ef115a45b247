"""Rerankers re-score the fusion_depth candidates; the pipeline keeps the best final_k.

A reranker cannot add a candidate that fusion did not return, so it can move recall@final_k and the
ordering metrics, never recall@fusion_depth. Built-ins: ``lexical`` (IDF-weighted query-term coverage),
``embedding`` (cosine with an embedder, possibly different from the dense branch's) and ``cross-encoder``
(a local sentence-transformers CrossEncoder). Ties keep the fused order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from ragassay.errors import InputError
from ragassay.pipeline.analyzer import Analyzer, TermStats, weighted_coverage
from ragassay.pipeline.cache import EmbeddingCache
from ragassay.pipeline.embedders import Embedder, load_model_folder


class Reranker(Protocol):
    name: str

    def score(self, question: str, texts: list[str]) -> np.ndarray: ...


class LexicalReranker:
    name = "lexical-coverage"

    def __init__(self, analyzer: Analyzer, stats: TermStats):
        self.analyzer = analyzer
        self.stats = stats

    def score(self, question: str, texts: list[str]) -> np.ndarray:
        w = self.stats.query_weights(self.analyzer(question))
        return np.array([weighted_coverage(w, set(self.analyzer(t))) for t in texts], dtype=np.float64)


class EmbeddingReranker:
    """Cosine between the question and each candidate; passage vectors come from the embedding cache."""

    def __init__(self, embedder: Embedder, cache: EmbeddingCache, query_cache: EmbeddingCache,
                 query_prefix: str = "", passage_prefix: str = ""):
        self.embedder = embedder
        self.name = f"embedding:{embedder.name}"
        self.cache = cache
        self.query_cache = query_cache
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix

    def score(self, question: str, texts: list[str]) -> np.ndarray:
        q, _ = self.query_cache.get([self.query_prefix + question], self.embedder.embed_queries,
                                    self.embedder.token_lengths)
        p, _ = self.cache.get([self.passage_prefix + t for t in texts], self.embedder.embed_passages,
                              self.embedder.token_lengths)
        return (p @ q[0]).astype(np.float64)


class CrossEncoderReranker:
    """A sentence-transformers CrossEncoder from a local folder, on CPU with one thread."""

    def __init__(self, path: str | Path, batch_size: int = 16):
        path = Path(path).expanduser()
        if not path.is_dir():
            raise InputError(f"{path}: cross-encoder model folder not found; give a local model path")
        import torch
        from sentence_transformers import CrossEncoder

        torch.set_num_threads(1)
        self.model = load_model_folder(path, "sentence-transformers CrossEncoder",
                                       lambda p: CrossEncoder(p, device="cpu"))
        self.name = f"cross-encoder:{path.name}"
        self.batch_size = batch_size

    def score(self, question: str, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0)
        out = self.model.predict([(question, t) for t in texts], batch_size=self.batch_size,
                                 show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(out, dtype=np.float64).reshape(len(texts), -1)[:, -1]


def rerank_order(scores: np.ndarray) -> np.ndarray:
    """Indices sorting candidates by score descending, ties kept in their incoming (fused) order."""
    scores = np.asarray(scores, dtype=np.float64)
    return np.lexsort((np.arange(len(scores)), -scores))
