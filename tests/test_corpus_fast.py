"""Canonicalization builds its offset maps from collected pieces and skips the scans that cannot match ASCII
text: the same text and the same maps as before (the former ``_rewrite`` and ``canonicalize_with_map`` are
copied here as the oracle)."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from ragassay.corpus import canonical


def _old_rewrite(text: str, pattern: re.Pattern, replace):
    pieces, starts, ends = [], [], []
    pos = 0
    any_match = False
    for m in pattern.finditer(text):
        any_match = True
        a, b = m.span()
        if a > pos:
            pieces.append(text[pos:a])
            idx = np.arange(pos, a, dtype=np.int64)
            starts.append(idx)
            ends.append(idx + 1)
        out = replace(m)
        if out:
            pieces.append(out)
            starts.append(np.full(len(out), a, dtype=np.int64))
            ends.append(np.full(len(out), b, dtype=np.int64))
        pos = b
    if not any_match:
        return None
    if pos < len(text):
        pieces.append(text[pos:])
        idx = np.arange(pos, len(text), dtype=np.int64)
        starts.append(idx)
        ends.append(idx + 1)
    if not pieces:
        empty = np.zeros(0, dtype=np.int64)
        return canonical._Map("", empty, empty)
    return canonical._Map("".join(pieces), np.concatenate(starts), np.concatenate(ends))


_ALPHABET = ["a", "b", " ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u2028", "\u200b", "\ufeff", "e\u0301",
             "\u0301", "\u3000", "x\u00ad", "ﬁ", "한", "\u1100\u1161", "é", " \u0301", "\x0b", "\x0c", "\u0085"]


def _texts():
    rng = random.Random(5)
    yield from ["", " ", "\n", "abc", "  a  b  ", "\u200b", "\u200b\u200b", "a\u200b", "\n \n", " \u0301 x"]
    for _ in range(300):
        yield "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 40)))
    for _ in range(100):  # ASCII alone: the scans skipped
        yield "".join(rng.choice(["a", " ", "  ", "\t", "\n", "\r", "\r\n", "\x0b", "\x1c", "b."])
                      for _ in range(rng.randint(0, 30)))


def _old_canonicalize_with_map(raw: str, fragment: bool):
    """canonicalize_with_map as it was: every rewrite scans the text."""
    m = canonical._Map.identity(raw)
    for step in (
        lambda t: _old_rewrite(t, canonical._RE_INVISIBLE, lambda _m: ""),
        lambda t: _old_rewrite(t, canonical._RE_NEWLINE, lambda _m: "\n"),
        canonical._nfc,
        lambda t: _old_rewrite(t, canonical._space_pattern(t, fragment), canonical._space_out),
    ):
        s = step(m.text)
        if s is not None:
            m = m.then(s)
    return m.text, m.starts, m.ends


@pytest.mark.parametrize("fragment", [False, True])
def test_canonical_text_and_maps_equal_the_per_match_arrays(fragment):
    new = [canonical.canonicalize_with_map(t, fragment=fragment) for t in _texts()]
    old = [_old_canonicalize_with_map(t, fragment) for t in _texts()]
    assert sum(t.isascii() for t in _texts()) > 20 and sum("\r" in t and t.isascii() for t in _texts()) > 5
    assert len(new) == len(old) > 300
    for (nt, ns, ne), (ot, os_, oe) in zip(new, old, strict=True):
        assert nt == ot
        assert ns.dtype == os_.dtype and ne.dtype == oe.dtype
        assert np.array_equal(ns, os_) and np.array_equal(ne, oe)


def test_each_rewrite_alike_including_rewrites_to_nothing_and_to_several_characters():
    rng = random.Random(9)
    patterns = [(re.compile(r"a+"), lambda m: ""), (re.compile(r"b"), lambda m: "XYZ"),
                (re.compile(r"\s+"), lambda m: " " if m.start() else ""), (re.compile(r"^|$"), lambda m: "!"),
                (re.compile(r"."), lambda m: "")]
    for _ in range(400):
        text = "".join(rng.choice("ab \tc") for _ in range(rng.randint(0, 25)))
        for pat, rep in patterns:
            got, want = canonical._rewrite(text, pat, rep), _old_rewrite(text, pat, rep)
            assert (got is None) == (want is None)
            if want is not None:
                assert got.text == want.text and got.starts.dtype == want.starts.dtype
                assert np.array_equal(got.starts, want.starts) and np.array_equal(got.ends, want.ends)
