"""Definitional choices that change metric values, recorded on every result.

Defaults suit span-labelled golden sets (grades 0-3, relevant = grade >= 2, exponential gain, the run's own
order for tied scores). ``Semantics.trec_eval()`` reproduces trec_eval / pytrec_eval exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from ragassay.errors import InputError

Gain = Literal["exp", "linear"]
Ties = Literal["given", "trec_eval"]
Negatives = Literal["nonrelevant", "unjudged"]


@dataclass(frozen=True)
class Semantics:
    """How grades become relevance, gain and order.

    relevance_level: a document is relevant when its grade >= this level (binary metrics and bpref).
    gain: nDCG gain, ``exp`` = (2^g - 1), ``linear`` = g (trec_eval's ndcg_cut). Grades <= 0 give gain 0.
    ties: ``given`` keeps the run's order among equal scores (stable sort by score descending);
        ``trec_eval`` orders equal scores by doc id descending and compares scores as float32.
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
        if self.ties not in ("given", "trec_eval"):
            raise InputError(f"unknown tie rule {self.ties!r}: use 'given' or 'trec_eval'")
        if self.negatives not in ("nonrelevant", "unjudged"):
            raise InputError(f"unknown negatives rule {self.negatives!r}: use 'nonrelevant' or 'unjudged'")
        if self.relevance_level <= 0:
            raise InputError(
                f"relevance_level must be > 0 (got {self.relevance_level}); grade 0 is non-relevant"
            )

    @classmethod
    def trec_eval(cls, relevance_level: float = 1, gain: Gain = "linear") -> Semantics:
        """trec_eval's conventions: rel >= 1, linear gain, float32 ties broken by doc id descending."""
        return cls(relevance_level=relevance_level, gain=gain, ties="trec_eval", negatives="unjudged")

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def __str__(self) -> str:
        return f"rel>={self.relevance_level:g};gain={self.gain};ties={self.ties};negatives={self.negatives}"
