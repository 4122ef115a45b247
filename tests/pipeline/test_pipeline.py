from types import SimpleNamespace

import pytest

from ragassay.errors import SchemaError
from ragassay.golden.schema import Evidence, GoldenQuery
from ragassay.pipeline import Pipeline, load_config
from ragassay.pipeline.analyzer import Analyzer, TermStats
from ragassay.pipeline.generator import ExtractiveGenerator
from ragassay.trace import Unit, read_traces, write_traces

HYBRID = {"chunker": {"kind": "sentence", "size": 30}, "dense": {"enabled": True},
          "fusion": {"method": "rrf", "depth": 6}, "reranker": {"kind": "lexical", "final_k": 4},
          "packer": {"budget_tokens": 60}, "generator": {"abstain_floor": 0.25, "max_sentences": 2}}


def _q(qid, question, evidence=(), answerable=True):
    return GoldenQuery(query_id=qid, question=question, stratum="s", answerable=answerable, evidence=list(evidence))


def _ev(corpus, doc_id, quote, grade):
    s = corpus.docs[doc_id].text.index(quote)
    return Evidence(doc_id=doc_id, start=s, end=s + len(quote), grade=grade, quote=quote)


def test_oracle_mode_packs_exactly_the_graded_golden_spans(small_corpus):
    q = _q("q1", "What does copyleft require?", [
        _ev(small_corpus, "gpl", "modified versions be distributed under the same license", 3),
        _ev(small_corpus, "mit", "It has no copyleft clause.", 1),  # grade 1: not oracle context
        _ev(small_corpus, "gpl", "Source code must be offered.", 2),
    ])
    neg = _q("q2", "How tall is Mount Everest?", answerable=False)
    pipe = Pipeline.from_config({"oracle": True}, small_corpus)
    _, (tr, tr_neg) = pipe.run([q, neg], progress=False)
    want = [(e.doc_id, e.start, e.end) for e in q.evidence if e.grade >= 2]
    assert [(u.doc_id, u.start, u.end) for u in tr.packed] == want
    assert [u.text for u in tr.packed] == [e.quote for e in q.evidence if e.grade >= 2]
    assert tr.branches == {} and tr.fused == [] and tr.reranked is None
    assert tr.packed_tokens == sum(u.tokens for u in tr.packed)
    assert tr_neg.packed == [] and tr_neg.outcome == "abstained" and tr_neg.answer is None


def test_extractive_generator_abstains_below_floor_and_cites_only_packed(small_corpus):
    pipe = Pipeline.from_config(HYBRID, small_corpus)
    _, traces = pipe.run([_q("a", "For how many hours does it rise?"),
                          _q("b", "Which quantum chromodynamics vertex renormalizes?")], progress=False)
    ans, neg = traces
    assert ans.outcome == "answered" and "rise for two hours" in ans.answer
    packed_ids = {u.unit_id for u in ans.packed}
    assert ans.citations and {c.unit_id for c in ans.citations} <= packed_ids
    for c in ans.citations:
        text = small_corpus.docs[c.doc_id].text[c.start : c.end]
        assert text in ans.answer
        unit = next(u for u in ans.packed if u.unit_id == c.unit_id)
        assert unit.start <= c.start and c.end <= unit.end
    assert neg.outcome == "abstained" and neg.answer is None and neg.citations == []
    assert neg.meta["best_support"] < 0.25


def test_generator_floor_is_a_strict_threshold_by_hand():
    an = Analyzer(stemmer=None, stopwords=None)
    stats = TermStats([["alpha", "beta"], ["beta"], ["gamma"]])
    text = "alpha here. beta there."
    unit = Unit(unit_id="u1", doc_id="d", start=10, end=10 + len(text), text=text, tokens=6)
    # query {alpha, beta}: sentence 1 covers idf(alpha) / (idf(alpha)+idf(beta))
    share = stats.idf("alpha") / (stats.idf("alpha") + stats.idf("beta"))
    hi = ExtractiveGenerator(an, stats, abstain_floor=share, max_sentences=1).generate("alpha beta", [unit])
    assert hi.outcome == "answered" and hi.answer == "alpha here." and hi.citations[0].start == 10
    lo = ExtractiveGenerator(an, stats, abstain_floor=share + 1e-9, max_sentences=1).generate("alpha beta", [unit])
    assert lo.outcome == "abstained" and lo.answer is None
    assert ExtractiveGenerator(an, stats).generate("alpha", []).outcome == "abstained"


def test_pipeline_trace_written_and_read_back_is_identical(small_corpus, tmp_path):
    pipe = Pipeline.from_config({**HYBRID, "cache_dir": str(tmp_path / "cache")}, small_corpus)
    header, traces = pipe.run([_q("a", "For how many hours does it rise?"), _q("b", "What is copyleft?")],
                              trials=2, progress=False, dataset_version="v-test")
    assert [t.trial for t in traces] == [0, 0, 1, 1]
    t0 = traces[0]
    # Pipeline.run batches retrieval: only each query's own stages are timed, and there is no made-up total
    assert set(t0.durations_ms) == {"rerank", "pack", "generate"}
    single = pipe.run_query(_q("a", "For how many hours does it rise?"))
    assert set(single.durations_ms) == {"bm25", "dense", "fusion", "rerank", "pack", "generate", "total"}
    assert single.durations_ms["total"] >= sum(v for k, v in single.durations_ms.items() if k != "total")
    assert set(header.durations_ms) >= {"chunk", "embed", "bm25_index", "dense_index"}
    assert len(t0.reranked) <= 4 and t0.packed_tokens <= 60
    assert [u.unit_id for u in t0.packed] + [u.unit_id for u in t0.cut] == [u.unit_id for u in t0.reranked]
    path = write_traces(tmp_path / "run.jsonl", header, traces)
    h2, back, problems = read_traces(path, strict=True)
    assert problems == [] and h2 == header and back == traces
    assert h2.config_sha == pipe.config_sha and h2.token_counter == "regex-wordpunct-v1"


def test_stage_error_becomes_error_trace(small_corpus):
    class Broken:
        name = "broken"

        def generate(self, question, packed):
            raise RuntimeError("model unavailable")

    pipe = Pipeline.from_config({"chunker": {"kind": "sentence", "size": 30}}, small_corpus, generator=Broken())
    tr = pipe.run_query(SimpleNamespace(query_id="x", question="bread"))
    assert tr.outcome == "error" and tr.error == "RuntimeError: model unavailable"


def test_config_unknown_keys_are_named_with_the_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("bm25:\n  k1: 1.2\n  stemer: english\npacker:\n  budget: 10\n")
    with pytest.raises(SchemaError) as err:
        load_config(p)
    msg = str(err.value)
    assert f"{p}: unknown key 'bm25.stemer'" in msg and f"{p}: unknown key 'packer.budget'" in msg
    p.write_text("chunker:\n  kind: sentence\n  overlap: 5\n")
    with pytest.raises(SchemaError, match="overlap applies to the fixed chunker only"):
        load_config(p)


def test_example_configs_validate():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "examples" / "configs"
    cfgs = {p.stem: load_config(p) for p in root.glob("*.yaml")}
    assert {"bm25", "hybrid", "hybrid_rerank", "oracle"} <= set(cfgs)
    assert cfgs["hybrid_rerank"].fusion.depth == 50 and cfgs["hybrid_rerank"].reranker.final_k == 5
    assert cfgs["oracle"].oracle and not cfgs["bm25"].dense.enabled and cfgs["hybrid"].dense.enabled


@pytest.mark.dense
def test_minilm_dense_branch_and_truncation_count(small_corpus, tmp_path):
    cfg = {"chunker": {"kind": "fixed", "size": 20}, "bm25": {"enabled": False},
           "dense": {"enabled": True, "embedder": "minilm", "depth": 3, "max_tokens": 16},
           "cache_dir": str(tmp_path)}
    pipe = Pipeline.from_config(cfg, small_corpus)
    tr = pipe.run_query(SimpleNamespace(query_id="q", question="how fast must a rocket go to reach orbit"))
    assert tr.branches["dense"][0].doc_id == "space"
    # independent count with the model's own tokenizer (special tokens included)
    tok = pipe._embedder.model.tokenizer
    want = sum(len(tok(c.text)["input_ids"]) > 16 for c in pipe.chunks)
    assert pipe.stats["truncated_chunks"] == want > 0
    assert pipe.stats["embedder"] == "all-MiniLM-L6-v2"
