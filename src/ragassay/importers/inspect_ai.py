"""Inspect AI evaluation logs -> ragassay traces with agent steps.

Reads the two forms Inspect writes (format as in inspect-ai 0.3.x, ``inspect_ai/log/_log.py`` and
``_recorders/eval.py``), without importing inspect-ai: a ``.json`` log (one ``EvalLog`` object, its
``samples`` a list) and a ``.eval`` log (a zip archive: ``header.json`` holds the log without samples, each
sample is a member ``samples/<id>_epoch_<n>.json``; of members written twice under one name the last counts,
as in Inspect's readers; members deflated, as older versions write them, or zstd-compressed, as newer ones
do). One sample (an ``EvalSample``) becomes one trace:

- ``id`` -> the query: matched by ``metadata.query_id`` when the sample carries one, else by ``id`` when it is
  a golden query id (and the question, when it names one golden query, names the same one), else by the
  question (the text of ``input``, or of its last user message), as the RAGAS importer matches
  (:class:`ragassay.trace.adapters.QuestionMatcher`);
- ``epoch`` (1, 2, ...) -> ``trial`` ``epoch - 1``;
- each assistant message's ``tool_calls`` (``id``, ``function``, ``arguments``), in message order, with the
  ``tool`` message whose ``tool_call_id`` answers it (``content``: the result the model saw; ``error``:
  ``{type, message}``) -> a tool step: ``result_digest`` is sha256 of the result text, ``result`` its first
  500 characters; the tool event with the call's id gives ``duration_ms`` (``completed - timestamp``);
- a call of a retrieval tool (function name matched by ``retrieval_tools``, default ``search|retriev``) whose
  result is JSON naming documents (a list of objects, or such a list under ``documents``/``results``/``hits``)
  and whose arguments give a query (``query``, ``q``, ``question`` or ``search_query``, else its only string
  argument) -> a retrieval step with its units, each placed as OTel documents are
  (:func:`ragassay.importers.otel.place_document`: ``doc_id``/``start``/``end`` at the top level or in
  ``metadata``, else ``content``/``text`` found in the corpus, else an ``id`` that is a corpus doc id);
  when none of its documents can be placed it stays a tool step;
- ``output.completion`` (when empty, the text of the first choice's message, as Inspect fills it) -> answer
  (empty: abstained); ``error.message`` -> outcome ``error``;
  ``model_usage`` summed over models -> tokens in (``input_tokens`` plus cache reads and writes) and out,
  and cost (``total_cost``, when every model has one); ``total_time`` -> ``durations_ms.total``;
- ``scores`` (``{name: {value, answer, explanation}}``), ``target``, ``working_time`` and ``limit`` -> ``meta``.

A score is the grader's verdict on the sample, not the agent's own claim, so it never sets
``claimed_success``. Every sample that cannot be used, and every malformed part of one (a tool call without
its result, a result without its call, a retrieval result whose documents cannot be placed, a malformed
number), is a problem numbered by the sample's position in the log, never a traceback; no trace at all is
an InputError.
"""

from __future__ import annotations

import json
import re
import zipfile
import zlib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragassay.errors import InputError
from ragassay.importers.otel import iso_ns, place_document, tool_result
from ragassay.trace.io import Problem
from ragassay.trace.schema import RunHeader, Step, Trace, config_sha, make_trace_id

RETRIEVAL_TOOLS = r"search|retriev"
QUERY_ARGUMENTS = ("query", "q", "question", "search_query")
_DOC_LISTS = ("documents", "results", "hits")
_ATTACHMENT = "attachment://"
_ZSTD = 93  # the zip compression method number of zstd (APPNOTE 4.4.5)


def _member_bytes(path: Path, zf: zipfile.ZipFile, name: str) -> bytes:
    """A member's bytes. Recent Inspect versions (0.3.285 among them) compress members with zstd (zip method
    93), which Python's zipfile reads only from 3.14: those are decompressed here with pyarrow's zstd codec (every zstd frame of
    the member, as Inspect writes large members in several) and checked against the member's CRC-32."""
    info = zf.getinfo(name)
    if info.compress_type != _ZSTD:
        try:
            return zf.read(name)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError) as e:
            raise InputError(f"{path}: member {name}: cannot be read ({e}); the archive is damaged") from None
    import pyarrow as pa

    fh = zf.fp
    fh.seek(info.header_offset)
    local = fh.read(30)
    if local[:4] != b"PK\x03\x04":
        raise InputError(f"{path}: member {name}: no local header; the archive is damaged")
    fh.seek(info.header_offset + 30 + int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little"))
    try:
        data = pa.decompress(fh.read(info.compress_size), decompressed_size=info.file_size, codec="zstd",
                             asbytes=True)
    except (OSError, ValueError, pa.ArrowException) as e:
        raise InputError(f"{path}: member {name}: zstd data does not decompress ({e}); the archive is damaged") \
            from None
    if zlib.crc32(data) != info.CRC:
        raise InputError(f"{path}: member {name}: CRC-32 mismatch; the archive is damaged")
    return data


def _json_member(path: Path, zf: zipfile.ZipFile, name: str) -> Any:
    try:
        text = _member_bytes(path, zf, name).decode("utf-8")
        return json.loads(text)
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: member {name}: not UTF-8 text (byte {e.start}); the archive is damaged") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: member {name}:{e.lineno}: not valid JSON ({e.msg}); the archive is damaged "
                         "or not an Inspect log") from None


def _sample_order(item: tuple[str, Any]) -> tuple:
    # Inspect's own order (log/_log.py sort_samples): by epoch, then id (integers zero-filled)
    s = item[1] if isinstance(item[1], dict) else {}
    epoch, sid = s.get("epoch"), s.get("id")
    return (epoch if isinstance(epoch, int) else 0, sid if isinstance(sid, str) else str(sid).zfill(20))


def read_inspect_log(path: str | Path) -> tuple[dict, list[tuple[str, Any]]]:
    """(the log without its samples, [(where, sample)]) of a ``.json`` or ``.eval`` Inspect log (told apart
    by the zip signature, not the name). InputError for a missing, unreadable or damaged file and a log
    without samples."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found; give an Inspect AI log (.json or .eval)")
    with path.open("rb") as fh:
        zipped = fh.read(4) == b"PK\x03\x04"
    if zipped:
        try:
            zf = zipfile.ZipFile(path)
        except zipfile.BadZipFile as e:
            raise InputError(f"{path}: not a readable .eval archive ({e}); give the log Inspect wrote") from None
        with zf:
            names = list(dict.fromkeys(zf.namelist()))
            head = next((n for n in ("header.json", "_journal/start.json") if n in names), None)
            header = _json_member(path, zf, head) if head else {}
            samples = [(n, _json_member(path, zf, n)) for n in names
                       if n.startswith("samples/") and n.endswith(".json")]
        if not samples:
            raise InputError(f"{path}: the archive holds no samples/*.json; the eval logged no samples (run it "
                             "with log_samples on)")
        samples.sort(key=_sample_order)
        return (header if isinstance(header, dict) else {}), samples
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte {e.start}); give a .json or .eval Inspect log") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: not valid JSON ({e.msg}); give a .json or .eval Inspect log") from None
    if not isinstance(data, dict) or "eval" not in data and "samples" not in data:
        raise InputError(f"{path}: not an Inspect AI log (expected an object with 'eval' and 'samples')")
    samples = data.get("samples")
    if not isinstance(samples, list) or not samples:
        kind = "no samples" if not samples else f"'samples' as a {type(samples).__name__}"
        raise InputError(f"{path}: the log has {kind}; the eval logged no samples (run it with log_samples on)")
    return {k: v for k, v in data.items() if k != "samples"}, [(f"samples[{i}]", s) for i, s in enumerate(samples)]


def _resolve(text: str, attachments: dict) -> str:
    found = attachments.get(text[len(_ATTACHMENT):]) if text.startswith(_ATTACHMENT) else None
    return found if isinstance(found, str) else text


def _text(content: Any, attachments: dict) -> str | None:
    """A message's text as Inspect's ``ChatMessage.text``: the string, or its text parts joined by newlines."""
    if isinstance(content, str):
        return _resolve(content, attachments)
    if isinstance(content, list):
        return "\n".join(_resolve(p["text"], attachments) for p in content
                         if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str))
    return None


def _question(sample: dict, attachments: dict) -> str | None:
    given = sample.get("input")
    if isinstance(given, str):
        return _resolve(given, attachments)
    if isinstance(given, list):
        users = [m for m in given if isinstance(m, dict) and m.get("role") == "user"]
        return _text(users[-1].get("content"), attachments) if users else None
    return None


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _usage(sample: dict, problems: list[str]) -> tuple[int | None, int | None, float | None]:
    usage = sample.get("model_usage")
    if not usage:
        return None, None, None
    if not isinstance(usage, dict) or not all(isinstance(u, dict) for u in usage.values()):
        problems.append("model_usage is not an object of {model: usage}; tokens and cost left out")
        return None, None, None
    tin = tout = 0
    costs: list[float] = []
    for model, u in usage.items():
        counts = [u.get(k) or 0 for k in ("input_tokens", "input_tokens_cache_read", "input_tokens_cache_write",
                                          "output_tokens")]
        if not all(_whole(c) for c in counts):
            problems.append(f"model_usage of {model}: a token count is not a whole number >= 0; tokens left out")
            return None, None, None
        tin, tout = tin + sum(counts[:3]), tout + counts[3]
        cost = u.get("total_cost")
        if cost is not None and (isinstance(cost, bool) or not isinstance(cost, int | float) or not cost >= 0
                                 or cost == float("inf")):
            problems.append(f"model_usage of {model}: total_cost {cost!r:.30} is not a cost; cost left out")
            cost = None
        if cost is not None:
            costs.append(float(cost))
    return tin, tout, (sum(costs) if len(costs) == len(usage) else None)


def _seconds(sample: dict, key: str, problems: list[str]) -> float | None:
    v = sample.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < float("inf"):
        problems.append(f"{key} {v!r:.30} is not a number of seconds; left out")
        return None
    return v * 1000.0


def _durations(events: Any) -> dict[str, float]:
    """tool call id -> ms from its tool event's ``timestamp`` to ``completed`` (events with both times)."""
    out = {}
    for ev in events if isinstance(events, list) else ():
        if not isinstance(ev, dict) or ev.get("event") != "tool" or not isinstance(ev.get("id"), str):
            continue
        try:
            ns = iso_ns(ev["completed"]) - iso_ns(ev["timestamp"])
        except (KeyError, TypeError, ValueError):
            continue
        if ns >= 0:
            out[ev["id"]] = ns / 1_000_000
    return out


def _documents(result: str | None) -> list[dict] | None:
    """A retrieval tool's result as documents ``{id, content, score, metadata}``, or None when it names none."""
    try:
        data = json.loads(result) if result is not None else None
    except json.JSONDecodeError:
        return None
    if isinstance(data, dict):
        data = next((data[k] for k in _DOC_LISTS if isinstance(data.get(k), list)), None)
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        return None
    out = []
    for d in data:
        meta = dict(d["metadata"]) if isinstance(d.get("metadata"), dict) else {}
        meta.update({k: d[k] for k in ("doc_id", "start", "end") if k in d})
        out.append({"id": d.get("unit_id", d.get("id")), "content": d.get("content", d.get("text")),
                    "score": d.get("score"), "metadata": meta})
    return out


def _query(args: dict) -> str | None:
    q = next((args[k] for k in QUERY_ARGUMENTS if isinstance(args.get(k), str)), None)
    strings = [v for v in args.values() if isinstance(v, str)]
    return q if q is not None else strings[0] if len(strings) == 1 else None


def _steps(sample: dict, attachments: dict, corpus: Any, retrieval: re.Pattern, problems: list[str]) -> list[Step]:
    messages = sample.get("messages")
    if messages is None:
        return []
    if not isinstance(messages, list):
        problems.append(f"messages is a {type(messages).__name__}, not a list; no steps read")
        return []
    calls: list[dict] = []
    answers: dict[str, dict] = {}
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            problems.append(f"messages[{i}] is not an object; not read")
        elif m.get("role") == "assistant" and m.get("tool_calls") is not None:
            tc = m["tool_calls"]
            if not isinstance(tc, list):
                problems.append(f"messages[{i}].tool_calls is not a list; not read")
                continue
            for j, c in enumerate(tc):
                if isinstance(c, dict) and isinstance(c.get("function"), str) and c["function"]:
                    calls.append(c)
                else:
                    problems.append(f"messages[{i}].tool_calls[{j}] has no function name; not read")
        elif m.get("role") == "tool":
            cid = m.get("tool_call_id")
            if not isinstance(cid, str) or cid in answers:
                why = "no tool_call_id" if not isinstance(cid, str) else f"a second result for call {cid!r}"
                problems.append(f"messages[{i}] (tool) has {why}; not read")
            else:
                answers[cid] = m
    times = _durations(sample.get("events"))
    steps = []
    for c in calls:
        cid, name = c.get("id"), c["function"]
        where = f"tool call {cid!r} ({name})"
        args = c.get("arguments")
        if not isinstance(args, dict):
            problems.append(f"{where}: arguments are {type(args).__name__}, not an object; left out")
            args = {}
        args = {k: _resolve(v, attachments) if isinstance(v, str) else v for k, v in args.items()}
        msg = answers.pop(cid, None) if isinstance(cid, str) else None
        result = error = None
        if msg is None:
            problems.append(f"{where}: no tool message answers it; its result is left out")
        else:
            result = _text(msg.get("content"), attachments)
            err = msg.get("error")
            if isinstance(err, dict):
                error = str(err.get("message") or err.get("type") or "tool error")
            elif err is not None:
                error = str(err)
        if error is None and c.get("parse_error"):
            error = f"arguments did not parse: {c['parse_error']}"
        fields = dict(kind="tool", name=name, arguments=args, **tool_result(result),
                      duration_ms=times.get(cid) if isinstance(cid, str) else None, error=error)
        if retrieval.search(name) and error is None and msg is not None:
            docs, query = _documents(result), _query(args)
            if docs is None or query is None:
                problems.append(f"{where}: a retrieval tool whose " + (
                    "result is not a JSON list of documents" if docs is None else "arguments give no query")
                    + "; kept as a tool step")
            else:
                units = [u for k, d in enumerate(docs, 1)
                         if (u := place_document(d, corpus, where, problems, rank=k)) is not None]
                if units or not docs:
                    fields.update(kind="retrieval", query=query, units=units)
                else:
                    problems.append(f"{where}: none of its {len(docs)} document(s) could be placed; kept as a "
                                    "tool step")
        try:
            steps.append(Step(**fields))
        except ValidationError as e:
            problems.append(f"{where}: not a valid step ({e.errors()[0]['msg']}); left out")
    problems += [f"tool message for call {cid!r} answers no tool call; not read" for cid in answers]
    return steps


def _scores(scores: Any, problems: list[str]) -> dict | None:
    if scores is None:
        return None
    if not isinstance(scores, dict):
        problems.append(f"scores is a {type(scores).__name__}, not an object; not kept")
        return None
    return {name: {k: s[k] for k in ("value", "answer", "explanation") if s.get(k) is not None}
            if isinstance(s, dict) else {"value": s} for name, s in scores.items()}


def traces_from_inspect(log: str | Path, corpus: Any, golden: Any, *, run_name: str = "inspect-import",
                        retrieval_tools: str = RETRIEVAL_TOOLS) -> tuple[RunHeader, list[Trace], list[Problem]]:
    """An Inspect AI log file -> one :class:`Trace` per sample (see the module docstring). Problems carry the
    sample's 1-based position in the log; the header's ``stats["matching"]`` is the account of matching."""
    from ragassay.trace.adapters import QuestionMatcher, question_key

    try:
        retrieval = re.compile(retrieval_tools, re.IGNORECASE)
    except re.error as e:
        raise InputError(f"retrieval tools pattern {retrieval_tools!r} is not a regular expression ({e})") from None
    head, samples = read_inspect_log(log)
    spec = head.get("eval") if isinstance(head.get("eval"), dict) else {}
    header = RunHeader(run_name=run_name, source="inspect_ai",
                       config={"importer": "inspect_ai", "task": spec.get("task"), "model": spec.get("model"),
                               "eval_id": spec.get("eval_id"), "retrieval_tools": retrieval_tools},
                       corpus_digest=getattr(corpus, "digest", None), dataset_version=golden.dataset_version)
    sha = config_sha(header.config)
    matcher = QuestionMatcher(golden, unit="sample", id_name="metadata.query_id")
    by_question: dict[str, list[str]] = {}
    for q in golden.queries:
        by_question.setdefault(question_key(q.question), []).append(q.query_id)
    problems: list[Problem] = []
    traces: list[Trace] = []
    seen: dict[tuple[str, int], int] = {}
    for pos, (where, sample) in enumerate(samples, start=1):
        if not isinstance(sample, dict):
            problems.append(Problem(pos, f"{where} is not an object; skipped"))
            continue
        sid, epoch = sample.get("id"), sample.get("epoch")
        label = f"{where} (id {sid!r}, epoch {epoch!r})"
        if not isinstance(sid, str | int) or isinstance(sid, bool) or not isinstance(epoch, int) or epoch < 1:
            problems.append(Problem(pos, f"{label}: needs an 'id' (string or integer) and an 'epoch' (1, 2, ...); "
                                         "skipped"))
            continue
        attachments = sample.get("attachments") if isinstance(sample.get("attachments"), dict) else {}
        question = _question(sample, attachments)
        meta_in = sample.get("metadata") if isinstance(sample.get("metadata"), dict) else {}
        given, by_id = meta_in.get("query_id"), False
        if (given is None or given == "") and str(sid) in golden:
            given, by_id = str(sid), True
            other = by_question.get(question_key(question), []) if isinstance(question, str) else []
            if len(other) == 1 and other[0] != given:
                matcher.ambiguous.append({"sample": pos, "question": question, "query_ids": [given, other[0]]})
                problems.append(Problem(pos, f"{label}: its id is golden query {given!r} but its question is that "
                                             f"of {other[0]!r}; skipped (give metadata.query_id)"))
                continue
        qid, how, why = matcher.match(pos, given, question)
        if qid is None:
            problems.append(Problem(pos, f"{label}: {why}"))
            continue
        trial = epoch - 1
        if (qid, trial) in seen:
            problems.append(Problem(pos, f"{label}: query {qid!r} epoch {epoch} repeats sample {seen[qid, trial]}; "
                                         "skipped"))
            continue
        found: list[str] = []
        steps = _steps(sample, attachments, corpus, retrieval, found)
        tokens_in, tokens_out, cost = _usage(sample, found)
        total = _seconds(sample, "total_time", found)
        working = _seconds(sample, "working_time", found)
        output = sample.get("output") if isinstance(sample.get("output"), dict) else {}
        answer = output.get("completion") if isinstance(output.get("completion"), str) else None
        choices = output.get("choices")
        if not answer and isinstance(choices, list) and choices and isinstance(choices[0], dict):
            # Inspect fills completion from the first choice when it reads a log; a log written otherwise
            # may leave it empty
            first = choices[0].get("message")
            answer = _text(first.get("content"), attachments) if isinstance(first, dict) else answer
        err = sample.get("error")
        error = (str(err.get("message") or "sample error") if isinstance(err, dict) else
                 str(err) if err is not None else None)
        outcome = "error" if error else "answered" if answer and answer.strip() else "abstained"
        meta: dict[str, Any] = {"inspect_sample_id": sid, "epoch": epoch}
        extra = {"scores": _scores(sample.get("scores"), found), "target": sample.get("target"),
                 "working_time_ms": working, "limit": sample.get("limit")}
        meta.update({k: v for k, v in extra.items() if v is not None})
        problems += [Problem(pos, f"{label}: {m}") for m in found]
        try:
            trace = Trace(trace_id=make_trace_id(sha, qid, trial), query_id=qid, trial=trial, question=question,
                          answer=answer or None, outcome=outcome, error=error, steps=steps,
                          durations_ms={"total": total} if total is not None else {}, tokens_in=tokens_in,
                          tokens_out=tokens_out, cost=cost, meta=meta)
        except ValidationError as e:
            problems.append(Problem(pos, f"{label}: not a valid trace ({e.errors()[0]['msg']}); skipped"))
            continue
        seen[qid, trial] = pos
        matcher.count("sample_id" if by_id else how)
        traces.append(trace)
    problems.sort(key=lambda p: p.line)
    if not traces:
        raise matcher.nothing_imported(str(log), len(samples), problems, what="sample")
    header.stats["matching"] = matcher.stats(len(samples))
    return header, traces, problems
