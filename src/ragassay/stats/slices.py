"""Weighted-mean identity over a disjoint, exhaustive partition of items.

For per-item scores s_i and a partition I_1..I_J of the N items with n_j = |I_j| and w_j = n_j / N, the
overall mean is sum_j w_j mean_j, so a paired change splits exactly into slice contributions
w_j (mean_j^B - mean_j^A). This holds for means of per-item scores only; pooled metrics (corpus F1,
corpus BLEU) and overlapping slices break it, which is why overlapping slices are refused here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ragassay.errors import InputError
from ragassay.stats._validate import as_float_vector, same_length


@dataclass(frozen=True)
class SliceRow:
    name: str
    n: int
    n_excluded: int
    weight: float
    mean_a: float
    mean_b: float
    delta: float
    contribution: float

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class SliceDecomposition:
    """Overall means and per-slice rows; ``sum(contribution) == delta`` up to rounding. A slice whose items
    are all NaN has weight 0 and NaN means (reported, not dropped)."""

    n: int
    n_excluded: int
    mean_a: float
    mean_b: float
    delta: float
    slices: tuple[SliceRow, ...]

    def to_dict(self) -> dict:
        return {
            "n": self.n,
            "n_excluded": self.n_excluded,
            "mean_a": self.mean_a,
            "mean_b": self.mean_b,
            "delta": self.delta,
            "slices": [s.to_dict() for s in self.slices],
        }


def _membership(slices, n: int) -> tuple[list[str], np.ndarray]:
    """Return slice names and one slice code per item, refusing overlap and gaps."""
    if isinstance(slices, Mapping):
        names = [str(k) for k in slices]
        code = np.full(n, -1, dtype=np.int64)
        for j, (name, members) in enumerate(slices.items()):
            arr = np.asarray(members)
            if arr.dtype == bool:
                if arr.shape != (n,):
                    raise InputError(f"slice {name!r}: boolean mask has shape {arr.shape}, need ({n},)")
                idx = np.flatnonzero(arr)
            else:
                idx = arr.astype(np.int64).reshape(-1)
                if idx.size and (idx.min() < 0 or idx.max() >= n):
                    raise InputError(f"slice {name!r}: item index out of range [0, {n})")
                if np.unique(idx).size != idx.size:
                    raise InputError(f"slice {name!r} lists an item twice")
            clash = idx[code[idx] >= 0]
            if clash.size:
                other = names[int(code[clash[0]])]
                raise InputError(
                    f"slices overlap: item {int(clash[0])} is in both {other!r} and {name!r} "
                    f"({clash.size} shared item(s)); the weighted identity needs a disjoint partition. "
                    "Assign each item one primary slice, or analyse overlapping slices separately"
                )
            code[idx] = j
        gaps = np.flatnonzero(code < 0)
        if gaps.size:
            raise InputError(
                f"slices do not cover every item: {gaps.size} item(s) in no slice (first: {gaps[:5].tolist()}); "
                "add an 'other' slice so the partition is exhaustive"
            )
        return names, code
    labels = np.asarray(slices, dtype=object)
    if labels.shape != (n,):
        raise InputError(f"slice labels: need one label per item ({n}), got shape {labels.shape}")
    missing = [i for i, x in enumerate(labels) if x is None or (isinstance(x, float) and np.isnan(x))]
    if missing:
        raise InputError(
            f"slice labels missing for item(s) {missing[:5]}; every item needs exactly one slice"
        )
    names_arr, code = np.unique(labels.astype(str), return_inverse=True)
    return [str(x) for x in names_arr], code.reshape(-1)


def slice_decomposition(a, b, slices: Sequence | Mapping[str, Sequence]) -> SliceDecomposition:
    """Split the paired change in mean score (B - A) into slice contributions w_j * delta_j.

    ``slices`` is either one label per item, or a mapping slice name -> item indices (or boolean mask); a
    mapping must be disjoint and cover every item, else InputError. Items with NaN in either arm are left
    out everywhere (weights use the remaining N), so the identity still holds exactly.
    """
    av = as_float_vector(a, "a")
    bv = as_float_vector(b, "b")
    same_length(av, bv, "a", "b")
    n = av.size
    names, code = _membership(slices, n)
    ok = ~(np.isnan(av) | np.isnan(bv))
    n_ok = int(ok.sum())
    if n_ok == 0:
        raise InputError("slice_decomposition: every item has NaN in one arm; nothing to decompose")
    k = len(names)
    cnt = np.bincount(code[ok], minlength=k)
    cnt_all = np.bincount(code, minlength=k)
    sa = np.bincount(code[ok], weights=av[ok], minlength=k)
    sb = np.bincount(code[ok], weights=bv[ok], minlength=k)
    rows = []
    for j, name in enumerate(names):
        w = cnt[j] / n_ok
        if cnt[j]:
            ma, mb = sa[j] / cnt[j], sb[j] / cnt[j]
            contrib = w * (mb - ma)
        else:
            ma = mb = float("nan")
            contrib = 0.0
        rows.append(
            SliceRow(
                name,
                int(cnt[j]),
                int(cnt_all[j] - cnt[j]),
                float(w),
                float(ma),
                float(mb),
                float(mb - ma),
                float(contrib),
            )
        )
    mean_a = float(av[ok].mean())
    mean_b = float(bv[ok].mean())
    return SliceDecomposition(n_ok, n - n_ok, mean_a, mean_b, mean_b - mean_a, tuple(rows))
