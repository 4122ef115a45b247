"""A run's recipe, and the embeddings a cluster computes once for all its workers.

A worker that builds the reference pipeline on its own embeds every passage of the corpus again, and
embeds every question it meets again: on W workers that is W times the local executor's embedding work,
which is most of a run with a neural embedder. The recipe instead names every embedding call the local
run will make — the build's one call over the uncached passages, and per batch the questions not seen
before — so a cluster can compute those calls once, spread over its workers, and hand each worker a table
(:class:`~ragassay.pipeline.embedders.TableEmbedder`) that answers them with the same vectors.

A worker runs in another folder than the driver (a cluster's workers run where ``ray start`` ran), so every
path that reaches one is made absolute here, on the driver, once: :func:`absolute` for a path argument,
:func:`absolute_config` for the paths inside a pipeline config.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragassay.executors.local import Key

# embedder names that are not paths (pipeline.embedders.make_embedder)
MODEL_NAMES = frozenset({"wordllama", "minilm"})


def absolute(path: str | Path) -> str:
    """``path`` (``~`` expanded) as an absolute path of this process's working folder, symlinks resolved."""
    return str(Path(path).expanduser().resolve())


def absolute_config(cfg: Any) -> Any:
    """``cfg`` (a ``PipelineConfig``) with its paths absolute: ``cache_dir``, and ``dense.embedder`` and
    ``reranker.model`` when they name an existing local model folder. Model names, absolute paths and
    missing folders are left as written (a missing folder fails on the worker as it would locally)."""

    def folder(name: str | None) -> str | None:
        if name is None or name in MODEL_NAMES or Path(name).expanduser().is_absolute():
            return name
        return absolute(name) if Path(name).is_dir() else name

    dense, reranker = cfg.dense, cfg.reranker
    return cfg.model_copy(update={
        "cache_dir": absolute(cfg.cache_dir) if cfg.cache_dir is not None else None,
        "dense": dense.model_copy(update={"embedder": folder(dense.embedder)}),
        "reranker": reranker.model_copy(update={"model": folder(reranker.model)})})


@dataclass(frozen=True)
class PipelineRecipe:
    """What a worker needs to build the pipeline of a run: the validated config and the corpus, and
    whether the run's traces are only scored (no trace file: see ``Pipeline(scoring_only=...)``).

    ``cfg`` is the config as written: the run's identity (``config``, ``config_sha``, trace ids). The
    pipeline is built from ``worker_cfg``, the same config with its paths absolute (:func:`absolute_config`),
    so a worker in any folder reads and writes the files the driver's folder names.
    """

    cfg: Any  # ragassay.pipeline.config.PipelineConfig
    corpus: Any
    scoring_only: bool = False
    worker_cfg: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "worker_cfg", absolute_config(self.cfg))

    def __call__(self, embedder: Any = None) -> Any:
        from ragassay.pipeline import Pipeline

        pipe = Pipeline.from_config(self.worker_cfg, self.corpus, embedder=embedder, scoring_only=self.scoring_only)
        # a model folder written relative hashes as written, whatever folder the worker runs in
        pipe.config, pipe.config_sha = self.config, self.config_sha
        return pipe

    @property
    def config(self) -> dict:
        return self.cfg.hashed()

    @property
    def config_sha(self) -> str:
        from ragassay.trace.schema import config_sha

        return config_sha(self.cfg.hashed())

    def embedder(self) -> Any:
        """The dense embedder the pipeline would make (its model loads on first use), or None when the
        run embeds nothing up front (no dense branch, or an oracle run)."""
        cfg = self.worker_cfg
        if not cfg.dense.enabled or cfg.oracle:
            return None
        from ragassay.pipeline.embedders import make_embedder

        d = cfg.dense
        return make_embedder(d.embedder, max_tokens=d.max_tokens, batch_size=d.batch_size)

    def passage_call(self, emb: Any) -> list[str]:
        """The texts the pipeline's build passes to ``emb.embed_passages`` (the passages not cached)."""
        from ragassay.pipeline.cache import EmbeddingCache
        from ragassay.pipeline.chunkers import chunk_corpus
        from ragassay.trace.schema import config_sha

        cfg, ch = self.worker_cfg, self.worker_cfg.chunker
        chunks = chunk_corpus({d.doc_id: d.text for d in self.corpus.docs.values()}, ch.kind, ch.size, ch.overlap)
        # the namespace the pipeline's passage cache uses (pipeline/run.py: "passages-" + chunker sha)
        namespace = "passages-" + config_sha(ch.model_dump(mode="json"))[:16]
        cache = EmbeddingCache(cfg.cache_dir, emb.name, namespace)
        return cache.missing([cfg.dense.passage_prefix + c.text for c in chunks])

    def query_calls(self, emb: Any, golden: Any, batches: Sequence[Sequence[Key]], batched: bool) -> list[list[str]]:
        """The texts of each ``emb.embed_queries`` call one process running ``batches`` in order makes.

        Per query (``run_query``) a question not seen before is one call of its own; per batch
        (``run_batch``) the batch's distinct questions not seen before are one call. Questions in the
        cache folder are never embedded.
        """
        from ragassay.pipeline.cache import EmbeddingCache

        prefix = self.worker_cfg.dense.query_prefix
        cache = EmbeddingCache(self.worker_cfg.cache_dir, emb.name, "queries")
        seen: set[str] = set()
        calls: list[list[str]] = []
        for keys in batches:
            texts = list(dict.fromkeys(prefix + golden[q].question for q, _ in keys))
            new = cache.missing([t for t in texts if t not in seen])
            seen.update(texts)
            if batched:
                calls += [new] if new else []
            else:
                calls += [[t] for t in new]
        return calls
