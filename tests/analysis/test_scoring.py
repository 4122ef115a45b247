import math

import numpy as np
import pytest

from ragassay.analysis.scoring import ScoringOptions, score_traces
from ragassay.golden import GoldenSet
from ragassay.golden.schema import Evidence, GoldenQuery
from ragassay.trace import Trace, Unit


def _q(qid, evidence, answerable=True, ref=None, stratum="lexical"):
    return GoldenQuery(query_id=qid, question=qid, stratum=stratum if answerable else "negative",
                       answerable=answerable, reference_answer=ref,
                       evidence=[Evidence(doc_id=d, start=s, end=e, grade=g, quote="x") for d, s, e, g in evidence])


GS = GoldenSet([
    _q("q1", [("d", 100, 150, 3), ("d", 160, 200, 2), ("e", 0, 30, 1)], ref="the licensee"),
    _q("q2", [("d", 500, 520, 3)], ref="twelve months"),
    _q("n1", [], answerable=False),
])


def _u(i, doc, s, e):
    return Unit(unit_id=f"u{i}", doc_id=doc, start=s, end=e, score=1.0 / (i + 1))


def _t(qid, fused, reranked=None, packed=None, outcome="answered", answer="x", citations=(), trial=0):
    return Trace(trace_id=f"{qid}-{trial}", query_id=qid, trial=trial, branches={"bm25": fused}, fused=fused,
                 reranked=reranked, packed=packed or [], outcome=outcome, answer=answer if outcome == "answered" else None,
                 citations=list(citations), durations_ms={"total": 5.0},
                 error="boom" if outcome == "error" else None)


def _rows(scored):
    c = scored.columns
    return {(q, m): v for q, m, v in zip(c["query_id"], c["metric"], c["value"], strict=True)}


def test_span_recall_counts_evidence_once_and_units_covering_two_spans_count_both():
    fused = [_u(0, "d", 90, 170),   # hits both relevant spans of q1
             _u(1, "d", 120, 130),  # repeats the first span
             _u(2, "x", 0, 10)]
    scored = score_traces(GS, [_t("q1", fused), _t("q2", [_u(0, "d", 0, 10)]), _t("n1", fused)])
    r = _rows(scored)
    assert r[("q1", "recall@1")] == 1.0 and r[("q1", "recall@fusion_depth")] == 1.0
    assert r[("q2", "recall@10")] == 0.0
    # nDCG credits each span once: unit 0 gets grade 3 (first to hit both), unit 1 repeats -> 0
    ideal = (2**3 - 1) + (2**2 - 1) / math.log2(3) + (2**1 - 1) / 2
    assert r[("q1", "ndcg@10")] == pytest.approx((2**3 - 1) / ideal)
    assert r[("q1", "precision@5")] == pytest.approx(1 / 5)
    assert r[("q1", "rr@final_k")] == 1.0
    assert math.isnan(r[("n1", "recall@10")]) and math.isnan(r[("n1", "ndcg@10")])


def test_missing_and_unknown_traces_are_counted_not_dropped():
    scored = score_traces(GS, [_t("q1", []), _t("zz", [])])
    assert scored.missing == [("q2", 0), ("n1", 0)] and scored.unknown == ["zz"]
    r = _rows(scored)
    assert r[("q2", "recall@fusion_depth")] == 0.0 and r[("q2", "error")] == 1.0
    assert math.isnan(r[("q2", "answer_f1")])


def test_rerank_movement_indicators():
    pre = [_u(0, "x", 0, 5), _u(1, "x", 5, 9), _u(2, "d", 100, 110)]
    post = [pre[2], pre[0], pre[1]]
    broke_pre = [_u(0, "d", 500, 505), _u(1, "x", 0, 1)]
    broke_post = [broke_pre[1], _u(2, "x", 1, 2), broke_pre[0]]
    header_cfg = {"reranker": {"final_k": 1}}
    from ragassay.trace import RunHeader

    header = RunHeader(run_name="r", config=header_cfg)
    scored = score_traces(GS, [_t("q1", pre, post), _t("q2", broke_pre, broke_post), _t("n1", pre, post)], header)
    r = _rows(scored)
    assert r[("q1", "rerank_rescued")] == 1.0 and r[("q1", "rerank_broke")] == 0.0
    assert r[("q2", "rerank_broke")] == 1.0 and r[("q2", "rerank_rescued")] == 0.0
    assert math.isnan(r[("n1", "rerank_kept")])
    assert r[("q1", "recall@final_k")] == pytest.approx(0.5)


def test_generation_outcomes_are_scored_separately():
    packed = [_u(0, "d", 100, 150)]
    traces = [
        _t("q1", packed, packed=packed, answer="The Licensee!", citations=["u0", "ghost"]),
        _t("q2", packed, packed=packed, outcome="abstained"),
        _t("n1", packed, packed=packed, outcome="refused"),
    ]
    r = _rows(score_traces(GS, traces, corpus={"d": "x" * 1000}))
    assert r[("q1", "answer_f1")] == 1.0 and r[("q1", "answer_em")] == 1.0
    assert r[("q1", "citation_validity")] == 0.5
    assert r[("q2", "answer_f1")] == 0.0 and r[("q2", "over_refusal")] == 1.0
    assert r[("q1", "over_refusal")] == 0.0
    assert r[("n1", "refused")] == 1.0 and math.isnan(r[("n1", "abstention_recall")])
    r2 = _rows(score_traces(GS, [_t("n1", packed, packed=packed, outcome="abstained")], keys=[("n1", 0)]))
    assert r2[("n1", "abstention_recall")] == 1.0


def test_citation_outside_its_document_is_invalid():
    packed = [_u(0, "d", 900, 1200)]
    r = _rows(score_traces(GS, [_t("q1", packed, packed=packed, answer="a", citations=["u0"])],
                           keys=[("q1", 0)], corpus={"d": "x" * 1000}))
    assert r[("q1", "citation_validity")] == 0.0


def test_metric_set_does_not_depend_on_batch_content():
    """An all-negative batch of an oracle run must produce the same metric names as any other batch."""
    oracle = lambda q, packed: Trace(trace_id=q, query_id=q, packed=packed, outcome="abstained")  # noqa: E731
    a = score_traces(GS, [oracle("n1", [])], keys=[("n1", 0)])
    b = score_traces(GS, [oracle("q1", [_u(0, "d", 100, 150)])], keys=[("q1", 0)])
    assert a.metrics == b.metrics and "recall@context" in a.metrics


def test_hit_rule_changes_labels():
    fused = [_u(0, "d", 140, 152)]  # covers 10 of q1's first span's 50 characters
    loose = _rows(score_traces(GS, [_t("q1", fused)], keys=[("q1", 0)]))
    strict = _rows(score_traces(GS, [_t("q1", fused)], keys=[("q1", 0)],
                                options=ScoringOptions(hit_rule="min_fraction:0.5")))
    assert loose[("q1", "recall@1")] == 0.5 and strict[("q1", "recall@1")] == 0.0
    assert np.isclose(loose[("q1", "success@final_k")], 1.0)


def test_tie_rule_aliases_are_one_pin():
    from ragassay.analysis.scoring import ScoringOptions

    assert ScoringOptions(ties="trec_eval").pins()["ties"] == "trec_eval9"
    assert ScoringOptions(ties="trec_eval").pins() == ScoringOptions(ties="trec_eval9").pins()
    assert ScoringOptions(ties="trec_eval10").pins()["ties"] == "trec_eval10"


def test_loaded_golden_set_shares_fields_sets_and_dumps_as_built(tmp_path):
    import json as _json

    from ragassay.corpus import load_corpus
    from ragassay.corpus.loader import bundled_corpus_dir
    from ragassay.golden import bundled_golden_source, load_golden
    from ragassay.golden.builder import build_golden

    built = build_golden(bundled_golden_source(), load_corpus(bundled_corpus_dir()), tmp_path / "g")
    loaded = load_golden(tmp_path / "g")
    assert [q.model_dump() for q in loaded.queries] == [q.model_dump() for q in built.queries]
    assert [q.model_fields_set for q in loaded.queries] == [q.model_fields_set for q in built.queries]
    written = [_json.loads(x) for x in (tmp_path / "g" / "golden.jsonl").read_text().splitlines() if x.strip()]
    assert [q.model_dump(mode="json", exclude_unset=True) for q in loaded.queries] == written
    # one set object per distinct set of given fields, not one per model
    sets = {id(m.__pydantic_fields_set__) for q in loaded.queries for m in (q, *q.evidence, *q.nuggets)}
    assert len(sets) == len({frozenset(m.model_fields_set) for q in loaded.queries
                             for m in (q, *q.evidence, *q.nuggets)})
    copy = loaded.queries[0].model_copy(update={"stratum": "other"})
    assert copy.__pydantic_fields_set__ is not loaded.queries[0].__pydantic_fields_set__
    assert loaded.queries[0].stratum != "other"
