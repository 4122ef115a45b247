"""Numeric Arrow <-> numpy conversion that does not import pandas.

pyarrow imports pandas (0.2-0.3 s of CPU) the first time it converts through its pandas machinery:
``Array.to_numpy``, ``ChunkedArray.to_numpy``, and ``pa.array``/``pa.scalar`` on anything but an Arrow
object. A short command such as ``ragassay trec`` pays that on every start. These two functions read and
write the fixed-width value buffer directly, which is all a numeric column without nulls needs; anything else
(nulls, strings, nested types) goes through pyarrow's own conversion unchanged.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def to_numpy(values: pa.Array | pa.ChunkedArray, null=None) -> np.ndarray:
    """The values of a numeric Arrow array as numpy, like ``values.to_numpy()``.

    One chunk without nulls is a read-only zero-copy view (as ``Array.to_numpy()`` gives); several chunks are
    concatenated. Booleans are unpacked from their bit buffer. ``null`` (when given) replaces null entries,
    like ``values.fill_null(null).to_numpy()``; without it an array with nulls goes through pyarrow.
    """
    if isinstance(values, pa.ChunkedArray):
        if values.num_chunks == 1:
            return to_numpy(values.chunk(0), null)
        if values.num_chunks == 0:
            return np.zeros(0, dtype=_dtype(values.type))
        return np.concatenate([to_numpy(c, null) for c in values.chunks])
    kind = values.type
    numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
    if not numeric or (values.null_count and null is None):
        return values.to_numpy(zero_copy_only=False)
    validity, data = values.buffers()[:2]
    n, start = len(values), values.offset
    if n == 0:
        return np.zeros(0, dtype=_dtype(kind))
    if pa.types.is_boolean(kind):
        out = _bits(data, start, n)
    else:
        out = np.frombuffer(data, dtype=_dtype(kind), count=start + n)[start:]
        out.flags.writeable = False  # Arrow data is immutable, even where the buffer would allow writes
    if values.null_count:
        out = np.where(_bits(validity, start, n), out, null)
    return out


def _bits(buffer: pa.Buffer, start: int, n: int) -> np.ndarray:
    """Arrow's LSB-first bitmap as booleans, entries ``start`` to ``start + n``."""
    return np.unpackbits(np.frombuffer(buffer, dtype=np.uint8), bitorder="little")[start : start + n].astype(bool)


def from_numpy(values: np.ndarray) -> pa.Array:
    """A 1-d numeric (or bool) numpy array as an Arrow array without nulls, like ``pa.array(values)``."""
    x = np.ascontiguousarray(values)
    if x.ndim != 1 or x.dtype.kind not in "iufb":
        return pa.array(x)
    if x.dtype.kind == "b":
        bits = np.packbits(x, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(x), [None, pa.py_buffer(bits)])
    return pa.Array.from_buffers(pa.from_numpy_dtype(x.dtype), len(x), [None, pa.py_buffer(x)])


def _dtype(kind: pa.DataType) -> np.dtype:
    return np.dtype(bool) if pa.types.is_boolean(kind) else np.dtype(kind.to_pandas_dtype())
