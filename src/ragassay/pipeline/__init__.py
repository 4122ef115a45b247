"""The reference RAG pipeline: chunkers, BM25 and dense branches, indexes, fusion, reranking, packing and an
extractive generator, configured by YAML and emitting one Trace per (query, trial)."""

from ragassay.pipeline.chunkers import Chunk, chunk_corpus, chunk_text, sentence_spans
from ragassay.pipeline.config import PipelineConfig, load_config, parse_config
from ragassay.pipeline.embedders import Embedder, make_embedder
from ragassay.pipeline.fusion import rrf, weighted
from ragassay.pipeline.generator import ExtractiveGenerator, Generation, Generator
from ragassay.pipeline.index import ExactIndex, HNSWIndex, build_index
from ragassay.pipeline.packer import pack
from ragassay.pipeline.rerank import Reranker
from ragassay.pipeline.run import Pipeline, run_pipeline
from ragassay.pipeline.tokens import TOKEN_COUNTER_NAME, count_tokens

__all__ = [
    "TOKEN_COUNTER_NAME", "Chunk", "Embedder", "ExactIndex", "ExtractiveGenerator", "Generation", "Generator",
    "HNSWIndex", "Pipeline", "PipelineConfig", "Reranker", "build_index", "chunk_corpus", "chunk_text",
    "count_tokens", "load_config", "make_embedder", "pack", "parse_config", "rrf", "run_pipeline",
    "sentence_spans", "weighted",
]
