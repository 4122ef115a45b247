"""The batched query path's array kernels (sparse-product BM25, flat top-k, flat fusion) and the traces they
produce, against bm25s per query, brute-force sorting, the dict fusions and the per-query pipeline path."""

import json

import numpy as np
import pytest

from ragassay.analysis.demo import DEMO_CONFIGS, demo_config_dir
from ragassay.corpus import Corpus, Document, bundled_corpus_dir, load_corpus
from ragassay.golden import build_golden, bundled_golden_source
from ragassay.pipeline import Pipeline, load_config
from ragassay.pipeline.fusion import RankedLists, fuse_batch, rrf, weighted
from ragassay.pipeline.index import top_k_flat

VOCAB = [f"w{i:02d}" for i in range(40)] + ["license", "licenses", "licensed", "the", "of", "Copyleft"]


def _json(trace) -> str:
    d = trace.model_dump(mode="json")
    d.pop("durations_ms")
    return json.dumps(d, sort_keys=True)


def _random_corpus(seed: int) -> Corpus:
    """Short documents over a small Zipf-weighted vocabulary: many chunks of equal length and equal term
    counts, so BM25 scores tie exactly and the tie rules decide the rankings."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, len(VOCAB) + 1)
    p /= p.sum()
    docs = []
    for d in range(30):
        sentences = []
        for _ in range(int(rng.integers(1, 6))):
            words = rng.choice(VOCAB, size=int(rng.integers(3, 12)), p=p)
            sentences.append(" ".join(words).capitalize() + ".")
        docs.append(Document.from_raw(f"doc{d:02d}", " ".join(sentences)))
    return Corpus(docs)


def _random_questions(seed: int, n: int) -> list[str]:
    rng = np.random.default_rng(seed)
    out = ["", "the of", "zzz unknownword", "w00 w00 w00", "w01 w00 w01", "What does Copyleft mean"]
    for _ in range(n - len(out)):
        words = list(rng.choice(VOCAB, size=int(rng.integers(1, 7))))
        if rng.random() < 0.2:
            words.append("neverseen")
        out.append(" ".join(words))
    return out


def _brute_top(scores: np.ndarray, k: int, positive: bool) -> list[list[int]]:
    out = []
    for row in scores:
        cols = [c for c in range(len(row)) if row[c] > 0 or not positive]
        out.append(sorted(cols, key=lambda c: (-row[c], c))[:k])
    return out


@pytest.mark.parametrize("positive", [False, True])
def test_top_k_flat_equals_a_full_sort_with_ties(positive):
    rng = np.random.default_rng(11)
    for q, n, k in ((9, 30, 5), (4, 7, 7), (3, 5, 12), (6, 50, 1), (0, 10, 3)):
        # a few integer levels, zeros and negatives included: ties at the k-th value are the rule
        scores = rng.integers(-2, 4, size=(q, n)).astype(np.float32)
        offsets, cols, vals = top_k_flat(scores, k, positive=positive)
        want = _brute_top(scores, k, positive)
        got = [cols[offsets[r]:offsets[r + 1]].tolist() for r in range(q)]
        assert got == want
        assert vals.tolist() == [float(scores[r, c]) for r in range(q) for c in want[r]]
        assert vals.dtype == np.float32 and offsets.tolist()[0] == 0 and len(offsets) == q + 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bm25_sparse_product_is_bm25s_bit_for_bit(seed):
    corpus = _random_corpus(seed)
    pipe = Pipeline.from_config({"chunker": {"kind": "fixed", "size": 6}, "bm25": {"depth": 7}}, corpus)
    questions = _random_questions(seed, 80)
    terms = [pipe.analyzer(q) for q in questions]
    got = pipe._bm25_batch(terms)
    ties_at_cut = 0
    for j, t in enumerate(terms):
        rows, scores = got[j]
        ids = pipe.bm25.get_tokens_ids(t)
        ref = (np.asarray(pipe.bm25.get_scores_from_ids(ids), dtype=np.float32) if ids
               else np.zeros(len(pipe.chunks), dtype=np.float32))
        want = _brute_top(ref[None, :], 7, positive=True)[0]
        assert rows.tolist() == want
        # float32 sums bit-identical to bm25s, stored as float64 exactly as the per-query path stores them
        assert np.array_equal(scores, ref[want].astype(np.float64))
        assert [(int(i), float(s)) for i, s in zip(rows, scores, strict=True)] == pipe._bm25(questions[j])
        pos = np.sort(ref[ref > 0])[::-1]
        ties_at_cut += len(pos) > 7 and pos[6] == pos[7]
    assert ties_at_cut >= 5  # the ranking's tie rule was exercised, not just distinct scores
    assert got[0][0].size == 0 and got[1][0].size == 0 and got[2][0].size == 0


@pytest.mark.parametrize("method", ["rrf", "weighted"])
def test_fuse_batch_on_ranked_lists_equals_dict_fusion(method):
    rng = np.random.default_rng(5)
    n_rows, nq = 30, 40
    uids = [f"d{i % 4}:{(i * 37) % 101}-{i}" for i in range(n_rows)]
    tie = np.empty(n_rows, dtype=np.int64)
    tie[sorted(range(n_rows), key=lambda i: uids[i])] = np.arange(n_rows)
    branches = {}
    for b in ("bm25", "dense", "sparse"):
        pairs = []
        for q in range(nq):
            n = int(rng.integers(0, 12)) if q % 7 else 0
            rows = rng.choice(n_rows, size=n, replace=False)
            level = 1 if q % 5 == 0 else 4  # constant-score lists hit the min == max rule
            pairs.append((rows, np.sort(rng.integers(0, level, size=n).astype(np.float64))[::-1]))
        branches[b] = pairs
    weights = {"bm25": 0.5, "dense": 2.0} if method == "weighted" else None
    for depth in (None, 6):
        flat = fuse_batch({b: RankedLists.from_pairs(v) for b, v in branches.items()}, method, 60.0, weights,
                          depth, tie)
        for q in range(nq):
            named = {b: [(uids[i], float(s)) for i, s in zip(*branches[b][q], strict=True)] for b in branches}
            want = (rrf({b: [u for u, _ in v] for b, v in named.items()}, k=60.0, depth=depth)
                    if method == "rrf" else weighted(named, weights, depth=depth))
            rows, scores = flat[q]
            assert [(uids[i], s) for i, s in zip(rows.tolist(), scores.tolist(), strict=True)] == want
    one = fuse_batch({"bm25": branches["bm25"]}, method, 60.0, {"bm25": 0.5} if weights else None, 4, tie)
    for q in range(nq):
        named = [(uids[i], float(s)) for i, s in zip(*branches["bm25"][q], strict=True)]
        want = (rrf({"bm25": [u for u, _ in named]}, k=60.0, depth=4) if method == "rrf"
                else weighted({"bm25": named}, {"bm25": 0.5}, depth=4))
        assert [(uids[i], s) for i, s in zip(*(x.tolist() for x in one[q]), strict=True)] == want


@pytest.mark.parametrize("seed", [3, 4])
def test_batched_traces_equal_per_query_traces_on_a_random_corpus(seed):
    corpus = _random_corpus(seed)
    cfg = {"chunker": {"kind": "sentence", "size": 12}, "bm25": {"depth": 9}, "fusion": {"depth": 8},
           "reranker": {"kind": "none", "final_k": 6}, "packer": {"budget_tokens": 30},
           "generator": {"abstain_floor": 0.2}}
    pipe = Pipeline.from_config(cfg, corpus)
    queries = [type("Q", (), {"query_id": f"q{j}", "question": s})() for j, s in
               enumerate(_random_questions(seed, 70))]
    queries.append(type("Q", (), {"query_id": "dup", "question": queries[9].question})())
    _, batched = pipe.run(queries, trials=2, progress=False, batch_size=16)
    single = [pipe.run_query(q, trial) for trial in range(2) for q in queries]
    assert [_json(b) for b in batched] == [_json(s) for s in single]
    assert {t.outcome for t in batched} == {"answered", "abstained"}
    assert sum(bool(t.cut) for t in batched) > 10  # the budget cut something: packing was exercised


@pytest.fixture(scope="module")
def bundled():
    corpus = load_corpus(bundled_corpus_dir())
    return corpus, build_golden(bundled_golden_source(), corpus)


@pytest.mark.slow
@pytest.mark.parametrize("name", DEMO_CONFIGS)
def test_batched_traces_equal_per_query_traces_on_the_demo_configs(bundled, tmp_path, name):
    corpus, golden = bundled
    cfg = load_config(demo_config_dir() / f"{name}.yaml").model_copy(update={"cache_dir": str(tmp_path)})
    pipe = Pipeline(cfg, corpus)
    queries = golden.queries if name in ("bm25", "oracle") else golden.queries[::3]
    _, batched = pipe.run(queries, progress=False, batch_size=64)
    single = [pipe.run_query(q) for q in queries]
    assert [_json(b) for b in batched] == [_json(s) for s in single]
    assert len(batched) == len(queries) and any(t.outcome == "answered" for t in batched)


@pytest.mark.parametrize("opts", [{}, {"lowercase": False, "stopwords": None}, {"stemmer": None}])
def test_analyzer_many_equals_stemming_each_text_on_its_own(opts):
    import re

    import bm25s.stopwords
    import Stemmer

    from ragassay.pipeline.analyzer import Analyzer

    an = Analyzer(**opts)
    rng = np.random.default_rng(9)
    words = ["Licensing", "licensed", "RUNNING", "runs", "the", "Of", "généralement", "x", "42", "abc_def"]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(0, 9)))) + "." for _ in range(60)] + ["", "  "]
    stop = set(bm25s.stopwords.STOPWORDS_EN) if opts.get("stopwords", "en") else set()
    stem = Stemmer.Stemmer("english") if opts.get("stemmer", "english") else None
    want = []
    for t in texts:
        ws = [w for w in re.findall(r"(?u)\b\w\w+\b", t.lower() if opts.get("lowercase", True) else t)
              if w not in stop]
        want.append(stem.stemWords(ws) if stem else ws)
    assert an.many(texts) == want
    assert [an(t) for t in reversed(texts)] == want[::-1]  # the memo gives the same stems later
    assert an.many(iter(texts[:5])) == want[:5]


def test_analyzers_sharing_stems_give_their_own_terms():
    from ragassay.pipeline.analyzer import Analyzer
    from ragassay.pipeline.generator import support_analyzer

    bm25, support, plain = Analyzer(), support_analyzer(), Analyzer(stemmer="french")
    text = "The licensee would rather be running the licensed programs, which they are not."
    want_bm25, want_support, want_plain = Analyzer()(text), support_analyzer()(text), Analyzer(stemmer="french")(text)
    support.share_stems(bm25)
    plain.share_stems(bm25)  # another algorithm: not shared
    assert bm25.many([text]) == [want_bm25] and support(text) == want_support and plain(text) == want_plain
    assert support._stems is bm25._stems and plain._stems is not bm25._stems
    assert want_support != want_bm25  # different stopword lists, so sharing stems must not merge them


def test_generator_question_cache_stays_bounded_and_answers_the_same(small_corpus, monkeypatch):
    import ragassay.pipeline.generator as gen

    pipe = Pipeline.from_config({"chunker": {"kind": "sentence", "size": 30}}, small_corpus)
    queries = [type("Q", (), {"query_id": f"q{j}", "question": f"bread flour w{j} yeast"})() for j in range(40)]
    _, unbounded = pipe.run(queries, trials=2, progress=False, batch_size=8)
    monkeypatch.setattr(gen, "QUESTION_CACHE", 5)
    pipe2 = Pipeline.from_config({"chunker": {"kind": "sentence", "size": 30}}, small_corpus)
    _, bounded = pipe2.run(queries, trials=2, progress=False, batch_size=8)
    assert len(pipe2._generator._questions) <= 5 < len(pipe._generator._questions) == 40
    assert [_json(t) for t in bounded] == [_json(t) for t in unbounded]
    assert {t.outcome for t in bounded} == {"answered"}
