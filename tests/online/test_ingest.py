"""`ragassay online ingest`: the storage contract (layout, schema, zstd, atomic parts), dedupe on re-ingest, the
rephrase rule worked by hand, bad lines counted with their line numbers, OpenTelemetry spans from the real SDK,
and the bounded-memory reading mechanism."""

from __future__ import annotations

import datetime as dt
import json

import duckdb
import pyarrow.parquet as pq
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from ragassay.cli.app import COMMANDS, main
from ragassay.errors import InputError
from ragassay.importers.otel import iso_ns, read_span_file
from ragassay.online.ingest import FileReport, JsonlReader, OtelReader, ingest, parse_ts, rephrase_flags
from ragassay.online.store import (
    RECORD_SCHEMA,
    append_records,
    manifest_path,
    open_records,
    record_files,
    records_dir,
)

T0 = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.UTC)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def iso(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).isoformat()


def write_jsonl(path, records, raw_lines=()):
    lines = [json.dumps(r) if not isinstance(r, str) else r for r in records]
    path.write_text("\n".join([*lines, *raw_lines]) + "\n")
    return path


def rows(store, cols="*", order="request_id"):
    con = duckdb.connect()
    try:
        view = open_records(con, store)
        return con.execute(f"SELECT {cols} FROM {view} ORDER BY {order}").fetchall()
    finally:
        con.close()


def cli(args, capsys, monkeypatch):
    monkeypatch.setitem(COMMANDS, "online", ("online", "Production traffic."))
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def req(rid, seconds, question="How do I reset my password?", **kw):
    return {"request_id": rid, "ts": iso(seconds), "question": question, **kw}


# ------------------------------------------------------------------------------------------ layout and schema
def test_records_are_written_as_zstd_parquet_parts_per_utc_day_with_the_contract_schema(tmp_path):
    store = tmp_path / "s.duckdb"
    src = write_jsonl(tmp_path / "a.jsonl", [
        req("r1", 0, session_id="s", n_retrieved=0, outcome="abstained", unit_ids=[], thumbs=-1),
        # 01:30 on 2 March at +02:00 is 23:30 UTC on 1 March: the partition is the UTC day
        {"request_id": "r2", "ts": "2026-03-02T01:30:00+02:00", "question": "q2", "outcome": "answered",
         "n_retrieved": 4, "unit_ids": ["u1", "u2"], "latency_ms": 812.5, "escalated": True},
        # epoch milliseconds: 2026-03-03T00:00:00Z
        {"request_id": "r3", "ts": 1772496000000, "question": "q3", "outcome": None},
    ])
    s = ingest([src], store)
    assert (s.written, s.days) == (3, {"2026-03-01": 2, "2026-03-03": 1})
    files = record_files(store)
    assert [f.relative_to(records_dir(store)).as_posix() for f in files] == [
        "date=2026-03-01/part-00000.parquet", "date=2026-03-03/part-00000.parquet"]
    assert pq.read_schema(files[0]).remove_metadata() == RECORD_SCHEMA
    meta = pq.ParquetFile(files[0]).metadata
    assert {meta.row_group(0).column(i).compression for i in range(meta.num_columns)} == {"ZSTD"}
    got = rows(store, "request_id, ts, date, empty_retrieval, refusal, rephrased, thumbs, unit_ids, escalated")
    assert got == [
        ("r1", T0, dt.date(2026, 3, 1), True, True, False, -1, [], None),
        ("r2", dt.datetime(2026, 3, 1, 23, 30, tzinfo=dt.UTC), dt.date(2026, 3, 1), False, False, None, None,
         ["u1", "u2"], True),
        ("r3", dt.datetime(2026, 3, 3, tzinfo=dt.UTC), dt.date(2026, 3, 3), None, None, None, None, None, None),
    ]
    # a second ingest on the same day adds a new part, never rewrites one
    ingest([write_jsonl(tmp_path / "b.jsonl", [req("r4", 60)])], store)
    assert [f.name for f in record_files(store) if "03-01" in f.parent.name] == ["part-00000.parquet",
                                                                                  "part-00001.parquet"]
    assert not list(records_dir(store).rglob("*.tmp")) and not list(store.parent.glob("*.online/.staging-*"))


def test_a_store_without_records_reads_as_an_empty_view_with_the_columns(tmp_path):
    con = duckdb.connect()
    view = open_records(con, tmp_path / "none.duckdb")
    cols = [r[0] for r in con.execute(f"DESCRIBE {view}").fetchall()]
    assert cols == [*RECORD_SCHEMA.names, "date"]
    assert con.execute(f"SELECT count(*) FROM {view}").fetchall() == [(0,)]
    con.close()


def test_times_are_iso_with_offset_or_epoch_ms_and_nothing_else():
    assert parse_ts("2026-03-01T09:00:00Z") == parse_ts("2026-03-01T11:00:00+02:00") == parse_ts(1772355600000)
    assert parse_ts(1772355600000.5) == 1772355600000500
    for bad, why in [("2026-03-01T09:00:00", "no UTC offset"), ("yesterday", "not an ISO 8601"),
                     (True, "boolean"), (1772355600, "outside 2000-01-01"), ([1], "list")]:
        with pytest.raises(ValueError, match=why):
            parse_ts(bad)


# ------------------------------------------------------------------------------------------------- dedupe
def test_reingest_adds_no_duplicate_rows_file_skipped_by_sha_and_rows_by_request_id(tmp_path, capsys, monkeypatch):
    store = tmp_path / "s.duckdb"
    a = write_jsonl(tmp_path / "a.jsonl", [req("r1", 0), req("r2", 100), req("r1", 200, question="again")])
    first = ingest([a], store)
    assert (first.written, first.duplicates, first.already_stored) == (2, 1, 0)
    assert first.duplicate_examples == [{"file": str(a), "line": 3, "request_id": "r1", "first": f"{a}:1"}]
    assert rows(store, "request_id, question") == [("r1", "How do I reset my password?"),
                                                   ("r2", "How do I reset my password?")]
    again = ingest([a], store)  # the same bytes: skipped as a whole, named
    assert again.written == 0 and again.files[0].skipped.startswith(f"already ingested ({a.resolve()} at ")
    # another file overlapping the first: stored ids skipped row by row, counted
    b = write_jsonl(tmp_path / "b.jsonl", [req("r2", 100), req("r3", 300), req("r1", 0)])
    third = ingest([b], store)
    assert (third.written, third.already_stored, third.duplicates) == (1, 2, 0)
    assert [r[0] for r in rows(store, "request_id")] == ["r1", "r2", "r3"]
    manifest = [json.loads(x) for x in manifest_path(store).read_text().splitlines()]
    assert [(m["file"], m["written"], m["already_stored"], m["duplicates"]) for m in manifest] == [
        (str(a.resolve()), 2, 0, 1), (str(b.resolve()), 1, 2, 0)]
    code, out, _ = cli(["online", "ingest", a, b, "--store", store, "--json"], capsys, monkeypatch)
    res = json.loads(out)
    assert code == 0 and res["written"] == 0 and [f["skipped"] is not None for f in res["files"]] == [True, True]


def test_append_records_dedupes_against_the_store_and_within_the_table(tmp_path):
    import pyarrow as pa

    from ragassay.online.store import SOURCE_SCHEMA

    store = tmp_path / "s.duckdb"
    ingest([write_jsonl(tmp_path / "a.jsonl", [req("r1", 0)])], store)
    base = {n: [None, None, None] for n in SOURCE_SCHEMA.names}
    base.update(request_id=["r1", "r2", "r2"], ts=[T0, T0, T0], question=["a", "b", "c"], n_retrieved=[0, 3, 1],
                outcome=["refused", "answered", None])
    res = append_records(store, pa.table(base, schema=SOURCE_SCHEMA))
    assert (res.written, res.duplicates, res.already_stored) == (1, 1, 1)
    assert rows(store, "request_id, question, empty_retrieval, refusal") == [
        ("r1", "How do I reset my password?", None, None), ("r2", "b", False, False)]


# ------------------------------------------------------------------------------------------------ rephrase
def test_rephrase_rule_by_hand(tmp_path):
    # token_set_ratio after default_process: the shared tokens "password reset", then each side's other tokens
    # sorted: "password reset do how i my" vs "password reset not working" have a longest common subsequence
    # of 15 + 4 ("o wi") characters, so the best of the three ratios is 2 * 19 / (26 + 26) = 73.1 >= 60
    assert fuzz.token_set_ratio(default_process("How do I reset my password?"),
                                default_process("password reset not working")) == pytest.approx(200 * 19 / 52)
    store = tmp_path / "s.duckdb"
    pw, pw2 = "How do I reset my password?", "password reset not working"
    hours = "What are your opening hours?"
    recs = [
        req("a1", 0, pw, session_id="A"), req("a2", 60, pw2, session_id="A"),  # 60 s exactly: inside
        req("b1", 0, pw, session_id="B"), req("b2", 60.001, pw2, session_id="B"),  # 1 ms past the window
        req("c1", 0, pw, session_id="C"), req("c2", 5, "how do i reset my password", session_id="C"),  # same text
        req("d1", 0, pw, session_id="D"), req("d2", 5, hours, session_id="D"),  # not similar
        req("e1", 0, pw),  # no session: unknown
        # out of file order: f2 is written first but f1 is earlier; f1's next is f2
        req("f2", 30, pw2, session_id="F"), req("f1", 0, pw, session_id="F"),
    ]
    s = ingest([write_jsonl(tmp_path / "a.jsonl", recs)], store)
    got = dict(rows(store, "request_id, rephrased"))
    assert got == {"a1": True, "a2": False, "b1": False, "b2": False, "c1": False, "c2": False, "d1": False,
                   "d2": False, "e1": None, "f1": True, "f2": False}
    assert s.rephrase_rule["window_s"] == 60.0 and s.stale_rephrase == 0
    # a narrower window: a1 -> a2 (60 s) is now outside
    assert rephrase_flags([pw, pw], [pw2, pw2], [60_000_000, 10_000_000], window_s=10) == [False, True]
    assert rephrase_flags([pw, pw], [pw2, pw2], [5_000_000] * 2, similarity=73.2) == [False, False]


def test_a_follow_up_across_ingests(tmp_path):
    store = tmp_path / "s.duckdb"
    pw, pw2 = "How do I reset my password?", "password reset not working"
    # the later request first: the earlier one, ingested next, sees its stored follow-up
    ingest([write_jsonl(tmp_path / "1.jsonl", [req("x2", 30, pw2, session_id="X")])], store)
    s = ingest([write_jsonl(tmp_path / "2.jsonl", [req("x1", 0, pw, session_id="X")])], store)
    assert dict(rows(store, "request_id, rephrased")) == {"x1": True, "x2": False} and s.stale_rephrase == 0
    # the earlier request first: its stored flag is not rewritten, and the summary counts it
    ingest([write_jsonl(tmp_path / "3.jsonl", [req("y1", 0, pw, session_id="Y")])], store)
    s = ingest([write_jsonl(tmp_path / "4.jsonl", [req("y2", 30, pw2, session_id="Y")])], store)
    assert s.stale_rephrase == 1 and dict(rows(store, "request_id, rephrased"))["y1"] is False


# ---------------------------------------------------------------------------------------------- bad lines
def test_every_bad_line_is_counted_with_its_line_and_a_file_of_only_bad_lines_stops(tmp_path, capsys,
                                                                                       monkeypatch):
    store = tmp_path / "s.duckdb"
    src = write_jsonl(tmp_path / "a.jsonl", [
        req("ok1", 0),
        "{not json",
        {"request_id": "n1", "ts": "2026-03-01T09:00:00", "question": "q"},
        {"request_id": "n2", "ts": iso(1)},
        req("n3", 2, thumbs=0),
        req("n4", 3, outcome="maybe"),
        req("n5", 4, n_retrieved=-1),
        "[1, 2]",
        "",
        {"ts": iso(5), "question": "q"},
        req("n6", 6, unit_ids="u1"),
        req("ok2", 7, escalated=None, colour="blue"),
    ])
    s = ingest([src], store)
    f = s.files[0]
    assert (f.records, f.staged, f.bad, s.written) == (11, 2, 9, 2)
    assert [(p.line, p.message) for p in f.problems] == [
        (2, "not valid JSON (unexpected character, expected a string key)"),
        (3, "request n1: ts '2026-03-01T09:00:00' has no UTC offset; add Z or +HH:MM"),
        (4, "request n2: question is missing"),
        (5, "request n3: thumbs 0 is not +1, -1 or null"),
        (6, "request n4: outcome 'maybe' is not one of answered, abstained, refused, error (or null)"),
        (7, "request n5: n_retrieved -1 is not a whole number >= 0 (or null for unknown)"),
        (8, "expected a JSON object, got list"),
        (10, "request_id is missing"),
        (11, "request n6: unit_ids is not a list of strings"),
    ]
    assert dict(f.unknown_fields) == {"colour": 1}
    # the command: exit 1 with the lines named, or 0 with --allow-bad
    code, out, err = cli(["online", "ingest", src, "--store", tmp_path / "t.duckdb"], capsys, monkeypatch)
    assert code == 1 and f"{src}:3: request n1: ts" in err and "9 bad lines skipped" in err
    code, out, _ = cli(["online", "ingest", src, "--store", tmp_path / "u.duckdb", "--allow-bad", "--json"], capsys,
                       monkeypatch)
    assert code == 0 and json.loads(out)["bad_lines"] == 9
    # only bad lines, or no line: exit 2, nothing written
    allbad = write_jsonl(tmp_path / "bad.jsonl", ["{", req("z", 0, thumbs=2)])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    code, _, err = cli(["online", "ingest", allbad, empty, "--store", tmp_path / "v.duckdb"], capsys, monkeypatch)
    assert code == 2
    assert f"error: {allbad}: all 2 record(s) are bad; first: line 1: not valid JSON" in err
    assert f"error: {empty}: holds no record" in err
    assert not records_dir(tmp_path / "v.duckdb").exists()
    code, _, err = cli(["online", "ingest", tmp_path / "missing.jsonl", "--store", store], capsys, monkeypatch)
    assert code == 2 and "missing.jsonl: file not found" in err
    with pytest.raises(InputError, match="--format 'csv'"):
        ingest([src], store, fmt="csv")


# ------------------------------------------------------------------------------------------ bounded memory
def test_the_jsonl_reader_holds_at_most_one_batch_and_reads_lazily(tmp_path):
    src = write_jsonl(tmp_path / "a.jsonl", [req(f"r{i:03d}", i, session_id=f"s{i % 7}") for i in range(100)])
    positions = []
    reader = JsonlReader(src, FileReport(str(src), ""), 0, batch_size=7, progress=positions.append)
    it = iter(reader)
    first = next(it)
    # one batch out, the rest of the file not read yet
    assert first.num_rows == 7 and positions and positions[0] < src.stat().st_size
    sizes = [first.num_rows, *(b.num_rows for b in it)]
    assert sizes == [7] * 14 + [2]
    # batch size changes nothing stored
    ingest([src], tmp_path / "small.duckdb", batch_size=7)
    ingest([src], tmp_path / "large.duckdb", batch_size=1000)
    assert rows(tmp_path / "small.duckdb") == rows(tmp_path / "large.duckdb")


# --------------------------------------------------------------------------------------------------- OTel
def _otel_traffic(tracer):
    """Three requests as a RAG service would emit them: OpenInference attributes, session and feedback
    attributes; the third fails."""
    with tracer.start_as_current_span("rag") as root:
        root.set_attribute("openinference.span.kind", "CHAIN")
        root.set_attribute("input.value", "How do I reset my password?")
        root.set_attribute("output.value", "Use the reset link.")
        root.set_attribute("session.id", "S1")
        root.set_attribute("ragassay.request_id", "req-1")
        root.set_attribute("ragassay.stratum", "account")
        root.set_attribute("ragassay.feedback.thumbs", -1)
        with tracer.start_as_current_span("bm25") as ret:
            ret.set_attribute("openinference.span.kind", "RETRIEVER")
            ret.set_attribute("retrieval.documents.0.document.id", "kb-1")
            ret.set_attribute("retrieval.documents.0.document.content", "Reset links expire after an hour.")
            ret.set_attribute("retrieval.documents.1.document.id", "kb-2")
            ret.set_attribute("retrieval.documents.1.document.content", "Passwords need 12 characters.")
    with tracer.start_as_current_span("rag") as root:
        root.set_attribute("openinference.span.kind", "CHAIN")
        root.set_attribute("input.value", "password reset not working")
        root.set_attribute("session.id", "S1")
        root.set_attribute("ragassay.request_id", "req-2")
        root.set_attribute("ragassay.feedback.escalated", True)
        with tracer.start_as_current_span("bm25") as ret:
            ret.set_attribute("openinference.span.kind", "RETRIEVER")  # retrieved nothing
        with tracer.start_as_current_span("chat") as llm:
            llm.set_attribute("gen_ai.operation.name", "chat")
            llm.set_attribute("gen_ai.output.messages", json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": ""}]}]))
    with tracer.start_as_current_span("rag") as root:  # no request id: the trace id is the request id
        root.set_attribute("input.value", "Where is my order?")
        root.set_status(Status(StatusCode.ERROR, "timeout"))


def _otlp_line(spans) -> str:
    """The SDK's spans as one OTLP/JSON export request (hex ids, times as decimal strings, typed values)."""
    def value(v):
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        return {"stringValue": v}

    out = [{"traceId": f"{s.context.trace_id:032x}", "spanId": f"{s.context.span_id:016x}",
            "parentSpanId": f"{s.parent.span_id:016x}" if s.parent else "", "name": s.name,
            "startTimeUnixNano": str(s.start_time), "endTimeUnixNano": str(s.end_time),
            "status": {"code": s.status.status_code.value, "message": s.status.description or ""},
            "attributes": [{"key": k, "value": value(v)} for k, v in s.attributes.items()]} for s in spans]
    return json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                          "scopeSpans": [{"scope": {"name": "t"}, "spans": out}]}]})


def test_otel_spans_from_the_sdk_become_records(tmp_path, capsys, monkeypatch):
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    console_file = tmp_path / "spans.json"
    with console_file.open("w") as fh:
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=fh)))
        _otel_traffic(provider.get_tracer("svc"))
        provider.shutdown()
    spans = memory.get_finished_spans()
    otlp = tmp_path / "otlp.jsonl"
    otlp.write_text(_otlp_line(spans[:3]) + "\n" + _otlp_line(spans[3:]) + "\n")
    roots = [s for s in spans if s.parent is None]
    third = f"{roots[2].context.trace_id:032x}"
    for src, store in ((console_file, tmp_path / "a.duckdb"), (otlp, tmp_path / "b.duckdb")):
        code, out, err = cli(["online", "ingest", src, "--format", "otel", "--store", store, "--release", "v7",
                              "--json"], capsys, monkeypatch)
        res = json.loads(out)
        assert code == 0 and res["written"] == 3 and res["bad_lines"] == 0, (src, res, err)
        got = rows(store, "request_id, session_id, release, stratum, question, answer, outcome, n_retrieved, "
                          "unit_ids, context, thumbs, escalated, rephrased, empty_retrieval, refusal, ts, latency_ms",
                   order="ts")
        assert [g[:15] for g in got] == [
            ("req-1", "S1", "v7", "account", "How do I reset my password?", "Use the reset link.", "answered", 2,
             ["kb-1", "kb-2"], "Reset links expire after an hour.\n\nPasswords need 12 characters.", -1, None,
             True, False, False),
            ("req-2", "S1", "v7", None, "password reset not working", "", "abstained", 0, [], None, None, True,
             False, True, True),
            (third, None, "v7", None, "Where is my order?", None, "error", None, None, None, None, None, None, None,
             False),
        ]
        # the start of the root span, in whole microseconds: the SDK's nanoseconds (OTLP) or the ISO time the
        # console exporter wrote (already rounded to microseconds by the SDK)
        if src is otlp:
            starts = [r.start_time // 1000 for r in roots]
        else:
            written = {s["context"]["span_id"]: s["start_time"] for _, s in read_span_file(src)}
            starts = [iso_ns(written[f"0x{r.context.span_id:016x}"]) // 1000 for r in roots]
        assert [g[15] for g in got] == [EPOCH + dt.timedelta(microseconds=us) for us in starts]
        if src is otlp:  # nanoseconds in, exact milliseconds out
            assert [g[16] for g in got] == [(r.end_time - r.start_time) / 1e6 for r in roots]


def test_otel_reader_closes_requests_after_a_grace_and_holds_few_spans(tmp_path):
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("svc")
    for i in range(40):
        with tracer.start_as_current_span("rag") as root:
            root.set_attribute("input.value", f"question {i}")
            with tracer.start_as_current_span("bm25") as ret:
                ret.set_attribute("openinference.span.kind", "RETRIEVER")
    provider.shutdown()
    spans = list(memory.get_finished_spans())
    src = tmp_path / "spans.jsonl"
    lines = [s.to_json(indent=None) for s in spans]
    # a child whose root never comes
    child = json.loads(lines[0])
    child["context"]["trace_id"] = "0x" + "ab" * 16
    lines.append(json.dumps(child))
    src.write_text("\n".join(lines) + "\n")
    rep = FileReport(str(src), "")
    reader = OtelReader(src, rep, 0, batch_size=8, grace_spans=2)
    sizes = [b.num_rows for b in reader]
    assert sizes == [8, 8, 8, 8, 8] and rep.records == 41 and rep.bad == 1
    # two spans per request, closed two spans after its root: never more than 4 spans pending
    assert reader.peak_pending <= 4
    assert rep.problems[-1].line == 81 and "no root span" in rep.problems[-1].message
