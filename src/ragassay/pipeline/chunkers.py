"""Chunkers that cut canonical text into spans; ``doc.text[chunk.start:chunk.end] == chunk.text`` always.

Three kinds, all measured in regex-wordpunct-v1 tokens (see :mod:`ragassay.pipeline.tokens`):

* ``fixed``: windows of ``size`` tokens advancing by ``size - overlap`` tokens; the last window may be short.
* ``recursive``: split on the coarsest separator that makes pieces fit (blank line, then line break, then
  sentence end, then space), greedily merge neighbouring pieces up to ``size`` tokens, and fall back to
  fixed windows for a run of text with no separator.
* ``sentence``: pack whole sentences up to ``size`` tokens; a sentence longer than ``size`` is cut into
  fixed windows.

Every chunk is trimmed of surrounding whitespace, cuts fall only between tokens, so every token of the
document lies in exactly one chunk (fixed with overlap: at least one) and no chunk exceeds ``size`` tokens.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from ragassay.pipeline.tokens import token_spans

# A sentence ends after . ! or ? (optionally followed by closing quotes/brackets) and before whitespace.
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s)")
_SEPARATORS: tuple[re.Pattern, ...] = (
    re.compile(r"\n[ \t]*\n\s*"),
    re.compile(r"\n\s*"),
    re.compile(r"(?<=[.!?])[\"')\]]*\s+"),
    re.compile(r"\s+"),
)


@dataclass(frozen=True, slots=True)
class Chunk:
    """A canonical span of one document."""

    unit_id: str
    doc_id: str
    start: int
    end: int
    text: str
    tokens: int


class _Tokens:
    """Token offsets of one text with O(log n) counting of tokens inside [a, b)."""

    def __init__(self, text: str):
        self.spans = token_spans(text)
        self.start_array = self.spans[:, 0]
        self.starts = self.start_array.tolist()

    def count(self, a: int, b: int) -> int:
        return bisect_left(self.starts, b) - bisect_left(self.starts, a)


def _trim(text: str, a: int, b: int) -> tuple[int, int]:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


def _fixed_spans(toks: _Tokens, a: int, b: int, size: int, overlap: int) -> list[tuple[int, int]]:
    lo, hi = bisect_left(toks.starts, a), bisect_left(toks.starts, b)
    out = []
    step = size - overlap
    i = lo
    while i < hi:
        j = min(i + size, hi)
        out.append((int(toks.spans[i, 0]), int(toks.spans[j - 1, 1])))
        if j == hi:
            break
        i += step
    return out


def _split_at(text: str, a: int, b: int, pattern: re.Pattern) -> list[tuple[int, int]]:
    """Pieces of [a, b) cut after each separator match (the separator stays with the piece before it)."""
    # every separator match is non-empty, so its end lies in (a, b] and ends increase: only the last
    # can fall on b, and the bounds are strictly increasing
    cuts = [m.end() for m in pattern.finditer(text, a, b)]
    if cuts and cuts[-1] >= b:
        cuts.pop()
    bounds = [a, *cuts, b]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _merge(pieces: list[tuple[int, int]], toks: _Tokens, size: int) -> list[tuple[int, int]]:
    """Greedily join neighbouring pieces while the joined span holds at most ``size`` tokens."""
    if not pieces:
        return []
    # tokens starting before each piece's start and end, for all pieces in two searches (the counts
    # toks.count(cur_start, piece_end) are differences of these)
    bounds = np.asarray(pieces, dtype=np.int64)
    before_start = np.searchsorted(toks.start_array, bounds[:, 0]).tolist()
    before_end = np.searchsorted(toks.start_array, bounds[:, 1]).tolist()
    out: list[tuple[int, int]] = []
    cur_a, cur_b = pieces[0]
    cur_before = before_start[0]
    for k in range(1, len(pieces)):
        if before_end[k] - cur_before <= size:
            cur_b = pieces[k][1]
        else:
            out.append((cur_a, cur_b))
            cur_a, cur_b = pieces[k]
            cur_before = before_start[k]
    out.append((cur_a, cur_b))
    return out


def _recursive(text: str, toks: _Tokens, a: int, b: int, size: int, level: int) -> list[tuple[int, int]]:
    if toks.count(a, b) <= size:
        return [(a, b)]
    if level >= len(_SEPARATORS):
        return _fixed_spans(toks, a, b, size, 0)
    pieces = _split_at(text, a, b, _SEPARATORS[level])
    if len(pieces) <= 1:
        return _recursive(text, toks, a, b, size, level + 1)
    out: list[tuple[int, int]] = []
    for pa, pb in _merge(pieces, toks, size):
        out.extend(_recursive(text, toks, pa, pb, size, level + 1))
    return out


def sentence_spans(text: str, a: int = 0, b: int | None = None) -> list[tuple[int, int]]:
    """Sentence spans of text[a:b], trimmed of whitespace; blank lines and line-leading breaks also end one.

    Sentences are cut after ., ! or ? followed by whitespace, and at blank lines (paragraph ends), so a
    heading without a full stop does not swallow the paragraph after it.
    """
    b = len(text) if b is None else b
    cuts = {m.end() for m in _SENTENCE_END.finditer(text, a, b)}
    cuts.update(m.start() for m in _SEPARATORS[0].finditer(text, a, b))
    bounds = [a, *sorted(c for c in cuts if a < c < b), b]
    out = []
    for i in range(len(bounds) - 1):
        s, e = _trim(text, bounds[i], bounds[i + 1])
        if s < e:
            out.append((s, e))
    return out


def _sentence(text: str, toks: _Tokens, size: int) -> list[tuple[int, int]]:
    pieces: list[tuple[int, int]] = []
    for s, e in sentence_spans(text):
        if toks.count(s, e) > size:
            pieces.extend(_fixed_spans(toks, s, e, size, 0))
        else:
            pieces.append((s, e))
    return _merge(pieces, toks, size)


def chunk_text(doc_id: str, text: str, kind: str, size: int, overlap: int = 0) -> list[Chunk]:
    """Cut one document's canonical text into chunks (see module docstring for the three kinds)."""
    if size < 1:
        raise ValueError("chunk size must be at least 1 token")
    if not 0 <= overlap < size:
        raise ValueError("overlap must satisfy 0 <= overlap < size")
    toks = _Tokens(text)
    if kind == "fixed":
        spans = _fixed_spans(toks, 0, len(text), size, overlap)
    elif kind == "recursive":
        spans = _recursive(text, toks, 0, len(text), size, 0)
    elif kind == "sentence":
        spans = _sentence(text, toks, size)
    else:
        raise ValueError(f"unknown chunker kind {kind!r}; use fixed, recursive or sentence")
    out = []
    for a, b in spans:
        a, b = _trim(text, a, b)
        if a < b:
            out.append(Chunk(f"{doc_id}:{a}-{b}", doc_id, a, b, text[a:b], toks.count(a, b)))
    return out


def chunk_corpus(docs: dict[str, str], kind: str, size: int, overlap: int = 0) -> list[Chunk]:
    """Chunks of every document, in doc_id order then offset order."""
    out: list[Chunk] = []
    for doc_id in sorted(docs):
        out.extend(chunk_text(doc_id, docs[doc_id], kind, size, overlap))
    return out


def chunk_arrays(chunks: list[Chunk]) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) int64 arrays, handy for vectorized span arithmetic."""
    return (np.array([c.start for c in chunks], dtype=np.int64), np.array([c.end for c in chunks], dtype=np.int64))
