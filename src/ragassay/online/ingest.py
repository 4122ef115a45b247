"""Production requests in: JSONL records or OpenTelemetry spans -> the store's date-partitioned records.

An ingest runs in three passes, each with bounded memory:

1. Read. Each source file is read in batches of ``batch_size`` records (JSONL lines, or requests rebuilt
   from spans); a batch is validated, turned into Arrow columns and appended to a staging Parquet file in
   ``<S>.online/.staging-*``. Python holds one batch (plus, for spans, the spans of requests not yet complete,
   at most ``max_pending_spans``). Every bad line is a :class:`~ragassay.trace.io.Problem` with its line.
2. Dedupe and derive, in DuckDB over a database file in the staging folder (memory limit
   :data:`MEMORY_LIMIT`, spilling to disk): the first record of each ``request_id`` in file-then-line order
   is kept, a later one is counted as a duplicate, an id already stored is counted as already stored. The
   ``rephrased`` flag needs each session in time order: a window over the new requests and the stored
   requests of the same sessions gives each request its next one; the question pairs come back to Python in
   batches for the similarity score.
3. Write. Rows sorted by UTC day go to one new ``part-<n>.parquet`` per day (:mod:`ragassay.online.store`),
   renamed into place at the end; then one line per source file is appended to ``<S>.online/ingests.jsonl``.

A source file whose sha256 is already in ``ingests.jsonl`` is skipped as a whole (counted and named); a file
that overlaps an earlier one is read and its stored ids are skipped row by row.

Rephrase rule: request A is ``rephrased`` when the next request B of the same session (order: ``ts``, then
``request_id``) starts at most ``rephrase_window`` seconds after A, and B's question is similar to A's but
not the same: rapidfuzz ``token_set_ratio`` of the two questions (lower-cased, punctuation removed by
``rapidfuzz.utils.default_process``) is at least ``similarity`` (default 60), and the processed questions
differ (an identical resubmission is a retry, not a rephrase). A request with no session is null (unknown);
the last request of a session is false. A follow-up that arrives in a later ingest cannot change a record
already written: such records are counted as ``stale_rephrase`` in the summary.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
import shutil
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ragassay.errors import InputError
from ragassay.fsio import make_temp_dir
from ragassay.online.store import (
    OUTCOMES,
    SOURCE_SCHEMA,
    PartitionWriter,
    manifest_path,
    online_dir,
    open_records,
    write_lock,
)
from ragassay.trace.io import Problem

FORMATS = ("jsonl", "otel")
DEFAULT_BATCH = 16384
DEFAULT_WINDOW_S = 60.0
DEFAULT_SIMILARITY = 60.0
MEMORY_LIMIT = "256MB"
# Problems kept with their text per source file; beyond this they are still counted.
KEEP_PROBLEMS = 1000
# Spans of requests whose root has not been read yet, across all of them: beyond this the oldest incomplete
# request is given up (a counted problem).
MAX_PENDING_SPANS = 200_000
# Spans read after a request's root before the request is closed: children exported after their root.
GRACE_SPANS = 1000

_BOOL_FIELDS = ("escalated", "abandoned", "copied")
_STR_FIELDS = ("session_id", "release", "stratum", "answer", "context")
KNOWN_FIELDS = frozenset(SOURCE_SCHEMA.names)
_STAGE_SCHEMA = SOURCE_SCHEMA.append(pa.field("_file", pa.int32())).append(pa.field("_line", pa.int64()))
# staged rows carry their order of reading: several requests can share a line (an OTLP export request)
_SEQ_SCHEMA = _STAGE_SCHEMA.append(pa.field("_seq", pa.int64()))
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# Times outside 2000..2999 are typing errors (epoch seconds where milliseconds belong, a year 20260)
_MIN_US = (dt.datetime(2000, 1, 1, tzinfo=dt.UTC) - _EPOCH) // dt.timedelta(microseconds=1)
_MAX_US = (dt.datetime(3000, 1, 1, tzinfo=dt.UTC) - _EPOCH) // dt.timedelta(microseconds=1)


# ---------------------------------------------------------------------------------------------- one record
def parse_ts(value: Any) -> int:
    """Microseconds since 1970 (UTC) of an ISO 8601 time with an offset (``2026-03-01T09:30:00Z``,
    ``...+02:00``) or an epoch time in milliseconds (a JSON number). ValueError with the reason otherwise:
    an ISO time without an offset is refused, never guessed to be UTC, and so is a time outside 2000..2999
    (epoch seconds given where milliseconds belong land in January 1970)."""
    if isinstance(value, bool):
        raise ValueError("is a boolean, not a time")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError("is not a finite number of epoch milliseconds")
        us = round(value * 1000)
    elif isinstance(value, str):
        try:
            t = dt.datetime.fromisoformat(value)
        except ValueError:
            raise ValueError("is not an ISO 8601 time (give e.g. 2026-03-01T09:30:00Z) or epoch ms") from None
        if t.tzinfo is None:
            raise ValueError("has no UTC offset; add Z or +HH:MM")
        us = (t - _EPOCH) // dt.timedelta(microseconds=1)
    else:
        raise ValueError(f"is a {type(value).__name__}; give an ISO 8601 string or epoch milliseconds")
    if not _MIN_US <= us < _MAX_US:
        raise ValueError("is outside 2000-01-01 .. 2999-12-31 (epoch seconds where milliseconds belong?)")
    return us


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate_record(rec: Any, default_release: str | None = None, ts_us: int | None = None) -> tuple[tuple, None] | \
        tuple[None, str]:
    """One source record -> (row in :data:`SOURCE_SCHEMA` column order, None) or (None, why it is refused).
    ``ts_us`` given: the time is already known (spans), ``rec["ts"]`` is not read."""
    if not isinstance(rec, dict):
        return None, f"expected a JSON object, got {type(rec).__name__}"
    rid = rec.get("request_id")
    if not isinstance(rid, str) or not rid.strip():
        return None, ("request_id is missing" if rid is None else f"request_id {rid!r:.40} is not a non-empty string")
    where = f"request {rid[:60]}"
    if ts_us is None:
        if rec.get("ts") is None:
            return None, f"{where}: ts is missing; give an ISO 8601 time with offset or epoch milliseconds"
        try:
            ts_us = parse_ts(rec["ts"])
        except ValueError as e:
            return None, f"{where}: ts {rec['ts']!r:.40} {e}"
    q = rec.get("question")
    if not isinstance(q, str) or not q.strip():
        return None, (f"{where}: question is missing" if q is None else
                      f"{where}: question {q!r:.40} is not a non-empty string")
    out: dict[str, Any] = {"request_id": rid, "ts": ts_us, "question": q}
    for name in _STR_FIELDS:
        v = rec.get(name)
        if v is not None and not isinstance(v, str):
            return None, f"{where}: {name} is a {type(v).__name__}, not a string"
        out[name] = v
    if out["release"] is None:
        out["release"] = default_release
    o = rec.get("outcome")
    if o is not None and o not in OUTCOMES:
        return None, f"{where}: outcome {o!r:.30} is not one of {', '.join(OUTCOMES)} (or null)"
    out["outcome"] = o
    n = rec.get("n_retrieved")
    if n is not None and not (_is_int(n) and 0 <= n < 2**31):
        return None, f"{where}: n_retrieved {n!r:.30} is not a whole number >= 0 (or null for unknown)"
    out["n_retrieved"] = n
    u = rec.get("unit_ids")
    if u is not None and not (isinstance(u, list) and all(isinstance(x, str) for x in u)):
        return None, f"{where}: unit_ids is not a list of strings"
    out["unit_ids"] = u
    lat = rec.get("latency_ms")
    if lat is not None and (isinstance(lat, bool) or not isinstance(lat, int | float) or not math.isfinite(lat)
                            or lat < 0):
        return None, f"{where}: latency_ms {lat!r:.30} is not a number >= 0"
    out["latency_ms"] = None if lat is None else float(lat)
    th = rec.get("thumbs")
    if th is not None and (not _is_int(th) or th not in (1, -1)):
        return None, f"{where}: thumbs {th!r:.30} is not +1, -1 or null"
    out["thumbs"] = th
    for name in _BOOL_FIELDS:
        v = rec.get(name)
        if v is not None and not isinstance(v, bool):
            return None, f"{where}: {name} {v!r:.30} is not true, false or null"
        out[name] = v
    return tuple(out[n] for n in SOURCE_SCHEMA.names), None


def _batch(rows: list[tuple], lines: list[int], file_index: int) -> pa.RecordBatch:
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in SOURCE_SCHEMA]
    arrays = [pa.array(c, type=f.type) for c, f in zip(cols, SOURCE_SCHEMA, strict=True)]
    arrays.append(pa.array([file_index] * len(rows), pa.int32()))
    arrays.append(pa.array(lines, pa.int64()))
    return pa.RecordBatch.from_arrays(arrays, schema=_STAGE_SCHEMA)


# ------------------------------------------------------------------------------------------------- readers
@dataclass
class FileReport:
    """What reading one source file found: records read, rows staged, problems (the first
    :data:`KEEP_PROBLEMS` kept with their text, all counted), fields that were not read."""

    path: str
    sha256: str
    records: int = 0
    staged: int = 0
    bad: int = 0
    problems: list[Problem] = field(default_factory=list)
    unknown_fields: Counter = field(default_factory=Counter)
    skipped: str | None = None  # why the whole file was skipped (already ingested)
    written: int = 0
    duplicates: int = 0
    already_stored: int = 0

    def problem(self, line: int, message: str, bad: bool = True) -> None:
        if bad:
            self.bad += 1
        if len(self.problems) < KEEP_PROBLEMS:
            self.problems.append(Problem(line, message))


class JsonlReader:
    """Batches of validated records from a JSONL file, ``batch_size`` lines at most per batch; the file is
    read line by line, so memory holds one batch whatever the file's size."""

    def __init__(self, path: Path, report: FileReport, file_index: int, batch_size: int = DEFAULT_BATCH,
                 default_release: str | None = None, progress: Callable[[int], None] | None = None):
        self.path, self.report, self.file_index = path, report, file_index
        self.batch_size, self.default_release, self.progress = batch_size, default_release, progress

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        rows: list[tuple] = []
        lines: list[int] = []
        rep = self.report
        with open(self.path, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                if lineno == 1:
                    raw = raw.removeprefix(b"\xef\xbb\xbf")
                if not raw.strip():
                    continue
                rep.records += 1
                try:
                    rec = orjson.loads(raw)
                except orjson.JSONDecodeError as e:
                    rep.problem(lineno, f"not valid JSON ({str(e).split(':')[0]})")
                    continue
                if isinstance(rec, dict):
                    for k in rec:
                        if k not in KNOWN_FIELDS:
                            rep.unknown_fields[k] += 1
                row, why = validate_record(rec, self.default_release)
                if row is None:
                    rep.problem(lineno, why)
                    continue
                rows.append(row)
                lines.append(lineno)
                if len(rows) >= self.batch_size:
                    yield self._emit(rows, lines, fh.tell())
                    rows, lines = [], []
        if rows:
            yield self._emit(rows, lines, None)

    def _emit(self, rows: list[tuple], lines: list[int], pos: int | None) -> pa.RecordBatch:
        self.report.staged += len(rows)
        if self.progress is not None and pos is not None:
            self.progress(pos)
        return _batch(rows, lines, self.file_index)


# OpenTelemetry attributes read besides the question / answer / retrieval ones of the OTel importer
OTEL_ATTRS = {
    "request_id": "ragassay.request_id",
    "session_id": "session.id",
    "release": "ragassay.release",
    "stratum": "ragassay.stratum",
    "outcome": "ragassay.outcome",
    "n_retrieved": "ragassay.retrieval.count",
    "thumbs": "ragassay.feedback.thumbs",
    "escalated": "ragassay.feedback.escalated",
    "abandoned": "ragassay.feedback.abandoned",
    "copied": "ragassay.feedback.copied",
}


def _json_objects(fh) -> Iterator[tuple[int, str]]:
    """(first line, text) of each JSON object of a file of objects written one per line (JSONL) or
    pretty-printed one after another (``ConsoleSpanExporter``): an object starts at a line whose first
    character is neither white space nor a closing bracket, and runs to the next such line."""
    buf: list[str] = []
    start = 0
    for lineno, raw in enumerate(fh, start=1):
        line = raw.decode("utf-8", errors="replace")
        if lineno == 1:
            line = line.removeprefix("\ufeff")
        if not line.strip():
            continue
        if line[0] not in " \t}]" and buf:
            yield start, "".join(buf)
            buf = []
        if not buf:
            start = lineno
        buf.append(line)
    if buf:
        yield start, "".join(buf)


class OtelReader:
    """Batches of records rebuilt from OpenTelemetry spans, one request per trace (its root span), read as
    the OTel importer reads them (:mod:`ragassay.importers.otel`). Spans are grouped by trace id as they
    stream in; a request is closed :data:`GRACE_SPANS` spans after its root span was read (children are
    usually exported before their root) or at the end of the file. At most ``max_pending_spans`` spans of
    unfinished requests are held: beyond that, the oldest request without a root is given up as a problem."""

    def __init__(self, path: Path, report: FileReport, file_index: int, batch_size: int = DEFAULT_BATCH,
                 default_release: str | None = None, progress: Callable[[int], None] | None = None,
                 grace_spans: int = GRACE_SPANS, max_pending_spans: int = MAX_PENDING_SPANS):
        self.path, self.report, self.file_index = path, report, file_index
        self.batch_size, self.default_release, self.progress = batch_size, default_release, progress
        self.grace, self.max_pending = grace_spans, max_pending_spans
        self.peak_pending = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        from ragassay.importers.otel import _normalize, _otlp_spans

        rep = self.report
        pending: OrderedDict[str, list[dict]] = OrderedDict()
        n_pending = 0
        rooted: deque[tuple[int, str]] = deque()  # (span counter when its root was read, trace id)
        closed: OrderedDict[str, None] = OrderedDict()  # recently closed trace ids, to name late spans
        rows: list[tuple] = []
        lines: list[int] = []
        seen = 0

        def close(tid: str) -> None:
            nonlocal n_pending
            group = pending.pop(tid)
            n_pending -= len(group)
            closed[tid] = None
            if len(closed) > 100_000:
                closed.popitem(last=False)
            rep.records += 1
            row, line, why = self._request(tid, group)
            if row is None:
                rep.problem(line, why)
            else:
                rows.append(row)
                lines.append(line)

        with open(self.path, "rb") as fh:
            for lineno, text in _json_objects(fh):
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as e:
                    rep.records += 1
                    rep.problem(lineno, f"not valid JSON ({e.msg}); expected an OTLP/JSON export request or a "
                                        "span object")
                    continue
                if isinstance(obj, dict) and ("resourceSpans" in obj or "resource_spans" in obj):
                    spans = _otlp_spans(obj)
                elif isinstance(obj, dict) and "context" in obj:
                    spans = [obj]
                else:
                    rep.records += 1
                    rep.problem(lineno, "neither a span (no context) nor an OTLP/JSON export request "
                                        "(no resourceSpans)")
                    continue
                for span in spans:
                    s, found = _normalize(span, lineno)
                    for p in found:
                        rep.problem(p.line, p.message, bad=s is None)
                    if s is None:
                        rep.records += 1
                        continue
                    seen += 1
                    tid = s["trace_id"]
                    if tid in closed:
                        rep.problem(lineno, f"span {s['span_id']} ({s['name']}) of trace {tid} came more than "
                                            f"{self.grace} spans after its root; not read", bad=False)
                        continue
                    pending.setdefault(tid, []).append(s)
                    n_pending += 1
                    if s["parent_id"] is None:
                        rooted.append((seen, tid))
                    while n_pending > self.max_pending:
                        old = next((t for t, g in pending.items() if not any(x["parent_id"] is None for x in g)),
                                   None)
                        if old is None:
                            break
                        group = pending.pop(old)
                        n_pending -= len(group)
                        rep.records += 1
                        rep.problem(group[0]["pos"], f"trace {old}: no root span among its first {len(group)} "
                                                     f"span(s) while {self.max_pending} spans were pending; "
                                                     "not read")
                    self.peak_pending = max(self.peak_pending, n_pending)
                while rooted and seen - rooted[0][0] >= self.grace:
                    tid = rooted.popleft()[1]
                    if tid in pending:
                        close(tid)
                if len(rows) >= self.batch_size:
                    yield self._emit(rows, lines, fh.tell())
                    rows, lines = [], []
            for _, tid in rooted:
                if tid in pending:
                    close(tid)
                if len(rows) >= self.batch_size:
                    yield self._emit(rows, lines, None)
                    rows, lines = [], []
            for tid, group in pending.items():
                rep.records += 1
                rep.problem(group[0]["pos"], f"trace {tid}: {len(group)} span(s) and no root span (a span "
                                             "without a parent); not read")
        if rows:
            yield self._emit(rows, lines, None)

    def _emit(self, rows: list[tuple], lines: list[int], pos: int | None) -> pa.RecordBatch:
        self.report.staged += len(rows)
        if self.progress is not None and pos is not None:
            self.progress(pos)
        return _batch(rows, lines, self.file_index)

    def _request(self, tid: str, group: list[dict]) -> tuple[tuple | None, int, str | None]:
        """One trace's spans -> (row, line of its root, None) or (None, line, why)."""
        from ragassay.importers.otel import (
            KIND,
            _documents,
            _genai_answer,
            _genai_documents,
            _genai_question,
            _ms,
            _span_role,
        )

        group.sort(key=lambda s: (s["start"] is None, s["start"] or 0))
        roots = [s for s in group if s["parent_id"] is None]
        root = roots[0]
        line = root["pos"]
        found: list[str] = []
        roles = {s["span_id"]: _span_role(s, found) for s in group}
        rec: dict[str, Any] = {}
        for key, attr in OTEL_ATTRS.items():  # the root's value first, else the first span that has one
            value = next((s["attributes"][attr] for s in [root, *group] if attr in s["attributes"]), None)
            if value is not None:
                rec[key] = value
        rec.setdefault("request_id", tid)
        a0 = root["attributes"]
        retrievers = [s for s in group if roles[s["span_id"]] == "retriever"]
        rerankers = [s for s in group if roles[s["span_id"]] == "reranker"]
        generators = [s for s in group if roles[s["span_id"]] == "generation"]
        q = a0.get("input.value") if isinstance(a0.get("input.value"), str) else None
        if q is None:
            q = next((s["attributes"]["gen_ai.retrieval.query.text"] for s in retrievers
                      if isinstance(s["attributes"].get("gen_ai.retrieval.query.text"), str)), None)
        if q is None:
            q = next((x for s in [root, *generators] if (x := _genai_question(s["attributes"], s["name"], found))
                      is not None), None)
        rec["question"] = q
        answer = a0.get("output.value") if isinstance(a0.get("output.value"), str) else None
        if answer is None:
            for s in generators:
                attrs = s["attributes"]
                if attrs.get(KIND) == "LLM":
                    msgs = sorted((int(m.group(1)), v) for k, v in attrs.items()
                                  if (m := re.match(r"^llm\.output_messages\.(\d+)\.message\.content$", k)))
                    said = msgs[-1][1] if msgs and isinstance(msgs[-1][1], str) else None
                else:
                    said = _genai_answer(attrs, s["name"], found)
                answer = said if said is not None else answer
        rec["answer"] = answer
        if rerankers:
            docs = _documents(rerankers[-1]["attributes"], "reranker.output_documents")
        elif retrievers:
            docs = [d for s in retrievers for d in (
                _documents(s["attributes"], "retrieval.documents") if s["attributes"].get(KIND) == "RETRIEVER"
                else _genai_documents(s["attributes"], s["name"], found))]
        else:
            docs = None
        if docs is not None:
            rec.setdefault("n_retrieved", len(docs))
            rec["unit_ids"] = [str(d["id"]) for d in docs if d.get("id") not in (None, "")]
            texts = [d["content"] for d in docs if isinstance(d.get("content"), str)]
            rec["context"] = "\n\n".join(texts) if texts else None
        if "outcome" not in rec:
            if root["status"] == "ERROR":
                rec["outcome"] = "error"
            elif answer is not None:
                rec["outcome"] = "answered" if answer.strip() else "abstained"
        lat = _ms(root)
        if lat is not None:
            rec["latency_ms"] = lat
        if root["start"] is None:
            return None, line, f"trace {tid}: root span {root['name']!r} has no start time; not read"
        row, why = validate_record(rec, self.default_release, ts_us=root["start"] // 1000)
        if row is None:
            return None, line, f"trace {tid}: {why}"
        for m in found:
            self.report.problem(line, f"trace {tid}: {m}", bad=False)
        if len(roots) > 1:
            self.report.problem(line, f"trace {tid}: {len(roots)} spans have no parent; the earliest, "
                                      f"{root['name']!r}, is read as the root", bad=False)
        return row, line, None


# -------------------------------------------------------------------------------------------------- ingest
@dataclass
class IngestSummary:
    """The outcome of one ingest, per file and in total."""

    store: str
    format: str
    files: list[FileReport]
    written: int = 0
    duplicates: int = 0
    already_stored: int = 0
    stale_rephrase: int = 0
    days: dict[str, int] = field(default_factory=dict)
    parts: list[str] = field(default_factory=list)
    seconds: float = 0.0
    duplicate_examples: list[dict] = field(default_factory=list)
    rephrase_rule: dict = field(default_factory=dict)

    @property
    def bad_lines(self) -> int:
        return sum(f.bad for f in self.files)

    def as_dict(self, examples: int = 20) -> dict:
        return {
            "store": self.store, "format": self.format, "written": self.written,
            "duplicates": self.duplicates, "already_stored": self.already_stored, "bad_lines": self.bad_lines,
            "stale_rephrase": self.stale_rephrase, "days": self.days, "parts": self.parts,
            "seconds": round(self.seconds, 3), "rephrase_rule": self.rephrase_rule,
            "duplicate_examples": self.duplicate_examples[:examples],
            "files": [{"path": f.path, "sha256": f.sha256, "skipped": f.skipped, "records": f.records,
                       "staged": f.staged, "written": f.written, "duplicates": f.duplicates,
                       "already_stored": f.already_stored, "bad_lines": f.bad,
                       "problems": [{"line": p.line, "message": p.message} for p in f.problems[:examples]],
                       "unknown_fields": dict(f.unknown_fields.most_common(examples))} for f in self.files],
        }


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def ingested_shas(store: str | Path) -> dict[str, dict]:
    """sha256 -> the manifest line of every source file ingested into ``store``."""
    path = manifest_path(store)
    out: dict[str, dict] = {}
    if not path.is_file():
        return out
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise InputError(f"{path}:{n}: not valid JSON; this file is written by `ragassay online ingest`: "
                             "restore it or remove the broken line") from None
        if isinstance(rec, dict) and isinstance(rec.get("sha256"), str):
            out[rec["sha256"]] = rec
    return out


def _append_manifest(store: str | Path, entries: list[dict]) -> None:
    import os

    path = manifest_path(store)
    with open(path, "ab") as fh:
        for e in entries:
            fh.write(json.dumps(e, ensure_ascii=False).encode("utf-8") + b"\n")
        fh.flush()
        os.fsync(fh.fileno())


def rephrase_flags(questions: list[str], nexts: list[str | None], gaps_us: list[int | None],
                   window_s: float = DEFAULT_WINDOW_S, similarity: float = DEFAULT_SIMILARITY) -> list[bool]:
    """The rephrase rule (module docstring) for each (question, next question of the session, gap to it in
    microseconds); no next request is False."""
    import numpy as np
    from rapidfuzz import fuzz, process
    from rapidfuzz.utils import default_process

    limit = window_s * 1_000_000
    idx = [i for i, (nq, g) in enumerate(zip(nexts, gaps_us, strict=True)) if nq is not None and g is not None
           and 0 <= g <= limit]
    out = [False] * len(questions)
    if not idx:
        return out
    a = [default_process(questions[i]) for i in idx]
    b = [default_process(nexts[i]) for i in idx]
    scores = process.cpdist(a, b, scorer=fuzz.token_set_ratio, workers=1)
    for i, s, x, y in zip(idx, np.asarray(scores).tolist(), a, b, strict=True):
        out[i] = bool(s >= similarity and x != y)
    return out


def ingest(paths: list[str | Path], store: str | Path, *, fmt: str = "jsonl", release: str | None = None,
           rephrase_window: float = DEFAULT_WINDOW_S, similarity: float = DEFAULT_SIMILARITY,
           batch_size: int = DEFAULT_BATCH, progress: Callable[[int, int], None] | None = None) -> IngestSummary:
    """Ingest production request files into the records beside ``store`` (module docstring).

    Raises InputError (nothing written) for a missing file, an unknown format, bad options, or a file that
    holds no record or only bad ones."""
    t0 = time.perf_counter()
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    if not rephrase_window > 0:
        raise InputError(f"--rephrase-window {rephrase_window}: give a number of seconds > 0")
    if not 0 < similarity <= 100:
        raise InputError(f"--rephrase-similarity {similarity}: give a score in (0, 100]")
    if batch_size < 1:
        raise InputError(f"batch size {batch_size}: give a whole number >= 1")
    paths = [Path(p) for p in paths]
    if not paths:
        raise InputError("no file given; pass one or more JSONL (or --format otel) files")
    for p in paths:
        if not p.is_file():
            raise InputError(f"{p}: file not found; give a {fmt} file of production requests")
    total_bytes = sum(p.stat().st_size for p in paths)
    rule = {"window_s": rephrase_window, "similarity": similarity, "scorer": "rapidfuzz token_set_ratio",
            "processor": "rapidfuzz.utils.default_process", "identical": "not a rephrase"}
    summary = IngestSummary(str(store), fmt, [], rephrase_rule=rule)
    with write_lock(store):
        staging = make_temp_dir(online_dir(store), ".staging-")
        try:
            _ingest_locked(paths, store, staging, fmt, release, rephrase_window, similarity, batch_size,
                           progress, total_bytes, summary)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    summary.seconds = time.perf_counter() - t0
    return summary


def _ingest_locked(paths, store, staging: Path, fmt, release, window, similarity, batch_size, progress,
                   total_bytes, summary: IngestSummary) -> None:
    import duckdb

    known = ingested_shas(store)
    stage_file = staging / "staged.parquet"
    writer = pq.ParquetWriter(stage_file, _SEQ_SCHEMA, compression="zstd")
    done_bytes = 0
    seq = 0
    try:
        for i, p in enumerate(paths):
            sha = sha256_file(p)
            rep = FileReport(str(p), sha)
            summary.files.append(rep)
            if sha in known or any(f.sha256 == sha and f is not rep for f in summary.files):
                prior = known.get(sha)
                rep.skipped = (f"already ingested ({prior.get('file')} at {prior.get('ingested_at')})" if prior
                               else "the same content as an earlier file of this ingest")
                done_bytes += p.stat().st_size
                continue
            base = done_bytes

            def tick(pos: int, base=base) -> None:
                if progress is not None:
                    progress(base + pos, total_bytes)

            cls = JsonlReader if fmt == "jsonl" else OtelReader
            for batch in cls(p, rep, i, batch_size, release, tick):
                order = pa.array(range(seq, seq + batch.num_rows), pa.int64())
                writer.write_batch(pa.RecordBatch.from_arrays([*batch.columns, order], schema=_SEQ_SCHEMA))
                seq += batch.num_rows
            done_bytes += p.stat().st_size
            if progress is not None:
                progress(done_bytes, total_bytes)
    finally:
        writer.close()
    empty = [f for f in summary.files if f.skipped is None and f.staged == 0]
    if empty:
        lines = []
        for f in empty:
            if not f.records:
                lines.append(f"{f.path}: holds no record; give a {fmt} file with one request per "
                             f"{'line' if fmt == 'jsonl' else 'trace'}")
            else:
                first = f.problems[0] if f.problems else Problem(0, "?")
                lines.append(f"{f.path}: all {f.records} record(s) are bad; first: line {first.line}: "
                             f"{first.message}")
        raise InputError("\n".join(lines + ["nothing was written; fix the file(s) and ingest again"]))
    if not any(f.staged for f in summary.files):
        return  # every file already ingested
    con = duckdb.connect(str(staging / "work.duckdb"))
    try:
        _dedupe_derive_write(con, store, staging, stage_file, window, similarity, summary)
    finally:
        con.close()


def _dedupe_derive_write(con, store, staging: Path, stage_file: Path, window, similarity,
                         summary: IngestSummary) -> None:
    con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
    con.execute("SET threads = 2")
    con.execute("SET preserve_insertion_order = false")
    con.execute(f"SET temp_directory = '{str(staging / 'spill').replace(chr(39), chr(39) * 2)}'")
    stored = open_records(con, store, "stored")
    src = str(stage_file).replace("'", "''")
    con.execute(f"CREATE VIEW staged AS SELECT * FROM read_parquet('{src}')")
    con.execute("CREATE TABLE ranked AS SELECT request_id, _file, _line, _seq, row_number() OVER "
                "(PARTITION BY request_id ORDER BY _seq) AS k FROM staged")
    con.execute(f"CREATE TABLE fresh AS SELECT s.* FROM staged s JOIN ranked r USING (_seq) "
                f"WHERE r.k = 1 AND NOT EXISTS (SELECT 1 FROM {stored} x WHERE x.request_id = s.request_id)")
    per_file = {f: (w, d, a) for f, w, d, a in con.execute(
        f"SELECT _file, count(*) FILTER (WHERE k = 1 AND request_id NOT IN (SELECT request_id FROM {stored})), "
        f"count(*) FILTER (WHERE k > 1), count(*) FILTER (WHERE k = 1 AND request_id IN "
        f"(SELECT request_id FROM {stored})) FROM ranked GROUP BY _file").fetchall()}
    for i, rep in enumerate(summary.files):
        if rep.skipped is None:
            rep.written, rep.duplicates, rep.already_stored = (int(x) for x in per_file.get(i, (0, 0, 0)))
    summary.duplicates = sum(f.duplicates for f in summary.files)
    summary.already_stored = sum(f.already_stored for f in summary.files)
    for f, line, rid, first_f, first_line in con.execute(
            "SELECT r._file, r._line, r.request_id, o._file, o._line FROM ranked r JOIN ranked o "
            "ON o.request_id = r.request_id AND o.k = 1 WHERE r.k > 1 ORDER BY r._seq LIMIT 20"
    ).fetchall():
        summary.duplicate_examples.append({
            "file": summary.files[f].path, "line": line, "request_id": rid,
            "first": f"{summary.files[first_f].path}:{first_line}"})
    # each request's next one in its session, over the new requests and the stored ones of the same sessions
    con.execute(f"""
        CREATE TABLE nexts AS
        WITH s AS (
            SELECT request_id, session_id, ts, question, true AS fresh, NULL::BOOLEAN AS was
            FROM fresh WHERE session_id IS NOT NULL
            UNION ALL
            SELECT request_id, session_id, ts, question, false, rephrased FROM {stored}
            WHERE session_id IN (SELECT DISTINCT session_id FROM fresh WHERE session_id IS NOT NULL))
        SELECT request_id, fresh, was, question, lead(question) OVER w AS next_q, lead(fresh) OVER w AS next_fresh,
               epoch_us(lead(ts) OVER w) - epoch_us(ts) AS gap_us
        FROM s WINDOW w AS (PARTITION BY session_id ORDER BY ts, request_id)""")
    stale = 0
    reph_file = staging / "rephrased.parquet"
    reph_schema = pa.schema([("request_id", pa.string()), ("rephrased", pa.bool_())])
    with pq.ParquetWriter(reph_file, reph_schema) as reph:
        for b in con.sql("SELECT request_id, fresh, was, question, next_q, gap_us FROM nexts "
                         "WHERE fresh OR next_fresh").to_arrow_reader(DEFAULT_BATCH):
            d = b.to_pydict()
            flags = rephrase_flags(d["question"], d["next_q"], d["gap_us"], window, similarity)
            keep = [i for i, f in enumerate(d["fresh"]) if f]
            stale += sum(1 for i, f in enumerate(d["fresh"]) if not f and d["was"][i] is not None
                         and d["was"][i] != flags[i])
            reph.write_table(pa.table({"request_id": [d["request_id"][i] for i in keep],
                                       "rephrased": pa.array([flags[i] for i in keep], pa.bool_())},
                                      schema=reph_schema))
    summary.stale_rephrase = stale
    cols = ", ".join(f"f.{n}" for n in SOURCE_SCHEMA.names)
    reph_src = str(reph_file).replace("'", "''")
    out = con.sql(f"""
        SELECT {cols}, r.rephrased, f.n_retrieved = 0 AS empty_retrieval,
               CASE WHEN f.outcome IS NULL THEN NULL ELSE f.outcome IN ('refused', 'abstained') END AS refusal,
               CAST(f.ts AS DATE) AS date
        FROM fresh f LEFT JOIN read_parquet('{reph_src}') r USING (request_id)
        ORDER BY date, f.ts, f.request_id""").to_arrow_reader(DEFAULT_BATCH)
    writer = PartitionWriter(store)
    try:
        for b in out:
            writer.write(b)
    except BaseException:
        writer.abort()
        raise
    parts = writer.commit()
    summary.written, summary.days = writer.rows, writer.days
    summary.parts = [str(p) for p in parts]
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    _append_manifest(store, [{
        "file": str(Path(f.path).resolve()), "sha256": f.sha256, "ingested_at": now, "format": summary.format,
        "records": f.records, "written": f.written, "duplicates": f.duplicates, "already_stored": f.already_stored,
        "bad_lines": f.bad} for f in summary.files if f.skipped is None])
