"""A small agent world for the tests: a corpus of two documents, a 20-item agent golden set (one of them a
two-hop item with weighted subgoals and expected tools), and trace writers."""

from __future__ import annotations

import json
from pathlib import Path

from ragassay.corpus import load_corpus
from ragassay.golden import build_golden
from ragassay.trace import RunHeader, Trace, write_traces
from ragassay.trace.schema import Step, Unit

DOCS = {
    "a": "The notice period is thirty days. Fees are payable monthly in advance. Late payment accrues interest.\n",
    "b": "The warranty lasts two years. Returns are accepted within fourteen days of delivery.\n",
}
NOTICE = (0, 33)  # "The notice period is thirty days." in doc a
WARRANTY = (0, 29)  # "The warranty lasts two years." in doc b
N_ITEMS = 20


def golden_yaml() -> str:
    lines = ["dataset: agent-set", "queries:"]
    for i in range(1, N_ITEMS):
        lines += [f"  - query_id: t{i:02d}", f"    question: 'Resolve ticket {i}'", "    stratum: tickets",
                  "    reference_answer: done",
                  "    evidence:", "      - {doc_id: a, quote: 'The notice period is thirty days.', grade: 3}"]
    lines += ["  - query_id: t20", "    question: 'Two-hop: notice period, then warranty'", "    stratum: multi_hop",
              "    reference_answer: done",
              "    evidence:",
              "      - {doc_id: a, quote: 'The notice period is thirty days.', grade: 3, hop: 1}",
              "      - {doc_id: b, quote: 'The warranty lasts two years.', grade: 3, hop: 2}",
              "    subgoals:", "      - {id: found, weight: 3}", "      - {id: filed, weight: 1}",
              "    expected_tools:", "      - {name: search}", "      - {name: file_ticket, arguments: {id: 20}}"]
    return "\n".join(lines) + "\n"


def build_world(root: Path):
    (root / "docs").mkdir()
    for doc_id, text in DOCS.items():
        (root / "docs" / f"{doc_id}.txt").write_text(text)
    (root / "golden.yaml").write_text(golden_yaml())
    corpus = load_corpus(root / "docs")
    gs = build_golden(root / "golden.yaml", corpus, root / "golden")
    return corpus, gs


def agent_trace(qid: str, *, ok: bool, cost: float, claimed: bool | None = True, wall: float = 1000.0,
                steps: list[Step] | None = None, trial: int = 0) -> Trace:
    return Trace(trace_id=f"{qid}-{trial}", query_id=qid, trial=trial, outcome="answered", answer="done",
                 cost=cost, durations_ms={"total": wall}, claimed_success=claimed,
                 steps=steps if steps is not None else [Step(kind="tool", name="lookup", arguments={"q": qid})],
                 meta={"resolved": ok})


def hop_steps(hop1_hits: bool, hop2_hits: bool) -> list[Step]:
    def unit(doc, span, uid):
        return Unit(unit_id=uid, doc_id=doc, start=span[0], end=span[1])
    miss = (40, 60)
    return [Step(kind="retrieval", name="search", query="notice period",
                 units=[unit("a", NOTICE if hop1_hits else miss, "u1")]),
            Step(kind="retrieval", name="search", query="warranty",
                 units=[unit("b", WARRANTY if hop2_hits else miss, "u2")]),
            Step(kind="tool", name="file_ticket", arguments={"id": 20})]


def write_run(path: Path, name: str, traces: list[Trace]) -> Path:
    write_traces(path, RunHeader(run_name=name, source="agent"), traces)
    return path


def cheap_and_costly(root: Path) -> tuple[Path, Path]:
    """The spec's §12 example as two runs of 20 items: $0.10 a run at 60% success, $0.30 at 95%."""
    cheap = [agent_trace(f"t{i:02d}", ok=i <= 12, cost=0.10, wall=100.0 * i) for i in range(1, 21)]
    costly = [agent_trace(f"t{i:02d}", ok=i <= 19, cost=0.30, wall=50.0 * i) for i in range(1, 21)]
    return write_run(root / "cheap.jsonl", "cheap", cheap), write_run(root / "costly.jsonl", "costly", costly)


def dump(obj) -> str:
    return json.dumps(obj)
