"""Malformed TREC files through ``ragassay trec`` and through every adapter (TREC run, JSONL traces, RAGAS
rows): each ends as a clean error or a counted problem with its line, and the same bad run reads the same
through every entry point."""

from __future__ import annotations

import json
import math

import pytest
from tests.malformed.conftest import tree_digest

from ragassay.corpus import Corpus, Document
from ragassay.errors import InputError
from ragassay.trace import Trace, Unit, format_problems
from ragassay.trace.adapters import traces_from_jsonl, traces_from_ragas_rows, traces_from_trec_run

GOOD_QRELS = b"q1 0 a 1\nq1 0 b 0\nq2 0 c 2\n"
GOOD_RUN = b"q1 Q0 a 1 2.0 t\nq1 Q0 b 2 1.0 t\nq2 Q0 c 1 1.0 t\n"

# (case id, run file bytes, the error line after "error: ") -- every one is rejected by `ragassay trec`
BAD_RUNS = [
    ("five-fields", b"q1 Q0 a 1 2.0 t\nq1 Q0 b 2 1.0\n",
     "run:2: expected 6 fields (qid Q0 docid rank score tag), found 5: 'q1 Q0 b 2 1.0'"),
    ("three-fields", b"q1 a 2.0\n", "run:1: expected 6 fields (qid Q0 docid rank score tag), found 3: 'q1 a 2.0'"),
    ("word-score", b"q1 Q0 a 1 2.0 t\n\nq1 Q0 b 2 high t\n",
     "run:3: field 5 must be a number (qid Q0 docid rank score tag), found 'high'"),
    ("comma-score", b"q1 Q0 a 1 2,5 t\n", "run:1: field 5 must be a number (qid Q0 docid rank score tag), found '2,5'"),
    ("hex-score", b"q1 Q0 a 1 0x10 t\n", "run:1: field 5 must be a number (qid Q0 docid rank score tag), found '0x10'"),
    ("nan-score", b"q1 Q0 a 1 2.0 t\nq1 Q0 b 2 nan t\n",
     "run:2: score nan is not a finite number; every result needs a finite numeric score"),
    ("NaN-score", b"q1 Q0 a 1 NaN t\n", "run:1: score nan is not a finite number; every result needs a finite numeric score"),
    ("inf-score", b"q1 Q0 a 1 2.0 t\nq1 Q0 b 2 inf t\n",
     "run:2: score inf is not a finite number; every result needs a finite numeric score"),
    ("minus-inf-score", b"q1 Q0 a 1 -Infinity t\n",
     "run:1: score -inf is not a finite number; every result needs a finite numeric score"),
    ("doc-ranked-twice", b"q1 Q0 a 1 2.0 t\nq1 Q0 b 2 1.0 t\nq1 Q0 a 3 0.5 t\n",
     "run:3: doc 'a' appears twice in the ranking of query 'q1' (also at run:1); each doc may appear once per query"),
    ("doc-twice-apart", b"q1 Q0 a 1 2.0 t\nq2 Q0 c 1 1.0 t\n# note\nq1 Q0 a 2 0.5 t\n",
     "run:4: doc 'a' appears twice in the ranking of query 'q1' (also at run:1); each doc may appear once per query"),
    ("latin-1", b"q1 Q0 a 1 2.0 t\nq1 Q0 caf\xe9 2 1.0 t\n",
     "run:2: not UTF-8 text (byte 0xe9 at column 10); re-save the file as UTF-8"),
    ("binary", b"q1 Q0 a 1 2.0 t\n\x00\x01\x02 \x03 x y 1 z\n",
     "run:2: contains NUL bytes; this looks like a binary file, not a TREC text file"),
]
EMPTY_RUNS = [
    ("empty", b"", "run: file is empty; expected 'qid Q0 docid rank score tag' lines"),
    ("blank-lines", b"\n  \n\t\n", "run: file is empty; expected 'qid Q0 docid rank score tag' lines"),
    ("only-comments", b"# a header\n# q1 Q0 a 1 2.0 t\n",
     "run: file holds only '#' comment lines; expected 'qid Q0 docid rank score tag' lines"),
]
BAD_QRELS = [
    ("three-fields", b"q1 0 a\n", "qrels:1: expected 4 fields (qid iter docid rel), found 3: 'q1 0 a'"),
    ("five-fields", b"q1 0 a 1\nq1 0 b 0 x\n", "qrels:2: expected 4 fields (qid iter docid rel), found 5: 'q1 0 b 0 x'"),
    ("word-grade", b"q1 0 a high\n", "qrels:1: field 4 must be an integer (qid iter docid rel), found 'high'"),
    ("fraction-grade", b"q1 0 a 1.5\n", "qrels:1: field 4 must be an integer (qid iter docid rel), found '1.5'"),
    ("nan-grade", b"q1 0 a 1\nq1 0 b nan\n", "qrels:2: field 4 must be an integer (qid iter docid rel), found 'nan'"),
    ("hex-grade", b"q1 0 a 0x10\n", "qrels:1: field 4 must be an integer (qid iter docid rel), found '0x10'"),
    ("huge-grade", b"q1 0 a 99999999999999999999\n",
     "qrels:1: field 4 must be an integer (qid iter docid rel), found '99999999999999999999'"),
    ("duplicate-judgment", b"q1 0 a 1\nq2 0 a 1\n\nq1 0 a 0\n",
     "qrels:4: duplicate judgment for query 'q1' doc 'a' (first at qrels:1); keep one line per (query, doc)"),
    ("latin-1", b"q1 0 \xe9t\xe9 1\n", "qrels:1: not UTF-8 text (byte 0xe9 at column 6); re-save the file as UTF-8"),
    ("binary", b"\x00\x00\x00\x00\n", "qrels:1: contains NUL bytes; this looks like a binary file, not a TREC text file"),
    ("empty", b"", "qrels: file is empty; expected 'qid iter docid rel' lines"),
    ("only-comments", b"#q1 0 a 1\n", "qrels: file holds only '#' comment lines; expected 'qid iter docid rel' lines"),
]


def _files(tmp_path, qrels: bytes, run: bytes):
    (tmp_path / "qrels").write_bytes(qrels)
    (tmp_path / "run").write_bytes(run)
    return tmp_path / "qrels", tmp_path / "run"


def _cli_error(cli, tmp_path, qrels, run, *extra):
    """Run `ragassay trec` on a bad input: a clean error, and the input files untouched."""
    before = tree_digest(tmp_path)
    res = cli("trec", qrels, run, *extra)
    assert tree_digest(tmp_path) == before
    return res


@pytest.mark.parametrize(("case", "data", "error"), BAD_RUNS + EMPTY_RUNS, ids=[c[0] for c in BAD_RUNS + EMPTY_RUNS])
def test_trec_cli_rejects_a_bad_run_file(cli, tmp_path, monkeypatch, case, data, error):
    monkeypatch.chdir(tmp_path)
    _files(tmp_path, GOOD_QRELS, data)
    res = _cli_error(cli, tmp_path, "qrels", "run")
    res.assert_clean_error(error)
    assert res.err.splitlines()[0] == f"error: {error}"


@pytest.mark.parametrize(("case", "data", "error"), BAD_QRELS, ids=[c[0] for c in BAD_QRELS])
def test_trec_cli_rejects_a_bad_qrels_file(cli, tmp_path, monkeypatch, case, data, error):
    monkeypatch.chdir(tmp_path)
    _files(tmp_path, data, GOOD_RUN)
    res = _cli_error(cli, tmp_path, "qrels", "run")
    res.assert_clean_error(error)
    assert res.err.splitlines()[0] == f"error: {error}"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("-m", "recall"), "is ambiguous"),
        (("--ties", "float"), "unknown tie rule 'float'"),
        (("--gain", "log"), "unknown gain 'log'"),
        (("--relevance-level", "0"), "relevance_level must be > 0"),
    ],
)
def test_trec_cli_rejects_bad_options(cli, tmp_path, args, fragment):
    qrels, run = _files(tmp_path, GOOD_QRELS, GOOD_RUN)
    _cli_error(cli, tmp_path, qrels, run, *args).assert_clean_error(fragment)


@pytest.mark.parametrize("which", ["qrels", "run"])
def test_trec_cli_missing_or_directory_input(cli, tmp_path, which):
    qrels, run = _files(tmp_path, GOOD_QRELS, GOOD_RUN)
    (qrels if which == "qrels" else run).unlink()
    _cli_error(cli, tmp_path, qrels, run).assert_clean_error(f"{tmp_path / which}: no such")
    (tmp_path / which).mkdir()
    _cli_error(cli, tmp_path, qrels, run).assert_clean_error(f"{tmp_path / which}: no such")


def test_trec_cli_run_without_a_common_query(cli, tmp_path):
    qrels, run = _files(tmp_path, GOOD_QRELS, b"q9 Q0 a 1 1.0 t\n")
    _cli_error(cli, tmp_path, qrels, run).assert_clean_error("shares no query id", "'q9'")


@pytest.mark.parametrize(
    ("run", "ap_q1"),
    [
        (b"# comment\r\nq1\tQ0\ta\t1\t2.0\tt\r\nq1 Q0 b 2 1.0 t\r\nq2 Q0 c 1 1.0 t\r\n", 1.0),
        (b"q1 Q0 b 1 2.0 t extra fields\nq1 Q0 a 2 1.0 t more\nq2 Q0 c 1 1.0 t\n", 0.5),
        (b"   # indented comment\nq1 Q0 b 1 2 t\nq1 Q0 a 2 2 t\nq2 Q0 c 1 1 t\n", 0.5),  # tie: b before a
    ],
    ids=["crlf-tabs-comment", "extra-fields", "indented-comment-and-tie"],
)
def test_trec_cli_accepts_what_trec_eval_accepts_with_the_right_values(cli, tmp_path, run, ap_q1):
    qrels, run_path = _files(tmp_path, GOOD_QRELS, run)
    res = cli("trec", qrels, run_path, "-m", "ap", "--json", "-q")
    assert res.code == 0, res.err
    per_q = json.loads(res.out)["metrics"]["ap"]["per_query"]
    assert per_q == {"q1": ap_q1, "q2": 1.0}


# ---------------------------------------------------------------- the same bad runs through the adapters

CORPUS = Corpus([Document.from_raw(d, f"text of doc {d}") for d in ("a", "b", "c", "café")])


@pytest.mark.parametrize(("case", "data", "error"), BAD_RUNS, ids=[c[0] for c in BAD_RUNS])
def test_trec_adapter_counts_the_problem_the_cli_rejects_with_the_same_line_and_text(
    tmp_path, monkeypatch, case, data, error
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").write_bytes(data)
    _, traces, problems = traces_from_trec_run("run", CORPUS)
    assert format_problems("run", problems).splitlines() == [error]
    # the bad line is skipped, every good one kept
    good = sum(1 for ln in data.split(b"\n") if ln.strip() and not ln.startswith(b"#")) - 1
    assert sum(len(t.fused) for t in traces) == good


@pytest.mark.parametrize(("case", "data", "error"), EMPTY_RUNS, ids=[c[0] for c in EMPTY_RUNS])
def test_trec_adapter_raises_the_clis_error_for_an_empty_run(tmp_path, monkeypatch, case, data, error):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").write_bytes(data)
    with pytest.raises(InputError) as e:
        traces_from_trec_run("run", CORPUS)
    assert str(e.value) == error


def _trace_file(path, *traces: dict) -> None:
    header = {"type": "header", "run_name": "ext", "config": {}}
    path.write_text("\n".join(json.dumps(r) for r in (header, *traces)) + "\n")


def _trace(qid: str, **lists) -> dict:
    t = Trace(trace_id=qid, query_id=qid, **{k: v for k, v in lists.items()})
    return {"type": "trace", **t.model_dump(mode="json")}


def _units(*pairs):
    return [Unit(unit_id=u, doc_id=u, start=0, end=1, score=s) for u, s in pairs]


@pytest.mark.parametrize(
    ("lists", "problem"),
    [
        ({"fused": [("a", 2.0), ("b", float("nan"))]},
         "fused rank 2: score nan is not a finite number; every result needs a finite numeric score"),
        ({"fused": [("a", float("inf"))]},
         "fused rank 1: score inf is not a finite number; every result needs a finite numeric score"),
        ({"branches": {"bm25": [("a", 1.0), ("b", -math.inf)]}},
         "branches.bm25 rank 2: score -inf is not a finite number; every result needs a finite numeric score"),
        ({"fused": [("a", 2.0), ("b", 1.0), ("a", 0.5)]},
         "fused rank 3: unit 'a' appears twice in the ranking of query 'q2' (also at fused rank 1); "
         "each unit may appear once per query"),
        ({"reranked": [("b", None), ("b", None)]},
         "reranked rank 2: unit 'b' appears twice in the ranking of query 'q2' (also at reranked rank 1); "
         "each unit may appear once per query"),
    ],
    ids=["nan", "inf", "branch-minus-inf", "unit-twice", "reranked-twice"],
)
def test_jsonl_adapter_counts_the_run_problems_on_the_trace_line_and_skips_the_trace(tmp_path, lists, problem):
    def build(v):
        return {k: _units(*x) for k, x in v.items()} if isinstance(v, dict) else _units(*v)

    bad = {k: build(v) for k, v in lists.items()}
    path = tmp_path / "t.jsonl"
    _trace_file(path, _trace("q1", fused=_units(("a", 1.0))), _trace("q2", **bad), _trace("q3"))
    _, traces, problems = traces_from_jsonl(path)
    assert [t.query_id for t in traces] == ["q1", "q3"]
    assert problems == [(3, problem)]


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"", "file is empty; expected a header line and one trace per line"),
        (b"\n\n", "file is empty; expected a header line and one trace per line"),
        (b'{"type": "header", "run_name": "caf\xe9"}\n', ":1: not UTF-8 text (byte 0xe9); re-save the file as UTF-8"),
    ],
    ids=["empty", "blank", "latin-1"],
)
def test_jsonl_adapter_rejects_an_unreadable_file(tmp_path, data, error):
    path = tmp_path / "t.jsonl"
    path.write_bytes(data)
    with pytest.raises(InputError) as e:
        traces_from_jsonl(path)
    assert str(e.value) == f"{path}{'' if error.startswith(':') else ': '}{error}"


# ---------------------------------------------------------------- RAGAS rows

RAGAS_CORPUS = Corpus([
    Document.from_raw("fruit", "A banana split and nan bread. Shared line here. Shared line here."),
    Document.from_raw("veg", "Carrots are orange. Shared line here."),
])


@pytest.mark.parametrize(
    ("row", "error"),
    [
        ({"question": "q", "contexts": "A banana split"}, "row 1 (row-1): contexts is a plain string; contexts must "
                                                          "be a list of strings"),
        ({"question": "q", "contexts": None}, "row 1 (row-1): contexts is null; contexts must be a list of strings"),
        ({"question": "q", "contexts": 7}, "row 1 (row-1): contexts is a int; contexts must be a list of strings"),
        ({"question": "q", "contexts": [float("nan")]}, "row 1 (row-1): context 0 is a float (nan); contexts must be "
                                                         "a list of strings"),
        ({"question": "q", "contexts": ["Carrots are orange.", None]}, "row 1 (row-1): context 1 is null"),
        ({"question": "q", "contexts": [["nested"]]}, "row 1 (row-1): context 0 is a list (['nested'])"),
        ({"question": float("nan"), "contexts": []}, "row 1 (row-1): question is a float (nan); question must be a "
                                                      "string"),
        ({"question": None, "contexts": []}, "row 1 (row-1): question is null; question must be a string"),
        ({"question": "q", "contexts": [], "answer": 42}, "row 1 (row-1): answer is a int (42); answer must be a "
                                                          "string"),
        ({"query_id": "x1", "question": "q", "contexts": [], "answer": float("nan")},
         "row 1 (x1): answer is a float (nan); answer must be a string"),
    ],
    ids=["contexts-string", "contexts-null", "contexts-int", "context-nan", "context-null", "context-list",
         "question-nan", "question-null", "answer-int", "answer-nan"],
)
def test_ragas_wrong_types_are_errors_naming_the_row(row, error):
    with pytest.raises(InputError) as e:
        traces_from_ragas_rows([row], RAGAS_CORPUS)
    assert str(e.value).startswith("rows: " + error)


@pytest.mark.parametrize(
    ("name", "data", "error"),
    [
        ("broken.json", b'[{"question": "q",\n "contexts": [}]', "broken.json:2: not valid JSON"),
        ("trailing.json", b'[{"question": "q", "contexts": []},]', "trailing.json:1: not valid JSON"),
        ("cols.json", json.dumps({"question": ["a", "b"], "contexts": [[]]}).encode(),
         "cols.json: columns have different lengths (question: 2, contexts: 1); every column needs one value per row"),
        ("scalar-col.json", json.dumps({"question": "a", "contexts": [[]]}).encode(),
         "scalar-col.json: a column-oriented file needs a list per column; 'question' is a str"),
        ("number.json", b"42", "number.json: expected a JSON list of rows or an object of columns, got int"),
        ("empty.json", b"", "empty.json: file is empty"),
        ("empty-list.json", b"[]", "empty-list.json: no rows"),
        ("latin-1.json", b'[{"question": "caf\xe9", "contexts": []}]', "latin-1.json:1: not UTF-8 text (byte 0xe9)"),
        ("rows.jsonl", b'{"question": "q", "contexts": []}\n{"question": \n', "rows.jsonl:2: not valid JSON"),
    ],
    ids=["broken", "trailing-comma", "unequal-columns", "scalar-column", "top-level-number", "empty-file",
         "empty-list", "latin-1", "jsonl-bad-line"],
)
def test_ragas_broken_files_are_one_clean_file_error(tmp_path, monkeypatch, name, data, error):
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_bytes(data)
    with pytest.raises(InputError) as e:
        traces_from_ragas_rows(name, RAGAS_CORPUS)
    assert str(e.value).startswith(error) and len(str(e.value).splitlines()) == 1


def test_ragas_missing_file_is_an_error(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        traces_from_ragas_rows(tmp_path / "nope.json", RAGAS_CORPUS)


@pytest.mark.parametrize(
    ("row", "problem", "meta"),
    [
        ("not a dict", "row needs 'question' and 'contexts'; skipped", None),
        ({"question": "q"}, "row needs 'question' and 'contexts'; skipped", None),
        ({"question": "q", "contexts": ["Shared line here."]},
         "context 0 of row-1 is ambiguous: found at 3 places (fruit@30, fruit@48, veg@20); "
         "not placed: 'Shared line here.'", {"ambiguous_contexts": 1, "unlocated_contexts": 0, "n_contexts": 1}),
        ({"question": "q", "contexts": ["Quantum chromodynamics lattice gauge"]},
         "context 0 of row-1 not found in the corpus (threshold 90.0): 'Quantum chromodynamics lattice gauge'",
         {"ambiguous_contexts": 0, "unlocated_contexts": 1, "n_contexts": 1}),
    ],
    ids=["row-not-dict", "no-contexts-key", "ambiguous", "unlocatable"],
)
def test_ragas_unusable_rows_and_contexts_are_counted_problems(row, problem, meta):
    if meta is None:
        # a row that cannot become a trace is counted, and a file of nothing but such rows is refused
        _, traces, problems = traces_from_ragas_rows([row, {"question": "q", "contexts": []}], RAGAS_CORPUS)
        assert problems[0] == (1, problem) and len(traces) == 1
        with pytest.raises(InputError, match="none of its 1 row"):
            traces_from_ragas_rows([row], RAGAS_CORPUS)
        return
    _, traces, problems = traces_from_ragas_rows([row], RAGAS_CORPUS)
    assert problems == [(1, problem)]
    assert traces[0].meta == meta and traces[0].packed == []
