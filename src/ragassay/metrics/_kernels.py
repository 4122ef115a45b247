"""Compiled (numba) kernels for the run-against-qrels join; the numpy path in :mod:`.trec` is their reference.

The kernels read the Arrow string buffers directly, a query block at a time, so no run-length temporary
arrays are built. They compute exactly what the numpy path computes (the same hash, the same label table
walk, the same duplicate rule), and the tests hold them to it. Compiled code is cached next to
this file (``cache=True``); the first call in a fresh install compiles for a few seconds.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_MUL = np.uint64(0x9E3779B97F4A7C15)
_MUL_LEN = np.uint64(0xC2B2AE3D27D4EB4F)
_MUL_WORD = np.uint64(0xFF51AFD7ED558CCD)


_MASKS = np.array([(1 << (8 * i)) - 1 for i in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def words(data: np.ndarray) -> np.ndarray:
    """``data`` (uint8) as aligned little-endian uint64 words, zero-padded by one word; a view when it can be."""
    n = len(data) // 8
    if data.ctypes.data % 8 == 0 and np.little_endian and n:
        return np.frombuffer(data, dtype=np.uint64, count=n)
    out = np.zeros(n + 2, dtype=np.uint64)
    out.view(np.uint8)[: len(data)] = data
    return out


# Helpers are inlined into the kernels; the byte-by-byte variants, for strings that end within the buffer's
# last word, stay out of line (a call inside an inlined helper makes numba's loops several times slower).


@njit(cache=True, nogil=True, inline="always")
def _word(w, at, count):
    """Little-endian uint64 of ``count`` (1..8) bytes from byte ``at`` (two aligned loads; ``at`` < limit)."""
    a = np.uint64(at)  # unsigned indices skip numba's negative-index fix-up
    q = a >> np.uint64(3)
    r = (a & np.uint64(7)) << np.uint64(3)
    v = (w[q] >> r) | ((w[q + np.uint64(1)] << (np.uint64(63) - r)) << np.uint64(1))
    return v & _MASKS[np.uint64(count)]


@njit(cache=True, nogil=True, inline="always")
def _hash(w, s, length):
    """The hash of :func:`ragassay.metrics.strkeys.string_keys` for ``length`` bytes from ``s``."""
    h = _word(w, s, min(length, 8)) if length else np.uint64(0)
    k = 8
    while k < length:
        h = (h * _MUL_WORD) ^ _word(w, s + k, min(length - k, 8))
        k += 8
    return ((np.uint64(length) * _MUL_LEN) ^ h) * _MUL


@njit(cache=True, nogil=True, inline="always")
def _same(aw, a_s, bw, b_s, length):
    """Whether ``length`` bytes from ``a_s`` (in ``aw``) equal those from ``b_s`` (in ``bw``)."""
    k = 0
    while k < length:
        c = min(length - k, 8)
        if _word(aw, a_s + k, c) != _word(bw, b_s + k, c):
            return False
        k += 8
    return True


@njit(cache=True, nogil=True)
def _bytes_word(data, at, count):
    v = np.uint64(0)
    for j in range(count):
        v |= np.uint64(data[at + j]) << np.uint64(8 * j)
    return v


@njit(cache=True, nogil=True)
def _hash_slow(data, s, length):
    """:func:`_hash` read byte by byte, for strings near the end of the buffer."""
    h = _bytes_word(data, s, min(length, 8))
    k = 8
    while k < length:
        h = (h * _MUL_WORD) ^ _bytes_word(data, s + k, min(length - k, 8))
        k += 8
    return ((np.uint64(length) * _MUL_LEN) ^ h) * _MUL


@njit(cache=True, nogil=True)
def _same_slow(a_data, a_s, b_data, b_s, length):
    for j in range(length):
        if a_data[a_s + j] != b_data[b_s + j]:
            return False
    return True


@njit(cache=True, nogil=True)
def _string_hashes(offsets, data, w):
    limit = 8 * (len(w) - 1)  # strings ending at or before this byte can be read with _word
    n = len(offsets) - 1
    length = np.empty(n, dtype=np.int64)
    head = np.empty(n, dtype=np.uint64)
    out = np.empty(n, dtype=np.uint64)
    for i in range(n):
        s = np.int64(offsets[i])
        m = np.int64(offsets[i + 1]) - s
        length[i] = m
        if s + m <= limit:
            head[i] = _word(w, s, min(m, 8)) if m else np.uint64(0)
            out[i] = _hash(w, s, m)
        else:
            head[i] = _bytes_word(data, s, min(m, 8))
            out[i] = _hash_slow(data, s, m)
    return length, head, out


def string_hashes(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Byte length, head and hash of every string of an Arrow (large_)string column, as
    :func:`ragassay.metrics.strkeys.string_keys` computes them; the tests hold the kernels' hash to it."""
    return _string_hashes(offsets, data, words(data))


@njit(cache=True, nogil=True)
def _repeats(order, ranked, offsets, data, start, p, s, m, h):
    """Whether a row ranked at ``start..p-1`` holds the same ``m`` bytes as ``data[s:s+m]`` (hash ``h``)."""
    for q in range(start, p):
        t = q if ranked else order[q]
        ts = np.int64(offsets[t])
        if (
            np.int64(offsets[t + 1]) - ts == m
            and _hash_slow(data, ts, m) == h
            and _same_slow(data, ts, data, s, m)
        ):
            return True
    return False


@njit(cache=True, nogil=True)
def _join_rows(
    order,
    starts,
    end,
    block_row,
    offsets,
    data,
    w,
    row_bits,
    table,
    table_bits,
    label_keys,
    label_offsets,
    label_data,
    label_w,
    check_duplicates,
):
    limit, label_limit = 8 * (len(w) - 1), 8 * (len(label_w) - 1)  # strings ending by then: word reads
    nb = len(starts)
    span = end - starts[0] if nb else 0
    pos = np.empty(max(span, 1), dtype=np.int64)
    lab = np.empty(max(span, 1), dtype=np.int64)
    found = 0
    dup = False
    widest = 0
    for b in range(nb):
        stop = starts[b + 1] if b + 1 < nb else end
        widest = max(widest, stop - starts[b])
    bits = 1
    while (1 << bits) < 8 * widest:  # a sparse table: fewer probe collisions, fewer mispredicted branches
        bits += 1
    size = 1 << bits
    seen_shift = np.uint64(64 - bits)  # the hash's top bits are its best mixed
    smask = np.uint64(size - 1)
    seen_hash = np.empty(size, dtype=np.uint64)
    seen_block = np.full(size, -1, dtype=np.int32)  # a slot is taken when it holds the current block
    row_shift = np.uint64(64 - row_bits)
    hash_shift = np.uint64(row_bits)
    slot_shift = np.uint64(64 - table_bits)
    n_labels = np.uint64(len(label_keys))
    ranked = len(order) == 0
    hashes = np.empty(max(widest, 1), dtype=np.uint64)  # the block's doc hashes, in L1
    for b in range(nb):
        start = starts[b]
        stop = starts[b + 1] if b + 1 < nb else end
        width = stop - start
        # 1. hash the block's doc ids
        for k in range(width):
            p = start + k
            i = np.uint64(p if ranked else order[p])  # unsigned indices skip the negative-index fix-up
            s = np.int64(offsets[i])
            e = np.int64(offsets[i + np.uint64(1)])
            hashes[k] = _hash(w, s, e - s) if e <= limit else _hash_slow(data, s, e - s)
        # 2. no doc twice in the block: equal hashes are confirmed on the bytes
        if check_duplicates and not dup:
            for k in range(width):
                h = hashes[k]
                j = h >> seen_shift
                while seen_block[j] == b:
                    if seen_hash[j] == h:
                        p = start + k
                        i = p if ranked else order[p]
                        s = np.int64(offsets[i])
                        dup = _repeats(
                            order, ranked, offsets, data, start, p, s, np.int64(offsets[i + 1]) - s, h
                        )
                        if dup:
                            break
                    j = (j + np.uint64(1)) & smask
                if dup:
                    break
                seen_block[j] = b
                seen_hash[j] = h
        # 3. look up the labels of the block's query
        r = block_row[b]
        if r < 0:
            continue
        row_key = np.uint64(r) << row_shift
        for k in range(width):
            key = row_key | (hashes[k] >> hash_shift)
            slot = key >> slot_shift
            first = table[slot]
            if first < 0:
                continue
            li = np.uint64(first)
            # labels sharing a slot sit next to each other in key order: walk on through the slot
            while li < n_labels and (label_keys[li] >> slot_shift) == slot:
                if label_keys[li] == key:
                    p = start + k
                    i = np.uint64(p if ranked else order[p])
                    s = np.int64(offsets[i])
                    m = np.int64(offsets[i + np.uint64(1)]) - s
                    ls = np.int64(label_offsets[li])
                    if np.int64(label_offsets[li + np.uint64(1)]) - ls == m:
                        if s + m <= limit and ls + m <= label_limit:
                            same = _same(label_w, ls, w, s, m)
                        else:
                            same = _same_slow(label_data, ls, data, s, m)
                        if same:
                            pos[found] = p
                            lab[found] = li
                            found += 1
                            break
                li += np.uint64(1)
    return pos[:found], lab[:found], dup


def join_rows(
    order, starts, end, block_row, offsets, data, qrels, label_offsets, label_data, check_duplicates
):
    """Look up every run row's label and check that no doc repeats within a query block.

    Rows are visited in ranked order (``order[p]`` is the row at ranked position p; an empty ``order`` means
    the rows are already ranked); ``starts`` are the ranked positions where each block begins (the last
    one ends at ``end``) and ``block_row`` its qrels row (-1 = a query the qrels lack). The label side is
    the :class:`Qrels` key table and the labels' doc id buffers. Returns (ranked positions with a label,
    their label indices, whether some block repeats a doc). Every hash match is confirmed on the bytes, so
    hash collisions cost time, never correctness.
    """
    return _join_rows(
        order,
        starts,
        end,
        block_row,
        offsets,
        data,
        words(data),
        qrels.row_bits,
        qrels.table,
        qrels.table_bits,
        qrels.keys,
        label_offsets,
        label_data,
        words(label_data),
        check_duplicates,
    )
