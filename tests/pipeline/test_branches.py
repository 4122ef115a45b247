import numpy as np
import pytest

from ragassay.pipeline import Pipeline, build_index
from ragassay.pipeline.index import ExactIndex, HNSWIndex


def _ask(pipe, question):
    from types import SimpleNamespace

    return pipe.run_query(SimpleNamespace(query_id="q", question=question))


def test_bm25_branch_top_hit_on_hand_cases(small_corpus):
    pipe = Pipeline.from_config({"chunker": {"kind": "sentence", "size": 40}, "bm25": {"depth": 5}}, small_corpus)
    tr = _ask(pipe, "what does copyleft require for modified versions")
    top = tr.branches["bm25"][0]
    assert top.doc_id == "gpl" and "modified versions" in small_corpus.docs["gpl"].text[top.start : top.end]
    assert [u.rank for u in tr.branches["bm25"]] == list(range(1, len(tr.branches["bm25"]) + 1))
    scores = [u.score for u in tr.branches["bm25"]]
    assert scores == sorted(scores, reverse=True) and min(scores) > 0
    # no query term in the vocabulary: the branch returns nothing rather than arbitrary chunks
    assert _ask(pipe, "zzzqqq").branches["bm25"] == []


def test_bm25_scores_match_bm25s_formula_by_hand(small_corpus):
    # Lucene BM25 (bm25s default, Kamphuis et al. 2020): idf = ln(1 + (N - df + .5)/(df + .5));
    # tf part = tf / (tf + k1*(1 - b + b*L/avgL)) (Lucene drops the rank-neutral (k1 + 1) factor)
    pipe = Pipeline.from_config({"chunker": {"kind": "recursive", "size": 500},
                                 "bm25": {"stemmer": None, "stopwords": None, "k1": 1.2, "b": 0.75}}, small_corpus)
    tr = _ask(pipe, "orbit")
    terms = [pipe.analyzer(c.text) for c in pipe.chunks]
    n, avg = len(terms), np.mean([len(t) for t in terms])
    df = sum("orbit" in t for t in terms)
    i = next(k for k, t in enumerate(terms) if "orbit" in t)
    tf, L = terms[i].count("orbit"), len(terms[i])
    want = np.log(1 + (n - df + 0.5) / (df + 0.5)) * tf / (tf + 1.2 * (1 - 0.75 + 0.75 * L / avg))
    assert tr.branches["bm25"][0].score == pytest.approx(want, rel=1e-5)


def test_dense_wordllama_branch_top_hit(small_corpus, tmp_path):
    cfg = {"chunker": {"kind": "sentence", "size": 40}, "bm25": {"enabled": False},
           "dense": {"enabled": True, "depth": 3}, "cache_dir": str(tmp_path)}
    pipe = Pipeline.from_config(cfg, small_corpus)
    tr = _ask(pipe, "rocket orbital velocity")
    assert tr.branches["dense"][0].doc_id == "space"
    assert len(tr.branches["dense"]) == 3
    assert pipe.stats["embedder"] == "wordllama-l2_supercat-256" and pipe.stats["truncated_chunks"] == 0


def test_embedding_cache_avoids_re_embedding(small_corpus, tmp_path):
    cfg = {"chunker": {"kind": "sentence", "size": 40}, "dense": {"enabled": True}, "cache_dir": str(tmp_path)}
    first = Pipeline.from_config(cfg, small_corpus)
    assert first.stats["embed_cache_misses"] > 0 and first.stats["embed_cache_hits"] == 0
    second = Pipeline.from_config(cfg, small_corpus)
    assert second.stats["embed_cache_misses"] == 0 and second.stats["embed_cache_hits"] == len(second.chunks)
    assert second._embedder._model is None  # served from the cache: the model was never loaded
    np.testing.assert_allclose(first.dense_index.vectors, second.dense_index.vectors)


def test_exact_index_ties_break_by_row():
    v = np.array([[1, 0], [1, 0], [0, 1]], dtype=np.float32)
    ids, scores = ExactIndex(v).search(np.array([[1, 0]], dtype=np.float32), 2)
    assert ids.tolist() == [[0, 1]] and scores.tolist() == [[1.0, 1.0]]


def test_hnsw_high_ef_matches_exact_search():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2000, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = rng.standard_normal((50, 32)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    k = 10
    exact_ids, _ = build_index(x, "exact").search(q, k)
    # independent oracle: full argsort of the score matrix
    oracle = np.argsort(-(q @ x.T), axis=1, kind="stable")[:, :k]
    assert (exact_ids == oracle).all()
    hnsw = HNSWIndex(x, m=16, ef_construction=200, ef_search=400)
    approx_ids, _ = hnsw.search(q, k)
    recall = np.mean([len(set(a) & set(e)) / k for a, e in zip(approx_ids, exact_ids, strict=True)])
    assert recall >= 0.99
    hnsw.ef_search = 1
    low, _ = hnsw.search(q, k)
    assert np.mean([len(set(a) & set(e)) / k for a, e in zip(low, exact_ids, strict=True)]) <= recall
