"""Nugget scores (TREC RAG style): share of (vital) nuggets an answer supports.

credit: support = 1, partial = 0.5 (0 in the strict variants), none = 0; a nugget without an assignment
counts as none. v_* use vital nuggets only, a_* all nuggets. A query with no vital nuggets has v undefined
(NaN); one with no nuggets at all has every score NaN. Reference: Pradeep et al., AutoNuggetizer (TREC RAG 2024).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ragassay.errors import InputError

LABELS = ("support", "partial", "none")


@dataclass(frozen=True)
class Nugget:
    id: str
    vital: bool


@dataclass(frozen=True, eq=False)
class NuggetScores:
    v_strict: np.ndarray
    v: np.ndarray
    a_strict: np.ndarray
    a: np.ndarray

    def means(self) -> dict[str, float]:
        out = {}
        for name in ("v_strict", "v", "a_strict", "a"):
            x = getattr(self, name)
            out[name] = float(np.nanmean(x)) if np.any(~np.isnan(x)) else float("nan")
        return out


def nugget_scores(
    nuggets: Sequence[Sequence[Nugget]], assignments: Sequence[Mapping[str, str]]
) -> NuggetScores:
    """Per-answer nugget scores from each question's nuggets and the answer's {nugget id: label} map."""
    if len(nuggets) != len(assignments):
        raise InputError(
            f"{len(nuggets)} nugget lists but {len(assignments)} assignment maps; one per answer"
        )
    n = len(nuggets)
    sums = np.zeros((n, 4))  # vital strict, vital lenient, all strict, all lenient
    counts = np.zeros((n, 2))  # vital, all
    for i, (ns, assigned) in enumerate(zip(nuggets, assignments, strict=True)):
        ids = {x.id for x in ns}
        unknown = set(assigned) - ids
        if unknown:
            raise InputError(
                f"answer {i}: assignment for unknown nugget(s) {sorted(unknown)}; known: {sorted(ids)}"
            )
        for x in ns:
            label = assigned.get(x.id, "none")
            if label not in LABELS:
                raise InputError(f"answer {i}, nugget {x.id!r}: label {label!r} is not one of {LABELS}")
            strict = 1.0 if label == "support" else 0.0
            lenient = strict if label != "partial" else 0.5
            sums[i, 2] += strict
            sums[i, 3] += lenient
            counts[i, 1] += 1
            if x.vital:
                sums[i, 0] += strict
                sums[i, 1] += lenient
                counts[i, 0] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        v = np.where(counts[:, :1] > 0, sums[:, :2] / counts[:, :1], np.nan)
        a = np.where(counts[:, 1:] > 0, sums[:, 2:] / counts[:, 1:], np.nan)
    return NuggetScores(v_strict=v[:, 0], v=v[:, 1], a_strict=a[:, 0], a=a[:, 1])
