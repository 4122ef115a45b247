"""Canonical text with an offset map back to the raw text.

Every span ragassay stores is a pair of offsets into *canonical* text. Canonicalization is a fixed
sequence of four local rewrites, applied in this order:

1. **Invisible characters deleted**: BOM (U+FEFF), zero-width space (U+200B), word joiner (U+2060)
   and soft hyphen (U+00AD). They carry no meaning for matching and break quote lookup.
2. **Newlines unified**: CRLF, CR, NEL (U+0085), LINE SEPARATOR and PARAGRAPH SEPARATOR become ``\\n``.
3. **Unicode NFC.**
4. **Horizontal whitespace folded**: every other whitespace character (tab, NBSP, form feed, the
   U+2000 block, ...) counts as a space; a run of such spaces becomes one ASCII space; spaces at the
   start or end of a line (and so of the document) are removed. Newlines themselves are kept as
   they are, so blank lines and paragraph structure survive.

The offset map gives, for canonical character ``i``, the raw half-open range
``[raw_starts[i], raw_ends[i])`` it came from. Spaces next to a newline are attributed to that
newline; other deleted characters (invisible ones, spaces at the document's edges) map to nothing, and
the raw slice of a canonical span still covers everything between its first and last character. Two properties hold and are tested:
``canonicalize(canonicalize(x)) == canonicalize(x)``, and for a canonical span ``[s, e)`` that does not
split a combining sequence, ``canonicalize_fragment(raw[raw_starts[s]:raw_ends[e-1]]) == canonical[s:e]``
(plain ``canonicalize`` gives the same when the span neither starts nor ends with a space).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import numpy as np

CANONICALIZER_NAME = "ragassay-canon-v1"

_INVISIBLE = "\ufeff\u200b\u2060\u00ad"
_NEWLINES = "\r\n|\r|\x85|\u2028|\u2029"
# Every character str.isspace() accepts except the newline (a test pins this list to Python's).
_H = (
    "\t\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)


def _mark_class() -> str:
    """Regex class of the characters that attach to the one before them (marks, Hangul medials/finals).

    Every character with a non-zero combining class is in category M, and all of them lie below
    U+20000, which keeps this scan cheap (a test checks both facts against the whole code space).
    """
    category = unicodedata.category
    cps = [c for c in range(0x20000) if category(chr(c))[0] == "M"]
    cps = sorted(set(cps) | set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3)))
    ranges, lo, prev = [], cps[0], cps[0]
    for c in cps[1:] + [-1]:
        if c != prev + 1:
            ranges.append(re.escape(chr(lo)) + ("-" + re.escape(chr(prev)) if prev > lo else ""))
            lo = c
        prev = c
    return "[" + "".join(ranges) + "]"  # ranges, not a list of characters: the regex engine scans them fast


_MARK = _mark_class()
_RE_MARK = re.compile(_MARK)
_RE_INVISIBLE = re.compile(f"[{_INVISIBLE}]+")
_RE_NEWLINE = re.compile(_NEWLINES)


def _space_patterns(h: str, other: str) -> tuple[re.Pattern, re.Pattern]:
    """(document, fragment) patterns for horizontal whitespace `h` and its non-ASCII-space part `other`."""
    around_newline = rf"{h}+\n{h}*|\n{h}+"  # folds into the newline
    edges = rf"\A{h}+|{h}+\Z"  # dropped
    runs = rf"{h}{{2,}}|{other}"  # runs and non-ASCII spaces -> " "
    return (re.compile(f"(?=[{re.escape(_H)}\n])(?:{around_newline}|{edges}|{runs})"),
            re.compile(f"(?=[{re.escape(_H)}\n])(?:{around_newline}|{runs})"))


_H_PLAIN = f"[{re.escape(_H)}]"
_H_OTHER = f"[{re.escape(_H.replace(' ', ''))}]"
# Text without any mark (the common case) uses the plain, fast patterns; text with marks uses the
# patterns in which a whitespace character carrying a mark (a spacing accent) is text, not whitespace.
_RE_SPACE, _RE_SPACE_FRAGMENT = _space_patterns(_H_PLAIN, _H_OTHER)
_RE_SPACE_M, _RE_SPACE_FRAGMENT_M = _space_patterns(f"(?:{_H_PLAIN}(?!{_MARK}))", f"(?:{_H_OTHER}(?!{_MARK}))")


class _Map:
    """Output characters with their input ranges: out[i] came from input[starts[i]:ends[i]]."""

    __slots__ = ("text", "starts", "ends")

    def __init__(self, text: str, starts: np.ndarray, ends: np.ndarray):
        self.text, self.starts, self.ends = text, starts, ends

    @classmethod
    def identity(cls, text: str) -> _Map:
        idx = np.arange(len(text), dtype=np.int64)
        return cls(text, idx, idx + 1)

    def then(self, step: _Map) -> _Map:
        """Compose: `step` rewrote self.text; map its ranges back through self."""
        if len(step.text) == 0:
            empty = np.zeros(0, dtype=np.int64)
            return _Map("", empty, empty)
        return _Map(step.text, self.starts[step.starts], self.ends[step.ends - 1])


def _rewrite(text: str, pattern: re.Pattern, replace) -> _Map | None:
    """Apply sparse regex rewrites; `replace(match) -> str` gives the output for a match.

    Every output character of a rewrite maps to the whole matched range; untouched text maps 1:1.
    Returns None when nothing matched (identity), which keeps the common case allocation-free.
    The matches are collected as pieces (start, end, length, whether untouched) and the maps are built
    from them at once: arrays per match cost more than the matching.
    """
    pieces: list[str] = []
    seg_start: list[int] = []
    seg_end: list[int] = []  # an untouched piece: the end of its first character
    seg_len: list[int] = []
    seg_step: list[int] = []  # 1: untouched (one input character per output character), 0: a rewrite
    pos = 0
    any_match = False
    for m in pattern.finditer(text):
        any_match = True
        a, b = m.span()
        if a > pos:
            pieces.append(text[pos:a])
            seg_start.append(pos)
            seg_end.append(pos + 1)
            seg_len.append(a - pos)
            seg_step.append(1)
        out = replace(m)
        if out:
            pieces.append(out)
            seg_start.append(a)
            seg_end.append(b)
            seg_len.append(len(out))
            seg_step.append(0)
        pos = b
    if not any_match:
        return None
    if pos < len(text):
        pieces.append(text[pos:])
        seg_start.append(pos)
        seg_end.append(pos + 1)
        seg_len.append(len(text) - pos)
        seg_step.append(1)
    if not pieces:
        empty = np.zeros(0, dtype=np.int64)
        return _Map("", empty, empty)
    lengths = np.asarray(seg_len, dtype=np.int64)
    within = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    step = np.repeat(np.asarray(seg_step, dtype=np.int64), lengths) * within
    return _Map("".join(pieces), np.repeat(np.asarray(seg_start, dtype=np.int64), lengths) + step,
                np.repeat(np.asarray(seg_end, dtype=np.int64), lengths) + step)


def _space_out(m: re.Match) -> str:
    s = m.group(0)
    if "\n" in s:
        return "\n"
    if (m.re is _RE_SPACE or m.re is _RE_SPACE_M) and (m.start() == 0 or m.end() == len(m.string)):
        return ""
    return " "


@lru_cache(maxsize=1)
def _nfc_secondaries() -> frozenset[str]:
    """Characters of combining class 0 that NFC can still fuse onto the character before them.

    They are the second element of a canonical composition pair (e.g. Hangul vowels and trailing
    consonants, some Indic length marks). A segment boundary before one of them is unsafe.
    """
    out = set()
    for cp in range(0x110000):
        d = unicodedata.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue
        parts = d.split()
        if len(parts) == 2:
            second = chr(int(parts[1], 16))
            if unicodedata.combining(second) == 0:
                out.add(second)
    out.update(chr(c) for c in range(0x1161, 0x1176))  # Hangul medial vowels
    out.update(chr(c) for c in range(0x11A8, 0x11C3))  # Hangul final consonants
    return frozenset(out)


def _nfc(text: str) -> _Map | None:
    if unicodedata.is_normalized("NFC", text):
        return None
    secondaries = _nfc_secondaries()
    pieces: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    seg_start = 0
    n = len(text)
    for i in range(1, n + 1):
        if i < n:
            c = text[i]
            if unicodedata.combining(c) != 0 or c in secondaries:
                continue
        out = unicodedata.normalize("NFC", text[seg_start:i])
        pieces.append(out)
        starts.extend([seg_start] * len(out))
        ends.extend([i] * len(out))
        seg_start = i
    return _Map("".join(pieces), np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64))


def _has_mark(text: str) -> bool:
    if text.isascii():  # O(1) for CPython's compact ASCII strings
        return False
    return any(_RE_MARK.match(c) for c in set(text))


_ASCII_OTHER = tuple(c for c in _H if c.isascii() and c != " ")


def _no_space_fold(text: str, fragment: bool) -> bool:
    """True when step 4 would leave ASCII ``text`` as it is, told by a few substring searches (a regex
    scan of clean text tries its pattern at every space: ~40 ns a character). In ASCII the only
    horizontal whitespace besides the space is in ``_ASCII_OTHER``, and each one is rewritten; without
    them, a fold needs two spaces in a row, a space beside a newline or (in a document) at an edge."""
    if not text.isascii() or "  " in text or " \n" in text or "\n " in text:
        return False
    if not fragment and (text[:1] == " " or text[-1:] == " "):
        return False
    return not any(c in text for c in _ASCII_OTHER)


def _space_pattern(text: str, fragment: bool) -> re.Pattern:
    if _has_mark(text):
        return _RE_SPACE_FRAGMENT_M if fragment else _RE_SPACE_M
    return _RE_SPACE_FRAGMENT if fragment else _RE_SPACE


def canonicalize_with_map(raw: str, *, fragment: bool = False) -> tuple[str, np.ndarray, np.ndarray]:
    """Return ``(canonical, raw_starts, raw_ends)``; arrays are int64 of length ``len(canonical)``.

    ``fragment=True`` skips the removal of spaces at the text's edges: use it for a piece cut out of a
    document, whose edge spaces are interior spaces of the whole.
    """
    m = _Map.identity(raw)
    for step in (
        # the invisible characters are not ASCII, nor are the newlines other than CR: ASCII text (O(1) to
        # tell) skips those scans, which match nothing in it
        lambda t: None if t.isascii() else _rewrite(t, _RE_INVISIBLE, lambda _m: ""),
        lambda t: None if t.isascii() and "\r" not in t else _rewrite(t, _RE_NEWLINE, lambda _m: "\n"),
        _nfc,
        lambda t: None if _no_space_fold(t, fragment) else _rewrite(t, _space_pattern(t, fragment), _space_out),
    ):
        s = step(m.text)
        if s is not None:
            m = m.then(s)
    return m.text, m.starts, m.ends


def canonicalize(raw: str) -> str:
    """Canonical form of a document (see the module docstring for the rules)."""
    return canonicalize_with_map(raw)[0]


def canonicalize_fragment(raw: str) -> str:
    """Canonical form of a piece of a document: the same rules, but spaces at its edges are kept."""
    return canonicalize_with_map(raw, fragment=True)[0]
