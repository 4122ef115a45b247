"""Agent spans (OpenInference AGENT/TOOL/RETRIEVER/LLM, GenAI invoke_agent/execute_tool/retrieval/chat) made
with the real OpenTelemetry SDK become ordered steps of the trace of their root span."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from ragassay.analysis.runner import load_inputs
from ragassay.importers.otel import RESULT_EXCERPT, read_span_file, traces_from_spans
from ragassay.trace import read_traces, write_traces

from ._world import cli, make_world

T0 = 10**15  # ns; small enough that ConsoleSpanExporter's float seconds keep every microsecond
MS = 1_000_000


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = make_world(tmp_path_factory.mktemp("otel-agent"))
    w["corpus_obj"], w["golden_obj"] = load_inputs(w["corpus"], w["golden"])
    return w


class Spans:
    """Spans with explicit integer-ns times, so every duration and the step order are known exactly."""

    def __init__(self, console=None):
        self.memory = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        if console is not None:
            self.provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=console)))
        self.tracer = self.provider.get_tracer("agent-test")

    def span(self, name, start_ms, end_ms, attrs, parent=None, error=None):
        ctx = otel_trace.set_span_in_context(parent) if parent is not None else None
        s = self.tracer.start_span(name, context=ctx, start_time=T0 + start_ms * MS, attributes=attrs)
        if error is not None:
            s.set_status(Status(StatusCode.ERROR, error))
        return s

    @staticmethod
    def end(s, end_ms):
        s.end(end_time=T0 + end_ms * MS)

    def finished(self):
        self.provider.shutdown()
        return self.memory.get_finished_spans()


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


LONG = "".join(f"row {i:04d}; " for i in range(60))  # 600 characters


def _openinference_agent(sp: Spans):
    """An AGENT root with, in start order: a search tool (TOOL wrapping a RETRIEVER), an LLM call, a
    calculator, a bare retriever, a failing tool and a tool with a long result. Spans are started out of
    order so that only the start times give the order."""
    root = sp.span("agent", 0, 100, {"openinference.span.kind": "AGENT", "input.value": "Why do cats purr?",
                                     "output.value": "Because they are content."})
    calc = sp.span("calc", 30, 31.5, {"openinference.span.kind": "TOOL", "tool.name": "calculator",
                                      "input.value": json.dumps({"expr": "2+2"}), "output.value": "4"}, root)
    sp.end(calc, 31.5)
    tool = sp.span("search_tool", 10, 20, {"openinference.span.kind": "TOOL", "tool.name": "search",
                                           "input.value": json.dumps({"query": "cat purring", "k": 3}),
                                           "output.value": "[cats:0-32, dogs:0-23]", "ragassay.hop": 1}, root)
    ret = sp.span("bm25", 11, 19, {
        "openinference.span.kind": "RETRIEVER", "input.value": "cat purring",
        "retrieval.documents.0.document.id": "u1",
        "retrieval.documents.0.document.metadata": json.dumps({"doc_id": "cats", "start": 0, "end": 32}),
        "retrieval.documents.0.document.score": 2.5,
        "retrieval.documents.1.document.id": "u2",
        "retrieval.documents.1.document.content": "no passage says this",
        "retrieval.documents.2.document.id": "u3",
        "retrieval.documents.2.document.content": "Dogs bark at strangers.",
        "retrieval.documents.2.document.score": 1.0}, tool)
    sp.end(ret, 19)
    sp.end(tool, 20)
    llm = sp.span("llm", 21, 29, {"openinference.span.kind": "LLM", "llm.token_count.prompt": 100,
                                  "llm.token_count.completion": 20}, root)
    sp.end(llm, 29)
    bare = sp.span("fish-retriever", 40, 42, {
        "openinference.span.kind": "RETRIEVER", "input.value": "gills",
        "retrieval.documents.0.document.id": "fish"}, root)
    sp.end(bare, 42)
    bad = sp.span("web", 50, 55, {"openinference.span.kind": "TOOL", "tool.name": "web_fetch",
                                  "input.value": "https://example.org"}, root, error="timeout after 5 s")
    sp.end(bad, 55)
    big = sp.span("dump", 60, 61, {"openinference.span.kind": "TOOL", "tool.name": "sql",
                                   "input.value": json.dumps({"q": "select"}), "output.value": LONG}, root)
    sp.end(big, 61)
    sp.end(root, 100)


def test_openinference_agent_spans_become_ordered_steps(world, tmp_path):
    corpus, golden = world["corpus_obj"], world["golden_obj"]
    with (tmp_path / "spans.json").open("w") as fh:
        sp = Spans(console=fh)
        _openinference_agent(sp)
        spans = sp.finished()
    header, traces, problems = traces_from_spans(spans, corpus, golden)
    (t,) = traces
    assert (t.query_id, t.trial, t.answer, t.outcome) == ("q1", 0, "Because they are content.", "answered")
    assert (t.tokens_in, t.tokens_out) == (100, 20)
    assert t.claimed_success is None
    # the retrievers stay branches as for a single-shot pipeline (unranked), and are steps besides
    assert {b: [(u.doc_id, u.start, u.end, u.rank) for u in us] for b, us in t.branches.items()} == {
        "bm25": [("cats", 0, 32, None), ("dogs", 0, 23, None)],
        "fish-retriever": [("fish", 0, len(corpus.docs["fish"].text), None)]}
    assert t.fused == t.branches["bm25"] == t.packed
    assert t.durations_ms == {"retrieve": 10.0, "generate": 8.0, "total": 100.0}
    assert [s.name for s in t.steps] == ["search", "calculator", "fish-retriever", "web_fetch", "sql"]

    search, calc, fish, web, sql = t.steps
    # the search tool and the retriever under it are one retrieval step: the tool's name, arguments and
    # result, the retriever's query, units and duration
    assert search.kind == "retrieval" and search.query == "cat purring"
    assert search.arguments == {"query": "cat purring", "k": 3}
    assert search.result == "[cats:0-32, dogs:0-23]" and search.result_digest == sha("[cats:0-32, dogs:0-23]")
    assert [(u.unit_id, u.doc_id, u.start, u.end, u.rank, u.score) for u in search.units] == [
        ("u1", "cats", 0, 32, 1, 2.5), ("u3", "dogs", 0, 23, 3, 1.0)]  # u2 is placed nowhere: rank 2 left out
    assert (search.hop, search.duration_ms, search.error) == (1, 8.0, None)

    assert calc.kind == "tool" and calc.arguments == {"expr": "2+2"}
    assert (calc.result, calc.result_digest, calc.duration_ms, calc.error) == ("4", sha("4"), 1.5, None)
    assert calc.units == [] and calc.query is None and calc.hop is None

    assert fish.kind == "retrieval" and fish.query == "gills" and fish.arguments == {}
    assert [(u.doc_id, u.start, u.end, u.rank) for u in fish.units] == [("fish", 0, len(corpus.docs["fish"].text), 1)]
    assert (fish.result, fish.result_digest, fish.duration_ms) == (None, None, 2.0)

    # plain-text input of an OpenInference tool is kept, not a problem; ERROR status -> the step's error
    assert web.arguments == {"input": "https://example.org"} and web.error == "timeout after 5 s"
    assert (web.result, web.result_digest, web.duration_ms) == (None, None, 5.0)

    assert len(LONG) == 600 and sql.result == LONG[:RESULT_EXCERPT] and len(sql.result) == 500
    assert sql.result_digest == sha(LONG)  # the digest is of the whole result

    # read for the branch and for the step, reported once
    assert [p.message.split(": ", 2)[-1] for p in problems] == [
        "document u2 not found in the corpus; add doc_id/start/end to its metadata"]

    # the ConsoleSpanExporter file reads back to the same steps, and the trace file keeps them
    _, again, _ = traces_from_spans(read_span_file(tmp_path / "spans.json"), corpus, golden)
    assert again[0].model_dump(exclude={"trace_id"}) == t.model_dump(exclude={"trace_id"})
    write_traces(tmp_path / "t.jsonl", header, traces)
    _, back, bad = read_traces(tmp_path / "t.jsonl")
    assert not bad and back[0].steps == t.steps


def test_genai_agent_spans_become_steps_and_malformed_attributes_are_problems(world):
    corpus, golden = world["corpus_obj"], world["golden_obj"]
    sp = Spans()
    root = sp.span("invoke_agent pets", 0, 50, {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text",
                                                                         "content": "How do fish breathe?"}]}]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text",
                                                                              "content": "Through gills."}]}]),
        "gen_ai.usage.input_tokens": 999, "gen_ai.usage.output_tokens": 999})
    chat = sp.span("chat m", 1, 5, {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 40,
                                    "gen_ai.usage.output_tokens": 6}, root)
    sp.end(chat, 5)
    ret = sp.span("retrieval kb", 6, 9, {
        "gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": "fish gills",
        "gen_ai.retrieval.documents": json.dumps([{"id": "fish", "score": 0.75}]), "ragassay.hop": 2}, root)
    sp.end(ret, 9)
    tool = sp.span("execute_tool lookup", 10, 12.25, {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.arguments": json.dumps({"species": "trout"}),
        "gen_ai.tool.call.result": "trout: gills", "gen_ai.usage.input_tokens": 3}, root)
    sp.end(tool, 12.25)
    broken = sp.span("execute_tool", 13, 14, {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": 7,
        "gen_ai.tool.call.arguments": "{species: trout", "gen_ai.tool.call.result": [1, 2],
        "gen_ai.usage.output_tokens": -1, "ragassay.hop": 0}, root)
    sp.end(broken, 14)
    noquery = sp.span("retrieval empty", 15, 16, {"gen_ai.operation.name": "retrieval",
                                                  "gen_ai.retrieval.documents": "[not json"}, root)
    sp.end(noquery, 16)
    sp.end(root, 50)
    _, (t,), problems = traces_from_spans(sp.finished(), corpus, golden)
    assert (t.query_id, t.answer, t.outcome) == ("q3", "Through gills.", "answered")
    assert (t.tokens_in, t.tokens_out) == (40, 6)  # the chat span's; the agent's own total is not added
    assert [(s.kind, s.name) for s in t.steps] == [("retrieval", "retrieval kb"), ("tool", "lookup"),
                                                   ("tool", "execute_tool"), ("retrieval", "retrieval empty")]
    kb, lookup, broken_step, empty = t.steps
    assert (kb.query, kb.hop, kb.duration_ms) == ("fish gills", 2, 3.0)
    assert [(u.doc_id, u.start, u.end, u.score, u.rank) for u in kb.units] == [
        ("fish", 0, len(corpus.docs["fish"].text), 0.75, 1)]
    assert lookup.arguments == {"species": "trout"} and lookup.duration_ms == 2.25
    assert (lookup.result, lookup.result_digest, lookup.tokens_in, lookup.tokens_out) == (
        "trout: gills", sha("trout: gills"), 3, None)
    # malformed attributes: kept where they can be, each a counted problem, never a traceback
    assert broken_step.arguments == {"input": "{species: trout"}
    assert broken_step.result == "[1, 2]" and broken_step.result_digest == sha("[1, 2]")
    assert (broken_step.hop, broken_step.tokens_out) == (None, None)
    assert (empty.query, empty.units) == ("", [])
    msgs = sorted(p.message.split(": ", 2)[-1] for p in problems)
    assert len(msgs) == 6, msgs
    assert any(m.startswith("gen_ai.tool.name 7 is not a tool name") for m in msgs)
    assert any(m.startswith("gen_ai.tool.call.arguments is not valid JSON") for m in msgs)
    assert any(m.startswith("gen_ai.usage.output_tokens -1 is not a token count") for m in msgs)
    assert any(m.startswith("ragassay.hop 0 is not a whole number >= 1") for m in msgs)
    assert any(m.startswith("gen_ai.retrieval.documents is not valid JSON") for m in msgs)
    assert any(m.startswith("a retrieval step without a query") for m in msgs)


def test_agent_usage_is_read_when_no_generation_span_counts_tokens(world):
    sp = Spans()
    root = sp.span("invoke_agent", 0, 10, {"gen_ai.operation.name": "invoke_agent",
                                           "ragassay.query_id": "q2", "gen_ai.usage.input_tokens": 70,
                                           "gen_ai.usage.output_tokens": 9})
    sp.end(root, 10)
    _, (t,), problems = traces_from_spans(sp.finished(), world["corpus_obj"], world["golden_obj"])
    assert (t.query_id, t.tokens_in, t.tokens_out, t.steps, t.outcome) == ("q2", 70, 9, [], "abstained")
    assert problems == []


def test_rag_retriever_outside_an_agent_stays_a_branch_beside_tool_steps(world):
    corpus, golden = world["corpus_obj"], world["golden_obj"]
    sp = Spans()
    root = sp.span("rag", 0, 30, {"openinference.span.kind": "CHAIN", "input.value": "Why do cats purr?"},
                   error="generator crashed")
    ret = sp.span("bm25", 1, 4, {"openinference.span.kind": "RETRIEVER", "input.value": "cats",
                                 "retrieval.documents.0.document.id": "cats"}, root)
    sp.end(ret, 4)
    tool = sp.span("guard", 5, 6, {"openinference.span.kind": "TOOL", "input.value": "{}", "output.value": "ok"},
                   root)
    sp.end(tool, 6)
    sp.end(root, 30)
    _, (t,), _ = traces_from_spans(sp.finished(), corpus, golden)
    assert list(t.branches) == ["bm25"] and [u.doc_id for u in t.fused] == ["cats"]
    assert t.durations_ms == {"retrieve": 3.0, "total": 30.0}
    assert [(s.kind, s.name, s.arguments, s.result) for s in t.steps] == [("tool", "guard", {}, "ok")]
    assert (t.outcome, t.error) == ("error", "generator crashed")


def test_cli_import_otel_writes_steps(world, tmp_path, capsys):
    with (tmp_path / "spans.json").open("w") as fh:
        sp = Spans(console=fh)
        _openinference_agent(sp)
        sp.finished()
    out = tmp_path / "agent.jsonl"
    code, stdout, err = cli(["import", "otel", tmp_path / "spans.json", "--golden", world["golden"], "--corpus",
                             world["corpus"], "-o", out, "--json"], capsys)
    assert code == 0, err
    info = json.loads(stdout)
    assert info["n_traces"] == 1 and len(info["problems"]) == 1
    rec = json.loads(out.read_text().splitlines()[1])
    assert [s["kind"] for s in rec["steps"]] == ["retrieval", "tool", "retrieval", "tool", "tool"]
    assert rec["steps"][1] == {"kind": "tool", "name": "calculator", "arguments": {"expr": "2+2"},
                               "result_digest": sha("4"), "result": "4", "query": None, "units": [], "hop": None,
                               "duration_ms": 1.5, "tokens_in": None, "tokens_out": None, "cost": None,
                               "error": None}


def test_an_attribute_of_any_type_is_read_or_a_problem_never_a_traceback(world, tmp_path):
    from ragassay.errors import InputError

    with (tmp_path / "spans.json").open("w") as fh:
        sp = Spans(console=fh)
        _openinference_agent(sp)
        sp.finished()
    base = [s for _, s in read_span_file(tmp_path / "spans.json")]
    outcomes = {"imported": 0, "nothing matched": 0}
    for i, span in enumerate(base):
        for key in [*span["attributes"], "gen_ai.operation.name", "tool.name"]:
            for value in (None, [1, "a"], {"a": {"b": 1}}, "{not json", -3):
                spans = copy.deepcopy(base)
                spans[i]["attributes"][key] = value
                try:
                    traces_from_spans(spans, world["corpus_obj"], world["golden_obj"])
                    outcomes["imported"] += 1
                except InputError as e:  # the root's question gone: the one trace is unmatched
                    assert "became a trace" in str(e)
                    outcomes["nothing matched"] += 1
    tried = sum(5 * (len(s["attributes"]) + 2) for s in base)
    assert outcomes["imported"] + outcomes["nothing matched"] == tried > 200 and outcomes["nothing matched"] > 0
