import json

import pytest

from ragassay.errors import SchemaError
from ragassay.trace import (
    Citation,
    RunHeader,
    Trace,
    TraceWriter,
    Unit,
    config_sha,
    read_traces,
    write_traces,
)


def _header(**kw):
    return RunHeader(run_name="r", config={"b": 1, "a": "é"}, **kw)


def _trace(qid, trial=0):
    u = Unit(unit_id="d:0-5", doc_id="d", start=0, end=5, score=1.5, rank=1, text="hello", tokens=1)
    return Trace(trace_id=f"{qid}-{trial}", query_id=qid, trial=trial, fused=[u], packed=[u], packed_tokens=1,
                 answer="hello", citations=["d:0-5"], outcome="answered", durations_ms={"total": 1.0})


def test_config_sha_is_sha256_of_canonical_json():
    import hashlib

    cfg = {"b": [1, 2], "a": {"z": "é", "y": None}}
    want = hashlib.sha256('{"a":{"y":null,"z":"é"},"b":[1,2]}'.encode()).hexdigest()
    assert config_sha(cfg) == want
    assert RunHeader(run_name="x", config=cfg).config_sha == want
    with pytest.raises(ValueError, match="does not match"):
        RunHeader(run_name="x", config=cfg, config_sha="0" * 64)


def test_bare_citation_ids_become_citations():
    t = _trace("q")
    assert t.citations == [Citation(unit_id="d:0-5")]


def test_trace_rejects_inconsistent_tokens_and_outcomes():
    with pytest.raises(ValueError, match="packed_tokens"):
        Trace(trace_id="t", query_id="q", packed=[Unit(unit_id="u", doc_id="d", start=0, end=1, tokens=3)],
              packed_tokens=2)
    with pytest.raises(ValueError, match="needs an 'error'"):
        Trace(trace_id="t", query_id="q", outcome="error")


def test_round_trip_is_model_equal(tmp_path):
    h, traces = _header(), [_trace("q1"), _trace("q2"), _trace("q1", 1)]
    path = write_traces(tmp_path / "t.jsonl", h, traces)
    h2, back, problems = read_traces(path)
    assert (h2, back, problems) == (h, traces, [])
    first = json.loads(path.read_text().splitlines()[0])
    assert first["type"] == "header" and first["config"] == {"b": 1, "a": "é"}


def test_malformed_records_are_reported_with_line_numbers(tmp_path):
    path = write_traces(tmp_path / "t.jsonl", _header(), [_trace("q1")])
    good = json.loads(path.read_text().splitlines()[1])
    lines = path.read_text().splitlines()
    lines += [
        "{not json",                                                 # 3
        json.dumps([1, 2]),                                          # 4
        json.dumps({**good, "type": "span"}),                        # 5
        json.dumps({**good, "query_id": "q2", "outcome": "maybe"}),  # 6
        json.dumps({**good, "query_id": "q3", "extra_field": 1}),    # 7
        json.dumps(good),                                            # 8 duplicate of line 2
        "",
        json.dumps({**good, "query_id": "q4"}),                      # 10 fine
    ]
    path.write_text("\n".join(lines) + "\n")
    header, traces, problems = read_traces(path)
    assert header is not None and [t.query_id for t in traces] == ["q1", "q4"]
    assert [p.line for p in problems] == [3, 4, 5, 6, 7, 8]
    assert "not valid JSON" in problems[0].message and "outcome" in problems[3].message
    assert "extra_field" in problems[4].message and "duplicate" in problems[5].message
    with pytest.raises(SchemaError) as err:
        read_traces(path, strict=True)
    assert f"{path}:3:" in str(err.value) and f"{path}:8:" in str(err.value)


def test_missing_header_is_a_problem(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"type": "trace", **_trace("q").model_dump(mode="json")}) + "\n")
    header, traces, problems = read_traces(p)
    assert header is None and len(traces) == 1 and problems[0].line == 1 and "no header" in problems[0].message


def test_atomic_writer_leaves_nothing_on_failure(tmp_path):
    path = tmp_path / "t.jsonl"
    with pytest.raises(RuntimeError):
        with TraceWriter(path, _header()) as w:
            w.write(_trace("q1"))
            raise RuntimeError("crash")
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_append_mode_resumes_and_survives_a_torn_line(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, _header(), mode="a") as w:
        w.write(_trace("q1"))
    with path.open("a") as fh:
        fh.write('{"type": "trace", "query_id": "q2", "tra')  # crash mid-record
    with TraceWriter(path, _header(), mode="a") as w:
        assert w.done == {("q1", 0)}
        w.write(_trace("q2"))
    _, traces, problems = read_traces(path)
    assert [t.query_id for t in traces] == ["q1", "q2"] and [p.line for p in problems] == [3]
    with pytest.raises(SchemaError, match="different config"):
        TraceWriter(path, RunHeader(run_name="r", config={"other": 1}), mode="a")


def test_a_latin1_byte_is_one_problem_and_the_other_lines_import(tmp_path):
    path = write_traces(tmp_path / "t.jsonl", _header(), [_trace("q1"), _trace("q2"), _trace("q3")])
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"hello"', b'"h\xe9llo"', 1)  # latin-1 é inside q2's record
    path.write_bytes(b"".join(lines))
    header, traces, problems = read_traces(path)
    assert header is not None and [t.query_id for t in traces] == ["q1", "q3"]
    assert [p.line for p in problems] == [3]
    assert problems[0].message.startswith("not UTF-8 (byte 0xe9 at column")


def test_reader_records_each_trace_line_and_skips_a_byte_order_mark(tmp_path):
    from ragassay.trace import TraceReader

    path = write_traces(tmp_path / "t.jsonl", _header(), [_trace("q1"), _trace("q2")])
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    reader = TraceReader(path)
    assert [t.query_id for t in reader] == ["q1", "q2"]
    assert reader.header is not None and reader.problems == []
    assert reader.lines == {("q1", 0): 2, ("q2", 0): 3}


def test_a_directory_is_named_as_one(tmp_path):
    write_traces(tmp_path / "run.jsonl", _header(), [_trace("q1")])
    with pytest.raises(SchemaError, match=r"is a directory, not a trace file; .*\(it holds run.jsonl\)"):
        read_traces(tmp_path)


def test_deeply_nested_and_overlong_numbers_are_line_problems(tmp_path):
    path = write_traces(tmp_path / "t.jsonl", _header(), [_trace("q1")])
    with path.open("a") as fh:
        fh.write("[" * 100_000 + "]" * 100_000 + "\n")
        fh.write('{"type": "trace", "trial": ' + "9" * 5000 + "}\n")
    _, traces, problems = read_traces(path)
    assert [t.query_id for t in traces] == ["q1"] and [p.line for p in problems] == [3, 4]
    assert all(p.message.startswith(("JSON nested too deeply", "not valid JSON")) for p in problems)


def test_batch_reader_reports_what_the_plain_reader_reports(tmp_path):
    from ragassay.trace.io import TraceBatchReader, TraceReader

    unit = '{"unit_id": "u", "doc_id": "d", "start": %s, "end": 9}'
    lines = [
        b'\xef\xbb\xbf{"type": "header", "run_name": "r"}',
        b'{"type": "trace", "trace_id": "t", "query_id": "a", "fused": [' + (unit % "1").encode() + b']}',
        b'{"type": "trace", "trace_id": "t", "query_id": "b", "fused": [' + (unit % '"2"').encode() + b']}',
        b'{"type": "trace", "trace_id": "t", "query_id": "c", "fused": [' + (unit % "1180591620717411303424").encode()
        + b']}',
        b'{"type": "trace", "trace_id": "t", "query_id": "d", "fused": [' + (unit % "true").encode() + b']}',
        b'{"type": "trace", "trace_id": "t", "query_id": "e", "fused": [{"unit_id": "u", "doc_id": "d", '
        b'"start": 0, "end": 1, "score": NaN}]}',
        b'{"type": "trace", "trace_id": "t", "query_id": "a"}',
        b'   ',
        b'{"type": "trace", "query_id": "\xff"}',
        b'[1, 2]',
        b'{"type": "trace", "trace_id": "t", "query_id": "f", "packed": [' + (unit % "1").encode()[:-1]
        + b', "tokens": 4}], "packed_tokens": 5}',
        b'{"type": "trace", "trace_id": "t", "query_id": "g", "fused": [' + (unit % "1").encode()[:-1]
        + b', "colour": 1}]}',
    ]
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    plain = TraceReader(path)
    traces = list(plain)
    for size in (1, 3, 100):
        fast = TraceBatchReader(path, size)
        batches = list(fast)
        assert fast.problems == plain.problems and fast.lines == plain.lines
        assert fast.header.model_dump(exclude={"created"}) == plain.header.model_dump(exclude={"created"})
        assert fast.n_records == plain.n_records
        got = [(m.key, ln) for b in batches for m, ln in zip(b.traces, b.lines, strict=True)]
        assert got == [(t.key, plain.lines[t.key]) for t in traces]
        starts = [int(x) for b in batches for x in b.units.start]
        assert starts == [u.start for t in traces for _, us in t.unit_lists() for u in us]
    assert {p.line for p in plain.problems} == {4, 7, 9, 10, 11, 12}


def _columns_equal(a, b):
    import numpy as np

    assert (a[0].keys, a[0].fields, a[0].unit_id, a[0].doc_id, a[0].text) == \
        (b[0].keys, b[0].fields, b[0].unit_id, b[0].doc_id, b[0].text)
    for name in ("lengths", "start", "end", "score", "has_score", "rank"):
        x, y = getattr(a[0], name), getattr(b[0], name)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), name
    assert np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2], equal_nan=True)


def test_arrow_unit_columns_equal_the_dict_path_on_random_records():
    import math
    import random

    import numpy as np

    from ragassay.trace.io import _arrow_columns, _columns, _strip

    rng = random.Random(7)
    _LISTS = ("fused", "reranked", "packed", "cut")

    def unit(i):
        u = {"unit_id": f"u{i}", "doc_id": rng.choice(["d1", "d2", "é3"]), "start": rng.randrange(0, 50),
             "end": rng.randrange(50, 99)}
        for key, value in (("score", rng.choice([1, 0.25, -3.5, None])), ("rank", rng.choice([i + 1, 9, 2**53])),
                           ("text", rng.choice(["x", "naïve", None])), ("tokens", rng.randrange(0, 4))):
            if rng.random() < 0.6:
                u[key] = value
        return u

    for _ in range(20):
        cands, blobs = [], {}
        for line in range(1, rng.randrange(1, 12)):
            rec = {"trace_id": f"t{line}", "query_id": f"q{line}"}
            names = rng.sample(["sparse", "dense", "kw"], rng.randrange(0, 4))
            if names:
                rec["branches"] = {n: [unit(i) for i in range(rng.randrange(0, 4))] for n in names}
            for name in ("fused", "reranked", "packed", "cut"):
                if rng.random() < 0.7:
                    rec[name] = [unit(i) for i in range(rng.randrange(0, 6))]
            if rng.random() < 0.2:
                rec["reranked"] = None
            blobs[line] = json.dumps(rec).encode() + b"\n"
            cands.append((line, rec, Trace.model_validate(_strip(rec))))
        want = _columns(cands)
        got = _arrow_columns(cands, blobs)
        if not len(want[0].lengths):
            assert got is None
            continue
        _columns_equal(got, want)
        # and both hold each unit's rank as the record has it (the json module's dicts are the oracle)
        ranks = [u.get("rank", math.nan) for _, rec, _ in cands
                 for us in [*(rec.get("branches") or {}).values(), *(rec.get(n) or [] for n in _LISTS)] for u in us]
        assert np.array_equal(want[0].rank, np.asarray(ranks, dtype=np.float64), equal_nan=True)


@pytest.mark.parametrize("bad", [{"start": 1.0}, {"colour": 1}, {"unit_id": "2020-01-01"}, {"unit_id": ""},
                                 {"rank": 0}, {"tokens": -1}, {"score": True}, {"text": 5}, {"end": 2**63}])
def test_arrow_path_hands_back_what_it_cannot_check(bad):
    from ragassay.trace.io import _arrow_columns, _strip

    def cand(**kw):
        rec = {"trace_id": "t", "query_id": "q", "fused": [{"unit_id": "u", "doc_id": "d", "start": 0, "end": 5, **kw}]}
        return [(1, rec, Trace.model_validate(_strip(rec)))], {1: json.dumps(rec).encode()}

    assert _arrow_columns(*cand()) is not None
    assert _arrow_columns(*cand(**bad)) is None


def test_batch_reader_parses_ahead_on_threads_in_order_and_stops_them_when_closed(tmp_path, monkeypatch):
    import threading

    import ragassay.trace.io as tio

    path = tmp_path / "t.jsonl"
    write_traces(path, _header(), [_trace(f"q{i}") for i in range(40)])
    seen = []
    real = tio._read_fast

    def spy(pending):
        seen.append((threading.current_thread().name, pending[0][0]))
        return real(pending)

    monkeypatch.setattr(tio, "_read_fast", spy)
    reader = tio.TraceBatchReader(path, 4)
    got = [m.query_id for b in reader for m in b.traces]
    assert got == [f"q{i}" for i in range(40)]  # file order, whatever thread parsed a batch
    assert sorted(first for _, first in seen) == list(range(1, 42, 4))
    assert {name.split("_")[0] for name, _ in seen} == {"ragassay-parse"}
    batches = iter(tio.TraceBatchReader(path, 4))
    next(batches)
    batches.close()  # a consumer that stops: the parse threads end with it
    assert not any(t.name.startswith("ragassay-parse") for t in threading.enumerate())


def test_a_failed_parse_is_raised_after_the_batches_before_it(tmp_path, monkeypatch):
    import ragassay.trace.io as tio

    path = tmp_path / "t.jsonl"
    write_traces(path, _header(), [_trace(f"q{i}") for i in range(20)])
    real = tio._read_fast

    def failing(pending):
        if pending[0][0] == 9:
            raise MemoryError("batch 3")
        return real(pending)

    monkeypatch.setattr(tio, "_read_fast", failing)
    got = []
    with pytest.raises(MemoryError, match="batch 3"):
        for b in tio.TraceBatchReader(path, 4):
            got.extend(m.query_id for m in b.traces)
    assert got == [f"q{i}" for i in range(7)]  # lines 2-8: the two batches before the failing one


@pytest.mark.parametrize("value", [2**70, -(2**70), 2**64, 18446744073709551615])
def test_an_integer_wider_than_64_bits_in_meta_stays_an_int_in_both_readers(tmp_path, value):
    from ragassay.trace.io import TraceBatchReader, TraceReader

    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"type": "header", "run_name": "r"}) + "\n"
                    + json.dumps({"type": "trace", "trace_id": "t", "query_id": "a", "meta": {"n": value}}) + "\n"
                    + json.dumps({"type": "trace", "trace_id": "u", "query_id": "b", "meta": {"n": 1}}) + "\n")
    (plain,) = [t for t in TraceReader(path) if t.query_id == "a"]
    (fast,) = [t for b in TraceBatchReader(path, 8) for t in b.traces if t.query_id == "a"]
    assert plain.meta == fast.meta == {"n": value}
    assert type(fast.meta["n"]) is int


@pytest.mark.parametrize("score", [float("nan"), float("inf"), 1e-05, 0.1 + 0.2, 5e-324, -0.0])
def test_a_written_trace_line_is_json_dumps_of_its_model_dump(tmp_path, score):
    """The writer's fast serializer gives the bytes json.dumps gives (compact, UTF-8) up to float spelling,
    and a non-finite score stays NaN / Infinity on disk, so validation still sees it."""
    u = Unit(unit_id="d:0-5", doc_id="d", start=0, end=5, score=score, rank=1, text="héllo", tokens=1)
    t = Trace(trace_id="q-0", query_id="q", trial=0, fused=[u], packed=[u], packed_tokens=1, answer="é",
              citations=["d:0-5"], outcome="answered", durations_ms={"total": 1.0})
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, _header(), mode="a") as w:
        w.write_all([t])
    line = path.read_text(encoding="utf-8").splitlines()[1]
    want = json.dumps({"type": "trace", **t.model_dump(mode="json")}, ensure_ascii=False, separators=(",", ":"))
    got, expected = json.loads(line), json.loads(want)
    assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)  # NaN == NaN as text
    assert "é" in line and ": " not in line
    back = read_traces(path)[1][0].fused[0].score
    assert (back != back) if score != score else back == score


def test_a_batch_torn_mid_write_resumes_after_its_last_whole_line(tmp_path):
    """write_all syncs once per batch: a crash inside the batch leaves whole lines and at most one partial last
    line; the next append reads the whole ones as done, starts after the partial one, and only that line is a
    problem."""
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, _header(), mode="a") as w:
        w.write_all([_trace("q1"), _trace("q2"), _trace("q3")])
        assert w.done == {("q1", 0), ("q2", 0), ("q3", 0)}
    whole = path.read_bytes()
    cut = whole.rfind(b'"query_id":"q3"')
    path.write_bytes(whole[:cut])  # the crash: q3's line torn inside, q1 and q2 on disk
    with TraceWriter(path, _header(), mode="a") as w:
        assert w.done == {("q1", 0), ("q2", 0)}
        w.write_all([t for t in (_trace("q2"), _trace("q3"), _trace("q4")) if t.key not in w.done])
    _, traces, problems = read_traces(path)
    assert [t.query_id for t in traces] == ["q1", "q2", "q3", "q4"] and [p.line for p in problems] == [4]
    assert path.read_text(encoding="utf-8").count("\n") == 6  # header, q1, q2, torn q3, q3, q4


def test_a_batch_with_a_trace_that_cannot_be_written_writes_none_and_marks_none_done(tmp_path):
    path = tmp_path / "t.jsonl"
    bad = _trace("q2").model_copy(update={"answer": "a\ud800"})  # a lone surrogate has no UTF-8 form
    with TraceWriter(path, _header(), mode="a") as w:
        w.write_all([_trace("q1")])
        with pytest.raises(ValueError):
            w.write_all([_trace("q3"), bad])
        assert w.done == {("q1", 0)}
    assert [t.query_id for t in read_traces(path)[1]] == ["q1"]


def test_a_trace_line_is_byte_for_byte_json_dumps_of_its_model_dump_for_ordinary_values(tmp_path):
    """The fast serializer's bytes are json.dumps's (compact, UTF-8, keys in field order) for the values a run
    writes; only the spelling of floats below 1e-4 differs (see the parametrized test above)."""
    u = Unit(unit_id="d:0-5", doc_id="d", start=0, end=5, score=0.1 + 0.2, rank=1, text="héllo ✓ \"q\" \\ \n",
             tokens=1)
    t = Trace(trace_id="q-0", query_id="q", trial=0, branches={"bm25": [u]}, fused=[u], reranked=None,
              packed=[u], packed_tokens=1, answer="</script> é", citations=[{"unit_id": "d:0-5", "start": 0,
                                                                              "end": 2}],
              outcome="answered", durations_ms={"total": 12.5, "bm25": 0.0}, tokens_in=3, cost=1e-3,
              meta={"n": 2**70, "x": [1, None, True], "score": float("nan"), "big": 1e300})
    path = write_traces(tmp_path / "t.jsonl", _header(), [t])
    line = path.read_text(encoding="utf-8").splitlines()[1]
    assert line == json.dumps({"type": "trace", **t.model_dump(mode="json")}, ensure_ascii=False,
                              separators=(",", ":"))
