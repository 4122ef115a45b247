import asyncio
import json

import pytest

from ragassay.corpus import Corpus, Document
from ragassay.errors import InputError
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
    assert t.meta == {"unlocated_contexts": 1, "ambiguous_contexts": 0, "n_contexts": 3, "ground_truth": "g"}
    assert t.outcome == "answered" and t.fused == t.packed
    # whitespace differences vanish under canonicalization only where canonicalization folds them
    assert traces[1].outcome == "abstained"
    assert [p.line for p in problems].count(1) == 1 and "context 2 of row-1" in problems[0].message
    assert any(p.line == 3 and "needs 'question'" in p.message for p in problems)


def test_locate_agrees_with_rapidfuzz_directly(corpus):
    from rapidfuzz import fuzz

    needle = "eight kilometers per second"
    hits = locate(needle, corpus, threshold=80)
    ref = fuzz.partial_ratio_alignment(needle, TEXT_B)
    assert hits == [("b", ref.dest_start, ref.dest_end, pytest.approx(ref.score))]
    assert locate("nothing like it zzz", corpus, threshold=95) == []


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


SHARED = "Each copy must carry this notice."


@pytest.fixture
def repeat_corpus():
    # the shared sentence (33 characters) sits twice in doc x (offsets 0 and 33 + 20 = 53) and once in y (6)
    x = SHARED + " Other words here.. " + SHARED + " The end of x."
    y = "Intro " + SHARED + " Unique tail sentence of document y."
    return Corpus([Document.from_raw("x", x), Document.from_raw("y", y)])


def test_a_context_found_at_several_places_is_reported_and_not_placed(repeat_corpus):
    assert [(d, s) for d, s, _, _ in locate(SHARED, repeat_corpus)] == [("x", 0), ("x", 53), ("y", 6)]
    rows = [{"question": "q?", "contexts": [SHARED, "Unique tail sentence of document y."], "answer": "a"}]
    _, traces, problems = traces_from_ragas_rows(rows, repeat_corpus)
    t = traces[0]
    # only the unique context is placed, at rank 1, at its one occurrence in y
    y_text = repeat_corpus.docs["y"].text
    assert [(u.doc_id, u.start, u.rank) for u in t.packed] == [("y", y_text.index("Unique"), 1)]
    assert t.meta["ambiguous_contexts"] == 1 and t.meta["unlocated_contexts"] == 0
    assert problems == [(1, f"context 0 of row-1 is ambiguous: found at 3 places (x@0, x@53, y@6); "
                            f"not placed: {SHARED!r}")]


def test_a_context_repeated_within_one_document_is_ambiguous_too():
    corpus = Corpus([Document.from_raw("d", "alpha beta gamma. alpha beta gamma.")])
    _, traces, problems = traces_from_ragas_rows([{"question": "q", "contexts": ["alpha beta gamma."]}], corpus)
    assert traces[0].packed == [] and traces[0].meta["ambiguous_contexts"] == 1
    assert "found at 2 places (d@0, d@18)" in problems[0].message


@pytest.mark.parametrize(
    ("contexts", "needle"),
    [
        ("banana split", "row 1 (row-1): contexts is a plain string; contexts must be a list of strings"),
        (None, "row 1 (row-1): contexts is null; contexts must be a list of strings"),
        ({"a": 1}, "row 1 (row-1): contexts is a dict; contexts must be a list of strings"),
        (["banana", float("nan")], "row 1 (row-1): context 1 is a float (nan); contexts must be a list"),
        ([None], "row 1 (row-1): context 0 is null; contexts must be a list of strings"),
        ([3], "row 1 (row-1): context 0 is a int (3); contexts must be a list of strings"),
    ],
)
def test_wrong_context_types_are_errors_never_located_as_text(contexts, needle):
    # "nan" and single characters of "banana split" would be found in this corpus if they were searched
    corpus = Corpus([Document.from_raw("fruit", "a banana split and nan bread")])
    with pytest.raises(InputError) as e:
        traces_from_ragas_rows([{"question": "q", "contexts": contexts}], corpus)
    assert str(e.value).startswith("rows: " + needle)


def test_ragas_files_broken_json_and_unequal_columns_are_one_clean_error(tmp_path, corpus):
    broken = tmp_path / "broken.json"
    broken.write_text('[{"question": "q", "contexts": []},\n {"question": ]')
    with pytest.raises(InputError, match=r"broken.json:2: not valid JSON"):
        traces_from_ragas_rows(broken, corpus)
    cols = tmp_path / "cols.json"
    cols.write_text(json.dumps({"question": ["a", "b", "c"], "contexts": [[], []], "answer": ["x", "y", "z"]}))
    with pytest.raises(InputError) as e:
        traces_from_ragas_rows(cols, corpus)
    assert str(e.value) == (f"{cols}: columns have different lengths (question: 3, contexts: 2, answer: 3); "
                            "every column needs one value per row")


def test_ragas_duplicate_query_id_is_counted_and_the_later_row_skipped(corpus):
    rows = [{"query_id": "q1", "question": "a", "contexts": []}, {"query_id": "q1", "question": "b", "contexts": []}]
    _, traces, problems = traces_from_ragas_rows(rows, corpus)
    assert [t.question for t in traces] == ["a"] and problems == [(2, "query_id 'q1' repeats row 1; skipped")]


def test_trec_run_import_accepts_comments_and_extra_fields_and_orders_by_the_tie_rule(tmp_path):
    corpus = Corpus([Document.from_raw(d, f"text of {d}") for d in ("a", "b", "c")])
    run = tmp_path / "run.txt"
    # 0.1 and 0.1 + 2**-40 are equal as float32, different as doubles
    run.write_text("# produced by a test\nq1 Q0 a 1 0.1 t extra\nq1 Q0 b 2 0.10000000000090949 t\n"
                   "q1 Q0 c 3 0.05 t\n")
    _, nine, problems = traces_from_trec_run(run, corpus)
    _, ten, _ = traces_from_trec_run(run, corpus, ties="trec_eval10")
    _, given, _ = traces_from_trec_run(run, corpus, ties="given")
    assert problems == []
    assert [u.doc_id for u in nine[0].fused] == ["b", "a", "c"]  # a float32 tie: doc id descending
    assert [u.doc_id for u in ten[0].fused] == ["b", "a", "c"]  # b's double score is higher
    run.write_text("q1 Q0 b 1 0.1 t\nq1 Q0 a 2 0.10000000000090949 t\n")
    _, nine, _ = traces_from_trec_run(run, corpus)
    _, ten, _ = traces_from_trec_run(run, corpus, ties="trec_eval10")
    assert [u.doc_id for u in nine[0].fused] == ["b", "a"]  # float32 tie: doc id descending
    assert [u.doc_id for u in ten[0].fused] == ["a", "b"]  # a's double score is higher
    assert [u.doc_id for u in given[0].fused] == ["b", "a", "c"]


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
