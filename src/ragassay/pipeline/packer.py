"""Token-budget packing: the fair comparison unit across chunkings is a fixed budget, not a fixed k.

Policy ``stop`` (the default, and the definition used by the evaluation method): take units in rank order
while the running total stays within the budget; at the first unit that does not fit, stop. Every later
candidate is cut too. Policy ``skip`` instead skips a unit that does not fit and keeps trying smaller ones
further down; it packs more text but no longer respects rank order strictly, so it is named in the config.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def pack(
    units: Sequence[T], budget_tokens: int, count: Callable[[T], int], policy: str = "stop"
) -> tuple[list[T], list[T], int]:
    """(packed, cut, used_tokens) for units offered in rank order under ``budget_tokens``."""
    if policy not in ("stop", "skip"):
        raise ValueError(f"unknown packing policy {policy!r}; use stop or skip")
    packed: list[T] = []
    cut: list[T] = []
    used = 0
    stopped = False
    for u in units:
        t = count(u)
        if not stopped and used + t <= budget_tokens:
            packed.append(u)
            used += t
        else:
            cut.append(u)
            stopped = policy == "stop"
    return packed, cut, used
