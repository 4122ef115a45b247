"""Parse survival (spec Case 6), proxies, fidelity, TEDS against hand-computed trees, Kendall tau vs scipy."""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest
from scipy.stats import kendalltau

from ragassay.corpus import bundled_corpus_dir, load_corpus
from ragassay.corpus.parse import load_parsed, naive_strip, parse_dir, pdf_text
from ragassay.corpus.survival import (
    best_alignment,
    kendall_tau_b,
    parse_proxies,
    proxy_flags,
    reading_order_tau,
    span_survival,
    teds,
    text_fidelity,
)
from ragassay.errors import InputError
from ragassay.golden import build_golden, bundled_golden_source


@pytest.fixture(scope="module")
def golden():
    return build_golden(bundled_golden_source(), load_corpus(bundled_corpus_dir()), None)


def _survival(parser, golden):
    docs = {d.doc_id: (d.text, d.fmt) for d in parse_dir(bundled_corpus_dir(), parser)}
    return {r["group"]: r for r in span_survival(docs, golden, parser=parser).table("stratum")}


def test_naive_stripper_loses_table_spans_that_the_table_aware_parser_keeps(golden):
    aware, naive = _survival("table-aware", golden), _survival("naive", golden)
    assert aware["tabular"]["exact"] == 1.0 and aware["all"]["lost"] == 0.0
    # cells glued to their neighbours: 18 of the 38 tabular spans are lost outright, 12 more only fuzzily
    assert naive["tabular"]["n"] == 38 and naive["tabular"]["n_lost"] == 18
    assert naive["tabular"]["exact_or_fuzzy"] == pytest.approx(20 / 38)
    assert naive["lexical"]["exact"] == 1.0  # plain text documents are untouched by either parser


def test_exact_fuzzy_and_lost_follow_token_boundaries():
    from ragassay.golden.schema import Evidence, GoldenQuery

    def q(qid, quote):
        return GoldenQuery(query_id=qid, question="?", stratum="s", answerable=True,
                           evidence=[Evidence(doc_id="d", start=0, end=1, grade=3, quote=quote)])

    parsed = {"d": ("The quick brown fox\njumps over the lazy dog. BSD-3-ClauseYes", "txt")}
    gs = [q("a", "quick brown fox jumps"), q("b", "the quick brown fax jumps over the lazy dog ."),
          q("c", "BSD-3-Clause"), q("e", "never said")]
    s = span_survival(parsed, gs, threshold=0.9)
    assert [x.status for x in s.spans] == ["exact", "fuzzy", "lost", "lost"]
    assert s.spans[1].similarity == pytest.approx(1 - 1 / 10)  # one substituted token of ten (case folded)
    assert s.spans[2].similarity == pytest.approx(0.8)


def test_best_alignment_matches_brute_force_over_all_substrings():
    rng = np.random.default_rng(1)

    def lev(a, b):
        d = np.arange(len(b) + 1)
        for i, x in enumerate(a, 1):
            prev, d = d, np.empty(len(b) + 1, dtype=int)
            d[0] = i
            for j, y in enumerate(b, 1):
                d[j] = min(prev[j - 1] + (x != y), prev[j] + 1, d[j - 1] + 1)
        return d[-1]

    for _ in range(30):
        hay = rng.integers(0, 4, size=int(rng.integers(0, 12)))
        needle = rng.integers(0, 4, size=int(rng.integers(1, 5)))
        want = min(lev(needle.tolist(), hay[i:j].tolist()) for i in range(len(hay) + 1) for j in range(i, len(hay) + 1))
        assert best_alignment(hay, needle) == want


def test_proxies_flag_mojibake_and_lost_spaces_and_leave_undefined_as_nan():
    good = parse_proxies("A normal sentence with ordinary words in it.", 44)
    assert good["script_sanity"] == 1.0 and good["word_shape"] == pytest.approx(7 / 8)
    assert np.isnan(good["table_cell_density"]) and np.isnan(good["chars_per_page"])
    bad = parse_proxies("\ufffd\ufffd" + "x" * 98, 100, n_pages=1)
    assert bad["replacement_char_rate"] == 0.02 and bad["chars_per_page"] == 100
    assert set(proxy_flags(bad)) == {"replacement_char_rate", "word_shape", "chars_per_page"}
    empty = parse_proxies("", 10)
    assert np.isnan(empty["word_shape"]) and np.isnan(empty["script_sanity"]) and proxy_flags(empty) == []
    cells = parse_proxies("x", 1, source_html="<table><tr><td>a</td><td> </td><td><b></b></td><th>b</th></tr></table>")
    assert cells["table_cell_density"] == 0.5


def test_text_fidelity_cer_and_ned():
    f = text_fidelity("kitten", "sitting")
    assert f["edit_distance"] == 3 and f["cer"] == pytest.approx(3 / 7) and f["ned"] == pytest.approx(3 / 7)
    assert text_fidelity("a  b\r\n", "a b\n")["edit_distance"] == 0  # compared after canonicalization


T2 = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>"


def test_teds_against_hand_computed_trees():
    # table(1) + 2 tr + 4 td = 7 nodes
    assert teds(T2, T2) == 1.0
    # one cell's text fully replaced ("d" -> "x"): rename cost 1 -> 1 - 1/7
    assert teds(T2, T2.replace(">d<", ">x<")) == pytest.approx(1 - 1 / 7)
    # ... which structure-only scoring ignores
    assert teds(T2, T2.replace(">d<", ">x<"), structure_only=True) == 1.0
    # second row dropped: delete tr + 2 td = 3 of max(7, 4) nodes
    assert teds(T2, "<table><tr><td>a</td><td>b</td></tr></table>") == pytest.approx(1 - 3 / 7)
    # a merged cell (colspan 2) replacing two cells: rename one td (span differs) + delete one = 2 of 7
    merged = "<table><tr><td colspan=2>a</td></tr><tr><td>c</td><td>d</td></tr></table>"
    assert teds(T2, merged) == pytest.approx(1 - 2 / 7)
    # half-changed cell text: "ab" vs "ax" is normalized Levenshtein 0.5
    assert teds("<table><tr><td>ab</td></tr></table>", "<table><tr><td>ax</td></tr></table>") == pytest.approx(1 - 0.5 / 3)
    with pytest.raises(InputError):
        teds("<p>no table</p>", T2)


@pytest.mark.parametrize("seed", range(6))
def test_kendall_tau_b_matches_scipy_with_ties(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 6, size=25)
    y = rng.integers(0, 6, size=25)
    assert kendall_tau_b(x, y) == pytest.approx(kendalltau(x, y).statistic, abs=1e-12)
    assert np.isnan(kendall_tau_b([1, 1, 1], [1, 2, 3]))


def test_reading_order_tau_counts_swapped_and_lost_blocks():
    blocks = ["First block.", "Second block.", "Third block.", "Fourth block."]
    assert reading_order_tau("\n\n".join(blocks), blocks)["tau"] == 1.0
    two_col = "First block.\n\nThird block.\n\nSecond block.\n\nFourth block."
    want = kendalltau([0, 1, 2, 3], [0, 2, 1, 3]).statistic
    assert reading_order_tau(two_col, blocks)["tau"] == pytest.approx(want)
    lost = reading_order_tau("Fourth block. First block.", blocks)
    assert lost["n_found"] == 2 and lost["tau"] == -1.0


def _minimal_pdf(lines: list[str]) -> bytes:
    """A one-page PDF with Helvetica text lines, written by hand (no PDF writer needed)."""
    ops = ["BT", "/F1 12 Tf", "72 720 Td", "14 TL"]
    for ln in lines:
        ops.append("(" + ln.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") Tj T*")
    ops.append("ET")
    stream = zlib.compress("\n".join(ops).encode("latin-1"))
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
            b"/Contents 5 0 R >>",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            b"<< /Length " + str(len(stream)).encode() + b" /Filter /FlateDecode >>\nstream\n" + stream
            + b"\nendstream"]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def test_pdf_path_extracts_text_that_spans_survive_in(tmp_path):
    from ragassay.golden.schema import Evidence, GoldenQuery

    (tmp_path / "policy.pdf").write_bytes(_minimal_pdf(["Vacation days carry over up to five days.",
                                                        "Unused days expire on March 31."]))
    docs = parse_dir(tmp_path)
    assert [(d.doc_id, d.fmt, d.n_pages) for d in docs] == [("policy", "pdf", 1)]
    q = GoldenQuery(query_id="q", question="?", stratum="s", answerable=True,
                    evidence=[Evidence(doc_id="policy", start=0, end=1, grade=3, quote="expire on March 31")])
    s = span_survival({d.doc_id: (d.text, d.fmt) for d in docs}, [q])
    assert s.spans[0].status == "exact"
    with pytest.raises(InputError):
        pdf_text(b"%PDF-1.4 garbage", "bad.pdf")


def test_naive_strip_and_user_parser_output(tmp_path):
    assert naive_strip("<tr><td>BSD-3-Clause</td><td>Yes &amp; no</td></tr>") == "BSD-3-ClauseYes & no"
    (tmp_path / "p.jsonl").write_text('{"doc_id": "a", "text": "x y"}\nnot json\n')
    with pytest.raises(InputError, match="p.jsonl:2"):
        load_parsed(tmp_path / "p.jsonl")
    (tmp_path / "p.jsonl").write_text('{"doc_id": "a", "text": "x y", "format": "html"}\n')
    assert [(d.doc_id, d.fmt) for d in load_parsed(tmp_path / "p.jsonl")] == [("a", "html")]


def test_all_permutations_small_tau_equals_scipy():
    for perm in itertools.permutations(range(4)):
        assert kendall_tau_b(range(4), perm) == pytest.approx(kendalltau(range(4), perm).statistic)
