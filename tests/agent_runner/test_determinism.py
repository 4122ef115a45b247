"""The reference agent is deterministic: the same items give the same traces, step for step, in any folder;
only wall-clock durations and the working directory's path differ."""

import json

from ragassay.pipeline.agent import run_agent
from ragassay.trace.io import read_traces, write_traces


def _stable(trace) -> dict:
    d = trace.model_dump(mode="json")
    d.pop("durations_ms")
    d["meta"] = {k: v for k, v in d["meta"].items() if k != "workdir"}
    for s in d["steps"]:
        s.pop("duration_ms")
    return d


def test_same_items_give_the_same_traces_twice(example, agents, tmp_path):
    _, gs = example
    for name, agent in agents.items():
        h1, t1 = run_agent(agent, gs.queries, tmp_path / f"{name}-1", trials=2)
        h2, t2 = run_agent(agent, gs.queries, tmp_path / f"{name}-2", trials=2)
        assert h1.config_sha == h2.config_sha
        assert [_stable(t) for t in t1] == [_stable(t) for t in t2]
        # the two trials of one item are alike too: nothing carries over from trial 0 to trial 1
        by = {(t.query_id, t.trial): _stable(t) for t in t1}
        for q in gs.queries:
            a, b = by[(q.query_id, 0)], by[(q.query_id, 1)]
            assert {k: v for k, v in a.items() if k not in ("trace_id", "trial")} == \
                   {k: v for k, v in b.items() if k not in ("trace_id", "trial")}
        # answer.txt holds the trace's answer in each trial's own folder
        for t in t1:
            if t.answer is not None:
                assert (tmp_path / f"{name}-1" / "work" / t.query_id / str(t.trial) / "answer.txt").read_text() \
                    == t.answer + "\n"


def test_traces_round_trip_through_the_trace_file(example, agents, tmp_path):
    _, gs = example
    header, traces = run_agent(agents["careful"], gs.queries[:5], tmp_path / "run")
    write_traces(tmp_path / "t.jsonl", header, traces)
    h, back, problems = read_traces(tmp_path / "t.jsonl")
    assert problems == [] and h.source == "reference-agent" and h.config["name"] == "careful"
    assert [t.model_dump(mode="json") for t in back] == [t.model_dump(mode="json") for t in traces]
    first = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[1])
    assert first["claimed_success"] is True and first["steps"][0]["kind"] == "retrieval"
