"""The reference RAG pipeline: chunkers, BM25 and dense branches, indexes, fusion, reranking, packing and an
extractive generator, configured by YAML and emitting one Trace per (query, trial).

Names are imported on first use (PEP 562), so reading a config does not load the indexes and embedders.
"""

from __future__ import annotations

from ragassay._lazy import lazy_exports

_EXPORTS = {
    "TOKEN_COUNTER_NAME": "tokens", "count_tokens": "tokens",
    "Chunk": "chunkers", "chunk_corpus": "chunkers", "chunk_text": "chunkers", "sentence_spans": "chunkers",
    "PipelineConfig": "config", "load_config": "config", "parse_config": "config",
    "Embedder": "embedders", "make_embedder": "embedders",
    "rrf": "fusion", "weighted": "fusion",
    "ExtractiveGenerator": "generator", "Generation": "generator", "Generator": "generator",
    "ExactIndex": "index", "HNSWIndex": "index", "build_index": "index",
    "pack": "packer",
    "Reranker": "rerank",
    "Pipeline": "run", "run_pipeline": "run",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
