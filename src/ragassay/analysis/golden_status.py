"""``ragassay golden status`` over a store: pick the runs of one golden version, read their scores, and
hand them to :func:`ragassay.golden.status.golden_status`.

Runs of another dataset version, runs not finished (``running`` or ``failed``) and runs without rows for
a requested metric (the demo's ``oracle`` has no ranking metrics) are left out and counted; named with
``--runs`` they are refused, one line each. A metric must be a score in [0, 1] where higher is better
(headroom is 1 - score).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow.compute as pc

from ragassay.analysis.directions import higher_is_better
from ragassay.errors import InputError
from ragassay.golden.set import GoldenSet
from ragassay.golden.status import RunScores, StatusOptions, golden_status
from ragassay.store import RunRecord, Store

DEFAULT_METRICS = ("recall@10",)


def select_runs(store: Store, golden: GoldenSet, refs: Sequence[str] | None, metrics: Sequence[str]
                ) -> tuple[list[RunRecord], dict]:
    """The complete runs of ``golden``'s version that hold every metric, oldest first, and the runs left
    out by reason (``other_version``, ``unfinished``, ``missing_metric``).

    With ``refs`` only those runs; one that would be left out is refused instead (InputError, one line
    each), since the user asked for it by name."""
    version = golden.dataset_version
    if refs:
        chosen = {r.run_id: r for r in (store.get_run(ref) for ref in refs)}
        picked = sorted(chosen.values(), key=lambda r: r.run_id)
    else:
        picked = store.list_runs()
    keep: list[RunRecord] = []
    left: dict[str, list[tuple[RunRecord, str]]] = {"other_version": [], "unfinished": [], "missing_metric": []}
    available: set[str] = set()
    for r in picked:
        if r.dataset_version != version:
            left["other_version"].append((r, f"is of golden version {r.dataset_version!r}, not {version!r}; "
                                             "pass the golden set it was scored on"))
            continue
        if r.status != "complete":
            left["unfinished"].append((r, f"is {r.status}, not complete; finish it first"))
            continue
        have = set(store.metrics(r.run_id))
        available |= have
        missing = [m for m in metrics if m not in have]
        if missing:
            left["missing_metric"].append((r, f"has no rows for {', '.join(missing)}"))
            continue
        keep.append(r)
    if refs and any(left.values()):
        raise InputError("\n".join(f"run {r.name} ({r.run_id}) {why}; drop it from --runs"
                                    for rows in left.values() for r, why in rows))
    if not keep:
        counts = ", ".join(f"{len(v)} {k.replace('_', ' ')}" for k, v in left.items())
        hint = ("score one with `ragassay run CONFIG --golden G` first" if not available else
                f"pass --metric among {', '.join(sorted(available)[:12])}{', ...' if len(available) > 12 else ''}")
        raise InputError(f"{store.path}: no complete run of golden version {version!r} holds "
                         f"{', '.join(metrics)} (runs left out: {counts}); {hint}")
    return keep, {k: [r.name for r, _ in v] for k, v in left.items()}


def _check_metrics(metrics: Sequence[str]) -> None:
    lower = [m for m in metrics if not higher_is_better(m)]
    if lower:
        raise InputError("\n".join(f"metric {m}: lower is better, so 1 - score is not headroom; pick a score "
                                    "metric such as recall@10" for m in lower))


def run_scores(store: Store, run: RunRecord, golden: GoldenSet, metrics: Sequence[str]) -> RunScores:
    """The run's (items x metrics) trial-mean values and per-item latency, in golden order.

    A value is the mean of the item's defined trials (NaN when none is defined, or the item was not
    scored); latency is the mean over trials of each trial's largest stored latency_ms (NaN when none)."""
    index = {q: i for i, q in enumerate(golden.query_ids)}
    n, k = len(index), len(metrics)
    t = store.results(run.run_id, metrics, columns=["query_id", "trial", "metric", "value", "latency_ms"],
                      ordered=False)
    qids = t["query_id"].to_pylist()
    unknown = sorted({q for q in qids if q not in index})
    if unknown:
        raise InputError(f"run {run.name} ({run.run_id}) has rows for {len(unknown)} query id(s) not in the "
                         f"golden set ({', '.join(unknown[:5])}); its dataset version pin is wrong")
    qi = np.fromiter(map(index.__getitem__, qids), dtype=np.int64, count=len(qids))
    col = {m: j for j, m in enumerate(metrics)}
    mj = np.fromiter(map(col.__getitem__, t["metric"].to_pylist()), dtype=np.int64, count=len(qids))
    values = t["value"].to_numpy(zero_copy_only=False).astype(float)
    values = np.where(pc.is_null(t["value"]).to_numpy(zero_copy_only=False), np.nan, values)
    ok = ~np.isnan(values)
    sums, counts = np.zeros((n, k)), np.zeros((n, k))
    np.add.at(sums, (qi[ok], mj[ok]), values[ok])
    np.add.at(counts, (qi[ok], mj[ok]), 1)
    out = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    bad = ok & ((values < 0) | (values > 1))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"run {run.name}: metric {metrics[mj[i]]} has value {values[i]} for {qids[i]}, "
                         "outside [0, 1]; headroom needs a score in [0, 1]")

    lat = t["latency_ms"].to_numpy(zero_copy_only=False).astype(float)
    lat = np.where(pc.is_null(t["latency_ms"]).to_numpy(zero_copy_only=False), np.nan, lat)
    trials = t["trial"].to_numpy(zero_copy_only=False).astype(np.int64)
    width = int(trials.max()) + 1 if trials.size else 1
    pairs, pair_of = np.unique(qi * width + trials, return_inverse=True)
    per_trial = np.full(pairs.size, np.nan)
    np.fmax.at(per_trial, pair_of, lat)  # fmax skips NaN: a trial's latency is its largest stored one
    known = ~np.isnan(per_trial)
    lat_sum, lat_n = np.zeros(n), np.zeros(n)
    np.add.at(lat_sum, pairs[known] // width, per_trial[known])
    np.add.at(lat_n, pairs[known] // width, 1)
    latency = np.where(lat_n > 0, lat_sum / np.maximum(lat_n, 1), np.nan)
    created = run.created_at.isoformat() if run.created_at else None
    return RunScores(run.run_id, run.name, run.config_sha or run.run_id, created, out, latency)


def stored_golden_status(store: Store, golden: GoldenSet, *, metrics: Sequence[str] = DEFAULT_METRICS,
                         runs: Sequence[str] | None = None, options: StatusOptions | None = None) -> dict:
    """:func:`~ragassay.golden.status.golden_status` over the store's runs of ``golden``'s version, plus the
    runs left out (``excluded``, by reason, with counts)."""
    metrics = list(dict.fromkeys(metrics))
    _check_metrics(metrics)
    records, excluded = select_runs(store, golden, runs, metrics)
    report = golden_status(golden, [run_scores(store, r, golden, metrics) for r in records], metrics, options)
    report["excluded"] = {**excluded, **{f"n_{k}": len(v) for k, v in excluded.items()}}
    return report
