"""The batch reader's Arrow path (records read once, validated as columns) against the plain reader (the
json module and the full pydantic model): the same traces, units, line map and problem messages, on random
records and on hostile lines; and the Arrow path hands back exactly the lines it cannot vouch for."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from ragassay.trace._arrow_batch import read_lines
from ragassay.trace.io import TraceBatchReader, TraceReader
from ragassay.trace.schema import _FACT_COLUMNS, Trace, TraceFacts, UnitColumns

HEADER = b'{"type": "header", "run_name": "r"}'


def _unit(rng: random.Random, i: int, tokens: bool = False) -> dict:
    u = {"unit_id": f"u{rng.randrange(40)}-{i}", "doc_id": rng.choice(["d1", "d2", "é3", "doc#4"]),
         "start": rng.randrange(0, 50), "end": rng.randrange(50, 99)}
    for key, value in (("score", rng.choice([1, 0.25, -3.5, None, 2.5e-7])),
                       ("rank", rng.choice([i + 1, i + 1, 7, 2**53])),
                       ("text", rng.choice(["x", "naïve", None, 'say "hi"'])), ("tokens", rng.randrange(0, 9))):
        if rng.random() < 0.5:
            u[key] = value
    if tokens:
        u["tokens"] = rng.randrange(0, 9)
    return u


def _record(rng: random.Random, q: int, citation_kind: str) -> dict:
    rec: dict = {"type": "trace", "trace_id": f"t{q}", "query_id": f"q{q}"}
    if rng.random() < 0.7:
        rec["trial"] = rng.randrange(0, 3)
    names = rng.sample(["sparse", "dense", "kw"], rng.randrange(0, 4))
    if names:
        rec["branches"] = {n: [_unit(rng, i) for i in range(rng.randrange(0, 4))] for n in names}
    for name in ("fused", "reranked", "cut"):
        if rng.random() < 0.6:
            rec[name] = [_unit(rng, i) for i in range(rng.randrange(0, 6))]
    if rng.random() < 0.1:
        rec["reranked"] = None
    if rng.random() < 0.6:
        all_known = rng.random() < 0.7
        rec["packed"] = [_unit(rng, i, tokens=all_known) for i in range(rng.randrange(0, 4))]
        if all("tokens" in u for u in rec["packed"]):  # the sum the model requires
            rec["packed_tokens"] = sum(u["tokens"] for u in rec["packed"])
        elif rng.random() < 0.5:
            rec["packed_tokens"] = rng.randrange(0, 99)
    outcome = rng.choice([None, "answered", "abstained", "refused", "error", "absent"])
    if outcome != "absent":
        rec["outcome"] = outcome
    if outcome == "answered" or rng.random() < 0.3:
        rec["answer"] = rng.choice(["", "The answer.", 'a "quoted" answer: null', "ünïcode"])
    if outcome == "error" or rng.random() < 0.2:
        rec["error"] = rng.choice(["boom", "timeout"])
    if rng.random() < 0.6:
        if citation_kind == "ids":
            rec["citations"] = [f"u{rng.randrange(9)}" for _ in range(rng.randrange(0, 3))]
        else:
            rec["citations"] = [rng.choice([{"unit_id": "u1"}, {"unit_id": "u2", "doc_id": "d1"},
                                            {"unit_id": "u3", "start": 1, "end": 4},
                                            {"unit_id": "u4", "doc_id": None, "start": 0, "end": 0}])
                                for _ in range(rng.randrange(0, 3))]
    if rng.random() < 0.7:
        keys = rng.sample(["retrieve", "generate", "total"], rng.randrange(0, 4))
        rec["durations_ms"] = {k: rng.choice([12, 0.5, 80.25, 0]) for k in keys}
    for key, value in (("tokens_in", rng.randrange(0, 500)), ("tokens_out", None), ("cost", rng.choice([0.001, 0, 3])),
                       ("question", rng.choice(["why?", None])),
                       ("meta", rng.choice([{}, {"model": "m", "n": [1, 2], "x": {"y": None}}, {"temperature": 0.5}]))):
        if rng.random() < 0.4:
            rec[key] = value
    return rec


def _stripped(t: Trace) -> Trace:
    return t.model_copy(update={"branches": {k: [] for k in t.branches}, "fused": [], "packed": [], "cut": [],
                                "reranked": None if t.reranked is None else []})


def _assert_same_as_plain(path, batch_size: int) -> TraceBatchReader:
    plain = TraceReader(path)
    traces = list(plain)
    fast = TraceBatchReader(path, batch_size)
    batches = list(fast)
    assert fast.problems == plain.problems
    assert fast.lines == plain.lines and fast.n_records == plain.n_records and fast.n_traces == len(traces)
    if plain.header is None:
        assert fast.header is None
    else:
        assert fast.header.model_dump(exclude={"created"}) == plain.header.model_dump(exclude={"created"})
    got = [m for b in batches for m in b.traces]
    assert [m.key for m in got] == [t.key for t in traces]
    for m, t in zip(got, traces, strict=True):
        assert m == _stripped(t), t.key
        assert list(m.branches) == list(t.branches)  # the record's own key order
        assert m.durations_ms == t.durations_ms and m.meta == t.meta and m.citations == t.citations
    assert [ln for b in batches for ln in b.lines] == [plain.lines[t.key] for t in traces]
    want_facts = TraceFacts.from_traces(traces)  # the columns scoring reads, as the models give them
    for name in _FACT_COLUMNS:
        assert [x for b in batches for x in getattr(b.facts, name)] == getattr(want_facts, name), name
    want = UnitColumns.from_traces(traces)
    units = [b.units for b in batches]
    assert [k for u in units for k in u.keys] == list(want.keys)
    assert [f for u in units for f in u.fields] == list(want.fields)
    assert [x for u in units for x in u.unit_id] == list(want.unit_id)
    assert [x for u in units for x in u.doc_id] == list(want.doc_id)
    texts = [x for u in units for x in (u.text if u.text is not None else [None] * len(u.start))]
    assert texts == (list(want.text) if want.text is not None else [None] * len(want.start))
    for name in ("lengths", "start", "end", "score", "has_score"):
        x = np.concatenate([getattr(u, name) for u in units]) if units else np.zeros(0)
        y = getattr(want, name)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), name
        assert all(isinstance(v, np.ndarray) for v in (getattr(u, name) for u in units))
    # each unit's rank as the model read it (NaN where absent), from every read path, aligned with its unit
    rank = np.concatenate([u.rank for u in units]) if units else np.zeros(0)
    want_rank = [np.nan if u.rank is None else u.rank for t in traces for _, us in t.unit_lists() for u in us]
    assert all(u.rank is not None and u.rank.dtype == np.float64 for u in units)
    assert np.array_equal(rank, np.asarray(want_rank, dtype=np.float64), equal_nan=True)
    assert want.rank.dtype == np.float64 and np.array_equal(rank, want.rank, equal_nan=True)
    tok = np.concatenate([b.tokens for b in batches]) if batches else np.zeros(0)
    want_tok = [np.nan if u.tokens is None else u.tokens for t in traces for _, us in t.unit_lists() for u in us]
    assert np.array_equal(tok, np.asarray(want_tok, dtype=float), equal_nan=True)
    for b in batches:
        trace_of = {m.key: i for i, m in enumerate(b.traces)}
        assert [trace_of[k] for k in b.units.keys] == b.list_trace.tolist()
        again = fast.replay(b.span)
        assert again.traces == b.traces and again.lines == b.lines and again.units.unit_id == b.units.unit_id
        assert np.array_equal(again.units.rank, b.units.rank, equal_nan=True)
    return fast


def _write(tmp_path, lines: list[bytes], name: str = "t.jsonl"):
    path = tmp_path / name
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


@pytest.mark.parametrize("seed", range(6))
def test_random_records_read_through_arrow_equal_the_plain_reader(tmp_path, seed):
    rng = random.Random(seed)
    kind = "ids" if seed % 2 else "objects"
    recs = [json.dumps(_record(rng, q, kind), ensure_ascii=seed % 3 == 0).encode() for q in range(150)]
    path = _write(tmp_path, [HEADER, *recs])
    # every record is valid, so the Arrow path takes them all
    part, rest = read_lines(list(enumerate([r + b"\n" for r in recs], start=2)))
    assert rest == [] and len(part.traces) == 150
    for size in (2048, 37):
        _assert_same_as_plain(path, size)


def _clean(q: int) -> bytes:
    return json.dumps({"type": "trace", "trace_id": f"t{q}", "query_id": f"c{q}", "trial": 0,
                       "fused": [{"unit_id": "u", "doc_id": "d", "start": 0, "end": 5, "score": 0.5}],
                       "packed": [{"unit_id": "u", "doc_id": "d", "start": 0, "end": 5, "tokens": 3}],
                       "packed_tokens": 3, "answer": "a", "outcome": "answered", "citations": ["u"],
                       "durations_ms": {"total": 1.5}}).encode()


_T = b'"type": "trace", "trace_id": "t", '
_U = b'{"unit_id": "u", "doc_id": "d", "start": 0, "end": 5'
HOSTILE = {
    "missing trace_id": b'{"type": "trace", "query_id": "h"}',
    "null trace_id": b'{"type": "trace", "trace_id": null, "query_id": "h"}',
    "empty query_id": b'{' + _T + b'"query_id": ""}',
    "null trial": b'{' + _T + b'"query_id": "h", "trial": null}',
    "string trial (coerced)": b'{' + _T + b'"query_id": "h", "trial": "2"}',
    "float trial (coerced)": b'{' + _T + b'"query_id": "h", "trial": 3.0}',
    "negative trial": b'{' + _T + b'"query_id": "h", "trial": -1}',
    "trial past 2**53": b'{' + _T + b'"query_id": "h", "trial": 9007199254740993}',
    "huge trial": b'{' + _T + b'"query_id": "h", "trial": 1180591620717411303424}',
    "NaN score": b'{' + _T + b'"query_id": "h", "fused": [' + _U + b', "score": NaN}]}',
    "Infinity score": b'{' + _T + b'"query_id": "h", "fused": [' + _U + b', "score": -Infinity}]}',
    "int -0 score": b'{' + _T + b'"query_id": "h", "fused": [' + _U + b', "score": -0}]}',
    "float -0.0 score": b'{' + _T + b'"query_id": "h", "fused": [' + _U + b', "score": -0.0}]}',
    "huge int score": b'{' + _T + b'"query_id": "h", "fused": [' + _U + b', "score": 1180591620717411303424}]}',
    "int -0 cost": b'{' + _T + b'"query_id": "h", "cost": -0}',
    "NaN cost": b'{' + _T + b'"query_id": "h", "cost": NaN}',
    "string cost": b'{' + _T + b'"query_id": "h", "cost": "1"}',
    "duplicate top key": b'{' + _T + b'"query_id": "h", "query_id": "h2"}',
    "duplicate unit key": b'{' + _T + b'"query_id": "h", "fused": [' + _U + b', "start": 1}]}',
    "unknown top key": b'{' + _T + b'"query_id": "h", "colour": 1}',
    "unknown top key, null": b'{' + _T + b'"query_id": "h", "colour": null}',
    "unknown unit key": b'{' + _T + b'"query_id": "h", "fused": [' + _U + b', "colour": null}]}',
    "escaped known key": b'{' + _T + b'"query_id": "h", "tri\\u0061l": 4}',
    "escaped null key": b'{' + _T + b'"query_id": "h", "fus\\u0065d": null}',
    "escaped unknown key": b'{' + _T + b'"query_id": "h", "c\\u006flour": 1}',
    "not UTF-8": b'{' + _T + b'"query_id": "\xff"}',
    "lone surrogate": b'{' + _T + b'"query_id": "\\ud800"}',
    "raw tab in a string": b'{' + _T + b'"query_id": "a\tb"}',
    "raw control character in a string": b'{' + _T + b'"query_id": "a\x01b"}',
    "NEL and LINE SEPARATOR in a string": b'{' + _T + b'"query_id": "a\xc2\x85\xe2\x80\xa8b"}',
    "empty line": b"",
    "blank line": b"   \t",
    "header in the middle": HEADER,
    "no type": b'{"trace_id": "t", "query_id": "h"}',
    "unknown type": b'{"type": "span", "trace_id": "t", "query_id": "h"}',
    "array": b"[1, 2]",
    "two objects": b'{' + _T + b'"query_id": "h"} {' + _T + b'"query_id": "h3"}',
    "byte-order mark": b'\xef\xbb\xbf{' + _T + b'"query_id": "h"}',
    "trailing spaces, CR": b'{' + _T + b'"query_id": "h"}  \r',
    "leading space": b' {' + _T + b'"query_id": "h"}',
    "truncated": b'{' + _T + b'"query_id": "h", "fused": [',
    "null fused": b'{' + _T + b'"query_id": "h", "fused": null}',
    "null branches": b'{' + _T + b'"query_id": "h", "branches": null}',
    "null branch": b'{' + _T + b'"query_id": "h", "branches": {"x": null}}',
    "null unit": b'{' + _T + b'"query_id": "h", "fused": [null]}',
    "null citations": b'{' + _T + b'"query_id": "h", "citations": null}',
    "empty citation id": b'{' + _T + b'"query_id": "h", "citations": [""]}',
    "citation start only": b'{' + _T + b'"query_id": "h", "citations": [{"unit_id": "u", "start": 1}]}',
    "citation end < start": b'{' + _T + b'"query_id": "h", "citations": [{"unit_id": "u", "start": 4, "end": 1}]}',
    "unknown citation key": b'{' + _T + b'"query_id": "h", "citations": [{"unit_id": "u", "page": 1}]}',
    "negative duration": b'{' + _T + b'"query_id": "h", "durations_ms": {"total": -1}}',
    "null duration": b'{' + _T + b'"query_id": "h", "durations_ms": {"total": null}}',
    "NaN duration": b'{' + _T + b'"query_id": "h", "durations_ms": {"total": NaN}}',
    "-0 duration": b'{' + _T + b'"query_id": "h", "durations_ms": {"total": -0}}',
    "string duration": b'{' + _T + b'"query_id": "h", "durations_ms": {"total": "5"}}',
    "error without message": b'{' + _T + b'"query_id": "h", "outcome": "error", "error": ""}',
    "answered without answer": b'{' + _T + b'"query_id": "h", "outcome": "answered"}',
    "unknown outcome": b'{' + _T + b'"query_id": "h", "outcome": "maybe"}',
    "packed tokens mismatch": b'{' + _T + b'"query_id": "h", "packed": [' + _U + b', "tokens": 4}], "packed_tokens": 5}',
    "packed tokens partly unknown": b'{' + _T + b'"query_id": "h", "packed": [' + _U + b', "tokens": 4}, '
                                    b'{"unit_id": "v", "doc_id": "d", "start": 0, "end": 1}], "packed_tokens": 5}',
    "meta null": b'{' + _T + b'"query_id": "h", "meta": null}',
    "meta not an object": b'{' + _T + b'"query_id": "h", "meta": 5}',
    "meta nested": b'{' + _T + b'"query_id": "h", "meta": {"a": null, "b": [1, {"c": "d"}], "e": 1e400}}',
    "branches in another order": b'{' + _T + b'"query_id": "h", "branches": {"kw": [' + _U + b'}], "sparse": []}}',
    "branch named fused": b'{' + _T + b'"query_id": "h", "branches": {"fused": [' + _U + b'}]}}',
    "float start (coerced)": b'{' + _T + b'"query_id": "h", "fused": [{"unit_id": "u", "doc_id": "d", '
                             b'"start": 1.0, "end": 5}]}',
    "numeric text": b'{' + _T + b'"query_id": "h", "fused": [' + _U + b', "text": 5}]}',
    "negative tokens": b'{' + _T + b'"query_id": "h", "fused": [' + _U + b', "tokens": -1}]}',
    "rank 0": b'{' + _T + b'"query_id": "h", "fused": [' + _U + b', "rank": 0}]}',
    "numeric question": b'{' + _T + b'"query_id": "h", "question": 5}',
    "tokens_in past 2**53": b'{' + _T + b'"query_id": "h", "tokens_in": 9007199254740993}',
    "answer quoting a null key": b'{' + _T + b'"query_id": "h", "answer": "{\\"trial\\": null}"}',
    "empty reranked": b'{' + _T + b'"query_id": "h", "reranked": []}',
    "deep nesting": b'{' + _T + b'"query_id": "h", "meta": ' + b'[' * 5000 + b']' * 5000 + b'}',
    "duplicate of a clean record": _clean(3),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_line_reads_as_the_plain_reader_reads_it(tmp_path, name):
    lines = [HEADER, *(_clean(q) for q in range(5)), HOSTILE[name], *(_clean(q) for q in range(5, 10))]
    path = _write(tmp_path, lines)
    for size in (1, 2048):
        _assert_same_as_plain(path, size)


def test_all_hostile_lines_in_one_file_and_the_clean_ones_still_take_the_arrow_path(tmp_path):
    rng = random.Random(11)
    clean = [_clean(q) for q in range(600)]
    lines = list(clean)
    for bad in HOSTILE.values():
        lines.insert(rng.randrange(len(lines)), bad)
    path = _write(tmp_path, [HEADER, *lines])
    _assert_same_as_plain(path, 2048)
    numbered = [(i, b + b"\n") for i, b in enumerate(lines, start=2)]
    part, rest = read_lines(numbered)
    # a line Arrow rejects costs at most its piece (64 lines); the checks hand back single rows
    assert len(part.traces) >= 600 - 64 * 8
    assert {b for _, b in rest} >= {b + b"\n" for b in (HOSTILE["not UTF-8"], HOSTILE["two objects"],
                                                        HOSTILE["null fused"], HOSTILE["escaped known key"])}


def test_rows_that_fail_a_column_check_are_handed_back_one_by_one(tmp_path):
    ok = [_clean(q) for q in range(20)]
    flagged = [HOSTILE[k] for k in ("null trial", "packed tokens mismatch", "unknown top key, null",
                                    "escaped null key", "answered without answer", "int -0 score")]
    numbered = [(i, b + b"\n") for i, b in enumerate(ok + flagged, start=2)]
    part, rest = read_lines(numbered)
    assert part.lines.tolist() == list(range(2, 22))
    assert [ln for ln, _ in rest] == list(range(22, 28))


def _dated(q: int, **extra) -> bytes:
    day = f"2024-01-{q % 28 + 1:02d}"
    rec = {"type": "trace", "trace_id": f"{day}T10:00:{q % 60:02d}", "query_id": day, "trial": q // 28,
           "answer": day, "outcome": "answered",
           "fused": [{"unit_id": day, "doc_id": day, "start": 0, "end": 5, "score": 1}], **extra}
    return json.dumps(rec).encode()


@pytest.mark.parametrize("case", ["dates", "int cost", "all-null fields", "float start", "fused not a list"])
def test_pieces_whose_inferred_types_differ_from_the_schema_read_as_the_plain_reader_reads_them(tmp_path, case):
    """Arrow infers a piece's types before they are conformed to the trace schema: strings that all look like
    dates come back as timestamps, integer costs as integers, fields no line has as absent. Each reads as the
    plain reader reads it, and a single bad unit field costs its line, not the piece."""
    n = 200
    if case == "dates":
        lines = [_dated(q) for q in range(n)]
    elif case == "int cost":
        lines = [_dated(q, query_id=f"q{q}", trace_id=f"t{q}", cost=q % 3, tokens_in=5) for q in range(n)]
    elif case == "all-null fields":
        lines = [_dated(q, query_id=f"q{q}", trace_id=f"t{q}", answer=None, outcome=None, cost=None, reranked=None,
                        tokens_in=None, question=None, packed=[]) for q in range(n)]
    elif case == "float start":
        lines = [_clean(q) for q in range(n)]
        lines[77] = HOSTILE["float start (coerced)"]
    else:
        lines = [_clean(q) for q in range(n)]
        lines[3] = b'{' + _T + b'"query_id": "h", "fused": 5}'
    path = _write(tmp_path, [HEADER, *lines])
    _assert_same_as_plain(path, 2048)
    part, rest = read_lines([(i, b + b"\n") for i, b in enumerate(lines, start=2)])
    n_bad = 1 if case in ("float start", "fused not a list") else 0
    assert len(rest) <= 64 * n_bad and len(part.traces) + len(rest) == n
    if case == "dates":
        assert part.traces[0].query_id == "2024-01-01" and part.traces[0].trace_id == "2024-01-01T10:00:00"
    if case == "int cost":
        assert [t.cost for t in part.traces[:3]] == [0.0, 1.0, 2.0] and type(part.traces[1].cost) is float


def test_nulls_finds_every_null_literal_at_every_alignment():
    """The null finder (four-byte compares, one pass per alignment) against ``re.finditer``: every offset,
    ascending, on random bytes rich in the letters of ``null`` and of every length from 0."""
    import re

    from ragassay._arrow_json import null_keys as _null_keys
    from ragassay._arrow_json import null_offsets as _nulls

    rng = random.Random(7)
    for _ in range(3000):
        data = bytes(rng.choice(b'nul l:"x') for _ in range(rng.randrange(0, 40)))
        assert _nulls(data).tolist() == [m.start() for m in re.finditer(b"null", data)]
    assert _null_keys(b'{"a": null, "b":1, "c" :\tnull, "d": "null"}\n{"e":null}') == {b"a", b"c", b"e"}


@pytest.mark.parametrize("flag_bytes", [16, 1 << 18])
def test_eligible_lines_are_those_the_per_line_test_accepts(monkeypatch, flag_bytes):
    """The numpy byte tests that pick the lines Arrow may read, against the plain per-line test: a JSON
    object from first byte to last (any trailing whitespace; the file's last line without a newline) and
    nesting at most _MAX_DEPTH deep (many brackets side by side are fine; deep nesting is not); with
    brackets counted over groups of lines smaller than one line, and over one group."""
    from ragassay import _arrow_json
    from ragassay.trace._arrow_batch import _MAX_DEPTH, _eligible

    monkeypatch.setattr(_arrow_json, "GROUP_BYTES", flag_bytes)

    def plain(blob: bytes) -> bool:
        return (blob[:1] == b"{" and blob.rstrip(b" \t\r\n")[-1:] == b"}"
                and _arrow_json.depth(np.frombuffer(blob, dtype=np.uint8)) <= _MAX_DEPTH)

    d = _MAX_DEPTH
    shapes = [b"", b"\n", b"{}\n", b"{}", b'{"a": 1}\r\n', b'{"a": 1}  \n', b'{"a": 1} x\n', b"[1]\n", b" {}\n",
              b"\xef\xbb\xbf{}\n", b"}\n", b"{\n", b'{"a": [' + b"[]," * (2 * d) + b"[]]}\n",
              b'{"a": ' + b"[" * (d - 1) + b"]" * (d - 1) + b"}\n", b'{"a": ' + b"[" * d + b"]" * d + b"}\n",
              b'{"a": "' + b"{" * (2 * d) + b'"}\n']
    rng = random.Random(3)
    for _ in range(300):
        blobs = [rng.choice(shapes) for _ in range(rng.randrange(0, 12))]
        got = _eligible(blobs, b"".join(blobs)).tolist()
        assert got == [plain(b) for b in blobs], blobs
    assert _eligible([shapes[14]], shapes[14]).tolist() == [False] and _eligible([shapes[13]], shapes[13]).tolist() == [True]


@pytest.mark.parametrize("group_bytes", [1, 7, 1 << 18])
def test_open_brackets_counts_each_lines_brackets_with_gaps_and_empty_lines(monkeypatch, group_bytes):
    """The shared bracket bound (trace and golden readers) against bytes.count per line, on lines with gaps
    between them (the golden reader's lines stop before their newline; a gap may hold brackets that belong
    to no line), empty lines, and groups smaller than one line."""
    from ragassay import _arrow_json

    monkeypatch.setattr(_arrow_json, "GROUP_BYTES", group_bytes)
    rng = random.Random(11)
    for _ in range(300):
        data = bytes(rng.choice(b"{[]}x\n") for _ in range(rng.randrange(0, 60)))
        cuts = sorted(rng.randrange(0, len(data) + 1) for _ in range(2 * rng.randrange(0, 6)))
        starts, ends = np.asarray(cuts[0::2], dtype=np.int64), np.asarray(cuts[1::2], dtype=np.int64)
        got = _arrow_json.open_brackets(np.frombuffer(data, dtype=np.uint8), starts, ends).tolist()
        assert got == [data[s:e].count(b"{") + data[s:e].count(b"[") for s, e in zip(cuts[0::2], cuts[1::2], strict=True)]
