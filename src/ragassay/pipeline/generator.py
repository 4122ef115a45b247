"""Generators turn the packed context into an answer with citations, or abstain.

The built-in :class:`ExtractiveGenerator` is deterministic and needs no model. It splits every packed unit
into sentences (canonical spans) and scores each by its *support* for the question: the IDF-weighted share
of the question's content terms that the sentence contains,

    support(S) = sum_{t in Q and S} idf(t) / sum_{t in Q} idf(t)  in [0, 1],

where terms come from the support analyzer (lower-case, the NLTK English stopword list shipped with bm25s,
Snowball English stems; see :func:`support_analyzer`) and idf is the BM25 form over the pipeline's chunks
(unseen terms get the largest idf, so a question about something absent scores low). It answers with the
best ``max_sentences`` sentences whose support reaches ``abstain_floor`` and cites the packed unit and
sentence span of each. It abstains when nothing was packed, when the best support is below the floor, or
(``absent_names``) when the question names something the collection never mentions: a capitalized word
that does not start the question and whose term has document frequency 0. Ties: higher support first, then
earlier packed rank, then earlier offset.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Protocol

from ragassay.judges.protocol import Verdict
from ragassay.pipeline.analyzer import Analyzer, TermStats
from ragassay.pipeline.chunkers import sentence_spans
from ragassay.pipeline.tokens import count_tokens
from ragassay.trace.schema import Citation, Outcome, Unit

# Chosen on the odd-numbered half of the bundled golden queries only (procedure and both halves' numbers
# in docs/pipeline.md); the config default and the example configs use it.
DEFAULT_ABSTAIN_FLOOR = 0.25

_WORD = re.compile(r"(?u)\b\w\w+\b")
QUESTION_CACHE = 4096  # analyzed questions kept by the extractive generator at most


def support_analyzer() -> Analyzer:
    """The fixed analyzer of the support score, independent of the BM25 branch's analyzer settings."""
    return Analyzer(lowercase=True, stemmer="english", stopwords="en_plus")


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
    """Pick supporting sentences from the packed units only; abstain below the floor or on absent names.

    ``analyzer`` and ``stats`` define the support terms and their idf (the pipeline passes
    :func:`support_analyzer` and document frequencies over its chunks under it).
    """

    name = "extractive-support-v2"

    def __init__(self, analyzer: Analyzer, stats: TermStats, abstain_floor: float = DEFAULT_ABSTAIN_FLOOR,
                 max_sentences: int = 2, absent_names: bool = True):
        self.analyzer = analyzer
        self.stats = stats
        self.abstain_floor = abstain_floor
        self.max_sentences = max_sentences
        self.absent_names = absent_names
        self._sentences: dict[tuple[str, int, int], list[tuple[int, int, frozenset[str]]]] = {}
        self._questions: dict[str, tuple[dict[str, float], float, list[str]]] = {}

    def preload(self, chunks, sentences) -> None:
        """Seed the sentence cache from chunks and their ``[start, end, terms]`` sentences (chunk offsets).

        The pipeline analyzes every chunk's sentences once at build time (and caches them on disk), so
        generating for a packed chunk needs no re-analysis; other spans (oracle units) are split on demand.
        """
        for c, sents in zip(chunks, sentences, strict=True):
            self._sentences[(c.doc_id, c.start, c.end)] = [(c.start + a, c.start + b, frozenset(t))
                                                           for a, b, t in sents]

    def _split(self, unit: Unit) -> list[tuple[int, int, frozenset[str]]]:
        key = (unit.doc_id, unit.start, unit.end)
        hit = self._sentences.get(key)
        if hit is None:
            text = unit.text or ""
            hit = [(unit.start + a, unit.start + b, frozenset(self.analyzer(text[a:b])))
                   for a, b in sentence_spans(text)]
            self._sentences[key] = hit
        return hit

    def _question(self, question: str) -> tuple[dict[str, float], float, list[str]]:
        """(idf weight per content term, their exact sum, names the collection never mentions)."""
        hit = self._questions.get(question)
        if hit is None:
            weights = self.stats.query_weights(self.analyzer(question))
            absent = []
            for m in list(_WORD.finditer(question))[1:]:
                word = m.group()
                if word[0].isupper():
                    terms = self.analyzer(word)
                    if terms and self.stats.df.get(terms[0], 0) == 0:
                        absent.append(word)
            if len(self._questions) >= QUESTION_CACHE:
                # the cache serves a question's trials and repeats within a stretch of the run; kept whole,
                # it would hold every question of the run (memory and collector scans growing with the run)
                self._questions.clear()
            hit = self._questions[question] = (weights, math.fsum(weights.values()), absent)
        return hit

    def support(self, question: str, sentence_terms: frozenset[str] | set[str]) -> float:
        """support(S) for one sentence's term set (0 for a question without content terms)."""
        weights, total, _ = self._question(question)
        if total <= 0:
            return 0.0
        return math.fsum([w for t, w in weights.items() if t in sentence_terms]) / total

    def generate(self, question: str, packed: list[Unit]) -> Generation:
        weights, total, absent = self._question(question)
        tokens_in = count_tokens(question) + sum(u.tokens if u.tokens is not None else count_tokens(u.text or "")
                                                 for u in packed)
        scored = []
        for rank, unit in enumerate(packed):
            if unit.text is None:
                raise ValueError(f"packed unit {unit.unit_id} has no text; the generator needs the context text")
            for s, e, terms in self._split(unit):
                sup = math.fsum([w for t, w in weights.items() if t in terms]) / total if total > 0 else 0.0
                scored.append((-sup, rank, s, e, unit))
        scored.sort(key=lambda x: (x[0], x[1], x[2]))
        best = -scored[0][0] if scored else 0.0
        details: dict = {"best_support": best}
        if self.absent_names and absent:
            details["absent_names"] = absent
        if not scored or best < self.abstain_floor or "absent_names" in details:
            return Generation(None, [], "abstained", tokens_in, 0, details=details)
        chosen = [x for x in scored if -x[0] >= self.abstain_floor][: self.max_sentences]
        parts = [u.text[s - u.start : e - u.start] for _, _, s, e, u in chosen]
        answer = " ".join(parts)
        cites = [Citation(unit_id=u.unit_id, doc_id=u.doc_id, start=s, end=e) for _, _, s, e, u in chosen]
        return Generation(answer, cites, "answered", tokens_in, count_tokens(answer), details=details)


@dataclass(frozen=True)
class FloorChoice:
    """Result of :func:`choose_abstain_floor`: the floor and its rates on the tuning queries."""

    floor: float
    over_refusal: float
    abstention_recall: float


def abstention_rates(best_support, forced, answerable, floor: float) -> tuple[float, float]:
    """(over-refusal, abstention recall) of the rule "abstain if forced or best_support < floor".

    over-refusal = share of answerable questions abstained on; abstention recall = share of unanswerable
    ones abstained on. A side with no questions gives NaN.
    """
    import numpy as np

    best = np.asarray(best_support, dtype=np.float64)
    abst = np.asarray(forced, dtype=bool) | (best < floor)
    ans = np.asarray(answerable, dtype=bool)
    orf = float(abst[ans].mean()) if ans.any() else math.nan
    rec = float(abst[~ans].mean()) if (~ans).any() else math.nan
    return orf, rec


def choose_abstain_floor(best_support, forced, answerable, floors, max_over_refusal: float = 0.25) -> FloorChoice:
    """The floor with the highest abstention recall whose over-refusal stays <= ``max_over_refusal``.

    Ties go to the lower floor (fewer refusals). ``floors`` is the grid searched; if no floor meets the
    bound the lowest is returned. Run on a tuning split only; report the other split as held out.
    """
    best: FloorChoice | None = None
    for f in sorted(float(x) for x in floors):
        orf, rec = abstention_rates(best_support, forced, answerable, f)
        if best is None:
            best = FloorChoice(f, orf, rec)
        if orf <= max_over_refusal and (rec > best.abstention_recall or best.over_refusal > max_over_refusal):
            best = FloorChoice(f, orf, rec)
    if best is None:
        raise ValueError("floors is empty; give at least one candidate floor")
    return best


LLM_SYSTEM = (
    "Answer the question from the numbered context units only. Put the answer in 'answer' and the numbers of "
    "the units it relies on in 'cited_units'. If the context does not answer the question, set "
    "'cannot_judge' to true and leave 'answer' empty: abstaining is better than guessing. Reason briefly in "
    "'justification' first."
)


class LLMGenerator:
    """Generate with an LLM through the judge clients (``ragassay.judges.providers``): the same SDKs,
    retries, timeouts and key handling. Structured output: the answer, the cited unit numbers, and the
    escape hatch as abstention. Outcomes: a valid answer is ``answered``, the escape hatch ``abstained``,
    a provider refusal ``refused``; anything else (truncated, malformed, error) is ``error`` with its
    reason in ``details``. ``client`` is an ``AnthropicJudge`` or ``OpenAIJudge`` (no store: a generation
    is not cached)."""

    def __init__(self, client):
        self.client = client
        self.name = f"llm:{client.provider}:{client.sampling.model}"

    def generate(self, question: str, packed: list[Unit]) -> Generation:
        import hashlib

        from ragassay.judges.protocol import ItemKey, JudgeRequest

        ctx = "\n".join(f"<unit id=\"{i + 1}\">{u.text or ''}</unit>" for i, u in enumerate(packed))
        user = f"<context>\n{ctx}\n</context>\n<question>{question}</question>"
        qkey = hashlib.sha256(question.encode("utf-8")).hexdigest()[:16]
        run = self.client.run([JudgeRequest(ItemKey("generate", qkey, 0, "answer"), "generate", GeneratedAnswer,
                                            LLM_SYSTEM, user)])
        run.raise_if_stopped()
        j = run.judgements[0]
        rec = j.record
        details = {"outcome": rec.outcome, "attempts": rec.attempts, "latency_ms": rec.latency_ms}
        if rec.reason:
            details["reason"] = rec.reason
        tokens = (rec.input_tokens, rec.output_tokens, rec.cost)
        if rec.outcome == "ok" and j.verdict is not None and j.verdict.answer.strip():
            v = j.verdict
            cites = [Citation(unit_id=packed[k - 1].unit_id, doc_id=packed[k - 1].doc_id)
                     for k in dict.fromkeys(v.cited_units) if 1 <= k <= len(packed)]
            bad = [k for k in v.cited_units if not 1 <= k <= len(packed)]
            if bad:
                details["invalid_citations"] = bad
            return Generation(v.answer, cites, "answered", *tokens, details=details)
        if rec.outcome in ("ok", "cannot_judge"):
            return Generation(None, [], "abstained", *tokens, details=details)
        if rec.outcome == "refused":
            return Generation(None, [], "refused", *tokens, details=details)
        return Generation(None, [], "error", *tokens, details=details)



class GeneratedAnswer(Verdict):
    """The llm generator's structured output; ``cannot_judge`` is the abstention."""

    answer: str
    cited_units: list[int]


def make_llm_generator(cfg, api_key: str | None = None) -> LLMGenerator:
    """The ``kind: llm`` generator of a validated ``GeneratorConfig`` (key from the provider's variable)."""
    from ragassay.judges.protocol import Sampling
    from ragassay.judges.providers import AnthropicJudge, OpenAIJudge, Price

    sampling = Sampling(cfg.model, max_tokens=cfg.max_tokens or 1024)
    prices = {cfg.model: Price(input=cfg.price_input, output=cfg.price_output)}
    cls = AnthropicJudge if cfg.provider == "anthropic" else OpenAIJudge
    kwargs = {} if cls is AnthropicJudge else {"max_tokens_param": "max_tokens" if cfg.base_url else
                                                "max_completion_tokens"}
    return LLMGenerator(cls(sampling, prices, api_key=api_key, base_url=cfg.base_url, **kwargs))
