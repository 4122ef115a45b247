"""Inspect AI logs, written by hand from inspect-ai 0.3.x's log format (``log/_log.py``: EvalLog, EvalSample;
``log/_recorders/eval.py``: the .eval zip with header.json and samples/<id>_epoch_<n>.json), become traces
with agent steps."""

from __future__ import annotations

import copy
import hashlib
import json
import warnings
import zipfile
from pathlib import Path

import pytest

from ragassay.analysis.runner import load_inputs
from ragassay.errors import InputError
from ragassay.importers.inspect_ai import read_inspect_log, traces_from_inspect

from ._world import cli, make_world


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


CATS_HITS = json.dumps([{"doc_id": "cats", "start": 0, "end": 32, "score": 3.1, "id": "cats#0"},
                        {"text": "Dogs bark at strangers.", "score": 1.2}])
LONG = "x" * 450 + "é" * 100  # 550 characters


def _msg(role, content, **kw):
    return {"id": f"m-{role}-{abs(hash(str(content))) % 10**6}", "role": role, "content": content,
            "source": "generate" if role == "assistant" else "input", **kw}


def _call(cid, function, arguments):
    return {"id": cid, "function": function, "arguments": arguments, "type": "function"}


def _tool_event(cid, function, start, end):
    return {"event": "tool", "type": "function", "id": cid, "function": function, "arguments": {},
            "timestamp": start, "completed": end, "working_time": 0.1, "result": ""}


def _sample(sid, epoch, question, messages, completion, **kw):
    usage = {"openai/gpt-4o-mini": {"input_tokens": 300, "output_tokens": 40, "total_tokens": 440,
                                    "input_tokens_cache_read": 100, "total_cost": 0.0021}}
    return {"id": sid, "epoch": epoch, "input": question, "target": "a target", "messages": messages,
            "output": {"model": "gpt-4o-mini", "choices": [], "completion": completion},
            "scores": {"model_graded_qa": {"value": "C", "answer": completion, "explanation": "matches the target"}},
            "metadata": {}, "store": {}, "events": [], "model_usage": usage, "total_time": 3.5,
            "working_time": 2.75, "uuid": f"u{sid}{epoch}", "attachments": {}, **kw}


def inspect_log() -> dict:
    sys_msg = _msg("system", "You answer questions about pets. Use the tools.")
    s1 = _sample(1, 1, "Why do cats purr?", [
        sys_msg, _msg("user", "Why do cats purr?"),
        _msg("assistant", "", tool_calls=[_call("c1", "search", {"query": "cat purring", "k": 2})]),
        _msg("tool", CATS_HITS, tool_call_id="c1", function="search"),
        _msg("assistant", "", tool_calls=[_call("c2", "calculator", {"expr": "2+2"})]),
        _msg("tool", [{"type": "text", "text": "4"}, {"type": "image", "image": "data:..."},
                      {"type": "text", "text": "(exact)"}], tool_call_id="c2", function="calculator"),
        _msg("assistant", "Cats purr when they are content.")], "Cats purr when they are content.",
        events=[_tool_event("c1", "search", "2026-01-01T10:00:00.000000Z", "2026-01-01T10:00:00.250000Z"),
                _tool_event("c2", "calculator", "2026-01-01T10:00:01.000000+00:00",
                            "2026-01-01T10:00:01.001500+00:00")])
    s2 = _sample(1, 2, "Why do cats purr?", [
        sys_msg, _msg("user", "Why do cats purr?"),
        _msg("assistant", "", tool_calls=[_call("d1", "search", {"query": "purr"})]),
        _msg("tool", "", tool_call_id="d1", function="search",
             error={"type": "timeout", "message": "search timed out"}),
        _msg("assistant", "", tool_calls=[_call("d2", "sql", {"q": "select *"})]),
        _msg("tool", LONG, tool_call_id="d2", function="sql"),
        _msg("assistant", "", tool_calls=[_call("d3", "calculator", {"expr": "1/0"})])], "",
        limit={"type": "message", "limit": 7})
    s2["model_usage"]["anthropic/claude-haiku"] = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                                                   "input_tokens_cache_write": 7}
    s3 = _sample("q2", 1, [sys_msg, _msg("user", "What do dogs do at strangers?")], [
        sys_msg, _msg("user", "What do dogs do at strangers?"),
        _msg("assistant", "", tool_calls=[_call("e1", "web_search", {"q": "dogs strangers"}),
                                          _call("e2", "retrieve_docs", {"topic": "dogs"})]),
        _msg("tool", "Dogs bark, mostly.", tool_call_id="e1", function="web_search"),
        _msg("tool", json.dumps({"hits": [{"content": "no passage says this"}]}), tool_call_id="e2",
             function="retrieve_docs"),
        _msg("tool", "stray", tool_call_id="zz", function="search"),
        _msg("assistant", "They bark.")], "They bark.")
    s4 = _sample(3, 1, "fish?", [
        _msg("user", "fish?"),
        _msg("assistant", "", tool_calls=[_call("f1", "Search", {"query": "gills"})]),
        _msg("tool", "attachment://a1b2", tool_call_id="f1", function="Search")], "",
        metadata={"query_id": "q3"}, attachments={"a1b2": json.dumps({"results": [{"id": "fish", "score": 2}]})},
        error={"message": "RuntimeError: sandbox died", "traceback": "Traceback ...", "traceback_ansi": ""})
    s5 = _sample(4, 1, "Tell me about pets.", [], "Pets are nice.")
    s6 = _sample(5, 1, "What is a cat?", [], "A small feline.")
    s7 = _sample("q1", 1, "How do fish breathe?", [], "Gills.")
    samples = [s1, s2, s3, s4, s5, s6, s7]
    header = {
        "version": 2, "status": "success",
        "eval": {"eval_id": "E1", "run_id": "R1", "created": "2026-01-01T09:59:00+00:00", "task": "pets_qa",
                 "task_id": "T1", "task_version": 0, "dataset": {"name": "pets", "samples": 6},
                 "model": "openai/gpt-4o-mini", "config": {"epochs": 2}, "packages": {"inspect_ai": "0.3.285"}},
        "plan": {"name": "plan", "steps": [{"solver": "react", "params": {}}], "config": {}},
        "results": {"total_samples": 7, "completed_samples": 7,
                    "scores": [{"name": "model_graded_qa", "scorer": "model_graded_qa",
                                "metrics": {"accuracy": {"name": "accuracy", "value": 0.5}}}]},
        "stats": {"started_at": "2026-01-01T10:00:00+00:00", "completed_at": "2026-01-01T10:01:00+00:00",
                  "model_usage": {}},
    }
    return {**header, "samples": samples}


def write_json(path, log):
    path.write_text(json.dumps(log, indent=2))
    return path


def write_eval(path, log):
    """The .eval zip as Inspect's recorder lays it out; one sample is written twice (the last counts)."""
    header = {k: v for k, v in log.items() if k != "samples"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns on the duplicated member name, as Inspect's logs have
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("_journal/start.json", json.dumps({"version": 2, "eval": header["eval"]}))
            stale = copy.deepcopy(log["samples"][5])
            stale["input"] = "Why do cats purr?"
            zf.writestr("samples/5_epoch_1.json", json.dumps(stale))
            for s in log["samples"]:
                zf.writestr(f"samples/{s['id']}_epoch_{s['epoch']}.json", json.dumps(s))
            zf.writestr("reductions.json", json.dumps([]))
            zf.writestr("summaries.json", json.dumps([{"id": s["id"], "epoch": s["epoch"]} for s in log["samples"]]))
            zf.writestr("header.json", json.dumps(header))
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = make_world(tmp_path_factory.mktemp("inspect"))
    w["corpus_obj"], w["golden_obj"] = load_inputs(w["corpus"], w["golden"])
    return w


def test_inspect_samples_become_traces_with_steps(world, tmp_path):
    corpus, golden = world["corpus_obj"], world["golden_obj"]
    header, traces, problems = traces_from_inspect(write_json(tmp_path / "log.json", inspect_log()), corpus, golden)
    assert header.source == "inspect_ai" and header.config["task"] == "pets_qa"
    assert [(t.query_id, t.trial) for t in traces] == [("q1", 0), ("q1", 1), ("q2", 0), ("q3", 0)]
    t1, t2, t3, t4 = traces

    # sample 1: matched by question; a search whose JSON names spans, and a calculator
    assert (t1.answer, t1.outcome, t1.question, t1.claimed_success) == (
        "Cats purr when they are content.", "answered", "Why do cats purr?", None)
    assert (t1.tokens_in, t1.tokens_out, t1.cost, t1.durations_ms) == (400, 40, 0.0021, {"total": 3500.0})
    assert t1.meta == {"inspect_sample_id": 1, "epoch": 1, "target": "a target", "working_time_ms": 2750.0,
                       "scores": {"model_graded_qa": {"value": "C", "answer": "Cats purr when they are content.",
                                                      "explanation": "matches the target"}}}
    search, calc = t1.steps
    assert (search.kind, search.name, search.query, search.arguments) == (
        "retrieval", "search", "cat purring", {"query": "cat purring", "k": 2})
    assert [(u.unit_id, u.doc_id, u.start, u.end, u.score, u.rank) for u in search.units] == [
        ("cats#0", "cats", 0, 32, 3.1, 1), ("dogs:0-23", "dogs", 0, 23, 1.2, 2)]
    assert (search.result, search.result_digest, search.duration_ms, search.error) == (
        CATS_HITS, sha(CATS_HITS), 250.0, None)
    assert (calc.kind, calc.arguments, calc.result, calc.result_digest, calc.duration_ms) == (
        "tool", {"expr": "2+2"}, "4\n(exact)", sha("4\n(exact)"), 1.5)

    # sample 2 (epoch 2 -> trial 1): a failed search stays a tool step with its error; a long result is cut
    # to 500 characters, its digest of all 550; a call the sample never answered (message limit)
    assert (t2.outcome, t2.answer, t2.meta["limit"]) == ("abstained", None, {"type": "message", "limit": 7})
    assert (t2.tokens_in, t2.tokens_out, t2.cost) == (400 + 17, 45, None)  # one model without total_cost
    failed, sql, unanswered = t2.steps
    assert (failed.kind, failed.error, failed.result, failed.result_digest) == ("tool", "search timed out", "", sha(""))
    assert sql.result == LONG[:500] and sql.result_digest == sha(LONG) and len(LONG) == 550
    assert (unanswered.name, unanswered.result, unanswered.result_digest, unanswered.error) == (
        "calculator", None, None, None)

    # sample 3: matched by its id; a search returning prose and a retriever whose document is nowhere
    assert t3.question == "What do dogs do at strangers?"
    assert [(s.kind, s.name, s.result) for s in t3.steps] == [
        ("tool", "web_search", "Dogs bark, mostly."),
        ("tool", "retrieve_docs", json.dumps({"hits": [{"content": "no passage says this"}]}))]

    # sample 4: matched by metadata.query_id; the result was an attachment; the sample's error
    assert (t4.outcome, t4.error, t4.answer) == ("error", "RuntimeError: sandbox died", None)
    (fish,) = t4.steps
    result = json.dumps({"results": [{"id": "fish", "score": 2}]})
    assert (fish.kind, fish.query, fish.result_digest) == ("retrieval", "gills", sha(result))
    assert [(u.doc_id, u.start, u.end, u.score) for u in fish.units] == [
        ("fish", 0, len(corpus.docs["fish"].text), 2.0)]

    m = header.stats["matching"]
    assert (m["records"], m["traces"], m["matched_by"], m["skipped"]) == (
        7, 4, {"query_id": 1, "question": 2, "sample_id": 1}, 0)
    assert [(u["sample"], u["question"]) for u in m["unmatched"]] == [(6, "What is a cat?")]
    assert [(a["sample"], a["query_ids"]) for a in m["ambiguous"]] == [(5, ["d1", "d2"]), (7, ["q1", "q3"])]
    got = [(p.line, p.message) for p in problems]
    assert [line for line, _ in got] == [2, 3, 3, 3, 3, 5, 6, 7]
    assert "tool call 'd3' (calculator): no tool message answers it" in got[0][1]
    assert "tool call 'e1' (web_search): a retrieval tool whose result is not a JSON list of documents" in got[1][1]
    assert "document ? not found in the corpus" in got[2][1]
    assert "tool call 'e2' (retrieve_docs): none of its 1 document(s) could be placed" in got[3][1]
    assert "tool message for call 'zz' answers no tool call" in got[4][1]
    assert "matches 2 golden queries (d1, d2)" in got[5][1]
    assert "matches no golden question" in got[6][1]
    assert "its id is golden query 'q1' but its question is that of 'q3'" in got[7][1]


def test_eval_archive_reads_as_the_json_log(world, tmp_path):
    corpus, golden = world["corpus_obj"], world["golden_obj"]
    log = inspect_log()
    _, from_json, p_json = traces_from_inspect(write_json(tmp_path / "log.json", log), corpus, golden)
    head, samples = read_inspect_log(write_eval(tmp_path / "log.eval", log))
    assert head["eval"]["task"] == "pets_qa" and "samples" not in head
    # Inspect's order (epoch, then id) and the last of the two members named samples/5_epoch_1.json
    assert [w for w, _ in samples] == ["samples/1_epoch_1.json", "samples/3_epoch_1.json", "samples/4_epoch_1.json",
                                       "samples/5_epoch_1.json", "samples/q1_epoch_1.json", "samples/q2_epoch_1.json",
                                       "samples/1_epoch_2.json"]
    assert samples[3][1]["input"] == "What is a cat?"
    _, from_eval, p_eval = traces_from_inspect(tmp_path / "log.eval", corpus, golden)
    key = {(t.query_id, t.trial): t.model_dump() for t in from_json}
    assert {(t.query_id, t.trial): t.model_dump() for t in from_eval} == key
    assert sorted(p.message.split(": ", 1)[1] for p in p_eval) == sorted(p.message.split(": ", 1)[1] for p in p_json)


def test_bad_logs_are_input_errors_naming_the_file(world, tmp_path):
    corpus, golden = world["corpus_obj"], world["golden_obj"]
    with pytest.raises(InputError, match="file not found"):
        traces_from_inspect(tmp_path / "none.json", corpus, golden)
    (tmp_path / "bad.json").write_text('{"eval": {},\n "samples": [1,]}')
    with pytest.raises(InputError, match=r"bad\.json:2: not valid JSON"):
        traces_from_inspect(tmp_path / "bad.json", corpus, golden)
    (tmp_path / "empty.json").write_text(json.dumps({"eval": {}, "samples": None}))
    with pytest.raises(InputError, match="no samples.*log_samples"):
        traces_from_inspect(tmp_path / "empty.json", corpus, golden)
    (tmp_path / "broken.eval").write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    with pytest.raises(InputError, match=r"broken\.eval: not a readable \.eval archive"):
        traces_from_inspect(tmp_path / "broken.eval", corpus, golden)
    damaged = bytearray(REAL_LOG.read_bytes())
    damaged[3000] ^= 0xFF  # inside a zstd-compressed member
    (tmp_path / "damaged.eval").write_bytes(bytes(damaged))
    with pytest.raises(InputError, match=r"damaged\.eval: member .*the archive is damaged"):
        traces_from_inspect(tmp_path / "damaged.eval", corpus, golden)
    log = inspect_log()
    log["samples"] = [log["samples"][5], {"id": 9}, "junk"]
    with pytest.raises(InputError, match=r"none of its 3 sample\(s\) became a trace \(1 unmatched, 0 ambiguous, "
                                         r"2 skipped\)"):
        traces_from_inspect(write_json(tmp_path / "nothing.json", log), corpus, golden)
    with pytest.raises(InputError, match="not a regular expression"):
        traces_from_inspect(tmp_path / "nothing.json", corpus, golden, retrieval_tools="(")


def test_malformed_sample_parts_are_counted_problems(world, tmp_path):
    log = inspect_log()
    s = log["samples"][0]
    s["messages"][2]["tool_calls"].append({"id": "c9", "arguments": {}})  # no function name
    s["messages"][2]["tool_calls"].append(_call("c8", "lookup", "not-an-object"))
    s["model_usage"]["openai/gpt-4o-mini"]["output_tokens"] = -4
    s["total_time"] = "long"
    s["output"] = {"completion": "", "choices": [{"message": {"role": "assistant", "content": [
        {"type": "reasoning", "reasoning": "hmm"}, {"type": "text", "text": "From the choice."}]},
        "stop_reason": "stop"}]}
    log["samples"] = [s, log["samples"][0] | {"epoch": 1}]  # the same (query, epoch) twice
    _, (t,), problems = traces_from_inspect(write_json(tmp_path / "m.json", log), world["corpus_obj"],
                                            world["golden_obj"])
    assert (t.tokens_in, t.tokens_out, t.cost, t.durations_ms) == (None, None, None, {})
    assert (t.answer, t.outcome) == ("From the choice.", "answered")
    assert [(st.name, st.arguments, st.result) for st in t.steps][1] == ("lookup", {}, None)
    msgs = [p.message for p in problems]
    assert len(msgs) == 6, msgs
    for part in ("tool_calls[1] has no function name", "tool call 'c8' (lookup): arguments are str",
                 "tool call 'c8' (lookup): no tool message answers it", "a token count is not a whole number",
                 "total_time 'long' is not a number of seconds", "query 'q1' epoch 1 repeats sample 1"):
        assert sum(part in m for m in msgs) == 1, part


def test_cli_import_inspect(world, tmp_path, capsys):
    log = write_eval(tmp_path / "run.eval", inspect_log())
    out = tmp_path / "t.jsonl"
    code, stdout, err = cli(["import", "inspect", log, "--golden", world["golden"], "--corpus", world["corpus"],
                             "-o", out, "--json"], capsys)
    assert code == 0, err
    info = json.loads(stdout)
    assert info["n_traces"] == 4 and len(info["problems"]) == 8
    assert info["matching"]["matched_by"] == {"query_id": 1, "question": 2, "sample_id": 1}
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert recs[0]["type"] == "header" and recs[0]["source"] == "inspect_ai"
    assert [len(r["steps"]) for r in recs[1:]] == [2, 1, 2, 3] and "claimed_success" not in recs[1]

    code, stdout, err = cli(["import", "inspect", log, "--golden", world["golden"], "--corpus", world["corpus"],
                             "-o", tmp_path / "u.jsonl", "--retrieval-tools", "^nothing$"], capsys)
    assert code == 0
    assert "matched 4 of 7 sample(s) to golden queries (1 by query_id, 2 by question, 1 by sample_id)" in stdout
    assert "problem: sample 3:" in err

    only_bad = inspect_log()
    only_bad["samples"] = only_bad["samples"][4:6]
    code, _, err = cli(["import", "inspect", write_json(tmp_path / "bad.json", only_bad), "--golden",
                        world["golden"], "--corpus", world["corpus"], "-o", tmp_path / "v.jsonl"], capsys)
    assert code == 2 and "none of its 2 sample(s) became a trace (1 unmatched, 1 ambiguous, 0 skipped)" in err
    assert not (tmp_path / "v.jsonl").exists()
    (tmp_path / "cut.json").write_text(json.dumps(inspect_log(), indent=2)[:300])
    code, _, err = cli(["import", "inspect", tmp_path / "cut.json", "--golden", world["golden"], "--corpus",
                        world["corpus"], "-o", tmp_path / "w.jsonl"], capsys)
    assert code == 2 and f"{tmp_path / 'cut.json'}:" in err and "not valid JSON" in err


REAL_LOG = Path(__file__).parent / "data" / "inspect_0.3.285_pets.eval"


def test_a_log_written_by_inspect_itself_imports(world):
    """A .eval log that inspect-ai 0.3.285 wrote (mockllm model, a search tool returning JSON documents, a
    calculator that raises ToolError, 2 samples x 2 epochs; members zstd-compressed as Inspect now writes
    them). The expected figures were read from the same file with inspect_ai.log.read_eval_log."""
    header, traces, problems = traces_from_inspect(REAL_LOG, world["corpus_obj"], world["golden_obj"])
    assert problems == [] and header.config["task"] == "pets" and header.config["model"] == "mockllm/model"
    assert [(t.query_id, t.trial, t.outcome, t.answer) for t in traces] == [
        ("q1", 0, "answered", "Cats purr when they are content."), ("q3", 0, "answered", "Through gills."),
        ("q1", 1, "answered", "Cats purr when they are content."), ("q3", 1, "answered", "Through gills.")]
    # Inspect's figures: total_time, working_time (s), model usage, and each tool event's completed - timestamp
    inspect_figures = [(0.562, 0.557, 477, 86, [46.304, 2.478]), (0.022, 0.022, 294, 39, [1.267]),
                       (0.27, 0.27, 477, 86, [2.139, 1.717]), (0.101, 0.101, 294, 39, [1.501])]
    for t, (total, working, tin, tout, ms) in zip(traces, inspect_figures, strict=True):
        assert t.durations_ms == {"total": pytest.approx(total * 1000)}
        assert t.meta["working_time_ms"] == pytest.approx(working * 1000)
        assert (t.tokens_in, t.tokens_out, t.cost) == (tin, tout, None)
        assert [s.duration_ms for s in t.steps] == pytest.approx(ms)
        assert t.meta["scores"]["includes"]["value"] == "C"
    cats = json.dumps([{"doc_id": "cats", "start": 0, "end": 32, "score": 2.0, "id": "u1"}])
    search, calc = traces[0].steps
    assert (search.kind, search.query, search.result, search.result_digest) == (
        "retrieval", "cat purring", cats, sha(cats))
    assert [(u.unit_id, u.doc_id, u.start, u.end, u.score, u.rank) for u in search.units] == [
        ("u1", "cats", 0, 32, 2.0, 1)]
    assert (calc.kind, calc.arguments, calc.error, calc.result_digest) == (
        "tool", {"expr": "1+1"}, "calculator is broken", sha(""))
    (fish,) = traces[1].steps
    assert [(u.doc_id, u.start, u.end, u.score) for u in fish.units] == [("fish", 22, 49, 1.5)]


def test_a_field_of_any_type_is_read_or_a_problem_never_a_traceback(world, tmp_path):
    base = inspect_log()
    paths = []

    def walk(obj, path):
        paths.append(path)
        items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
        for k, v in items:
            walk(v, [*path, k])

    walk(base["samples"][0], [0])
    walk(base["samples"][3], [3])
    imported = 0
    for path in paths[1:]:
        for value in (None, [1, "a"], {"a": {"b": 1}}, -1.5, "attachment://none"):
            log = copy.deepcopy(base)
            node = log["samples"]
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = value
            traces_from_inspect(write_json(tmp_path / "f.json", log), world["corpus_obj"], world["golden_obj"])
            imported += 1
    assert imported == 5 * (len(paths) - 1) > 400
