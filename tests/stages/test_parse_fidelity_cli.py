"""`ragassay parse` with reference texts and tables (NED, CER, reading-order tau, TEDS), its edge checks, and
span survival only with a golden set on your own documents."""

from __future__ import annotations

import json

import numpy as np
import pytest
from rapidfuzz.distance import Levenshtein
from scipy.stats import kendalltau

from ragassay.cli.app import main
from ragassay.cli.stages import NO_GOLDEN
from ragassay.corpus import bundled_corpus_dir
from ragassay.corpus.survival import (
    parse_fidelity,
    parsed_tables,
    pipe_tables,
    reading_order_tau,
    table_fidelity,
    text_blocks,
    text_fidelity,
)
from ragassay.golden import bundled_golden_source

DOCS = {
    "alpha": "The first paragraph of alpha.\n\nThe second paragraph of alpha.\n\nThe third one.\n",
    "beta": "Beta opens here.\n\nBeta closes here.\n",
    "gamma": "Gamma has no reference at all.\n",
}


def _cli(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    c = capsys.readouterr()
    return code, c.out, c.err


def _json(capsys, *args) -> dict:
    code, out, err = _cli(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def src(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    for doc_id, text in DOCS.items():
        (root / f"{doc_id}.txt").write_text(text)
    return root


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_ned_and_cer_per_doc_equal_rapidfuzz_levenshtein_and_docs_without_reference_are_undefined(capsys, src,
                                                                                                   tmp_path):
    refs = {"alpha": DOCS["alpha"].replace("first", "frist").replace("third", "3rd"),
            "beta": "Beta opens here, and more.\n\nBeta closes here.\n"}
    ref = _jsonl(tmp_path / "ref.jsonl", [{"doc_id": k, "text": v} for k, v in refs.items()])
    out = _json(capsys, "parse", src, "--parser", "table-aware", "--reference-text", ref)
    fid = out["parsers"][0]["fidelity"]
    want = {}
    for doc_id, r in refs.items():
        # plain ASCII with one trailing newline: canonicalization changes neither side
        d = Levenshtein.distance(DOCS[doc_id], r)
        want[doc_id] = (d / len(r), d / max(len(r), len(DOCS[doc_id])))
        got = fid["docs"][doc_id]
        assert got["edit_distance"] == d
        assert (got["cer"], got["ned"]) == pytest.approx(want[doc_id], abs=1e-15)
    assert fid["docs"]["alpha"]["edit_distance"] == 5  # "frist" 2 substitutions, "3rd" for "third" 3 edits
    gamma = fid["docs"]["gamma"]
    assert gamma["ned"] is None and gamma["cer"] is None and gamma["tau"] is None
    s = fid["summary"]["text"]
    assert (s["n_docs_with_reference"], s["n_docs_undefined"]) == (2, 1)
    assert s["cer"] == {"mean": pytest.approx(np.mean([w[0] for w in want.values()])), "n": 2, "n_undefined": 1}
    assert s["ned"]["mean"] == pytest.approx(np.mean([w[1] for w in want.values()]))
    assert fid["summary"]["n_docs"] == 3 and "tables" not in fid["summary"]


def test_reading_order_tau_from_reference_blocks_matches_scipy_kendalltau(capsys, tmp_path):
    blocks = [f"Block number {w} stands alone." for w in ("one", "two", "three", "four", "five")]
    root = tmp_path / "docs"
    root.mkdir()
    # two columns read across: 1 3 2 5; block four is lost; block five's line is broken in two (reflowed)
    (root / "d.txt").write_text(f"{blocks[0]}\n\n{blocks[2]}\n\n{blocks[1]}\n\nBlock number five\nstands alone.\n")
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    (ref_dir / "d.txt").write_text("\n\n".join(blocks) + "\n")
    fid = _json(capsys, "parse", root, "--parser", "naive", "--reference-text", ref_dir)["parsers"][0]["fidelity"]
    d = fid["docs"]["d"]
    want = kendalltau([0, 1, 2, 4], [0, 2, 1, 3]).statistic
    assert d["tau"] == pytest.approx(want, abs=1e-12) and (d["n_found"], d["n_blocks"]) == (4, 5)
    assert fid["summary"]["text"]["tau"] == {"mean": pytest.approx(want), "n": 1, "n_undefined": 0}


def test_reading_order_tau_is_undefined_below_two_found_blocks_and_folds_whitespace():
    assert text_blocks("a b\n\n \n\nc\n\n\n") == ["a b", "c"]
    one = reading_order_tau("only the first block", ["only the first block", "a lost block"])
    assert np.isnan(one["tau"]) and (one["n_found"], one["n_blocks"]) == (1, 2)
    folded = reading_order_tau("x\ny   z", ["x y\nz", "   "])  # line breaks fold to spaces; a blank block is none
    assert np.isnan(folded["tau"]) and (folded["n_found"], folded["n_blocks"]) == (1, 1)


T2 = "<table><thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td>c</td><td>d</td></tr></tbody></table>"


def test_teds_from_the_cli_matches_hand_worked_tables(capsys, tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "page.html").write_text(f"<html><body><p>Intro.</p>{T2}<p>After.</p></body></html>")
    (root / "plain.txt").write_text("No tables here.\n")
    # the reference differs in one cell: after splicing out thead/tbody each side is table + 2 tr + 4 td = 7
    # nodes, and renaming cell "d" to "x" costs 1, so TEDS = 1 - 1/7 while structure-only TEDS stays 1
    ref = _jsonl(tmp_path / "tables.jsonl", [{"doc_id": "page", "html": T2.replace(">d<", ">x<")}])
    out = {p["parser"]: p["fidelity"] for p in _json(capsys, "parse", root, "--reference-tables", ref)["parsers"]}
    aware = out["table-aware"]["docs"]["page"]
    assert aware["teds"] == pytest.approx(1 - 1 / 7) and aware["teds_struct"] == 1.0
    assert (aware["n_tables"], aware["n_parsed_tables"], aware["n_unmatched"], aware["n_extra"]) == (1, 1, 0, 0)
    # the naive stripper glues the cells ("ab", "cd"): no table survives, and a lost table scores 0
    naive = out["naive"]["docs"]["page"]
    assert (naive["teds"], naive["teds_struct"], naive["n_unmatched"], naive["n_parsed_tables"]) == (0.0, 0.0, 1, 0)
    assert out["naive"]["docs"]["plain"]["teds"] is None and out["naive"]["docs"]["plain"]["tables"] is None
    s = out["table-aware"]["summary"]["tables"]
    assert (s["n_docs_with_reference"], s["n_docs_undefined"], s["n_tables"]) == (1, 1, 1)
    assert s["teds"] == {"mean": pytest.approx(1 - 1 / 7), "n": 1, "n_undefined": 0}


def test_tables_are_paired_by_best_total_teds_and_pipe_tables_read_markdown():
    a = "<table><tr><td>1</td><td>2</td></tr></table>"
    b = "<table><tr><td>x</td></tr><tr><td>y</td></tr></table>"
    # the parse prints b first and adds a third table: pairing follows content, not position
    parse = "| x |\n|---|\n| y |\n\ntext\n\n1 | 2\n\ntext\n\nq | r | s\n"
    assert [len(t.children) for t in pipe_tables(parse)] == [2, 1, 1]
    res = table_fidelity(parse, a + b)
    assert [t["parsed_index"] for t in res["tables"]] == [1, 0]
    assert res["teds"] == 1.0 and (res["n_unmatched"], res["n_extra"]) == (0, 1)
    # two reference tables, one in the parse: the lost one scores 0
    lost = table_fidelity("1 | 2\n", a + b)
    assert [t["teds"] for t in lost["tables"]] == [1.0, 0.0] and lost["teds"] == 0.5
    # HTML tables in a parse are used as they are, row groups spliced out
    assert [c.tag for c in parsed_tables(T2)[0].children] == ["tr", "tr"]
    assert np.isnan(table_fidelity("1 | 2", "<p>no table</p>")["teds"])


def test_terminal_shows_fidelity_means_and_counts_undefined_documents(capsys, src, tmp_path):
    ref = _jsonl(tmp_path / "ref.jsonl", [{"doc_id": "alpha", "text": DOCS["alpha"]},
                                          {"doc_id": "beta", "text": "Beta closes here.\n\nBeta opens here.\n"}])
    code, out, err = _cli(capsys, "parse", src, "--parser", "naive", "--reference-text", ref)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == NO_GOLDEN
    mean = [c for c in next(x for x in lines if x.split()[:1] == ["mean"]).split() if c != "│"]
    ned_beta = Levenshtein.distance(DOCS["beta"], "Beta closes here.\n\nBeta opens here.\n") / len(DOCS["beta"])
    assert mean[1:4] == [f"{ned_beta / 2:.3f}", f"{ned_beta / 2:.3f}", "0.000"]  # tau +1 and -1
    assert "1 of 3 documents have no reference text: NED, CER and τ undefined for them, left out of the " \
           "means" in out
    assert not any(x.split()[:1] == ["gamma"] for x in lines)  # a document without reference gets no row


def _bad(capsys, *args) -> list[str]:
    code, out, err = _cli(capsys, *args)
    assert code == 2 and out == "" and "Traceback" not in err, err
    return err.splitlines()


def test_bad_reference_files_get_one_error_line_each_with_file_line_and_fix(capsys, src, tmp_path):
    ref = tmp_path / "ref.jsonl"
    ref.write_text('{"doc_id": "alpa", "text": "x"}\nnot json\n{"doc_id": "beta", "text": "  "}\n'
                   '{"doc_id": "alpha", "text": "a"}\n{"doc_id": "alpha", "text": "b"}\n[1]\n')
    tables = _jsonl(tmp_path / "t.jsonl", [{"doc_id": "alpha", "html": "<p>no table</p>"}])
    assert _bad(capsys, "parse", src, "--reference-text", ref, "--reference-tables", tables) == [
        f"error: {ref}:1: doc_id 'alpa' is not a document of the parse (closest: 'alpha'); a doc_id is the "
        "source file's relative path without its suffix",
        f"error: {ref}:2: invalid JSON (Expecting value); write one JSON object per line",
        f"error: {ref}:3: empty reference plain text for doc 'beta'; give it or leave the document out",
        f"error: {ref}:5: doc_id 'alpha' already given at {ref}:4; give each document once",
        f"error: {ref}:6: expected an object with string doc_id and text, e.g. "
        '{"doc_id": "alpha", "text": "..."}',
        f"error: {tables}:1: no <table> element for doc 'alpha'; give the tables as HTML markup"]


def test_empty_and_missing_reference_files_and_folders_are_refused(capsys, src, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    folder = tmp_path / "ref"
    folder.mkdir()
    (folder / "alpha.txt").write_text("")
    assert _bad(capsys, "parse", src, "--reference-text", empty, "--reference-tables", tmp_path / "none") == [
        f'error: {empty}: empty file; pass a folder of .txt files or a .jsonl file of {{"doc_id": ..., '
        '"text": ...} lines',
        f"error: {tmp_path / 'none'}: no such file or folder; pass a folder of .html/.htm files or a .jsonl "
        'file of {"doc_id": ..., "html": ...} lines']
    assert _bad(capsys, "parse", src, "--reference-text", folder, "--reference-tables", folder) == [
        f"error: {folder / 'alpha.txt'}: empty reference plain text for doc 'alpha'; give it or leave the "
        "document out",
        f'error: {folder}: no .html/.htm files found; pass a folder of .html/.htm files or a .jsonl file of '
        '{"doc_id": ..., "html": ...} lines']


def test_own_documents_without_golden_skip_span_survival_and_say_why(capsys, src):
    out = _json(capsys, "parse", src)
    assert out["span_survival_skipped"] == NO_GOLDEN == "no golden set given: span survival needs --golden"
    assert [p["parser"] for p in out["parsers"]] == ["table-aware", "naive"]
    for p in out["parsers"]:
        assert "by_stratum" not in p and sorted(p["proxies"]) == ["alpha", "beta", "gamma"]
        assert p["fidelity"] is None
    code, text, err = _cli(capsys, "parse", src)
    assert code == 0 and err == "" and text.splitlines()[0] == NO_GOLDEN and "span survival," not in text


def test_own_documents_with_golden_measure_span_survival(capsys):
    out = _json(capsys, "parse", bundled_corpus_dir(), "--golden", bundled_golden_source(), "--parser", "naive")
    assert out["span_survival_skipped"] is None
    assert {"by_stratum", "by_format", "missing_docs", "lost"} <= set(out["parsers"][0])
    tab = {r["group"]: r for r in out["parsers"][0]["by_stratum"]}["tabular"]
    assert (tab["n"], tab["n_lost"]) == (38, 18)


def test_bundled_default_measures_survival_and_corpus_without_golden_is_refused(capsys, src):
    out = _json(capsys, "parse", "--parser", "table-aware")
    assert out["span_survival_skipped"] is None and out["parsers"][0]["by_stratum"][-1]["n"] == 282
    assert _bad(capsys, "parse", src, "--corpus", src) == [
        "error: --corpus names the corpus a --golden set was built on; pass --golden as well, or drop --corpus"]


def test_bundled_table_as_reference_scores_table_aware_1_and_naive_0(capsys, tmp_path):
    ref = tmp_path / "tables"
    ref.mkdir()
    (ref / "license-comparison.html").write_bytes((bundled_corpus_dir() / "license-comparison.html").read_bytes())
    code, out, err = _cli(capsys, "parse", bundled_corpus_dir(), "--reference-tables", ref)
    assert code == 0 and err == ""
    rows = [[c for c in x.split() if c != "│"] for x in out.splitlines() if x.split()[:1] == ["license-comparison"]]
    assert rows == [["license-comparison", "1.000", "1.000", "1/1"], ["license-comparison", "0.000", "0.000", "0/1"]]
    assert out.count("14 of 15 documents have no reference tables: TEDS undefined for them, left out of the "
                     "means") == 2
    assert "1 of 1 reference table(s) not found in the parse (TEDS 0)" in out
    # one HTML document among 15: cell density is defined once per parser, undefined for the other 14
    density = next(x for x in out.splitlines() if x.split()[:1] == ["table_cell_density"])
    assert density.count("1.000 [1.000, 1.000], 14 undefined") == 2


def test_summary_teds_is_the_mean_over_reference_tables_not_documents():
    a = "<table><tr><td>1</td><td>2</td></tr></table>"
    b = "<table><tr><td>x</td></tr><tr><td>y</td></tr></table>"
    res = parse_fidelity({"one": "1 | 2\n", "two": "1 | 2\n", "three": "no table"},
                         reference_tables={"one": a + b, "two": a})
    assert res["docs"]["one"]["teds"] == 0.5 and res["docs"]["two"]["teds"] == 1.0
    s = res["summary"]["tables"]
    assert s["teds"]["mean"] == pytest.approx(2 / 3) and (s["n_tables"], s["n_docs_undefined"]) == (3, 1)
    assert np.isnan(res["docs"]["three"]["teds"]) and "text" not in res["summary"]


def test_cer_exceeds_1_when_the_parse_adds_text_while_ned_stays_below_1():
    f = text_fidelity("abcdef", "ab")
    assert (f["edit_distance"], f["cer"], f["ned"]) == (4, 2.0, pytest.approx(4 / 6))


def test_pipe_tables_skip_blank_lines_inside_a_run_and_miss_one_column_tables():
    text = "A | B\n\n\n\nC | D\nprose ends it\nE | F\n\nonly one column\n"
    tables = pipe_tables(text)
    assert [[[c.text for c in r.children] for r in t.children] for t in tables] == [
        [["A", "B"], ["C", "D"]], [["E", "F"]]]
    assert pipe_tables("Header\n\nvalue one\n\nvalue two\n") == []
    # a block's first occurrence in the parse is where it is found
    assert reading_order_tau("B A B", ["A", "B"])["tau"] == -1.0


def test_proxy_table_counts_flagged_documents_and_names_them(capsys, tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "ok.txt").write_text("Perfectly ordinary sentence with plain words.\n")
    (root / "bad.txt").write_text("Broken \ufffd\ufffd text with replacement characters in it.\n")
    code, out, err = _cli(capsys, "parse", root, "--parser", "table-aware")
    assert code == 0 and err == ""
    row = next(x for x in out.splitlines() if x.split()[:1] == ["replacement_char_rate"])
    assert "<= 0.001" in row and "1 flagged" in row
    # U+FFFD is a symbol (So), so the same two characters also pull script sanity below 0.98
    assert [x for x in out.splitlines() if x.startswith("  flagged")] == [
        "  flagged bad (table-aware): script_sanity, replacement_char_rate"]
    assert next(x for x in out.splitlines() if x.split()[:1] == ["chars_per_page"]).split()[-1] == "undefined"


def test_unknown_parser_is_refused(capsys, src):
    assert _bad(capsys, "parse", src, "--parser", "fancy") == [
        "error: unknown parser(s) ['fancy']; use table-aware, naive"]


def test_a_row_of_dashes_is_data_unless_it_is_a_markdown_rule_row_on_the_second_line():
    ref = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>"
    # the reference's first row as dashes: 2 of 7 nodes renamed (cost 1 each), the structure intact; the row
    # used to be dropped as a rule row, costing 3 deletions (TEDS 4/7) and the structure
    dashes = table_fidelity("- | -\nc | d\n", ref)
    assert (dashes["teds"], dashes["teds_struct"]) == (pytest.approx(1 - 2 / 7), 1.0)
    assert [[c.text for c in r.children] for r in pipe_tables("x | y\nz | w\n- | -\n")[0].children] == [
        ["x", "y"], ["z", "w"], ["-", "-"]]
    # where Markdown puts it, after the header row (blank lines between do not count), it is a rule
    assert [len(t.children) for t in pipe_tables("| a | b |\n\n|:--|--:|\n| c | d |\n")] == [2]
    assert table_fidelity("| a | b |\n|---|---|\n| c | d |\n", ref)["teds"] == 1.0
    # per-table figures are plain floats (the JSON writer's types), like the means
    assert {type(v) for t in dashes["tables"] for v in (t["teds"], t["teds_struct"])} == {float}


def test_a_reference_folder_names_files_of_neither_kind_and_may_hold_both(capsys, src, tmp_path):
    folder = tmp_path / "ref"
    (folder / "sub").mkdir(parents=True)
    (folder / "alpha.txt").write_text(DOCS["alpha"])
    (folder / "alpha.html").write_text("<table><tr><td>x</td><td>y</td></tr></table>")
    (folder / ".DS_Store").write_bytes(b"\x00hidden")
    (folder / "beta.md").write_text(DOCS["beta"])
    (folder / "sub" / "gamma.TXT").write_text("not a document of the parse")
    assert _bad(capsys, "parse", src, "--reference-text", folder) == [
        f"error: {folder / 'beta.md'}: not a reference file (reference plain text are .txt files); rename it or "
        "move it out of the folder",
        f"error: {folder / 'sub' / 'gamma.TXT'}: doc_id 'sub/gamma' is not a document of the parse (closest: "
        "'gamma'); a doc_id is the source file's relative path without its suffix"]
    (folder / "beta.md").unlink()
    (folder / "sub" / "gamma.TXT").unlink()
    # one folder for both options: each reads its own kind
    fid = _json(capsys, "parse", src, "--parser", "naive", "--reference-text", folder, "--reference-tables",
                folder)["parsers"][0]["fidelity"]
    assert fid["docs"]["alpha"]["ned"] == 0.0 and fid["docs"]["alpha"]["n_tables"] == 1
    assert (fid["summary"]["text"]["n_docs_with_reference"], fid["summary"]["tables"]["n_docs_with_reference"]) \
        == (1, 1)


def test_a_single_reference_file_is_one_error_line_not_one_per_line(capsys, src, tmp_path):
    one = tmp_path / "alpha.txt"
    one.write_text(DOCS["alpha"])
    table = tmp_path / "alpha.HTML"
    table.write_text("<table><tr><td>x</td></tr></table>\n<p>two lines</p>\n")
    assert _bad(capsys, "parse", src, "--reference-text", one, "--reference-tables", table) == [
        f"error: {one}: a single .txt file; put it in a folder (its doc_id is its path there without the "
        'suffix) and pass the folder, or pass a folder of .txt files or a .jsonl file of {"doc_id": ..., '
        '"text": ...} lines',
        f"error: {table}: a single .HTML file; put it in a folder (its doc_id is its path there without the "
        'suffix) and pass the folder, or pass a folder of .html/.htm files or a .jsonl file of {"doc_id": ..., '
        '"html": ...} lines']


def test_tau_is_undefined_when_every_found_block_is_at_one_place_and_the_terminal_says_why(capsys, tmp_path):
    assert np.isnan(reading_order_tau("Same. And more.", ["Same.", "Same."])["tau"])
    assert reading_order_tau("a b", ["a", "b", "a"])["tau"] == kendalltau([0, 1, 2], [0, 2, 0]).statistic == 0.0
    root = tmp_path / "docs"
    root.mkdir()
    (root / "d.txt").write_text("Same.\n")
    ref = _jsonl(tmp_path / "ref.jsonl", [{"doc_id": "d", "text": "Same.\n\nSame.\n"}])
    code, out, err = _cli(capsys, "parse", root, "--parser", "naive", "--reference-text", ref)
    assert code == 0 and err == ""
    assert "τ undefined for 1 document(s) with a reference text (fewer than two blocks found in the parse, or " \
           "all found at one place)" in " ".join(out.split())
