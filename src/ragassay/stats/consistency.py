"""Repeat-run agreement from answer-cluster counts (R repeats of one query grouped into equivalence
classes with counts c_j, sum c_j = R).

modal fraction = max_j c_j / R; distinct-pair agreement = sum_j c_j (c_j - 1) / (R (R - 1)), the chance
that two different repeats land in the same class. For counts (4, 1) these are 0.8 and 0.6. Agreement is
not correctness: identical wrong answers are perfectly consistent.
"""

from __future__ import annotations

import numpy as np

from ragassay.errors import InputError


def _counts(counts) -> np.ndarray:
    c = np.asarray(counts, dtype=np.float64).reshape(-1)
    if c.size == 0 or (c < 0).any() or np.isnan(c).any() or (c != np.round(c)).any() or c.sum() < 1:
        raise InputError(
            f"cluster counts must be non-negative integers with a positive total, got {list(counts)}"
        )
    return c


def modal_fraction(counts) -> float:
    """Share of repeats in the most common answer class, max c_j / R. One repeat always gives 1.0,
    which is no evidence of stability; report R beside it."""
    c = _counts(counts)
    return float(c.max() / c.sum())


def pair_agreement(counts) -> float:
    """Probability that two distinct repeats agree: sum c_j (c_j - 1) / (R (R - 1)). Needs R >= 2."""
    c = _counts(counts)
    r = c.sum()
    if r < 2:
        raise InputError("pair_agreement needs at least 2 repeats; one repeat has no pair to compare")
    return float((c * (c - 1)).sum() / (r * (r - 1)))
