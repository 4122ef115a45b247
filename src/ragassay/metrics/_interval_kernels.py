"""Compiled (numba) interval counts for :mod:`ragassay.metrics.tokens`; its numpy path is their reference.

One pass over the run, a query at a time: sort the query's few intervals (insertion sort, in place), merge them, and walk the two merged
lists together. Everything is integer arithmetic, so both paths give identical counts on any CPU. Compiled
code is cached next to this file (``cache=True``).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline="always")
def _merge(lo, hi, a, b, out_lo, out_hi):
    """Merge intervals a..b-1 (any order) into disjoint sorted ones in out_*; returns how many were written.

    An insertion sort of the copied intervals: a query has tens of units, where it beats a general sort (and
    allocates nothing)."""
    m = 0
    for i in range(a, b):
        if hi[i] > lo[i]:
            out_lo[m] = lo[i]
            out_hi[m] = hi[i]
            m += 1
    for t in range(1, m):
        s, e = out_lo[t], out_hi[t]
        j = t
        while j >= 1 and out_lo[j - 1] > s:
            out_lo[j] = out_lo[j - 1]
            out_hi[j] = out_hi[j - 1]
            j -= 1
        out_lo[j] = s
        out_hi[j] = e
    k = 0
    for t in range(m):
        s, e = out_lo[t], out_hi[t]
        if k > 0 and s <= out_hi[k - 1]:
            if e > out_hi[k - 1]:
                out_hi[k - 1] = e
        else:
            out_lo[k] = s
            out_hi[k] = e
            k += 1
    return k


@njit(cache=True, nogil=True)
def interval_counts(eo, el, eh, ro, rl, rh):
    n = len(eo) - 1
    n_e = np.zeros(n)
    n_ru = np.zeros(n)
    n_r = np.zeros(n)
    inter = np.zeros(n)
    width_e = 1
    width_r = 1
    for q in range(n):
        width_e = max(width_e, eo[q + 1] - eo[q])
        width_r = max(width_r, ro[q + 1] - ro[q])
    ml = np.empty(width_e, np.int64)
    mh = np.empty(width_e, np.int64)
    rl2 = np.empty(width_r, np.int64)
    rh2 = np.empty(width_r, np.int64)
    for q in range(n):
        ke = _merge(el, eh, eo[q], eo[q + 1], ml, mh)
        kr = _merge(rl, rh, ro[q], ro[q + 1], rl2, rh2)
        tot = 0
        for i in range(ro[q], ro[q + 1]):
            tot += rh[i] - rl[i]
        n_r[q] = tot
        se = 0
        for i in range(ke):
            se += mh[i] - ml[i]
        n_e[q] = se
        sr = 0
        for i in range(kr):
            sr += rh2[i] - rl2[i]
        n_ru[q] = sr
        i = 0
        j = 0
        x = 0
        while i < ke and j < kr:
            lo = max(ml[i], rl2[j])
            hi = min(mh[i], rh2[j])
            if hi > lo:
                x += hi - lo
            if mh[i] < rh2[j]:
                i += 1
            else:
                j += 1
        inter[q] = x
    return n_e, n_ru, n_r, inter
