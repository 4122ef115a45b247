"""Derivation of unit labels for any chunking: which evidence spans a retrieved unit hits.

Labels are never unit ids. A retrieved unit ``(doc_id, start, end)`` gets the highest grade of the
evidence spans of its query that it hits under a named hit rule:

- ``any_overlap``: the unit and the evidence share at least one character;
- ``min_fraction:F``: the unit covers at least a fraction F (0 < F <= 1) of the evidence span;
- ``doc``: the unit comes from a document that holds evidence for the query (document-level labels).

A unit that hits no evidence has grade 0 and ``judged = False``; one that hits only grade-0 evidence
has grade 0 and ``judged = True``. Span-labelled golden sets treat unjudged units as non-relevant.
:func:`span_recall_at_k` counts the relevant spans a ranking of units hits, straight from unit ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter

import numpy as np

from ragassay.errors import InputError
from ragassay.golden.set import GoldenSet


@dataclass(frozen=True)
class HitRule:
    kind: str
    fraction: float | None = None

    @classmethod
    def parse(cls, spec: str | HitRule) -> HitRule:
        if isinstance(spec, HitRule):
            return spec
        s = spec.strip()
        if s in ("any_overlap", "doc"):
            return cls(s)
        if s.startswith("min_fraction:"):
            try:
                f = float(s.split(":", 1)[1])
            except ValueError:
                f = -1.0
            if not 0.0 < f <= 1.0:
                raise InputError(f"hit rule {spec!r}: the fraction must be in (0, 1], e.g. min_fraction:0.5")
            return cls("min_fraction", f)
        raise InputError(f"unknown hit rule {spec!r}; use any_overlap, min_fraction:F or doc")

    def __str__(self) -> str:
        return f"min_fraction:{self.fraction:g}" if self.kind == "min_fraction" else self.kind


class EvidenceIndex:
    """All evidence spans of a golden set as arrays sorted by (query, doc, start)."""

    def __init__(self, golden: GoldenSet):
        queries = golden.queries
        self.query_codes = {q.query_id: i for i, q in enumerate(queries)}
        # per query its code (a repeated id has its last position's), per evidence its query's code: the
        # attributes are gathered by getters mapped over the objects (loops in C), the rest is arrays
        code = np.fromiter(map(self.query_codes.__getitem__, map(attrgetter("query_id"), queries)),
                           dtype=np.int64, count=len(queries))
        per_query = list(map(attrgetter("evidence"), queries))
        counts = np.fromiter(map(len, per_query), dtype=np.int64, count=len(queries))
        flat = list(chain.from_iterable(per_query))
        n = len(flat)
        doc = list(map(attrgetter("doc_id"), flat))
        doc_ids = sorted(set(doc))
        self.doc_codes = {d: i for i, d in enumerate(doc_ids)}
        self.n_docs = max(len(doc_ids), 1)
        grade = np.fromiter(map(attrgetter("grade"), flat), dtype=np.int64, count=n)
        key = np.repeat(code, counts) * self.n_docs + np.fromiter(map(self.doc_codes.__getitem__, doc),
                                                                  dtype=np.int64, count=n)
        start = np.fromiter(map(attrgetter("start"), flat), dtype=np.int64, count=n)
        end = np.fromiter(map(attrgetter("end"), flat), dtype=np.int64, count=n)
        order = np.lexsort((start, key))
        self.key = key[order]
        self.start = start[order]
        self.end = end[order]
        self.grade = grade[order].astype(np.float64)
        # per (query, doc) maximum grade, for the `doc` rule
        uniq, first = np.unique(self.key, return_index=True)
        self._doc_key = uniq
        self._doc_max = np.maximum.reduceat(self.grade, first) if len(first) else np.zeros(0)
        # in golden-set order, for per-query views (scoring's judged grades): each query's code, evidence
        # count and its evidence grades end to end
        self.query_code_of, self.evidence_counts, self.grades_in_order = code, counts, grade

    def encode(self, query_ids: Sequence[str], doc_ids: Sequence[str]) -> np.ndarray:
        """Combined (query, doc) keys; -1 where the query or doc holds no evidence."""
        qc = np.fromiter((self.query_codes.get(q, -1) for q in query_ids), dtype=np.int64, count=len(query_ids))
        dc = np.fromiter((self.doc_codes.get(d, -1) for d in doc_ids), dtype=np.int64, count=len(doc_ids))
        return np.where((qc >= 0) & (dc >= 0), qc * self.n_docs + dc, -1)

    def grades(self, query_ids: Sequence[str], doc_ids: Sequence[str], starts, ends,
               rule: str | HitRule = "any_overlap") -> tuple[np.ndarray, np.ndarray]:
        """Grade and judged flag for each unit (parallel sequences of query, doc, start, end)."""
        return self.grades_for_keys(self.encode(query_ids, doc_ids), starts, ends, rule)

    def grades_for_keys(self, keys: np.ndarray, starts, ends, rule: str | HitRule = "any_overlap"):
        keys = np.asarray(keys, dtype=np.int64)
        grade = np.zeros(len(keys), dtype=np.float64)
        judged = np.zeros(len(keys), dtype=bool)
        unit, ev = self.hit_pairs(keys, starts, ends, rule)
        if len(unit):
            np.maximum.at(grade, unit, self.grade[ev])
            judged[unit] = True
        return grade, judged

    def hit_pairs(self, keys: np.ndarray, starts, ends,
                  rule: str | HitRule = "any_overlap") -> tuple[np.ndarray, np.ndarray]:
        """All (unit index, evidence row) pairs where the unit hits the evidence under `rule`.

        Evidence rows index ``self.start/end/grade/key``. Candidates come from a binary search within the
        unit's (query, doc) group; the overlap test runs once per candidate rank over all units at once.
        """
        rule = HitRule.parse(rule)
        keys = np.asarray(keys, dtype=np.int64)
        us = np.asarray(starts, dtype=np.int64)
        ue = np.asarray(ends, dtype=np.int64)
        empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        if len(keys) == 0 or len(self.key) == 0:
            return empty
        lo = np.searchsorted(self.key, keys, side="left")
        # only units whose (query, doc) has evidence can hit (in a typical list, a minority): the rest of
        # the search and the overlap tests run on those alone
        has = (keys >= 0) & (lo < len(self.key))
        has[has] = self.key[lo[has]] == keys[has]
        cand = np.flatnonzero(has)
        if not len(cand):
            return empty
        keys, us, ue, lo = keys[cand], us[cand], ue[cand], lo[cand]
        if rule.kind == "doc":
            hi = np.searchsorted(self.key, keys, side="right")
        else:
            # evidence of the same (query, doc) that starts before the unit ends (sorted by start)
            hi = lo + _count_before(self.key, self.start, keys, ue, lo)
        width = int((hi - lo).max())
        units, evs = [], []
        for j in range(width):
            idx = lo + j
            live = idx < hi
            ii = np.where(live, idx, 0)
            if rule.kind == "doc":
                hit = live
            else:
                es, ee = self.start[ii], self.end[ii]
                overlap = np.minimum(ee, ue) - np.maximum(es, us)
                hit = live & (overlap > 0)
                if rule.kind == "min_fraction":
                    hit &= overlap >= rule.fraction * (ee - es) - 1e-9
            sel = np.flatnonzero(hit)
            units.append(cand[sel])
            evs.append(ii[sel])
        if not units:
            return empty
        return np.concatenate(units), np.concatenate(evs)


def _count_before(key: np.ndarray, start: np.ndarray, qkeys: np.ndarray, qend: np.ndarray,
                  lo: np.ndarray) -> np.ndarray:
    """For each query (key, end): how many evidence rows of that key start before `end`."""
    hi_key = np.searchsorted(key, qkeys, side="right")
    # binary search within [lo, hi_key) on start < end, vectorized over all units
    left, right = lo.copy(), hi_key.copy()
    while True:
        active = left < right
        if not active.any():
            break
        mid = (left + right) // 2
        mid_c = np.minimum(mid, len(start) - 1)
        go_right = active & (start[mid_c] < qend)
        go_left = active & ~go_right
        left = np.where(go_right, mid + 1, left)
        right = np.where(go_left, mid, right)
    return left - lo


def derive_grades(golden: GoldenSet, query_ids: Sequence[str], doc_ids: Sequence[str], starts, ends,
                  rule: str | HitRule = "any_overlap") -> tuple[np.ndarray, np.ndarray]:
    """One-shot convenience: build an :class:`EvidenceIndex` and grade the units."""
    return EvidenceIndex(golden).grades(query_ids, doc_ids, starts, ends, rule)


def span_recall_at_k(ids: np.ndarray, query_ids: Sequence[str], unit_doc: Sequence[str], unit_start, unit_end,
                     golden, k: int = 10, *, relevance_threshold: int = 2, hit_rule: str = "any_overlap"
                     ) -> np.ndarray:
    """Per-query retrieval recall@k on span labels: relevant evidence spans (grade >= threshold) hit by any
    of the top-k units / relevant spans of the query; NaN for a query with no relevant evidence.

    ``ids`` (q, >=k) index the units ``(unit_doc, unit_start, unit_end)``; -1 is no unit. This is the
    recall@k that scoring a run stores (:mod:`ragassay.analysis.scoring`), computed straight from ids (the
    ANN evaluation's retrieval recall, :mod:`ragassay.metrics.ann`).
    """
    ids = np.asarray(ids, dtype=np.int64)[:, :k]
    nq = ids.shape[0]
    if len(query_ids) != nq:
        raise InputError(f"query_ids: need one id per row of ids ({nq}), got {len(query_ids)}")
    ev = EvidenceIndex(golden)
    unit_doc = np.asarray(unit_doc, dtype=object)
    us, ue = np.asarray(unit_start, dtype=np.int64), np.asarray(unit_end, dtype=np.int64)
    row, col = np.nonzero(ids >= 0)
    u = ids[row, col]
    qids = np.asarray(query_ids, dtype=object)
    keys = ev.encode(qids[row].tolist(), unit_doc[u].tolist())
    hit_unit, hit_ev = ev.hit_pairs(keys, us[u], ue[u], hit_rule)
    rel = ev.grade[hit_ev] >= relevance_threshold
    pairs = np.unique(np.stack([row[hit_unit[rel]], hit_ev[rel]]), axis=1)
    hits = np.bincount(pairs[0], minlength=nq)
    ev_query = ev.key // ev.n_docs
    n_rel_code = np.bincount(ev_query[ev.grade >= relevance_threshold], minlength=len(ev.query_codes))
    codes = np.fromiter((ev.query_codes.get(q, -1) for q in qids), dtype=np.int64, count=nq)
    n_rel = np.where(codes >= 0, n_rel_code[np.maximum(codes, 0)], 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n_rel > 0, hits / np.maximum(n_rel, 1), np.nan)
