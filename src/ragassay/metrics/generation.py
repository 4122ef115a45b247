"""Deterministic generation metrics: exact match and token F1, abstention, citation validity, pass@k.

References: SQuAD v1.1 evaluation (answer normalization, token F1); Chen et al. 2021 (unbiased pass@k); the
spec's abstention table (section 10.5), where a provider refusal and an error are outcomes of their own.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ragassay.errors import InputError

OUTCOMES = ("answered", "abstained", "refused", "error")
_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD normalization: lowercase, drop punctuation, drop articles a/an/the, collapse whitespace."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


# Joins a batch of texts for one pass of the normalization. U+0001 (a control character; not NUL, which
# numpy strips from strings) is neither whitespace, punctuation, a word character, cased nor
# case-ignorable, so lowercasing (Greek final sigma looks at its neighbours), the article regex's word
# boundaries and the split treat it exactly as the end of a text.
_SEP = "\x01"


def answer_tokens(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``normalize_answer(t).split()`` of every text at once: all tokens end to end (an object array of
    str) and each text's token count. One lowercase, translate, regex and split over the joined texts
    instead of one per text; texts are normalized one by one when one of them holds U+0001 itself."""
    n = len(texts)
    if n == 0:
        return np.zeros(0, dtype=object), np.zeros(0, dtype=np.int64)
    joined = _SEP.join(texts)
    if joined.count(_SEP) != n - 1:
        per = [normalize_answer(t).split() for t in texts]
        words = np.fromiter((w for p in per for w in p), dtype=object, count=sum(map(len, per)))
        return words, np.fromiter(map(len, per), dtype=np.int64, count=n)
    norm = _ARTICLES.sub(" ", joined.lower().translate(_PUNCT))
    words = np.asarray(norm.replace(_SEP, f" {_SEP} ").split(), dtype=object)
    sep = np.flatnonzero(words == _SEP)
    bounds = np.concatenate(([-1], sep, [len(words)]))
    keep = np.ones(len(words), dtype=bool)
    keep[sep] = False
    return words[keep], np.diff(bounds) - 1


def token_f1_codes(pred: np.ndarray, pred_counts: np.ndarray, gold: np.ndarray,
                   gold_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SQuAD token F1 and exact match of many (prediction, reference) pairs from token codes.

    ``pred`` and ``gold`` hold each pair's token codes end to end (``*_counts`` per pair); equal tokens
    have equal codes, and a code < 0 (a prediction token no reference has) matches nothing. Per pair, as
    :func:`token_f1` and :func:`exact_match` of one reference: with ``same`` the size of the multiset
    intersection, F1 = 2pr/(p+r) with p = same/|pred|, r = same/|gold|; 1 when both are empty, 0 when one is
    or nothing is shared; EM = 1 when the token sequences are equal.
    """
    n = len(pred_counts)
    pred_row = np.repeat(np.arange(n), pred_counts)
    gold_row = np.repeat(np.arange(n), gold_counts)
    width = int(max(pred.max(initial=-1), gold.max(initial=-1))) + 1
    known = pred >= 0
    pk, pc = np.unique(pred_row[known] * width + pred[known], return_counts=True)
    gk, gc = np.unique(gold_row * width + gold, return_counts=True)
    _, ip, ig = np.intersect1d(pk, gk, assume_unique=True, return_indices=True)
    same = np.bincount(pk[ip] // max(width, 1), weights=np.minimum(pc[ip], gc[ig]), minlength=n)
    lp, lg = pred_counts.astype(np.float64), gold_counts.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        p, r = same / lp, same / lg
        f1 = 2 * p * r / (p + r)
    empty = (pred_counts == 0) | (gold_counts == 0)
    f1 = np.where(empty, (pred_counts == 0) & (gold_counts == 0), np.where(same == 0, 0.0, f1))
    # equal sequences: equal lengths and no position that differs
    eq = pred_counts == gold_counts
    pm, gm = eq[pred_row], eq[gold_row]
    differs = np.bincount(pred_row[pm][pred[pm] != gold[gm]], minlength=n)
    return f1.astype(np.float64), (eq & (differs == 0)).astype(np.float64)


def _refs(refs: str | Sequence[str]) -> list[str]:
    out = [refs] if isinstance(refs, str) else list(refs)
    if not out:
        raise InputError("a reference list is empty; give at least one reference answer")
    return out


def exact_match(prediction: str, references: str | Sequence[str]) -> float:
    """1.0 if the normalized prediction equals any normalized reference, else 0.0."""
    p = normalize_answer(prediction)
    return float(any(p == normalize_answer(r) for r in _refs(references)))


def _f1(pred: list[str], gold: list[str]) -> float:
    if not pred or not gold:
        return float(pred == gold)
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    p, r = same / len(pred), same / len(gold)
    return 2 * p * r / (p + r)


def token_f1(prediction: str, references: str | Sequence[str]) -> float:
    """SQuAD token F1 (bag of normalized tokens), max over references. Empty vs empty = 1, empty vs text = 0."""
    pred = normalize_answer(prediction).split()
    return max(_f1(pred, normalize_answer(r).split()) for r in _refs(references))


@dataclass(frozen=True)
class AbstentionScores:
    """Confusion counts over answered/abstained items, with refusals and errors counted apart."""

    tp: int
    fp: int
    fn: int
    tn: int
    n_refused: int
    n_error: int

    @staticmethod
    def _ratio(a: int, b: int) -> float:
        return a / b if b else float("nan")

    @property
    def precision(self) -> float:
        """Correct abstentions / all abstentions."""
        return self._ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> float:
        """Abstentions on unanswerable items / unanswerable items (1 - fabrication rate)."""
        return self._ratio(self.tp, self.tp + self.fn)

    @property
    def over_refusal_rate(self) -> float:
        """Abstentions on answerable items / answerable items."""
        return self._ratio(self.fp, self.fp + self.tn)


def abstention_scores(outcomes: Sequence[str], answerable: Sequence[bool]) -> AbstentionScores:
    """Abstention precision / recall / over-refusal from outcomes in {answered, abstained, refused, error}.

    tp = abstained & unanswerable, fp = abstained & answerable, fn = answered & unanswerable,
    tn = answered & answerable. ``refused`` and ``error`` items are excluded from the table and counted.
    Empty denominators give NaN.
    """
    o = np.asarray(outcomes, dtype=object)
    a = np.asarray(answerable, dtype=bool)
    if o.shape != a.shape:
        raise InputError(f"{len(o)} outcomes but {len(a)} answerable flags; give one flag per outcome")
    bad = sorted({str(x) for x in o} - set(OUTCOMES))
    if bad:
        raise InputError(f"unknown outcome(s) {bad}; use one of {', '.join(OUTCOMES)}")
    ab, an = o == "abstained", o == "answered"
    return AbstentionScores(
        tp=int(np.sum(ab & ~a)),
        fp=int(np.sum(ab & a)),
        fn=int(np.sum(an & ~a)),
        tn=int(np.sum(an & a)),
        n_refused=int(np.sum(o == "refused")),
        n_error=int(np.sum(o == "error")),
    )


@dataclass(frozen=True)
class Citation:
    """A cited unit and the span it points at, in canonical corpus offsets."""

    unit_id: str
    doc_id: str
    start: int
    end: int


CITATION_FAILURES = ("not_in_context", "unknown_doc", "bad_span", "out_of_bounds")


@dataclass(frozen=True, eq=False)
class CitationValidity:
    """Per-answer valid fraction (NaN when an answer cites nothing) and counts of each failure kind."""

    per_answer: np.ndarray
    n_citations: int
    n_valid: int
    failures: dict[str, int]

    @property
    def validity(self) -> float:
        """Valid citations / all citations over the whole run (NaN without citations)."""
        return self.n_valid / self.n_citations if self.n_citations else float("nan")


def citation_validity(
    citations: Sequence[Sequence[Citation]],
    packed_units: Sequence[Sequence[str]],
    doc_lengths: Mapping[str, int],
) -> CitationValidity:
    """Check that every citation names a unit of the answer's packed context and a span inside real text.

    Failure kinds, checked in order: ``not_in_context`` (unit not packed), ``unknown_doc`` (doc not in the
    corpus), ``bad_span`` (start >= end or start < 0), ``out_of_bounds`` (end past the document's length).
    """
    if len(citations) != len(packed_units):
        raise InputError(
            f"{len(citations)} citation lists but {len(packed_units)} packed contexts; one per answer"
        )
    failures = dict.fromkeys(CITATION_FAILURES, 0)
    per_answer = np.full(len(citations), np.nan)
    total = valid = 0
    for i, (cites, units) in enumerate(zip(citations, packed_units, strict=True)):
        packed = set(units)
        ok = 0
        for c in cites:
            if c.unit_id not in packed:
                failures["not_in_context"] += 1
            elif c.doc_id not in doc_lengths:
                failures["unknown_doc"] += 1
            elif c.start < 0 or c.start >= c.end:
                failures["bad_span"] += 1
            elif c.end > doc_lengths[c.doc_id]:
                failures["out_of_bounds"] += 1
            else:
                ok += 1
        if cites:
            per_answer[i] = ok / len(cites)
        total += len(cites)
        valid += ok
    return CitationValidity(per_answer, total, valid, failures)


@dataclass(frozen=True, eq=False)
class PassAtK:
    """Per-item pass@1, pass^k (all of the first k trials pass; NaN with fewer than k trials), the unbiased
    pass^k estimate C(c,k)/C(n,k), and per-item sample variance of the trial outcomes (ddof=1)."""

    k: int
    n_trials: np.ndarray
    n_pass: np.ndarray
    pass_at_1: np.ndarray
    pass_hat_k: np.ndarray
    pass_hat_k_unbiased: np.ndarray
    variance: np.ndarray

    def means(self) -> dict[str, float]:
        def m(x):
            return float(np.nanmean(x)) if np.any(~np.isnan(x)) else float("nan")

        return {
            "pass@1": m(self.pass_at_1),
            f"pass^{self.k}": m(self.pass_hat_k),
            f"pass^{self.k}_unbiased": m(self.pass_hat_k_unbiased),
        }


def pass_at_k(trials: Sequence[Sequence[bool]], k: int) -> PassAtK:
    """Repeated-trial metrics per item from boolean outcomes (items may have different trial counts)."""
    if k < 1:
        raise InputError(f"k must be >= 1, got {k}")
    n = np.array([len(t) for t in trials], dtype=np.int64)
    if np.any(n == 0):
        raise InputError(
            f"item {int(np.flatnonzero(n == 0)[0])} has no trials; every item needs at least one"
        )
    c = np.array([int(np.sum(np.asarray(t, dtype=bool))) for t in trials], dtype=np.int64)
    first_k = np.array(
        [bool(np.all(np.asarray(t[:k], dtype=bool))) if len(t) >= k else False for t in trials]
    )
    # scipy.special costs ~110 ms to import; only pass@k needs it, so scoring never pays for it
    from scipy.special import comb

    enough = n >= k
    p1 = c / n
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.where(n > 1, p1 * (1 - p1) * n / np.where(n > 1, n - 1, 1), np.nan)
        unbiased = np.where(enough, comb(c, k, exact=False) / comb(n, k, exact=False), np.nan)
    return PassAtK(k, n, c, p1, np.where(enough, first_k.astype(np.float64), np.nan), unbiased, var)
