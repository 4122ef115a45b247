"""How alive a golden set is: saturation and headroom per stratum, CI tiers, and rot against a corpus.

Pure functions over per-run score matrices aligned to the golden set (spec §3.8 rot, §13.6 saturation,
§14.1 tiers, §15.4 "retire saturated items to smoke"); :mod:`ragassay.analysis.golden_status` reads them
from a store. An item's value in a run is the mean of its defined trials (NaN: undefined or not scored).

Rules (``docs/labels.md``, "Golden status"):

- an item *passes* a run when every metric defined for it is ``>= threshold``; it *fails* when one is below;
  with no defined metric it is *undefined* (neither);
- a stratum is *saturated* on a metric when, for every configuration (its latest run), the mean over the
  stratum's defined items is ``>= threshold`` and its saturation bound (:func:`saturation_bound`: the
  smaller of the two-sided 95% t interval's lower end and ``mean * 0.025 ** (1 / n)``) is ``>= ci_floor``.
  The t interval alone collapses to the mean when every item scores the same (two perfect items would be
  "saturated"); the second term is the exact (Clopper–Pearson) lower bound on a share when all n items
  succeed, scaled by the mean, so a stratum needs ``ceil(ln 0.025 / ln ci_floor)`` items (36 at 0.90)
  before it can be called saturated, however perfect its scores. It is *not saturated*
  when some configuration's mean or bound is below; *undefined* (None) otherwise, i.e. when some
  configuration has fewer than two defined items there;
- an item is *stable* when every configuration's latest run passes it and no stored run failed it;
- an item *flipped* when it passed in one stored run and failed in another;
- tiers: ``smoke`` is a stratified sample of stable items (they every configuration passes, so a failure is
  a regression, never noise); ``regression`` is every item that is not stable (failed, flipped or
  undefined); ``full`` is every item. Stable items not drawn for smoke are retired to ``full`` only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from ragassay.errors import InputError
from ragassay.golden.resolve import resolve_quote
from ragassay.golden.set import GoldenSet

CONFIDENCE = 0.95
DEFAULT_THRESHOLD = 0.95
DEFAULT_CI_FLOOR = 0.90
DEFAULT_SMOKE_SIZE = 25

PASS, FAIL, UNDEFINED = 1, 0, -1


@dataclass(frozen=True)
class RunScores:
    """One stored run, aligned to the golden set's query order.

    ``values`` is (n_queries, n_metrics): each item's mean over its defined trials, NaN when undefined or not
    scored; ``latency_ms`` is (n_queries,): the mean over trials of the item's end-to-end latency, NaN when
    unknown. Runs are given oldest first."""

    run_id: str
    name: str
    config_sha: str
    created_at: str | None
    values: np.ndarray
    latency_ms: np.ndarray


@dataclass(frozen=True)
class StatusOptions:
    threshold: float = DEFAULT_THRESHOLD
    ci_floor: float = DEFAULT_CI_FLOOR
    smoke_size: int = DEFAULT_SMOKE_SIZE
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("threshold", "ci_floor"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0 or v != v:
                raise InputError(f"--{name.replace('_', '-')} {v}: give a score between 0 and 1")
        if self.smoke_size < 0:
            raise InputError(f"--smoke-size {self.smoke_size}: give a number of items >= 0")


def mean_lower_bound(values: np.ndarray) -> tuple[float, float, int]:
    """(mean, lower bound of the two-sided 95% t interval, n) over the defined (non-NaN) ``values``.

    mean - t(0.975, n-1) * s / sqrt(n) with s the ddof-1 standard deviation; s = 0 gives the mean itself.
    Mean is NaN for n = 0, the bound NaN for n < 2 (one value bounds nothing)."""
    v = values[~np.isnan(values)]
    n = int(v.size)
    if n == 0:
        return float("nan"), float("nan"), 0
    mean = float(v.mean())
    if n < 2:
        return mean, float("nan"), n
    sd = float(v.std(ddof=1))
    q = float(sps.t.ppf(0.5 + CONFIDENCE / 2, n - 1))
    return mean, mean - q * sd / np.sqrt(n), n


def saturation_bound(values: np.ndarray) -> tuple[float, float, int]:
    """(mean, saturation bound, n) over the defined ``values`` (scores in [0, 1]): the bound is
    ``min(t_low, mean * (alpha/2) ** (1/n))`` with ``t_low`` from :func:`mean_lower_bound` and alpha = 0.05.

    ``(alpha/2) ** (1/n)`` is the one-sided 97.5% Clopper–Pearson lower bound on a success probability when
    n of n trials succeed: n items, however alike, cannot show a stratum is at its ceiling with more
    confidence than that. NaN for n < 2, as the t bound."""
    mean, low, n = mean_lower_bound(values)
    if n < 2:
        return mean, low, n
    return mean, min(low, mean * ((1 - CONFIDENCE) / 2) ** (1 / n)), n


def pass_status(values: np.ndarray, threshold: float) -> np.ndarray:
    """Per row of (n_items, n_metrics) ``values``: PASS when every defined value is >= threshold, FAIL when
    one is below, UNDEFINED when none is defined."""
    defined = ~np.isnan(values)
    below = np.any(defined & (np.nan_to_num(values, nan=np.inf) < threshold), axis=1)
    out = np.where(below, FAIL, PASS)
    return np.where(defined.any(axis=1), out, UNDEFINED)


def _latest_per_config(runs: Sequence[RunScores]) -> list[RunScores]:
    latest: dict[str, RunScores] = {}
    for r in runs:
        latest.pop(r.config_sha, None)  # re-insert so the dict keeps configurations in order of their latest run
        latest[r.config_sha] = r
    return list(latest.values())


def _saturated(cells: list[dict], opt: StatusOptions) -> bool | None:
    """False when a configuration's mean or bound is below the rule; None when one is undefined; else True."""
    if any((c["mean"] == c["mean"] and c["mean"] < opt.threshold)
           or (c["ci_low"] == c["ci_low"] and c["ci_low"] < opt.ci_floor) for c in cells):
        return False
    if any(c["ci_low"] != c["ci_low"] for c in cells):
        return None
    return True


def _nan_or(x: float) -> float | None:
    return None if x != x else float(x)


def _sample_key(seed: int, query_id: str) -> str:
    return hashlib.sha256(f"{seed}:{query_id}".encode()).hexdigest()


def smoke_sample(candidates: dict[str, list[str]], size: int, seed: int) -> list[str]:
    """A stratified sample of at most ``size`` items from ``candidates`` (stratum -> query ids).

    Within a stratum items are ranked by sha256("<seed>:<query_id>") (stable when items are added). One item
    of each stratum is drawn first (strata with more candidates first), then the rest in order of
    (rank + 1/2) / n_stratum, so each stratum's share follows its share of the candidates."""
    keyed = []
    for stratum, qids in candidates.items():
        n = len(qids)
        for rank, q in enumerate(sorted(qids, key=lambda q: _sample_key(seed, q))):
            keyed.append(((rank > 0, (rank + 0.5) / n, _sample_key(seed, q)), stratum, q))
    keyed.sort(key=lambda k: k[0])
    return [q for _, _, q in keyed[:size]]


def _tier(qids: list[str], index: dict[str, int], latency: np.ndarray) -> dict:
    """A tier's ids and its expected time: n_items x the mean known per-item latency (None when none is
    known), with the count of items whose latency is unknown."""
    lat = latency[[index[q] for q in qids]] if qids else np.empty(0)
    known = lat[~np.isnan(lat)]
    expected = float(known.mean() * len(qids)) if known.size else (0.0 if not qids else None)
    return {"n": len(qids), "expected_ms": expected, "n_latency_unknown": int(lat.size - known.size),
            "query_ids": qids}


def golden_status(golden: GoldenSet, runs: Sequence[RunScores], metrics: Sequence[str],
                  opt: StatusOptions | None = None) -> dict:
    """Per stratum and metric: best and latest score, headroom (1 - score), saturation; per item: passed by
    every configuration, flipped, undefined; and the three tiers. See the module docstring for the rules."""
    opt = opt or StatusOptions()
    if not runs:
        raise InputError("no runs to summarize; score a run of this golden set first (`ragassay run`)")
    n, m = len(golden), len(metrics)
    for r in runs:
        if r.values.shape != (n, m) or r.latency_ms.shape != (n,):
            raise InputError(f"run {r.name}: scores of shape {r.values.shape} do not match {n} queries x "
                             f"{m} metrics")
    qids = golden.query_ids
    index = {q: i for i, q in enumerate(qids)}
    strata = np.asarray([q.stratum for q in golden.queries], dtype=object)
    configs = _latest_per_config(runs)
    latest = runs[-1]

    status = np.stack([pass_status(r.values, opt.threshold) for r in runs])  # (runs, items)
    latest_status = np.stack([pass_status(r.values, opt.threshold) for r in configs])
    passed_by_all = np.all(latest_status == PASS, axis=0)
    flipped = np.any(status == PASS, axis=0) & np.any(status == FAIL, axis=0)
    stable = passed_by_all & ~np.any(status == FAIL, axis=0)
    undefined = np.any(latest_status == UNDEFINED, axis=0)

    out_strata = []
    for s in sorted(set(strata)):
        rows = np.flatnonzero(strata == s)
        per_metric = {}
        for j, metric in enumerate(metrics):
            cells = []
            for r in configs:
                mean, low, k = saturation_bound(r.values[rows, j])
                cells.append({"run": r.name, "run_id": r.run_id, "config_sha": r.config_sha, "mean": mean,
                              "ci_low": low, "n_defined": k, "n_undefined": int(rows.size - k)})
            defined = [c for c in cells if c["mean"] == c["mean"]]
            best = max(defined, key=lambda c: c["mean"]) if defined else None
            last = next(c for c in cells if c["run_id"] == latest.run_id)
            per_metric[metric] = {
                "best": _nan_or(best["mean"]) if best else None,
                "best_run": best["run"] if best else None,
                "headroom_best": _nan_or(1.0 - best["mean"]) if best else None,
                "latest": _nan_or(last["mean"]),
                "headroom_latest": _nan_or(1.0 - last["mean"]),
                "saturated": _saturated(cells, opt),
                "configs": [{**c, "mean": _nan_or(c["mean"]), "ci_low": _nan_or(c["ci_low"])} for c in cells],
            }
        out_strata.append({
            "stratum": s, "n_items": int(rows.size), "metrics": per_metric,
            "saturated": _all_saturated([v["saturated"] for v in per_metric.values()]),
            "passed_by_all": [qids[i] for i in rows if passed_by_all[i]],
            "n_undefined_items": int(undefined[rows].sum()),
        })

    lat = np.stack([r.latency_ms for r in runs])
    known = (~np.isnan(lat)).sum(axis=0)
    latency = np.where(known > 0, np.nansum(lat, axis=0) / np.maximum(known, 1), np.nan)
    candidates: dict[str, list[str]] = {}
    for i in np.flatnonzero(stable):
        candidates.setdefault(strata[i], []).append(qids[i])
    smoke = set(smoke_sample(candidates, opt.smoke_size, opt.seed))
    tiers = {
        "smoke": _tier([q for q in qids if q in smoke], index, latency),
        "regression": _tier([qids[i] for i in range(n) if not stable[i]], index, latency),
        "full": _tier(list(qids), index, latency),
    }
    return {
        "dataset_version": golden.dataset_version,
        "metrics": list(metrics),
        "rule": {"threshold": opt.threshold, "ci_floor": opt.ci_floor, "confidence": CONFIDENCE,
                 "smoke_size": opt.smoke_size, "seed": opt.seed},
        "runs": [{"run_id": r.run_id, "name": r.name, "config_sha": r.config_sha, "created_at": r.created_at}
                 for r in runs],
        "configs": [r.name for r in configs],
        "latest_run": latest.name,
        "strata": out_strata,
        "saturated_strata": [s["stratum"] for s in out_strata if s["saturated"]],
        "items": {
            "n": n,
            "passed_by_all": int(passed_by_all.sum()),
            "stable": int(stable.sum()),
            "flipped": [qids[i] for i in np.flatnonzero(flipped)],
            "undefined": [qids[i] for i in np.flatnonzero(undefined)],
        },
        "tiers": tiers,
    }


def _all_saturated(flags: list[bool | None]) -> bool | None:
    if any(f is False for f in flags):
        return False
    return None if any(f is None for f in flags) else True


def golden_rot(golden: GoldenSet, corpus) -> dict:
    """Evidence spans of ``golden`` that no longer hold their quote in ``corpus`` (spec §3.8, corpus drift).

    A span still resolves when its document exists and one occurrence of its quote (resolved as the
    builder does) is exactly the stored ``[start, end)``. Otherwise its reason is ``document removed``,
    ``quote not found`` (re-author the item) or ``quote moved`` (found elsewhere: rebuilding fixes it).
    A corpus whose digest is the set's own cannot have rotted, and is not searched."""
    changed = corpus.digest != golden.manifest.get("corpus_digest")
    rotted: list[dict] = []
    if changed:
        for q in golden.queries:
            for e in q.evidence:
                reason = _evidence_rot(corpus, e)
                if reason:
                    rotted.append({"query_id": q.query_id, "stratum": q.stratum, "doc_id": e.doc_id,
                                   "start": e.start, "end": e.end, "reason": reason})
    order = {q: i for i, q in enumerate(golden.query_ids)}
    items = sorted({r["query_id"] for r in rotted}, key=order.__getitem__)
    return {"corpus_digest": corpus.digest, "golden_corpus_digest": golden.manifest.get("corpus_digest"),
            "corpus_changed": changed, "n_items": len(items), "items": items, "evidence": rotted,
            "docs": sorted({r["doc_id"] for r in rotted})}


def _evidence_rot(corpus, e) -> str | None:
    if e.doc_id not in corpus:
        return "document removed"
    text = corpus[e.doc_id].text
    res = resolve_quote(text, e.quote)
    if not res.offsets:
        return "quote not found"
    for k, start in enumerate(res.offsets, 1):
        if start == e.start:
            hit = res if res.n_found == 1 else resolve_quote(text, e.quote, occurrence=k)
            if hit.end == e.end:
                return None
    return f"quote moved (now at offset {res.offsets[0]}, was {e.start})"
