"""Generators turn the packed context into an answer with citations, or abstain.

The built-in :class:`ExtractiveGenerator` is deterministic and needs no model: it splits every packed unit
into sentences (canonical spans), scores each sentence by IDF-weighted coverage of the question's terms
(see :func:`ragassay.pipeline.analyzer.coverage`), and answers with the best ``max_sentences`` sentences
whose score reaches ``abstain_floor``, citing the packed unit (and the sentence span) each came from. When
the best sentence scores below the floor, or nothing was packed, it abstains (answer None).
Ties: higher score first, then earlier packed rank, then earlier offset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ragassay.pipeline.analyzer import Analyzer, TermStats, weighted_coverage
from ragassay.pipeline.chunkers import sentence_spans
from ragassay.pipeline.tokens import count_tokens
from ragassay.trace.schema import Citation, Outcome, Unit


@dataclass
class Generation:
    answer: str | None
    citations: list[Citation]
    outcome: Outcome
    tokens_in: int
    tokens_out: int
    cost: float = 0.0
    details: dict = field(default_factory=dict)


class Generator(Protocol):
    name: str

    def generate(self, question: str, packed: list[Unit]) -> Generation: ...


class ExtractiveGenerator:
    """Pick supporting sentences from the packed units only; abstain below the floor."""

    name = "extractive-coverage-v1"

    def __init__(self, analyzer: Analyzer, stats: TermStats, abstain_floor: float = 0.5, max_sentences: int = 2):
        self.analyzer = analyzer
        self.stats = stats
        self.abstain_floor = abstain_floor
        self.max_sentences = max_sentences
        self._sentences: dict[tuple[str, int, int], list[tuple[int, int, frozenset[str]]]] = {}

    def _split(self, unit: Unit) -> list[tuple[int, int, frozenset[str]]]:
        key = (unit.doc_id, unit.start, unit.end)
        hit = self._sentences.get(key)
        if hit is None:
            text = unit.text or ""
            hit = [(unit.start + a, unit.start + b, frozenset(self.analyzer(text[a:b])))
                   for a, b in sentence_spans(text)]
            self._sentences[key] = hit
        return hit

    def generate(self, question: str, packed: list[Unit]) -> Generation:
        weights = self.stats.query_weights(self.analyzer(question))
        tokens_in = count_tokens(question) + sum(u.tokens if u.tokens is not None else count_tokens(u.text or "")
                                                 for u in packed)
        scored = []
        for rank, unit in enumerate(packed):
            if unit.text is None:
                raise ValueError(f"packed unit {unit.unit_id} has no text; the generator needs the context text")
            for s, e, terms in self._split(unit):
                scored.append((-weighted_coverage(weights, terms), rank, s, e, unit))
        scored.sort(key=lambda x: (x[0], x[1], x[2]))
        best = -scored[0][0] if scored else 0.0
        if best < self.abstain_floor:
            return Generation(None, [], "abstained", tokens_in, 0, details={"best_support": best})
        chosen = [x for x in scored if -x[0] >= self.abstain_floor][: self.max_sentences]
        parts = [u.text[s - u.start : e - u.start] for _, _, s, e, u in chosen]
        answer = " ".join(parts)
        cites = [Citation(unit_id=u.unit_id, doc_id=u.doc_id, start=s, end=e) for _, _, s, e, u in chosen]
        return Generation(answer, cites, "answered", tokens_in, count_tokens(answer),
                          details={"best_support": best})
