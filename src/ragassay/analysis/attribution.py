"""Remove-the-evidence ablations: leave-one-out deltas and Shapley shares of the generator's context items.

For a query q with packed context E and a set of *target* items P (every packed item, or only the cited
ones), the utility of a subset S of P is

    v(S) = Q(Gen(q, E minus (P \\ S)))

the answer-quality score (a metric of :mod:`ragassay.metrics.generation` against the golden reference, or
any deterministic scorer) of the answer regenerated from the context with the items outside S removed and
everything else kept in its original order. Sign convention of the spec (section 34.4): the leave-one-out
delta of item i is v(P) - v(P minus i), so a positive delta means removing the item hurts.

Shapley value (Shapley 1953), exact for |P| <= ``max_exact``:

    phi_i = sum over S subset of P minus i of |S|! (n - |S| - 1)! / n! * (v(S + i) - v(S))

computed from the 2^n subset values (each generated once: the subset cache is keyed on the frozen subset,
and the call counter reports the generator calls made). Above ``max_exact``, phi_i is the mean marginal
contribution over uniformly random permutations with its standard error std / sqrt(m) (Castro et al. 2009).
Both satisfy efficiency: sum_i phi_i = v(P) - v(empty) (exactly for every sampled permutation too).

Removal policy (stated in every result): ``duplicates="all"`` removes every occurrence of an item whose text
(or span, when there is no text) repeats in the context, so a duplicate is one player; ``"first"`` treats
each occurrence as its own item. ``refill="none"`` leaves vacated space empty; ``"reserve"`` fills it from
the query's reserve units (the packer's cut list, in rank order) while the context stays within the token
count of the full context, so a removal does not also shrink the prompt.

Stochastic generators: ``repeats=r`` generates every subset r times; v(S) is the mean, and the
leave-one-out interval is a paired bootstrap over the r repeat pairs (repeat j of the full context with
repeat j of the removal). With r = 1 the per-item interval is undefined; the aggregate intervals are paired
bootstraps over queries (one mean delta per query and group), from :func:`ragassay.stats.bootstrap_deltas`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ragassay.errors import InputError
from ragassay.metrics.generation import exact_match, token_f1
from ragassay.stats import bootstrap_deltas
from ragassay.trace.schema import Unit

AnswerFn = Callable[[str, list[Unit]], "str | None"]
ScoreFn = Callable[["str | None", Any], float]
METRICS = ("answer_f1", "answer_em", "answer_f1_or_abstention")
SHAPLEY_MODES = ("auto", "exact", "monte_carlo", "none")


@dataclass(frozen=True)
class RemovalPolicy:
    """How an item is removed: every duplicate occurrence or only that one; refill vacated space or not."""

    duplicates: Literal["all", "first"] = "all"
    refill: Literal["none", "reserve"] = "none"

    def __post_init__(self) -> None:
        if self.duplicates not in ("all", "first"):
            raise InputError(f"duplicates={self.duplicates!r}: use 'all' (remove every copy) or 'first'")
        if self.refill not in ("none", "reserve"):
            raise InputError(f"refill={self.refill!r}: use 'none' or 'reserve' (refill from the cut units)")

    def to_dict(self) -> dict:
        return {"duplicates": self.duplicates, "refill": self.refill}


class CallCounter:
    """Wraps an answerer and counts the generator calls actually made (cache hits make none)."""

    def __init__(self, fn: AnswerFn):
        self.fn = fn
        self.calls = 0
        self.cache_hits = 0

    def __call__(self, question: str, units: list[Unit]) -> str | None:
        self.calls += 1
        return self.fn(question, units)


def as_answer_fn(generator: Any) -> AnswerFn:
    """An answer function from a generator object (``.generate(question, units) -> Generation``, as the
    extractive or an ``llm`` generator) or a plain callable ``fn(question, units) -> answer``.

    A generation whose outcome is not ``answered`` (abstained, refused, error) gives ``None``: no answer,
    which the answer metrics score 0 on an answerable question.
    """
    gen = getattr(generator, "generate", None)
    if callable(gen):
        def answer(question: str, units: list[Unit]) -> str | None:
            g = gen(question, units)
            return g.answer if g.outcome == "answered" else None
        return answer
    if callable(generator):
        return generator
    raise InputError(f"{type(generator).__name__} is not a generator: give an object with "
                     f".generate(question, units) or a callable fn(question, units) -> answer")


def answer_scorer(metric: str | ScoreFn) -> ScoreFn:
    """``score(answer, query)``: token F1 or exact match against ``query.reference_answer`` (None -> 0), or
    the given callable. Returns NaN for a query the metric does not define (no reference answer).
    ``answer_f1_or_abstention`` is token F1 on answerable queries and, on unanswerable ones, 1 for an
    abstention and 0 for an answer, so every golden query has a utility."""
    if callable(metric):
        return metric
    if metric not in METRICS:
        raise InputError(f"unknown answer metric {metric!r}; use one of {', '.join(METRICS)} or a callable")
    fn = exact_match if metric == "answer_em" else token_f1
    abstention = metric == "answer_f1_or_abstention"

    def score(answer: str | None, query: Any) -> float:
        if not getattr(query, "answerable", True):
            return float(answer is None) if abstention else math.nan
        ref = getattr(query, "reference_answer", None)
        if not ref:
            return math.nan
        return 0.0 if answer is None else fn(answer, [ref])
    return score


def _unit_key(u: Unit) -> Any:
    return u.text if u.text is not None else (u.doc_id, u.start, u.end)


def _tokens(u: Unit) -> int:
    if u.tokens is not None:
        return u.tokens
    from ragassay.pipeline.tokens import count_tokens

    return count_tokens(u.text or "")


class SubsetValue:
    """v(S) for one query, cached on the frozen subset of player indices.

    ``players[p]`` lists the context positions player p stands for; positions in no player are always
    kept. Scores are cached per answer text, since many subsets give the same answer.
    """

    def __init__(self, query: Any, units: Sequence[Unit], answer: CallCounter, score: ScoreFn,
                 players: list[list[int]], policy: RemovalPolicy, reserve: Sequence[Unit] = (),
                 repeats: int = 1):
        self.query = query
        self.question = query.question
        self.units = list(units)
        self.answer = answer
        self.score = score
        self.players = players
        self.policy = policy
        self.reserve = list(reserve)
        self.budget = sum(_tokens(u) for u in self.units)
        self.repeats = repeats
        self.owner = np.full(len(self.units), -1, dtype=np.int64)
        for p, positions in enumerate(players):
            self.owner[positions] = p
        self.cache: dict[frozenset[int], np.ndarray] = {}
        self._scores: dict[str | None, float] = {}

    def context(self, subset: frozenset[int]) -> list[Unit]:
        kept = [u for u, p in zip(self.units, self.owner.tolist(), strict=True) if p < 0 or p in subset]
        if self.policy.refill == "reserve" and len(subset) < len(self.players):
            used = sum(_tokens(u) for u in kept)
            have = {_unit_key(u) for u in self.units}
            for u in self.reserve:
                if _unit_key(u) in have:
                    continue
                t = _tokens(u)
                if used + t > self.budget:
                    break  # the packer's stop policy: refill keeps rank order
                kept.append(u)
                used += t
        return kept

    def samples(self, subset: frozenset[int]) -> np.ndarray:
        """The ``repeats`` scores of the subset's regenerated answers (cached)."""
        hit = self.cache.get(subset)
        if hit is not None:
            self.answer.cache_hits += 1
            return hit
        ctx = self.context(subset)
        out = np.empty(self.repeats)
        for r in range(self.repeats):
            ans = self.answer(self.question, ctx)
            s = self._scores.get(ans)
            if s is None:
                s = self._scores[ans] = float(self.score(ans, self.query))
            out[r] = s
        self.cache[subset] = out
        return out

    def __call__(self, subset: frozenset[int]) -> float:
        return float(self.samples(subset).mean())


def exact_shapley(values: np.ndarray, n: int) -> np.ndarray:
    """Shapley values from ``values[mask]`` = v(subset with bit i set for player i), for all 2^n masks."""
    if values.shape != (1 << n,):
        raise InputError(f"need 2^{n} = {1 << n} subset values, got {values.shape}")
    masks = np.arange(1 << n, dtype=np.int64)
    size = np.bitwise_count(masks).astype(np.int64)
    fact = np.array([math.factorial(k) for k in range(n + 1)], dtype=np.float64)
    w = fact[: n] * fact[n - 1 :: -1] / fact[n]  # w[s] = s! (n - s - 1)! / n!
    phi = np.empty(n)
    for i in range(n):
        without = masks[(masks >> i) & 1 == 0]
        phi[i] = math.fsum(w[size[without]] * (values[without | (1 << i)] - values[without]))
    return phi


def all_subset_values(v: Callable[[frozenset[int]], float], n: int) -> np.ndarray:
    """v at every one of the 2^n subsets, indexed by bit mask."""
    out = np.empty(1 << n)
    for mask in range(1 << n):
        out[mask] = v(frozenset(i for i in range(n) if mask >> i & 1))
    return out


def monte_carlo_shapley(v: Callable[[frozenset[int]], float], n: int, permutations: int,
                        rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(mean marginal contribution, its standard error) over ``permutations`` random orders of n players."""
    if permutations < 2:
        raise InputError(f"permutations={permutations}: Monte Carlo Shapley needs at least 2 for an error")
    contrib = np.empty((permutations, n))
    for m in range(permutations):
        order = rng.permutation(n)
        prev, members = v(frozenset()), set()
        for i in order.tolist():
            members.add(i)
            cur = v(frozenset(members))
            contrib[m, i] = cur - prev
            prev = cur
    return contrib.mean(axis=0), contrib.std(axis=0, ddof=1) / math.sqrt(permutations)


@dataclass(frozen=True)
class ItemAttribution:
    """One removable item (a player): its context positions and unit, LOO delta (+CI) and Shapley share."""

    player: int
    positions: tuple[int, ...]
    unit_id: str
    doc_id: str
    start: int
    end: int
    relevant: bool | None
    loo_delta: float
    loo_ci_low: float
    loo_ci_high: float
    shapley: float
    shapley_se: float

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class QueryAttribution:
    """Per-query result. ``reason`` says why a query has no values (no items, metric undefined)."""

    query_id: str
    stratum: str | None
    n_items: int
    baseline: float
    empty: float
    method: str
    calls: int
    items: tuple[ItemAttribution, ...]
    reason: str | None = None

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("query_id", "stratum", "n_items", "baseline", "empty", "method",
                                           "calls", "reason")}
        d["items"] = [i.to_dict() for i in self.items]
        return d


@dataclass(frozen=True)
class GroupDelta:
    """Mean over queries of the per-query mean of a figure in one item group, with a bootstrap CI."""

    group: str
    figure: str
    n_queries: int
    mean: float
    ci_low: float
    ci_high: float
    defined: bool
    reason: str | None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class AttributionResult:
    metric: str
    policy: RemovalPolicy
    shapley: str
    repeats: int
    max_exact: int
    permutations: int
    seed: int
    calls: int
    cache_hits: int
    queries: tuple[QueryAttribution, ...]
    groups: tuple[GroupDelta, ...] = field(default=())

    @property
    def n_undefined(self) -> int:
        return sum(q.reason is not None for q in self.queries)

    def to_dict(self) -> dict:
        return {"metric": self.metric, "policy": self.policy.to_dict(), "shapley": self.shapley,
                "repeats": self.repeats, "max_exact": self.max_exact, "permutations": self.permutations,
                "seed": self.seed, "calls": self.calls, "cache_hits": self.cache_hits,
                "n_queries": len(self.queries), "n_undefined": self.n_undefined,
                "groups": [g.to_dict() for g in self.groups], "queries": [q.to_dict() for q in self.queries]}


def _players(units: Sequence[Unit], targets: Sequence[int], duplicates: str) -> list[list[int]]:
    if duplicates == "first":
        return [[p] for p in targets]
    groups: dict[Any, list[int]] = {}
    for p in targets:
        groups.setdefault(_unit_key(units[p]), []).append(p)
    target_keys = set(groups)
    # every copy of a target item goes, including copies outside the targets (e.g. an uncited duplicate)
    for p, u in enumerate(units):
        k = _unit_key(u)
        if k in target_keys and p not in groups[k]:
            groups[k].append(p)
    return [sorted(g) for g in groups.values()]


def _relevant(query: Any, unit: Unit, threshold: int) -> bool | None:
    evidence = getattr(query, "evidence", None)
    if evidence is None:
        return None
    return any(e.grade >= threshold and e.doc_id == unit.doc_id and e.start < unit.end and unit.start < e.end
               for e in evidence)


def _loo_ci(full: np.ndarray, minus: np.ndarray, seed: int, n_resamples: int) -> tuple[float, float]:
    if full.size < 2:
        return math.nan, math.nan
    r = bootstrap_deltas(full - minus, n_resamples=n_resamples, seed=seed)
    return r.metrics[0].ci_low, r.metrics[0].ci_high


def attribute_query(query: Any, units: Sequence[Unit], answer: CallCounter, score: ScoreFn, *,
                    targets: Sequence[int] | None = None, reserve: Sequence[Unit] = (),
                    policy: RemovalPolicy = RemovalPolicy(), shapley: str = "auto", max_exact: int = 10,
                    permutations: int = 200, repeats: int = 1, rng: np.random.Generator | None = None,
                    evidence_threshold: int = 2, n_resamples: int = 2000, seed: int = 0) -> QueryAttribution:
    """Leave-one-out and Shapley attribution of one query's context items (see the module docstring)."""
    units = list(units)
    targets = list(range(len(units))) if targets is None else list(targets)
    players = _players(units, targets, policy.duplicates)
    n = len(players)
    calls0 = answer.calls
    qid, stratum = str(query.query_id), getattr(query, "stratum", None)
    if n == 0:
        return QueryAttribution(qid, stratum, 0, math.nan, math.nan, "none", 0, (), "no context items to remove")
    v = SubsetValue(query, units, answer, score, players, policy, reserve, repeats)
    full_set = frozenset(range(n))
    full = v.samples(full_set)
    if np.isnan(full).any():
        return QueryAttribution(qid, stratum, n, math.nan, math.nan, "none", answer.calls - calls0, (),
                                "the answer metric is undefined for this query (no reference answer)")
    minus = [v.samples(full_set - {i}) for i in range(n)]
    mode = shapley if shapley != "auto" else ("exact" if n <= max_exact else "monte_carlo")
    if mode == "exact" and n > max_exact:
        raise InputError(f"query {qid}: exact Shapley over {n} items needs 2^{n} generations; raise max_exact "
                         f"above {max_exact} deliberately or use shapley='monte_carlo'")
    phi = se = np.full(n, math.nan)
    empty = math.nan
    if mode == "exact":
        vals = all_subset_values(v, n)
        phi, se, empty = exact_shapley(vals, n), np.zeros(n), float(vals[0])
    elif mode == "monte_carlo":
        phi, se = monte_carlo_shapley(v, n, permutations, rng if rng is not None else np.random.default_rng(seed))
        empty = v(frozenset())
    items = []
    for i, positions in enumerate(players):
        u = units[positions[0]]
        lo, hi = _loo_ci(full, minus[i], seed, n_resamples)
        items.append(ItemAttribution(i, tuple(positions), u.unit_id, u.doc_id, u.start, u.end,
                                     _relevant(query, u, evidence_threshold),
                                     float(full.mean() - minus[i].mean()), lo, hi, float(phi[i]), float(se[i])))
    return QueryAttribution(qid, stratum, n, float(full.mean()), empty, mode if mode != "none" else "loo",
                            answer.calls - calls0, tuple(items))


def group_deltas(queries: Sequence[QueryAttribution], *, n_resamples: int = 2000, seed: int = 0,
                 confidence: float = 0.95) -> tuple[GroupDelta, ...]:
    """LOO delta and Shapley share by item group, each a mean over queries of the per-query group mean,
    with a bootstrap interval over queries: groups ``rank:k`` (the k-th removable item), ``relevant`` and
    ``other`` (items overlapping golden evidence of the threshold grade or not)."""
    defined = [q for q in queries if q.reason is None]
    names: list[str] = []
    for q in defined:
        for it in q.items:
            for g in _groups(it):
                if g not in names:
                    names.append(g)
    names.sort(key=lambda g: (not g.startswith("rank:"), int(g[5:]) if g.startswith("rank:") else 0, g))
    out: list[GroupDelta] = []
    figures = ("loo_delta", "shapley") if any(q.method != "loo" for q in defined) else ("loo_delta",)
    for figure in figures:
        mat = np.full((len(defined), len(names)), np.nan)
        for r, q in enumerate(defined):
            acc: dict[str, list[float]] = {}
            for it in q.items:
                for g in _groups(it):
                    acc.setdefault(g, []).append(getattr(it, figure))
            for g, vals in acc.items():
                if not any(math.isnan(x) for x in vals):
                    mat[r, names.index(g)] = math.fsum(vals) / len(vals)
        if not names or not defined:
            continue
        res = bootstrap_deltas(mat, metrics=names, n_resamples=n_resamples, seed=seed, confidence=confidence)
        out += [GroupDelta(m.metric, figure, m.n, m.delta, m.ci_low, m.ci_high, m.defined, m.reason)
                for m in res.metrics]
    return tuple(out)


def _groups(it: ItemAttribution) -> list[str]:
    out = [f"rank:{it.player + 1}"]
    if it.relevant is not None:
        out.append("relevant" if it.relevant else "other")
    return out


def attribute(queries: Iterable[Any], contexts: Mapping[str, Sequence[Unit]], generator: Any, *,
              metric: str | ScoreFn = "answer_f1", targets: Mapping[str, Sequence[int]] | None = None,
              reserves: Mapping[str, Sequence[Unit]] | None = None, policy: RemovalPolicy = RemovalPolicy(),
              shapley: str = "auto", max_exact: int = 10, permutations: int = 200, repeats: int = 1,
              seed: int = 0, evidence_threshold: int = 2, n_resamples: int = 2000,
              progress: Callable[[int, int], None] | None = None) -> AttributionResult:
    """Leave-one-out deltas and Shapley shares for every query with a context in ``contexts``.

    ``generator``: an extractive or ``llm`` generator, or any ``fn(question, units) -> answer``.
    ``metric``: ``answer_f1`` / ``answer_em`` against the reference answer, or ``score(answer, query)``.
    ``targets``: per query, the context positions to attribute (default all; pass the cited positions to
    remove only cited items while keeping the rest). ``reserves``: refill units per query for
    ``policy.refill == "reserve"``. Returns per-query items and group intervals over queries.
    """
    if shapley not in SHAPLEY_MODES:
        raise InputError(f"shapley={shapley!r}: use one of {', '.join(SHAPLEY_MODES)}")
    for name, val, low in (("repeats", repeats, 1), ("max_exact", max_exact, 0), ("permutations", permutations, 2)):
        if isinstance(val, bool) or not isinstance(val, int) or val < low:
            raise InputError(f"{name}={val!r} must be an integer >= {low}")
    if max_exact > 20:
        raise InputError(f"max_exact={max_exact}: 2^{max_exact} generations per query is not practical; use <= 20")
    counter = CallCounter(as_answer_fn(generator))
    score = answer_scorer(metric)
    rng = np.random.default_rng(seed)
    qs = [q for q in queries if q.query_id in contexts]
    out = []
    for k, q in enumerate(qs):
        out.append(attribute_query(q, contexts[q.query_id], counter, score,
                                   targets=None if targets is None else targets.get(q.query_id),
                                   reserve=(reserves or {}).get(q.query_id, ()), policy=policy, shapley=shapley,
                                   max_exact=max_exact, permutations=permutations, repeats=repeats, rng=rng,
                                   evidence_threshold=evidence_threshold, n_resamples=n_resamples, seed=seed))
        if progress is not None:
            progress(k + 1, len(qs))
    metric_name = metric if isinstance(metric, str) else getattr(metric, "__name__", "custom")
    return AttributionResult(metric_name, policy, shapley, repeats, max_exact, permutations, seed, counter.calls,
                             counter.cache_hits, tuple(out), group_deltas(out, n_resamples=n_resamples, seed=seed))


def contexts_from_traces(traces: Iterable[Any], corpus: Any, *, stage: str = "packed", k: int | None = None
                         ) -> tuple[dict[str, list[Unit]], dict[str, list[Unit]]]:
    """(contexts, reserves) per query from traces (the first trial of each): ``stage="packed"`` takes the
    packed context with the cut units as reserve; ``"final"`` the top ``k`` of the reranked (else fused)
    list with the rest as reserve. Unit text is filled from the corpus's canonical text when missing."""
    if stage not in ("packed", "final"):
        raise InputError(f"stage={stage!r}: use 'packed' or 'final'")
    if k is not None and k < 1:
        raise InputError(f"k={k} must be a positive number of items")

    def filled(units: Sequence[Unit]) -> list[Unit]:
        out = []
        for u in units:
            if u.text is None or u.tokens is None:
                doc = corpus.docs.get(u.doc_id)
                if doc is None:
                    raise InputError(f"unit {u.unit_id} names doc {u.doc_id!r}, which is not in the corpus; "
                                     f"use the corpus the run was made on")
                text = u.text if u.text is not None else doc.text[u.start : u.end]
                from ragassay.pipeline.tokens import count_tokens

                u = u.model_copy(update={"text": text, "tokens": u.tokens if u.tokens is not None
                                         else count_tokens(text)})
            out.append(u)
        return out

    contexts: dict[str, list[Unit]] = {}
    reserves: dict[str, list[Unit]] = {}
    for t in traces:
        if t.query_id in contexts or t.outcome == "error":
            continue
        if stage == "packed":
            ctx, rest = list(t.packed)[:k] if k else list(t.packed), list(t.cut)
        else:
            final = list(t.reranked) if t.reranked is not None else list(t.fused)
            cut = k if k is not None else len(final)
            ctx, rest = final[:cut], final[cut:]
        contexts[t.query_id] = filled(ctx)
        reserves[t.query_id] = filled(rest)
    return contexts, reserves


def attribution_report_section(result: AttributionResult, top: int = 10) -> dict:
    """JSON-ready data for a report section: settings, call count, group table with intervals, and the
    queries whose single most harmful removal is largest (``top`` of them) with their item rows."""
    ranked = sorted((q for q in result.queries if q.reason is None),
                    key=lambda q: -max((i.loo_delta for i in q.items), default=-math.inf))
    return {
        "kind": "attribution",
        "metric": result.metric,
        "policy": result.policy.to_dict(),
        "shapley": result.shapley,
        "repeats": result.repeats,
        "calls": result.calls,
        "cache_hits": result.cache_hits,
        "n_queries": len(result.queries),
        "n_undefined": result.n_undefined,
        "groups": [_nan_none(g.to_dict()) for g in result.groups],
        "top_queries": [_nan_none(q.to_dict()) for q in ranked[:top]],
    }


def _nan_none(obj: Any) -> Any:
    """NaN -> None so the data is valid JSON (undefined is not zero)."""
    if isinstance(obj, float):
        return None if math.isnan(obj) else obj
    if isinstance(obj, dict):
        return {k: _nan_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nan_none(v) for v in obj]
    return obj
