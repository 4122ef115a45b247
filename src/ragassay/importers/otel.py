"""OpenTelemetry spans following the OpenInference semantic conventions -> ragassay traces.

One OTel trace (spans sharing a trace id) becomes one ragassay trace. What is read, by
``openinference.span.kind``:

- the root span (no parent): ``input.value`` is the question, ``output.value`` the answer, its status
  ERROR makes the outcome ``error``, its duration is ``durations_ms["total"]``;
- RETRIEVER spans: ``retrieval.documents.<i>.document.{id,content,score,metadata}`` become a branch named
  after the span; the first retriever (by start time) is the fused list unless a reranker says otherwise;
- RERANKER spans: ``reranker.input_documents.<i>...`` become the fused list, ``reranker.output_documents``
  the reranked list;
- LLM spans: ``llm.output_messages.<i>.message.content`` is the answer when the root has no output;
  ``llm.token_count.prompt`` / ``.completion`` are tokens in and out; the duration is ``generate``.

The query is matched to the golden set by the attribute ``ragassay.query_id`` on any span, else by the
question's exact text. A document becomes a unit with canonical offsets: from its metadata when it carries
``doc_id``, ``start`` and ``end``; from its metadata ``doc_id`` alone as the whole document; otherwise by
finding its content in the corpus (:func:`ragassay.trace.adapters.locate`). A document that cannot be
placed (not found, or found at several places) is left out and reported as a problem, never guessed.

Input: span objects from the SDK (``ReadableSpan``, e.g. from ``InMemorySpanExporter``), their
``to_json()`` dicts, or a file of them as ``ConsoleSpanExporter`` writes (JSON objects one after another).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ragassay.errors import InputError
from ragassay.trace.io import Problem
from ragassay.trace.schema import RunHeader, Trace, Unit, config_sha, make_trace_id

KIND = "openinference.span.kind"
_DOC = re.compile(r"^(retrieval\.documents|reranker\.input_documents|reranker\.output_documents)\.(\d+)\."
                  r"document\.(id|content|score|metadata)$")
_MSG = re.compile(r"^llm\.output_messages\.(\d+)\.message\.content$")


def _hex(v: Any, width: int) -> str | None:
    if v is None:
        return None
    if isinstance(v, int):
        return f"{v:0{width}x}"
    return str(v).lower().removeprefix("0x")


def _iso_ns(s: str | None) -> int | None:
    import datetime as dt

    if not s:
        return None
    t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    return int(t.timestamp() * 1e9)


def _normalize(span: Any) -> dict:
    """One span as {trace_id, span_id, parent_id, name, start, end (ns), status, attributes}."""
    if isinstance(span, dict):
        ctx = span.get("context") or {}
        status = (span.get("status") or {}).get("status_code")
        return {"trace_id": _hex(ctx.get("trace_id"), 32), "span_id": _hex(ctx.get("span_id"), 16),
                "parent_id": _hex(span.get("parent_id"), 16), "name": span.get("name") or "span",
                "start": _iso_ns(span.get("start_time")), "end": _iso_ns(span.get("end_time")),
                "status": str(status or "UNSET"), "attributes": dict(span.get("attributes") or {})}
    parent = getattr(span, "parent", None)
    return {"trace_id": _hex(span.context.trace_id, 32), "span_id": _hex(span.context.span_id, 16),
            "parent_id": _hex(parent.span_id, 16) if parent is not None else None, "name": span.name,
            "start": span.start_time, "end": span.end_time, "status": span.status.status_code.name,
            "attributes": dict(span.attributes or {})}


def read_span_file(path: str | Path) -> list[dict]:
    """Span dicts from a file of JSON objects written one after another (``ConsoleSpanExporter``) or as
    JSON lines."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found; give a file of exported spans")
    text = path.read_text(encoding="utf-8")
    dec, pos, out = json.JSONDecoder(), 0, []
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        try:
            obj, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}:{e.lineno}: not valid JSON ({e.msg}); expected span objects as the "
                             f"OpenTelemetry ConsoleSpanExporter writes them") from None
        if not isinstance(obj, dict) or "context" not in obj:
            raise InputError(f"{path}: a record without 'context' is not an exported span")
        out.append(obj)
    if not out:
        raise InputError(f"{path}: file is empty; expected exported spans")
    return out


def _documents(attrs: dict, prefix: str) -> list[dict]:
    docs: dict[int, dict] = {}
    for key, value in attrs.items():
        m = _DOC.match(key)
        if m and m.group(1) == prefix:
            docs.setdefault(int(m.group(2)), {})[m.group(3)] = value
    return [docs[i] for i in sorted(docs)]


def _unit(doc: dict, corpus: Any, where: str, problems: list[str]) -> Unit | None:
    from ragassay.trace.adapters import locate

    meta = doc.get("metadata")
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError:
            meta = {}
    meta = meta if isinstance(meta, dict) else {}
    score = doc.get("score")
    score = float(score) if isinstance(score, (int, float)) else None
    uid = str(doc.get("id") or meta.get("unit_id") or "")
    doc_id = meta.get("doc_id")
    if isinstance(doc_id, str) and doc_id in corpus:
        start, end = meta.get("start"), meta.get("end")
        if not (isinstance(start, int) and isinstance(end, int)):
            start, end = 0, len(corpus.docs[doc_id].text)
        return Unit(unit_id=uid or f"{doc_id}:{start}-{end}", doc_id=doc_id, start=start, end=end, score=score)
    content = doc.get("content")
    found = locate(content, corpus) if isinstance(content, str) else []
    if len(found) != 1:
        problems.append(f"{where}: document {uid or '?'} {'not found in the corpus' if not found else f'found at {len(found)} places'}; "
                        f"add doc_id/start/end to its metadata")
        return None
    d, start, end, _ = found[0]
    return Unit(unit_id=uid or f"{d}:{start}-{end}", doc_id=d, start=start, end=end, score=score)


def _ms(span: dict) -> float | None:
    if span["start"] is None or span["end"] is None:
        return None
    return (span["end"] - span["start"]) / 1e6


def traces_from_spans(spans: Iterable[Any], corpus: Any, golden: Any, *, run_name: str = "otel-import"
                      ) -> tuple[RunHeader, list[Trace], list[Problem]]:
    """Group spans by trace id and build one :class:`Trace` per OTel trace (see the module docstring).

    Problems are numbered by OTel trace, in order of first appearance: a trace with no root span, a
    question not in the golden set, a document that could not be placed.
    """
    groups: dict[str, list[dict]] = {}
    for s in spans:
        n = _normalize(s)
        groups.setdefault(n["trace_id"], []).append(n)
    if not groups:
        raise InputError("no spans to import; export the pipeline's spans first")
    by_question = {q.question.strip(): q.query_id for q in golden.queries}
    header = RunHeader(run_name=run_name, source="otel", config={"importer": "openinference", "run": run_name},
                       corpus_digest=getattr(corpus, "digest", None), dataset_version=golden.dataset_version)
    sha = config_sha(header.config)
    traces: list[Trace] = []
    problems: list[Problem] = []
    trials: dict[str, int] = {}
    for n, (tid, group) in enumerate(groups.items(), start=1):
        group.sort(key=lambda s: (s["start"] or 0))
        where = f"otel trace {tid}"
        roots = [s for s in group if s["parent_id"] is None or s["parent_id"] not in {x["span_id"] for x in group}]
        if not roots:
            problems.append(Problem(n, f"{where}: no root span"))
            continue
        root = roots[0]
        qid = next((s["attributes"]["ragassay.query_id"] for s in group if "ragassay.query_id" in s["attributes"]),
                   None)
        question = root["attributes"].get("input.value")
        if qid is None and isinstance(question, str):
            qid = by_question.get(question.strip())
        if qid is None or qid not in golden:
            problems.append(Problem(n, f"{where}: question {question!r:.60} is not in the golden set; set the "
                                       f"span attribute ragassay.query_id"))
            continue
        found: list[str] = []
        branches: dict[str, list[Unit]] = {}
        fused: list[Unit] | None = None
        reranked: list[Unit] | None = None
        durations: dict[str, float] = {}
        answer = root["attributes"].get("output.value")
        tokens_in = tokens_out = None
        for s in group:
            kind, attrs = s["attributes"].get(KIND), s["attributes"]
            if kind == "RETRIEVER":
                units = [u for d in _documents(attrs, "retrieval.documents")
                         if (u := _unit(d, corpus, f"{where} span {s['name']}", found)) is not None]
                branches[s["name"] if s["name"] not in branches else f"{s['name']}#{len(branches)}"] = units
                durations["retrieve"] = durations.get("retrieve", 0.0) + (_ms(s) or 0.0)
            elif kind == "RERANKER":
                fused = [u for d in _documents(attrs, "reranker.input_documents")
                         if (u := _unit(d, corpus, f"{where} span {s['name']}", found)) is not None]
                reranked = [u for d in _documents(attrs, "reranker.output_documents")
                            if (u := _unit(d, corpus, f"{where} span {s['name']}", found)) is not None]
                durations["rerank"] = _ms(s) or 0.0
            elif kind == "LLM":
                msgs = sorted((int(m.group(1)), v) for k, v in attrs.items() if (m := _MSG.match(k)))
                if answer is None and msgs:
                    answer = msgs[-1][1]
                tokens_in = attrs.get("llm.token_count.prompt", tokens_in)
                tokens_out = attrs.get("llm.token_count.completion", tokens_out)
                durations["generate"] = _ms(s) or 0.0
        if fused is None:
            fused = next(iter(branches.values()), [])
        total = _ms(root)
        if total is not None:
            durations["total"] = total
        problems += [Problem(n, msg) for msg in found]
        trial = trials.get(qid, 0)
        trials[qid] = trial + 1
        if root["status"] == "ERROR":
            outcome, error = "error", root["attributes"].get("exception.message") or "root span status ERROR"
        else:
            outcome, error = ("answered" if isinstance(answer, str) and answer.strip() else "abstained"), None
        traces.append(Trace(trace_id=make_trace_id(sha, qid, trial), query_id=qid, trial=trial,
                            question=question if isinstance(question, str) else None, branches=branches,
                            fused=fused, reranked=reranked, packed=list(reranked if reranked is not None else fused),
                            answer=answer if isinstance(answer, str) else None, outcome=outcome, error=error,
                            durations_ms=durations, tokens_in=tokens_in, tokens_out=tokens_out,
                            meta={"otel_trace_id": tid}))
    return header, traces, problems
