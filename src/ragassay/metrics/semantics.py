"""Definitional choices that change metric values, recorded on every result.

Defaults suit span-labelled golden sets (grades 0-3, relevant = grade >= 2, exponential gain, the run's own
order for tied scores). ``Semantics.trec_eval()`` reproduces trec_eval 9.x / pytrec_eval exactly;
``Semantics.trec_eval(ties="trec_eval10")`` follows trec_eval 10.0, which compares scores as doubles.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from ragassay.errors import InputError

Gain = Literal["exp", "linear"]
Ties = Literal["given", "trec_eval9", "trec_eval10"]
Negatives = Literal["nonrelevant", "unjudged"]

TIE_RULES = ("given", "trec_eval9", "trec_eval10")
# the spelling used before trec_eval 10 changed its score type; it always meant float32 comparison
TIE_ALIASES = {"trec_eval": "trec_eval9"}


def tie_rule(name: str) -> str:
    """The canonical tie rule for ``name`` (aliases resolved); InputError for an unknown one."""
    rule = TIE_ALIASES.get(name, name)
    if rule not in TIE_RULES:
        raise InputError(
            f"unknown tie rule {name!r}: use 'given', 'trec_eval9' (float32 scores, as trec_eval 9.x and "
            f"pytrec_eval; alias 'trec_eval') or 'trec_eval10' (double scores, as trec_eval 10.0)"
        )
    return rule


@dataclass(frozen=True)
class Semantics:
    """How grades become relevance, gain and order.

    relevance_level: a document is relevant when its grade >= this level (binary metrics and bpref).
    gain: nDCG gain, ``exp`` = (2^g - 1), ``linear`` = g (trec_eval's ndcg_cut). Grades <= 0 give gain 0.
    ties: ``given`` keeps the run's order among equal scores (stable sort by score descending);
        ``trec_eval9`` orders equal scores by doc id descending and compares scores as float32, as
        trec_eval 9.x and pytrec_eval do (two scores that differ only beyond float32 precision tie);
        ``trec_eval10`` is the same order with scores compared as doubles, as trec_eval 10.0 does.
        ``trec_eval`` is accepted as an alias of ``trec_eval9``.
    negatives: how a negative grade in the labels counts. ``nonrelevant``: judged non-relevant.
        ``unjudged``: as trec_eval, where -1/-2 mean "not pooled"/"pooled but unjudged" — such documents are
        left out of bpref's judged non-relevant set and of judged@k.
    """

    relevance_level: float = 2
    gain: Gain = "exp"
    ties: Ties = "given"
    negatives: Negatives = "nonrelevant"

    def __post_init__(self) -> None:
        if self.gain not in ("exp", "linear"):
            raise InputError(f"unknown gain {self.gain!r}: use 'exp' or 'linear'")
        object.__setattr__(self, "ties", tie_rule(self.ties))
        if self.negatives not in ("nonrelevant", "unjudged"):
            raise InputError(f"unknown negatives rule {self.negatives!r}: use 'nonrelevant' or 'unjudged'")
        if self.relevance_level <= 0:
            raise InputError(
                f"relevance_level must be > 0 (got {self.relevance_level}); grade 0 is non-relevant"
            )

    @classmethod
    def trec_eval(cls, relevance_level: float = 1, gain: Gain = "linear", ties: str = "trec_eval9") -> Semantics:
        """trec_eval's conventions: rel >= 1, linear gain, ties broken by doc id descending (float32 scores
        as trec_eval 9.x and pytrec_eval; pass ``ties="trec_eval10"`` for trec_eval 10.0's doubles)."""
        return cls(relevance_level=relevance_level, gain=gain, ties=ties, negatives="unjudged")

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def __str__(self) -> str:
        return f"rel>={self.relevance_level:g};gain={self.gain};ties={self.ties};negatives={self.negatives}"
