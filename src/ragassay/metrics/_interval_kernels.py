"""Compiled (numba) interval counts for :mod:`ragassay.metrics.tokens`; its numpy path is their reference.

One pass over the run, a query at a time: merge the query's evidence, clip every retrieved unit to it, and
merge the clipped pieces (insertion sorts, in place: a query has tens of units). Everything is integer arithmetic, so both paths give identical counts on any CPU. Compiled
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
    """(|t_e|, Σ|u|, |t_e ∩ t_r|) per query. Only the pieces of units that fall inside the query's merged
    evidence are sorted and merged: most retrieved units miss the evidence, so the sort stays tiny."""
    n = len(eo) - 1
    n_e = np.zeros(n)
    n_r = np.zeros(n)
    inter = np.zeros(n)
    width_e = 1
    width_p = 1
    for q in range(n):
        width_e = max(width_e, eo[q + 1] - eo[q])
        width_p = max(width_p, (ro[q + 1] - ro[q]) * max(eo[q + 1] - eo[q], 1))
    ml = np.empty(width_e, np.int64)
    mh = np.empty(width_e, np.int64)
    pl = np.empty(width_p, np.int64)
    ph = np.empty(width_p, np.int64)
    xl = np.empty(width_p, np.int64)
    xh = np.empty(width_p, np.int64)
    for q in range(n):
        ke = _merge(el, eh, eo[q], eo[q + 1], ml, mh)
        se = 0
        for i in range(ke):
            se += mh[i] - ml[i]
        n_e[q] = se
        tot = 0
        m = 0
        for i in range(ro[q], ro[q + 1]):
            tot += rh[i] - rl[i]
            # merged evidence is disjoint, so a unit's pieces inside different evidence intervals never overlap
            for j in range(ke):
                lo = max(rl[i], ml[j])
                hi = min(rh[i], mh[j])
                if hi > lo:
                    pl[m] = lo
                    ph[m] = hi
                    m += 1
        n_r[q] = tot
        k = _merge(pl, ph, 0, m, xl, xh)
        x = 0
        for i in range(k):
            x += xh[i] - xl[i]
        inter[q] = x
    return n_e, n_r, inter
