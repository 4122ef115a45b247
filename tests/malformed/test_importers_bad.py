"""Malformed input to `ragassay import ragas|deepeval|otel|beir`: each case ends as one clean `error:` line
with exit 2, or as a counted problem in `--json` (with its row or line) while the rest imports -- never a
traceback. The world is tests/importers/_world.py: q1 "Why do cats purr?", q3 "How do fish breathe?", and d1/d2
sharing "Tell me about pets."."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.importers._world import make_world
from tests.malformed.conftest import CliResult

from ragassay.cli.app import main

CATS = "Cats purr when they are content."
FISH = "Fish breathe through gills."
R_NEW = {"user_input": "Why do cats purr?", "retrieved_contexts": [CATS], "response": "Contentment."}
R_OLD = {"question": "Why do cats purr?", "contexts": [CATS], "answer": "Contentment."}
R_FISH = {"user_input": "How do fish breathe?", "retrieved_contexts": [FISH], "response": "Gills."}
D_CATS = {"input": "Why do cats purr?", "retrieval_context": [CATS], "actual_output": "Contentment."}
D_FISH = {"input": "How do fish breathe?", "retrieval_context": [FISH], "actual_output": "Gills."}
T0, T1 = "2024-05-01T12:00:00.000000Z", "2024-05-01T12:00:00.010000Z"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("pets"))


def run(capsys, *args) -> CliResult:
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    cap = capsys.readouterr()
    return CliResult(e.value.code or 0, cap.out, cap.err)


def _write(path: Path, content) -> None:
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    elif content is not None:
        path.write_text(json.dumps(content))


def sp(tid: str, sid: str, name: str, parent: str | None = None, attrs=None, start=T0, end=T1, status="UNSET",
       **over) -> dict:
    """A span as ConsoleSpanExporter writes it (to_json())."""
    return {"name": name, "context": {"trace_id": "0x" + tid * 32, "span_id": "0x" + sid * 16},
            "parent_id": None if parent is None else "0x" + parent * 16, "start_time": start, "end_time": end,
            "status": {"status_code": status}, "attributes": {} if attrs is None else attrs, **over}


def trace_spans(tid: str, question: str = "Why do cats purr?", root_attrs=None, child_attrs=None, **child) -> list:
    """An OpenInference request: a CHAIN root asking ``question`` and a RETRIEVER child with CATS."""
    root = {"openinference.span.kind": "CHAIN", "input.value": question, **(root_attrs or {})}
    ret = {"openinference.span.kind": "RETRIEVER", "retrieval.documents.0.document.id": "c",
           "retrieval.documents.0.document.content": CATS, **(child_attrs or {})}
    return [sp(tid, "a", "rag", attrs=root), sp(tid, "b", "bm25", parent="a", attrs=ret, **child)]


def lines(*spans) -> str:
    return "".join(json.dumps(s) + "\n" for s in spans)


GOOD = trace_spans("1")
FISH_TRACE = trace_spans("2", question="How do fish breathe?")

# (id, importer, file name, content (None: no file), extra args, fragments of the one error line)
ERRORS = [
    ("ragas-threshold-500", "ragas", "r.json", [R_NEW], ["--threshold", "500"],
     ["threshold 500.0 is out of range", "at most 100"]),
    ("ragas-threshold-0", "ragas", "r.json", [R_NEW], ["--threshold", "0"], ["threshold 0.0 is out of range"]),
    ("ragas-threshold-negative", "ragas", "r.json", [R_NEW], ["--threshold=-5"], ["threshold -5.0 is out of range"]),
    ("ragas-threshold-nan", "ragas", "r.json", [R_NEW], ["--threshold", "nan"], ["threshold nan is out of range"]),
    ("ragas-mixed-columns-in-a-row", "ragas", "r.json", [{**R_OLD, "response": "x"}], [],
     ["mixes RAGAS column names from before 0.2 (question, contexts, answer) with those of 0.2 and later (response)"]),
    ("ragas-mixed-columns-across-rows", "ragas", "r.jsonl", lines(R_OLD, R_FISH), [],
     ["(question, contexts, answer)", "(user_input, retrieved_contexts, response)"]),
    ("ragas-nothing-matched", "ragas", "r.json", [{**R_NEW, "user_input": "Who are you?"}], [],
     ["none of its 1 row(s) became a trace (1 unmatched, 0 ambiguous, 0 skipped)", "matches no golden question"]),
    ("ragas-all-ambiguous", "ragas", "r.json", [{**R_NEW, "user_input": "Tell me about pets."}], [],
     ["(0 unmatched, 1 ambiguous, 0 skipped)", "matches 2 golden queries (d1, d2)"]),
    ("ragas-all-rows-lack-contexts", "ragas", "r.json", [{"user_input": "Why do cats purr?"}] * 2, [],
     ["none of its 2 row(s) became a trace (0 unmatched, 0 ambiguous, 2 skipped)",
      "row 1: row needs 'user_input' and 'retrieved_contexts'"]),
    ("ragas-unknown-query-ids-only", "ragas", "r.json", [{**R_NEW, "query_id": "q404"}], [],
     ["1 unmatched", "query_id 'q404' is not in the golden set"]),
    ("ragas-rows-not-objects", "ragas", "r.json", [1, 2, 3], [], ["none of its 3 row(s) became a trace"]),
    ("ragas-empty-list", "ragas", "r.json", [], [], ["r.json: no rows"]),
    ("ragas-contexts-a-string", "ragas", "r.json", [{**R_NEW, "retrieved_contexts": CATS}], [],
     ["row 1 (row-1): retrieved_contexts is a plain string; retrieved_contexts must be a list of strings"]),
    ("ragas-question-null", "ragas", "r.json", [{**R_NEW, "user_input": None}], [],
     ["row 1 (row-1): user_input is null; user_input must be a string"]),
    ("ragas-response-number", "ragas", "r.json", [{**R_NEW, "response": 3}], [],
     ["row 1 (row-1): response is a int (3); response must be a string"]),
    ("ragas-context-null", "ragas", "r.json", [{**R_OLD, "contexts": [CATS, None]}], [],
     ["row 1 (row-1): context 1 is null"]),
    ("ragas-broken-json", "ragas", "r.json", '[{"user_input": "x",\n "retrieved_contexts": [}]', [],
     ["r.json:2: not valid JSON"]),
    ("ragas-missing-file", "ragas", "r.json", None, [], ["r.json: file not found"]),
    ("ragas-jsonl-bad-line", "ragas", "r.jsonl", lines(R_NEW) + "{oops\n", [], ["r.jsonl:2: not valid JSON"]),
    ("ragas-not-utf8", "ragas", "r.json", b'[{"user_input": "caf\xe9"}]', [], ["r.json:1: not UTF-8 text"]),
    ("ragas-top-level-string", "ragas", "r.json", "\"rows\"", [],
     ["expected a JSON list of rows or an object of columns, got str"]),
    ("deepeval-goldens-only", "deepeval", "d.json", [{"input": "Why do cats purr?", "expected_output": "x",
                                                      "retrieval_context": None, "actual_output": None}], [],
     ["none of its 1 row(s) became a trace (0 unmatched, 0 ambiguous, 1 skipped)", "retrieval_context is null"]),
    ("deepeval-input-number", "deepeval", "d.json", [{**D_CATS, "input": 7}], [],
     ["row 1 (row-1): input is a int (7); input must be a string"]),
    ("deepeval-retrieval-context-string", "deepeval", "d.json", [{**D_CATS, "retrieval_context": CATS}], [],
     ["retrieval_context is a plain string"]),
    ("deepeval-actual-output-list", "deepeval", "d.json", [{**D_CATS, "actual_output": ["a"]}], [],
     ["actual_output is a list"]),
    ("deepeval-object-not-list", "deepeval", "d.json", {"test_cases": [D_CATS]}, [],
     ["d.json: expected a JSON list of rows, got dict"]),
    ("deepeval-empty-list", "deepeval", "d.json", [], [], ["d.json: no test cases"]),
    ("deepeval-threshold-101", "deepeval", "d.json", [D_CATS], ["--threshold", "101"],
     ["threshold 101.0 is out of range"]),
    ("deepeval-nothing-matched", "deepeval", "d.json", [{**D_CATS, "input": "Why?"}, {**D_FISH, "input": "How?"}],
     [], ["none of its 2 row(s) became a trace (2 unmatched"]),
    ("deepeval-camel-case-keys", "deepeval", "d.json",
     [{"input": "Why do cats purr?", "retrievalContext": [CATS], "actualOutput": "x"}], [],
     ["1 skipped", "retrieval_context is null or missing"]),
    ("otel-not-json", "otel", "s.json", "{not json", [], ["s.json:1: not valid JSON"]),
    ("otel-empty-file", "otel", "s.json", "  \n", [], ["s.json: holds no span"]),
    ("otel-missing-file", "otel", "s.json", None, [], ["s.json: file not found"]),
    ("otel-not-utf8", "otel", "s.json", b'{"name": "\xff"}', [], ["s.json: not UTF-8 text"]),
    ("otel-question-unmatched-only", "otel", "s.json", lines(*trace_spans("3", question="Who?")), [],
     ["s.json: none of its 1 OTel trace(s) became a trace (1 unmatched", "question 'Who?' matches no golden",
      "ragassay.query_id"]),
    ("otel-records-without-context-only", "otel", "s.json", lines({"name": "x"}, {"name": "y"}), [],
     ["s.json: none of its 2 record(s) is a span with a trace id and a span id",
      "first: line 1: span 'x': no context.trace_id"]),
    ("beir-not-a-folder", "beir", "b.txt", "x", [], ["b.txt: not a folder"]),
]


@pytest.mark.parametrize(("kind", "name", "content", "extra", "fragments"), [c[1:] for c in ERRORS],
                         ids=[c[0] for c in ERRORS])
def test_bad_import_is_one_clean_error_line(world, tmp_path, capsys, kind, name, content, extra, fragments):
    src = tmp_path / name
    _write(src, content)
    if kind == "beir":
        res = run(capsys, "import", "beir", src, "-o", tmp_path / "out", *extra)
    else:
        res = run(capsys, "import", kind, src, "--golden", world["golden"], "--corpus", world["corpus"], "-o",
                  tmp_path / "t.jsonl", *extra)
    res.assert_clean_error(*fragments)
    assert len(res.err.strip().splitlines()) == 1 and not (tmp_path / "t.jsonl").exists()


def _beir(root: Path, *, queries=None, qrels="query-id\tcorpus-id\tscore\nq1\td1\t1\n") -> None:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "", "text": "Cats purr."}) + "\n")
    (root / "queries.jsonl").write_text(queries or json.dumps({"_id": "q1", "text": "what purrs"}) + "\n")
    (root / "qrels" / "test.tsv").write_text(qrels)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"qrels": "query-id\tcorpus-id\tscore\nq1\td1\thigh\n"}, "test.tsv:2: score 'high' is not an integer"),
        ({"qrels": "query-id\tcorpus-id\tscore\nq1\td1\n"}, "test.tsv:2: expected 3 tab-separated fields"),
        ({"queries": json.dumps({"id": "q1", "text": "what purrs"}) + "\n"}, "queries.jsonl:1: needs string field(s)"),
        ({"qrels": "query-id\tcorpus-id\tscore\nq1\td1\t4\n"}, "score 4 is outside ragassay's grade scale 0-3"),
    ],
    ids=["beir-score-word", "beir-two-fields", "beir-query-without-_id", "beir-score-4"],
)
def test_bad_beir_folder_is_one_clean_error_line(tmp_path, capsys, kwargs, fragment):
    _beir(tmp_path / "src", **kwargs)
    res = run(capsys, "import", "beir", tmp_path / "src", "-o", tmp_path / "out")
    res.assert_clean_error(fragment)
    assert not (tmp_path / "out").exists()


# (id, importer, file name, content, (problem line, fragment), traces imported, matching fields checked)
PROBLEMS = [
    ("ragas-one-unmatched", "ragas", "r.json", [R_NEW, {**R_FISH, "user_input": "How do fish swim?"}],
     (2, "question 'How do fish swim?' matches no golden question"), 1,
     {"unmatched": [{"row": 2, "query_id": None, "question": "How do fish swim?"}], "skipped": 0}),
    ("ragas-one-ambiguous", "ragas", "r.json", [{**R_NEW, "user_input": "Tell me about pets."}, R_NEW],
     (1, "matches 2 golden queries (d1, d2); skipped (give it a query_id)"), 1,
     {"ambiguous": [{"row": 1, "question": "Tell me about pets.", "query_ids": ["d1", "d2"]}]}),
    ("ragas-duplicate-question", "ragas", "r.json", [R_NEW, {**R_NEW, "user_input": " Why do  cats purr? "}],
     (2, "question of query 'q1' repeats row 1; skipped"), 1, {"skipped": 1, "matched_by": {"question": 1}}),
    ("ragas-context-not-found", "ragas", "r.json", [{**R_NEW, "retrieved_contexts": ["Parrots talk.", CATS]}],
     (1, "context 0 of q1 not found in the corpus (threshold 90.0): 'Parrots talk.'"), 1, {"skipped": 0}),
    ("ragas-context-ambiguous", "ragas", "r.json", [{**R_NEW, "retrieved_contexts": ["Cats"]}],
     (1, "context 0 of q1 is ambiguous: found at 2 places (cats@0, cats@33)"), 1, {}),
    ("ragas-row-not-object", "ragas", "r.json", ["a string", R_NEW],
     (1, "row needs 'user_input' and 'retrieved_contexts'; skipped"), 1, {"skipped": 1}),
    ("ragas-unknown-query-id", "ragas", "r.json", [R_NEW, {**R_FISH, "query_id": "q404"}],
     (2, "query_id 'q404' is not in the golden set; skipped"), 1,
     {"unmatched": [{"row": 2, "query_id": "q404", "question": "How do fish breathe?"}]}),
    ("ragas-blank-question", "ragas", "r.json", [{**R_NEW, "user_input": "  "}, R_FISH],
     (1, "no question to match to the golden set"), 1, {"matched_by": {"question": 1}}),
    ("deepeval-one-golden-among-cases", "deepeval", "d.json",
     [D_CATS, {"input": "How do fish breathe?", "expected_output": "Gills."}],
     (2, "retrieval_context is null or missing"), 1, {"skipped": 1}),
    ("deepeval-unknown-metadata-query-id", "deepeval", "d.json",
     [D_CATS, {**D_FISH, "additional_metadata": {"query_id": "q404"}}],
     (2, "query_id 'q404' is not in the golden set"), 1, {"matched_by": {"question": 1}}),
    ("deepeval-missing-input-key", "deepeval", "d.json", [{"retrieval_context": [FISH]}, D_CATS],
     (1, "row needs 'input' and 'retrieval_context'; skipped"), 1, {"skipped": 1}),
    ("deepeval-unplaceable-context", "deepeval", "d.json", [{**D_CATS, "retrieval_context": [CATS, "Owls hoot."]}],
     (1, "context 1 of q1 not found in the corpus"), 1, {}),
    ("otel-bad-start-time", "otel", "s.json", lines(*trace_spans("1", start="yesterday")),
     (2, "span bbbbbbbbbbbbbbbb (bm25): start_time 'yesterday' is not an ISO 8601 time; duration left out"), 1, {}),
    ("otel-end-before-start", "otel", "s.json", lines(*trace_spans("1", start=T1, end=T0)),
     (2, "span bbbbbbbbbbbbbbbb (bm25): ends 10.0 ms before it starts; duration left out"), 1, {}),
    ("otel-attributes-not-object", "otel", "s.json", lines(GOOD[0], {**GOOD[1], "attributes": "k=v"}),
     (2, "attributes are a str, not an object; not read"), 1, {}),
    ("otel-genai-documents-bad-json", "otel", "s.json",
     lines(*GOOD, sp("1", "c", "kb", parent="a", attrs={"gen_ai.operation.name": "retrieval",
                                                        "gen_ai.retrieval.documents": "[{\"id\": "})),
     (1, "span cccccccccccccccc (kb): gen_ai.retrieval.documents is not valid JSON"), 1, {}),
    ("otel-genai-documents-not-list", "otel", "s.json",
     lines(*GOOD, sp("1", "c", "kb", parent="a", attrs={"gen_ai.operation.name": "retrieval",
                                                        "gen_ai.retrieval.documents": "{\"id\": \"x\"}"})),
     (1, "gen_ai.retrieval.documents is not a list of objects; not read"), 1, {}),
    ("otel-doc-score-string", "otel", "s.json",
     lines(*trace_spans("1", child_attrs={"retrieval.documents.0.document.score": "high"})),
     (1, "document c score 'high' is not a number; left out"), 1, {}),
    ("otel-doc-metadata-bad-json", "otel", "s.json",
     lines(*trace_spans("1", child_attrs={"retrieval.documents.0.document.metadata": "{doc_id"})),
     (1, "document c metadata is not valid JSON; placed without it"), 1, {}),
    ("otel-doc-unplaceable", "otel", "s.json",
     lines(*trace_spans("1", child_attrs={"retrieval.documents.1.document.content": "Owls hoot."})),
     (1, "document ? not found in the corpus"), 1, {}),
    ("otel-unknown-kind", "otel", "s.json", lines(*GOOD, sp("1", "c", "x", parent="a",
                                                           attrs={"openinference.span.kind": "WIZARD"})),
     (1, "openinference.span.kind 'WIZARD' is not an OpenInference span kind"), 1, {}),
    ("otel-unknown-operation", "otel", "s.json", lines(*GOOD, sp("1", "c", "x", parent="a",
                                                                attrs={"gen_ai.operation.name": "divine"})),
     (1, "gen_ai.operation.name 'divine' is not a GenAI operation"), 1, {}),
    ("otel-span-without-conventions", "otel", "s.json", lines(*GOOD, sp("1", "c", "GET /", parent="a")),
     (1, "1 span(s) carry neither openinference.span.kind nor gen_ai.operation.name and were not read: GET /"), 1,
     {}),
    ("otel-token-count-negative", "otel", "s.json",
     lines(*GOOD, sp("1", "c", "llm", parent="a", attrs={"gen_ai.operation.name": "chat",
                                                         "gen_ai.usage.input_tokens": -3})),
     (1, "gen_ai.usage.input_tokens -3 is not a token count; left out"), 1, {}),
    ("otel-record-without-context", "otel", "s.json", lines(*GOOD, {"name": "stray"}),
     (3, "span 'stray': no context.trace_id / context.span_id; skipped"), 1, {}),
    ("otel-record-is-an-array", "otel", "s.json", lines(*GOOD) + "[1, 2]\n", (3, "a list is not a span; skipped"),
     1, {}),
    ("otel-two-roots", "otel", "s.json", lines(*GOOD, sp("1", "d", "orphan", parent="e", start=T1)),
     (1, "2 spans have no parent in the input (rag, orphan); 'rag', the earliest, is read as the root"), 1, {}),
    ("otel-unmatched-next-to-good", "otel", "s.json", lines(*GOOD, *trace_spans("3", question="Who?")),
     (3, "question 'Who?' matches no golden question"), 1,
     {"unmatched": [{"line": 3, "query_id": None, "question": "Who?"}], "records": 2}),
    ("otel-otlp-bad-nanos", "otel", "s.json", json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "1" * 32, "spanId": "a" * 16, "name": "rag", "startTimeUnixNano": "soon",
         "endTimeUnixNano": "1700000000000000000",
         "attributes": [{"key": "input.value", "value": {"stringValue": "Why do cats purr?"}}]}]}]}]}),
     (1, "start_time_unix_nano 'soon' is not a whole number of nanoseconds"), 1, {}),
]


@pytest.mark.parametrize(("kind", "name", "content", "problem", "n_traces", "matching"), [c[1:] for c in PROBLEMS],
                         ids=[c[0] for c in PROBLEMS])
def test_bad_record_is_a_counted_problem_and_the_rest_imports(world, tmp_path, capsys, kind, name, content, problem,
                                                              n_traces, matching):
    src = tmp_path / name
    _write(src, content)
    res = run(capsys, "import", kind, src, "--golden", world["golden"], "--corpus", world["corpus"], "-o",
              tmp_path / "t.jsonl", "--json")
    assert res.code == 0 and "Traceback" not in res.err, res.err
    out = json.loads(res.out)
    line, fragment = problem
    assert any(p.startswith(f"{line}: ") and fragment in p for p in out["problems"]), out["problems"]
    assert out["n_traces"] == n_traces
    assert {k: out["matching"][k] for k in matching} == matching
