"""Evidence-delivery decomposition of answer correctness (spec 34.1) and the oracle-context ladder (§8.4).

With Y = 1 for a correct answer and H = 1 when the complete evidence reached the generator, accuracy splits
by the law of total probability into ``A = h * c1 + (1 - h) * c0`` where ``h = P(H = 1)`` and
``c_b = P(Y = 1 | H = b)``. An empty cell (no hit or no miss) leaves its ``c_b`` undefined (NaN), never 0.
Between two runs the change is split exactly, with the averages ``h~ = (h_a + h_b) / 2`` and
``u~ = ((c1 - c0)_a + (c1 - c0)_b) / 2``, into

    delivery = u~ * (h_b - h_a)                          (more or less evidence delivered)
    use      = h~ * (c1_b - c1_a) + (1 - h~) * (c0_b - c0_a)   (better or worse use of what arrived)

and ``delivery + use = A_b - A_a``. The split is descriptive: the hit sets of two runs can differ in
difficulty, so it does not by itself assign a cause.

Definitions read from stored rows (named, so a reader knows what was measured):

- **H** (complete-evidence delivery): ``recall@context == 1``; every relevant span reached the packed context.
- **Y** (correct): ``answer_f1 >= 0.5`` by default (:data:`DEFAULT_CORRECT`); any metric and threshold can be
  named (``answer_em>=1``, a judge's ``correctness>=1``).
- candidate recall ``recall@fusion_depth``; context relevance, support: the first stored metric of
  :data:`CONTEXT_RELEVANCE` / :data:`SUPPORT` (``citation_validity`` is only a weak support proxy: it checks
  that citations resolve into the packed context, not that they entail the answer).

Only queries with both Y and H defined enter the decomposition (answerable queries with a reference
answer and a measured context). Intervals are percentile bootstraps over queries; several trials of one
query are resampled together.

Runs that are paired or pooled (the change between two runs, the ladder's rungs) must be comparable as
``compare`` demands (:func:`comparable_runs`): differing pins are refused unless ``rebaseline``, and a
rebaselined result lists them.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass

import numpy as np

from ragassay.analysis.compare import comparable_runs
from ragassay.errors import InputError
from ragassay.stats import bootstrap_deltas
from ragassay.stats.bootstrap import resampled_sums
from ragassay.store import Store

DEFAULT_CORRECT = "answer_f1>=0.5"
DELIVERY_METRIC = "recall@context"
CANDIDATE_RECALL = "recall@fusion_depth"
CONTEXT_RELEVANCE = ("context_relevance", "precision@5")
SUPPORT = ("faithfulness", "support", "citation_validity")
DEFAULT_RESAMPLES = 2_000
_RULE = re.compile(r"^\s*([A-Za-z0-9_@.:\-]+)\s*>=\s*([-+0-9.eE]+)\s*$")


@dataclass(frozen=True)
class CorrectRule:
    """``metric >= threshold`` turned into a 0/1 correctness; parsed from ``"answer_f1>=0.5"``.

    Correctness is a score in [0, 1] (answer_f1, answer_em, a judge's correctness), so the threshold must lie
    in (0, 1]: at 0 every answer is correct, above 1 none is. A metric whose stored values leave [0, 1]
    (context_tokens, a latency) is refused by :meth:`apply`.
    """

    metric: str
    threshold: float

    @classmethod
    def parse(cls, text: str) -> CorrectRule:
        m = _RULE.match(str(text))
        if not m:
            raise InputError(f"correctness rule {text!r} is not of the form METRIC>=THRESHOLD, e.g. answer_f1>=0.5")
        try:
            thr = float(m.group(2))
        except ValueError:
            raise InputError(f"correctness rule {text!r}: threshold {m.group(2)!r} is not a number") from None
        if not (math.isfinite(thr) and 0 < thr <= 1):
            raise InputError(f"correctness rule {text!r}: the threshold must be a number in (0, 1], since "
                             f"correctness is a score in [0, 1] (at 0 every answer counts as correct, above 1 "
                             f"none does); e.g. {m.group(1)}>=0.5")
        return cls(m.group(1), thr)

    def __str__(self) -> str:
        return f"{self.metric}>={self.threshold:g}"

    def apply(self, values: np.ndarray) -> np.ndarray:
        """1 where ``values >= threshold``, 0 below, NaN where undefined; values outside [0, 1] are refused."""
        seen = values[~np.isnan(values)]
        if seen.size and (seen.min() < 0 or seen.max() > 1):
            raise InputError(f"correctness rule {self}: {self.metric} is not a score in [0, 1] (stored values "
                             f"from {seen.min():g} to {seen.max():g}), so it cannot say whether an answer is "
                             f"correct; name a [0, 1] metric such as answer_f1>=0.5 or answer_em>=1 with --correct")
        with np.errstate(invalid="ignore"):
            return np.where(np.isnan(values), np.nan, (values >= self.threshold).astype(float))


@dataclass(frozen=True)
class QueryTable:
    """One run's rows as a (rows x metrics) matrix, one row per (query, trial), sorted by query then trial."""

    query_ids: np.ndarray
    trials: np.ndarray
    strata: np.ndarray
    metrics: tuple[str, ...]
    values: np.ndarray

    def col(self, metric: str) -> np.ndarray:
        return self.values[:, self.metrics.index(metric)] if metric in self.metrics else np.full(len(self.query_ids), np.nan)


def query_table(store: Store, run_ref: str, metrics) -> QueryTable:
    """Stored rows of ``metrics`` that the run has (others come back all-NaN through :meth:`QueryTable.col`)."""
    have = set(store.metrics(run_ref))
    names = tuple(m for m in dict.fromkeys(metrics) if m in have)
    if not names:
        raise InputError(f"run {run_ref!r} has none of the metrics {list(metrics)}; it cannot be analysed here")
    w = store.results_wide(run_ref, names)
    return QueryTable(w.query_ids, w.trials, w.strata, names, w.values)


def first_present(store: Store, run_ref: str, candidates) -> str | None:
    have = set(store.metrics(run_ref))
    return next((m for m in candidates if m in have), None)


def _units(query_ids: np.ndarray) -> np.ndarray:
    """One integer code per query, so trials of one query are one resampling unit."""
    return np.unique(query_ids.astype(str), return_inverse=True)[1].reshape(-1)


def _cell_sums(y: np.ndarray, h: np.ndarray, unit: np.ndarray, k: int) -> np.ndarray:
    """Per unit: [n, sum H, sum Y*H, sum Y*(1-H)], integers (so resampled sums are exact in float64)."""
    cols = np.stack([np.ones_like(y), h, y * h, y * (1 - h)], axis=1)
    out = np.zeros((k, 4))
    np.add.at(out, unit, cols)
    return out


def _abc(sums: np.ndarray) -> np.ndarray:
    """[A, h, c1, c0] from (..., 4) cell sums; an empty cell gives NaN for its conditional accuracy."""
    n, nh, yh, ym = (sums[..., i] for i in range(4))
    with np.errstate(invalid="ignore", divide="ignore"):
        a = (yh + ym) / n
        h = nh / n
        c1 = np.where(nh > 0, yh / np.where(nh > 0, nh, 1), np.nan)
        c0 = np.where(n - nh > 0, ym / np.where(n - nh > 0, n - nh, 1), np.nan)
    return np.stack([a, h, c1, c0], axis=-1)


def _resampled(unit_sums: np.ndarray, n_resamples: int, seed: int, chunk: int = 500):
    """Yield the resampled totals of the (units x cols) integer cell sums, one draw of units per resample.

    Chunks hold at most about 32 MB of draws (the generator's stream does not depend on how it is split,
    so the draws are the same); the totals equal ``resample_counts(...) @ unit_sums`` exactly (integers)."""
    rng = np.random.default_rng(seed)
    k = unit_sums.shape[0]
    chunk = max(1, min(chunk, 4_000_000 // max(k, 1)))
    for start in range(0, n_resamples, chunk):
        yield resampled_sums(rng, unit_sums, min(chunk, n_resamples - start))


def _ci(draws: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval per column ignoring resamples where the statistic was undefined."""
    a = (1 - confidence) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column is an undefined interval
        lo = np.nanquantile(draws, a, axis=0)
        hi = np.nanquantile(draws, 1 - a, axis=0)
    return lo, hi


def _stat(value: float, lo: float, hi: float, n: int) -> dict:
    defined = not math.isnan(value)
    return {"value": value if defined else None, "ci_low": lo if defined else None,
            "ci_high": hi if defined else None, "n": int(n), "defined": defined}


def decompose(y, h, query_ids, *, n_resamples: int = DEFAULT_RESAMPLES, confidence: float = 0.95,
              seed: int = 0) -> dict:
    """A, h, c1, c0 with percentile bootstrap intervals from per-row correctness ``y`` and delivery ``h``
    (0/1 arrays; rows where either is NaN are left out and counted). Rows of one query id resample together."""
    y = np.asarray(y, dtype=float)
    h = np.asarray(h, dtype=float)
    qids = np.asarray(query_ids, dtype=object)
    if not (y.shape == h.shape == qids.shape):
        raise InputError("decompose: y, h and query_ids need one entry per row")
    ok = ~(np.isnan(y) | np.isnan(h))
    for name, v in (("y", y[ok]), ("h", h[ok])):
        if not np.isin(v, (0.0, 1.0)).all():
            raise InputError(f"decompose: {name} must be 0/1 (or NaN for undefined)")
    out = {"n": int(ok.sum()), "n_excluded": int((~ok).sum()), "n_hit": int(h[ok].sum()),
           "n_miss": int(ok.sum() - h[ok].sum())}
    names = ("A", "h", "c1", "c0")
    if not ok.any():
        return {**out, **{k: _stat(float("nan"), 0, 0, 0) for k in names}}
    unit = _units(qids[ok])
    k = int(unit.max()) + 1
    sums = _cell_sums(y[ok], h[ok], unit, k)
    point = _abc(sums.sum(axis=0))
    draws = np.concatenate([_abc(t) for t in _resampled(sums, n_resamples, seed)]) if k > 1 else None
    lo, hi = _ci(draws, confidence) if draws is not None else (np.full(4, np.nan), np.full(4, np.nan))
    counts = {"A": out["n"], "h": out["n"], "c1": out["n_hit"], "c0": out["n_miss"]}
    for j, name in enumerate(names):
        out[name] = _stat(float(point[j]), float(lo[j]), float(hi[j]), counts[name])
    return out


def split_change(ya, ha, yb, hb, query_ids, *, n_resamples: int = DEFAULT_RESAMPLES, confidence: float = 0.95,
                 seed: int = 0) -> dict:
    """The change A_b - A_a split into delivery and use terms (module docstring), with paired bootstrap
    intervals: the same queries are drawn for both runs. Rows with any NaN are left out of both runs.
    A term is undefined when a cell (hit or miss) is empty in either run."""
    return _paired_split(ya, ha, yb, hb, query_ids, n_resamples=n_resamples, confidence=confidence,
                         seed=seed)[2]


def _terms(ta: np.ndarray, tb: np.ndarray) -> np.ndarray:
    """[delta_A, delivery, use] from the two runs' (..., 4) cell sums."""
    a, b = _abc(ta), _abc(tb)
    hm = (a[..., 1] + b[..., 1]) / 2
    um = ((a[..., 2] - a[..., 3]) + (b[..., 2] - b[..., 3])) / 2
    delivery = um * (b[..., 1] - a[..., 1])
    use = hm * (b[..., 2] - a[..., 2]) + (1 - hm) * (b[..., 3] - a[..., 3])
    return np.stack([b[..., 0] - a[..., 0], delivery, use], axis=-1)


def _paired_split(ya, ha, yb, hb, query_ids, *, n_resamples: int, confidence: float, seed: int):
    """(decomposition of A, of B, split of the change) on the rows where all four are defined.

    All three come from one draw of resample counts: each resample's counts multiply both runs' unit cell
    sums at once (a (resamples x units) by (units x 8) product), so the three intervals cost one bootstrap.
    Each equals what :func:`decompose` and :func:`split_change` give alone with the same seed, since they
    draw the same counts for the same units."""
    arrs = [np.asarray(x, dtype=float) for x in (ya, ha, yb, hb)]
    qids = np.asarray(query_ids, dtype=object)
    ok = ~np.any([np.isnan(x) for x in arrs], axis=0)
    n = int(ok.sum())
    change = {"n": n, "n_excluded": int((~ok).sum())}
    sides = [{"n": n, "n_excluded": 0, "n_hit": int(h[ok].sum()), "n_miss": int(n - h[ok].sum())}
             for h in (arrs[1], arrs[3])]
    abc_names, change_names = ("A", "h", "c1", "c0"), ("delta_A", "delivery", "use")
    if n == 0:
        for side in sides:
            side.update({k: _stat(float("nan"), 0, 0, 0) for k in abc_names})
        change.update({k: _stat(float("nan"), 0, 0, 0) for k in change_names})
        return sides[0], sides[1], change
    unit = _units(qids[ok])
    k = int(unit.max()) + 1
    sa = _cell_sums(arrs[0][ok], arrs[1][ok], unit, k)
    sb = _cell_sums(arrs[2][ok], arrs[3][ok], unit, k)
    both = np.concatenate([sa, sb], axis=1)
    ta, tb = sa.sum(axis=0), sb.sum(axis=0)
    points = [_abc(ta), _abc(tb), _terms(ta, tb)]
    if k > 1:
        drawn = np.concatenate(list(_resampled(both, n_resamples, seed)))
        da, db = drawn[:, :4], drawn[:, 4:]
        bounds = [_ci(x, confidence) for x in (_abc(da), _abc(db), _terms(da, db))]
    else:
        bounds = [(np.full(len(p), np.nan), np.full(len(p), np.nan)) for p in points]
    for side, point, (lo, hi) in zip(sides, points[:2], bounds[:2], strict=True):
        counts = {"A": n, "h": n, "c1": side["n_hit"], "c0": side["n_miss"]}
        for j, name in enumerate(abc_names):
            side[name] = _stat(float(point[j]), float(lo[j]), float(hi[j]), counts[name])
    lo, hi = bounds[2]
    for j, name in enumerate(change_names):
        change[name] = _stat(float(points[2][j]), float(lo[j]), float(hi[j]), n)
    return sides[0], sides[1], change


def _stage_columns(store: Store, run_ref: str, tab: QueryTable, rows: np.ndarray, confidence: float,
                   n_resamples: int, seed: int) -> dict:
    """Mean and CI of each stage figure over ``rows``, with the metric that stood in for it."""
    sources = {"candidate_recall": CANDIDATE_RECALL, "complete_evidence": None,
               "context_relevance": first_present(store, run_ref, CONTEXT_RELEVANCE),
               "support": first_present(store, run_ref, SUPPORT)}
    cols, names = [], []
    for name, metric in sources.items():
        if name == "complete_evidence":
            v = tab.col(DELIVERY_METRIC)
            with np.errstate(invalid="ignore"):
                v = np.where(np.isnan(v), np.nan, (v >= 1.0).astype(float))
        else:
            v = tab.col(metric) if metric else np.full(len(tab.query_ids), np.nan)
        cols.append(v[rows])
        names.append(name)
    sources["complete_evidence"] = f"{DELIVERY_METRIC}==1"
    out = {}
    if rows.sum() == 0:
        return {n: {"source": sources[n], **_stat(float("nan"), 0, 0, 0)} for n in names}
    boot = bootstrap_deltas(np.stack(cols, axis=1), metrics=names, clusters=tab.query_ids[rows],
                            n_resamples=n_resamples, confidence=confidence, seed=seed)
    for r in boot:
        v = r.delta
        out[r.metric] = {"source": sources[r.metric], **_stat(v, r.ci_low, r.ci_high, r.n)}
    return out


def _check_resampling(n_resamples: int, confidence: float, seed: int) -> None:
    """The bootstrap settings every public analysis here takes, checked before any work (one clear error)."""
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or not 100 <= n_resamples <= 1_000_000:
        raise InputError(f"n_resamples must be an integer between 100 and 1,000,000, got {n_resamples!r}")
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0 < confidence < 1:
        raise InputError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed must be an integer >= 0, got {seed!r}")


def decomposition_of_run(store: Store, run_ref: str, *, correct: str = DEFAULT_CORRECT, by_stratum: bool = True,
                         n_resamples: int = DEFAULT_RESAMPLES, confidence: float = 0.95, seed: int = 0,
                         stages: bool = True) -> dict:
    """One run's decomposition overall and per stratum, beside the separate stage columns (``stages=False``
    leaves them out: each costs a bootstrap of its own, and the report does not show them)."""
    _check_resampling(n_resamples, confidence, seed)
    rule = CorrectRule.parse(correct)
    run = store.get_run(run_ref)
    need = [rule.metric, DELIVERY_METRIC, *((CANDIDATE_RECALL, *CONTEXT_RELEVANCE, *SUPPORT) if stages else ())]
    tab = query_table(store, run.run_id, need)
    if rule.metric not in tab.metrics:
        raise InputError(f"run {run.name!r} has no {rule.metric!r} rows; name another correctness metric with "
                         f"--correct METRIC>=THRESHOLD (it has {store.metrics(run.run_id)})")
    y = rule.apply(tab.col(rule.metric))
    hv = tab.col(DELIVERY_METRIC)
    with np.errstate(invalid="ignore"):
        h = np.where(np.isnan(hv), np.nan, (hv >= 1.0).astype(float))
    strata = np.asarray([s if s is not None else "(none)" for s in tab.strata], dtype=object)
    groups = [("all", np.ones(len(y), dtype=bool))]
    if by_stratum:
        groups += [(s, strata == s) for s in sorted(set(strata.tolist()))]
    rows = []
    for name, mask in groups:
        d = decompose(y[mask], h[mask], tab.query_ids[mask], n_resamples=n_resamples, confidence=confidence,
                      seed=seed)
        eligible = mask & ~np.isnan(y)
        if stages:
            d["stages"] = _stage_columns(store, run.run_id, tab, mask, confidence, n_resamples, seed)
            d["stages"]["correctness"] = {"source": str(rule), **d["A"]}
        d["n_correct_defined"] = int(eligible.sum())
        rows.append({"stratum": name, **d})
    return {"run": {"run_id": run.run_id, "name": run.name}, "correct_rule": str(rule),
            "delivery_rule": f"{DELIVERY_METRIC}==1", "confidence": confidence, "n_resamples": n_resamples,
            "seed": seed, "rows": rows}


def _paired(store: Store, run_a: str, run_b: str, rule: CorrectRule):
    ta = query_table(store, run_a, [rule.metric, DELIVERY_METRIC])
    tb = query_table(store, run_b, [rule.metric, DELIVERY_METRIC])
    ka = {(q, int(t)): i for i, (q, t) in enumerate(zip(ta.query_ids, ta.trials, strict=True))}
    idx_a, idx_b = [], []
    for j, key in enumerate(zip(tb.query_ids, tb.trials, strict=True)):
        i = ka.get((key[0], int(key[1])))
        if i is not None:
            idx_a.append(i)
            idx_b.append(j)
    if not idx_a:
        raise InputError(f"runs {run_a!r} and {run_b!r} share no (query, trial); they cannot be paired")
    ia, ib = np.asarray(idx_a), np.asarray(idx_b)

    def yh(t: QueryTable, ix: np.ndarray):
        hv = t.col(DELIVERY_METRIC)[ix]
        with np.errstate(invalid="ignore"):
            return rule.apply(t.col(rule.metric)[ix]), np.where(np.isnan(hv), np.nan, (hv >= 1.0).astype(float))

    ya, ha = yh(ta, ia)
    yb, hb = yh(tb, ib)
    strata = np.asarray([s if s is not None else "(none)" for s in ta.strata[ia]], dtype=object)
    return ta.query_ids[ia], strata, ya, ha, yb, hb


def decomposition_between(store: Store, run_a: str, run_b: str, *, correct: str = DEFAULT_CORRECT,
                          by_stratum: bool = True, n_resamples: int = DEFAULT_RESAMPLES, confidence: float = 0.95,
                          seed: int = 0, rebaseline: bool = False) -> dict:
    """Paired change in accuracy from run A to run B split into delivery and use terms, overall and per
    stratum, with both runs' own decompositions on the paired rows. Runs with differing pins are refused
    unless ``rebaseline`` (:func:`comparable_runs`)."""
    _check_resampling(n_resamples, confidence, seed)
    rule = CorrectRule.parse(correct)
    (ra, rb), diffs = comparable_runs(store, [run_a, run_b], [rule.metric, DELIVERY_METRIC], rebaseline=rebaseline)
    for r in (ra, rb):
        if rule.metric not in store.metrics(r.run_id):
            raise InputError(f"run {r.name!r} has no {rule.metric!r} rows; pick a correctness metric both runs "
                             f"have with --correct METRIC>=THRESHOLD")
    qids, strata, ya, ha, yb, hb = _paired(store, ra.run_id, rb.run_id, rule)
    groups = [("all", np.ones(len(qids), dtype=bool))]
    if by_stratum:
        groups += [(s, strata == s) for s in sorted(set(strata.tolist()))]
    kw = {"n_resamples": n_resamples, "confidence": confidence, "seed": seed}
    rows = []
    for name, m in groups:
        a, b, change = _paired_split(ya[m], ha[m], yb[m], hb[m], qids[m], **kw)
        rows.append({"stratum": name, "a": a, "b": b, "change": change})
    return {"run_a": {"run_id": ra.run_id, "name": ra.name}, "run_b": {"run_id": rb.run_id, "name": rb.name},
            "correct_rule": str(rule), "delivery_rule": f"{DELIVERY_METRIC}==1", "confidence": confidence,
            "n_resamples": n_resamples, "seed": seed, "rebaselined": bool(diffs), "pin_differences": diffs,
            "rows": rows}


LADDER_METRICS = ("recall@fusion_depth", "ndcg@final_k", "recall@context")


def _is_oracle(run) -> bool:
    return bool((run.config or {}).get("oracle"))


def oracle_ladder(store: Store, run_refs, *, correct: str = DEFAULT_CORRECT, oracle: str | None = None,
                  quality_bar: float = 0.5, recall_bar: float = 0.8, ndcg_bar: float = 0.5,
                  n_resamples: int = DEFAULT_RESAMPLES, confidence: float = 0.95, seed: int = 0,
                  rebaseline: bool = False) -> dict:
    """The §8.4 ladder over stored runs: each rung's stage means with intervals, and the oracle-minus-pipeline
    gap in correctness with a paired interval.

    The oracle rung is ``oracle`` (which must be an oracle-context run: its config says ``oracle: true``) or
    the one run whose config says so. The rungs must be comparable (:func:`comparable_runs`; ``rebaseline``
    lets differing pins through). Verdict rules, in order:
    oracle correctness CI entirely below ``quality_bar`` -> generation; no credible oracle gap for the best
    pipeline -> neither dominates; best pipeline's recall@fusion_depth below ``recall_bar`` -> candidate
    generation; its ndcg@final_k below ``ndcg_bar`` -> reranker or fusion depth; else context assembly or
    generation. The bars are declared options, recorded in the output.
    """
    _check_resampling(n_resamples, confidence, seed)
    rule = CorrectRule.parse(correct)
    refs = list(run_refs)
    if oracle is not None:
        orc = store.get_run(oracle)
        if not _is_oracle(orc):
            raise InputError(f"--oracle {oracle}: run {orc.name!r} is not an oracle-context run (its config does "
                             f"not say oracle: true), so it cannot stand for the golden evidence handed to the "
                             f"generator; make one with `ragassay run` on a config with `oracle: true` (the bundled "
                             f"oracle.yaml), or leave --oracle out")
        refs = [r for r in refs if store.get_run(r).run_id != orc.run_id] + [orc.run_id]
    runs, diffs = comparable_runs(store, refs, [rule.metric, *LADDER_METRICS], rebaseline=rebaseline)
    if oracle is not None:
        orc = runs[-1]
    else:
        found = [r for r in runs if _is_oracle(r)]
        if len(found) > 1:
            raise InputError(f"several oracle runs ({[r.name for r in found]}); name one with --oracle")
        orc = found[0] if found else None
    rungs = []
    for r in runs:
        tab = query_table(store, r.run_id, [rule.metric, *LADDER_METRICS])
        if rule.metric not in tab.metrics:
            raise InputError(f"run {r.name!r} has no {rule.metric!r} rows; name a correctness metric every rung "
                             f"has with --correct METRIC>=THRESHOLD (it has {store.metrics(r.run_id)})")
        y = rule.apply(tab.col(rule.metric))
        cols = [tab.col(m) for m in LADDER_METRICS] + [y]
        names = [*LADDER_METRICS, "correct"]
        boot = bootstrap_deltas(np.stack(cols, axis=1), metrics=names, clusters=tab.query_ids,
                                n_resamples=n_resamples, confidence=confidence, seed=seed)
        rungs.append({"run_id": r.run_id, "name": r.name, "oracle": orc is not None and r.run_id == orc.run_id,
                      **{b.metric: _stat(b.delta, b.ci_low, b.ci_high, b.n) for b in boot}})
    out = {"correct_rule": str(rule), "bars": {"quality": quality_bar, "recall@fusion_depth": recall_bar,
                                               "ndcg@final_k": ndcg_bar},
           "confidence": confidence, "rebaselined": bool(diffs), "pin_differences": diffs, "rungs": rungs}
    pipes = [g for g in rungs if not g["oracle"] and g["correct"]["defined"]]
    if orc is None or not pipes:
        out["diagnosis"] = "no oracle rung (or no pipeline rung): cannot separate retrieval from generation"
        out["fault"] = "undetermined"
        return out
    o = next(g for g in rungs if g["oracle"])
    best = max(pipes, key=lambda g: g["correct"]["value"])
    gap = _gap(store, orc.run_id, best["run_id"], rule, n_resamples, confidence, seed)
    out["best_pipeline"] = best["name"]
    out["oracle_gap"] = gap
    oc = o["correct"]
    if oc["defined"] and oc["ci_high"] is not None and oc["ci_high"] < quality_bar:
        fault, why = "generation", (f"even with the golden evidence handed to it the share correct is "
                                    f"{oc['value']:.2f} (CI up to {oc['ci_high']:.2f}, below {quality_bar:g})")
    elif not gap["defined"] or gap["ci_low"] is None or gap["ci_low"] <= 0:
        fault, why = "neither", (f"the best pipeline ({best['name']}) is not credibly below the oracle rung")
    elif _below(best["recall@fusion_depth"], recall_bar):
        fault, why = "candidate_generation", (f"oracle beats {best['name']} by {gap['value']:.2f} and its "
                                              f"recall@fusion_depth is {best['recall@fusion_depth']['value']:.2f}")
    elif _below(best["ndcg@final_k"], ndcg_bar):
        fault, why = "reranker_or_fusion_depth", (f"candidates are found (recall@fusion_depth ok) but ndcg@final_k "
                                                  f"is {best['ndcg@final_k']['value']:.2f}")
    else:
        fault, why = "context_assembly_or_generation", "everything upstream looks fine, answers still trail the oracle"
    out["fault"] = fault
    out["diagnosis"] = f"{fault.replace('_', ' ')}: {why}"
    return out


def _below(stat: dict, bar: float) -> bool:
    return bool(stat["defined"] and stat["value"] < bar)


def _gap(store: Store, oracle_id: str, pipe_id: str, rule: CorrectRule, n_resamples: int, confidence: float,
         seed: int) -> dict:
    qids, _, yp, _, yo, _ = _paired(store, pipe_id, oracle_id, rule)
    d = yo - yp
    boot = bootstrap_deltas(d, metrics=["gap"], clusters=qids, n_resamples=n_resamples, confidence=confidence,
                            seed=seed)["gap"]
    return _stat(boot.delta, boot.ci_low, boot.ci_high, boot.n)


def decomposition_report_section(store: Store, run_refs, *, baseline: str | None = None,
                                 correct: str = DEFAULT_CORRECT, n_resamples: int = DEFAULT_RESAMPLES,
                                 seed: int = 0, rebaseline: bool = False) -> dict:
    """Report data: each run's decomposition, each run's change from ``baseline`` (default: the first run),
    and the oracle ladder. JSON-serializable (undefined values are None). Runs with differing pins are
    refused unless ``rebaseline``."""
    refs = list(run_refs)
    if not refs:
        raise InputError("decomposition_report_section needs at least one run")
    base = baseline or refs[0]
    kw = {"correct": correct, "n_resamples": n_resamples, "seed": seed}
    return {"kind": "decomposition",
            "runs": [decomposition_of_run(store, r, **kw) for r in refs],
            "changes": [decomposition_between(store, base, r, rebaseline=rebaseline, **kw) for r in refs
                        if store.get_run(r).run_id != store.get_run(base).run_id],
            "ladder": oracle_ladder(store, refs, rebaseline=rebaseline, **kw)}
