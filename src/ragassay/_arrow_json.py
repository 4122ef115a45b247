"""What the two Arrow JSON-lines readers share (trace lines in :mod:`ragassay.trace._arrow_batch`, golden
lines in :mod:`ragassay.golden._fast`): one parse of a piece of whole lines, and the small column helpers.

Both readers parse a piece of lines as one table, check it as columns, and hand any line they cannot vouch
for to the slow (json module + pydantic) path, which words every message.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

# A key containing an escape: from a backslash's escape pair, string characters up to a quote followed by
# a colon. Every key with an escape matches (at its last escape); a value never does unless it contains an
# escaped quote, which only costs that line the slow path.
ESCAPED_KEY = re.compile(rb'\\.(?:[^"\\]|\\.)*"\s*:')
MIN_PIECE = 64  # a failing piece this small is handed back whole rather than split again
GROUP_BYTES = 1 << 18  # open_brackets flags this many bytes of lines at a time (a module global: tests shrink it)


def parse_lines(data: bytes, n_lines: int, options: pj.ParseOptions) -> pa.Table | None:
    """``data`` (``n_lines`` whole JSON-object lines) as one table, or None when Arrow refuses it, a string
    is not UTF-8, or the rows do not match the lines one to one."""
    try:
        table = pj.read_json(pa.BufferReader(data),
                             read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 16, len(data) + 1)),
                             parse_options=options)
        table.validate(full=True)  # Arrow's JSON reader copies string bytes without checking their UTF-8
    except (pa.ArrowException, UnicodeDecodeError):
        return None
    # A line holding two objects would shift every later row; lines start with '{' and end with '}', so
    # no object spans two lines and equal counts mean one row per line.
    return table if table.num_rows == n_lines else None


def filled(arr: pa.Array, fill) -> np.ndarray:
    """``arr`` as numpy, nulls replaced by ``fill``."""
    return pc.fill_null(arr, fill).to_numpy(zero_copy_only=False)


def valid(arr: pa.Array) -> np.ndarray:
    """Per value: not null."""
    return arr.is_valid().to_numpy(zero_copy_only=False)


def open_brackets(b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per line ``b[starts[i]:ends[i]]`` (ascending, not overlapping): its ``{`` and ``[`` bytes, an upper
    bound of its nesting. numpy passes over groups of lines of about ``GROUP_BYTES``, so the flags stay
    small beside the piece and the GIL is free while they are counted. ``[`` (0x5b) and ``{`` (0x7b) are
    the two bytes that OR 0x20 makes ``{``."""
    out = np.zeros(len(starts), dtype=np.int64)
    nonempty = np.flatnonzero(ends > starts)
    group_ends = ends[nonempty]
    i = 0
    while i < len(nonempty):
        base = int(starts[nonempty[i]])
        j = max(int(np.searchsorted(group_ends, base + GROUP_BYTES, side="right")), i + 1)
        g = nonempty[i:j]
        flags = np.bitwise_or(b[base:int(ends[g[-1]])], 32)
        is_open = flags.view(np.bool_)
        np.equal(flags, 123, out=is_open)
        out[g] = count_in_lines(is_open, starts[g] - base, ends[g] - base)
        i = j
    return out


def count_in_lines(flags: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per line ``[starts[i], ends[i])``: how many of ``flags`` (a bool per byte) are set. The flagged bytes
    (brackets, backslashes) are sparse: their offsets and two binary searches, not a running count per
    byte (a cumsum with a cast took 20x the time, holding the GIL, and eight bytes per byte)."""
    at = np.flatnonzero(flags)
    return np.searchsorted(at, ends) - np.searchsorted(at, starts)


def depth(b: np.ndarray) -> int:
    """The deepest bracket nesting of a line's bytes (brackets inside strings counted too: a heuristic
    bound)."""
    step = ((b == 91) | (b == 123)).astype(np.int32) - ((b == 93) | (b == 125))
    return int(np.cumsum(step).max()) if len(step) else 0


_NULL = np.frombuffer(b"null", dtype="<u4")[0]


def null_offsets(data: bytes) -> np.ndarray:
    """The offsets of every ``null`` in ``data``, ascending (``null`` cannot overlap itself, so these are
    the offsets repeated ``bytes.find`` visits). Four passes comparing four bytes at a time, one per
    alignment: numpy compares without the GIL, which the parse threads and the scoring loop share (a
    ``bytes.find`` of a 10 MB piece held it for 7 ms)."""
    hits = [np.flatnonzero(np.frombuffer(data, dtype="<u4", count=(len(data) - k) // 4, offset=k) == _NULL) * 4 + k
            for k in range(min(4, len(data)))]
    return np.sort(np.concatenate(hits)) if hits else np.zeros(0, dtype=np.int64)


_SPACE = b" \t\n\r\x0b\x0c"  # what \s matches in a bytes pattern (JSON allows the first four)


def null_keys(data: bytes) -> set[bytes]:
    r"""Every key written with a literal null value in ``data``: for each ``null``, the text between the
    quotes before its colon (any whitespace between), as the pattern ``"(key)"\s*:\s*null`` finds it (and
    some strings that are not keys). A key without escapes is always found; a key with one is the caller's
    to treat apart. The ``null`` literals are found without the GIL (:func:`null_offsets`)."""
    out = set()
    for at in null_offsets(data).tolist():
        j = at - 1
        while j >= 0 and data[j] in _SPACE:
            j -= 1
        if j < 0 or data[j] != 58:  # ':'
            continue
        j -= 1
        while j >= 0 and data[j] in _SPACE:
            j -= 1
        if j > 0 and data[j] == 34:  # '"'
            start = data.rfind(b'"', 0, j)
            if start >= 0:
                out.add(data[start + 1:j])
    return out


def in_range(arr: pa.Array, lo: int, hi: int) -> np.ndarray:
    """Per value: null, or within [lo, hi]."""
    v = filled(arr, lo)
    return (v >= lo) & (v <= hi)
