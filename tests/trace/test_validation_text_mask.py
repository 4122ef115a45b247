"""validate_unit_columns compares text only where a unit carries some (and is still valid), and reads each
document's length once per corpus: the outcome must equal a unit-by-unit reading of the rules."""

from __future__ import annotations

import numpy as np

from ragassay.corpus.loader import Corpus, Document
from ragassay.trace.schema import UnitColumns, validate_unit_columns

DOCS = {"a": "alpha beta gamma delta", "b": "the quick brown fox", "c": "x" * 40}


def _columns(rng: np.random.Generator, n_lists: int, text_share: float) -> UnitColumns:
    lengths = rng.integers(1, 6, n_lists)
    n = int(lengths.sum())
    doc = rng.choice(["a", "b", "c", "zz"], n).tolist()
    start = rng.integers(-1, 25, n)
    end = start + rng.integers(-1, 8, n)
    texts: list[str | None] = []
    for d, s, e in zip(doc, start.tolist(), end.tolist(), strict=True):
        if rng.random() >= text_share:
            texts.append(None)
        elif d in DOCS and 0 <= s <= e and rng.random() < 0.6:
            texts.append(DOCS[d][s:e])  # the right text
        else:
            texts.append("wrong" * int(rng.integers(0, 2)))
    return UnitColumns(keys=[(f"q{i}", 0) for i in range(n_lists)], fields=["fused"] * n_lists,
                       lengths=lengths, unit_id=[f"u{i}" for i in range(n)], doc_id=doc, start=start, end=end,
                       score=np.zeros(n), has_score=np.ones(n, dtype=bool), text=texts)


def _oracle(cols: UnitColumns) -> list[int]:
    """Each unit's first failing reason (1-5 in the documented order, 0 = fine), one unit at a time; scores
    are all finite and unit ids distinct, so only span repeats (see _span_repeats) can add failures."""
    out = []
    for i, d in enumerate(cols.doc_id):
        s, e, t = int(cols.start[i]), int(cols.end[i]), cols.text[i]
        if d not in DOCS:
            out.append(1)
        elif s < 0:
            out.append(2)
        elif e < s:
            out.append(3)
        elif e > len(DOCS[d]):
            out.append(4)
        elif t is not None and DOCS[d][s:e] != t:
            out.append(5)
        else:
            out.append(0)
    return out


def _span_repeats(cols: UnitColumns) -> set[int]:
    seen, out, i = set(), set(), 0
    for li, k in enumerate(cols.lengths.tolist()):
        for _ in range(k):
            span = (li, cols.doc_id[i], int(cols.start[i]), int(cols.end[i]))
            if span in seen:
                out.add(i)
            seen.add(span)
            i += 1
    return out


def _positions(cols: UnitColumns, rows: list[int]) -> list[int]:
    pos = np.arange(len(cols.start)) - np.repeat(np.cumsum(cols.lengths) - cols.lengths, cols.lengths)
    return pos[rows].tolist()


def test_text_checked_only_where_given_and_valid_matches_unit_by_unit_rules():
    rng = np.random.default_rng(7)
    corpus = Corpus([Document.from_raw(k, v) for k, v in DOCS.items()])
    for share in (0.0, 0.05, 1.0):
        cols = _columns(rng, 400, share)
        want = _oracle(cols)
        repeats = _span_repeats(cols)
        check = validate_unit_columns(cols, corpus)
        got_bad = np.flatnonzero(check.bad_mask).tolist()
        assert got_bad == sorted({i for i, r in enumerate(want) if r} | repeats)
        text_fail = [f for f in check.failures if f.message.startswith("text does not match")]
        want_text = [i for i, r in enumerate(want) if r == 5]
        assert [f.position for f in text_fail] == [int(p) for p in _positions(cols, want_text)]
        if share == 0.0:
            assert not text_fail
        else:
            assert text_fail  # the random draw does produce mismatches to find
        # the same columns against a plain mapping (no per-corpus cache) give the same failures
        plain = validate_unit_columns(cols, DOCS)
        assert [(f.query_id, f.position) for f in plain.failures] == [
            (f.query_id, f.position) for f in check.failures]


def test_lengths_cached_per_corpus_are_that_corpus_lengths():
    # two corpora with the same doc ids but different lengths, validated alternately: a length cached for
    # one must never be used for the other
    short = Corpus([Document.from_raw("a", "abc")])
    long = Corpus([Document.from_raw("a", "abcdefghij")])
    cols = UnitColumns(keys=[("q", 0)], fields=["fused"], lengths=np.array([1]), unit_id=["u"], doc_id=["a"],
                       start=np.array([0]), end=np.array([8]), score=np.zeros(1), has_score=np.ones(1, dtype=bool),
                       text=None)
    for _ in range(2):
        s, g = validate_unit_columns(cols, short), validate_unit_columns(cols, long)
        assert [f.message for f in s.failures] == ["span [0, 8) runs past the end of doc 'a' (3 characters)"]
        assert g.failures == []
