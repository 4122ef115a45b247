"""`corpus check`: idempotence, offset round trip and token drift, failures named per document."""

from __future__ import annotations

import numpy as np

import ragassay.corpus.check as check_mod
from ragassay.corpus import Corpus, Document, bundled_corpus_dir, load_corpus
from ragassay.corpus.check import check_corpus


def test_bundled_corpus_passes_every_property():
    res = check_corpus(load_corpus(bundled_corpus_dir()))
    assert res.ok and res.n_docs == 15 and res.n_spans == 15 * 50
    assert set(res.drift) == {"html", "txt"}


def test_token_drift_outlier_is_listed_per_document():
    docs = [Document.from_raw(f"d{i}", "plain words here and there") for i in range(3)]
    # a zero-width space is a token of its own in raw text ("wo", ZWSP, "rd"); canonical text drops it,
    # so each word goes from 3 tokens to 1
    docs.append(Document.from_raw("odd", "wo\u200brd wo\u200brd wo\u200brd wo\u200brd"))
    res = check_corpus(Corpus(docs))
    assert res.ratios["odd"] == 1 / 3 and res.drift["txt"]["outliers"] == ["odd"]
    assert list(res.failures) == ["odd"]


def test_broken_offset_map_and_non_idempotent_text_are_reported(monkeypatch):
    good = Document.from_raw("a", "alpha beta gamma delta")
    broken = Document("b", good.raw, good.text, np.zeros_like(good.raw_starts), np.zeros_like(good.raw_ends))
    res = check_corpus(Corpus([good, broken]))
    assert list(res.failures) == ["b"] and "offset round trip" in res.failures["b"][0]
    monkeypatch.setattr(check_mod, "canonicalize", lambda t: t + " ")
    res = check_corpus(Corpus([good]))
    assert "not idempotent" in res.failures["a"][0]
