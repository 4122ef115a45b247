"""The offline–online gap as a measurement (spec §15.1): per release, the delta the offline set predicted and
the delta production showed, kept in ``<store>.online/gap.jsonl``, and the calibration of one against the other
over releases.

**Offline delta**: given (``--offline-delta``) or the paired delta of two stored runs on one metric, with its
interval, from ``ragassay compare``'s own machinery (:func:`ragassay.analysis.compare.compare_runs`, overall row).

**Online delta** between release R and the one before it (the release whose first record is the latest before
R's first record, unless named): either

- ``judge:METRIC`` — the judge-on-sample quality (:mod:`ragassay.online.judge`, Hájek weighted mean over the
  stored verdicts of one judge, restricted to each release's records) of R minus that of the previous release;
  the two samples are independent, so the variance is the sum of the two linearized variances; or
- ``signal:NAME`` — the rate of a signal over every record of each release (not a sample), with the normal
  interval of a difference of two independent proportions. A failure signal falls when things improve.

**Calibration**: ordinary least squares of online on offline deltas over the releases of one (offline metric,
online measure) pair, ``online = intercept + slope · offline``, with Pearson's r; undefined (with the count) under
three releases, or when every offline delta is the same.

Rows are idempotent per (release, offline metric, online measure): recording it again replaces the row. The file
is rewritten atomically (:mod:`ragassay.fsio`), so a reader sees it before or after, never half.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ragassay import fsio
from ragassay.errors import InputError
from ragassay.online.judge import (
    SIGNALS,
    Sample,
    draw_sample,
    judged_rows,
    read_records,
    signals_of,
    weighted_rate,
)
from ragassay.online.store import online_dir

GAP_FILE = "gap.jsonl"
MIN_RELEASES = 3


def gap_path(store: str | Path) -> Path:
    return online_dir(store) / GAP_FILE


def read_gap(store: str | Path) -> list[dict[str, Any]]:
    """The rows of ``<store>.online/gap.jsonl`` in file order; a damaged line is an error naming it."""
    path = gap_path(store)
    if not path.is_file():
        return []
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise InputError(f"{path}:{n}: not a JSON line ({e}); fix or remove the line") from e
        if not isinstance(row, dict) or not {"release", "metric", "online_measure"} <= set(row):
            raise InputError(f"{path}:{n}: not a gap row (release, metric, online_measure ...); fix or remove it")
        rows.append(row)
    return rows


def record_gap(store: str | Path, row: dict[str, Any]) -> list[dict[str, Any]]:
    """Add ``row`` to the gap file, replacing the row of the same (release, metric, online_measure) in place;
    returns every row after the write."""
    rows = read_gap(store)
    key = (row["release"], row["metric"], row["online_measure"])
    at = next((i for i, r in enumerate(rows) if (r["release"], r["metric"], r["online_measure"]) == key), None)
    if at is None:
        rows.append(row)
    else:
        rows[at] = row
    text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)
    fsio.atomic_write_text(gap_path(store), text)
    return rows


# ---------------------------------------------------------------------------------------------- deltas
def parse_online_measure(text: str) -> tuple[str, str]:
    """``judge:faithfulness`` or ``signal:rephrased`` -> (kind, name)."""
    from ragassay.online.judge import ONLINE_METRICS

    kind, sep, name = str(text).partition(":")
    if kind == "judge" and sep and name in ONLINE_METRICS:
        return kind, name
    if kind == "signal" and sep and name in SIGNALS:
        return kind, name
    raise InputError(f"--online {text!r}: write judge:METRIC ({', '.join(ONLINE_METRICS)}) for the judge-on-sample "
                     f"quality, or signal:NAME ({', '.join(SIGNALS)}) for a signal rate")


def release_order(rec: dict[str, list]) -> list[str]:
    """Releases by their first record's time (ties by name); records without a release are left out."""
    first: dict[str, Any] = {}
    for rel, ts in zip(rec["release"], rec["ts"], strict=True):
        if rel is not None and (rel not in first or ts < first[rel]):
            first[rel] = ts
    return sorted(first, key=lambda r: (first[r], r))


def previous_release(rec: dict[str, list], release: str, given: str | None = None) -> str:
    order = release_order(rec)
    for name, flag in ((release, "--release"), (given, "--previous")):
        if name is not None and name not in order:
            raise InputError(f"{flag} {name!r}: no production record carries it (releases: "
                             f"{', '.join(order[-8:]) or 'none'}); ingest its traffic first")
    if given is not None:
        if given == release:
            raise InputError("--previous names the release itself; name the one it replaced")
        return given
    at = order.index(release)
    if at == 0:
        raise InputError(f"release {release!r} is the first one in the records; there is no previous release to "
                         "compare it with (pass --previous)")
    return order[at - 1]


def _interval(delta: float, se: float, z: float) -> dict[str, Any]:
    if math.isnan(delta):
        return {"delta": None, "se": None, "ci_low": None, "ci_high": None}
    return {"delta": delta, "se": se, "ci_low": delta - z * se, "ci_high": delta + z * se}


def signal_delta(rec: dict[str, list], signal: str, release: str, previous: str, confidence: float = 0.95
                 ) -> dict[str, Any]:
    """Rate of ``signal`` among every record of ``release`` minus that of ``previous`` (Wald interval of a
    difference of independent proportions)."""
    from ragassay.online.judge import _z

    n = len(rec["request_id"])
    has = np.array([signal in signals_of(rec, k) for k in range(n)], dtype=bool)
    rel = np.asarray(rec["release"], dtype=object)
    out: dict[str, Any] = {}
    rates, ses = [], []
    for role, name in (("release", release), ("previous", previous)):
        inside = rel == name
        m = int(inside.sum())
        p = float(has[inside].mean()) if m else math.nan
        rates.append(p)
        ses.append(math.sqrt(p * (1 - p) / m) if m else math.nan)
        out[role] = {"name": name, "value": None if math.isnan(p) else p, "n": m}
    out.update(_interval(rates[0] - rates[1], math.hypot(ses[0], ses[1]), _z(confidence)))
    return out


def judge_delta(store: str | Path, rec: dict[str, list], metric: str, release: str, previous: str, *, key: str,
                confidence: float = 0.95) -> dict[str, Any]:
    """Judge-on-sample quality of ``release`` minus ``previous``: the records are redrawn with the design the
    stored verdicts of judge ``key`` were sampled under (their rate, oversampling factor and seed), and each
    release's Hájek estimate is taken over its own records in each cell."""
    from ragassay.online.judge import FAILURE_SIGNALS, _z, stored_designs

    done = judged_rows(store, key)
    if not done:
        raise InputError(f"no stored verdicts of judge {key} under {online_dir(store) / 'judged'}; run `ragassay "
                         "online judge` with this judge config first")
    designs = stored_designs(store, key)
    if len(designs) > 1:
        shown = "; ".join(f"rate {r:g}, failures x{f:g}, seed {s}" for r, f, s in designs)
        raise InputError(f"the verdicts of judge {key} were sampled under {len(designs)} designs ({shown}); a "
                         "weighted rate needs one: judge again under one design")
    rate, factor, seed = designs[0]
    n = len(rec["request_id"])
    failure = [any(s in FAILURE_SIGNALS for s in signals_of(rec, k)) for k in range(n)]
    sample: Sample = draw_sample(rec["request_id"], rec["day"], rec["stratum"], failure, rate, factor, seed)
    rel = np.asarray(rec["release"], dtype=object)
    ids = rec["request_id"]
    out: dict[str, Any] = {}
    ests = []
    for role, name in (("release", release), ("previous", previous)):
        inside = rel == name
        # the cells of this release: its records' own counts per cell, its sampled and judged ones
        cells = sample.cell[inside]
        keys = np.unique(cells)
        remap = {int(c): i for i, c in enumerate(keys)}
        population = np.bincount([remap[int(c)] for c in cells], minlength=len(keys))
        judged = [k for k in np.flatnonzero(inside & sample.selected) if ids[k] in done and metric in done[ids[k]]]
        y = np.array([np.nan if done[ids[k]][metric][0] is None else done[ids[k]][metric][0] for k in judged],
                     dtype=np.float64)
        est = weighted_rate(y, ~np.isnan(y), np.array([remap[int(sample.cell[k])] for k in judged], dtype=np.int64),
                            population, confidence=confidence)
        ests.append(est)
        out[role] = {"name": name, **est.to_dict()}
    out.update(_interval(ests[0].value - ests[1].value, math.hypot(ests[0].se, ests[1].se), _z(confidence)))
    return out


def offline_from_runs(store: str | Path, run_a: str, run_b: str, metric: str, *, n_resamples: int = 10_000,
                      seed: int = 0, confidence: float = 0.95) -> dict[str, Any]:
    """The paired delta (B - A) of ``metric`` over the two stored runs, overall, as ``ragassay compare`` computes
    it (pins checked, paired bootstrap interval)."""
    from ragassay.analysis.compare import compare_runs
    from ragassay.store import Store

    with Store.open(store, read_only=True) as st:
        comp = compare_runs(st, run_a, run_b, metrics=[metric], n_resamples=n_resamples, seed=seed,
                            confidence=confidence, strata=False)
    row = comp.overall(metric)
    if row is None:
        raise InputError(f"runs {run_a} and {run_b} give no overall {metric} comparison; check the metric name")
    clean = row.to_dict()
    return {"source": "runs", "baseline": comp.run_a.name, "candidate": comp.run_b.name,
            "delta": clean.get("delta"), "ci_low": clean.get("ci_low"), "ci_high": clean.get("ci_high"),
            "n": clean.get("n")}


# ---------------------------------------------------------------------------------------------- calibration
def calibration(rows: Sequence[dict[str, Any]], metric: str, online_measure: str) -> dict[str, Any]:
    """OLS of online on offline delta over the rows of one (metric, online measure) pair with both defined."""
    pts = [(r["offline"]["delta"], r["online"]["delta"], r["release"]) for r in rows
           if r["metric"] == metric and r["online_measure"] == online_measure
           and r["offline"].get("delta") is not None and r["online"].get("delta") is not None]
    out: dict[str, Any] = {"metric": metric, "online_measure": online_measure, "n": len(pts),
                           "releases": [p[2] for p in pts], "slope": None, "intercept": None, "r": None}
    if len(pts) < MIN_RELEASES:
        out["undefined"] = f"{len(pts)} release(s) with both deltas; a calibration needs at least {MIN_RELEASES}"
        return out
    x = np.array([p[0] for p in pts], dtype=np.float64)
    y = np.array([p[1] for p in pts], dtype=np.float64)
    sxx = float(((x - x.mean()) ** 2).sum())
    if np.all(x == x[0]):
        out["undefined"] = "every offline delta is the same; the slope is not identified"
        return out
    slope = float(((x - x.mean()) * (y - y.mean())).sum() / sxx)
    out["slope"] = slope
    out["intercept"] = float(y.mean() - slope * x.mean())
    syy = float(((y - y.mean()) ** 2).sum())
    out["r"] = None if syy == 0 else float(((x - x.mean()) * (y - y.mean())).sum() / math.sqrt(sxx * syy))
    return out


def measure_gap(store: str | Path, release: str, metric: str, online_measure: str, *,
                offline_delta: float | None = None, offline_runs: Sequence[str] | None = None,
                previous: str | None = None, judge_key: str | None = None, seed: int = 0,
                confidence: float = 0.95, n_resamples: int = 10_000
                ) -> dict[str, Any]:
    """Measure one release's gap row, record it, and return it with every row and the calibration."""
    if (offline_delta is None) == (not offline_runs):
        raise InputError("give the offline prediction once: --offline-delta X, or --offline RUN_A RUN_B")
    if offline_delta is not None and not math.isfinite(offline_delta):
        raise InputError(f"--offline-delta {offline_delta}: give a finite number")
    kind, name = parse_online_measure(online_measure)
    if offline_delta is not None:
        offline = {"source": "given", "delta": float(offline_delta), "ci_low": None, "ci_high": None, "n": None}
    else:
        if len(offline_runs) != 2:
            raise InputError(f"--offline takes two runs (baseline, candidate), got {len(offline_runs)}")
        if not Path(store).is_file():
            raise InputError(f"{store}: no such store; --offline reads the two runs from it")
        offline = offline_from_runs(store, offline_runs[0], offline_runs[1], metric, n_resamples=n_resamples,
                                    seed=seed, confidence=confidence)
    rec = read_records(store)
    prev = previous_release(rec, release, previous)
    if kind == "signal":
        online = signal_delta(rec, name, release, prev, confidence)
    else:
        if judge_key is None:
            raise InputError("--online judge:METRIC needs the judge whose verdicts to read: pass --judge CONFIG")
        online = judge_delta(store, rec, name, release, prev, key=judge_key, confidence=confidence)
    row = {"release": release, "previous": prev, "metric": metric, "online_measure": online_measure,
           "offline": offline, "online": online, "confidence": confidence,
           "recorded_at": datetime.now(UTC).isoformat(timespec="seconds")}
    rows = record_gap(store, row)
    return {"kind": "online-gap", "store": str(store), "file": str(gap_path(store)), "row": row,
            "rows": [r for r in rows if r["metric"] == metric and r["online_measure"] == online_measure],
            "calibration": calibration(rows, metric, online_measure)}


__all__ = ["GAP_FILE", "MIN_RELEASES", "calibration", "gap_path", "judge_delta", "measure_gap", "offline_from_runs",
           "parse_online_measure", "previous_release", "read_gap", "record_gap", "release_order", "signal_delta"]
