"""Malformed input to `ragassay score` / `run --traces` / `run --traces-dir`: every bad unit, line, header and
flag ends as a counted problem in the run record or as a clean error — never a traceback, never a bad unit
scored as "not relevant" without a count, never a user file lost.

The world is a two-document corpus whose raw files differ from their canonical text (CRLF, indentation,
double spaces), so raw-file offsets are wrong in a way that can be seen.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from tests.malformed.conftest import tree_digest

from ragassay.analysis.demo import demo_config_dir
from ragassay.corpus import load_corpus
from ragassay.golden import build_golden

RAW = {
    "grep": "GREP(1)\r\n\r\nNAME\r\n    grep  -  print lines that match patterns\r\n\r\nDESCRIPTION\r\n"
            "   grep searches for PATTERNS in each FILE.\r\n",
    "sed": "SED(1)\r\n\r\nNAME\r\n    sed  -  stream editor for filtering and transforming text\r\n",
}
GOLDEN = """
dataset: tools
queries:
  - query_id: q1
    question: What does grep print?
    stratum: lexical
    evidence:
      - {doc_id: grep, quote: "print lines that match patterns", grade: 3}
    reference_answer: lines that match patterns
  - query_id: q2
    question: What is sed?
    stratum: lexical
    evidence:
      - {doc_id: sed, quote: "stream editor", grade: 2}
    reference_answer: a stream editor
  - query_id: n1
    question: Does grep compress files?
    stratum: negative
    answerable: false
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    docs = root / "corpus"
    docs.mkdir()
    for doc_id, raw in RAW.items():
        (docs / f"{doc_id}.txt").write_bytes(raw.encode())
    (root / "golden.yaml").write_text(GOLDEN)
    corpus = load_corpus(docs)
    golden = build_golden(root / "golden.yaml", corpus, root / "golden")
    return {"root": root, "corpus": corpus, "golden": golden}


def _unit(corpus, uid: str, doc: str, phrase: str, **kw) -> dict:
    text = corpus[doc].text
    s = text.index(phrase)
    return {"unit_id": uid, "doc_id": doc, "start": s, "end": s + len(phrase), "score": 1.0, "text": phrase,
            "tokens": len(phrase.split()), **kw}


def _records(world) -> list[dict]:
    """A clean trace file as records: header, then q1, q2, n1 (lines 1-4)."""
    c, g = world["corpus"], world["golden"]
    q1 = [_unit(c, "g1", "grep", "print lines that match patterns"), _unit(c, "g2", "grep", "DESCRIPTION")]
    q2 = [_unit(c, "s1", "sed", "stream editor"), _unit(c, "s2", "sed", "SED(1)")]
    n1 = [_unit(c, "g3", "grep", "grep searches")]
    header = {"type": "header", "run_name": "tool-rag", "config": {"reranker": {"kind": "none", "final_k": 2}},
              "corpus_digest": c.digest, "dataset_version": g.dataset_version}

    def trace(qid, units):
        fresh = lambda: copy.deepcopy(units)  # noqa: E731 - every list gets its own unit dicts
        return {"type": "trace", "trace_id": f"t-{qid}", "query_id": qid, "trial": 0, "branches": {"bm25": fresh()},
                "fused": fresh(), "packed": fresh()[:1], "packed_tokens": units[0]["tokens"], "cut": fresh()[1:],
                "answer": "x", "outcome": "answered", "durations_ms": {"total": 3.0}}

    return [header, trace("q1", q1), trace("q2", q2), trace("n1", n1)]


def _write(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def _score(cli, world, path: Path, *extra: str, store: str = "s.duckdb"):
    r = cli("score", path, "--golden", world["root"] / "golden", "--corpus", world["root"] / "corpus",
            "--store", path.parent / store, "--json", *extra)
    return r


def _imported(r) -> dict:
    assert r.code == 0, r.err
    assert "Traceback" not in r.out + r.err
    return json.loads(r.out)


def test_the_clean_file_scores_perfectly(cli, world, tmp_path):
    out = _imported(_score(cli, world, _write(tmp_path / "t.jsonl", _records(world))))
    extra = out["run"]["extra"]
    assert (extra["unit_failures"], extra["unit_failure_examples"], extra["schema_failures"]) == (0, [], 0)
    metrics = {m["metric"]: m for m in out["summary"]["metrics"]}
    assert metrics["recall@fusion_depth"]["mean"] == 1.0 and metrics["recall@fusion_depth"]["n_undefined"] == 1
    # judged fraction: q1 and q2 have 1 of 2 top units on a labelled span; n1 has no labels at all
    assert out["summary"]["judged_fraction"] == {"mean": pytest.approx(1 / 3), "n": 3, "n_undefined": 0}


# ---- bad units: (mutation on the q1 trace (line 2), failures expected, fragment of the first example) ----

def _set(field, i, **changes):
    def f(recs, world):
        lst = recs[1]
        for part in field.split("."):
            lst = lst[part]
        lst[i].update(changes)
    return f


def _raw_offsets(with_text: bool):
    def f(recs, world):
        doc = world["corpus"]["grep"]
        u = recs[1]["fused"][0]
        s, e = doc.raw_span(u["start"], u["end"])
        u.update(start=s, end=e, text=doc.raw[s:e] if with_text else None)
    return f


def _raw_past_end(recs, world):
    doc = world["corpus"]["grep"]
    recs[1]["fused"][0].update(start=len(doc.text) + 2, end=len(doc.raw) - 1, text=None)


def _dup(by: str):
    def f(recs, world):
        first = copy.deepcopy(recs[1]["fused"][0])
        if by == "span":
            first["unit_id"] = "other-id"
        else:
            first.update(start=0, end=4, text="GREP")
        recs[1]["fused"].append(first)
    return f


def _reranked(recs, world):
    units = copy.deepcopy(recs[1]["fused"])
    units[1]["doc_id"] = "grep.md"
    recs[1]["reranked"] = units


def _two_bad(recs, world):
    recs[1]["fused"][0]["score"] = float("nan")
    recs[1]["fused"][1]["doc_id"] = "awk"


def _bad_in_two_traces(recs, world):
    recs[1]["fused"][1]["end"] = 10 ** 6
    recs[3]["fused"][0]["start"] = -4


UNIT_CASES = {
    "doc with a file extension": (_set("fused", 0, doc_id="grep.txt"), 1,
                                  "fused[0]: doc 'grep.txt' is not in the corpus (did you mean 'grep'?)"),
    "doc in other letter case": (_set("fused", 0, doc_id="GREP"), 1, "(did you mean 'grep'?)"),
    "unknown doc": (_set("fused", 0, doc_id="awk"), 1, "doc 'awk' is not in the corpus"),
    "doc under a folder": (_set("fused", 0, doc_id="man/grep.txt"), 1, "doc 'man/grep.txt' is not in the corpus"),
    "negative start": (_set("fused", 0, start=-1, text=None), 1, "start -1 is negative"),
    "end before start": (_set("fused", 0, start=10, end=3, text=None), 1, "end 3 < start 10"),
    "end past the document": (_set("fused", 0, start=0, end=5000, text=None), 1,
                              "span [0, 5000) runs past the end of doc 'grep' (107 characters)"),
    "raw offsets with text": (_raw_offsets(True), 1, "offsets look like raw-file offsets; traces must use "
                                                     "canonical offsets, see docs/traces.md"),
    "raw offsets past the canonical end": (_raw_past_end, 1, "offsets look like raw-file offsets"),
    "text not the span's text": (_set("fused", 0, text="print lines that match PATTERNS"), 1,
                                 "text does not match the canonical text of doc 'grep' at [21, 52)"),
    "text of another length": (_set("fused", 0, text="print"), 1, "(text has 5 characters, the span 31)"),
    "NaN score": (_set("fused", 0, score=float("nan")), 1, "score nan is not a finite number"),
    "infinite score": (_set("fused", 0, score=float("inf")), 1, "score inf is not a finite number"),
    "minus infinite score": (_set("fused", 1, score=float("-inf")), 1, "fused[1]: score -inf is not a finite"),
    "unit listed twice by id": (_dup("id"), 1, "fused[2]: unit 'g1' repeats fused[0]"),
    "unit listed twice by span": (_dup("span"), 1, "fused[2]: unit 'other-id' repeats fused[0]"),
    "bad unit in a branch": (_set("branches.bm25", 1, doc_id="grep.txt"), 1, "branches.bm25[1]: doc 'grep.txt'"),
    "bad unit in the reranked list": (_reranked, 1, "reranked[1]: doc 'grep.md' is not in the corpus (did you"),
    "bad unit in the packed context": (_set("packed", 0, start=3, end=1, text=None), 1, "packed[0]: end 1 < start 3"),
    "bad unit in the cut list": (_set("cut", 0, doc_id="sed.txt"), 1, "cut[0]: doc 'sed.txt'"),
    "two bad units in one trace": (_two_bad, 2, "fused[0]: score nan"),
    "bad units in two traces": (_bad_in_two_traces, 2, "fused[1]: span [54, 1000000) runs past the end"),
}


@pytest.mark.parametrize("case", list(UNIT_CASES))
def test_every_bad_unit_is_counted_with_its_line(cli, world, tmp_path, case):
    mutate, n_bad, fragment = UNIT_CASES[case]
    recs = _records(world)
    mutate(recs, world)
    path = _write(tmp_path / "t.jsonl", recs)
    out = _imported(_score(cli, world, path))
    extra = out["run"]["extra"]
    assert extra["unit_failures"] == n_bad == out["import"]["unit_failures"]
    assert len(extra["unit_failure_examples"]) == n_bad and extra["schema_failures"] == 0
    first = extra["unit_failure_examples"][0]
    assert first.startswith(f"{path}:2: query q1 trial 0 "), first
    assert fragment in first, first


def test_a_bad_unit_on_the_evidence_is_not_credited(cli, world, tmp_path):
    recs = _records(world)
    for field in ("fused", "branches"):
        units = recs[1][field] if field == "fused" else recs[1][field]["bm25"]
        units[0]["doc_id"] = "grep.txt"  # the unit that covers q1's only evidence span
    out = _imported(_score(cli, world, _write(tmp_path / "t.jsonl", recs)))
    assert out["run"]["extra"]["unit_failures"] == 2
    metrics = {m["metric"]: m for m in out["summary"]["metrics"]}
    assert metrics["recall@fusion_depth"]["mean"] == 0.5  # q1 0 (not credited), q2 1; n1 undefined


# ---- bad lines: (mutation of the file's lines, schema failures expected, fragment, traces imported) ----

def _replace_line(i, text):
    def f(lines):
        lines[i] = text
    return f


def _edit_trace(i, **changes):
    def f(lines):
        rec = json.loads(lines[i])
        rec.update(changes)
        lines[i] = json.dumps(rec)
    return f


def _drop_key(i, key):
    def f(lines):
        rec = json.loads(lines[i])
        del rec[key]
        lines[i] = json.dumps(rec)
    return f


def _append(text):
    def f(lines):
        lines.append(text)
    return f


def _header_late(lines):
    lines.append(lines.pop(0))


def _no_header(lines):
    lines.pop(0)


def _torn(lines):
    lines[3] = lines[3][: len(lines[3]) // 2]


def _packed_tokens_off(lines):
    rec = json.loads(lines[2])
    rec["packed_tokens"] += 7
    lines[2] = json.dumps(rec)


LINE_CASES = {
    "invalid JSON": (_replace_line(2, "{not json"), 1, "3: not valid JSON", 2),
    "a JSON array": (_replace_line(2, "[1, 2]"), 1, "3: expected a JSON object, got list", 2),
    "a JSON string": (_replace_line(2, '"trace"'), 1, "expected a JSON object, got str", 2),
    "a bare number": (_replace_line(2, "42"), 1, "expected a JSON object, got int", 2),
    "unknown record type": (_edit_trace(2, type="span"), 1, "unknown record type 'span'", 2),
    "no record type": (_edit_trace(2, type=None), 1, "unknown record type None", 2),
    "missing trace_id": (_drop_key(2, "trace_id"), 1, "trace_id: Field required", 2),
    "missing query_id": (_drop_key(2, "query_id"), 1, "query_id: Field required", 2),
    "unknown field": (_edit_trace(2, extra_field=1), 1, "extra_field: Extra inputs are not permitted", 2),
    "unknown outcome": (_edit_trace(2, outcome="maybe"), 1, "3: outcome:", 2),
    "answered without an answer": (_edit_trace(2, answer=None), 1, "outcome 'answered' needs an 'answer'", 2),
    "error without a message": (_edit_trace(2, outcome="error"), 1, "outcome 'error' needs an 'error'", 2),
    "negative trial": (_edit_trace(2, trial=-1), 1, "trial:", 2),
    "NaN duration": (_edit_trace(2, durations_ms={"total": float("nan")}), 1, "durations_ms.total", 2),
    "negative duration": (_edit_trace(2, durations_ms={"total": -1.0}), 1, "durations_ms.total", 2),
    "infinite cost": (_edit_trace(2, cost=float("inf")), 1, "cost:", 2),
    "negative cost": (_edit_trace(2, cost=-0.5), 1, "cost:", 2),
    "packed_tokens off the unit sum": (_packed_tokens_off, 1, "packed_tokens", 2),
    "an offset beyond 64 bits": (_replace_line(2, json.dumps({"type": "trace", "trace_id": "t", "query_id": "q2",
                                                              "fused": [{"unit_id": "u", "doc_id": "sed",
                                                                         "start": 10 ** 20, "end": 10 ** 20}]})),
                                 1, "fused.0.start", 2),
    "a fractional offset": (_replace_line(2, json.dumps({"type": "trace", "trace_id": "t", "query_id": "q2",
                                                         "fused": [{"unit_id": "u", "doc_id": "sed",
                                                                    "start": 1.5, "end": 3}]})),
                            1, "fused.0.start", 2),
    "an empty doc_id": (_replace_line(2, json.dumps({"type": "trace", "trace_id": "t", "query_id": "q2",
                                                     "fused": [{"unit_id": "u", "doc_id": "", "start": 0,
                                                                "end": 3}]})), 1, "fused.0.doc_id", 2),
    "duplicate (query, trial)": (_append(None), 1, "5: duplicate trace for query 'q1' trial 0 (first at line 2)", 3),
    "header after the first line": (_header_late, 2, "header record after the first line", 3),
    "no header": (_no_header, 1, "1: no header record on line 1", 3),
    "torn last line": (_torn, 1, "4: not valid JSON", 2),
    "JSON nested too deeply": (_append("[" * 50_000 + "]" * 50_000), 1, "5: JSON nested too deeply", 3),
    "an integer literal too long": (_append('{"type": "trace", "trial": ' + "7" * 6000 + "}"), 1,
                                    "5: not valid JSON", 3),
    "a header with a wrong config_sha": (_edit_trace(0, config_sha="0" * 64), 1, "1: bad header: ", 3),
    "a header without run_name": (_drop_key(0, "run_name"), 1, "1: bad header: run_name", 3),
}


@pytest.mark.parametrize("case", list(LINE_CASES))
def test_every_bad_line_is_a_counted_problem(cli, world, tmp_path, case):
    mutate, n_bad, fragment, n_traces = LINE_CASES[case]
    lines = [json.dumps(r) for r in _records(world)]
    if case == "duplicate (query, trial)":
        lines.append(lines[1])
    else:
        mutate(lines)
    path = _write(tmp_path / "t.jsonl", lines)
    out = _imported(_score(cli, world, path))
    extra = out["run"]["extra"]
    assert extra["schema_failures"] == n_bad == len(extra["problems"]), extra["problems"]
    assert out["import"]["n_traces"] == n_traces
    assert any(fragment in p for p in extra["problems"]), (fragment, extra["problems"])
    assert all(p.startswith(f"{path}:") for p in extra["problems"])


ENCODING_CASES = {
    "one latin-1 byte": (lambda b: b.replace(b'"answer": "x"', b'"answer": "\xe9"', 1), 1,
                         "2: not UTF-8 (byte 0xe9 at column", 2),
    "a UTF-8 byte-order mark": (lambda b: b"\xef\xbb\xbf" + b, 0, None, 3),
    "CRLF line ends": (lambda b: b.replace(b"\n", b"\r\n"), 0, None, 3),
    "a NUL byte": (lambda b: b.replace(b'"answer": "x"', b'"answer": "\x00"', 1), 1, "2: not valid JSON", 2),
    "a lone surrogate escape": (lambda b: b.replace(b'"answer": "x"', b'"answer": "\\ud800"', 1), 0, None, 3),
    "blank lines between records": (lambda b: b.replace(b"\n", b"\n\n  \n"), 0, None, 3),
}


@pytest.mark.parametrize("case", list(ENCODING_CASES))
def test_encodings_are_handled_line_by_line(cli, world, tmp_path, case):
    mutate, n_bad, fragment, n_traces = ENCODING_CASES[case]
    path = _write(tmp_path / "t.jsonl", _records(world))
    path.write_bytes(mutate(path.read_bytes()))
    out = _imported(_score(cli, world, path))
    assert out["run"]["extra"]["schema_failures"] == n_bad and out["import"]["n_traces"] == n_traces
    if fragment:
        assert fragment in out["run"]["extra"]["problems"][0]


def test_a_utf16_file_is_reported_not_imported(cli, world, tmp_path):
    path = _write(tmp_path / "t.jsonl", _records(world))
    path.write_bytes(path.read_text().encode("utf-16"))
    out = _imported(_score(cli, world, path))
    problems = out["run"]["extra"]["problems"]
    assert out["import"]["n_traces"] == 0
    assert f"{path}:1: not UTF-8 (byte 0xff at column 1); re-encode the file as UTF-8" in problems
    assert f"{path}:1: no header record on line 1; run pins are unknown" in problems


# ---- pins in the header ----

@pytest.mark.parametrize("pin,value", [("corpus_digest", "sha256:" + "0" * 64), ("dataset_version", "tools@old")])
def test_a_header_pinned_to_other_data_is_refused(cli, world, tmp_path, pin, value):
    recs = _records(world)
    recs[0][pin] = value
    path = _write(tmp_path / "t.jsonl", recs)
    _score(cli, world, path).assert_clean_error(f"{path}:1: the trace header's {pin} '{value}' differs",
                                                "--allow-pin-mismatch")
    assert not (tmp_path / "s.duckdb").exists() or json.loads(cli("runs", "--store", tmp_path / "s.duckdb",
                                                                   "--json").out) == []


def test_a_pin_mismatch_can_be_allowed_and_is_recorded(cli, world, tmp_path):
    recs = _records(world)
    recs[0]["dataset_version"] = "tools@old"
    out = _imported(_score(cli, world, _write(tmp_path / "t.jsonl", recs), "--allow-pin-mismatch"))
    assert out["run"]["extra"]["pin_mismatch"] == {
        "dataset_version": {"traces": "tools@old", "golden": world["golden"].dataset_version}}


# ---- bad flags and paths: clean errors ----

FLAG_CASES = {
    "threshold above the grade scale": (["--threshold", "9"], "relevance threshold 9 is outside the grade scale"),
    "threshold 0": (["--threshold", "0"], "relevance threshold 0 is outside the grade scale"),
    "negative threshold": (["--threshold", "-1"], "relevance threshold -1 is outside"),
    "unknown hit rule": (["--hit-rule", "some_overlap"], "unknown hit rule 'some_overlap'"),
    "hit-rule fraction above 1": (["--hit-rule", "min_fraction:2"], "the fraction must be in (0, 1]"),
    "hit-rule fraction not a number": (["--hit-rule", "min_fraction:half"], "the fraction must be in (0, 1]"),
    "unknown gain": (["--gain", "cubic"], "unknown gain 'cubic'; use exp or linear"),
}


@pytest.mark.parametrize("case", list(FLAG_CASES))
@pytest.mark.parametrize("command", ["score", "run --traces"])
def test_bad_scoring_flags_are_clean_errors(cli, world, tmp_path, case, command):
    args, fragment = FLAG_CASES[case]
    path = _write(tmp_path / "t.jsonl", _records(world))
    common = ["--golden", world["root"] / "golden", "--corpus", world["root"] / "corpus",
              "--store", tmp_path / "s.duckdb", *args]
    r = (cli("score", path, *common) if command == "score"
         else cli("run", demo_config_dir() / "bm25.yaml", "--traces", path, *common))
    r.assert_clean_error(fragment)
    assert not (tmp_path / "s.duckdb").exists()


def test_score_of_a_directory_says_so(cli, world, tmp_path):
    _write(tmp_path / "run.jsonl", _records(world))
    _score(cli, world, tmp_path).assert_clean_error(f"{tmp_path}: is a directory, not a trace file",
                                                    "(it holds run.jsonl)")


def test_run_traces_of_a_directory_says_so(cli, world, tmp_path):
    r = cli("run", demo_config_dir() / "bm25.yaml", "--traces", tmp_path, "--golden", world["root"] / "golden",
            "--corpus", world["root"] / "corpus", "--store", tmp_path / "s.duckdb")
    r.assert_clean_error("is a directory, not a trace file")


def test_score_of_a_missing_file(cli, world, tmp_path):
    _score(cli, world, tmp_path / "nope.jsonl").assert_clean_error("trace file not found")


@pytest.mark.parametrize("kind", ["a file", "a foreign folder"])
def test_traces_dir_never_clobbers_user_files(cli, world, tmp_path, kind):
    target = tmp_path / "mine"
    if kind == "a file":
        target.write_text("my notes\n")
    else:
        target.mkdir()
        (target / "notes.txt").write_text("keep me\n")
    before = tree_digest(tmp_path)
    r = cli("run", demo_config_dir() / "bm25.yaml", "--traces-dir", target, "--golden", world["root"] / "golden",
            "--corpus", world["root"] / "corpus", "--store", tmp_path / "s.duckdb")
    r.assert_clean_error(str(target))
    assert tree_digest(tmp_path) == before


# ---- rich markup in user text ----

@pytest.mark.parametrize("name", ["[/bold]", "[red]x", "[link=file:///etc]y[/link]", "a]b[", "[/]"])
def test_markup_in_a_run_name_prints_verbatim(cli, world, tmp_path, name):
    path = _write(tmp_path / "t.jsonl", _records(world))
    r = cli("score", path, "--golden", world["root"] / "golden", "--corpus", world["root"] / "corpus",
            "--store", tmp_path / "s.duckdb", "--name", name)
    assert r.code == 0 and "Traceback" not in r.err, r.err
    assert r.out.startswith(name + " run ")
    table = cli("runs", "--store", tmp_path / "s.duckdb")
    assert table.code == 0 and "Traceback" not in table.err and "tools@" in table.out
    listing = cli("runs", "--store", tmp_path / "s.duckdb", "--json")
    assert [r["name"] for r in json.loads(listing.out)] == [name]
