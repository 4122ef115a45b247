"""Files as the other tools write them -- RAGAS rows of both column spellings without ids, a DeepEval
dataset, OTel spans with and without OpenInference kinds, a BEIR folder -- imported and scored, with the
values worked out by hand on the world of ``_world.py``: a row whose context is q1's evidence has recall 1,
one whose context misses the evidence has recall 0, a query without a row found nothing (0)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from ragassay.corpus import load_corpus
from ragassay.golden import load_golden
from ragassay.importers.otel import iso_ns, read_span_file, traces_from_spans
from ragassay.trace import read_traces
from ragassay.trace.adapters import question_key, traces_from_ragas_rows

from ._world import cli, import_json, make_world, score
from .test_importers import _write_beir


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("pets"))


def test_question_key_folds_whitespace_and_unicode_form_but_not_case():
    assert question_key("  What do dogs do\u00a0\u00a0at\nstrangers?\t") == "What do dogs do at strangers?"
    assert question_key("Cafe\u0301?") == question_key("Caf\u00e9?")
    assert question_key("why do cats purr?") != question_key("Why do cats purr?")


def test_ragas_before_0_2_columns_without_ids_match_by_question_and_score(world, tmp_path, capsys):
    # what RAGAS < 0.2 wrote from a datasets.Dataset: question, contexts, answer, ground_truths (a list)
    rows = [
        {"question": "Why do cats purr?", "contexts": ["Cats purr when they are content."],
         "answer": "They are content.", "ground_truths": ["contentment"]},
        {"question": "What do dogs do at\nstrangers?", "contexts": ["Dogs wag their tails when happy."],
         "answer": "They wag."},
        {"question": "why do cats purr?", "contexts": [], "answer": "lower case is another question"},
        {"question": "Tell me about pets.", "contexts": [], "answer": "two golden queries ask this"},
    ]
    src = tmp_path / "ragas_old.json"
    src.write_text(json.dumps(rows))
    out = import_json("ragas", src, world, capsys)
    m = out["matching"]
    assert (out["n_traces"], m["records"], m["traces"], m["matched_by"]) == (2, 4, 2, {"question": 2})
    assert m["unmatched"] == [{"row": 3, "query_id": None, "question": "why do cats purr?"}]
    assert m["ambiguous"] == [{"row": 4, "question": "Tell me about pets.", "query_ids": ["d1", "d2"]}]
    assert m["skipped"] == 0 and [p.split(":")[0] for p in out["problems"]] == ["3", "4"]
    _, traces, _ = read_traces(out["traces"])
    assert [(t.query_id, t.meta.get("ground_truths")) for t in traces] == [("q1", ["contentment"]), ("q2", None)]

    v = score(out["traces"], world, "ragas-old", capsys)
    assert v[("q1", "recall@10")] == 1.0  # the context is q1's evidence quote
    assert v[("q2", "recall@10")] == 0.0  # the context is the other sentence of the dogs document
    assert v[("q3", "recall@10")] == 0.0  # no row: nothing retrieved
    assert math.isnan(v[("d1", "recall@10")])  # a negative query has no recall


def test_ragas_0_2_columns_without_ids_as_to_jsonl_writes_them(world, tmp_path, capsys):
    # EvaluationDataset.to_jsonl: user_input, retrieved_contexts, response, reference (+ reference_contexts);
    # an evaluation result adds metric columns, which are not read
    rows = [
        {"user_input": "How do fish breathe?", "retrieved_contexts": ["Fish swim in schools.",
                                                                      "Fish breathe through gills."],
         "response": "Through gills.", "reference": "Gills.", "reference_contexts": ["Fish breathe through gills."],
         "faithfulness": 1.0},
        {"user_input": "Why do cats purr?", "retrieved_contexts": ["Cats sleep for most of the day."],
         "response": "", "reference": "Contentment."},
    ]
    src = tmp_path / "ragas_new.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = import_json("ragas", src, world, capsys)
    assert out["problems"] == [] and out["matching"]["matched_by"] == {"question": 2}
    _, traces, _ = read_traces(out["traces"])
    fish = traces[0]
    assert (fish.query_id, fish.answer, fish.outcome, fish.meta["reference"]) == ("q3", "Through gills.", "answered",
                                                                                 "Gills.")
    assert [(u.doc_id, u.start, u.end, u.rank) for u in fish.packed] == [("fish", 0, 21, 1), ("fish", 22, 49, 2)]
    assert traces[1].outcome == "abstained"  # an empty response

    v = score(out["traces"], world, "ragas-new", capsys)
    assert v[("q3", "recall@1")] == 0.0 and v[("q3", "recall@10")] == 1.0  # the evidence is at rank 2
    assert v[("q3", "ndcg@10")] == pytest.approx(1 / math.log2(3))  # one relevant unit at rank 2, ideal rank 1
    assert v[("q1", "recall@10")] == 0.0


def test_ragas_rows_with_query_ids_are_matched_by_id_whatever_their_wording(world, corpus_golden):
    corpus, golden = corpus_golden
    rows = [{"query_id": "q2", "user_input": "reworded entirely", "retrieved_contexts": ["Dogs bark at strangers."]}]
    header, traces, problems = traces_from_ragas_rows(rows, corpus, golden)
    assert [t.query_id for t in traces] == ["q2"] and problems == []
    assert header.stats["matching"]["matched_by"] == {"query_id": 1}
    assert header.config["columns"] == "ragas>=0.2" and header.dataset_version == golden.dataset_version


@pytest.fixture(scope="module")
def corpus_golden(world):
    corpus = load_corpus(world["corpus"])
    return corpus, load_golden(world["golden"])


def test_deepeval_dataset_saved_as_json_imports_and_scores(world, tmp_path, capsys):
    # EvaluationDataset.save_as(file_type="json", include_test_cases=True): one object per golden / test case
    def case(inp, retrieved, output, **kw):
        return {"input": inp, "actual_output": output, "expected_output": kw.get("expected"),
                "retrieval_context": retrieved, "context": kw.get("context"), "name": kw.get("name"),
                "comments": None, "source_file": None, "tools_called": None, "expected_tools": None,
                "additional_metadata": kw.get("meta"), "custom_column_key_values": None}

    cases = [
        case("Why do cats purr?", ["Cats purr when they are content.", "Dogs bark at strangers."], "Contentment.",
             expected="They are content.", context=["Cats purr when they are content."], name="cats"),
        case("Dogs?", ["Dogs wag their tails when happy."], None, meta={"query_id": "q2"}),
        case("How do fish breathe?", None, None, expected="Gills."),  # a golden nobody has run yet
    ]
    src = tmp_path / "deepeval.json"
    src.write_text(json.dumps(cases, indent=4))
    out = import_json("deepeval", src, world, capsys)
    m = out["matching"]
    assert (out["n_traces"], m["matched_by"], m["skipped"]) == (2, {"query_id": 1, "question": 1}, 1)
    assert out["problems"] == ["3: retrieval_context is null or missing (a golden the system has not answered, "
                               "or a test case without retrieval); skipped"]
    _, traces, _ = read_traces(out["traces"])
    cats, dogs = traces
    assert cats.meta == {"unlocated_contexts": 0, "ambiguous_contexts": 0, "n_contexts": 2,
                         "expected_output": "They are content.", "context": ["Cats purr when they are content."],
                         "name": "cats"}
    assert (cats.answer, dogs.outcome, dogs.question) == ("Contentment.", "abstained", "Dogs?")

    v = score(out["traces"], world, "deepeval", capsys)
    assert v[("q1", "recall@1")] == 1.0 and v[("q1", "precision@10")] == 0.1  # 1 relevant unit / cutoff 10
    assert v[("q2", "recall@10")] == 0.0 and v[("q3", "recall@10")] == 0.0


def _genai_pipeline(tracer, *, question, docs, answer, noise_span=True):
    """A RAG request instrumented with the OpenTelemetry GenAI conventions only (no openinference.span.kind)."""
    with tracer.start_as_current_span("invoke_agent rag") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        with tracer.start_as_current_span("retrieval kb") as ret:
            ret.set_attribute("gen_ai.operation.name", "retrieval")
            ret.set_attribute("gen_ai.retrieval.query.text", question)
            ret.set_attribute("gen_ai.retrieval.documents", json.dumps(docs))
        if noise_span:
            with tracer.start_as_current_span("GET /health"):
                pass
        with tracer.start_as_current_span("chat model") as llm:
            llm.set_attribute("gen_ai.operation.name", "chat")
            llm.set_attribute("gen_ai.input.messages", json.dumps(
                [{"role": "system", "parts": [{"type": "text", "content": "Answer from the context."}]},
                 {"role": "user", "parts": [{"type": "text", "content": question}]}]))
            llm.set_attribute("gen_ai.output.messages", json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": answer}], "finish_reason": "stop"}]))
            llm.set_attribute("gen_ai.usage.input_tokens", 50)
            llm.set_attribute("gen_ai.usage.output_tokens", 4)
        return root


def test_otel_spans_without_openinference_kinds_are_read_by_the_genai_conventions(world, tmp_path, capsys):
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    spans_file = tmp_path / "spans.json"
    with spans_file.open("w") as fh:
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=fh)))
        tracer = provider.get_tracer("genai")
        _genai_pipeline(tracer, question="Why do cats purr?", answer="Contentment.",
                        docs=[{"id": "c1", "score": 0.9, "content": "Cats purr when they are content."},
                              {"id": "dogs", "score": 0.5}])  # an id that is a corpus doc id: the whole doc
        # an OpenInference-instrumented request in the same export, whose root fails with a description
        with tracer.start_as_current_span("rag") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", "What do dogs do at strangers?")
            with tracer.start_as_current_span("bm25") as ret:
                ret.set_attribute("openinference.span.kind", "RETRIEVER")
                ret.set_attribute("retrieval.documents.0.document.id", "x")
                ret.set_attribute("retrieval.documents.0.document.content", "Dogs wag their tails when happy.")
            root.set_status(Status(StatusCode.ERROR, "generator timed out after 30 s"))
        provider.shutdown()

    corpus, golden = load_corpus(world["corpus"]), load_golden(world["golden"])
    header, traces, problems = traces_from_spans(memory.get_finished_spans(), corpus, golden)
    cats, dogs = traces
    assert (cats.query_id, cats.question, cats.answer, cats.outcome) == ("q1", "Why do cats purr?", "Contentment.",
                                                                         "answered")
    assert [(u.doc_id, u.start, u.end, u.score) for u in cats.fused] == [
        ("cats", 0, 32, 0.9), ("dogs", 0, len(corpus.docs["dogs"].text), 0.5)]
    assert (cats.tokens_in, cats.tokens_out, cats.meta["unread_spans"]) == (50, 4, 1)
    assert [p.message.split(": ", 1)[1] for p in problems] == [
        "1 span(s) carry neither openinference.span.kind nor gen_ai.operation.name and were not read: GET /health"]
    assert (dogs.query_id, dogs.outcome, dogs.error) == ("q2", "error", "generator timed out after 30 s")
    assert header.stats["matching"]["matched_by"] == {"question": 2}
    # durations are differences of the SDK's integer nanoseconds, divided once
    by_name = {s.name: s for s in memory.get_finished_spans()}
    root = by_name["invoke_agent rag"]
    assert cats.durations_ms["total"] == (root.end_time - root.start_time) / 1_000_000
    assert cats.durations_ms["generate"] == (by_name["chat model"].end_time - by_name["chat model"].start_time) / 1e6

    # the ConsoleSpanExporter file: the same traces; times as the file gives them (microseconds), exactly
    out = import_json("otel", spans_file, world, capsys)
    line, record = next((n, s) for n, s in read_span_file(spans_file) if s["name"] == "invoke_agent rag")
    # a trace's problems carry the file line of its root span (written last: a span is exported as it ends)
    assert out["n_traces"] == 2 and len(out["problems"]) == 1 and out["problems"][0].startswith(f"{line}: otel ")
    _, from_file, _ = read_traces(out["traces"])
    assert from_file[0].durations_ms["total"] == (iso_ns(record["end_time"]) - iso_ns(record["start_time"])) / 1e6
    assert from_file[1].error == "generator timed out after 30 s"
    v = score(out["traces"], world, "otel", capsys)
    assert v[("q1", "recall@1")] == 1.0 and v[("q1", "precision@10")] == 0.1
    assert v[("q2", "recall@10")] == 0.0


def test_iso_times_become_exact_integer_nanoseconds():
    # 1_796_404_923 s after 1970 (2026-12-04T17:22:03Z) plus the fraction's digits, no float in between
    assert iso_ns("2026-12-04T17:22:03.646869Z") == 1_796_404_923_646_869_000
    assert iso_ns("2026-12-04T17:22:03.646869123Z") == 1_796_404_923_646_869_123
    assert iso_ns("2026-12-04T19:22:03+02:00") == 1_796_404_923_000_000_000
    # the float route the importer used to take (seconds as a double, times 1e9) is not exact
    import datetime as dt

    t = dt.datetime.fromisoformat("2026-12-04T17:22:03.646869+00:00")
    assert int(t.timestamp() * 1e9) == 1_796_404_923_646_868_992


def test_otlp_json_export_keeps_nanosecond_durations(world, tmp_path, capsys):
    # what the collector's file exporter writes: resourceSpans > scopeSpans > spans, ids in hex, times in ns
    def attr(key, value):
        kind = "intValue" if isinstance(value, int) else "stringValue"
        return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}

    tid = "5b8efff798038103d269b633813fc60c"
    spans = [
        {"traceId": tid, "spanId": "eee19b7ec3c1b174", "name": "rag", "kind": 1,
         "startTimeUnixNano": "1700000000123456789", "endTimeUnixNano": "1700000000223456790",
         "attributes": [attr("openinference.span.kind", "CHAIN"), attr("input.value", "How do fish breathe?"),
                        attr("output.value", "Gills.")], "status": {}},
        {"traceId": tid, "spanId": "eee19b7ec3c1b175", "parentSpanId": "eee19b7ec3c1b174", "name": "retriever",
         "startTimeUnixNano": "1700000000123456800", "endTimeUnixNano": "1700000000133456801",
         "attributes": [attr("openinference.span.kind", "RETRIEVER"),
                        attr("retrieval.documents.0.document.content", "Fish breathe through gills."),
                        attr("retrieval.documents.0.document.id", "f1")]},
    ]
    src = tmp_path / "otlp.json"
    src.write_text(json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                                  "scopeSpans": [{"scope": {"name": "x"}, "spans": spans}]}]}))
    out = import_json("otel", src, world, capsys)
    assert out["problems"] == [] and out["n_traces"] == 1
    (t,) = read_traces(out["traces"])[1]
    assert t.durations_ms == {"retrieve": 10.000001, "total": 100.000001}
    assert (t.query_id, t.answer, [(u.doc_id, u.start) for u in t.fused]) == ("q3", "Gills.", [("fish", 22)])


def test_beir_manifest_pins_linear_gain_and_linear_scoring_matches_beir(tmp_path, capsys):
    src = tmp_path / "toy"
    _write_beir(src, qrels_rows=[("q1", "d1", 1), ("q1", "d2", 2), ("q2", "d2", 1)])
    code, out, err = cli(["import", "beir", str(src), "-o", str(tmp_path / "out"), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["gain"] == "linear"
    golden = load_golden(tmp_path / "out" / "golden")
    assert golden.manifest["generator"] == {"kind": "beir-import", "split": "test", "gain": "linear"}
    run = tmp_path / "r.run"
    run.write_text("q1 Q0 d1 1 2.0 s\nq1 Q0 d2 2 1.0 s\nq2 Q0 d2 1 1.0 s\n")
    world = {"golden": str(tmp_path / "out" / "golden"), "corpus": str(tmp_path / "out" / "corpus.jsonl"),
             "root": str(tmp_path)}
    traces = import_json("trec", run, world, capsys)["traces"]
    # no flag: the manifest's gain (linear, BEIR's); --gain exp overrides it; the Python API reads it too
    linear = score(traces, world, "beir-linear", capsys)
    exp = score(traces, world, "beir-exp", capsys, "--gain", "exp")
    import ragassay

    api = ragassay.evaluate(traces, golden=world["golden"], corpus=world["corpus"], store=tmp_path / "api.duckdb",
                            name="api")
    assert api.record.gain == "linear"
    assert dict(zip(*(api.to_pandas().query("metric == 'ndcg@10'")[c] for c in ("query_id", "value")),
                    strict=True))["q1"] == pytest.approx(linear[("q1", "ndcg@10")])
    # q1 ranks grade 1 then grade 2: DCG = 1/log2(2) + 2/log2(3), ideal = 2/log2(2) + 1/log2(3) (BEIR's number)
    assert linear[("q1", "ndcg@10")] == pytest.approx((1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))
    # exponential gain 2^g - 1: DCG = 1 + 3/log2(3), ideal = 3 + 1/log2(3)
    assert exp[("q1", "ndcg@10")] == pytest.approx((1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3)))
    assert linear[("q2", "ndcg@10")] == exp[("q2", "ndcg@10")] == 1.0


def test_the_docs_name_every_importer_and_the_manifest_gain():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "importers.md").read_text(encoding="utf-8")
    for command in ("import beir", "import otel", "import ragas", "import deepeval", "import trec"):
        assert f"ragassay {command}" in doc
    assert "scores with linear gain" in doc and "user_input" in doc and "gen_ai.retrieval.documents" in doc
