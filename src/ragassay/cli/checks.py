"""Range checks of command-line numbers, run before a command reads or creates anything.

Each check returns the problem as one line naming the flag, the value given and the range (None when the
value is fine); :func:`refuse` raises one :class:`~ragassay.errors.InputError` with every problem, so the
command exits 2 with one ``error:`` line per bad flag. Floats must be finite: ``nan`` passes no comparison
and would otherwise slip through a range written as ``not x < low``.
"""

from __future__ import annotations

import math

from ragassay.errors import InputError

RESAMPLES_RANGE = (100, 1_000_000)  # what compare, gate policies and judge validate accept


def count(flag: str, value: int | None, low: int = 1, high: int | None = None, why: str = "") -> str | None:
    """``value`` (None = not given) must be an integer in [low, high]."""
    if value is None or (low <= value and (high is None or value <= high)):
        return None
    span = f"between {low:,} and {high:,}" if high is not None else f">= {low:,}"
    return f"{flag} must be an integer {span}, got {value}" + (f"; {why}" if why else "")


def resamples(value: int, flag: str = "--resamples") -> str | None:
    """Bootstrap resamples: the range compare and gate policies accept."""
    return count(flag, value, *RESAMPLES_RANGE)


def seed(value: int, flag: str = "--seed") -> str | None:
    """A random seed is a non-negative integer (numpy's generators refuse a negative one)."""
    return count(flag, value, 0)


def number(flag: str, value: float | None, low: float, high: float = math.inf, *, low_open: bool = False,
           high_open: bool = False, why: str = "") -> str | None:
    """``value`` (None = not given) must be finite and in the interval from ``low`` to ``high``, each end
    closed unless ``*_open``; an infinite ``high`` means no upper end."""
    if value is None:
        return None
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    if math.isfinite(value) and above and below:
        return None
    if math.isinf(high):
        span = f"{'>' if low_open else '>='} {low:g}"
    else:
        span = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    return f"{flag} must be a finite number {span}, got {value:g}" + (f"; {why}" if why else "")


def refuse(*problems: str | None) -> None:
    """Raise one :class:`InputError` listing every problem given (None entries are no problem)."""
    lines = [p for p in problems if p]
    if lines:
        raise InputError("\n".join(lines))
