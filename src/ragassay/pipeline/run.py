"""The reference RAG pipeline: chunk -> BM25 / dense branches -> fusion -> rerank -> pack -> generate.

Indexes are built once per :class:`Pipeline` (timed into the run header); each query then emits one
:class:`~ragassay.trace.schema.Trace` with every stage's output and per-stage wall time in ms
(``bm25``, ``dense``, ``fusion``, ``rerank``, ``pack``, ``generate``, ``total``). :meth:`Pipeline.run_query`
is the plain one-query path, whose ``total`` is that request's own wall time; :meth:`Pipeline.run_batch`
(used by :meth:`Pipeline.run`) produces the same traces for many queries at once, several times faster,
but times only each item's own stages (no ``total``: a batched stage has no per-request time). The three
depths are
config values: ``bm25.depth`` / ``dense.depth`` (branch_depth), ``fusion.depth`` (fusion_depth) and
``reranker.final_k`` (how many ranked units are offered to the packer; the budget may take fewer).
In oracle mode retrieval is skipped and the packed context is exactly the query's golden evidence spans
of grade >= 2 (empty for a query without such evidence), with no token budget applied.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ragassay._gc import gc_paused
from ragassay.errors import InputError
from ragassay.fsio import make_temp_dir
from ragassay.pipeline.analyzer import Analyzer, TermStats, weighted_coverage
from ragassay.pipeline.cache import EmbeddingCache, load_chunk_artifact, save_chunk_artifact
from ragassay.pipeline.chunkers import chunk_corpus, sentence_spans
from ragassay.pipeline.config import PipelineConfig, load_config, parse_config
from ragassay.pipeline.embedders import Embedder, make_embedder
from ragassay.pipeline.fusion import RankedLists, fuse_batch, rrf, weighted
from ragassay.pipeline.generator import ExtractiveGenerator, Generator, support_analyzer
from ragassay.pipeline.index import build_index, top_k_flat
from ragassay.pipeline.packer import pack
from ragassay.pipeline.rerank import (
    CrossEncoderReranker,
    EmbeddingReranker,
    LexicalReranker,
    Reranker,
    rerank_order,
)
from ragassay.pipeline.tokens import TOKEN_COUNTER_NAME, count_tokens
from ragassay.trace.schema import (
    CodedStrings,
    RunHeader,
    Trace,
    Unit,
    UnitColumns,
    config_sha,
    make_trace_id,
    trusted_units,
)

ORACLE_MIN_GRADE = 2


class QueryLike(Protocol):
    query_id: str
    question: str


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


@dataclass
class BatchUnits:
    """Every unit of a batch's traces as columns, built from the chunk rows the pipeline ranked instead of
    read back from the traces' unit objects (a million of them at 10,000 queries).

    ``units`` equals ``UnitColumns.from_traces(traces)`` (lists in ``Trace.unit_lists`` order, empty lists
    left out); per list, ``list_trace`` is its trace's position in the batch; per unit, ``tokens`` its
    token count (float). Tested equal to the traces field for field.
    """

    units: UnitColumns
    list_trace: np.ndarray
    tokens: np.ndarray


class BatchTraces(list):
    """The traces of :meth:`Pipeline.run_batch` (a plain list to every reader), with their units as
    columns in ``units`` (None when the batch ran in oracle mode, whose units are not chunks).

    A pipeline built ``scoring_only`` (a run that keeps no trace file: its traces are scored, then
    dropped) leaves the ranked lists that only scoring reads — branches, fused, reranked, cut — out of
    the trace objects and holds them in ``units`` alone; the lists are there, empty (a branch name, an
    empty ``reranked`` list rather than None), so the traces still show which stages ran. Packed units,
    which the generator reads, stay objects. Building a Unit per ranked entry was a fifth of a run.
    """

    units: BatchUnits | None = None


def _coded(keys: np.ndarray, names: np.ndarray) -> CodedStrings:
    """``names[keys]`` as a list that carries its :func:`~ragassay.trace.schema.dense_codes` (codes by first
    occurrence), computed from the integer keys instead of hashing the strings again; equal keys must mean
    equal names and distinct keys distinct names."""
    distinct, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[order] = np.arange(len(distinct))
    return CodedStrings(rank[inverse.reshape(-1)], names[distinct[order]].tolist())


class _BatchFailure(Exception):
    """A batched stage failed; every trace of the batch records the error (message already formatted)."""


def _error_record(rec: dict[str, Any], exc: Exception) -> dict[str, Any]:
    """A failed query keeps its identity and records the error as its outcome."""
    out = {k: rec[k] for k in ("trace_id", "query_id", "trial", "question")}
    msg = str(exc) if isinstance(exc, _BatchFailure) else f"{type(exc).__name__}: {exc}"
    out.update(outcome="error", error=msg)
    return out


class Pipeline:
    """A configured reference pipeline over one corpus; build once, run many queries."""

    def __init__(
        self,
        cfg: PipelineConfig,
        corpus: Any,
        *,
        embedder: Embedder | None = None,
        reranker: Reranker | None = None,
        generator: Generator | None = None,
        scoring_only: bool = False,
    ):
        """``scoring_only``: :meth:`run_batch` makes traces for scoring alone (see :class:`BatchTraces`)."""
        self.scoring_only = scoring_only
        self.cfg = cfg
        self.corpus = corpus
        self.config = cfg.hashed()
        self.config_sha = config_sha(self.config)
        self.build_ms: dict[str, float] = {}
        self.stats: dict[str, Any] = {}
        self._embedder = embedder
        self._reranker = reranker
        self._generator = generator
        self._build()

    @classmethod
    def from_config(cls, cfg: PipelineConfig | dict | str | Path, corpus: Any, **kw: Any) -> Pipeline:
        if isinstance(cfg, (str, Path)):
            cfg = load_config(cfg)
        elif isinstance(cfg, dict):
            cfg = parse_config(cfg)
        return cls(cfg, corpus, **kw)

    # ---- build -------------------------------------------------------------------------------------
    def _build(self) -> None:
        cfg = self.cfg
        t = time.perf_counter()
        texts = {d.doc_id: d.text for d in self.corpus.docs.values()}
        b = cfg.bm25
        self.analyzer = Analyzer(lowercase=b.lowercase, stemmer=b.stemmer, stopwords=b.stopwords)
        chunker_sha = config_sha(cfg.chunker.model_dump(mode="json"))
        self.support_analyzer = support_analyzer()
        self.support_analyzer.share_stems(self.analyzer)
        # Chunks and their analyzed terms depend only on (corpus, chunker, analyzers): cache them with the
        # embeddings so a re-run or a sweep over later stages skips the work.
        artifact = None
        if cfg.cache_dir is not None:
            key = config_sha({"corpus": getattr(self.corpus, "digest", None), "chunker": chunker_sha,
                              "analyzer": self.analyzer.name, "support": self.support_analyzer.name})
            artifact = Path(cfg.cache_dir) / "chunks" / f"{key[:24]}.json"
        loaded = load_chunk_artifact(artifact, texts) if artifact is not None else None
        if loaded is not None:
            self.chunks, chunk_terms, sentences = loaded
            self.build_ms["chunk"] = _ms(t)
            self.build_ms["analyze"] = 0.0
        else:
            self.chunks = chunk_corpus(texts, cfg.chunker.kind, cfg.chunker.size, cfg.chunker.overlap)
            self.build_ms["chunk"] = _ms(t)
            t = time.perf_counter()
            chunk_terms = self.analyzer.many(c.text for c in self.chunks)
            spans = [sentence_spans(c.text) for c in self.chunks]
            terms = iter(self.support_analyzer.many(c.text[a:b] for c, sp in zip(self.chunks, spans, strict=True)
                                                    for a, b in sp))
            sentences = [[[a, b, next(terms)] for a, b in sp] for sp in spans]
            self.build_ms["analyze"] = _ms(t)
            if artifact is not None:
                save_chunk_artifact(artifact, self.chunks, chunk_terms, sentences)
        self.stats["chunk_cache"] = "hit" if loaded is not None else ("miss" if artifact else "off")
        self.by_id = {c.unit_id: i for i, c in enumerate(self.chunks)}
        if not self.chunks:
            raise InputError("the corpus produced no chunks (all documents empty); check the corpus path")
        self.stats.update(n_chunks=len(self.chunks),
                          chunk_tokens_mean=float(np.mean([c.tokens for c in self.chunks])),
                          chunker_sha=chunker_sha, analyzer=self.analyzer.name)
        self.term_stats = TermStats(chunk_terms)
        # The support score's document frequencies: a chunk contains a term when one of its sentences does.
        self.support_stats = TermStats([t for _, _, terms in sents for t in terms] for sents in sentences)
        self._sentences = sentences
        # Per-chunk term sets (the lexical reranker's input) and each chunk's place in unit_id string order
        # (fusion's last tie key), computed once instead of once per query.
        self.chunk_termsets = [frozenset(t) for t in chunk_terms]
        self._spans = [(c.unit_id, c.doc_id, c.start, c.end, c.text, c.tokens) for c in self.chunks]
        # the same per chunk row as arrays, for the batch's unit columns
        self._chunk_cols = tuple(np.array(col, dtype=object) for col in zip(*self._spans, strict=True))
        # each chunk row's doc as a code into the distinct doc ids, and whether unit ids name rows one to
        # one (then a batch's unit ids are coded by row)
        self._chunk_doc, doc_ids = np.unique(self._chunk_cols[1].astype(str), return_inverse=True)[::-1]
        self._doc_ids = np.array(doc_ids.tolist(), dtype=object)
        self._uid_per_row = len(self.by_id) == len(self.chunks)
        self._chunk_start = np.fromiter((c.start for c in self.chunks), dtype=np.int64, count=len(self.chunks))
        self._chunk_end = np.fromiter((c.end for c in self.chunks), dtype=np.int64, count=len(self.chunks))
        self._chunk_tokens = np.fromiter((c.tokens for c in self.chunks), dtype=np.float64, count=len(self.chunks))
        self.uid_rank = np.empty(len(self.chunks), dtype=np.int64)
        self.uid_rank[sorted(range(len(self.chunks)), key=lambda i: self.chunks[i].unit_id)] = np.arange(
            len(self.chunks))

        self.bm25 = None
        self._bm25_matrix = None  # the index's postings as a scipy CSR matrix, made on first batched use
        if b.enabled and not cfg.oracle:
            t = time.perf_counter()
            self.bm25 = self._bm25_index(chunk_terms)
            self.build_ms["bm25_index"] = _ms(t)
            self.stats["bm25_vocab"] = len(self.bm25.vocab_dict)

        self.dense_index = None
        self.passage_cache = self.query_cache = None
        need_vectors = (cfg.dense.enabled and not cfg.oracle) or (
            cfg.reranker.kind == "embedding" and not cfg.oracle)
        if need_vectors:
            d = cfg.dense
            if self._embedder is None:
                self._embedder = make_embedder(d.embedder, max_tokens=d.max_tokens, batch_size=d.batch_size)
            emb = self._embedder
            self.passage_cache = EmbeddingCache(cfg.cache_dir, emb.name, "passages-" + self.stats["chunker_sha"][:16])
            self.query_cache = EmbeddingCache(cfg.cache_dir, emb.name, "queries")
        if cfg.dense.enabled and not cfg.oracle:
            d, emb = cfg.dense, self._embedder
            t = time.perf_counter()
            vecs, lens = self.passage_cache.get([d.passage_prefix + c.text for c in self.chunks],
                                                emb.embed_passages, emb.token_lengths)
            self.passage_cache.flush()
            self.build_ms["embed"] = _ms(t)
            t = time.perf_counter()
            self.dense_index = build_index(vecs, d.index, d.hnsw_m, d.ef_construction, d.ef_search)
            self.build_ms["dense_index"] = _ms(t)
            self.stats.update(embedder=emb.name, embedder_max_tokens=int(emb.max_tokens),
                              truncated_chunks=int((lens > emb.max_tokens).sum()),
                              truncated_fraction=float((lens > emb.max_tokens).mean()),
                              embed_cache_hits=self.passage_cache.hits,
                              embed_cache_misses=self.passage_cache.misses,
                              index=d.index)

        rk = cfg.reranker
        if self._reranker is None and not cfg.oracle:
            if rk.kind == "lexical":
                self._reranker = LexicalReranker(self.analyzer, self.term_stats)
            elif rk.kind == "embedding":
                emb = self._embedder
                if rk.model and rk.model != cfg.dense.embedder:
                    emb = make_embedder(rk.model)
                    self.rerank_passages = EmbeddingCache(cfg.cache_dir, emb.name,
                                                          "passages-" + self.stats["chunker_sha"][:16])
                    self.rerank_queries = EmbeddingCache(cfg.cache_dir, emb.name, "queries")
                else:
                    self.rerank_passages, self.rerank_queries = self.passage_cache, self.query_cache
                self._reranker = EmbeddingReranker(emb, self.rerank_passages, self.rerank_queries,
                                                   cfg.dense.query_prefix, cfg.dense.passage_prefix)
            elif rk.kind == "cross-encoder":
                self._reranker = CrossEncoderReranker(rk.model)
        if self._reranker is not None:
            self.stats["reranker"] = self._reranker.name
        if self._generator is None:
            g = cfg.generator
            if g.kind == "llm":
                from ragassay.pipeline.generator import make_llm_generator

                self._generator = make_llm_generator(g)
            else:
                self._generator = ExtractiveGenerator(self.support_analyzer, self.support_stats, g.abstain_floor,
                                                      g.max_sentences, g.absent_names)
                self._generator.preload(self.chunks, self._sentences)
        self.stats["generator"] = self._generator.name

    def _bm25_index(self, chunk_terms: list[list[str]]):
        """The bm25s index of the chunks, loaded from ``cache_dir`` when an identical one was saved there.

        The key covers everything the index depends on (corpus digest, chunker, analyzer, k1, b and the
        bm25s version); the index is written with bm25s' own ``save`` into a temporary folder that is
        renamed into place, so a reader never sees half an index.
        """
        import bm25s

        b = self.cfg.bm25
        folder = None
        if self.cfg.cache_dir is not None:
            key = config_sha({"corpus": getattr(self.corpus, "digest", None), "chunker": self.stats["chunker_sha"],
                              "analyzer": self.analyzer.name, "k1": b.k1, "b": b.b, "bm25s": bm25s.__version__,
                              "n_chunks": len(self.chunks)})
            folder = Path(self.cfg.cache_dir) / "bm25" / key[:24]
            if folder.is_dir():
                try:
                    index = bm25s.BM25.load(str(folder))
                except (OSError, ValueError, KeyError):
                    index = None  # a damaged cache entry is rebuilt, not trusted
                if index is not None and index.scores.get("num_docs") == len(self.chunks):
                    self.stats["bm25_cache"] = "hit"
                    return index
        index = bm25s.BM25(k1=b.k1, b=b.b)
        # An all-stopword chunk would have no terms; an empty-string term keeps it indexable and unmatched.
        index.index([terms or [""] for terms in chunk_terms], show_progress=False)
        self.stats["bm25_cache"] = "off" if folder is None else "miss"
        if folder is not None:
            # the cache root was claimed by check_cache_dir, so bm25/<key> entries are ours to replace;
            # folders get the umask's mode (mkdtemp would make them 0700)
            tmp = make_temp_dir(folder.parent, folder.name + ".", target=folder)
            try:
                index.save(str(tmp), show_progress=False)
                if folder.is_dir():
                    shutil.rmtree(folder)
                os.replace(tmp, folder)
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)
        return index

    # ---- per query ---------------------------------------------------------------------------------
    def _unit(self, i: int, score: float, rank: int, with_text: bool = False) -> dict[str, Any]:
        # Plain dicts, validated once with the whole trace (one pass in pydantic-core), are several times
        # cheaper than building ~150 Unit objects one by one per query.
        c = self.chunks[i]
        return {"unit_id": c.unit_id, "doc_id": c.doc_id, "start": c.start, "end": c.end, "score": score,
                "rank": rank, "text": c.text if with_text else None, "tokens": c.tokens}

    def _bm25(self, question: str) -> list[tuple[int, float]]:
        ids = self.bm25.get_tokens_ids(self.analyzer(question))
        if not ids:
            return []
        scores = np.asarray(self.bm25.get_scores_from_ids(ids), dtype=np.float64)
        hit = np.flatnonzero(scores > 0)
        order = hit[np.lexsort((hit, -scores[hit]))][: self.cfg.bm25.depth]
        return [(int(i), float(scores[i])) for i in order]

    def _dense(self, question: str) -> list[tuple[int, float]]:
        d, emb = self.cfg.dense, self._embedder
        qv, _ = self.query_cache.get([d.query_prefix + question], emb.embed_queries, emb.token_lengths)
        ids, scores = self.dense_index.search(qv, d.depth)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i >= 0]

    def _oracle_units(self, query: Any) -> list[Unit]:
        units, seen = [], set()
        for ev in getattr(query, "evidence", None) or []:
            if ev.grade < ORACLE_MIN_GRADE or (ev.doc_id, ev.start, ev.end) in seen:
                continue
            seen.add((ev.doc_id, ev.start, ev.end))
            text = self.corpus.docs[ev.doc_id].text[ev.start : ev.end]
            units.append(Unit(unit_id=f"oracle:{ev.doc_id}:{ev.start}-{ev.end}", doc_id=ev.doc_id,
                              start=ev.start, end=ev.end, score=float(ev.grade), rank=len(units) + 1,
                              text=text, tokens=count_tokens(text)))
        return units

    # ---- the stages every query ends with (shared by the per-query and the batched path) -------------
    def _pack_into(self, rec: dict[str, Any], dur: dict[str, float],
                   offered: list[tuple[int, float]], cut_objects: bool = True) -> tuple[list, list]:
        """Pack ``offered`` into ``rec``; returns the kept and cut ``(rank, (row, score))`` pairs."""
        cfg = self.cfg
        t = time.perf_counter()
        kept, cut, used = pack(list(enumerate(offered, 1)), cfg.packer.budget_tokens,
                               lambda x: self.chunks[x[1][0]].tokens, cfg.packer.policy)
        rec.update(packed=trusted_units(self._spans, kept, with_text=True),
                   cut=trusted_units(self._spans, cut) if cut_objects else [], packed_tokens=used)
        dur["pack"] = _ms(t)
        return kept, cut

    def _generate_into(self, query: QueryLike, rec: dict[str, Any], dur: dict[str, float]) -> None:
        t = time.perf_counter()
        gen = self._generator.generate(query.question, rec["packed"])
        dur["generate"] = _ms(t)
        rec.update(answer=gen.answer, citations=gen.citations, outcome=gen.outcome,
                   tokens_in=gen.tokens_in, tokens_out=gen.tokens_out, cost=gen.cost)
        if gen.outcome == "error":  # a trace in error says why (the provider's reason, after its retries)
            rec["error"] = str(gen.details.get("reason") or "generation failed")
        meta = {k: gen.details[k] for k in ("best_support", "absent_names") if k in gen.details}
        if meta:
            rec["meta"] = meta

    def run_query(self, query: QueryLike, trial: int = 0) -> Trace:
        """One trace; a stage that raises yields an ``error`` trace instead of stopping the run."""
        t_all = time.perf_counter()
        cfg, dur = self.cfg, {}
        rec: dict[str, Any] = dict(trace_id=make_trace_id(self.config_sha, query.query_id, trial),
                                   query_id=query.query_id, trial=trial, question=query.question)
        try:
            if cfg.oracle:
                t = time.perf_counter()
                packed = self._oracle_units(query)
                rec.update(packed=packed, packed_tokens=sum(u.tokens for u in packed))
                dur["pack"] = _ms(t)
            else:
                lists: dict[str, list[tuple[int, float]]] = {}
                if self.bm25 is not None:
                    t = time.perf_counter()
                    lists["bm25"] = self._bm25(query.question)
                    dur["bm25"] = _ms(t)
                if self.dense_index is not None:
                    t = time.perf_counter()
                    lists["dense"] = self._dense(query.question)
                    dur["dense"] = _ms(t)
                t = time.perf_counter()
                f = cfg.fusion
                named = {b: [(self.chunks[i].unit_id, s) for i, s in items] for b, items in lists.items()}
                if f.method == "rrf":
                    fused = rrf({b: [u for u, _ in v] for b, v in named.items()}, k=f.k, depth=f.depth)
                else:
                    fused = weighted(named, f.weights, depth=f.depth)
                dur["fusion"] = _ms(t)
                rec["branches"] = {b: [self._unit(i, s, r) for r, (i, s) in enumerate(v, 1)]
                                   for b, v in lists.items()}
                fused_ix = [(self.by_id[u], s) for u, s in fused]
                rec["fused"] = [self._unit(i, s, r) for r, (i, s) in enumerate(fused_ix, 1)]
                offered = fused_ix
                if self._reranker is not None:
                    t = time.perf_counter()
                    scores = self._reranker.score(query.question, [self.chunks[i].text for i, _ in fused_ix])
                    order = rerank_order(scores)[: cfg.reranker.final_k]
                    offered = [(fused_ix[j][0], float(scores[j])) for j in order]
                    dur["rerank"] = _ms(t)
                    rec["reranked"] = [self._unit(i, s, r) for r, (i, s) in enumerate(offered, 1)]
                else:
                    offered = offered[: cfg.reranker.final_k]
                self._pack_into(rec, dur, offered)
            self._generate_into(query, rec, dur)
        except Exception as exc:  # noqa: BLE001 - one failing query must not end a run; it is recorded
            rec = _error_record(rec, exc)
        dur["total"] = _ms(t_all)
        rec["durations_ms"] = dur
        return Trace.model_validate(rec)

    # ---- batched queries ---------------------------------------------------------------------------
    def _units(self, pairs: Iterable[tuple[int, float]], with_text: bool = False) -> list[Unit]:
        """Trusted units for (row, score) pairs, ranked 1.. in order."""
        return trusted_units(self._spans, enumerate(pairs, 1), with_text)

    def _bm25_batch(self, terms: list[list[str]]) -> RankedLists:
        """BM25 for many queries as one sparse product: (queries x vocabulary) @ (vocabulary x chunks).

        The left matrix holds a 1.0 for each query term, in the query's term order (repeats kept), and the
        right one is the index's own term postings. scipy's CSR product accumulates each output cell by
        walking the left row's entries in storage order, in the operands' dtype (float32, as the index),
        and 1.0 * x is exact: every (query, chunk) score is the float32 sum bm25s forms for that query
        alone, bit for bit (tested against ``get_scores_from_ids``). The top ``depth`` positive scores of
        every query come from one partition of the batch's score matrix (:func:`top_k_flat`).
        """
        import scipy.sparse as sp

        if self._bm25_matrix is None:
            sc = self.bm25.scores
            self._bm25_matrix = sp.csr_matrix((sc["data"], sc["indices"], sc["indptr"]),
                                              shape=(len(sc["indptr"]) - 1, sc["num_docs"]))
        post = self._bm25_matrix
        ids = [self.bm25.get_tokens_ids(t) for t in terms]
        lens = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        offsets = np.concatenate([[0], np.cumsum(lens)])
        cols = np.fromiter((t for x in ids for t in x), dtype=np.int64, count=int(offsets[-1]))
        queries = sp.csr_matrix((np.ones(len(cols), dtype=post.dtype), cols, offsets),
                                shape=(len(ids), post.shape[0]))
        scores = (queries @ post).toarray()
        starts, rows, vals = top_k_flat(scores, self.cfg.bm25.depth, positive=True)
        return RankedLists(starts, rows, vals.astype(np.float64))

    def _dense_batch(self, questions: list[str]) -> RankedLists:
        d, emb = self.cfg.dense, self._embedder
        qv, _ = self.query_cache.get([d.query_prefix + q for q in questions], emb.embed_queries,
                                     emb.token_lengths)
        ids, scores = self.dense_index.search(qv, d.depth)
        keep = ids >= 0  # HNSW pads with -1 when fewer than k are reachable; padding sits at the end
        offsets = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int64)
        return RankedLists(offsets, ids[keep].astype(np.int64), scores[keep].astype(np.float64))

    def run_batch(self, items: Sequence[tuple[QueryLike, int]]) -> list[Trace]:
        """Traces for many (query, trial) pairs at once; equal to ``[run_query(q, t) for q, t in items]``
        except for the stage timings.

        BM25 scoring (one sparse product), query embedding (one call), vector search, top-k and fusion
        run once for the whole batch, as array operations, each distinct question once; reranking,
        packing and generation run per item on integer chunk rows. Every floating-point sum keeps the
        per-query order, so the traces are equal field for field (tested); they are built from trusted
        values without re-validation. Stage times: only the stages an item runs on its own (``rerank``,
        ``pack``, ``generate``) are recorded. The batched stages serve every item at once, so no request
        has a time of its own for them and there is no ``total``: splitting the batch's time evenly would
        invent a latency. For per-request latencies, use :meth:`run_query`.
        """
        items = list(items)
        if not items:
            return []
        cfg = self.cfg
        questions = list(dict.fromkeys(q.question for q, _ in items))
        where = {q: j for j, q in enumerate(questions)}
        lists: dict[str, RankedLists] = {}
        fused: RankedLists | None = None
        batch_error: str | None = None
        try:
            if not cfg.oracle:
                if self.bm25 is not None:
                    lists["bm25"] = self._bm25_batch(self.analyzer.many(questions))
                if self.dense_index is not None:
                    lists["dense"] = self._dense_batch(questions)
                f = cfg.fusion
                fused = fuse_batch(lists, f.method, f.k, f.weights, f.depth, self.uid_rank)
        except Exception as exc:  # noqa: BLE001 - recorded on every trace of the batch, as run_query would
            batch_error = f"{type(exc).__name__}: {exc}"
        out = BatchTraces()
        spec: list[tuple[int, str, Any, Any]] = []
        with gc_paused():
            for q, trial in items:
                j = where[q.question]
                out.append(self._finish(q, trial, {b: v[j] for b, v in lists.items()},
                                        fused[j] if fused is not None else None, batch_error, spec, len(out)))
        if not cfg.oracle:
            out.units = self._batch_units(out, spec)
        return out

    def _batch_units(self, traces: Sequence[Trace], spec: list[tuple[int, str, Any, Any]]) -> BatchUnits:
        """:class:`BatchUnits` from ``spec``: (trace position, field, chunk rows, scores) per non-empty list,
        in the traces' ``unit_lists`` order."""
        lengths = np.fromiter((len(r) for _, _, r, _ in spec), dtype=np.int64, count=len(spec))
        n = int(lengths.sum())
        rows = np.concatenate([np.asarray(r, dtype=np.int64) for _, _, r, _ in spec]) if spec else np.zeros(0, np.int64)
        score = (np.concatenate([np.asarray(s, dtype=np.float64) for _, _, _, s in spec]) if spec
                 else np.zeros(0))
        uid, _, _, _, text, _ = self._chunk_cols
        # packed units carry their text (see _pack_into); the others carry none
        packed = np.repeat(np.fromiter((f == "packed" for _, f, _, _ in spec), dtype=bool, count=len(spec)), lengths)
        texts = None
        if packed.any():
            col = np.full(n, None, dtype=object)
            col[packed] = text[rows[packed]]
            texts = col.tolist()
        units = UnitColumns(keys=[traces[t].key for t, _, _, _ in spec], fields=[f for _, f, _, _ in spec],
                            lengths=lengths, unit_id=_coded(rows, uid) if self._uid_per_row else uid[rows].tolist(),
                            doc_id=_coded(self._chunk_doc[rows], self._doc_ids),
                            start=self._chunk_start[rows], end=self._chunk_end[rows], score=score,
                            has_score=np.ones(n, dtype=bool), text=texts)
        list_trace = np.fromiter((t for t, _, _, _ in spec), dtype=np.int64, count=len(spec))
        return BatchUnits(units, list_trace, self._chunk_tokens[rows])

    def _finish(self, query: QueryLike, trial: int, lists: dict[str, tuple[np.ndarray, np.ndarray]],
                fused: tuple[np.ndarray, np.ndarray] | None, batch_error: str | None,
                spec: list[tuple[int, str, Any, Any]], pos: int) -> Trace:
        """One batched item's trace; its non-empty unit lists go to ``spec`` (see :meth:`_batch_units`)."""
        cfg = self.cfg
        mine: list[tuple[int, str, Any, Any]] = []
        dur: dict[str, float] = {}
        rec: dict[str, Any] = dict(trace_id=make_trace_id(self.config_sha, query.query_id, trial),
                                   query_id=query.query_id, trial=trial, question=query.question)
        try:
            if batch_error is not None:
                raise _BatchFailure(batch_error)
            if cfg.oracle:
                t = time.perf_counter()
                packed = self._oracle_units(query)
                rec.update(packed=packed, packed_tokens=sum(u.tokens for u in packed))
                dur["pack"] = _ms(t)
            else:
                fused_ix = list(zip(fused[0].tolist(), fused[1].tolist(), strict=True))
                objects = not self.scoring_only
                rec["branches"] = {b: self._units(zip(i.tolist(), s.tolist(), strict=True)) if objects else []
                                   for b, (i, s) in lists.items()}
                rec["fused"] = self._units(fused_ix) if objects else []
                mine += [(pos, f"branches.{b}", i, s) for b, (i, s) in lists.items()]
                mine.append((pos, "fused", fused[0], fused[1]))
                offered = fused_ix
                if self._reranker is not None:
                    t = time.perf_counter()
                    rk = self._reranker
                    if (isinstance(rk, LexicalReranker) and rk.analyzer is self.analyzer
                            and rk.stats is self.term_stats):
                        # Same scores as LexicalReranker.score, from the term sets analyzed once at build.
                        w = self.term_stats.query_weights(self.analyzer(query.question))
                        scores = np.array([weighted_coverage(w, self.chunk_termsets[i]) for i, _ in fused_ix],
                                          dtype=np.float64)
                    else:
                        scores = self._reranker.score(query.question, [self.chunks[i].text for i, _ in fused_ix])
                    order = rerank_order(scores)[: cfg.reranker.final_k]
                    offered = [(fused_ix[j][0], float(scores[j])) for j in order]
                    dur["rerank"] = _ms(t)
                    rec["reranked"] = self._units(offered) if objects else []
                    mine.append((pos, "reranked", [i for i, _ in offered], [s for _, s in offered]))
                else:
                    offered = offered[: cfg.reranker.final_k]
                kept, cut = self._pack_into(rec, dur, offered, objects)
                mine += [(pos, f, [i for _, (i, _) in x], [s for _, (_, s) in x])
                         for f, x in (("packed", kept), ("cut", cut))]
            self._generate_into(query, rec, dur)
        except Exception as exc:  # noqa: BLE001 - one failing query must not end a run; it is recorded
            rec = _error_record(rec, exc)
            mine = []  # an error trace keeps no units
        rec["durations_ms"] = dur
        spec += [m for m in mine if len(m[2])]
        return Trace.model_construct(**rec)

    # ---- whole runs --------------------------------------------------------------------------------
    def header(self, dataset_version: str | None = None, run_name: str | None = None) -> RunHeader:
        return RunHeader(run_name=run_name or self.cfg.name, source="reference-pipeline", config=self.config,
                         config_sha=self.config_sha, corpus_digest=getattr(self.corpus, "digest", None),
                         dataset_version=dataset_version, token_counter=TOKEN_COUNTER_NAME,
                         durations_ms=dict(self.build_ms), stats=dict(self.stats))

    def run(
        self,
        queries: Iterable[QueryLike],
        trials: int = 1,
        progress: bool = True,
        dataset_version: str | None = None,
        run_name: str | None = None,
        batch_size: int = 256,
    ) -> tuple[RunHeader, list[Trace]]:
        """Run every query ``trials`` times; returns the run header and the traces in (trial, query) order.

        Queries go through :meth:`run_batch` ``batch_size`` at a time (the traces equal those of
        :meth:`run_query`; only the stage timings differ: no per-request total, see :meth:`run_batch`).
        """
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        queries = list(queries)
        if trials < 1:
            raise ValueError("trials must be at least 1")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        out: list[Trace] = []
        cols = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*cols, transient=True, disable=not progress) as bar:
            task = bar.add_task(self.cfg.name, total=len(queries) * trials)
            for trial in range(trials):
                for start in range(0, len(queries), batch_size):
                    chunk = queries[start : start + batch_size]
                    out.extend(self.run_batch([(q, trial) for q in chunk]))
                    bar.advance(task, len(chunk))
        for c in (self.query_cache, getattr(self, "rerank_queries", None), getattr(self, "rerank_passages", None)):
            if c is not None:
                c.flush()
        if self.query_cache is not None:
            self.stats.update(query_cache_hits=self.query_cache.hits, query_cache_misses=self.query_cache.misses)
        self.stats["outcomes"] = {k: sum(1 for t in out if t.outcome == k)
                                  for k in ("answered", "abstained", "refused", "error")}
        return self.header(dataset_version, run_name), out


def run_pipeline(
    config_path: str | Path,
    corpus: Any,
    golden: Any,
    *,
    trials: int = 1,
    progress: bool = True,
    out: str | Path | None = None,
) -> tuple[RunHeader, list[Trace]]:
    """Load a config, build the pipeline, run every golden query; optionally write the trace file."""
    pipe = Pipeline.from_config(config_path, corpus)
    queries: Sequence[Any] = getattr(golden, "queries", golden)
    header, traces = pipe.run(queries, trials=trials, progress=progress,
                              dataset_version=getattr(golden, "dataset_version", None))
    if out is not None:
        from ragassay.trace.io import write_traces

        write_traces(out, header, traces)
    return header, traces
