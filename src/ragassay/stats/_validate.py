"""Boundary checks shared by the stats modules: one clear InputError, then trusted array code."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ragassay.errors import InputError


def as_float_vector(x, name: str, *, allow_nan: bool = True, min_len: int = 1) -> np.ndarray:
    """Return ``x`` as a 1-D float64 array or raise InputError naming the argument."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"{name}: expected numbers, got {type(x).__name__} ({exc}); pass a 1-D numeric array"
        ) from exc
    if arr.ndim != 1:
        raise InputError(
            f"{name}: expected a 1-D array, got shape {arr.shape}; flatten it or pass one column"
        )
    if arr.size < min_len:
        raise InputError(f"{name}: needs at least {min_len} value(s), got {arr.size}")
    if np.isinf(arr).any():
        raise InputError(
            f"{name}: contains infinite values at positions {np.flatnonzero(np.isinf(arr))[:5].tolist()}"
        )
    if not allow_nan and np.isnan(arr).any():
        raise InputError(
            f"{name}: contains NaN at positions {np.flatnonzero(np.isnan(arr))[:5].tolist()}; drop or impute them first"
        )
    return arr


def as_float_matrix(x, name: str) -> np.ndarray:
    """Return ``x`` as a 2-D float64 (n items, m metrics) array; a 1-D input becomes one column."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"{name}: expected numbers ({exc}); pass an (items x metrics) numeric array"
        ) from exc
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise InputError(f"{name}: expected shape (n_items,) or (n_items, n_metrics), got {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise InputError(f"{name}: empty input with shape {arr.shape}; need at least one item and one metric")
    if np.isinf(arr).any():
        raise InputError(
            f"{name}: contains infinite values; replace them with finite scores or NaN (undefined)"
        )
    return arr


def same_length(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    if a.shape != b.shape:
        raise InputError(
            f"{name_a} and {name_b} must be paired item by item: shapes {a.shape} and {b.shape} differ; "
            "align both arms on the same items in the same order"
        )


def check_prob(x: float, name: str, *, open_low: bool = True, open_high: bool = True) -> float:
    x = float(x)
    lo_ok = x > 0 if open_low else x >= 0
    hi_ok = x < 1 if open_high else x <= 1
    if not (lo_ok and hi_ok) or np.isnan(x):
        lo = "(0" if open_low else "[0"
        hi = "1)" if open_high else "1]"
        raise InputError(f"{name} must lie in {lo}, {hi}, got {x}")
    return x


def metric_names(names: Sequence[str] | None, m: int) -> tuple[str, ...]:
    if names is None:
        return tuple(f"metric_{j}" for j in range(m))
    names = tuple(str(s) for s in names)
    if len(names) != m:
        raise InputError(f"metrics: got {len(names)} names for {m} metric columns; pass one name per column")
    if len(set(names)) != len(names):
        raise InputError(f"metrics: duplicate names {sorted({s for s in names if names.count(s) > 1})}")
    return names


def as_rng(seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is not None and not isinstance(seed, int | np.integer):
        raise InputError(f"seed must be an int, None or numpy.random.Generator, got {type(seed).__name__}")
    return np.random.default_rng(seed)
