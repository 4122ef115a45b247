"""The columnar trace reader gives exactly what the line-by-line reader gives, and hands every file it
cannot take as a whole (each kind of problem, and what Arrow and Python's JSON read differently) to it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ragassay.analysis import report_data as rd
from ragassay.report.html import _json_pieces, script_json


def _unit(d, s, e, **kw):
    return {"unit_id": f"{d}#{s}", "doc_id": d, "start": s, "end": e, "score": 0.5, **kw}


def _good_lines(n=40, total=True):
    rng = np.random.default_rng(3)
    out = [json.dumps({"type": "header", "run_name": "x", "durations_ms": {"index": 3.5}})]
    for q in range(n):
        units = [_unit(f"d{int(rng.integers(5))}", 10 * k, 10 * k + 9, **({"text": f"t{q}"} if k == 0 else {}))
                 for k in range(int(rng.integers(0, 8)))]
        rec = {"type": "trace", "trace_id": f"t{q}", "query_id": f"q{q % 30}", "trial": q // 30,
               "fused": units, "packed": units[:2], "outcome": "answered" if q % 4 else "abstained",
               "answer": f"answer {q}" if q % 4 else None, "citations": [], "tokens_in": 5}
        if q % 3 == 0:
            rec["reranked"] = units[::-1][:3]
        if q % 5 == 0:
            rec["reranked"] = []
        rec["durations_ms"] = {"generate": 1.5, **({"total": 9} if total else {})} if q % 2 else {}
        out.append(json.dumps(rec))
    return out


def _both(tmp_path, lines, name="t.jsonl"):
    path = tmp_path / name
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    return rd._read_columns(path), rd._read_lines(path)


def _same(fast, slow):
    assert fast.shown == slow.shown and fast.ranked == slow.ranked
    assert fast.later_trials == slow.later_trials and fast.problems == slow.problems == []
    assert json.dumps(fast.durations) == json.dumps(slow.durations)


@pytest.mark.parametrize("total", [True, False])
def test_columnar_reader_equals_the_line_reader(tmp_path, total):
    fast, slow = _both(tmp_path, _good_lines(total=total))
    assert fast is not None
    _same(fast, slow)
    assert fast.columns.shown_text.count("t3") <= 1 and (fast.durations != []) == total
    # the columns are what the table and curves read; both readers give the same ones
    for k in ("has_ranked", "ranked_offsets", "ranked_start", "shown_offsets", "shown_end"):
        np.testing.assert_array_equal(getattr(fast.columns, k), getattr(slow.columns, k))


def test_blank_lines_crlf_a_bom_and_nan_durations_stay_on_the_columnar_path(tmp_path):
    lines = _good_lines(12)
    lines[0] = "\ufeff" + lines[0]
    lines.insert(3, "")
    lines.insert(5, "   \r")
    lines[6] = lines[6].replace('"generate": 1.5', '"generate": NaN')
    path = tmp_path / "t.jsonl"
    path.write_bytes("\r\n".join(lines).encode("utf-8"))  # no final newline
    fast, slow = rd._read_columns(path), rd._read_lines(path)
    assert fast is not None
    _same(fast, slow)


@pytest.mark.parametrize("change", [
    lambda r: r.update(trial=None),                     # explicit null: a problem, not trial 0
    lambda r: r.update(fused=None, reranked=None),      # "fused must be a list of units"
    lambda r: r.update(packed=None, fused=[], reranked=None),
    lambda r: r.update(trial=-1),
    lambda r: r.update(trial=True),
    lambda r: r.update(query_id=""),
    lambda r: r.update(query_id=5),
    lambda r: r.update(outcome="maybe"),
    lambda r: r.update(outcome="answered", answer=None),
    lambda r: r.update(answer=3),
    lambda r: r.update(type="other"),
    lambda r: r.pop("type"),
    lambda r: r.update(durations_ms={"a": "slow"}),
    lambda r: r.update(durations_ms=[1]),
    lambda r: r.update(reranked=[{"doc_id": "d", "start": "0", "end": 5}]),
    lambda r: r.update(reranked=[{"doc_id": "", "start": 0, "end": 5}]),
    lambda r: r.update(reranked=[{"start": 0, "end": 5}]),
    lambda r: r.update(reranked=[{"doc_id": "d", "start": 0}]),
    lambda r: r.update(reranked=[None]),
    lambda r: r.update(reranked=[{"doc_id": "d", "start": 0, "end": 5, "text": 7}]),
    lambda r: r.update(reranked=[], fused=[], packed=[{"doc_id": "d", "start": 1.5, "end": 2}]),
])
def test_every_problem_goes_to_the_line_reader_with_its_message(tmp_path, change):
    lines = _good_lines(10)
    rec = json.loads(lines[4])
    change(rec)
    lines[4] = json.dumps(rec)
    fast, slow = _both(tmp_path, lines)
    assert fast is None and [line for line, _ in slow.problems] == [5]
    assert rd.read_report_traces(tmp_path / "t.jsonl").problems == slow.problems


@pytest.mark.parametrize("line", [
    '{"type":"trace","query_id":"a"} {"type":"trace","query_id":"b"}',  # two objects: Arrow reads both
    '{"type":"trace","query_id":"a","query_id":"b"}',                   # duplicate key: Python keeps the last
    "[1]", "not json", '{"type":"trace","query_id":"a","x":"\\ud800"}',
])
def test_lines_arrow_and_python_read_differently_take_the_line_reader(tmp_path, line):
    lines = _good_lines(6)
    lines.insert(2, line)
    fast, slow = _both(tmp_path, lines)
    assert fast is None
    assert rd.read_report_traces(tmp_path / "t.jsonl").shown == slow.shown


def test_a_duplicate_query_and_trial_takes_the_line_reader(tmp_path):
    lines = _good_lines(6)
    lines.append(lines[2])
    fast, slow = _both(tmp_path, lines)
    assert fast is None and slow.problems[0][1].startswith("duplicate trace for query 'q1' trial 0")


def test_dropping_the_ranked_lists_keeps_what_the_table_shows(tmp_path):
    fast, _ = _both(tmp_path, _good_lines())
    shown = fast.shown
    fast._shown = None
    fast.drop_ranked()
    assert fast.ranked == {} and fast.shown == shown and not fast.columns.has_ranked.any()


def test_json_pieces_concatenate_to_the_escaped_json():
    obj = {"id": ["q<1>", "q&2\u2028"], "anchor": {1: "a", 3: "b"}, "runs": [
        {"name": "</script>", "metrics": {"m": [0.5, None, 1]}, "retrieved": {"n": [1, 2], "span": [[0]]}}],
        "long": list(range(40)), "empty": {}, "none": None, "nested": [[{"x": [1, {"y": "<!--"}]}]]}
    pieces = list(_json_pieces(obj))
    assert len(pieces) > 10 and "".join(pieces) == script_json(obj)
    assert json.loads("".join(pieces))["anchor"] == {"1": "a", "3": "b"}
