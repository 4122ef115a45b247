"""Every unit is checked against the corpus before it can earn credit; undefined figures stay undefined;
the judged fraction and the tokens delivered are measured, not printed."""

import math
import random

import numpy as np
import pytest
import yaml

from ragassay.analysis.demo import demo_config_dir
from ragassay.analysis.runner import config_warnings, load_inputs, run_pipeline_into_store
from ragassay.analysis.scoring import Labels, ScoringOptions, score_traces
from ragassay.errors import InputError
from ragassay.golden import GoldenSet
from ragassay.golden.schema import Evidence, GoldenQuery
from ragassay.store import Store
from ragassay.trace import RAW_OFFSETS_HINT, Trace, Unit, validate_units


@pytest.fixture(scope="module")
def bundled():
    return load_inputs(None, None)


def _reference_failures(traces, texts):
    """The checks of validate_units written as a plain per-unit loop: {(query, field, position): reason}."""
    out = {}
    for t in traces:
        for name, units in t.unit_lists():
            seen_ids, seen_spans = set(), set()
            for i, u in enumerate(units):
                text = texts.get(u.doc_id)
                if text is None:
                    reason = "not in the corpus"
                elif u.start < 0:
                    reason = "is negative"
                elif u.end < u.start:
                    reason = "< start"
                elif u.end > len(text):
                    reason = "runs past the end"
                elif u.text is not None and text[u.start:u.end] != u.text:
                    reason = "text does not match"
                elif u.score is not None and not math.isfinite(u.score):
                    reason = "not a finite number"
                elif u.unit_id in seen_ids or (u.doc_id, u.start, u.end) in seen_spans:
                    reason = "repeats"
                else:
                    reason = None
                seen_ids.add(u.unit_id)
                seen_spans.add((u.doc_id, u.start, u.end))
                if reason:
                    out[(t.query_id, name, i)] = reason
    return out


def test_vectorized_validation_matches_a_per_unit_loop_on_random_units():
    rng = random.Random(7)
    texts = {"a": "alpha beta gamma delta " * 4, "b": "one two three", "c": ""}
    docs = ["a", "b", "c", "a.txt", "zz"]
    traces = []
    for q in range(60):
        lists = {}
        for name in ("fused", "packed", "cut"):
            units = []
            for i in range(rng.randrange(0, 9)):
                doc = rng.choice(docs)
                s = rng.randrange(-2, 40)
                e = s + rng.randrange(-3, 20)
                text = texts.get(doc, "x" * 50)
                body = rng.choice([None, None, text[max(s, 0):max(e, 0)], "nope"])
                score = rng.choice([1.0, 0.5, float("nan"), float("inf"), None])
                uid = rng.choice([f"u{i}", f"u{i}", "dup"])
                units.append(Unit(unit_id=uid, doc_id=doc, start=s, end=e, text=body, score=score))
            lists[name] = units
        traces.append(Trace(trace_id=str(q), query_id=f"q{q}", **lists))
    check = validate_units(traces, texts)
    want = _reference_failures(traces, texts)
    got = {(f.query_id, f.field, f.position): f.message for f in check.failures}
    assert got.keys() == want.keys() and len(want) > 100
    assert all(want[k] in got[k] for k in want)
    for (q, name, i) in want:
        assert i in check.bad_positions((q, 0), name)


def _evidence_traces(golden, corpus, raw: bool):
    """One trace per answerable query whose fused list is exactly its evidence spans, with their text."""
    traces = []
    for q in golden.queries:
        units = []
        for j, e in enumerate(q.evidence):
            doc = corpus[e.doc_id]
            s, t = doc.raw_span(e.start, e.end) if raw else (e.start, e.end)
            units.append(Unit(unit_id=f"{q.query_id}-{j}", doc_id=e.doc_id, start=s, end=t,
                              text=(doc.raw if raw else doc.text)[s:t], score=1.0 / (j + 1)))
        traces.append(Trace(trace_id=q.query_id, query_id=q.query_id, fused=units))
    return traces


def test_raw_file_offsets_are_diagnosed_and_never_credited(bundled):
    corpus, golden = bundled
    canonical = score_traces(golden, _evidence_traces(golden, corpus, raw=False), corpus=corpus)
    assert canonical.unit_check.count == 0
    c = canonical.columns
    recall = [v for m, v in zip(c["metric"], c["value"], strict=True) if m == "recall@fusion_depth"]
    assert np.nanmean(recall) == 1.0

    raw_traces = _evidence_traces(golden, corpus, raw=True)
    scored = score_traces(golden, raw_traces, corpus=corpus)
    # independent count: a unit at raw offsets [rs, re) carrying the raw text is wrong wherever the canonical
    # text at those offsets is not that raw text (or does not reach that far)
    def wrong(e):
        doc = corpus[e.doc_id]
        rs, re_ = doc.raw_span(e.start, e.end)
        return re_ > len(doc.text) or doc.text[rs:re_] != doc.raw[rs:re_]

    differs = {(q.query_id, j) for q in golden.queries for j, e in enumerate(q.evidence) if wrong(e)}
    assert len(differs) > 20
    assert scored.unit_check.count == len(differs)
    assert {(f.query_id, f.position) for f in scored.unit_check.failures} == differs
    assert all(RAW_OFFSETS_HINT in f.message for f in scored.unit_check.failures)
    # a bad unit earns nothing: a query all of whose relevant evidence moved has recall 0, not "not relevant"
    rel = {q.query_id: [j for j, e in enumerate(q.evidence) if e.grade >= 2] for q in golden.queries}
    c = scored.columns
    got = {q: v for q, m, v in zip(c["query_id"], c["metric"], c["value"], strict=True) if m == "recall@fusion_depth"}
    for qid, js in rel.items():
        if js:
            assert got[qid] == pytest.approx(sum((qid, j) not in differs for j in js) / len(js))


GS = GoldenSet([
    GoldenQuery(query_id="q1", question="q1", stratum="lexical", answerable=True, reference_answer="a",
                evidence=[Evidence(doc_id="d", start=100, end=150, grade=3, quote="x"),
                          Evidence(doc_id="d", start=300, end=320, grade=0, quote="x")]),
    GoldenQuery(query_id="n1", question="n1", stratum="negative", answerable=False, evidence=[]),
])
TEXTS = {"d": "x" * 1000, "e": "y" * 100}


def _u(i, doc, s, e, **kw):
    return Unit(unit_id=f"u{i}", doc_id=doc, start=s, end=e, score=1.0 / (i + 1), **kw)


def _rows(scored):
    c = scored.columns
    return {(q, m): v for q, m, v in zip(c["query_id"], c["metric"], c["value"], strict=True)}


def _judged(scored):
    c = scored.columns
    return {q: j for q, j in zip(c["query_id"], c["judged_fraction"], strict=True)}


def test_judged_fraction_counts_top_final_k_units_touching_any_labelled_span():
    from ragassay.trace import RunHeader

    header = RunHeader(run_name="r", config={"reranker": {"kind": "none", "final_k": 4}})
    fused = [_u(0, "d", 90, 110),     # touches the grade-3 span
             _u(1, "d", 0, 10),       # touches nothing
             _u(2, "d", 310, 330),    # touches the grade-0 span: judged, not relevant
             _u(3, "d.txt", 100, 150),  # would touch, but fails validation: not judged
             _u(4, "d", 120, 130)]    # beyond final_k = 4
    traces = [Trace(trace_id="a", query_id="q1", fused=fused), Trace(trace_id="b", query_id="n1", fused=[])]
    scored = score_traces(GS, traces, header, corpus=TEXTS)
    assert scored.unit_check.count == 1
    assert _judged(scored) == {"q1": 2 / 4, "n1": None}


def test_answer_only_traces_leave_context_metrics_undefined():
    traces = [Trace(trace_id="a", query_id="q1", outcome="answered", answer="a"),
              Trace(trace_id="b", query_id="n1", outcome="abstained")]
    r = _rows(score_traces(GS, traces, corpus=TEXTS))
    assert math.isnan(r[("q1", "recall@context")]) and math.isnan(r[("q1", "context_tokens")])
    assert math.isnan(r[("n1", "context_tokens")])
    assert r[("q1", "answer_f1")] == 1.0


def test_context_tokens_are_undefined_without_counts_and_zero_when_nothing_was_packed():
    packed = [_u(0, "d", 100, 150)]  # no token count, no packed_tokens
    traces = [Trace(trace_id="a", query_id="q1", fused=packed, packed=packed, outcome="answered", answer="a"),
              Trace(trace_id="b", query_id="n1", fused=[_u(1, "d", 0, 5)], packed=[], outcome="abstained")]
    r = _rows(score_traces(GS, traces, corpus=TEXTS))
    assert math.isnan(r[("q1", "context_tokens")]) and r[("q1", "recall@context")] == 1.0
    # retrieval ran and the packer delivered nothing: a measured 0
    assert r[("n1", "context_tokens")] == 0.0
    counted = [_u(0, "d", 100, 150, tokens=12)]
    r = _rows(score_traces(GS, [Trace(trace_id="a", query_id="q1", packed=counted, packed_tokens=12,
                                      outcome="answered", answer="a")], keys=[("q1", 0)], corpus=TEXTS))
    assert r[("q1", "context_tokens")] == 12.0


def test_a_failed_or_missing_trace_scores_zero_context_not_undefined():
    traces = [Trace(trace_id="a", query_id="q1", outcome="error", error="boom")]
    r = _rows(score_traces(GS, traces, keys=[("q1", 0), ("n1", 0)], corpus=TEXTS))
    assert r[("q1", "recall@context")] == 0.0 and r[("q1", "context_tokens")] == 0.0
    assert r[("n1", "context_tokens")] == 0.0 and r[("q1", "error")] == 1.0


@pytest.mark.parametrize("kw,fragment", [
    ({"relevance_threshold": 9}, "relevance threshold 9 is outside the grade scale 0-3"),
    ({"relevance_threshold": 0}, "relevance threshold 0 is outside"),
    ({"relevance_threshold": True}, "relevance threshold True"),
    ({"gain": "cubic"}, "unknown gain 'cubic'"),
    ({"hit_rule": "most"}, "unknown hit rule 'most'"),
    ({"cutoffs": (0, 5)}, "cutoffs (0, 5) must be positive integers"),
    ({"ties": "random"}, "random"),
])
def test_scoring_options_refuse_bad_values(kw, fragment):
    with pytest.raises(InputError) as err:
        ScoringOptions(**kw)
    assert fragment in str(err.value)


def test_labels_built_once_score_the_same_as_labels_built_per_call(bundled):
    corpus, golden = bundled
    opt = ScoringOptions(relevance_threshold=3)
    traces = _evidence_traces(golden, corpus, raw=True)[:50]
    keys = [(t.query_id, 0) for t in traces]
    a = score_traces(golden, traces, options=opt, keys=keys, corpus=corpus)
    b = score_traces(golden, traces, options=opt, keys=keys, corpus=corpus, labels=Labels(golden, opt))
    assert a.columns.keys() == b.columns.keys()
    for k in a.columns:
        assert np.array_equal(np.asarray(a.columns[k], dtype=object), np.asarray(b.columns[k], dtype=object)), k


@pytest.mark.parametrize("config,warned", [
    ({"reranker": {"kind": "lexical", "final_k": 5}, "fusion": {"depth": 5}}, True),
    ({"reranker": {"kind": "lexical", "final_k": 5}, "fusion": {"depth": 3}}, True),
    ({"reranker": {"kind": "lexical", "final_k": 5}, "fusion": {"depth": 6}}, False),
    ({"reranker": {"kind": "none", "final_k": 10}, "fusion": {"depth": 10}}, False),
    ({}, False),
])
def test_a_reranker_that_cannot_change_the_top_final_k_is_warned_about(config, warned):
    w = config_warnings(config)
    assert bool(w) == warned
    if warned:
        assert w[0].startswith(f"fusion_depth {config['fusion']['depth']} <= final_k 5 with a reranker")


@pytest.mark.slow
def test_reference_pipeline_runs_pass_validation_and_record_what_they_measured(bundled, tmp_path):
    corpus, golden = bundled
    cfg = yaml.safe_load((demo_config_dir() / "hybrid_rerank.yaml").read_text())
    cfg["fusion"]["depth"] = 5
    path = tmp_path / "shallow.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with Store.open(tmp_path / "r.duckdb") as st:
        per_query, _ = run_pipeline_into_store(st, demo_config_dir() / "hybrid_rerank.yaml", corpus, golden,
                                               cache_dir=tmp_path / "cache")
        batched, _ = run_pipeline_into_store(st, path, corpus, golden, batched=True, cache_dir=tmp_path / "cache")
        for run_id in (per_query, batched):
            extra = st.get_run(run_id).extra
            assert extra["unit_failures"] == 0 and extra["unit_failure_examples"] == []
            tokens = st.results(run_id, metrics=["context_tokens"]).to_pydict()["value"]
            assert extra["context_tokens_mean"] == pytest.approx(np.mean(tokens))
            assert extra["context_tokens_mean"] < cfg["packer"]["budget_tokens"]
        assert st.get_run(per_query).extra["warnings"] == []
        assert st.get_run(batched).extra["warnings"][0].startswith("fusion_depth 5 <= final_k 5 with a reranker")
        lat = {r: st.results(r).to_pydict()["latency_ms"] for r in (per_query, batched)}
        assert all(v is not None and v > 0 for v in lat[per_query])
        assert all(v is None for v in lat[batched])
        jf = st.results(per_query, metrics=["ndcg@final_k"]).to_pydict()["judged_fraction"]
        assert all(0 <= v <= 1 for v in jf) and 0 < np.mean(jf) < 0.5


def test_document_offset_map_is_32_bit_and_maps_spans_as_the_64_bit_map():
    import numpy as np

    from ragassay.corpus.canonical import canonicalize_with_map
    from ragassay.corpus.loader import Document

    raw = "Caf\u0065\u0301  tables\r\n\r\n  rows \u200bhere\tand   there  \n"
    doc = Document.from_raw("d", raw)
    _, starts, ends = canonicalize_with_map(raw)
    assert doc.raw_starts.dtype == np.int32 and doc.raw_ends.dtype == np.int32
    assert np.array_equal(doc.raw_starts, starts) and np.array_equal(doc.raw_ends, ends)
    n = len(doc.text)
    want = [(int(starts[s]), int(ends[e - 1])) if s < e else ((int(starts[s]),) * 2 if s < n else (len(raw),) * 2)
            for s in range(n + 1) for e in range(s, n + 1)]
    got = [doc.raw_span(s, e) for s in range(n + 1) for e in range(s, n + 1)]
    assert got == want and all(type(a) is int and type(b) is int for a, b in got)
