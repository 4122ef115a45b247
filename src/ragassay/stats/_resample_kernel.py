"""Compiled (numba) resample totals for :mod:`ragassay.stats.bootstrap`; its numpy path is their reference.

One pass per resample counts its draws into a reused buffer, a second multiplies the counts into each
column. The inputs are integer-valued (the bootstrap's exact grid, or cell counts), so every partial sum is
an integer below 2**53 and the sums are exact in any order: that is why ``reassoc`` (which lets LLVM
vectorize the reductions) cannot change a result, and the tests hold the kernel to the numpy path bit for
bit. Compiled code is cached next to this file (``cache=True``).

:func:`pcg64_resampled_totals` also draws the units itself: it steps numpy's PCG64 generator (the 128-bit
LCG and its XSL-RR output, with the generator's buffered half word) and bounds each 32-bit word by Lemire's
rejection exactly as ``Generator.integers(0, k, dtype=np.int32)`` does, so it consumes the same stream and
counts the same units as drawing with numpy first, at under half the CPU and without the draw arrays.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic


@njit(cache=True, nogil=True, boundscheck=False, fastmath={"reassoc", "nsz", "contract"})
def resampled_totals(draws, columns, out):
    """``out[r, j] = sum_i columns[j, draws[r, i]]`` for int32 ``draws`` (rows, k), ``columns`` (m, k)."""
    rows, k = draws.shape
    m = columns.shape[0]
    counts = np.zeros(k, np.int32)
    for r in range(rows):
        counts[:] = 0
        for i in range(k):
            counts[draws[r, i]] += 1
        for j in range(m):
            acc = 0.0
            for u in range(k):
                acc += counts[u] * columns[j, u]
            out[r, j] = acc


# numpy's PCG64: state <- state * MULTIPLIER + inc (mod 2**128); output XSL-RR of the new state
_PCG_MULTIPLIER = (2549297995355413924 << 64) + 4865540595714422341
_LOW32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_S58 = np.uint64(58)
_S63 = np.uint64(63)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)


@intrinsic
def _lcg_step(typingctx, hi, lo, inc_hi, inc_lo):
    """(high, low) words of ``(hi:lo) * MULTIPLIER + (inc_hi:inc_lo)`` mod 2**128, in LLVM's i128."""
    sig = types.UniTuple(types.uint64, 2)(types.uint64, types.uint64, types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        i64, i128 = ir.IntType(64), ir.IntType(128)

        def join(high, low):
            return builder.or_(builder.shl(builder.zext(high, i128), ir.Constant(i128, 64)),
                               builder.zext(low, i128))

        new = builder.add(builder.mul(join(args[0], args[1]), ir.Constant(i128, _PCG_MULTIPLIER)),
                          join(args[2], args[3]))
        words = (builder.trunc(builder.lshr(new, ir.Constant(i128, 64)), i64), builder.trunc(new, i64))
        return context.make_tuple(builder, signature.return_type, words)

    return sig, codegen


@njit(inline="always")
def _next64(hi, lo, inc_hi, inc_lo):
    hi, lo = _lcg_step(hi, lo, inc_hi, inc_lo)
    x = hi ^ lo
    rot = hi >> _S58
    return hi, lo, (x >> rot) | (x << ((_ZERO - rot) & _S63))


@njit(inline="always")
def _bounded(k, threshold, hi, lo, inc_hi, inc_lo, has32, buf):
    """One draw in [0, k): numpy's ``buffered_bounded_lemire_uint32`` over PCG64's ``next_uint32`` (the low
    half of a 64-bit output first, its high half kept for the next call)."""
    while True:
        if has32 != _ZERO:
            word = buf
            has32 = _ZERO
        else:
            hi, lo, x = _next64(hi, lo, inc_hi, inc_lo)
            word = x & _LOW32
            buf = x >> _S32
            has32 = _ONE
        m = word * k
        if (m & _LOW32) >= threshold:
            return m >> _S32, hi, lo, has32, buf


@njit(cache=True, nogil=True, boundscheck=False)
def pcg64_draws(state, k, out):
    """Fill int32 ``out`` with draws in [0, k) as ``Generator.integers(0, k, out.shape, dtype=np.int32)`` of
    the PCG64 generator whose state ``state`` holds (uint64: state high, low, inc high, low, has_uint32,
    uinteger); ``state`` is advanced in place. ``k`` >= 2 (numpy draws nothing for k = 1)."""
    hi, lo, inc_hi, inc_lo, has32, buf = state[0], state[1], state[2], state[3], state[4], state[5]
    kk = np.uint64(k)
    threshold = (np.uint64(0x100000000) - kk) % kk
    flat = out.reshape(-1)
    for i in range(flat.size):
        d, hi, lo, has32, buf = _bounded(kk, threshold, hi, lo, inc_hi, inc_lo, has32, buf)
        flat[i] = d
    state[0], state[1], state[4], state[5] = hi, lo, has32, buf


@njit(cache=True, nogil=True, boundscheck=False, fastmath={"reassoc", "nsz", "contract"})
def pcg64_resampled_totals(state, columns, out):
    """``resampled_totals(draws, columns, out)`` of the draws ``pcg64_draws(state, k, draws)`` would make
    (k = ``columns.shape[1]`` >= 2, ``out`` (rows, m)), drawn here: ``state`` is advanced in place exactly as
    far. Four resamples are counted, then multiplied into each column in one pass, so a column is read
    once per four resamples."""
    hi, lo, inc_hi, inc_lo, has32, buf = state[0], state[1], state[2], state[3], state[4], state[5]
    m, k = columns.shape
    rows = out.shape[0]
    kk = np.uint64(k)
    threshold = (np.uint64(0x100000000) - kk) % kk
    counts = np.zeros((4, k), np.int32)
    for r0 in range(0, rows, 4):
        nb = min(4, rows - r0)
        counts[:] = 0
        for b in range(nb):
            cb = counts[b]
            for _ in range(k):
                d, hi, lo, has32, buf = _bounded(kk, threshold, hi, lo, inc_hi, inc_lo, has32, buf)
                cb[d] += 1
        c0, c1, c2, c3 = counts[0], counts[1], counts[2], counts[3]
        for j in range(m):
            col = columns[j]
            a0 = a1 = a2 = a3 = 0.0
            for u in range(k):
                x = col[u]
                a0 += c0[u] * x
                a1 += c1[u] * x
                a2 += c2[u] * x
                a3 += c3[u] * x
            out[r0, j] = a0
            if nb > 1:
                out[r0 + 1, j] = a1
            if nb > 2:
                out[r0 + 2, j] = a2
            if nb > 3:
                out[r0 + 3, j] = a3
    state[0], state[1], state[4], state[5] = hi, lo, has32, buf
