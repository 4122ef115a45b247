"""`report --include` of `parse --json`: survival when it ran, the skipped-survival sentence when it did not,
and the fidelity means per parser and figure."""

from __future__ import annotations

import html as htmllib
import json
import re

import pytest
from report_fixtures import make_data

from ragassay.cli.app import main as _main
from ragassay.corpus import bundled_corpus_dir
from ragassay.report import render_report
from ragassay.report.include import load_include


def _parse_json(tmp_path, capsys, *args) -> dict:
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        _main(["parse", *map(str, args), "--parser", "naive", "--json"])
    out, err = capsys.readouterr()
    assert (e.value.code or 0) == 0, err
    return json.loads(out)


def _page_cells(tmp_path, d: dict) -> tuple[dict, list[str], str]:
    f = tmp_path / "parse.json"
    f.write_text(json.dumps(d), encoding="utf-8")
    sec = load_include(f)
    data = make_data()
    data["includes"] = [sec]
    page = render_report(data, tmp_path / "out").read_text(encoding="utf-8")
    s = re.search(r'<section id="include-1".*?</section>', page, re.S).group(0)
    return sec, [htmllib.unescape(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", s, re.S)], s


def test_own_documents_without_golden_give_the_fidelity_table_and_the_skip_note(tmp_path, capsys):
    docs, ref = tmp_path / "docs", tmp_path / "ref"
    docs.mkdir()
    ref.mkdir()
    text = (bundled_corpus_dir() / "BSD.txt").read_text(encoding="utf-8")
    (docs / "BSD.txt").write_text(text, encoding="utf-8")
    (ref / "BSD.txt").write_text(text, encoding="utf-8")
    d = _parse_json(tmp_path, capsys, docs, "--reference-text", ref)
    assert d["span_survival_skipped"] and "by_stratum" not in d["parsers"][0]
    sec, cells, s = _page_cells(tmp_path, d)
    assert sec["kind"] == "parse"
    assert [t["title"] for t in sec["tables"]] == ["Parse fidelity per parser (means over documents with a reference)"]
    assert htmllib.escape(d["span_survival_skipped"], quote=False) in s
    # the naive parser of a .txt file is the text itself: NED 0, CER 0 over the one referenced document
    summary = d["parsers"][0]["fidelity"]["summary"]["text"]
    assert summary["ned"]["mean"] == pytest.approx(0.0) and summary["ned"]["n"] == 1
    assert "text.ned" in cells and "text.cer" in cells and "naive" in cells


def test_the_bundled_default_keeps_its_survival_tables(tmp_path, capsys):
    d = _parse_json(tmp_path, capsys)
    assert d["span_survival_skipped"] is None
    sec, cells, _ = _page_cells(tmp_path, d)
    titles = [t["title"] for t in sec["tables"]]
    assert titles[:3] == ["Span survival per parser", "naive: survival by stratum", "naive: survival by format"]
    assert not any(t.startswith("Parse fidelity") for t in titles)  # no references given
