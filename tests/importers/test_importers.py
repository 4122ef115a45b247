"""BEIR folders written as BEIR writes them, and OpenTelemetry spans exported by the real SDK."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

import ragassay
from ragassay.corpus import bundled_corpus_dir, load_corpus
from ragassay.errors import InputError
from ragassay.golden import build_golden, bundled_golden_source, load_golden
from ragassay.importers.beir import import_beir
from ragassay.importers.otel import read_span_file, traces_from_spans


def _write_beir(root, *, qrels_rows):
    (root / "qrels").mkdir(parents=True)
    docs = [{"_id": "d1", "title": "Cats", "text": "Cats purr when content."},
            {"_id": "d2", "title": "", "text": "Dogs bark at strangers."},
            {"_id": "d3", "title": "Fish", "text": "Fish swim in schools."}]
    queries = [{"_id": "q1", "text": "what purrs"}, {"_id": "q2", "text": "who barks"},
               {"_id": "q3", "text": "never judged"}, {"_id": "q4", "text": "nothing relevant"}]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{s}\n" for q, d, s in qrels_rows))


def test_beir_folder_becomes_corpus_and_doc_level_golden_set(tmp_path):
    src = tmp_path / "toy"
    _write_beir(src, qrels_rows=[("q1", "d1", 1), ("q1", "d3", 0), ("q2", "d2", 2), ("q4", "d3", 0)])
    corpus, golden = import_beir(src, tmp_path / "out")
    assert corpus.docs["d1"].text == "Cats\n\nCats purr when content."
    assert golden.manifest["hit_rule"] == "doc" and golden.manifest["relevance_threshold"] == 1
    assert golden.query_ids == ["q1", "q2", "q4"]  # q3 has no judgements in the split
    q1 = golden["q1"]
    assert [(e.doc_id, e.grade, e.start, e.end) for e in q1.evidence] == [
        ("d1", 1, 0, len(corpus.docs["d1"].text)), ("d3", 0, 0, len(corpus.docs["d3"].text))]
    assert not golden["q4"].answerable and golden["q4"].evidence == []
    again = load_golden(tmp_path / "out" / "golden")  # the builder's folder, manifest and content version
    assert again.dataset_version == golden.dataset_version

    # a TREC run scored against it: the doc hit rule gives rank-1 hits full recall
    run = tmp_path / "r.run"
    run.write_text("q1 Q0 d1 1 2.0 s\nq1 Q0 d2 2 1.0 s\nq2 Q0 d3 1 2.0 s\nq2 Q0 d2 2 1.0 s\n")
    r = ragassay.evaluate(run, golden=golden, corpus=corpus, store=tmp_path / "s.duckdb")
    rec = r.to_pandas().query("metric == 'recall@1'").set_index("query_id")["value"]
    assert rec["q1"] == 1.0 and rec["q2"] == 0.0
    assert (r.record.hit_rule, r.record.relevance_threshold) == ("doc", 1)  # read from the manifest


def test_beir_errors_name_file_and_line(tmp_path):
    src = tmp_path / "bad"
    _write_beir(src, qrels_rows=[("q1", "d9", 1)])
    with pytest.raises(InputError, match="not in corpus.jsonl, e.g. query q1 doc d9"):
        import_beir(src, tmp_path / "out")
    src2 = tmp_path / "bad2"
    _write_beir(src2, qrels_rows=[("q1", "d1", 7)])
    with pytest.raises(InputError, match=r"test.tsv:2: score 7 is outside"):
        import_beir(src2, tmp_path / "out2")
    with pytest.raises(InputError, match="qrels file not found"):
        import_beir(src2, tmp_path / "out3", split="dev")
    (tmp_path / "occupied").mkdir()
    (tmp_path / "occupied" / "keep.txt").write_text("x")
    with pytest.raises(InputError, match="not empty"):
        import_beir(src, tmp_path / "occupied")


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(bundled_corpus_dir())


@pytest.fixture(scope="module")
def golden(corpus):
    return build_golden(bundled_golden_source(), corpus)


def _toy_pipeline(tracer, golden, corpus, queries, *, fail_last=False):
    """An instrumented RAG pipeline: chain root -> retriever (content only) -> reranker -> LLM."""
    for i, q in enumerate(queries):
        ev = q.evidence[0]
        gold_text = corpus.docs[ev.doc_id].text[ev.start:ev.end]
        with tracer.start_as_current_span("rag") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", q.question)
            with tracer.start_as_current_span("bm25") as ret:
                ret.set_attribute("openinference.span.kind", "RETRIEVER")
                ret.set_attribute("input.value", q.question)
                ret.set_attribute("retrieval.documents.0.document.id", "c-gold")
                ret.set_attribute("retrieval.documents.0.document.content", gold_text)
                ret.set_attribute("retrieval.documents.0.document.score", 3.5)
                ret.set_attribute("retrieval.documents.1.document.id", "c-other")
                ret.set_attribute("retrieval.documents.1.document.content", "no such passage anywhere here")
                ret.set_attribute("retrieval.documents.1.document.score", 1.0)
            with tracer.start_as_current_span("rerank") as rr:
                rr.set_attribute("openinference.span.kind", "RERANKER")
                rr.set_attribute("reranker.input_documents.0.document.id", "whole")
                rr.set_attribute("reranker.input_documents.0.document.metadata",
                                 json.dumps({"doc_id": "GPL-2"}))
                rr.set_attribute("reranker.output_documents.0.document.id", "c-gold")
                rr.set_attribute("reranker.output_documents.0.document.metadata",
                                 json.dumps({"doc_id": ev.doc_id, "start": ev.start, "end": ev.end}))
            with tracer.start_as_current_span("llm") as llm:
                llm.set_attribute("openinference.span.kind", "LLM")
                llm.set_attribute("llm.output_messages.0.message.role", "assistant")
                llm.set_attribute("llm.output_messages.0.message.content", q.reference_answer or "yes")
                llm.set_attribute("llm.token_count.prompt", 120 + i)
                llm.set_attribute("llm.token_count.completion", 7)
            if fail_last and i == len(queries) - 1:
                root.set_status(Status(StatusCode.ERROR))


def test_otel_spans_from_the_sdk_become_traces(tmp_path, golden, corpus):
    queries = [q for q in golden.queries if q.relevant(2) and q.reference_answer][:6]
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with (tmp_path / "spans.json").open("w") as fh:
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=fh)))
        _toy_pipeline(provider.get_tracer("toy"), golden, corpus, queries, fail_last=True)
        provider.shutdown()

    header, traces, problems = traces_from_spans(memory.get_finished_spans(), corpus, golden)
    assert [t.query_id for t in traces] == [q.query_id for q in queries]
    t0, q0 = traces[0], queries[0]
    ev = q0.evidence[0]
    (gold,) = t0.branches["bm25"]  # the unplaceable passage is left out and reported
    assert (gold.doc_id, gold.start, gold.end, gold.score) == (ev.doc_id, ev.start, ev.end, 3.5)
    assert [(u.doc_id, u.start, u.end) for u in t0.fused] == [("GPL-2", 0, len(corpus.docs["GPL-2"].text))]
    assert [(u.doc_id, u.start, u.end) for u in t0.reranked] == [(ev.doc_id, ev.start, ev.end)]
    assert t0.answer == q0.reference_answer and t0.outcome == "answered"
    assert (t0.tokens_in, t0.tokens_out) == (120, 7)
    assert set(t0.durations_ms) == {"retrieve", "rerank", "generate", "total"}
    assert t0.durations_ms["total"] >= t0.durations_ms["generate"] >= 0
    assert traces[-1].outcome == "error"
    assert len(problems) == 6 and all("not found in the corpus" in p.message for p in problems)

    # the ConsoleSpanExporter file reads back to the same traces
    _, from_file, _ = traces_from_spans(read_span_file(tmp_path / "spans.json"), corpus, golden)
    strip = {"trace_id", "durations_ms"}
    assert [t.model_dump(exclude=strip) for t in from_file] == [t.model_dump(exclude=strip) for t in traces]


def test_otel_unknown_question_is_a_problem_not_a_guess(golden, corpus):
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("toy")
    with tracer.start_as_current_span("rag") as root:
        root.set_attribute("input.value", "a question nobody labelled")
    with tracer.start_as_current_span("rag") as root:
        root.set_attribute("input.value", "anything")
        root.set_attribute("ragassay.query_id", golden.queries[0].query_id)
        root.set_attribute("output.value", "")
    _, traces, problems = traces_from_spans(memory.get_finished_spans(), corpus, golden)
    assert [t.query_id for t in traces] == [golden.queries[0].query_id]
    assert traces[0].outcome == "abstained"
    assert len(problems) == 1 and "matches no golden question" in problems[0].message
