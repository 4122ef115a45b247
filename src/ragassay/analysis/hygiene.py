"""Benchmark hygiene (spec section 34.6): n-gram overlap screen, keyword-baseline shortcut audit,
retrieval-bypass flags, item-level exclusion unions and re-scoring both systems on the retained items.

These are audit questions, not launch gates: an overlap flag is not proof of training exposure (and no
flag is not proof of none), a strong keyword baseline is not proof that a stratum is invalid, and a
retained-item score is a result on a different population, not a corrected full-set score.

Stored runs (:func:`audit_runs`) are each audited (bypass flags and the shortcut audit per run). They must be
comparable as ``compare`` demands and scored against the golden set and corpus given; a run none of whose
query ids is a golden id is refused, and the other differences are refused unless ``rebaseline``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragassay.analysis.compare import comparable_runs
from ragassay.errors import InputError, PinMismatchError
from ragassay.stats import bootstrap_deltas

_WORD = re.compile(r"\w+")
_MULT = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constant (golden ratio): a bijective token mix
_BASE = np.uint64(0xC2B2AE3D27D4EB4F)  # odd polynomial base of the rolling hash


def words(text: str) -> list[str]:
    """The screen's tokens: lower-cased runs of word characters (punctuation and case ignored)."""
    return _WORD.findall(text.lower())


# ---------------------------------------------------------------------------------------------- overlap
@dataclass(frozen=True, eq=False)
class OverlapResult:
    """Per item: token count, n-grams checked, n-grams found in the sources, flagged (any found).

    ``n_grams[i]`` is 0 and ``flagged[i]`` False for an item with no tokens (``n_empty`` counts them).
    """

    n: int
    short: str
    item_ids: tuple[str, ...]
    tokens: np.ndarray
    n_grams: np.ndarray
    n_found: np.ndarray
    flagged: np.ndarray
    source_tokens: int

    @property
    def n_flagged(self) -> int:
        return int(self.flagged.sum())

    @property
    def n_empty(self) -> int:
        return int((self.tokens == 0).sum())

    def to_dict(self) -> dict:
        return {"n": self.n, "short": self.short, "n_items": len(self.item_ids), "n_flagged": self.n_flagged,
                "n_empty": self.n_empty, "source_tokens": self.source_tokens,
                "flagged_ids": [i for i, f in zip(self.item_ids, self.flagged.tolist(), strict=True) if f]}


def _token_ids(docs: Sequence[list[str]], vocab: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """(ids of all tokens concatenated, start offset of each doc + total). Unknown tokens get fresh ids."""
    flat = [vocab.setdefault(t, len(vocab)) for d in docs for t in d]
    lens = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
    return np.asarray(flat, dtype=np.uint64), np.concatenate([[0], np.cumsum(lens)])


def ngram_hashes(ids: np.ndarray, bounds: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(64-bit hash of every n-gram that lies inside one document, index of its document).

    Polynomial rolling hash over mixed token ids, mod 2^64 (numpy's unsigned wrap-around), computed in n
    whole-array passes: no loop over positions or pairs. Two different n-grams collide with probability
    about 2^-64 each, negligible next to the screen's own imprecision.
    """
    total = ids.size
    if total < n:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    mixed = (ids + np.uint64(1)) * _MULT
    m = total - n + 1
    h = np.zeros(m, dtype=np.uint64)
    for k in range(n):
        h = h * _BASE + mixed[k : k + m]
    doc = np.searchsorted(bounds, np.arange(m), side="right") - 1
    inside = np.arange(m) + n <= bounds[doc + 1]
    return h[inside], doc[inside]


def ngram_overlap(items: Sequence[str], sources: Iterable[str], *, n: int = 13, short: str = "whole",
                  item_ids: Sequence[str] | None = None) -> OverlapResult:
    """Flag items sharing any word n-gram with any source text (Brown et al. 2020, appendix C, used ~13).

    ``short``: an item with fewer than n words is checked as one whole-item m-gram against the sources'
    m-grams (``"whole"``, so a short question copied verbatim is still caught) or not checked (``"skip"``).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(f"n={n!r} must be a positive number of words (13 is the usual screen)")
    if short not in ("whole", "skip"):
        raise InputError(f"short={short!r}: use 'whole' or 'skip'")
    items = list(items)
    ids_out = tuple(item_ids) if item_ids is not None else tuple(str(i) for i in range(len(items)))
    if len(ids_out) != len(items):
        raise InputError(f"{len(ids_out)} item ids for {len(items)} items; give one id per item")
    vocab: dict[str, int] = {}
    item_tok = [words(t) for t in items]
    src_tok = [words(t) for t in sources]
    iid, ib = _token_ids(item_tok, vocab)
    sid, sb = _token_ids(src_tok, vocab)
    lens = np.diff(ib)
    n_grams = np.zeros(len(items), dtype=np.int64)
    n_found = np.zeros(len(items), dtype=np.int64)
    lengths = [n] + (sorted({int(x) for x in lens if 0 < x < n}) if short == "whole" else [])
    for m in lengths:
        src_h = np.unique(ngram_hashes(sid, sb, m)[0])
        h, doc = ngram_hashes(iid, ib, m)
        keep = lens[doc] >= n if m == n else lens[doc] == m
        h, doc = h[keep], doc[keep]
        if h.size == 0:
            continue
        n_grams += np.bincount(doc, minlength=len(items))
        n_found += np.bincount(doc, weights=np.isin(h, src_h, assume_unique=False), minlength=len(items)
                               ).astype(np.int64)
    return OverlapResult(n, short, ids_out, lens, n_grams, n_found, n_found > 0, int(sid.size))


def golden_overlap(golden: Any, sources: Iterable[str], *, n: int = 13, short: str = "whole"
                   ) -> dict[str, OverlapResult]:
    """The overlap screen for golden questions and reference answers separately (ids are query ids)."""
    queries = list(getattr(golden, "queries", golden))
    src = list(sources)
    out = {"question": ngram_overlap([q.question for q in queries], src, n=n, short=short,
                                     item_ids=[q.query_id for q in queries])}
    answered = [q for q in queries if getattr(q, "reference_answer", None)]
    out["answer"] = ngram_overlap([q.reference_answer for q in answered], src, n=n, short=short,
                                  item_ids=[q.query_id for q in answered])
    return out


# ----------------------------------------------------------------------------------------- shortcut audit
@dataclass(frozen=True)
class ShortcutRow:
    """System vs keyword baseline in one stratum: gap = system - baseline with a paired bootstrap CI.

    ``verdict``: ``baseline_close`` when the whole interval lies below ``margin`` (a keyword answerer does
    about as well: audit for shortcuts), ``system_ahead`` when it lies above, else ``inconclusive``.
    """

    stratum: str
    n: int
    system: float
    baseline: float
    gap: float
    ci_low: float
    ci_high: float
    verdict: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def shortcut_audit(system, baseline, strata: Sequence[str], *, margin: float = 0.05, n_resamples: int = 2000,
                   seed: int = 0, confidence: float = 0.95) -> tuple[ShortcutRow, ...]:
    """Per stratum (and ``all``): the system's and a keyword baseline's mean score on the same items."""
    a = np.asarray(system, dtype=np.float64)
    b = np.asarray(baseline, dtype=np.float64)
    s = np.asarray(strata, dtype=object)
    if a.shape != b.shape or a.ndim != 1 or s.shape != a.shape:
        raise InputError(f"system {a.shape}, baseline {b.shape} and strata {s.shape} must be 1-D and equal length")
    _check_margin(margin)
    names = sorted({str(x) for x in s}) + ["all"]
    d = np.full((a.size, len(names)), np.nan)
    for j, name in enumerate(names):
        mask = np.ones(a.size, dtype=bool) if name == "all" else s == name
        d[mask, j] = a[mask] - b[mask]
    res = bootstrap_deltas(d, metrics=names, n_resamples=n_resamples, seed=seed, confidence=confidence)
    rows = []
    for j, name in enumerate(names):
        mask = ~np.isnan(d[:, j])
        m = res.metrics[j]
        if not m.defined:
            verdict = "undefined"
        elif m.ci_high < margin:
            verdict = "baseline_close"
        elif m.ci_low > margin:
            verdict = "system_ahead"
        else:
            verdict = "inconclusive"
        rows.append(ShortcutRow(name, int(mask.sum()), _mean(a[mask]), _mean(b[mask]), m.delta, m.ci_low,
                                m.ci_high, verdict))
    return tuple(rows)


def _check_margin(margin: float) -> None:
    if not (isinstance(margin, int | float) and 0 <= margin <= 1):  # NaN fails both comparisons
        raise InputError(f"margin={margin!r} (--margin on the command line) must be a finite number in [0, 1]: a "
                         "practical gap on the [0, 1] score scale, e.g. 0.05")


def _check_threshold(threshold: float) -> None:
    if not (isinstance(threshold, int | float) and 0 < threshold <= 1):
        raise InputError(f"threshold={threshold!r} (--threshold on the command line) must be a number in (0, 1]: "
                         "the score a correct answer reaches on the [0, 1] scale, e.g. 0.5")


def _mean(x: np.ndarray) -> float:
    return math.fsum(x.tolist()) / x.size if x.size else math.nan


def keyword_baseline_scores(corpus: Any, golden: Any, *, metric: str = "answer_f1") -> np.ndarray:
    """Per golden query, the score of a keyword answerer: the bundled BM25-only configuration (no dense
    branch, no reranker) with the extractive generator. NaN where the metric is undefined."""
    from ragassay.analysis.demo import demo_config_dir
    from ragassay.metrics.generation import exact_match, token_f1
    from ragassay.pipeline import Pipeline

    if metric not in ("answer_f1", "answer_em"):
        raise InputError(f"metric={metric!r}: the keyword baseline scores answer_f1 or answer_em")
    fn = token_f1 if metric == "answer_f1" else exact_match
    pipe = Pipeline.from_config(demo_config_dir() / "bm25.yaml", corpus)
    queries = list(golden.queries)
    _, traces = pipe.run(queries, progress=False)
    out = np.full(len(queries), np.nan)
    for i, (q, t) in enumerate(zip(queries, traces, strict=True)):
        if q.answerable and q.reference_answer:
            out[i] = fn(t.answer, [q.reference_answer]) if t.outcome == "answered" else 0.0
    return out


# ------------------------------------------------------------------------------------- retrieval bypass
@dataclass(frozen=True, eq=False)
class BypassResult:
    """Correct answers with no relevant evidence delivered. ``flags`` is 1/0, NaN where undefined (the
    answer score or the delivered recall is undefined, e.g. an unanswerable query)."""

    query_ids: tuple[str, ...]
    strata: tuple[str, ...]
    flags: np.ndarray
    threshold: float

    def counts(self) -> dict[str, dict[str, int]]:
        """Per stratum and ``total``: flagged, defined and undefined item counts."""
        def tally(mask: np.ndarray) -> dict[str, int]:
            f = self.flags[mask]
            ok = ~np.isnan(f)
            return {"flagged": int(f[ok].sum()), "defined": int(ok.sum()), "undefined": int((~ok).sum())}

        st = np.asarray(self.strata, dtype=object)
        out = {s: tally(st == s) for s in sorted(set(self.strata))}
        out["total"] = tally(np.ones(st.size, dtype=bool))
        return out

    def to_dict(self) -> dict:
        return {"threshold": self.threshold, "counts": self.counts(),
                "flagged_ids": [q for q, f in zip(self.query_ids, self.flags.tolist(), strict=True) if f == 1]}


def retrieval_bypass(answer_score, delivered_recall, *, threshold: float = 0.5, query_ids: Sequence[str] = (),
                     strata: Sequence[str] = ()) -> BypassResult:
    """flag = (answer score >= threshold) and (recall of relevant evidence in the packed context == 0);
    ``threshold`` in (0, 1]."""
    _check_threshold(threshold)
    a = np.asarray(answer_score, dtype=np.float64)
    r = np.asarray(delivered_recall, dtype=np.float64)
    if a.shape != r.shape or a.ndim != 1:
        raise InputError(f"answer scores {a.shape} and delivered recall {r.shape} must be 1-D and equal length")
    qids = tuple(query_ids) or tuple(str(i) for i in range(a.size))
    st = tuple(strata) or ("",) * a.size
    if len(qids) != a.size or len(st) != a.size:
        raise InputError(f"give one query id and one stratum per item ({a.size})")
    flags = np.where(np.isnan(a) | np.isnan(r), np.nan, ((a >= threshold) & (r == 0)).astype(np.float64))
    return BypassResult(qids, st, flags, float(threshold))


def retrieval_bypass_from_store(store: Any, run: str, *, metric: str = "answer_f1",
                                recall: str = "recall@context", threshold: float = 0.5) -> BypassResult:
    """:func:`retrieval_bypass` from a stored run's rows (first trial of each query)."""
    wide = store.results_wide(run, [metric, recall])
    first = np.r_[True, wide.query_ids[1:] != wide.query_ids[:-1]] if len(wide.query_ids) else np.zeros(0, bool)
    return retrieval_bypass(wide.values[first, 0], wide.values[first, 1], threshold=threshold,
                            query_ids=[str(q) for q in wide.query_ids[first]],
                            strata=[str(s) for s in wide.strata[first]])


# ------------------------------------------------------------------------------------------- stored runs
@dataclass(frozen=True, eq=False)
class RunAudit:
    """One stored run's audit: its ``label`` (the run name, with the id when two audited runs share a name),
    its first-trial ``scores`` per golden query id (NaN where it has none), its retrieval-bypass flags over its
    golden queries, the shortcut audit (None when the metric has no keyword baseline) and
    ``n_outside_golden``, its stored query ids that are not golden ids (not audited)."""

    run_id: str
    label: str
    dataset_version: str | None
    scores: np.ndarray
    bypass: BypassResult
    shortcut: tuple[ShortcutRow, ...] | None
    n_outside_golden: int

    def to_dict(self) -> dict:
        return {"run": self.label, "run_id": self.run_id, "dataset_version": self.dataset_version,
                "n_outside_golden": self.n_outside_golden, **self.bypass.to_dict()}


def golden_scores(store: Any, run: str, metric: str, ids: Sequence[str]) -> np.ndarray:
    """The run's first-trial value of ``metric`` per golden query id in ``ids`` (NaN where missing)."""
    wide = store.results_wide(run, [metric])
    first: dict[str, float] = {}
    for q, v in zip(wide.query_ids.tolist(), wide.values[:, 0].tolist(), strict=True):
        first.setdefault(q, v)
    return np.array([first.get(q, np.nan) for q in ids], dtype=np.float64)


def golden_differences(rec: Any, stored_ids: Iterable[str], golden: Any,
                       corpus_digest: str | None) -> tuple[list[dict], int]:
    """(pins of run ``rec`` that differ from the golden set and corpus given, count of its stored query ids
    that are not golden ids). A run with no stored query id in the golden set raises ``InputError``: it was
    scored against another golden set and there is nothing to audit."""
    stored = set(stored_ids)
    outside = len(stored - set(golden.query_ids))
    if stored and outside == len(stored):
        raise InputError(f"run {rec.name!r} was scored against golden set {rec.dataset_version!r}: none of its "
                         f"{len(stored)} query ids is an id of the golden set given ({golden.dataset_version!r}); "
                         f"pass the golden set it was scored with (--golden)")
    given = {"dataset_version": golden.dataset_version, "corpus_digest": corpus_digest}
    diffs = [{"pin": p, "run_a": "golden set given", "a": v, "run_b": rec.name, "b": getattr(rec, p)}
             for p, v in given.items() if v is not None and getattr(rec, p) is not None and getattr(rec, p) != v]
    return diffs, outside


def audit_runs(store: Any, run_refs: Sequence[str], golden: Any, corpus: Any, *, metric: str = "answer_f1",
               threshold: float = 0.5, margin: float = 0.05, n_resamples: int = 2000, seed: int = 0,
               rebaseline: bool = False) -> tuple[list[RunAudit], list[dict]]:
    """(one :class:`RunAudit` per run, the differing pins). The runs must be comparable with each other
    (``compare.comparable_runs``) and scored against ``golden`` and ``corpus`` (dataset version,
    corpus digest); differences raise ``PinMismatchError`` unless ``rebaseline``, and are then returned.
    ``threshold`` lies in (0, 1] and ``margin`` in [0, 1], checked before any run is read."""
    _check_threshold(threshold)
    _check_margin(margin)
    recs, diffs = comparable_runs(store, run_refs, [metric, "recall@context"], rebaseline=rebaseline)
    ids = list(golden.query_ids)
    known = set(ids)
    outside = {}
    for rec in recs:
        if metric not in store.metrics(rec.run_id):
            raise InputError(f"run {rec.name!r} has no {metric!r} rows; pick a metric it has with --metric")
        stored = store.results_wide(rec.run_id, [metric]).query_ids.tolist()
        own, outside[rec.run_id] = golden_differences(rec, stored, golden, getattr(corpus, "digest", None))
        if own and not rebaseline:
            raise PinMismatchError(
                f"run {rec.name!r} was not scored against the golden set and corpus given:\n"
                + "\n".join(f"  {d['pin']}: {d['b']} (run {rec.name}) vs {d['a']} (given)" for d in own)
                + "\npass the golden set and corpus it was scored with (--golden, --corpus), or --rebaseline to "
                  "audit it anyway")
        diffs += own
    base = keyword_baseline_scores(corpus, golden, metric=metric) if metric in ("answer_f1", "answer_em") else None
    strata = [q.stratum for q in golden.queries]
    names = [r.name for r in recs]
    audits = []
    for rec in recs:
        scores = golden_scores(store, rec.run_id, metric, ids)
        full = retrieval_bypass_from_store(store, rec.run_id, metric=metric, threshold=threshold)
        keep = np.fromiter((q in known for q in full.query_ids), dtype=bool, count=len(full.query_ids))
        bypass = BypassResult(tuple(np.asarray(full.query_ids, dtype=object)[keep]),
                              tuple(np.asarray(full.strata, dtype=object)[keep]), full.flags[keep], full.threshold)
        shortcut = (shortcut_audit(scores, base, strata, margin=margin, n_resamples=n_resamples, seed=seed)
                    if base is not None else None)
        label = rec.name if names.count(rec.name) == 1 else f"{rec.name} ({rec.run_id[:10]})"
        audits.append(RunAudit(rec.run_id, label, rec.dataset_version, scores, bypass, shortcut,
                               outside[rec.run_id]))
    return audits, diffs


# ------------------------------------------------------------------------------------------- exclusions
@dataclass(frozen=True)
class ExclusionReport:
    """Item-level union of exclusion sets with the bounds the marginals alone allow.

    max(marginals) <= |union| <= min(sum(marginals), N), so N - min(sum, N) <= retained <= N - max.
    """

    n_items: int
    marginals: dict[str, int]
    intersections: dict[str, int]
    union: int
    retained: int
    union_bounds: tuple[int, int]
    retained_bounds: tuple[int, int]
    retained_ids: tuple[str, ...]

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["union_bounds"], d["retained_bounds"] = list(self.union_bounds), list(self.retained_bounds)
        d["retained_ids"] = list(self.retained_ids)
        return d


def exclusion_bounds(marginals: Sequence[int], n_items: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """((union low, union high), (retained low, retained high)) from marginal excluded counts only."""
    m = [int(x) for x in marginals]
    if any(x < 0 or x > n_items for x in m):
        raise InputError(f"marginal counts {m} must lie in [0, {n_items}]")
    lo, hi = max(m, default=0), min(sum(m), n_items)
    return (lo, hi), (n_items - hi, n_items - lo)


def exclusion_union(sets: Mapping[str, Iterable[str]], universe: Sequence[str]) -> ExclusionReport:
    """Union of named exclusion sets over ``universe`` (item ids), with every pairwise and higher
    intersection that is non-empty reported as ``"a&b"`` -> count."""
    uni = list(universe)
    pos = {x: i for i, x in enumerate(uni)}
    if len(pos) != len(uni):
        raise InputError("the universe of item ids has duplicates; give each item once")
    names = list(sets)
    member = np.zeros((len(uni), len(names)), dtype=bool)
    for j, name in enumerate(names):
        for x in sets[name]:
            i = pos.get(x)
            if i is None:
                raise InputError(f"exclusion set {name!r} names item {x!r}, which is not in the item list")
            member[i, j] = True
    marg = {n: int(member[:, j].sum()) for j, n in enumerate(names)}
    inter: dict[str, int] = {}
    # each item's membership pattern is one bit mask; a k-way intersection is every pattern containing it
    codes = member.astype(np.int64) @ (1 << np.arange(len(names), dtype=np.int64)) if names else np.zeros(len(uni), dtype=np.int64)
    patterns, counts = np.unique(codes, return_counts=True)
    for mask in range(1, 1 << len(names)):
        if bin(mask).count("1") < 2:
            continue
        c = int(counts[(patterns & mask) == mask].sum())
        if c:
            inter["&".join(n for j, n in enumerate(names) if mask >> j & 1)] = c
    excluded = member.any(axis=1)
    ub, rb = exclusion_bounds(list(marg.values()), len(uni))
    return ExclusionReport(len(uni), marg, inter, int(excluded.sum()), int((~excluded).sum()), ub, rb,
                           tuple(x for x, e in zip(uni, excluded.tolist(), strict=True) if not e))


@dataclass(frozen=True)
class Rescore:
    """Both systems on all items and on the retained items, with paired bootstrap deltas (B - A)."""

    population: str
    n: int
    mean_a: float
    mean_b: float
    delta: float
    ci_low: float
    ci_high: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def rescore_retained(a, b, item_ids: Sequence[str], retained: Iterable[str], *, n_resamples: int = 2000,
                     seed: int = 0, confidence: float = 0.95) -> tuple[Rescore, Rescore, Rescore]:
    """(all items, retained items, excluded items): means of both systems and the paired delta with its CI.

    Both systems are scored on the same retained population; NaN scores are left out (counted in n)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    ids = np.asarray(list(item_ids), dtype=object)
    if a.shape != b.shape or a.ndim != 1 or ids.shape != a.shape:
        raise InputError(f"scores {a.shape}, {b.shape} and ids {ids.shape} must be 1-D and equal length")
    keep = np.isin(ids, np.asarray(list(retained), dtype=object))
    cols = {"all": np.ones(a.size, dtype=bool), "retained": keep, "excluded": ~keep}
    d = np.full((a.size, 3), np.nan)
    for j, m in enumerate(cols.values()):
        d[m, j] = b[m] - a[m]
    res = bootstrap_deltas(d, metrics=list(cols), n_resamples=n_resamples, seed=seed, confidence=confidence)
    out = []
    for (name, m), r in zip(cols.items(), res.metrics, strict=True):
        ok = m & ~np.isnan(a) & ~np.isnan(b)
        out.append(Rescore(name, int(ok.sum()), _mean(a[ok]), _mean(b[ok]), r.delta, r.ci_low, r.ci_high))
    return tuple(out)  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------- report
def hygiene_report_section(*, overlap: Mapping[str, OverlapResult] | None = None,
                           runs: Sequence[RunAudit] | None = None, exclusions: ExclusionReport | None = None,
                           rescored: Sequence[Rescore] | None = None,
                           pin_differences: Sequence[Mapping] = ()) -> dict:
    """JSON-ready data for the hygiene report section; parts not computed are None (NaN -> None).
    ``shortcut`` holds every audited run's rows and ``bypass`` one entry per run, each naming its ``run``;
    ``pin_differences`` lists what a rebaselined audit let through."""
    from ragassay.analysis.attribution import _nan_none

    shortcut = None
    if runs and any(a.shortcut is not None for a in runs):
        shortcut = [{"run": a.label, **r.to_dict()} for a in runs for r in a.shortcut or ()]
    return _nan_none({
        "kind": "hygiene",
        "overlap": {k: v.to_dict() for k, v in overlap.items()} if overlap is not None else None,
        "shortcut": shortcut,
        "bypass": [a.to_dict() for a in runs] if runs else None,
        "exclusions": exclusions.to_dict() if exclusions is not None else None,
        "rescored": [r.to_dict() for r in rescored] if rescored is not None else None,
        "rebaselined": bool(pin_differences),
        "pin_differences": [dict(d) for d in pin_differences],
    })
