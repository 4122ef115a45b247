import asyncio
import json

import pytest

from ragassay.corpus import Corpus, Document
from ragassay.trace import Trace
from ragassay.trace.adapters import (
    locate,
    traces_from_callable,
    traces_from_jsonl,
    traces_from_ragas_rows,
    traces_from_trec_run,
)

TEXT_A = ("The licensee may copy and distribute verbatim copies of the program's source code as received, "
          "in any medium, provided that each copy carries an appropriate copyright notice.")
TEXT_B = "Orbital velocity near Earth is about eight kilometres per second for a low circular orbit."


@pytest.fixture
def corpus():
    return Corpus([Document.from_raw("a", TEXT_A), Document.from_raw("b", TEXT_B)])


def test_ragas_rows_recover_spans_and_report_the_unlocatable(corpus):
    exact = "verbatim copies of the program's source code"
    fuzzy = "Orbital velocity near Earth is roughly eight kilometres per second"  # edited copy
    rows = [
        {"question": "q?", "contexts": [exact, fuzzy, "Completely unrelated text about pastry baking."],
         "answer": "yes", "ground_truth": "g"},
        {"question": "q2?", "contexts": ["  verbatim\tcopies  "], "answer": ""},
        {"contexts": []},
    ]
    _, traces, problems = traces_from_ragas_rows(rows, corpus, threshold=85)
    t = traces[0]
    assert [u.doc_id for u in t.packed] == ["a", "b"]
    s = TEXT_A.index(exact)
    assert (t.packed[0].start, t.packed[0].end) == (s, s + len(exact)) and t.packed[0].score == 100.0
    fz = t.packed[1]
    assert TEXT_B[fz.start : fz.end].startswith("Orbital velocity near Earth is") and 85 <= fz.score < 100
    assert t.meta == {"unlocated_contexts": 1, "n_contexts": 3, "ground_truth": "g"}
    assert t.outcome == "answered" and t.fused == t.packed
    # whitespace differences vanish under canonicalization only where canonicalization folds them
    assert traces[1].outcome == "abstained"
    assert [p.line for p in problems].count(1) == 1 and "context 2 of row-1" in problems[0].message
    assert any(p.line == 3 and "needs 'question'" in p.message for p in problems)


def test_locate_agrees_with_rapidfuzz_directly(corpus):
    from rapidfuzz import fuzz

    needle = "eight kilometers per second"
    hit = locate(needle, corpus, threshold=80)
    ref = fuzz.partial_ratio_alignment(needle, TEXT_B)
    assert hit == ("b", ref.dest_start, ref.dest_end, pytest.approx(ref.score))
    assert locate("nothing like it zzz", corpus, threshold=95) is None


def test_trec_run_import_orders_like_trec_eval(corpus, tmp_path):
    run = tmp_path / "run.txt"
    run.write_text("q1 Q0 a 1 1.0 tagA\nq1 Q0 b 2 1.0 tagA\nq2 Q0 b 1 3.5 tagA\nq2 Q0 zz 2 1.0 tagA\nbad line\n")
    header, traces, problems = traces_from_trec_run(run, corpus)
    assert [t.query_id for t in traces] == ["q1", "q2"]
    # equal scores: trec_eval breaks ties by docno descending -> b before a
    assert [u.doc_id for u in traces[0].fused] == ["b", "a"]
    u = traces[1].fused[0]
    assert (u.start, u.end, u.score, u.rank) == (0, len(corpus.docs["b"].text), 3.5, 1)
    assert traces[0].outcome is None and traces[0].branches["tagA"] == traces[0].fused
    assert [p.line for p in problems] == [4, 5] and header.source == "trec"


def test_callable_adapter_sync_and_async_keep_order_and_record_errors():
    queries = [("q1", "alpha"), ("q2", "boom"), ("q3", "gamma")]

    def fn(question):
        if question == "boom":
            raise RuntimeError("bad")
        return {"answer": question.upper(), "outcome": "answered", "tokens_in": 3}

    header, traces, problems = traces_from_callable(fn, queries, trials=2, concurrency=2, progress=False)
    assert [(t.query_id, t.trial) for t in traces] == [(q, k) for k in (0, 1) for q in ("q1", "q2", "q3")]
    assert traces[0].answer == "ALPHA" and traces[0].durations_ms["total"] >= 0
    assert traces[1].outcome == "error" and traces[1].error == "RuntimeError: bad"
    assert [p.line for p in problems] == [2, 5]
    assert len({t.trace_id for t in traces}) == 6 and header.source == "callable"

    running, peak = 0, 0

    async def afn(question):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        return None if question == "gamma" else question

    _, traces, problems = traces_from_callable(afn, queries, concurrency=2, progress=False)
    assert peak == 2 and problems == []
    assert [t.outcome for t in traces] == ["answered", "answered", "abstained"]


def test_jsonl_adapter_is_the_reader(tmp_path):
    p = tmp_path / "t.jsonl"
    t = Trace(trace_id="x", query_id="q", outcome="refused")
    p.write_text(json.dumps({"type": "header", "run_name": "ext", "config": {}}) + "\n"
                 + json.dumps({"type": "trace", **t.model_dump(mode="json")}) + "\n")
    header, traces, problems = traces_from_jsonl(p)
    assert header.run_name == "ext" and traces == [t] and problems == []
