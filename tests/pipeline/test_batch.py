"""The batched query path (Pipeline.run / run_batch) against the straightforward per-query path."""

import gc
from types import SimpleNamespace

import numpy as np
import pytest

from ragassay.corpus import bundled_corpus_dir, load_corpus
from ragassay.golden import build_golden, bundled_golden_source
from ragassay.pipeline import Pipeline, load_config
from ragassay.pipeline.fusion import fuse_batch, rrf, weighted
from ragassay.pipeline.index import ExactIndex
from ragassay.trace import Trace, Unit
from ragassay.trace.schema import trusted_units

CONFIGS = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "configs"


@pytest.fixture(scope="module")
def bundled():
    corpus = load_corpus(bundled_corpus_dir())
    return corpus, build_golden(bundled_golden_source(), corpus)


def _content(t: Trace) -> dict:
    d = t.model_dump(mode="json")
    d.pop("durations_ms")
    return d


@pytest.mark.parametrize("variant", ["hybrid_rerank", "hybrid_weighted"])
def test_batched_run_equals_per_query_traces_on_bundled_golden(bundled, tmp_path, variant):
    corpus, golden = bundled
    name = "hybrid_rerank" if variant == "hybrid_rerank" else "hybrid"
    cfg = load_config(CONFIGS / f"{name}.yaml").model_copy(update={"cache_dir": str(tmp_path)})
    if variant == "hybrid_weighted":
        cfg.fusion.method, cfg.fusion.weights = "weighted", {"bm25": 0.3, "dense": 0.7}
    pipe = Pipeline(cfg, corpus)
    queries = golden.queries[::2]  # every stratum, half the set: keeps the test short
    _, batched = pipe.run(queries, trials=2, progress=False, batch_size=40)
    single = [pipe.run_query(q, trial) for trial in range(2) for q in queries]
    assert len(batched) == len(single) == 2 * len(queries)
    for b, s in zip(batched, single, strict=True):
        assert _content(b) == _content(s)
        # the batched path times only each item's own stages; the per-query path times the whole request
        assert set(s.durations_ms) >= {"bm25", "dense", "fusion", "pack", "generate", "total"}
        assert set(b.durations_ms) == set(s.durations_ms) - {"bm25", "dense", "fusion", "total"}
        # what the batch path builds without validation passes validation unchanged
        assert Trace.model_validate(b.model_dump()) == b
    assert {t.outcome for t in batched} <= {"answered", "abstained"}
    assert any(t.reranked for t in batched) == (variant == "hybrid_rerank")


def test_bm25_batch_scores_equal_bm25s_per_query_scores(small_corpus):
    pipe = Pipeline.from_config({"chunker": {"kind": "sentence", "size": 20}, "bm25": {"depth": 50}},
                                small_corpus)
    questions = ["bread bread flour", "copyleft license", "zzzqq", "orbit velocity earth orbit", ""]
    terms = [pipe.analyzer(q) for q in questions]
    got = pipe._bm25_batch(terms)
    for q, t, (rows, scores) in zip(questions, terms, got, strict=True):
        ids = pipe.bm25.get_tokens_ids(t)
        ref = np.asarray(pipe.bm25.get_scores_from_ids(ids), dtype=np.float64) if ids else np.zeros(0)
        assert [(int(i), float(ref[i])) for i in rows] == pipe._bm25(q)
        assert scores.tolist() == [float(ref[i]) for i in rows]
        if ids:
            want = np.flatnonzero(ref > 0)
            assert sorted(rows.tolist()) == want.tolist()
    assert got[2][0].size == 0 and got[4][0].size == 0


def test_fuse_batch_equals_dict_fusion_bit_for_bit():
    rng = np.random.default_rng(7)
    n_rows = 40
    uids = [f"d{rng.integers(0, 3)}:{rng.integers(0, 999)}-{i}" for i in range(n_rows)]
    tie = np.empty(n_rows, dtype=np.int64)
    tie[sorted(range(n_rows), key=lambda i: uids[i])] = np.arange(n_rows)
    branches = {"bm25": [], "dense": []}
    for _ in range(25):
        for b in branches:
            n = int(rng.integers(0, 15))
            rows = rng.choice(n_rows, size=n, replace=False)
            # coarse scores so min-max ties and rrf ties both occur
            scores = np.sort(rng.integers(0, 4, size=n).astype(np.float64))[::-1]
            branches[b].append((rows, scores))
    for method, weights in (("rrf", None), ("weighted", {"bm25": 0.25, "dense": 1.5})):
        got = fuse_batch(branches, method, k=60.0, weights=weights, depth=12, tiebreak=tie)
        for q in range(25):
            named = {b: [(uids[i], float(s)) for i, s in zip(*branches[b][q], strict=True)] for b in branches}
            if method == "rrf":
                want = rrf({b: [u for u, _ in v] for b, v in named.items()}, k=60.0, depth=12)
            else:
                want = weighted(named, weights, depth=12)
            rows, scores = got[q]
            assert [(uids[i], s) for i, s in zip(rows.tolist(), scores.tolist(), strict=True)] == want
    with pytest.raises(ValueError, match="not enabled"):
        fuse_batch(branches, "weighted", weights={"sparse": 1.0})


def test_exact_index_scores_do_not_depend_on_the_batch():
    rng = np.random.default_rng(3)
    vecs = rng.normal(size=(300, 64)).astype(np.float32)
    queries = rng.normal(size=(37, 64)).astype(np.float32)
    index = ExactIndex(vecs)
    ids, scores = index.search(queries, 20)
    for r in range(len(queries)):
        i1, s1 = index.search(queries[r], 20)
        assert np.array_equal(i1[0], ids[r]) and np.array_equal(s1[0], scores[r])
    # independent oracle: float64 inner products give the same top rows (no near-ties in random data)
    want = np.argsort(-(queries.astype(np.float64) @ vecs.T.astype(np.float64)), axis=1)[:, :20]
    assert np.array_equal(ids, want)


def test_trusted_units_equal_validated_units():
    spans = [("a:0-5", "a", 0, 5, "hello", 1), ("b:3-9", "b", 3, 9, "world!", 2)]
    got = trusted_units(spans, [(1, (1, 0.5)), (2, (0, None))], with_text=True)
    want = [Unit(unit_id="b:3-9", doc_id="b", start=3, end=9, score=0.5, rank=1, text="world!", tokens=2),
            Unit(unit_id="a:0-5", doc_id="a", start=0, end=5, score=None, rank=2, text="hello", tokens=1)]
    assert got == want and [u.model_dump_json() for u in got] == [u.model_dump_json() for u in want]
    bare = trusted_units(spans, [(1, (0, 1.0))])
    assert bare[0].text is None and bare[0].model_fields_set == set(Unit.model_fields)
    bare[0].score = 2.0  # assignment still works on a trusted unit
    assert bare[0].score == 2.0


def test_batch_restores_the_garbage_collector_state(small_corpus):
    pipe = Pipeline.from_config({"chunker": {"kind": "sentence", "size": 30}}, small_corpus)
    q = SimpleNamespace(query_id="q", question="bread")
    was = gc.isenabled()
    try:
        gc.enable()
        pipe.run_batch([(q, 0)])
        assert gc.isenabled()
        gc.disable()
        pipe.run_batch([(q, 0)])
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def test_failing_batched_stage_gives_every_item_an_error_trace(small_corpus):
    from ragassay.pipeline.embedders import make_embedder

    class QueryFails:
        def __init__(self):
            self.inner = make_embedder("wordllama")
            self.name, self.dim, self.max_tokens = "flaky", self.inner.dim, self.inner.max_tokens

        def embed_passages(self, texts):
            return self.inner.embed_passages(texts)

        def embed_queries(self, texts):
            raise RuntimeError("embedding service down")

        def token_lengths(self, texts):
            return self.inner.token_lengths(texts)

    pipe = Pipeline.from_config({"chunker": {"kind": "sentence", "size": 30}, "dense": {"enabled": True}},
                                small_corpus, embedder=QueryFails())
    qs = [SimpleNamespace(query_id=f"q{i}", question=f"bread {i}") for i in range(3)]
    batched = pipe.run_batch([(q, 0) for q in qs])
    single = [pipe.run_query(q) for q in qs]
    assert [t.outcome for t in batched] == ["error"] * 3
    assert [t.error for t in batched] == [t.error for t in single] == ["RuntimeError: embedding service down"] * 3


def test_warm_cache_reuses_chunks_and_bm25_index_with_identical_traces(small_corpus, tmp_path):
    cfg = {"chunker": {"kind": "sentence", "size": 30}, "cache_dir": str(tmp_path)}
    qs = [SimpleNamespace(query_id="a", question="how long does the dough rise"),
          SimpleNamespace(query_id="b", question="what is copyleft")]
    cold = Pipeline.from_config(cfg, small_corpus)
    warm = Pipeline.from_config(cfg, small_corpus)
    assert (cold.stats["chunk_cache"], cold.stats["bm25_cache"]) == ("miss", "miss")
    assert (warm.stats["chunk_cache"], warm.stats["bm25_cache"]) == ("hit", "hit")
    _, a = cold.run(qs, progress=False)
    _, b = warm.run(qs, progress=False)
    assert [_content(t) for t in a] == [_content(t) for t in b]
    assert warm.bm25.vocab_dict == cold.bm25.vocab_dict
    for key in ("data", "indices", "indptr"):
        assert np.array_equal(warm.bm25.scores[key], cold.bm25.scores[key])
    other = Pipeline.from_config({**cfg, "bm25": {"k1": 0.9}}, small_corpus)  # different index, new entry
    assert other.stats["bm25_cache"] == "miss" and other.stats["chunk_cache"] == "hit"
