"""The lexical analyzer shared by the BM25 branch, the lexical reranker and the extractive generator.

Terms are runs of two or more word characters (the scikit-learn / bm25s default pattern), optionally
lower-cased, stop-worded (bm25s word lists) and stemmed (Snowball via PyStemmer). The options are part of
the pipeline config, so they are recorded in every run header: analyzer choice moves BM25 a lot.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable

import Stemmer

_TERM = re.compile(r"(?u)\b\w\w+\b")
# Stopword list name -> the bm25s list it stands for. The lists are read on first use: importing bm25s
# loads numba and scipy, which a config check (or `ragassay --help`) should not pay for.
STOPWORD_LISTS = {
    "en": "STOPWORDS_EN",
    "english": "STOPWORDS_EN",
    "en_plus": "STOPWORDS_EN_PLUS",
    "de": "STOPWORDS_GERMAN",
    "fr": "STOPWORDS_FRENCH",
    "es": "STOPWORDS_SPANISH",
    "it": "STOPWORDS_ITALIAN",
    "nl": "STOPWORDS_DUTCH",
    "pt": "STOPWORDS_PORTUGUESE",
}


def stemmers() -> list[str]:
    """The Snowball stemmer names PyStemmer knows (the valid values of ``bm25.stemmer``)."""
    return list(Stemmer.algorithms())


def _stopwords(name: str) -> frozenset[str]:
    import bm25s.stopwords

    return frozenset(getattr(bm25s.stopwords, STOPWORD_LISTS[name]))


class Analyzer:
    """text -> list of terms. ``stemmer`` is a PyStemmer language name or None; ``stopwords`` a list key."""

    def __init__(self, lowercase: bool = True, stemmer: str | None = "english", stopwords: str | None = "en"):
        if stopwords is not None and stopwords not in STOPWORD_LISTS:
            raise ValueError(f"unknown stopword list {stopwords!r}; use one of {sorted(STOPWORD_LISTS)} or null")
        if stemmer is not None and stemmer not in stemmers():
            raise ValueError(f"unknown stemmer {stemmer!r}; use one of {stemmers()} or null")
        self.lowercase = lowercase
        self.stemmer_name = stemmer
        self.stopwords_name = stopwords
        self._stop = _stopwords(stopwords) if stopwords else frozenset()
        self._stemmer = Stemmer.Stemmer(stemmer) if stemmer else None
        self._stems: dict[str, str] = {}

    @property
    def name(self) -> str:
        return f"re-w2+;lower={self.lowercase};stem={self.stemmer_name};stop={self.stopwords_name}"

    def __call__(self, text: str) -> list[str]:
        return self.many([text])[0]

    def share_stems(self, other: Analyzer) -> None:
        """Use ``other``'s stem memo when both stem with the same algorithm (the pipeline's BM25 and
        support analyzers usually do): a corpus' words are then stemmed once, not once per analyzer."""
        if self.stemmer_name is not None and self.stemmer_name == other.stemmer_name:
            self._stems = other._stems

    def many(self, texts: Iterable[str]) -> list[list[str]]:
        """The terms of each text, as ``[self(t) for t in texts]``.

        Snowball stems each word on its own, so every distinct word is stemmed once and remembered: a
        corpus has far fewer distinct words than words (PyStemmer's own cache holds 10,000 and thrashes on
        a large vocabulary). The memo grows with the vocabulary seen, not with the number of texts.
        """
        find, stop = _TERM.findall, self._stop
        words = [[w for w in find(t.lower() if self.lowercase else t) if w not in stop] for t in texts]
        if self._stemmer is None:
            return words
        memo = self._stems
        new = list({w for ws in words for w in ws if w not in memo})
        if new:
            memo.update(zip(new, self._stemmer.stemWords(new), strict=True))
        return [[memo[w] for w in ws] for ws in words]


class TermStats:
    """Document frequencies over a collection of term lists, for IDF weights.

    idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)) (the BM25 / Lucene form, always positive).
    """

    def __init__(self, docs: Iterable[list[str]]):
        df: Counter[str] = Counter()
        n = 0
        for terms in docs:
            n += 1
            df.update(set(terms))
        self.n = n
        self.df = df
        self._idf = {t: self._formula(d) for t, d in df.items()}
        self._unseen = self._formula(0)

    def _formula(self, d: int) -> float:
        return math.log(1.0 + (self.n - d + 0.5) / (d + 0.5))

    def idf(self, term: str) -> float:
        return self._idf.get(term, self._unseen)

    def query_weights(self, query_terms: list[str]) -> dict[str, float]:
        """idf weight of each distinct query term (computed once per query, reused for every text)."""
        return {t: self.idf(t) for t in set(query_terms)}


def coverage(query_terms: list[str], text_terms: set[str], stats: TermStats) -> float:
    """IDF-weighted share of the distinct query terms present in a text, in [0, 1].

    coverage = sum_{t in Q and T} idf(t) / sum_{t in Q} idf(t). A query with no terms scores 0. Terms unseen
    in the collection get the highest idf, so a question about something absent scores low.
    """
    return weighted_coverage(stats.query_weights(query_terms), text_terms)


def weighted_coverage(weights: dict[str, float], text_terms: set[str] | frozenset[str]) -> float:
    """:func:`coverage` with the query's idf weights precomputed.

    Sums are exact (``math.fsum``), so the value does not depend on the order of the weights dict, which
    follows string hashing and so changes between processes.
    """
    total = math.fsum(weights.values())
    if total <= 0:
        return 0.0
    return math.fsum([w for t, w in weights.items() if t in text_terms]) / total
