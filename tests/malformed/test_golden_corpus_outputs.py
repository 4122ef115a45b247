"""Malformed golden sources, corpora, built sets and output paths: each ends as one clean error (exit 2,
``error:`` lines naming the file) with nothing written and no byte of the user's files changed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tests.analysis.conftest import make_run
from tests.malformed.conftest import tree_digest

GOOD = """dataset: tiny
queries:
  - query_id: q1
    question: Who may obtain a copy?
    stratum: lexical
    evidence:
      - {doc_id: mit, quote: "to any person obtaining a copy", grade: 3}
  - query_id: q2
    question: Is there a warranty?
    stratum: negative
    answerable: false
"""
MIT = b"Permission is hereby granted, free of charge, to any person obtaining a copy.\n"
LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
) + "queries: []\n"


def _ws(tmp_path: Path) -> Path:
    """A user's working folder: a corpus, a notes file, and nothing else."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "mit.txt").write_bytes(MIT)
    (tmp_path / "notes.txt").write_text("my notes\n")
    return tmp_path


def _sub(old: str, new: str) -> bytes:
    assert old in GOOD
    return GOOD.replace(old, new).encode()


# name -> (authoring file bytes, file name, fragment expected in stderr (after the file path))
SOURCES: dict[str, tuple[bytes, str, str]] = {
    "latin-1": (GOOD.replace("Who", "Qui\xe9").encode("latin-1"), "g.yaml", ": not UTF-8 text (byte 0xE9 at offset"),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00", "g.yaml", ": not UTF-8 text (byte 0x89 at offset 0)"),
    "nul byte": (GOOD.replace("tiny", "ti\x00ny").encode(), "g.yaml", ":1: control character U+0000"),
    "utf-16": (GOOD.encode("utf-16-le"), "g.yaml", ":1: control character U+0000 at offset 1"),
    "billion laughs": (LAUGHS.encode(), "g.yaml", ": YAML aliases expand"),
    "recursive alias": (b"dataset: &d [1, *d]\nqueries: []\n", "g.yaml", ":1: recursive YAML alias"),
    "duplicate query key": (_sub("    stratum: lexical\n", "    stratum: lexical\n    stratum: paraphrase\n"),
                            "g.yaml", ":6: key 'stratum' given twice (first at line 5)"),
    "duplicate top key": (b"dataset: a\n" + GOOD.encode(), "g.yaml", ":2: key 'dataset' given twice"),
    "python tag": (b"dataset: !!python/object/apply:os.system [ls]\nqueries: []\n", "g.yaml",
                   ":1: invalid YAML in the golden set (could not determine a constructor"),
    "syntax error": (b"queries:\n  - [\n", "g.yaml", ":3: invalid YAML in the golden set"),
    "deep nesting": (b"[" * 20000 + b"]" * 20000, "g.yaml", ":1: invalid YAML in the golden set"),
    "empty file": (b"", "g.yaml", ":1: the file holds no YAML document"),
    "only comments": (b"# todo\n", "g.yaml", ":1: the file holds no YAML document"),
    "scalar root": (b"hello\n", "g.yaml", ":1: got a str; expected a list of queries"),
    "no queries key": (b"dataset: x\n", "g.yaml", ":1: no `queries:` key"),
    "queries null": (b"dataset: x\nqueries:\n", "g.yaml", ":2: `queries:` must be a list of queries, got nothing"),
    "queries mapping": (b"queries: {a: 1}\n", "g.yaml", ":1: `queries:` must be a list of queries, got a dict"),
    "queries empty": (b"queries: []\n", "g.yaml", ":1: no queries"),
    "unknown top key": (b"colour: red\n" + GOOD.encode(), "g.yaml", ":1: unknown top-level key(s) ['colour']"),
    "non-string top key": (b"7: x\n" + GOOD.encode(), "g.yaml", ":1: unknown top-level key(s) ['7']"),
    "grade as string": (_sub("grade: 3", 'grade: "3"'), "g.yaml", ":7: q1: evidence.0.grade: Input should be a valid integer"),
    "grade as float": (_sub("grade: 3", "grade: 2.5"), "g.yaml", ":7: q1: evidence.0.grade: Input should be a valid integer"),
    "grade as bool": (_sub("grade: 3", "grade: true"), "g.yaml", ":7: q1: evidence.0.grade: Input should be a valid integer"),
    "grade out of range": (_sub("grade: 3", "grade: 7"), "g.yaml", ":7: q1: evidence grade 7 out of range 0–3"),
    "grade negative": (_sub("grade: 3", "grade: -1"), "g.yaml", ":7: q1: evidence grade -1 out of range 0–3"),
    "occurrence as string": (_sub("grade: 3", 'grade: 3, occurrence: "1"'), "g.yaml",
                             ":7: q1: evidence.0.occurrence: Input should be a valid integer"),
    "occurrence zero": (_sub("grade: 3", "grade: 3, occurrence: 0"), "g.yaml",
                        ":7: q1: evidence.0.occurrence: Input should be greater than or equal to 1"),
    "answerable as string": (_sub("    answerable: false", '    answerable: "false"'), "g.yaml",
                             ":8: q2: answerable: Input should be a valid boolean"),
    "evidence not a list": (_sub('      - {doc_id: mit, quote: "to any person obtaining a copy", grade: 3}\n',
                                 "      {doc_id: mit}\n"), "g.yaml", ":3: q1: evidence: Input should be a valid list"),
    "evidence item a string": (_sub('{doc_id: mit, quote: "to any person obtaining a copy", grade: 3}', "mit"),
                               "g.yaml", ":7: q1: evidence.0: Input should be a valid dictionary"),
    "query a string": (GOOD.encode() + b"  - just text\n", "g.yaml", ":12: ?: each query must be a mapping"),
    "blank question": (_sub("Who may obtain a copy?", '"   "'), "g.yaml",
                       ":3: q1: question: Value error, must contain non-whitespace text"),
    "query id with a space": (_sub("query_id: q1", "query_id: q 1"), "g.yaml",
                              ":3: q 1: query_id: Value error, must be non-empty, without whitespace"),
    "missing question": (_sub("    question: Who may obtain a copy?\n", ""), "g.yaml", ":3: q1: question: Field required"),
    "unknown query field": (_sub("    stratum: lexical\n", "    stratum: lexical\n    colour: red\n"), "g.yaml",
                            ":3: q1: colour: Extra inputs are not permitted"),
    "created as number": (_sub("    stratum: lexical\n", "    stratum: lexical\n    created: 20261129\n"), "g.yaml",
                          ":3: q1: created: Value error, must be a date written as YYYY-MM-DD"),
    "duplicate query id": (_sub("query_id: q2", "query_id: q1"), "g.yaml", ":8: q1: duplicate query_id"),
    "unknown doc": (_sub("doc_id: mit", "doc_id: mitt"), "g.yaml", ":7: q1: unknown doc_id 'mitt' (closest doc id: 'mit')"),
    "quote not found": (_sub("to any person obtaining", "to every person obtaining"), "g.yaml",
                        ":7: q1: quote not found in doc mit (closest match"),
    "same quote twice": (_sub('grade: 3}\n', 'grade: 3}\n      - {doc_id: mit, quote: "to any person obtaining a copy", '
                                             'grade: 1}\n'), "g.yaml", ":8: q1: the same quote from doc mit is given twice"),
    "negative with evidence": (_sub("    answerable: false\n", "    answerable: false\n    evidence: [{doc_id: mit, "
                                    "quote: free of charge, grade: 1}]\n"), "g.yaml", ":8: q2: negative (answerable: false)"),
    "annotators a string": (_sub("dataset: tiny", "dataset: tiny\nannotators: a1"), "g.yaml",
                            ":2: annotators: Input should be a valid list"),
    "kappa out of range": (_sub("dataset: tiny", "dataset: tiny\nkappa_binary: 1.7"), "g.yaml",
                           ":2: kappa_binary: Input should be less than or equal to 1"),
    "kappa a string": (_sub("dataset: tiny", "dataset: tiny\nkappa_graded: high"), "g.yaml",
                       ":2: kappa_graded: Value error, must be a number between -1 and 1"),
    "hit rule unknown": (_sub("dataset: tiny", "dataset: tiny\nhit_rule: nearest"), "g.yaml",
                         ":2: unknown hit rule 'nearest'"),
    "threshold zero": (_sub("dataset: tiny", "dataset: tiny\nrelevance_threshold: 0"), "g.yaml",
                       ":2: relevance_threshold: Input should be greater than or equal to 1"),
    "generator a string": (_sub("dataset: tiny", "dataset: tiny\ngenerator: gpt"), "g.yaml",
                           ":2: generator: Input should be a valid dictionary"),
    "jsonl bad json": (b'{"query_id": "q1",\n', "g.jsonl", ":1: invalid JSON"),
    "jsonl duplicate key": (b'{"query_id": "q1", "query_id": "q2"}\n', "g.jsonl", ":1: key 'query_id' given twice"),
    "jsonl latin-1": ('{"query_id": "q\xe9"}\n'.encode("latin-1"), "g.jsonl", ": not UTF-8 text (byte 0xE9 at offset 15)"),
    "jsonl late meta": (b'{"query_id": "q1", "question": "x", "stratum": "negative", "answerable": false}\n'
                        b'{"type": "meta", "dataset": "x"}\n', "g.jsonl", ":2: the meta line must come before"),
    "jsonl unknown type": (b'{"type": "comment"}\n', "g.jsonl", ":1: unknown record type 'comment'"),
    "jsonl meta types": (b'{"type": "meta", "annotators": "a1"}\n{"query_id": "q1"}\n', "g.jsonl",
                         ":1: annotators: Input should be a valid list"),
    "unsupported suffix": (GOOD.encode(), "g.txt", ": unsupported golden-set format '.txt'"),
}


@pytest.mark.parametrize("case", list(SOURCES), ids=list(SOURCES))
def test_bad_golden_source_is_one_clean_error_and_nothing_is_written(cli, tmp_path, monkeypatch, case):
    data, name, fragment = SOURCES[case]
    monkeypatch.chdir(_ws(tmp_path))
    Path(name).write_bytes(data)
    before = tree_digest(tmp_path)
    res = cli("golden", "build", name, "--corpus", "docs", "-o", "out")
    res.assert_clean_error(name + fragment)
    assert not Path("out").exists() and tree_digest(tmp_path) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


# name -> (files of the corpus, relative --corpus argument, fragment)
CORPORA: dict[str, tuple[dict[str, bytes], str, str]] = {
    "nul bytes": ({"c/mit.txt": MIT, "c/img.txt": b"\x89PNG\x00\x00"}, "c",
                  "c/img.txt: contains NUL bytes (first at offset 4)"),
    "utf-16 without bom": ({"c/mit.txt": MIT.decode().encode("utf-16-le")}, "c", "c/mit.txt: contains NUL bytes"),
    "utf-32 with bom": ({"c/mit.txt": MIT.decode().encode("utf-32")}, "c", "c/mit.txt: contains NUL bytes"),
    "latin-1": ({"c/mit.txt": MIT, "c/fr.md": "caf\xe9".encode("latin-1")}, "c",
                "c/fr.md: not UTF-8 text (byte 0xE9 at offset 3)"),
    "bad utf-16 after bom": ({"c/mit.txt": b"\xff\xfe" + "ab".encode("utf-16-le") + b"\x00\xd8"}, "c",
                             "c/mit.txt: not valid UTF-16-LE text"),
    "empty folder": ({"c/.keep": b""}, "c", "c: no .txt, .md, .html, .htm files found"),
    "missing": ({}, "nowhere", "nowhere: no such file or directory"),
    "single text file": ({"one.txt": MIT}, "one.txt", "one.txt: a corpus is a folder"),
    "duplicate doc id": ({"c/mit.txt": MIT, "c/mit.md": MIT}, "c", "doc_id 'mit' is also produced by"),
    "jsonl bad line": ({"c.jsonl": b'{"doc_id": "mit", "text": "x"}\n{oops\n'}, "c.jsonl", "c.jsonl:2: invalid JSON"),
    "jsonl duplicate id": ({"c.jsonl": b'{"doc_id": "mit", "text": "x"}\n{"doc_id": "mit", "text": "y"}\n'},
                           "c.jsonl", "c.jsonl:2: doc_id 'mit' already given at line 1"),
    "jsonl duplicate key": ({"c.jsonl": b'{"doc_id": "mit", "text": "x", "text": "y"}\n'}, "c.jsonl",
                            "c.jsonl:1: key 'text' given twice"),
    "jsonl text not a string": ({"c.jsonl": b'{"doc_id": "mit", "text": 5}\n'}, "c.jsonl",
                                "c.jsonl:1: doc 'mit' has missing or non-string 'text'"),
    "jsonl unknown format": ({"c.jsonl": b'{"doc_id": "mit", "text": "x", "format": "pdf"}\n'}, "c.jsonl",
                             "c.jsonl:1: doc 'mit' has format 'pdf'"),
    "jsonl latin-1": ({"c.jsonl": b'{"doc_id": "mit", "text": "caf\xe9"}\n'}, "c.jsonl",
                      "c.jsonl: not UTF-8 text (byte 0xE9 at offset 30)"),
    "jsonl nul escape": ({"c.jsonl": b'{"doc_id": "mit", "text": "a\\u0000b"}\n'}, "c.jsonl",
                         "c.jsonl:1: doc 'mit' text contains NUL characters"),
    "jsonl not an object": ({"c.jsonl": b'["mit", "x"]\n'}, "c.jsonl", "c.jsonl:1: expected an object"),
}


@pytest.mark.parametrize("case", list(CORPORA), ids=list(CORPORA))
def test_bad_corpus_is_one_clean_error_through_golden_build(cli, tmp_path, monkeypatch, case):
    files, arg, fragment = CORPORA[case]
    monkeypatch.chdir(tmp_path)
    for rel, data in files.items():
        Path(rel).parent.mkdir(parents=True, exist_ok=True)
        Path(rel).write_bytes(data)
    Path("g.yaml").write_text(GOOD)
    before = tree_digest(tmp_path)
    res = cli("golden", "build", "g.yaml", "--corpus", arg, "-o", "out")
    res.assert_clean_error(fragment)
    assert not Path("out").exists() and tree_digest(tmp_path) == before


def test_skipped_corpus_files_are_counted_on_stderr(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(_ws(tmp_path))
    Path("docs/scan.pdf").write_bytes(b"%PDF-1.4")
    Path("g.yaml").write_text(GOOD)
    res = cli("golden", "build", "g.yaml", "--corpus", "docs", "-o", "out", "--json")
    assert res.code == 0 and json.loads(res.out)["n_docs"] == 1
    assert "warning: 1 file(s) in docs not loaded: scan.pdf: unsupported suffix" in res.err


def _built(tmp_path: Path, cli) -> Path:
    Path("g.yaml").write_text(GOOD)
    assert cli("golden", "build", "g.yaml", "--corpus", "docs", "-o", "built").code == 0
    return tmp_path / "built"


def _edit_span(d: Path) -> None:
    lines = (d / "golden.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["evidence"][0]["end"] -= 1
    (d / "golden.jsonl").write_text("\n".join([json.dumps(rec, sort_keys=True), *lines[1:]]) + "\n")


def _edit_manifest(**changes):
    def edit(d: Path) -> None:
        m = json.loads((d / "manifest.json").read_text())
        (d / "manifest.json").write_text(json.dumps({**m, **changes}))
    return edit


# name -> (how to spoil the built set, fragment)
BUILT = {
    "span edited": (_edit_span, "built/golden.jsonl: changed since it was built"),
    "query appended": (lambda d: (d / "golden.jsonl").open("a").write('{"query_id": "x"}\n'),
                       "built/golden.jsonl: changed since it was built"),
    "count edited": (_edit_manifest(n_queries=99), "built/manifest.json: n_queries do(es) not match golden.jsonl"),
    "version edited": (_edit_manifest(dataset_version="tiny@v2"), "is not the content version"),
    "hit rule edited": (_edit_manifest(hit_rule="doc"), "is not the content version"),
    "sha missing": (_edit_manifest(golden_sha256=None), "missing or mistyped field(s) golden_sha256 (str)"),
    "manifest not json": (lambda d: (d / "manifest.json").write_text("{oops"), "built/manifest.json:1: invalid JSON"),
    "manifest an array": (lambda d: (d / "manifest.json").write_text("[]"), "built/manifest.json: expected a JSON object"),
    "manifest latin-1": (lambda d: (d / "manifest.json").write_bytes(b'{"a": "\xe9"}'),
                         "built/manifest.json: not UTF-8 text (byte 0xE9 at offset 7)"),
    "golden.jsonl missing": (lambda d: (d / "golden.jsonl").unlink(), "built: not a built golden set"),
    "golden.jsonl a folder": (lambda d: ((d / "golden.jsonl").unlink(), (d / "golden.jsonl").mkdir()),
                              "built: not a built golden set"),
}


@pytest.mark.parametrize("case", list(BUILT), ids=list(BUILT))
def test_golden_check_refuses_a_spoiled_build(cli, tmp_path, monkeypatch, case):
    monkeypatch.chdir(_ws(tmp_path))
    spoil, fragment = BUILT[case]
    spoil(_built(tmp_path, cli))
    res = cli("golden", "check", "built")
    res.assert_clean_error(fragment)


@pytest.mark.parametrize(("arg", "fragment"), [
    ("notes.txt", "notes.txt: not a built golden set"),
    ("missing", "missing: not a built golden set"),
    ("docs", "docs: not a built golden set"),
])
def test_golden_check_on_something_else(cli, tmp_path, monkeypatch, arg, fragment):
    monkeypatch.chdir(_ws(tmp_path))
    cli("golden", "check", arg).assert_clean_error(fragment)


NOT_EMPTY = "folder is not empty and is not an earlier ragassay"
# name -> (-o argument, fragment); `built` is an earlier golden build, `rep` an earlier report
GOLDEN_OUTS = {
    "the corpus folder": ("docs", f"docs: {NOT_EMPTY} golden output (it holds 1 entry (mit.txt))"),
    "the current folder": (".", f"{NOT_EMPTY} golden output"),
    "an existing file": ("notes.txt", "notes.txt: is an existing file, not a folder; refusing to replace it"),
    "under a file": ("notes.txt/out", "notes.txt is a file, not a folder, so nothing can be created under it"),
    "under /proc": ("/proc/ragassay-out", "/proc/ragassay-out: cannot create the folder"),
    "golden build plus a user file": ("built+", "built: earlier ragassay golden output, but it also holds 1 entry "
                                                "(my-notes.md) that replacing it would delete"),
    "an earlier report": ("rep", f"rep: {NOT_EMPTY} golden output (it holds 1 entry (index.html))"),
}


def _outputs(tmp_path: Path, cli) -> None:
    built = _built(tmp_path, cli)
    rep = tmp_path / "rep"
    rep.mkdir()
    (rep / "index.html").write_text('<meta name="generator" content="ragassay 0.1">')
    if (tmp_path / "built+").exists():
        return
    (built / "my-notes.md").write_text("mine")


@pytest.mark.parametrize("case", list(GOLDEN_OUTS), ids=list(GOLDEN_OUTS))
def test_golden_build_never_replaces_what_it_did_not_write(cli, tmp_path, monkeypatch, case):
    arg, fragment = GOLDEN_OUTS[case]
    monkeypatch.chdir(_ws(tmp_path))
    _outputs(tmp_path, cli)
    arg = "built" if arg == "built+" else arg
    before = tree_digest(tmp_path)
    res = cli("golden", "build", "g.yaml", "--corpus", "docs", "-o", arg)
    res.assert_clean_error(fragment)
    assert tree_digest(tmp_path) == before
    assert not Path("/proc/ragassay-out").exists()


@pytest.fixture(scope="module")
def store_with_run(tmp_path_factory):
    from ragassay.store import Store

    db = tmp_path_factory.mktemp("store") / "r.duckdb"
    with Store.open(db) as st:
        make_run(st, "base", {"ndcg@5": np.linspace(0, 1, 6)})
    return db


# name -> (-o argument, fragment)
FILE_OUTS = {
    "a user's folder": ("docs", f"docs: {NOT_EMPTY} {{kind}} output (it holds 1 entry (mit.txt))"),
    "the current folder": (".", f"{NOT_EMPTY} {{kind}} output"),
    "an existing file": ("notes.txt", "notes.txt: is an existing file, not a folder; refusing to replace it"),
    "under a file": ("notes.txt/out", "notes.txt is a file, not a folder, so nothing can be created under it"),
    "under /proc": ("/proc/ragassay-out", "/proc/ragassay-out: cannot create the folder"),
    "a golden build": ("built", f"built: {NOT_EMPTY} {{kind}} output (it holds 2 entries"),
}


@pytest.mark.parametrize("case", list(FILE_OUTS), ids=list(FILE_OUTS))
def test_export_never_writes_into_what_it_did_not_write(cli, tmp_path, monkeypatch, store_with_run, case):
    arg, fragment = FILE_OUTS[case]
    monkeypatch.chdir(_ws(tmp_path))
    _built(tmp_path, cli)
    before = tree_digest(tmp_path)
    res = cli("export", "--store", str(store_with_run), "-o", arg)
    res.assert_clean_error(fragment.format(kind="export"))
    assert tree_digest(tmp_path) == before


@pytest.mark.parametrize("case", list(FILE_OUTS), ids=list(FILE_OUTS))
def test_report_never_overwrites_what_it_did_not_write(tmp_path, monkeypatch, case):
    from ragassay.errors import InputError
    from ragassay.report import render_report

    arg, fragment = FILE_OUTS[case]
    monkeypatch.chdir(_ws(tmp_path))
    Path("docs/index.html").write_text("<h1>my site</h1>")
    (tmp_path / "built").mkdir()
    (tmp_path / "built" / "golden.jsonl").write_text("{}\n")
    (tmp_path / "built" / "manifest.json").write_text("{}")
    before = tree_digest(tmp_path)
    with pytest.raises(InputError) as e:
        render_report({"title": "t", "runs": [{"name": "r"}]}, arg)
    assert fragment.format(kind="report").replace("1 entry (mit.txt)", "2 entries (index.html, mit.txt)") in str(e.value)
    assert tree_digest(tmp_path) == before
