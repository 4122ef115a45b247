"""Synthetic golden questions with verified excerpts (``ragassay golden synth``), filtered as a golden set needs.

A synthetic set is for coverage, not calibration: its questions are well-formed, single-hop and lexically
close to their passage, so an absolute score on a purely synthetic set says little; only deltas between
configurations on it do. Every item written here says where it came from (``source: synthetic``, the
generator in the manifest).

**The offline generator** (``offline-templates-v1``) needs no model. It splits each document's canonical text
into sentences (8–50 words), and asks about one sentence in one of two forms, chosen per sentence by the seed:

- ``keywords``: the sentence's three rarest content words (fewest sentences of the corpus hold them), in
  sentence order — what a user types into a search box;
- ``what_about``: ``What does <doc_id> say about <phrase>?``, ``<phrase>`` the run of 2–4 consecutive content
  words of the sentence with the highest summed rarity.

The sentence itself is the excerpt (grade 3) and the reference answer. Its stratum is ``lexical`` (the
question's words are the passage's). **Negatives** come from documents outside the corpus
(``negatives_from``): ``What is said about <phrase>?`` over their sentences, kept only when the phrase occurs
in no corpus document (case-folded, whitespace collapsed) — a question the corpus cannot support.

**Filters**, each counted: an excerpt that is not an exact substring of its document's canonical text is
dropped (``out_of_corpus``; by construction none for the offline generator, a generator's quote is never
trusted); a compound question — ``and`` outside a proper noun (``Terms and Conditions``) — is refused
(``compound``); near-duplicate questions are removed by embedding similarity (``duplicates``, see
:func:`dedupe_threshold`); a question whose words cover ≥ 80% of its excerpt's content words is answerable from
the question alone and is kept but tagged ``answer-in-question`` (``answer_in_question``).

**Other generators** (``ragassay.judges.question_gen``, the LLM one) hand their candidates to
:func:`apply_filters`, the same filters in the same order; a candidate may carry further excerpts of its
document (``more``), each verified the same way (one failing drops the candidate), and its passage comes from
:func:`passages`.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ragassay.errors import InputError

GENERATOR = "offline-templates-v1"
FORMS = ("keywords", "what_about")
# the strata each generator writes (`--per-stratum`); other strata need questions a person wrote or edited
GENERATOR_STRATA = {"offline": ("lexical", "negative"), "llm": ("paraphrase", "negative")}
STRATA = GENERATOR_STRATA["offline"]
MIN_WORDS, MAX_WORDS = 8, 50
PASSAGE_WORDS = 150
ANSWER_IN_QUESTION = 0.8
PRECISION_TARGET = 0.9

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*[A-Za-z]|[A-Za-z]")
_AND = re.compile(r"\band\b", re.I)
_BLANK_LINE = re.compile(r"\n\s*\n")


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN_PLUS

    return frozenset(STOPWORDS_EN_PLUS) | {
        "shall", "may", "must", "will", "also", "such", "one", "without", "within", "upon", "thereof", "herein",
        "whether", "section", "quite", "different", "sure", "make", "made", "makes", "way", "ways", "example",
        "used", "use", "uses", "using", "given", "give", "gives", "apply", "applies", "means", "provided"}


@dataclass
class Excerpt:
    """A further excerpt of a candidate's document: where it starts (-1: unknown) and its occurrence."""

    quote: str
    start: int = -1
    occurrence: int | None = None


@dataclass
class Candidate:
    """One generated question before and after the filters; ``more`` holds excerpts beyond the first."""

    question: str
    form: str
    stratum: str
    doc_id: str | None = None
    quote: str | None = None
    start: int = -1
    occurrence: int | None = None
    tags: list[str] = field(default_factory=list)
    more: list[Excerpt] = field(default_factory=list)

    @property
    def answerable(self) -> bool:
        return self.stratum != "negative"

    @property
    def quotes(self) -> list[str]:
        return [] if self.quote is None else [self.quote, *(e.quote for e in self.more)]


@dataclass
class SynthResult:
    items: list[Candidate]
    counts: dict[str, int]
    threshold: float
    threshold_rule: str
    pairs: list[dict]


def sentences(text: str) -> list[tuple[int, str]]:
    """(start, sentence) of every sentence of ``text`` with 8–50 words: paragraphs (blank-line separated) split
    after ``.``, ``!`` or ``?`` followed by space and a capital, digit or quote. The sentence is the exact
    substring of ``text`` from ``start`` (line breaks inside it kept)."""
    out = []
    for para in re.finditer(r"(?:[^\n]|\n(?!\s*\n))+", text):
        base = para.start()
        pos = 0
        body = para.group()
        for m in [*_SENTENCE_END.finditer(body), None]:
            end = m.start() if m else len(body)
            raw = body[pos:end]
            lead = len(raw) - len(raw.lstrip())
            s = raw.strip()
            if s and MIN_WORDS <= len(_WORD.findall(s)) <= MAX_WORDS and s[-1] in ".!?":
                out.append((base + pos + lead, s))
            pos = m.end() if m else len(body)
    return out


def passages(text: str, max_words: int = PASSAGE_WORDS) -> list[tuple[int, str]]:
    """(start, passage) of ``text``: consecutive sentences of one paragraph (as :func:`sentences` finds them)
    grouped until the next would take the group past ``max_words`` words (a longer sentence stands alone).
    A passage is the exact substring from its first sentence's start to its last one's end, so what lies
    between them (a sentence too short or too long to be asked about) is kept."""
    out: list[tuple[int, str]] = []
    first = end = words = 0
    for start, s in sentences(text):
        n = len(_WORD.findall(s))
        if words and (words + n > max_words or _BLANK_LINE.search(text, end, start)):
            out.append((first, text[first:end]))
            words = 0
        if not words:
            first = start
        words += n
        end = start + len(s)
    if words:
        out.append((first, text[first:end]))
    return out


def is_compound(question: str) -> bool:
    """True when ``and`` joins two things the question asks (so it has two answers): any ``and`` whose
    neighbouring words are not both capitalised (``Terms and Conditions`` is one name)."""
    for m in _AND.finditer(question):
        before = question[:m.start()].split()
        after = question[m.end():].split()
        if not (before and after and before[-1][:1].isupper() and after[0][:1].isupper()):
            return True
    return False


def content_words(text: str, stop: frozenset[str]) -> list[str]:
    return [w.lower() for w in _WORD.findall(text) if w.lower() not in stop and len(w) > 2]


def answer_in_question(question: str, excerpt: str, stop: frozenset[str]) -> bool:
    """Whether the question's words cover at least 80% of the excerpt's distinct content words (no content
    word: False)."""
    need = set(content_words(excerpt, stop))
    if not need:
        return False
    return len(need & set(content_words(question, stop))) / len(need) >= ANSWER_IN_QUESTION


def _phrase(sentence: str, rarity: dict[str, float], stop: frozenset[str]) -> str | None:
    """The run of 2–4 consecutive content words with the highest summed rarity, as written (only whitespace
    between them, so the phrase is text the sentence holds, whitespace aside)."""
    found = list(_WORD.finditer(sentence))
    best, best_score = None, -1.0
    for i in range(len(found)):
        for n in (2, 3, 4):
            run = found[i:i + n]
            if len(run) < n or any(m.group().lower() in stop or len(m.group()) <= 2 for m in run):
                continue
            if any(sentence[x.end():y.start()].strip() for x, y in itertools.pairwise(run)):
                continue
            score = sum(rarity.get(m.group().lower(), 0.0) for m in run)
            if score > best_score:
                best, best_score = " ".join(m.group() for m in run), score
    return best


def _rarity(corpus_sentences: Sequence[str], stop: frozenset[str]) -> dict[str, float]:
    """log(N / sentences holding the word) over the sentences given."""
    df = Counter(w for s in corpus_sentences for w in set(content_words(s, stop)))
    n = max(len(corpus_sentences), 1)
    return {w: math.log(n / c) for w, c in df.items()}


def _canon(text: str) -> str:
    return " ".join(text.casefold().split())


def offline_candidates(corpus, n: int, *, seed: int = 0, negatives_from=None, n_negative: int = 0,
                       stop: frozenset[str] | None = None) -> tuple[list[Candidate], dict[str, int]]:
    """Up to ``n`` answerable candidates (sentences sampled without replacement, spread over documents) and up
    to ``n_negative`` negatives from ``negatives_from`` (a Corpus outside ``corpus``); counts of what was
    sampled and of negatives refused because their phrase is in the corpus."""
    stop = stop or _stopwords()
    rng = np.random.default_rng(seed)
    pool = [(doc.doc_id, start, s) for doc in corpus for start, s in sentences(doc.text)]
    rarity = _rarity([s for _, _, s in pool], stop)
    counts = {"sentences": len(pool), "negatives_in_corpus": 0}
    order = rng.permutation(len(pool))
    out: list[Candidate] = []
    for i in order[:n]:
        doc_id, start, s = pool[int(i)]
        form = FORMS[int(rng.integers(len(FORMS)))]
        if form == "keywords":
            cw = list(dict.fromkeys(content_words(s, stop)))
            top = sorted(cw, key=lambda w: (-rarity.get(w, 0.0), cw.index(w)))[:3]
            question = " ".join(w for w in cw if w in top) if len(top) == 3 else None
        else:
            phrase = _phrase(s, rarity, stop)
            question = f"What does {doc_id} say about {phrase}?" if phrase else None
        if question:
            out.append(Candidate(question, form, "lexical", doc_id, s, start))
    if negatives_from is not None and n_negative:
        corpus_text = [_canon(doc.text) for doc in corpus]
        neg_pool = [s for doc in negatives_from for _, s in sentences(doc.text)]
        neg_rarity = _rarity(neg_pool, stop)
        kept = 0
        for i in rng.permutation(len(neg_pool)):
            if kept >= n_negative:
                break
            phrase = _phrase(neg_pool[int(i)], neg_rarity, stop)
            if not phrase:
                continue
            if any(_canon(phrase) in t for t in corpus_text):
                counts["negatives_in_corpus"] += 1
                continue
            out.append(Candidate(f"What is said about {phrase}?", "what_about", "negative"))
            kept += 1
    return out, counts


def verify_excerpts(items: list[Candidate], corpus) -> tuple[list[Candidate], int]:
    """Keep the items whose excerpts (the first and every one in ``more``) are each a non-blank exact
    substring of their document's canonical text (the occurrence number set when it repeats); negatives pass.
    Returns (kept, dropped)."""
    kept, dropped = [], 0
    for it in items:
        if it.quote is None:
            kept.append(it)
            continue
        text = corpus[it.doc_id].text if it.doc_id in corpus else None
        spans = [] if text is None else [_locate(text, q, s) for q, s in ((it.quote, it.start),
                                                                         *((e.quote, e.start) for e in it.more))]
        if not spans or any(at < 0 for at, _ in spans):
            dropped += 1
            continue
        it.start, it.occurrence = spans[0]
        for e, (at, occurrence) in zip(it.more, spans[1:], strict=True):
            e.start, e.occurrence = at, occurrence
        kept.append(it)
    return kept, dropped


def _locate(text: str, quote: str, start: int) -> tuple[int, int | None]:
    """(offset, occurrence or None when the quote is unique) of ``quote`` in ``text``, at ``start`` when it is
    there, else its first occurrence; (-1, None) for a blank quote or one not in the text."""
    if not quote.strip():
        return -1, None
    at = start if start >= 0 and text.startswith(quote, start) else text.find(quote)
    if at < 0:
        return -1, None
    return at, _occurrence(text, quote, at) if text.count(quote) > 1 else None


def _occurrence(text: str, quote: str, at: int) -> int:
    k, pos = 0, text.find(quote)
    while 0 <= pos <= at:
        k += 1
        pos = text.find(quote, pos + 1)
    return k


def _same_answer(a: Candidate, b: Candidate) -> bool:
    """The mechanical stand-in for "these two questions ask the same thing": the same excerpt text (case and
    whitespace aside), or overlapping excerpts of one document."""
    if a.quote is None or b.quote is None:
        return False
    if _canon(a.quote) == _canon(b.quote):  # one sentence, wrapped differently in two documents
        return True
    return a.doc_id == b.doc_id and a.start < b.start + len(b.quote) and b.start < a.start + len(a.quote)


def dedupe_threshold(sim: np.ndarray, items: Sequence[Candidate], *, lo: float = 0.5, hi: float = 1.0,
                     ) -> tuple[float, str]:
    """The similarity above which two questions count as duplicates, by binary search: the lowest ``t`` in
    [lo, hi], among the similarities the pairs have, at which at least 90% of the question pairs with
    similarity ≥ t ask for the same answer (:func:`_same_answer`). When no similarity in the range meets that,
    ``hi`` (1: only identical questions). The pairs either side of ``t`` are what a person should look at
    (``--show-pairs``) before trusting it."""
    iu = np.triu_indices(len(items), 1)
    s = sim[iu]
    same = np.fromiter((_same_answer(items[i], items[j]) for i, j in zip(*iu, strict=True)), dtype=bool,
                       count=len(s))

    def precision(t: float) -> float:
        above = s >= t
        return float(same[above].mean()) if above.any() else 1.0

    # the search runs over the similarities the pairs have (so the threshold is one of them, exactly)
    values = np.unique(s[(s >= lo) & (s <= hi)])
    if not len(values) or precision(float(values[-1])) < PRECISION_TARGET:
        return hi, (f"no similarity in [{lo}, {hi}] has ≥ {PRECISION_TARGET:.0%} same-answer pairs at or above "
                    f"it, so only identical questions are duplicates ({hi:g})")
    a, b = -1, len(values) - 1  # precision fails at a (or a is below the range) and holds at b
    while b - a > 1:
        mid = (a + b) // 2
        if precision(float(values[mid])) >= PRECISION_TARGET:
            b = mid
        else:
            a = mid
    return float(values[b]), (f"binary search: the lowest pair similarity at which ≥ {PRECISION_TARGET:.0%} of "
                              "the pairs at or above it share their answer")


def dedupe(items: list[Candidate], vectors: np.ndarray, threshold: float | None, *, show_pairs: int = 0,
           seed: int = 0) -> tuple[list[Candidate], int, float, str, list[dict]]:
    """Drop every question whose cosine similarity to an earlier kept one is ≥ the threshold (given, or
    :func:`dedupe_threshold`). ``vectors`` are L2-normalised rows. Returns (kept, dropped, threshold, rule,
    up to ``show_pairs`` sampled pairs just above and as many just below the threshold)."""
    if len(items) < 2:
        return items, 0, 1.0 if threshold is None else threshold, "fewer than two questions", []
    v = np.asarray(vectors, dtype=np.float64)
    # float32 unit vectors give 0.9999999 for identical texts: similarities are rounded to 6 decimals, so a
    # threshold of 1 removes exact duplicates on any CPU
    sim = np.round(v @ v.T, 6)
    if threshold is None:
        threshold, rule = dedupe_threshold(sim, items)
    else:
        rule = "given (--dedupe-threshold)"
    keep: list[int] = []
    for i in range(len(items)):
        if not keep or sim[i, keep].max() < threshold:
            keep.append(i)
    pairs = _pairs_around(sim, items, threshold, show_pairs, seed) if show_pairs else []
    return [items[i] for i in keep], len(items) - len(keep), float(threshold), rule, pairs


def _pairs_around(sim, items, t: float, k: int, seed: int) -> list[dict]:
    iu = np.triu_indices(len(items), 1)
    s = sim[iu]
    rng = np.random.default_rng(seed)
    out = []
    for side, mask in (("above", s >= t), ("below", s < t)):
        idx = np.flatnonzero(mask)
        idx = idx[np.argsort(np.abs(s[idx] - t), kind="stable")][: 4 * k]
        for j in rng.permutation(idx)[:k] if len(idx) else []:
            a, b = int(iu[0][j]), int(iu[1][j])
            out.append({"side": side, "similarity": round(float(s[j]), 4), "a": items[a].question,
                        "b": items[b].question, "same_answer": _same_answer(items[a], items[b])})
    return out


def synthesize(corpus, *, n: int, embed: Callable[[list[str]], np.ndarray], seed: int = 0,
               negatives_from=None, n_negative: int = 0, threshold: float | None = None,
               show_pairs: int = 0) -> SynthResult:
    """Generate, verify, refuse compounds, de-duplicate and flag; every step counted in ``counts``."""
    stop = _stopwords()
    # ask for more than needed: the filters remove some, and the first n survivors are kept
    raw, counts = offline_candidates(corpus, max(n * 2, n + 20), seed=seed, negatives_from=negatives_from,
                                     n_negative=n_negative, stop=stop)
    return apply_filters(raw, counts, corpus, n=n, n_negative=n_negative, embed=embed, threshold=threshold,
                         show_pairs=show_pairs, seed=seed, stop=stop)


def apply_filters(raw: list[Candidate], counts: dict[str, int], corpus, *, n: int, n_negative: int,
                  embed: Callable[[list[str]], np.ndarray], threshold: float | None = None, show_pairs: int = 0,
                  seed: int = 0, stop: frozenset[str] | None = None) -> SynthResult:
    """The filters of any generator over its candidates ``raw`` (answerable ones in the order to keep them,
    negatives after): verify the excerpts, refuse compounds, de-duplicate, keep the first ``n`` answerable and
    ``n_negative`` negatives, flag answer-in-question; each step counted into ``counts``, so that generated =
    out_of_corpus + compound + duplicates + surplus + kept."""
    stop = stop or _stopwords()
    counts["generated"] = len(raw)
    items, counts["out_of_corpus"] = verify_excerpts(raw, corpus)
    simple = [it for it in items if not is_compound(it.question)]
    counts["compound"] = len(items) - len(simple)
    vecs = embed([it.question for it in simple]) if simple else np.zeros((0, 1))
    kept, counts["duplicates"], t, rule, pairs = dedupe(simple, vecs, threshold, show_pairs=show_pairs, seed=seed)
    answerable = [it for it in kept if it.answerable][:n]
    negatives = [it for it in kept if not it.answerable][:n_negative]
    counts["surplus"] = len(kept) - len(answerable) - len(negatives)
    for it in answerable:
        if answer_in_question(it.question, " ".join(it.quotes), stop):
            it.tags.append("answer-in-question")
    counts["answer_in_question"] = sum("answer-in-question" in it.tags for it in answerable)
    counts["kept"] = len(answerable) + len(negatives)
    counts["negative"] = len(negatives)
    return SynthResult(answerable + negatives, counts, t, rule, pairs)


def authoring_lines(result: SynthResult, *, dataset: str, seed: int, embedder: str,
                    created: dt.date | None = None, pins: dict | None = None) -> list[dict]:
    """The authoring JSONL records (meta line first) ``golden build`` takes unchanged. ``pins`` (another
    generator's ``kind``, ``model``, ``prompt_sha``, ...) replace the offline generator's in the meta line's
    ``generator``. An item's evidence is each of its excerpts (grade 3); its reference answer is them joined
    by a space."""
    created = created or dt.date.today()
    meta = {"type": "meta", "dataset": dataset, "annotators": [],
            "description": "Synthetic questions (ragassay golden synth): report deltas between configurations "
                           "on it, not absolute scores.",
            "generator": {"kind": GENERATOR, "model": None, "prompt_sha": None, **(pins or {}), "seed": seed,
                          "embedder": embedder, "dedupe_threshold": result.threshold,
                          "dedupe_rule": result.threshold_rule, "filters": dict(result.counts),
                          "date": created.isoformat()}}
    out = [meta]
    for i, it in enumerate(result.items, 1):
        rec = {"query_id": f"syn-{i:04d}", "question": it.question, "stratum": it.stratum,
               "tags": [f"form:{it.form}", *it.tags], "answerable": it.answerable, "evidence": [],
               "source": "synthetic", "created": created.isoformat()}
        if it.quote is not None:
            for quote, occurrence in [(it.quote, it.occurrence), *((e.quote, e.occurrence) for e in it.more)]:
                ev = {"doc_id": it.doc_id, "quote": quote, "grade": 3}
                if occurrence:
                    ev["occurrence"] = occurrence
                rec["evidence"].append(ev)
            rec["reference_answer"] = " ".join(it.quotes)
        out.append(rec)
    return out


def parse_targets(specs: Sequence[str], generator: str = "offline") -> dict[str, int]:
    """``--per-stratum lexical=150 --per-stratum negative=20`` → {stratum: count}; each generator writes its
    own strata only (:data:`GENERATOR_STRATA`: offline lexical and negative, llm paraphrase and negative)."""
    strata = GENERATOR_STRATA[generator]
    out: dict[str, int] = {}
    for s in specs:
        name, sep, value = s.partition("=")
        if not sep or not value.strip().isdigit() or int(value) < 1:
            raise InputError(f"--per-stratum {s!r}: write STRATUM=COUNT with a count ≥ 1, e.g. {strata[0]}=150")
        if name not in strata:
            raise InputError(f"--per-stratum {s!r}: the {generator} generator writes {' and '.join(strata)} "
                             "questions only; other strata need questions written (or edited) by a person")
        if name in out:
            raise InputError(f"--per-stratum {name} is given twice; keep one")
        out[name] = int(value)
    return out


def write_authoring(path: Path, lines: list[dict]) -> None:
    from ragassay.fsio import atomic_write_text

    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines))


__all__ = ["FORMS", "GENERATOR", "GENERATOR_STRATA", "STRATA", "Candidate", "Excerpt", "SynthResult",
           "answer_in_question", "apply_filters", "authoring_lines", "dedupe", "dedupe_threshold", "is_compound",
           "offline_candidates", "parse_targets", "passages", "sentences", "synthesize", "verify_excerpts",
           "write_authoring"]
