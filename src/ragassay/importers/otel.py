"""OpenTelemetry spans -> ragassay traces, read by the OpenInference conventions or, for spans without an
``openinference.span.kind``, by the OpenTelemetry GenAI semantic conventions (``gen_ai.*``).

One OTel trace (spans sharing a trace id) becomes one ragassay trace. What is read:

- the root span (no parent in the input): ``input.value`` is the question, ``output.value`` the answer,
  status ERROR makes the outcome ``error`` with the status description as the trace's ``error``, its
  duration is ``durations_ms["total"]``;
- retrievers (kind ``RETRIEVER``, or ``gen_ai.operation.name`` ``retrieval``): their documents become a
  branch named after the span, the first retriever by start time is the fused list unless a reranker says
  otherwise. OpenInference: ``retrieval.documents.<i>.document.{id,content,score,metadata}``. GenAI:
  ``gen_ai.retrieval.documents``, a JSON list of ``{id, score, ...}`` objects (``content`` and ``metadata``
  read when present), and ``gen_ai.retrieval.query.text`` is the question when the root has none (of a
  retriever under an agent or tool span, only when no prompt below gives one);
- rerankers (kind ``RERANKER``): ``reranker.input_documents.<i>...`` the fused list,
  ``reranker.output_documents.<i>...`` the reranked list;
- generation (kind ``LLM``, or ``gen_ai.operation.name`` ``chat``, ``text_completion``, ``generate_content``):
  the last generation span's output is the answer when the root has none
  (``llm.output_messages.<i>.message.content``; GenAI ``gen_ai.output.messages``, the text parts of the last
  message, else the older ``gen_ai.completion`` or ``gen_ai.completion.<i>.content``); tokens in and out
  (``llm.token_count.prompt`` / ``.completion``; ``gen_ai.usage.input_tokens`` / ``output_tokens``, or the
  older ``prompt_tokens`` / ``completion_tokens``) and durations (``generate``) are summed over the
  generation spans. The last user message of a prompt (``gen_ai.input.messages``, the older
  ``gen_ai.prompt`` or ``gen_ai.prompt.<i>.content``) of the root or a generation span is the question
  when nothing above gave one.

Agent spans become the trace's ``steps``, ordered by span start time (integer ns):

- a tool span (kind ``TOOL``: ``tool.name``, ``input.value`` the arguments, ``output.value`` the result;
  ``gen_ai.operation.name`` ``execute_tool``: ``gen_ai.tool.name``, ``gen_ai.tool.call.arguments``,
  ``gen_ai.tool.call.result``, ``gen_ai.usage.input_tokens``/``output_tokens``) is a tool step: arguments
  parsed from JSON (other values kept as ``{"input": value}``), ``result_digest`` the sha256 of the result
  text and ``result`` its first :data:`RESULT_EXCERPT` characters, the span's duration, and the status
  description of an ERROR span as the step's ``error``;
- a retriever span under an agent span (kind ``AGENT``, or ``invoke_agent``) or a tool span is also a
  retrieval step (its query ``input.value`` or ``gen_ai.retrieval.query.text``, its documents placed as
  units with their 1-based position as rank); it stays a branch as above, so what the importer made of a
  single-shot pipeline under an agent root is unchanged. A tool span with retriever spans under it is read as those
  retrievals: each retrieval step carries the tool's name, arguments and result, and the tool adds no step
  of its own. ``ragassay.hop`` on the span (or its tool) is the step's hop.

An agent span's ``input.value`` is the question when the root has none (before a retriever's query text; its
``gen_ai.input.messages`` are read after the root's, before the generation spans'), its ``output.value``
(GenAI: ``gen_ai.output.messages``) the answer before a generation span's, and its ``gen_ai.usage.*`` the
tokens when no generation span counts any. ``claimed_success`` is never set: no convention names the
agent's own claim of success.

A non-root span with neither convention is not read, and the trace says so (a problem naming the spans,
``meta.unread_spans``). The query is matched to the golden set by the span attribute ``ragassay.query_id``,
else by the question (:class:`ragassay.trace.adapters.QuestionMatcher`, the rule the RAGAS and DeepEval
importers use). A document becomes a unit with canonical offsets: from its metadata when it carries
``doc_id``, ``start`` and ``end``; from its metadata ``doc_id`` alone as the whole document; else by finding
its content in the corpus (:func:`ragassay.trace.adapters.locate`); else, when its id is a corpus doc id,
as that whole document. A document that cannot be placed is left out and reported, never guessed.

Durations are differences of integer nanoseconds, converted to ms once. Malformed records, ids, times,
attributes and documents are problems numbered by file line (or position among the spans given), naming
the span; they never stop the import. Input: SDK span objects (``ReadableSpan``, e.g. from
``InMemorySpanExporter``), their ``to_json()`` dicts, or a file of them as ``ConsoleSpanExporter`` writes
(JSON objects one after another); a file may also hold OTLP/JSON export requests (``resourceSpans``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragassay.errors import InputError
from ragassay.trace.io import Problem
from ragassay.trace.schema import RunHeader, Step, Trace, Unit, config_sha, make_trace_id

KIND = "openinference.span.kind"
OPERATION = "gen_ai.operation.name"
# OpenInference span kinds; only RETRIEVER, RERANKER and LLM carry what a trace needs, the rest are known.
OPENINFERENCE_KINDS = {"LLM", "EMBEDDING", "CHAIN", "RETRIEVER", "RERANKER", "TOOL", "AGENT", "GUARDRAIL",
                       "EVALUATOR", "PROMPT", "UNKNOWN"}
# gen_ai.operation.name values of the GenAI conventions (GenAiOperationNameValues in
# opentelemetry-semantic-conventions); retrieval and the generation ones are read.
GENERATION_OPS = {"chat", "text_completion", "generate_content"}
GENAI_OPS = GENERATION_OPS | {"retrieval", "embeddings", "create_agent", "invoke_agent", "execute_tool",
                              "invoke_workflow"}
AGENT_OPS = {"invoke_agent": "agent", "execute_tool": "tool"}
# a tool result longer than this is kept in a step as its first RESULT_EXCERPT characters (the digest is of all)
RESULT_EXCERPT = 500
_DOC = re.compile(r"^(retrieval\.documents|reranker\.input_documents|reranker\.output_documents)\.(\d+)\."
                  r"document\.(id|content|score|metadata)$")
_MSG = re.compile(r"^llm\.output_messages\.(\d+)\.message\.content$")
_OLD_MSG = re.compile(r"^gen_ai\.(prompt|completion)\.(\d+)\.(role|content)$")
_ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)?$")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR", "STATUS_CODE_UNSET": "UNSET", "STATUS_CODE_OK": "OK",
           "STATUS_CODE_ERROR": "ERROR"}


def _hex(v: Any, width: int) -> str | None:
    if v is None or v == "":
        return None
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:0{width}x}"
    return str(v).lower().removeprefix("0x")


def iso_ns(s: str) -> int:
    """Nanoseconds since 1970 of an ISO 8601 time as the OTel SDK writes it (``2024-05-01T12:00:00.123456Z``),
    exact: the fraction (up to 9 digits) is read as digits, never through a float. ValueError if malformed."""
    m = _ISO.match(s)
    if m is None:
        raise ValueError(s)
    whole = dt.datetime.fromisoformat(m.group(1) + ("+00:00" if m.group(3) in (None, "Z") else m.group(3)))
    seconds = (whole - _EPOCH) // dt.timedelta(seconds=1)
    return seconds * 1_000_000_000 + int((m.group(2) or "").ljust(9, "0"))


def _time(span: dict, key: str, problems: list[str]) -> int | None:
    """A span dict's start or end in integer ns: ``<key>_unix_nano`` (an integer, or its decimal string as
    OTLP/JSON writes it) when present, else the ISO time ``<key>``; a malformed one is a problem and None."""
    raw = span.get(f"{key}_unix_nano")
    if raw is not None:
        if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
            return raw
        if isinstance(raw, str) and raw.isdigit():
            return int(raw)
        problems.append(f"{key}_unix_nano {raw!r:.40} is not a whole number of nanoseconds; duration left out")
        return None
    raw = span.get(key)
    if raw is None:
        return None
    try:
        if isinstance(raw, str):
            return iso_ns(raw)
    except ValueError:
        pass
    problems.append(f"{key} {raw!r:.40} is not an ISO 8601 time; duration left out")
    return None


def _exception_message(events: Any) -> str | None:
    for ev in events if isinstance(events, list | tuple) else ():
        attrs = ev.get("attributes") if isinstance(ev, dict) else getattr(ev, "attributes", None)
        name = ev.get("name") if isinstance(ev, dict) else getattr(ev, "name", None)
        if name == "exception" and attrs and isinstance(attrs.get("exception.message"), str):
            return attrs["exception.message"]
    return None


def _normalize(span: Any, pos: int) -> tuple[dict | None, list[Problem]]:
    """One span as {trace_id, span_id, parent_id, name, start, end (int ns), status, error, attributes, pos},
    or None when it has no trace or span id; malformed parts are problems at ``pos``."""
    found: list[str] = []
    if isinstance(span, dict):
        ctx = span.get("context")
        ctx = ctx if isinstance(ctx, dict) else {}
        tid, sid = _hex(ctx.get("trace_id"), 32), _hex(ctx.get("span_id"), 16)
        status = span.get("status")
        status = status if isinstance(status, dict) else {}
        code = status.get("status_code")
        attrs = span.get("attributes")
        if attrs is not None and not isinstance(attrs, dict):
            found.append(f"attributes are a {type(attrs).__name__}, not an object; not read")
        out = {"trace_id": tid, "span_id": sid, "parent_id": _hex(span.get("parent_id"), 16),
               "name": str(span.get("name") or "span"), "start": _time(span, "start_time", found),
               "end": _time(span, "end_time", found),
               "status": _STATUS.get(code, str(code)) if isinstance(code, int | str) else "UNSET",
               "error": status.get("description") or _exception_message(span.get("events")),
               "attributes": dict(attrs) if isinstance(attrs, dict) else {}}
    else:
        parent = getattr(span, "parent", None)
        out = {"trace_id": _hex(span.context.trace_id, 32), "span_id": _hex(span.context.span_id, 16),
               "parent_id": _hex(parent.span_id, 16) if parent is not None else None, "name": span.name,
               "start": span.start_time, "end": span.end_time, "status": span.status.status_code.name,
               "error": span.status.description or _exception_message(list(span.events)),
               "attributes": dict(span.attributes or {})}
    out["pos"] = pos
    if out["trace_id"] is None or out["span_id"] is None:
        return None, [Problem(pos, f"span {out['name']!r}: no context.trace_id / context.span_id; skipped")]
    if out["start"] is not None and out["end"] is not None and out["end"] < out["start"]:
        found.append(f"ends {(out['start'] - out['end']) / 1e6} ms before it starts; duration left out")
        out["start"] = out["end"] = None
    return out, [Problem(pos, f"span {out['span_id']} ({out['name']}): {msg}") for msg in found]


def _otlp_value(v: Any) -> Any:
    """An OTLP/JSON AnyValue as a Python value (``{"stringValue": "x"}`` -> ``"x"``; int64 as a string)."""
    if not isinstance(v, dict):
        return v
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        try:
            return int(v["intValue"])
        except (TypeError, ValueError):
            return v["intValue"]  # reported where it is read as a number
    if "doubleValue" in v:
        return v["doubleValue"]
    if "boolValue" in v:
        return v["boolValue"]
    if "arrayValue" in v:
        return [_otlp_value(x) for x in (v["arrayValue"] or {}).get("values") or []]
    if "kvlistValue" in v:
        return {kv.get("key"): _otlp_value(kv.get("value")) for kv in (v["kvlistValue"] or {}).get("values") or []
                if isinstance(kv, dict)}
    return None


def _otlp_attributes(items: Any) -> Any:
    if not isinstance(items, list):
        return items
    return {kv["key"]: _otlp_value(kv.get("value")) for kv in items if isinstance(kv, dict) and "key" in kv}


def _otlp_spans(request: dict) -> list[dict]:
    """The spans of one OTLP/JSON export request (camelCase or proto field names) in ``to_json()`` form,
    times kept as integer ns."""
    def get(d: Any, *keys: str) -> Any:
        return next((d[k] for k in keys if isinstance(d, dict) and k in d), None)

    out = []
    for rs in get(request, "resourceSpans", "resource_spans") or []:
        for ss in get(rs, "scopeSpans", "scope_spans", "instrumentationLibrarySpans") or []:
            for s in get(ss, "spans") or []:
                if not isinstance(s, dict):
                    out.append({"context": {}, "name": repr(s)[:40]})
                    continue
                status = get(s, "status") or {}
                out.append({
                    "name": s.get("name"),
                    "context": {"trace_id": get(s, "traceId", "trace_id"), "span_id": get(s, "spanId", "span_id")},
                    "parent_id": get(s, "parentSpanId", "parent_span_id"),
                    "start_time_unix_nano": get(s, "startTimeUnixNano", "start_time_unix_nano"),
                    "end_time_unix_nano": get(s, "endTimeUnixNano", "end_time_unix_nano"),
                    "status": {"status_code": get(status, "code"), "description": get(status, "message")},
                    "attributes": _otlp_attributes(get(s, "attributes")),
                    "events": [{"name": e.get("name"), "attributes": _otlp_attributes(e.get("attributes"))}
                               for e in get(s, "events") or [] if isinstance(e, dict)],
                })
    return out


def read_span_file(path: str | Path) -> list[tuple[int, dict]]:
    """(line, span dict) for every span of a file of JSON objects written one after another
    (``ConsoleSpanExporter``) or as JSON lines; an object may also be an OTLP/JSON export request
    (``{"resourceSpans": ...}``), whose spans all carry its line. A file that is not JSON, or holds no
    span, is an InputError; an object that is neither a span nor an export request is kept and reported
    as a problem by :func:`traces_from_spans`."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found; give a file of exported spans")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte {e.start}); export the spans as JSON") from None
    dec, pos, out = json.JSONDecoder(), 0, []
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        line = text.count("\n", 0, pos) + 1
        try:
            obj, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}:{e.lineno}: not valid JSON ({e.msg}); expected span objects as the "
                             f"OpenTelemetry ConsoleSpanExporter writes them, or OTLP/JSON") from None
        if isinstance(obj, dict) and ("resourceSpans" in obj or "resource_spans" in obj):
            out += [(line, s) for s in _otlp_spans(obj)]
        else:
            out.append((line, obj))
    if not out:
        raise InputError(f"{path}: holds no span; expected exported spans")
    return out


def _documents(attrs: dict, prefix: str) -> list[dict]:
    docs: dict[int, dict] = {}
    for key, value in attrs.items():
        m = _DOC.match(key)
        if m and m.group(1) == prefix:
            docs.setdefault(int(m.group(2)), {})[m.group(3)] = value
    return [docs[i] for i in sorted(docs)]


def _json_attr(attrs: dict, key: str, where: str, problems: list[str]) -> Any:
    """An attribute that the GenAI conventions define as structured: a JSON string on spans (the SDK keeps no
    nested values), or the value itself. Invalid JSON is a problem and None."""
    value = attrs.get(key)
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        problems.append(f"{where}: {key} is not valid JSON ({e.msg}); not read")
        return None


def _genai_documents(attrs: dict, where: str, problems: list[str]) -> list[dict]:
    docs = _json_attr(attrs, "gen_ai.retrieval.documents", where, problems)
    if docs is None:
        return []
    if not isinstance(docs, list) or not all(isinstance(d, dict) for d in docs):
        problems.append(f"{where}: gen_ai.retrieval.documents is not a list of objects; not read")
        return []
    return docs


def place_document(doc: dict, corpus: Any, where: str, problems: list[str], rank: int | None = None) -> Unit | None:
    """One retrieved document ``{id, content, score, metadata}`` as a :class:`Unit` in ``corpus``, or None
    (a problem appended, naming ``where``): placed from ``metadata`` ``doc_id`` with ``start``/``end`` (or
    ``doc_id`` alone: the whole document), else by finding ``content`` in the corpus once, else, with no
    content, as the whole document when ``id`` is a corpus doc id. ``rank`` is kept on the unit."""
    from ragassay.trace.adapters import locate

    uid = doc.get("id")
    uid = str(uid) if uid is not None and uid != "" else ""
    meta = doc.get("metadata")
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError:
            problems.append(f"{where}: document {uid or '?'} metadata is not valid JSON; placed without it")
            meta = {}
    if meta is not None and not isinstance(meta, dict):
        problems.append(f"{where}: document {uid or '?'} metadata is a {type(meta).__name__}, not an object; "
                        "placed without it")
    meta = meta if isinstance(meta, dict) else {}
    score = doc.get("score")
    if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)):
        problems.append(f"{where}: document {uid or '?'} score {score!r:.30} is not a number; left out")
    score = float(score) if isinstance(score, int | float) and not isinstance(score, bool) else None
    uid = uid or str(meta.get("unit_id") or "")
    doc_id = meta.get("doc_id")
    if isinstance(doc_id, str) and doc_id in corpus:
        start, end = meta.get("start"), meta.get("end")
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (start, end)):
            start, end = 0, len(corpus.docs[doc_id].text)
        return Unit(unit_id=uid or f"{doc_id}:{start}-{end}", doc_id=doc_id, start=start, end=end, score=score,
                    rank=rank)
    content = doc.get("content")
    if content is None and uid in corpus:
        return Unit(unit_id=uid, doc_id=uid, start=0, end=len(corpus.docs[uid].text), score=score, rank=rank)
    found = locate(content, corpus) if isinstance(content, str) else []
    if len(found) != 1:
        why = ("has no content, metadata doc_id, or id that is a corpus doc id" if content is None else
               f"content is a {type(content).__name__}" if not isinstance(content, str) else
               "not found in the corpus" if not found else f"found at {len(found)} places")
        problems.append(f"{where}: document {uid or '?'} {why}; add doc_id/start/end to its metadata")
        return None
    d, start, end, _ = found[0]
    return Unit(unit_id=uid or f"{d}:{start}-{end}", doc_id=d, start=start, end=end, score=score, rank=rank)


def _ms(span: dict) -> float | None:
    if span["start"] is None or span["end"] is None:
        return None
    return (span["end"] - span["start"]) / 1_000_000


def _texts(message: Any) -> str | None:
    """The text of one GenAI message: its ``parts`` of type text joined, or a plain ``content`` string."""
    if not isinstance(message, dict):
        return None
    parts = message.get("parts")
    if isinstance(parts, list):
        texts = [p["content"] for p in parts if isinstance(p, dict) and p.get("type") == "text"
                 and isinstance(p.get("content"), str)]
        return "".join(texts) if texts else None
    return message.get("content") if isinstance(message.get("content"), str) else None


def _indexed(attrs: dict, which: str) -> list[tuple[str | None, str]]:
    """(role, content) of the older ``gen_ai.prompt.<i>.*`` / ``gen_ai.completion.<i>.*`` attributes, in order."""
    got: dict[int, dict] = {}
    for k, v in attrs.items():
        m = _OLD_MSG.match(k)
        if m and m.group(1) == which:
            got.setdefault(int(m.group(2)), {})[m.group(3)] = v
    return [(g.get("role"), g["content"]) for _, g in sorted(got.items()) if isinstance(g.get("content"), str)]


def _genai_answer(attrs: dict, where: str, problems: list[str]) -> str | None:
    msgs = _json_attr(attrs, "gen_ai.output.messages", where, problems)
    if isinstance(msgs, list) and msgs:
        return _texts(msgs[-1])
    if msgs is not None and not isinstance(msgs, list):
        problems.append(f"{where}: gen_ai.output.messages is not a list of messages; not read")
    if isinstance(attrs.get("gen_ai.completion"), str):
        return attrs["gen_ai.completion"]
    old = _indexed(attrs, "completion")
    return old[-1][1] if old else None


def _genai_question(attrs: dict, where: str, problems: list[str]) -> str | None:
    msgs = _json_attr(attrs, "gen_ai.input.messages", where, problems)
    if isinstance(msgs, list):
        users = [t for m in msgs if isinstance(m, dict) and m.get("role") == "user" and (t := _texts(m))]
        if users:
            return users[-1]
    if isinstance(attrs.get("gen_ai.prompt"), str):
        return attrs["gen_ai.prompt"]
    users = [c for role, c in _indexed(attrs, "prompt") if role == "user"]
    return users[-1] if users else None


def _count(attrs: dict, keys: tuple[str, ...], where: str, problems: list[str]) -> int | None:
    for k in keys:
        v = attrs.get(k)
        if v is None:
            continue
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
        problems.append(f"{where}: {k} {v!r:.30} is not a token count; left out")
    return None


def _add(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


def _span_role(s: dict, problems: list[str]) -> str | None:
    """What a span is for this importer: retriever, reranker, generation, agent, tool, other (known, nothing
    read), or None (neither convention). An unknown kind or operation value is a problem."""
    attrs = s["attributes"]
    kind, op = attrs.get(KIND), attrs.get(OPERATION)
    where = f"span {s['span_id']} ({s['name']})"
    if kind is not None:
        if kind == "RETRIEVER":
            return "retriever"
        if kind == "RERANKER":
            return "reranker"
        if kind == "LLM":
            return "generation"
        if kind in ("AGENT", "TOOL"):
            return kind.lower()
        if not isinstance(kind, str) or kind not in OPENINFERENCE_KINDS:
            problems.append(f"{where}: {KIND} {kind!r:.30} is not an OpenInference span kind; not read")
        return "other"
    if op is not None:
        if not isinstance(op, str):
            problems.append(f"{where}: {OPERATION} {op!r:.30} is not a GenAI operation; not read")
            return "other"
        if op == "retrieval":
            return "retriever"
        if op in GENERATION_OPS:
            return "generation"
        if op in AGENT_OPS:
            return AGENT_OPS[op]
        if op not in GENAI_OPS:
            problems.append(f"{where}: {OPERATION} {op!r:.30} is not a GenAI operation; not read")
        return "other"
    return None


def tool_result(result: str | None) -> dict[str, str | None]:
    """A tool's result text as a step's ``result_digest`` (sha256 hex of its UTF-8 bytes, the whole text) and
    ``result`` (its first :data:`RESULT_EXCERPT` characters); both None when there is no result."""
    if result is None:
        return {"result_digest": None, "result": None}
    return {"result_digest": hashlib.sha256(result.encode("utf-8", "surrogatepass")).hexdigest(),
            "result": result[:RESULT_EXCERPT]}


def _arguments(raw: Any, where: str, plain_ok: bool, problems: list[str]) -> dict:
    """A tool call's arguments as an object: a JSON object string parsed; any other JSON value, or text that
    is not JSON, kept as ``{"input": value}`` (text that is not JSON is a problem unless ``plain_ok``)."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return dict(raw)
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as e:
            if not plain_ok:
                problems.append(f"{where} is not valid JSON ({e.msg}); kept as {{'input': <text>}}")
            return {"input": raw}
        return value if isinstance(value, dict) else {"input": value}
    return {"input": list(raw) if isinstance(raw, tuple) else raw}


def _tool_call(s: dict, problems: list[str]) -> tuple[str, dict, str | None]:
    """(tool name, arguments, result text) of a tool span: OpenInference ``tool.name``, ``input.value``,
    ``output.value``; GenAI ``gen_ai.tool.name``, ``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``.
    The span name stands in for a missing name; a result that is not a string is kept as its JSON."""
    attrs, where = s["attributes"], f"span {s['span_id']} ({s['name']})"
    oi = attrs.get(KIND) == "TOOL"
    name_key, args_key, result_key = (("tool.name", "input.value", "output.value") if oi else
                                      ("gen_ai.tool.name", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"))
    name = attrs.get(name_key)
    if not isinstance(name, str) or not name.strip():
        if name is not None:
            problems.append(f"{where}: {name_key} {name!r:.30} is not a tool name; the span name is used")
        name = s["name"]
    args = _arguments(attrs.get(args_key), f"{where}: {args_key}", oi, problems)
    result = attrs.get(result_key)
    if result is not None and not isinstance(result, str):
        result = json.dumps(list(result) if isinstance(result, tuple) else result, ensure_ascii=False,
                            sort_keys=True)
    return name, args, result


def _span_error(s: dict | None) -> str | None:
    if s is None or s["status"] != "ERROR":
        return None
    return str(s["error"] or s["attributes"].get("error.type") or "span status ERROR")


def _hop(spans: list[dict | None], problems: list[str]) -> int | None:
    """The ``ragassay.hop`` attribute of the first of ``spans`` that has one (a whole number >= 1)."""
    for s in spans:
        if s is None or "ragassay.hop" not in s["attributes"]:
            continue
        hop = s["attributes"]["ragassay.hop"]
        if isinstance(hop, int) and not isinstance(hop, bool) and hop >= 1:
            return hop
        problems.append(f"span {s['span_id']} ({s['name']}): ragassay.hop {hop!r:.30} is not a whole number "
                        ">= 1; left out")
    return None


def _step_spans(group: list[dict], roles: dict[str, str | None]) -> tuple[set[str], dict[str, str]]:
    """Which retriever spans are agent steps (those under an agent or a tool span), and for each one under a
    tool span, that (nearest) tool span's id."""
    parent = {s["span_id"]: s["parent_id"] for s in group}
    in_step: set[str] = set()
    tool_of: dict[str, str] = {}
    for sid, role in roles.items():
        if role != "retriever":
            continue
        chain, seen, p = [], {sid}, parent[sid]
        while p in parent and p not in seen:
            chain.append(p)
            seen.add(p)
            p = parent[p]
        tool = next((a for a in chain if roles[a] == "tool"), None)
        if tool is not None or any(roles[a] == "agent" for a in chain):
            in_step.add(sid)
        if tool is not None:
            tool_of[sid] = tool
    return in_step, tool_of


def _agent_steps(group: list[dict], roles: dict[str, str | None], in_step: set[str], tool_of: dict[str, str],
                 corpus: Any, problems: list[str]) -> list[Step]:
    """The trace's steps in span start order: a tool span is a tool step, unless retriever spans lie under it
    (then its retrievals are its steps); a retriever span under an agent or tool span is a retrieval step,
    named after the tool it serves (when under one) and carrying that tool's arguments and result."""
    by_id = {s["span_id"]: s for s in group}
    calls: dict[str, tuple[str, dict, str | None]] = {}

    def call(s: dict) -> tuple[str, dict, str | None]:
        if s["span_id"] not in calls:
            calls[s["span_id"]] = _tool_call(s, problems)
        return calls[s["span_id"]]

    absorbed = set(tool_of.values())
    steps: list[Step] = []
    for s in group:
        sid, attrs = s["span_id"], s["attributes"]
        here = f"span {sid} ({s['name']})"
        if roles[sid] == "tool" and sid not in absorbed:
            name, args, result = call(s)
            fields = dict(kind="tool", name=name, arguments=args, **tool_result(result),
                          hop=_hop([s], problems), duration_ms=_ms(s), error=_span_error(s),
                          tokens_in=_count(attrs, ("gen_ai.usage.input_tokens",), here, problems),
                          tokens_out=_count(attrs, ("gen_ai.usage.output_tokens",), here, problems))
        elif sid in in_step:
            tool = by_id.get(tool_of.get(sid, ""))
            name, args, result = call(tool) if tool is not None else (s["name"], {}, None)
            docs = (_documents(attrs, "retrieval.documents") if attrs.get(KIND) == "RETRIEVER"
                    else _genai_documents(attrs, here, problems))
            units = [u for i, d in enumerate(docs, 1)
                     if (u := place_document(d, corpus, here, problems, rank=i)) is not None]
            query = next((q for q in (attrs.get("input.value"), attrs.get("gen_ai.retrieval.query.text"),
                                      args.get("query")) if isinstance(q, str)), None)
            if query is None:
                problems.append(f"{here}: a retrieval step without a query (input.value, "
                                "gen_ai.retrieval.query.text or the tool's 'query' argument); left empty")
                query = ""
            fields = dict(kind="retrieval", name=name, arguments=args, **tool_result(result), query=query,
                          units=units, hop=_hop([s, tool], problems), duration_ms=_ms(s),
                          error=_span_error(s) or _span_error(tool))
        else:
            continue
        try:
            steps.append(Step(**fields))
        except ValidationError as e:
            problems.append(f"{here}: not a valid step ({e.errors()[0]['msg']}); left out")
    return steps


def traces_from_spans(spans: Iterable[Any], corpus: Any, golden: Any, *, run_name: str = "otel-import",
                      source: str = "spans") -> tuple[RunHeader, list[Trace], list[Problem]]:
    """Group spans by trace id and build one :class:`Trace` per OTel trace (see the module docstring).

    ``spans`` are SDK span objects or ``to_json()`` dicts, or ``(line, dict)`` pairs from
    :func:`read_span_file`. Problems carry the span's file line (or its 1-based position among the spans
    given): a malformed span, time, attribute or document; a trace with no root span, or several spans
    without a parent; spans read by neither convention; a question not in the golden set (unmatched or
    ambiguous, listed in the header's ``stats["matching"]``). No trace at all is an InputError naming
    ``source`` (the file, for messages).
    """
    from ragassay.trace.adapters import QuestionMatcher

    problems: list[Problem] = []
    groups: dict[str, list[dict]] = {}
    total_spans = 0
    for i, item in enumerate(spans, start=1):
        total_spans += 1
        pos, span = item if isinstance(item, tuple) else (i, item)
        if not isinstance(span, dict) and not hasattr(span, "context"):
            problems.append(Problem(pos, f"a {type(span).__name__} is not a span; skipped"))
            continue
        n, found = _normalize(span, pos)
        problems += found
        if n is not None:
            groups.setdefault(n["trace_id"], []).append(n)
    if not total_spans:
        raise InputError(f"{source}: no spans to import; export the pipeline's spans first")
    if not groups:
        raise InputError(f"{source}: none of its {total_spans} record(s) is a span with a trace id and a span id; "
                         f"first: line {problems[0].line}: {problems[0].message}")
    header = RunHeader(run_name=run_name, source="otel",
                       config={"importer": "openinference+gen_ai", "run": run_name},
                       corpus_digest=getattr(corpus, "digest", None), dataset_version=golden.dataset_version)
    sha = config_sha(header.config)
    matcher = QuestionMatcher(golden, unit="line", id_name="the span attribute ragassay.query_id")
    traces: list[Trace] = []
    trials: dict[str, int] = {}
    for tid, group in groups.items():
        group.sort(key=lambda s: (s["start"] is None, s["start"] or 0))
        ids = {x["span_id"] for x in group}
        roots = [s for s in group if s["parent_id"] is None or s["parent_id"] not in ids]
        root = roots[0]
        where, at = f"otel trace {tid}", root["pos"]
        if len(roots) > 1:
            problems.append(Problem(at, f"{where}: {len(roots)} spans have no parent in the input "
                                        f"({', '.join(r['name'] for r in roots[:5])}); {root['name']!r}, the "
                                        "earliest, is read as the root"))
        found: list[str] = []
        roles = {s["span_id"]: _span_role(s, found) for s in group}
        attrs0 = root["attributes"]
        given = next((s["attributes"]["ragassay.query_id"] for s in group if "ragassay.query_id" in s["attributes"]),
                     None)
        in_step, tool_of = _step_spans(group, roles)
        question = attrs0.get("input.value") if isinstance(attrs0.get("input.value"), str) else None
        retrievers = [s for s in group if roles[s["span_id"]] == "retriever"]
        generators = [s for s in group if roles[s["span_id"]] == "generation"]
        agents = [s for s in group if roles[s["span_id"]] == "agent" and s is not root]
        if question is None:
            question = next((s["attributes"]["input.value"] for s in agents
                             if isinstance(s["attributes"].get("input.value"), str)), None)
        # an agent's retrieval queries are its own rewrites: the request's messages come first
        for outside in (True, False):
            if question is None:
                question = next((s["attributes"]["gen_ai.retrieval.query.text"] for s in retrievers
                                 if (s["span_id"] not in in_step) == outside
                                 and isinstance(s["attributes"].get("gen_ai.retrieval.query.text"), str)), None)
            if question is None and outside:
                question = next((q for s in [root, *agents, *generators] if (q := _genai_question(
                    s["attributes"], f"span {s['span_id']} ({s['name']})", found)) is not None), None)
        qid, how, why = matcher.match(at, given, question)
        if qid is None:
            problems += [Problem(at, f"{where}: {m}") for m in found]
            problems.append(Problem(at, f"{where}: {why}"))
            continue
        branches: dict[str, list[Unit]] = {}
        fused: list[Unit] | None = None
        reranked: list[Unit] | None = None
        durations: dict[str, float] = {}
        answer = attrs0.get("output.value") if isinstance(attrs0.get("output.value"), str) else None
        generated = tokens_in = tokens_out = None
        unread = []
        for s in group:
            role, attrs = roles[s["span_id"]], s["attributes"]
            here = f"span {s['span_id']} ({s['name']})"
            if role == "retriever":
                docs = (_documents(attrs, "retrieval.documents") if attrs.get(KIND) == "RETRIEVER"
                        else _genai_documents(attrs, here, found))
                units = [u for d in docs if (u := place_document(d, corpus, here, found)) is not None]
                branches[s["name"] if s["name"] not in branches else f"{s['name']}#{len(branches)}"] = units
                durations["retrieve"] = durations.get("retrieve", 0.0) + (_ms(s) or 0.0)
            elif role == "reranker":
                fused = [u for d in _documents(attrs, "reranker.input_documents")
                         if (u := place_document(d, corpus, here, found)) is not None]
                reranked = [u for d in _documents(attrs, "reranker.output_documents")
                            if (u := place_document(d, corpus, here, found)) is not None]
                durations["rerank"] = _ms(s) or 0.0
            elif role == "generation":
                if attrs.get(KIND) == "LLM":
                    msgs = sorted((int(m.group(1)), v) for k, v in attrs.items() if (m := _MSG.match(k)))
                    said = msgs[-1][1] if msgs and isinstance(msgs[-1][1], str) else None
                    ins, outs = ("llm.token_count.prompt",), ("llm.token_count.completion",)
                else:
                    said = _genai_answer(attrs, here, found)
                    ins = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
                    outs = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
                generated = said if said is not None else generated
                tokens_in = _add(tokens_in, _count(attrs, ins, here, found))
                tokens_out = _add(tokens_out, _count(attrs, outs, here, found))
                durations["generate"] = durations.get("generate", 0.0) + (_ms(s) or 0.0)
            elif role is None and s is not root:
                unread.append(s["name"])
        if unread:
            found.append(f"{len(unread)} span(s) carry neither {KIND} nor {OPERATION} and were not read: "
                         f"{', '.join(unread[:5])}{' ...' if len(unread) > 5 else ''}")
        steps = _agent_steps(group, roles, in_step, tool_of, corpus, found)
        if answer is None and roles[root["span_id"]] == "agent":
            answer = _genai_answer(attrs0, f"span {root['span_id']} ({root['name']})", found)
        for s in agents if answer is None else ():
            a, here = s["attributes"], f"span {s['span_id']} ({s['name']})"
            answer = a["output.value"] if isinstance(a.get("output.value"), str) else _genai_answer(a, here, found)
            if answer is not None:
                break
        answer = answer if answer is not None else generated
        if tokens_in is None and tokens_out is None:
            # an agent span's usage totals its model calls: read only when no generation span gave counts
            for s in [root, *agents] if roles[root["span_id"]] == "agent" else agents:
                here = f"span {s['span_id']} ({s['name']})"
                tokens_in = _count(s["attributes"], ("gen_ai.usage.input_tokens",), here, found)
                tokens_out = _count(s["attributes"], ("gen_ai.usage.output_tokens",), here, found)
                if tokens_in is not None or tokens_out is not None:
                    break
        if fused is None:
            fused = next(iter(branches.values()), [])
        total = _ms(root)
        if total is not None:
            durations["total"] = total
        # a branch and a step read the same retriever span: each finding once
        problems += [Problem(at, f"{where}: {m}") for m in dict.fromkeys(found)]
        if root["status"] == "ERROR":
            outcome, error = "error", root["error"] or attrs0.get("exception.message") or "root span status ERROR"
        else:
            outcome, error = ("answered" if answer is not None and answer.strip() else "abstained"), None
        trial = trials.get(qid, 0)
        try:
            trace = Trace(trace_id=make_trace_id(sha, qid, trial), query_id=qid, trial=trial, question=question,
                          branches=branches, fused=fused, reranked=reranked,
                          packed=list(reranked if reranked is not None else fused), answer=answer, outcome=outcome,
                          error=str(error) if error is not None else None, durations_ms=durations,
                          tokens_in=tokens_in, tokens_out=tokens_out, steps=steps,
                          meta={"otel_trace_id": tid, "unread_spans": len(unread)})
        except ValidationError as e:
            problems.append(Problem(at, f"{where}: not a valid trace ({e.errors()[0]['msg']}); skipped"))
            continue
        trials[qid] = trial + 1
        matcher.count(how)
        traces.append(trace)
    problems.sort(key=lambda p: p.line)
    if not traces:
        raise matcher.nothing_imported(source, len(groups), problems, what="OTel trace")
    header.stats["matching"] = matcher.stats(len(groups))
    return header, traces, problems
