"""Corpus loading memory: documents that canonicalization leaves as they are share one read-only identity
offset map instead of holding 8 bytes per character each; changed documents keep their own map."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from ragassay.corpus import load_corpus
from ragassay.corpus.canonical import canonicalize_with_map
from ragassay.corpus.loader import Document


def test_unchanged_documents_share_one_read_only_identity_map():
    a = Document.from_raw("a", "plain text, already canonical.")
    b = Document.from_raw("b", "another plain one")
    for d in (a, b):
        n = len(d.text)
        assert d.text is d.raw or d.text == d.raw
        np.testing.assert_array_equal(d.raw_starts, np.arange(n))
        np.testing.assert_array_equal(d.raw_ends, np.arange(1, n + 1))
        assert d.raw_starts.dtype == np.int32 and not d.raw_starts.flags.writeable
    assert np.shares_memory(a.raw_starts, b.raw_starts) and np.shares_memory(a.raw_ends, b.raw_starts)
    assert a.raw_span(6, 10) == (6, 10) and a.raw_span(len(a.text), len(a.text)) == (len(a.raw), len(a.raw))
    with pytest.raises(ValueError, match="read-only"):
        a.raw_starts[0] = 5


def test_a_longer_document_grows_the_shared_map_and_earlier_maps_stay_right():
    short = Document.from_raw("s", "short text")
    long = Document.from_raw("l", "word " * 50_000 + "end")
    for d in (short, long):
        np.testing.assert_array_equal(d.raw_starts, np.arange(len(d.text)))
        np.testing.assert_array_equal(d.raw_ends, np.arange(1, len(d.text) + 1))
    assert long.raw_span(5, 9) == (5, 9) and long.text[5:9] == "word"


@pytest.mark.parametrize("raw", ["a\r\nb  c", "  lead and trail  ", "cafe\u0301 x", "zero\u200bwidth"])
def test_a_changed_document_keeps_its_own_map(raw):
    d = Document.from_raw("d", raw)
    text, starts, ends = canonicalize_with_map(raw)
    assert d.text == text != raw
    np.testing.assert_array_equal(d.raw_starts, starts)
    np.testing.assert_array_equal(d.raw_ends, ends)
    assert d.raw_starts.dtype == np.int32 and d.raw_starts.flags.writeable


def test_loading_unchanged_documents_holds_no_per_character_map(tmp_path):
    rng = np.random.default_rng(3)
    words = np.array(["license", "notice", "warranty", "source", "binary"])
    n_chars = 0
    for i in range(200):
        text = " ".join(rng.choice(words, 500))
        n_chars += len(text)
        (tmp_path / f"d{i:03d}.txt").write_text(text, encoding="utf-8")
    tracemalloc.start()
    try:
        corpus = load_corpus(tmp_path)
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(corpus) == 200 and corpus.n_chars == n_chars
    # the raw text (1 byte per ASCII character) plus per-object overhead; two int32 maps would add 8 per char
    assert kept < 2.5 * n_chars, (kept, n_chars)
