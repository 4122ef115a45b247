"""PPI-corrected judge means: a stored run's judge metric corrected by human labels of a random subsample of
its answers (prediction-powered inference, :mod:`ragassay.stats.ppi`; docs/ppi.md).

The labels file (JSONL, one object per line) gives the human value of a judge metric for one answer of a run:

    {"run": "baseline", "query_id": "q017", "trial": 0, "metric": "faithfulness", "value": 0.75,
     "labelled_by": "human"}

``query_id`` and ``metric`` are required; ``value`` (a number in [0, 1], on the metric's own scale) or
``label`` (a label of the metric's validation kind, as in labels.jsonl of ``judge validate``: mapped to 1 for
the top level, 0.5 for the middle level of an ordinal metric, 0 otherwise; ``cannot_tell`` is left out and
counted); optional ``run`` (run name, id or unique id prefix: required when the file serves two runs),
``trial`` (required when the query has several trials), ``labelled_by`` (``human`` or ``automated``),
``trace_id`` (when given it must be the trace the run stored for that answer) and ``note``. Every problem is a
``file:line`` error, all listed, and nothing is computed. Lines of other metrics, or naming another stored run,
are counted and not used.

The items are the run's answers the judge scored (a NULL judge value is not an item; a label on one is counted
and left out). With several trials per query the items are queries (trials of one query are not independent):
the judge value is the mean over the query's scored trials and a query counts as labelled when every one of
them is labelled. Labels on answers the run does not have are refused. The labelled items must be a random
subsample of the items: the result warns when the labelled items' judge mean differs credibly from the
others' (p < 0.01: the labels look selected), when every label is the same extreme value, when fewer than 30
items are labelled or the share is under 5%, and when the labels were made by a model or a script.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy.special import ndtr

from ragassay.errors import InputError
from ragassay.stats.ppi import TUNED, ppi_mean, ppi_paired_difference

FIELDS = ("run", "query_id", "trial", "metric", "value", "label", "labelled_by", "trace_id", "note")
MAX_PROBLEMS = 20
MIN_SOUND = 30          # below this many labels the normal interval is optimistic
MIN_SHARE = 0.05
SELECTION_P = 0.01


@dataclass(frozen=True)
class PPILabel:
    query_id: str
    metric: str
    value: float | None   # None: cannot_tell
    line: int
    run: str | None = None
    trial: int | None = None
    labelled_by: str | None = None
    trace_id: str | None = None


@dataclass(frozen=True)
class PPILabels:
    path: str
    version: str
    lines: tuple[PPILabel, ...]

    def metrics(self) -> list[str]:
        return sorted({x.metric for x in self.lines})


def _label_value(label: str, metric: str) -> float | None | str:
    """A validation-kind label as the metric's value (None for cannot_tell), or an error text."""
    from ragassay.judges.labels import KIND_LABELS
    from ragassay.judges.validate import METRIC_KIND, METRIC_SCALE

    kind = METRIC_KIND.get(metric)
    if kind is None:
        return (f"'label' needs a judge metric with a validation kind ({', '.join(sorted(METRIC_KIND))}); "
                f"give 'value' for {metric}")
    s = label.strip().lower().replace("-", "_").replace(" ", "_")
    levels = KIND_LABELS[kind]
    if s not in levels:
        return f"label {label!r} is not one of {list(levels)} (the {kind} kind of {metric})"
    if s == "cannot_tell":
        return None
    top, *rest = levels[:-1]
    if s == top:
        return 1.0
    ordinal = METRIC_SCALE.get(metric) == "ordinal" and len(levels) == 4
    return 0.5 if ordinal and s == rest[0] else 0.0


def _line(obj: dict, path: Path, n: int, problems: list[str]) -> PPILabel | None:
    from ragassay.metrics.names import canonical_name

    where = f"{path}:{n}"
    unknown = sorted(set(obj) - set(FIELDS))
    if unknown:
        problems.append(f"{where}: unknown field(s) {unknown}; allowed: {list(FIELDS)}")
        return None
    qid, metric = obj.get("query_id"), obj.get("metric")
    if not isinstance(qid, str) or not qid.strip():
        problems.append(f"{where}: query_id must be a non-empty string")
        return None
    if not isinstance(metric, str) or not metric.strip():
        problems.append(f"{where}: metric must name the judge metric the value is of (e.g. faithfulness)")
        return None
    try:
        metric = canonical_name(metric)
    except InputError as e:
        problems.append(f"{where}: {e}")
        return None
    trial = obj.get("trial")
    if trial is not None and (isinstance(trial, bool) or not isinstance(trial, int) or trial < 0):
        problems.append(f"{where}: trial must be an integer >= 0, got {trial!r}")
        return None
    for k in ("run", "trace_id", "note"):
        if obj.get(k) is not None and (not isinstance(obj[k], str) or not obj[k].strip()):
            problems.append(f"{where}: {k} must be non-empty text when given")
            return None
    who = obj.get("labelled_by")
    if who is not None and who not in ("human", "automated"):
        problems.append(f"{where}: labelled_by {who!r} is not one of ['human', 'automated']")
        return None
    has_v, has_l = obj.get("value") is not None, obj.get("label") is not None
    if has_v == has_l:
        problems.append(f"{where}: give exactly one of 'value' (a number in [0, 1]) and 'label'")
        return None
    if has_v:
        v = obj["value"]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not 0 <= v <= 1:
            problems.append(f"{where}: value must be a number in [0, 1] (the metric's value for this answer), "
                            f"got {v!r}")
            return None
        value = float(v)
    else:
        if not isinstance(obj["label"], str):
            problems.append(f"{where}: label must be text")
            return None
        got = _label_value(obj["label"], metric)
        if isinstance(got, str):
            problems.append(f"{where}: {got}")
            return None
        value = got
    return PPILabel(query_id=qid, metric=metric, value=value, line=n,
                    run=obj.get("run"), trial=trial, labelled_by=who, trace_id=obj.get("trace_id"))


def load_ppi_labels(path: str | Path) -> PPILabels:
    """Read a PPI labels file; every problem is a ``file:line: message`` (up to 20 shown), nothing partial."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such labels file; give a JSONL of human values per answer (see docs/ppi.md)")
    problems: list[str] = []
    lines: list[PPILabel] = []
    seen: dict[tuple, int] = {}
    from ragassay.judges.labels import _read_jsonl  # every label loader's one JSONL reader

    for n, obj in _read_jsonl(p, problems):
        item = _line(obj, p, n, problems)
        if item is None:
            continue
        key = (item.run, item.query_id, item.trial, item.metric)
        if key in seen:
            problems.append(f"{p}:{n}: {item.metric} of query {item.query_id} (trial {item.trial}, run "
                            f"{item.run}) is labelled again (line {seen[key]}); give each answer one label")
            continue
        seen[key] = n
        lines.append(item)
    if not problems and not lines:
        problems.append(f"{p}: no labels; write one JSON object per line")
    if problems:
        more = f"\n... and {len(problems) - MAX_PROBLEMS} more" if len(problems) > MAX_PROBLEMS else ""
        raise InputError(f"{p}: {len(problems)} problem(s) in the labels; nothing was computed:\n"
                         + "\n".join(problems[:MAX_PROBLEMS]) + more)
    blob = json.dumps([{k: v for k, v in asdict(x).items() if k != "line"} for x in
                       sorted(lines, key=lambda x: (x.run or "", x.query_id, x.trial or 0, x.metric))],
                      sort_keys=True, separators=(",", ":"))
    return PPILabels(str(p), hashlib.sha256(blob.encode()).hexdigest(), tuple(lines))


def as_labels(labels: PPILabels | str | Path) -> PPILabels:
    return labels if isinstance(labels, PPILabels) else load_ppi_labels(labels)


# ------------------------------------------------------------------------------------------ one run's items
@dataclass
class _Arm:
    """One run's items for one metric: per-item judge value and, where labelled, the human value."""

    run_id: str
    name: str
    keys: list[str]                # query ids (the items)
    judge: dict[str, float]        # query -> judge value (mean over its scored trials)
    labels: dict[str, float]       # query -> human value (mean over its labelled trials)
    who: set
    counts: Counter
    raw_mean: float                # the judge mean over scored (query, trial) pairs, as compare prints it


def _lines_for(labels: PPILabels, store, metric: str, runs) -> tuple[dict[str, list[PPILabel]], Counter]:
    """The label lines of ``metric`` for each run in ``runs`` (records), and the counts of lines not used."""
    counts: Counter = Counter()
    ids = {r.run_id: r for r in runs}
    out: dict[str, list[PPILabel]] = {r.run_id: [] for r in runs}
    problems: list[str] = []
    resolved: dict[str, str | None] = {}
    for x in labels.lines:
        if x.metric != metric:
            counts["other_metrics"] += 1
            continue
        if x.run is None:
            if len(runs) > 1:
                problems.append(f"{labels.path}:{x.line}: the labels serve {len(runs)} runs; name the run "
                                f"({', '.join(r.name for r in runs)}) in 'run'")
                continue
            out[runs[0].run_id].append(x)
            continue
        if x.run not in resolved:
            try:
                resolved[x.run] = store.get_run(x.run).run_id
            except InputError:
                resolved[x.run] = None
        rid = resolved[x.run]
        if rid is None:
            problems.append(f"{labels.path}:{x.line}: run {x.run!r} is not in the store; name a stored run")
        elif rid in ids:
            out[rid].append(x)
        else:
            counts["other_runs"] += 1
    _raise(labels.path, problems)
    return out, counts


def _raise(path: str, problems: list[str]) -> None:
    if problems:
        more = f"\n... and {len(problems) - MAX_PROBLEMS} more" if len(problems) > MAX_PROBLEMS else ""
        raise InputError(f"{path}: {len(problems)} problem(s) with the labels for these runs; nothing was "
                         "computed:\n" + "\n".join(problems[:MAX_PROBLEMS]) + more)


def _arm(store, rec, metric: str, lines: list[PPILabel], path: str) -> _Arm:
    wide = store.results_wide(rec.run_id, [metric])
    qids = [str(q) for q in wide.query_ids]
    trials = [int(t) for t in wide.trials]
    vals = wide.values[:, 0]
    by_query: dict[str, list[int]] = defaultdict(list)
    for q, t in zip(qids, trials, strict=True):
        by_query[q].append(t)
    value_of = {(q, t): float(v) for q, t, v in zip(qids, trials, vals, strict=True)}
    tids = store.trace_ids(rec.run_id) if any(x.trace_id for x in lines) else {}
    counts: Counter = Counter()
    problems: list[str] = []
    human: dict[tuple[str, int], float] = {}
    seen: dict[tuple[str, int], int] = {}
    who = set()
    for x in lines:
        where = f"{path}:{x.line}"
        if x.query_id not in by_query:
            problems.append(f"{where}: run {rec.name} has no answer for query {x.query_id!r}; labels must be of "
                            "the run's own answers")
            continue
        trial = x.trial
        if trial is None:
            if len(by_query[x.query_id]) > 1:
                problems.append(f"{where}: query {x.query_id} has trials {sorted(by_query[x.query_id])} in run "
                                f"{rec.name}; say which answer was labelled with 'trial'")
                continue
            trial = by_query[x.query_id][0]
        if (x.query_id, trial) not in value_of:
            problems.append(f"{where}: run {rec.name} has no trial {trial} of query {x.query_id} (trials "
                            f"{sorted(by_query[x.query_id])})")
            continue
        if x.trace_id is not None and tids.get((x.query_id, trial)) != x.trace_id:
            problems.append(f"{where}: trace_id {x.trace_id} is not the answer run {rec.name} stored for "
                            f"{x.query_id} trial {trial} ({tids.get((x.query_id, trial))}); the label is of "
                            "another answer")
            continue
        if (x.query_id, trial) in seen:
            problems.append(f"{where}: {x.query_id} trial {trial} of run {rec.name} is labelled again (line "
                            f"{seen[(x.query_id, trial)]}); give each answer one label")
            continue
        seen[(x.query_id, trial)] = x.line
        if x.value is None:
            counts["cannot_tell"] += 1
            continue
        if math.isnan(value_of[(x.query_id, trial)]):
            counts["judge_undefined"] += 1
            continue
        human[(x.query_id, trial)] = x.value
        who.add(x.labelled_by or "unstated")
    _raise(path, problems)
    defined = {k: v for k, v in value_of.items() if not math.isnan(v)}
    if not defined:
        raise InputError(f"run {rec.name}: the judge left {metric} undefined on every answer; nothing to correct")
    judge: dict[str, list[float]] = defaultdict(list)
    for (q, _), v in defined.items():
        judge[q].append(v)
    labels: dict[str, float] = {}
    for q in judge:
        scored = [t for t in by_query[q] if (q, t) in defined]
        got = [human[(q, t)] for t in scored if (q, t) in human]
        if got and len(got) == len(scored):
            labels[q] = float(np.mean(got))
        elif got:
            counts["partial_query"] += len(got)
    keys = sorted(judge)
    return _Arm(rec.run_id, rec.name, keys, {q: float(np.mean(judge[q])) for q in keys}, labels, who, counts,
                float(np.mean(list(defined.values()))))


def _warnings(arm: _Arm, keys: list[str]) -> list[str]:
    out = []
    n, big = sum(q in arm.labels for q in keys), len(keys)
    if n < MIN_SOUND:
        out.append(f"only {n} labelled item(s) in run {arm.name}: below about {MIN_SOUND} the normal interval is "
                   "optimistic")
    if big and n / big < MIN_SHARE:
        out.append(f"the labels cover {n / big:.1%} of run {arm.name}'s {big} items: a check that they were drawn "
                   "at random has little power")
    f = np.array([arm.judge[q] for q in keys])
    m = np.array([q in arm.labels for q in keys])
    if 2 <= m.sum() <= big - 2:
        fl, fu = f[m], f[~m]
        se = math.sqrt(fl.var(ddof=1) / fl.size + fu.var(ddof=1) / fu.size)
        if se > 0:
            p = float(2 * ndtr(-abs(fl.mean() - fu.mean()) / se))
            if p < SELECTION_P:
                out.append(f"the labels look selected, not random: the judge's mean on run {arm.name}'s labelled "
                           f"items is {fl.mean():.3f} against {fu.mean():.3f} on the others (p = {p:.2g}); the "
                           "correction assumes a random subsample")
        elif fl.mean() != fu.mean():
            out.append(f"the labels look selected, not random: the judge gives run {arm.name}'s labelled items "
                       f"{fl.mean():.3f} and the others {fu.mean():.3f}")
    ys = [arm.labels[q] for q in keys if q in arm.labels]
    if ys and len(set(ys)) == 1 and ys[0] in (0.0, 1.0) and len(set(f.tolist())) > 1:
        what = "failures" if ys[0] == 0.0 else "passes"
        out.append(f"every label of run {arm.name} is {ys[0]:g} (all {what}) while the judge's scores vary: were "
                   "the labelled items chosen for it? The correction assumes a random subsample")
    if arm.who - {"human"}:
        out.append(f"labels of run {arm.name} by {', '.join(sorted(arm.who))} (not every line says labelled_by: "
                   "human): the corrected mean leans toward whoever labelled")
    return out


def _check_lam(lam) -> float | str:
    if lam in (TUNED, "ppi++"):
        return TUNED
    if lam in ("ppi",):
        return 1.0
    return lam


def run_ppi(store, run: str, labels: PPILabels | str | Path, metric: str, *, lam=TUNED,
            confidence: float = 0.95) -> dict:
    """The PPI-corrected mean of ``metric`` for one stored run, beside the raw judge mean, with the counts of
    every label not used and the warnings (module docstring). ``lam``: ``"tuned"`` (PPI++, default), 1
    (PPI) or a fixed value in [0, 1]."""
    labels = as_labels(labels)
    rec = store.get_run(run)
    if metric not in store.metrics(rec.run_id):
        raise InputError(f"run {rec.name} has no {metric} rows; judge it first (ragassay judge score)")
    lines, counts = _lines_for(labels, store, metric, [rec])
    arm = _arm(store, rec, metric, lines[rec.run_id], labels.path)
    keys = arm.keys
    lab = [i for i, q in enumerate(keys) if q in arm.labels]
    if len(lab) < 2:
        raise InputError(f"{labels.path}: {len(lab)} usable label(s) of {metric} for run {rec.name}; PPI needs at "
                         f"least 2 labelled answers the judge scored ({_counts_text(counts + arm.counts)})")
    f = np.array([arm.judge[q] for q in keys])
    est = ppi_mean(f, lab, [arm.labels[keys[i]] for i in lab], lam=_check_lam(lam), confidence=confidence)
    return {"metric": metric, "run": {"run_id": rec.run_id, "name": rec.name}, "unit": _unit(store, [rec]),
            "raw_judge_mean": arm.raw_mean, "n_items": len(keys), "n_labelled": len(lab),
            "labelled_share": len(lab) / len(keys), "ppi": est.to_dict(), "lam_mode": _lam_mode(lam),
            "not_used": dict(counts + arm.counts), "warnings": _warnings(arm, keys),
            "labels": {"path": labels.path, "version": labels.version}}


def _lam_mode(lam) -> str:
    lam = _check_lam(lam)
    return "PPI++ (tuned lam)" if lam == TUNED else "PPI (lam = 1)" if lam == 1.0 else f"lam = {float(lam):g}"


def _unit(store, recs) -> str:
    return "query" if any((r.trials or 1) > 1 for r in recs) else "answer"


def _counts_text(c: Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "no label of this metric for the run"


def paired_ppi(store, run_a: str, run_b: str, labels: PPILabels | str | Path, metric: str, *, lam=TUNED,
               confidence: float = 0.95) -> dict:
    """The PPI-corrected paired difference B - A of ``metric`` on the items both runs scored, beside the raw
    judge means: **shared** when both runs are labelled on the same items, **separate** otherwise
    (:func:`ragassay.stats.ppi.ppi_paired_difference`)."""
    labels = as_labels(labels)
    ra, rb = store.get_run(run_a), store.get_run(run_b)
    if ra.run_id == rb.run_id:
        raise InputError(f"run {ra.name} is compared with itself; give two different runs")
    for rec in (ra, rb):
        if metric not in store.metrics(rec.run_id):
            raise InputError(f"run {rec.name} has no {metric} rows; judge it first (ragassay judge score)")
    lines, counts = _lines_for(labels, store, metric, [ra, rb])
    a = _arm(store, ra, metric, lines[ra.run_id], labels.path)
    b = _arm(store, rb, metric, lines[rb.run_id], labels.path)
    keys = sorted(set(a.judge) & set(b.judge))
    if len(keys) < 2:
        raise InputError(f"runs {ra.name} and {rb.name} share {len(keys)} item(s) with a {metric} judge value; "
                         "compare runs of the same golden set")
    la = [i for i, q in enumerate(keys) if q in a.labels]
    lb = [i for i, q in enumerate(keys) if q in b.labels]
    for rec, lab, arm in ((ra, la, a), (rb, lb, b)):
        if len(lab) < 2:
            raise InputError(f"{labels.path}: {len(lab)} usable label(s) of {metric} for run {rec.name} on the "
                             "items both runs scored; PPI needs at least 2 "
                             f"({_counts_text(counts + arm.counts)})")
    fa = np.array([a.judge[q] for q in keys])
    fb = np.array([b.judge[q] for q in keys])
    est = ppi_paired_difference(fa, la, [a.labels[keys[i]] for i in la], fb, lb, [b.labels[keys[i]] for i in lb],
                                lam=_check_lam(lam), confidence=confidence)
    only = {"a": len(set(a.judge) - set(keys)), "b": len(set(b.judge) - set(keys))}
    per_run = {}
    for key, arm, lab in (("a", a, la), ("b", b, lb)):
        f = fa if key == "a" else fb
        per_run[key] = ppi_mean(f, lab, [arm.labels[keys[i]] for i in lab], lam=_check_lam(lam),
                                confidence=confidence).to_dict()
    # the raw judge means over the items both runs scored (with one trial: the pairs compare's row means)
    raw = {"a": float(fa.mean()), "b": float(fb.mean())}
    return {"metric": metric, "a": {"run_id": ra.run_id, "name": ra.name}, "b": {"run_id": rb.run_id, "name": rb.name},
            "unit": _unit(store, [ra, rb]), "raw_judge_mean": raw,
            "n_items": len(keys), "n_labelled": {"a": len(la), "b": len(lb)}, "mode": est.mode,
            "difference": est.to_dict(), "means": per_run, "lam_mode": _lam_mode(lam),
            "items_one_run_only": only,
            "not_used": {"a": dict(counts + a.counts), "b": dict(counts + b.counts)},
            "warnings": _warnings(a, keys) + _warnings(b, keys),
            "labelled_by": sorted(a.who | b.who),
            "labels": {"path": labels.path, "version": labels.version}}


def comparison_ppi(store, run_a: str, run_b: str, labels: PPILabels | str | Path, metrics, *, lam=TUNED,
                   confidence: float = 0.95) -> list[dict]:
    """:func:`paired_ppi` for every metric among ``metrics`` the labels file has lines for (compare and gate:
    the judge metrics' corrected figures)."""
    labels = as_labels(labels)
    have = set(labels.metrics())
    return [paired_ppi(store, run_a, run_b, labels, m, lam=lam, confidence=confidence)
            for m in metrics if m in have]


def corrected_text(entry: dict) -> str:
    """One line for a table: the raw judge means and the PPI-corrected figures beside them."""
    d = entry["difference"]
    raw = entry["raw_judge_mean"]
    n = entry["n_labelled"]
    conf = d["confidence"]
    if not d["defined"]:
        return (f"{entry['metric']}: raw judge {raw['a']:.3f} → {raw['b']:.3f}; PPI-corrected (n labelled = "
                f"{n['a']}/{n['b']}): undefined ({d['reason']})")
    ma, mb = entry["means"]["a"], entry["means"]["b"]
    return (f"{entry['metric']}: raw judge {raw['a']:.3f} → {raw['b']:.3f} (Δ {raw['b'] - raw['a']:+.3f}); "
            f"PPI-corrected (n labelled = {n['a']}/{n['b']}, {entry['mode']} labels, {entry['lam_mode']}) "
            f"{ma['estimate']:.3f} → {mb['estimate']:.3f}, Δ {d['estimate']:+.3f} "
            f"[{d['ci_low']:+.3f}, {d['ci_high']:+.3f}] at {conf:.0%}")


__all__ = ["PPILabel", "PPILabels", "comparison_ppi", "corrected_text", "gate_figures", "load_ppi_labels",
           "paired_ppi", "run_ppi"]


def gate_figures(comp, confidence: float = 0.95, power: float = 0.80) -> dict[str, dict]:
    """What the gate decides a judge metric on when the comparison has its PPI-corrected difference:
    ``delta``, ``ci_low``, ``ci_high``; ``p_adj``, the Benjamini-Hochberg adjustment across the comparison's
    overall rows with this metric's raw bootstrap p replaced by the corrected normal p; ``mde`` =
    (z_{1-alpha/2} + z_power) * se; ``human`` (every label used says labelled_by: human); ``n_text``. An
    undefined corrected figure gives ``{"undefined": reason}``; fewer than :data:`MIN_SOUND` labelled items on
    a side give ``{"too_few": reason}``: the correction does not decide a gate on a handful of labels (two
    labels that agree with the judge would give a narrow interval and let an unvalidated judge decide)."""
    from scipy.special import ndtri

    from ragassay.stats import adjust_pvalues

    entries = {e["metric"]: e for e in comp.ppi}
    rows = [r for r in comp.rows if r.stratum == "all"]
    p = np.array([entries[r.metric]["difference"]["p_value"] if r.metric in entries
                  and entries[r.metric]["difference"]["defined"] else r.p for r in rows], dtype=float)
    adj = adjust_pvalues(p, "bh") if len(p) else p
    by_metric = {r.metric: float(a) for r, a in zip(rows, adj, strict=True)}
    z = float(ndtri(1 - (1 - confidence) / 2) + ndtri(power))
    out = {}
    for m, e in entries.items():
        d, n = e["difference"], e["n_labelled"]
        n_text = f"{n['a']}/{n['b']} ({e['mode']} labels, {e['lam_mode']})"
        if min(n["a"], n["b"]) < MIN_SOUND:
            out[m] = {"too_few": f"PPI not used: {n_text} is fewer than {MIN_SOUND} labelled items per run, too few "
                                 "for its interval to decide the gate", "n_text": n_text}
            continue
        if not d["defined"]:
            out[m] = {"undefined": d["reason"], "n_text": n_text}
            continue
        out[m] = {"delta": d["estimate"], "ci_low": d["ci_low"], "ci_high": d["ci_high"],
                  "p_adj": by_metric.get(m, d["p_value"]), "mde": z * d["se"], "n_text": n_text,
                  "human": e["labelled_by"] == ["human"]}
    return out
