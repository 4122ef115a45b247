"""Local judges: the offline, deterministic first tier (no network, no API key, no cost).

- ``split_claims``: sentence-level claim splitting (the reference pipeline's sentence rules).
- ``LexicalSupport``: a claim is supported by its best-matching context sentence when that sentence holds
  at least ``threshold`` of the claim's content terms; score = that share.
- ``EmbeddingSupport``: the same with the cosine of static WordLlama embeddings (the weights shipped in the
  ``wordllama`` package, loaded with ``disable_download=True``); score = the best cosine.
- ``NumericSupport``: every number in the claim (dates and amounts included, thousands separators ignored)
  occurs in the context; score = the share that does. A claim without numbers cannot be judged this way.

Each returns the same typed ``SupportVerdict`` as the LLM judges (quote = the best sentence, verbatim) plus a
score, so the tiers can be validated against each other. ``local_judge_items`` turns them into the same
metrics and undefined counts as ``metrics.judge_items``: faithfulness, citation precision/recall, and
``numeric_consistency`` (share of claims with numbers whose numbers all occur in the context).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ragassay.judges.metrics import ContextUnit, JudgedMetrics, JudgeItem, locate_quote
from ragassay.judges.protocol import SupportVerdict

_WORD = re.compile(r"(?u)\w+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# A short list on purpose: content words decide support, and this judge must not need a download.
_STOP = frozenset("a an and are as at be by for from has have in is it its of on or that the this to was were "
                  "which with not no".split())
LOCAL_METHODS = ("lexical", "embedding")


@dataclass(frozen=True)
class LocalVerdict:
    verdict: SupportVerdict
    score: float


def split_claims(answer: str | None) -> list[str]:
    """The answer's sentences, trimmed, as claims (an empty or blank answer has none)."""
    from ragassay.pipeline.chunkers import sentence_spans

    if not answer:
        return []
    return [answer[a:b] for a, b in sentence_spans(answer)]


def _sentences(context: Sequence[ContextUnit]) -> list[str]:
    from ragassay.pipeline.chunkers import sentence_spans

    return [u.text[a:b] for u in context for a, b in sentence_spans(u.text)]


def _terms(text: str) -> set[str]:
    return {w for w in (m.group().lower() for m in _WORD.finditer(text)) if w not in _STOP}


def _verdict(label: str, quote: str | None, why: str, cannot: bool = False) -> SupportVerdict:
    return SupportVerdict(justification=why, cannot_judge=cannot, label=label, quote=quote)


class LexicalSupport:
    """Support by term overlap with the best context sentence."""

    method = "lexical"

    def __init__(self, threshold: float = 0.7):
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold {threshold!r} must be in (0, 1]")
        self.threshold = threshold
        self.name = f"local:lexical-v1@{threshold:g}"

    def judge_many(self, claims: Sequence[str], context: Sequence[ContextUnit]) -> list[LocalVerdict]:
        sents = _sentences(context)
        sent_terms = [_terms(s) for s in sents]
        out = []
        for claim in claims:
            terms = _terms(claim)
            if not terms:
                out.append(LocalVerdict(_verdict("insufficient_context", None, "no content terms", True), math.nan))
                continue
            shares = [len(terms & st) / len(terms) for st in sent_terms]
            best = int(np.argmax(shares)) if shares else -1
            score = shares[best] if shares else 0.0
            if score >= self.threshold:
                out.append(LocalVerdict(_verdict("supported", sents[best], f"{score:.2f} of the claim's terms "
                                                 "are in one context sentence"), score))
            else:
                out.append(LocalVerdict(_verdict("insufficient_context", None, f"best sentence holds {score:.2f} "
                                                 "of the claim's terms"), score))
        return out


class EmbeddingSupport:
    """Support by the cosine of static WordLlama embeddings with the best context sentence."""

    method = "embedding"

    def __init__(self, threshold: float = 0.8, embedder=None):
        if not -1 <= threshold <= 1:
            raise ValueError(f"threshold {threshold!r} must be in [-1, 1]")
        if embedder is None:
            from ragassay.pipeline.embedders import WordLlamaEmbedder

            embedder = WordLlamaEmbedder()
        self.embedder = embedder
        self.threshold = threshold
        self.name = f"local:{embedder.name}@{threshold:g}"

    def judge_many(self, claims: Sequence[str], context: Sequence[ContextUnit]) -> list[LocalVerdict]:
        sents = _sentences(context)
        if not claims:
            return []
        if not sents:
            return [LocalVerdict(_verdict("insufficient_context", None, "empty context"), math.nan)
                    for _ in claims]
        vecs = self.embedder.embed_passages(list(claims) + sents)
        # float64 so the verdict at the threshold does not depend on BLAS summation order
        sims = vecs[: len(claims)].astype(np.float64) @ vecs[len(claims):].astype(np.float64).T
        best = sims.argmax(axis=1)
        out = []
        for i, j in enumerate(best):
            score = float(sims[i, j])
            if score >= self.threshold:
                out.append(LocalVerdict(_verdict("supported", sents[j], f"cosine {score:.3f}"), score))
            else:
                out.append(LocalVerdict(_verdict("insufficient_context", None, f"best cosine {score:.3f}"), score))
        return out


def numbers_of(text: str) -> list[str]:
    """The numbers written in ``text``, thousands separators removed (``1,000`` and ``1000`` are equal)."""
    out = []
    for m in _NUMBER.finditer(text):
        s = m.group()
        if re.fullmatch(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?", s):
            s = s.replace(",", "")
        out.append(s)
    return out


class NumericSupport:
    """Every number of the claim occurs in the context."""

    name = "local:numeric-v1"

    def judge_many(self, claims: Sequence[str], context: Sequence[ContextUnit]) -> list[LocalVerdict]:
        have = {n for u in context for n in numbers_of(u.text)}
        out = []
        for claim in claims:
            nums = numbers_of(claim)
            if not nums:
                out.append(LocalVerdict(_verdict("insufficient_context", None, "no numbers", True), math.nan))
                continue
            found = [n in have for n in nums]
            score = sum(found) / len(found)
            missing = [n for n, f in zip(nums, found, strict=True) if not f]
            if missing:
                out.append(LocalVerdict(_verdict("unsupported", None, f"not in the context: {missing}"), score))
            else:
                out.append(LocalVerdict(_verdict("supported", None, "every number occurs in the context"), score))
        return out


def local_judge_items(items: Sequence[JudgeItem], support, *, numeric: bool = True) -> JudgedMetrics:
    """Faithfulness, citation precision/recall (and ``numeric_consistency``) from a local support judge.

    Claims are the answer's sentences; a supported claim's quote is checked against the context exactly as
    for an LLM judge, so the metrics mean the same thing in both tiers."""
    return score_sentence_claims(items, lambda it, claims: support.judge_many(claims, it.context), numeric=numeric)


def score_sentence_claims(items: Sequence[JudgeItem],
                          verdicts_of: Callable[[JudgeItem, list[str]], Sequence[LocalVerdict]], *,
                          numeric: bool = True) -> JudgedMetrics:
    """The metrics of :func:`local_judge_items` from ``verdicts_of(item, claims)``, one verdict per claim
    (the answer's sentences). A ``cannot_judge`` verdict leaves its claim out of the denominators; an item
    with no claim left is undefined (``no_checkable_claims``)."""
    out = JudgedMetrics()
    num = NumericSupport() if numeric else None
    nan = math.nan
    for it in items:
        names = ["faithfulness", "citation_precision", "citation_recall"] + (["numeric_consistency"] if num else [])
        if not it.answered:
            why = "not_answered" if it.outcome != "error" else "generation_error"
            for m in names:
                out.add(it, m, nan, why)
            continue
        claims = split_claims(it.answer)
        if not claims:
            for m in names:
                out.add(it, m, nan, "no_claims")
            continue
        verdicts = verdicts_of(it, claims)
        out.calls.update("cannot_judge" if v.verdict.cannot_judge else "ok" for v in verdicts)
        judged = [v for v in verdicts if not v.verdict.cannot_judge]
        located = []
        for v in judged:
            where = locate_quote(v.verdict.quote, it.context) if v.verdict.label == "supported" else None
            if v.verdict.label == "supported" and where is None:
                out.quote_not_found += 1
            located.append(where)
        if not judged:
            for m in names[:3]:
                out.add(it, m, nan, "no_checkable_claims")
        else:
            out.add(it, "faithfulness", sum(w is not None for w in located) / len(judged))
            support_m = np.array([[w is not None and it.context[w[0]].unit_id == c.unit_id
                                   and (c.start is None or (w[1] < c.end and c.start < w[2]))
                                   for w in located] for c in it.citations], dtype=bool).reshape(
                len(it.citations), len(located))
            if it.citations:
                out.add(it, "citation_precision", float(support_m.any(axis=1).mean()))
                out.add(it, "citation_recall", float(support_m.any(axis=0).mean()))
            else:
                out.add(it, "citation_precision", nan, "no_citations")
                out.add(it, "citation_recall", 0.0)
        if num is not None:
            checks = [v for v in num.judge_many(claims, it.context) if not v.verdict.cannot_judge]
            if checks:
                out.add(it, "numeric_consistency",
                        sum(v.verdict.label == "supported" for v in checks) / len(checks))
            else:
                out.add(it, "numeric_consistency", nan, "no_numbers")
    return out


__all__ = ["LOCAL_METHODS", "EmbeddingSupport", "LexicalSupport", "LocalVerdict", "NumericSupport",
           "local_judge_items", "numbers_of", "score_sentence_claims", "split_claims"]
