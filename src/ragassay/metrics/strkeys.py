"""Integer keys for Arrow string columns, computed by a few numpy passes over the raw buffers.

Each string gets its byte length, its ``head`` (first 8 bytes as a little-endian uint64, zero-filled) and a
64-bit ``hash`` of all its bytes (multiplicative, well mixed in the high bits). Strings of at most 8 bytes are
identified exactly by (length, head); longer ones are compared byte for byte wherever hashes agree
(:func:`equal_pairs`), so callers that use hashes to find candidates stay exact. Arrow's hash kernels
(``dictionary_encode``, ``index_in``) cost about 100 ns a string; these passes cost a few ns, and they use only
integer numpy operations (no BLAS, nothing that depends on the CPU kernel selection).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MUL = np.uint64(0x9E3779B97F4A7C15)
_MUL_LEN = np.uint64(0xC2B2AE3D27D4EB4F)
_MUL_WORD = np.uint64(0xFF51AFD7ED558CCD)
_ALL = np.uint64((1 << 64) - 1)


@dataclass(frozen=True, eq=False)
class StringKeys:
    """A string column with its per-string length (int64), head and hash (uint64)."""

    values: pa.Array
    length: np.ndarray
    head: np.ndarray
    hash: np.ndarray

    def __len__(self) -> int:
        return len(self.length)

    def slice(self, start: int, stop: int) -> StringKeys:
        return StringKeys(
            self.values.slice(start, stop - start),
            self.length[start:stop],
            self.head[start:stop],
            self.hash[start:stop],
        )

    def take(self, idx: np.ndarray) -> StringKeys:
        return StringKeys(self.values.take(pa.array(idx)), self.length[idx], self.head[idx], self.hash[idx])


def _masks(max_len: int) -> np.ndarray:
    """By length: the mask keeping a string's own bytes of its first 8-byte word."""
    mask = np.full(max_len + 1, _ALL, dtype=np.uint64)
    mask[: min(8, max_len + 1)] = [(1 << (8 * i)) - 1 for i in range(min(8, max_len + 1))]
    return mask


def _word_view(raw: np.ndarray) -> np.ndarray:
    """Element i is the little-endian uint64 made of raw[i:i+8] (an unaligned view, no copy)."""
    return np.ndarray(shape=(max(len(raw) - 7, 0),), dtype="<u8", buffer=raw, strides=(1,))


def string_keys(values: pa.Array) -> StringKeys:
    """Length, head and hash of every string of a (large_)string array without nulls.

    Large temporaries reuse one buffer: every fresh array of this size costs page faults on first touch,
    which on a virtual machine take about as long as the arithmetic.
    """
    n = len(values)
    off_type = np.int64 if pa.types.is_large_string(values.type) else np.int32
    bufs = values.buffers()
    offsets = np.frombuffer(bufs[1], dtype=off_type, count=n + 1 + values.offset)[values.offset :]
    start = offsets[:-1].astype(np.int64)  # int64 indices take numpy's fastest gather path
    length = offsets[1:] - start
    raw = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and n else np.zeros(0, np.uint8)
    max_len = int(length.max(initial=0))
    mask = _masks(max_len)
    # 8-byte reads straight from the Arrow buffer; the last few strings (starts are ascending), whose read
    # would run past its end, read a zero-padded copy of the buffer's last bytes instead
    safe = len(raw) - 8
    first_late = int(np.searchsorted(start, safe, side="right")) if safe >= 0 else 0
    late = start[first_late:].copy()
    idx = start if max_len <= 8 else start.copy()  # clipped in place: start is not needed again when short
    idx[first_late:] = max(safe, 0)
    head = _word_view(raw)[idx] if first_late else np.zeros(n, dtype=np.uint64)
    if late.size:
        base = max(safe, 0)
        tail = np.zeros(16, dtype=np.uint8)
        tail[: len(raw) - base] = raw[base:]
        head[first_late:] = _word_view(tail)[late - base]
    scratch = idx.view(np.uint64)
    np.take(mask, length, out=scratch)
    head &= scratch
    h = head
    if max_len > 8:
        words = _word_view(raw)
        h = head.copy()
        long = np.flatnonzero(length > 8)
        hl, sl, ll = h[long], start[long], length[long]
        for k in range(8, max_len, 8):
            # only strings with bytes at offset k take part, so equal strings take identical steps
            sel = np.flatnonzero(ll > k)
            hl, sl, ll, long = hl[sel], sl[sel], ll[sel], long[sel]
            # a word read past the end of the buffer keeps only in-string bytes after masking
            at = sl + k
            w = np.zeros(len(at), dtype=np.uint64)
            ok = at <= safe
            w[ok] = words[at[ok]]
            for j in np.flatnonzero(~ok):
                chunk = raw[at[j] : at[j] + 8]
                w[j] = int.from_bytes(chunk.tobytes(), "little")
            w &= mask[np.minimum(ll - k, 8)]
            hl = (hl * _MUL_WORD) ^ w
            h[long] = hl
    mixed = np.multiply(length.view(np.uint64), _MUL_LEN, out=scratch)
    mixed ^= h
    mixed *= MUL
    return StringKeys(values, length, head, mixed)


def equal_pairs(a: StringKeys, ia: np.ndarray, b: StringKeys, ib: np.ndarray) -> np.ndarray:
    """Exact equality of ``a[ia[i]]`` and ``b[ib[i]]``; only pairs longer than 8 bytes touch the bytes."""
    eq = (a.length[ia] == b.length[ib]) & (a.head[ia] == b.head[ib])
    long = np.flatnonzero(eq & (a.length[ia] > 8))
    if long.size:
        same = pc.equal(a.values.take(pa.array(ia[long])), b.values.take(pa.array(ib[long])))
        eq[long] = same.to_numpy(zero_copy_only=False)
    return eq
