"""Quote -> span resolution against canonical text.

Exact match first (after canonicalizing the quote with the corpus rules). Then a whitespace-tolerant
match, where any run of whitespace in the quote matches any run in the text (a quote typed on one line
finds a passage wrapped over several). Last, a punctuation-tolerant match ignores whitespace and punctuation: both texts are reduced to their letters and digits
(case kept) and the quote's skeleton is searched in the document's skeleton; the span then runs from the
first to the last matched character. A quote found more than once must name its ``occurrence``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from rapidfuzz import fuzz

from ragassay.corpus import canonicalize


@dataclass(frozen=True)
class Resolution:
    start: int | None
    end: int | None
    match: str | None  # "exact" | "whitespace" | "punctuation" | None
    n_found: int
    offsets: tuple[int, ...] = ()
    error: str | None = None


def _find_all(hay: str, needle: str) -> list[int]:
    out, i = [], hay.find(needle)
    while i != -1:
        out.append(i)
        i = hay.find(needle, i + 1)
    return out


class _Skeleton:
    """Letters and digits of a text plus their positions in it."""

    __slots__ = ("text", "pos")

    def __init__(self, text: str):
        keep = [i for i, c in enumerate(text) if c.isalnum()]
        self.text = "".join(text[i] for i in keep)
        self.pos = np.asarray(keep, dtype=np.int64)


@lru_cache(maxsize=256)
def _skeleton(text: str) -> _Skeleton:
    return _Skeleton(text)


class _Flat:
    """A text with every whitespace run replaced by one space, plus each character's original position."""

    __slots__ = ("text", "pos")

    def __init__(self, text: str):
        pieces, pos = [], []
        for m in re.finditer(r"\S+", text):
            if pieces:
                pieces.append(" ")
                pos.append(m.start() - 1)
            pieces.append(m.group())
            pos.extend(range(m.start(), m.end()))
        self.text = "".join(pieces)
        self.pos = np.asarray(pos, dtype=np.int64)


@lru_cache(maxsize=256)
def _flat(text: str) -> _Flat:
    return _Flat(text)


def resolve_quote(doc_text: str, quote: str, occurrence: int | None = None) -> Resolution:
    """Resolve `quote` in canonical `doc_text`; see the module docstring."""
    q = canonicalize(quote)
    if not q:
        return Resolution(None, None, None, 0, error="quote is empty after canonicalization")
    hits = _find_all(doc_text, q)
    match = "exact"
    if hits:
        spans = [(h, h + len(q)) for h in hits]
    else:
        flat = _flat(doc_text)
        fq = " ".join(q.split())
        spans = [(int(flat.pos[h]), int(flat.pos[h + len(fq) - 1]) + 1) for h in _find_all(flat.text, fq)]
        match = "whitespace"
    if not spans:
        sk = _skeleton(doc_text)
        qs = _Skeleton(q).text
        if not qs:
            return Resolution(None, None, None, 0, error="quote has no letters or digits")
        sk_hits = _find_all(sk.text, qs)
        spans = [(int(sk.pos[h]), int(sk.pos[h + len(qs) - 1]) + 1) for h in sk_hits]
        match = "punctuation"
    offsets = tuple(s for s, _ in spans)
    if not spans:
        return Resolution(None, None, None, 0, error="not found")
    if occurrence is not None:
        if occurrence > len(spans):
            return Resolution(None, None, None, len(spans), offsets,
                              error=f"occurrence {occurrence} requested but the quote occurs {len(spans)} time(s)")
        s, e = spans[occurrence - 1]
        return Resolution(s, e, match, len(spans), offsets)
    if len(spans) > 1:
        return Resolution(None, None, match, len(spans), offsets,
                          error=f"ambiguous: occurs {len(spans)} times (at offsets "
                                f"{', '.join(map(str, offsets[:5]))}{', ...' if len(offsets) > 5 else ''}); "
                                "add `occurrence: N` (1-based) or quote a longer passage")
    s, e = spans[0]
    return Resolution(s, e, match, 1, offsets)


def closest_match(doc_text: str, quote: str) -> tuple[float, int, str]:
    """Best fuzzy alignment of `quote` in `doc_text`: (score 0–1, offset, matched text)."""
    q = canonicalize(quote)
    al = fuzz.partial_ratio_alignment(q, doc_text)
    if al is None:
        return 0.0, 0, ""
    return al.score / 100.0, al.dest_start, doc_text[al.dest_start:al.dest_end]
