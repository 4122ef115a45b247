"""The report's PPI rows and section (ragassay.report.ppi): raw judge beside corrected, hostile names escaped,
undefined figures printed as undefined."""

from __future__ import annotations

import pytest

from ragassay.errors import SchemaError
from ragassay.report.ppi import COLUMNS, ppi_rows, ppi_section_html


def _est(**kw):
    base = {"estimate": 0.1, "ci_low": 0.05, "ci_high": 0.15, "se": 0.025, "classical": 0.12,
            "classical_low": 0.02, "classical_high": 0.22, "confidence": 0.95, "defined": True, "reason": None}
    return {**base, **kw}


PAIR = {"metric": "faithfulness", "a": {"name": "<b>base</b>"}, "b": {"name": "cand"},
        "raw_judge_mean": {"a": 0.8, "b": 0.85}, "difference": _est(), "n_labelled": {"a": 60, "b": 60},
        "n_items": 300, "mode": "shared", "lam_mode": "PPI++ (tuned lam)", "warnings": ["x < y & z"]}
SINGLE = {"metric": "answer_relevance", "run": {"name": "r"}, "raw_judge_mean": 0.9, "n_labelled": 40,
          "n_items": 200, "lam_mode": "PPI (lam = 1)", "warnings": [],
          "ppi": _est(estimate=None, ci_low=None, ci_high=None, defined=False, reason="no variation")}


def test_rows_put_the_corrected_figure_beside_the_raw_judge_mean():
    pair, single = ppi_rows([PAIR, SINGLE])
    assert set(pair) == set(COLUMNS)
    assert pair["raw judge"] == "0.800 → 0.850 (Δ +0.050)"
    assert pair["PPI-corrected"] == "Δ +0.100" and pair["interval"] == "[0.050, 0.150] at 95%"
    assert pair["labels only"] == "0.120 [0.020, 0.220]"
    assert pair["n labelled"] == "60 / 60 of 300 (shared)"
    assert single["PPI-corrected"] == "undefined" and single["interval"] == "undefined (no variation)"
    assert single["warnings"] == "none" and single["raw judge"] == "0.900"


def test_section_escapes_hostile_text_and_is_empty_without_entries():
    html = ppi_section_html([PAIR])
    assert "<b>base</b>" not in html and "&lt;b&gt;base&lt;/b&gt;" in html
    assert "x &lt; y &amp; z" in html and html.count("<tr>") == 2
    assert ppi_section_html([]) == ""


def test_a_malformed_entry_is_refused():
    with pytest.raises(SchemaError, match="ppi\\[0\\]"):
        ppi_rows([{"nope": 1}])


def test_markdown_table_escapes_cells():
    from ragassay.report.ppi import ppi_markdown

    md = ppi_markdown([{**PAIR, "a": {"name": "a|b"}}])
    assert "PPI-corrected judge metrics" in md
    row = md.strip().splitlines()[-1]
    assert "a\\|b" in row and row.count(" | ") == len(COLUMNS) - 1
    assert ppi_markdown([]) == ""
