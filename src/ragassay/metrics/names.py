"""Metric identities: small parseable value objects with one canonical spelling.

``Metric.parse("ndcg@10")`` and ``str(metric) == "ndcg@10"`` round-trip, so names in files, tables, CLI flags
and store rows are the same thing (the ir_measures idea, with ragassay's own spelling).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ragassay.errors import InputError

# name -> cutoff rule: "required", "optional" or "none"
_CUTOFF_RULE: dict[str, str] = {
    "recall": "required",
    "precision": "required",
    "success": "required",
    "judged": "required",
    "rr": "optional",
    "ap": "optional",
    "ndcg": "optional",
    "rprec": "none",
    "bpref": "none",
}

# Common spellings from other tools, used only to suggest the canonical one in an error message.
_SUGGEST: dict[str, str] = {
    "p": "precision",
    "mrr": "rr",
    "recip_rank": "rr",
    "map": "ap",
    "map_cut": "ap",
    "ndcg_cut": "ndcg",
    "r-prec": "rprec",
    "r_prec": "rprec",
    "rprecision": "rprec",
    "hit": "success",
    "hits": "success",
    "hit_rate": "success",
}

_PATTERN = re.compile(r"^([A-Za-z_\-]+)(?:@(\d+))?$")


@dataclass(frozen=True, order=True)
class Metric:
    """A ranking metric identity: ``name`` plus an optional cutoff ``k``."""

    name: str
    k: int | None = None

    def __post_init__(self) -> None:
        rule = _CUTOFF_RULE.get(self.name)
        if rule is None:
            raise InputError(
                f"unknown metric {self.name!r}; known: {', '.join(sorted(_CUTOFF_RULE))} (e.g. ndcg@10, recall@100)"
            )
        if rule == "required" and self.k is None:
            raise InputError(f"metric {self.name!r} needs a cutoff: write {self.name}@K, e.g. {self.name}@10")
        if rule == "none" and self.k is not None:
            raise InputError(f"metric {self.name!r} takes no cutoff: write {self.name}")
        if self.k is not None and self.k < 1:
            raise InputError(f"metric {self.name}@{self.k}: the cutoff must be a positive integer")

    @classmethod
    def parse(cls, text: str | Metric) -> Metric:
        """Parse the canonical spelling (``recall@10``, ``rr``, ``ap@100``, ``bpref``); reject others with a hint."""
        if isinstance(text, Metric):
            return text
        s = text.strip()
        m = _PATTERN.match(s)
        if m is None:
            raise InputError(f"cannot parse metric {text!r}: expected NAME or NAME@K, e.g. ndcg@10")
        name, k = m.group(1), m.group(2)
        if name not in _CUTOFF_RULE:
            hint = _SUGGEST.get(name.lower())
            fix = f"; did you mean {hint}{'@' + k if k else ''}?" if hint else ""
            raise InputError(
                f"unknown metric {text!r}{fix} (canonical names: {', '.join(sorted(_CUTOFF_RULE))})"
            )
        return cls(name, int(k) if k is not None else None)

    def __str__(self) -> str:
        return self.name if self.k is None else f"{self.name}@{self.k}"
