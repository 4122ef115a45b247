"""Compiled (numba) resample totals for :mod:`ragassay.stats.bootstrap`; its numpy path is their reference.

One pass per resample counts its draws into a reused buffer, a second multiplies the counts into each
column. The inputs are integer-valued (the bootstrap's exact grid, or cell counts), so every partial sum is
an integer below 2**53 and the sums are exact in any order: that is why ``reassoc`` (which lets LLVM
vectorize the reductions) cannot change a result, and the tests hold the kernel to the numpy path bit for
bit. Compiled code is cached next to this file (``cache=True``).
"""

from __future__ import annotations

import numpy as np
from numba import njit


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
