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
