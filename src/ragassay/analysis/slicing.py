"""Whole set, cases and slices (spec 34.2): slice a paired change by any golden-set field or tag, show the
weighted identity ``overall delta = sum_j w_j * delta_j`` as contributions, and export cases to read.

Slice keys (``by``): ``stratum``, ``source``, ``answerable``, ``created`` (by month; ``created:year`` by
year), ``tag:NAME`` (has the tag or not; a held-out set is a tag such as ``tag:held_out``). A partition is
disjoint and exhaustive, so the identity holds for means of per-query scores; several trials of a query are
averaged first, so each query weighs the same. Every slice delta has a paired bootstrap interval and a
Benjamini-Hochberg adjusted p across the slices of one key.

A key whose value no paired query has (an unknown tag, ``created`` when no query has a date) is refused,
with the values that do occur: it would be one slice holding every query.

A slice key is *exploratory* unless a slices file declared it before both runs were made (``declared_at`` at
or before the earlier run's ``created_at``; a run without ``created_at`` cannot show it)::

    declared_at: 2026-11-01T09:00:00
    slices: [stratum, tag:held_out]

The two runs must be comparable as ``compare`` demands (``compare.comparable_runs``): differing pins
are refused unless ``rebaseline``, and a rebaselined result lists them.

Cases: the top gains, top losses, a seeded random sample, and every severe failure of run B, each with
the two runs' traces side by side. Severe (named rule ``severe-v1``): B's trace is an error, B answered an
unanswerable query, or A was correct (score >= 0.5) where B scored 0.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

import numpy as np

from ragassay._markdown import md_escape
from ragassay.analysis.compare import comparable_runs
from ragassay.errors import InputError
from ragassay.golden import GOLDEN_FILE, GoldenSet, load_golden
from ragassay.stats import adjust_pvalues, bootstrap_deltas, slice_decomposition
from ragassay.store import Store
from ragassay.trace import Trace, TraceReader
from ragassay.yamlio import load_yaml

SEVERE_RULE = "severe-v1"
SEVERE_CORRECT = 0.5


def load_run_golden(store: Store, run_ref: str, golden_path: str | Path) -> GoldenSet:
    """A built golden folder, checked against the run's pinned dataset version."""
    path = Path(golden_path)
    if not (path / GOLDEN_FILE).exists():
        raise InputError(f"{path}: not a built golden folder (no {GOLDEN_FILE}); build it with `ragassay golden "
                         f"build` and pass the output folder as --golden")
    golden = load_golden(path)
    run = store.get_run(run_ref)
    if run.dataset_version and golden.dataset_version != run.dataset_version:
        raise InputError(f"{path}: golden set version {golden.dataset_version!r} is not the one run {run.name!r} "
                         f"was scored with ({run.dataset_version!r}); pass the matching golden folder")
    return golden


def run_traces(store: Store, run_ref: str) -> dict[tuple[str, int], Trace]:
    """The run's recorded traces by (query_id, trial): ``extra.traces_dir/<run_id>.jsonl`` for pipeline runs,
    the imported file for ``traces:<path>`` runs. An empty dict when none were recorded."""
    path = store.get_run(run_ref).traces_path()
    if path is None or not path.exists():
        return {}
    return {t.key: t for t in TraceReader(path)}


def slice_labels(golden: GoldenSet | None, query_ids, strata, by: str) -> np.ndarray:
    """One slice label per query for key ``by`` (module docstring). ``stratum`` needs no golden set."""
    qids = list(query_ids)
    if by == "stratum":
        return np.asarray([s if s is not None else "(none)" for s in strata], dtype=object)
    if golden is None:
        raise InputError(f"slicing by {by!r} needs the golden set; pass --golden with the built golden folder")
    missing = [q for q in qids if q not in golden]
    if missing:
        raise InputError(f"{len(missing)} stored query id(s) are not in the golden set (first: {missing[0]!r}); "
                         f"pass the golden folder the runs were scored with")
    qs = [golden[q] for q in qids]
    if by == "source":
        out = [q.source for q in qs]
    elif by == "answerable":
        out = ["answerable" if q.answerable else "unanswerable" for q in qs]
    elif by in ("created", "created:month", "created:year"):
        if not any(q.created for q in qs):
            raise InputError(f"slice key {by!r}: none of the {len(qs)} paired queries has a `created` date, so it "
                             f"would be one slice holding every query; {_values_text(qs)}")
        n = 4 if by == "created:year" else 7
        out = [(q.created or "(no date)")[:n] if q.created else "(no date)" for q in qs]
    elif by.startswith("tag:") and len(by) > 4:
        tag = by[4:]
        if not any(tag in q.tags for q in qs):
            raise InputError(f"slice key {by!r}: no paired query has the tag {tag!r}, so it would be one slice "
                             f"holding every query; {_values_text(qs)}")
        out = [tag if tag in q.tags else f"not {tag}" for q in qs]
    else:
        raise InputError(f"unknown slice key {by!r}; use stratum, source, answerable, created, created:year or "
                         f"tag:NAME")
    return np.asarray(out, dtype=object)


def _values_text(qs, most: int = 10) -> str:
    """The ``most`` commonest tags (with query counts) and the other keys with values among ``qs``, for a
    refused slice key."""
    tags: dict[str, int] = {}
    for q in qs:
        for t in q.tags:
            tags[t] = tags.get(t, 0) + 1
    common = sorted(tags.items(), key=lambda tc: (-tc[1], tc[0]))
    shown = ", ".join(f"tag:{t} ({c})" for t, c in common[:most]) if tags else "none (no query has a tag)"
    if len(common) > most:
        shown += f" and {len(common) - most} more"
    keys = ["stratum", "source", "answerable"] + (["created", "created:year"] if any(q.created for q in qs) else [])
    return f"tags present: {shown}; other keys: {', '.join(keys)}"


def declared_before(declared_at: dt.datetime, runs) -> bool:
    """True when ``declared_at`` is at or before every run's ``created_at`` (the earliest run's); False when
    a run has no ``created_at``, since nothing then shows the key was declared before it."""
    times = [r.created_at for r in runs]
    return all(t is not None for t in times) and declared_at <= min(times)


def _per_query(store: Store, run_ref: str, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    w = store.results_wide(run_ref, [metric])
    qids, inv = np.unique(w.query_ids.astype(str), return_inverse=True)
    v = w.values[:, 0]
    ok = ~np.isnan(v)
    s = np.bincount(inv[ok], weights=v[ok], minlength=qids.size)
    c = np.bincount(inv[ok], minlength=qids.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(c > 0, s / np.where(c > 0, c, 1), np.nan)
    strata = np.empty(qids.size, dtype=object)
    strata[inv] = w.strata
    return qids.astype(object), mean, strata


def paired_scores(store: Store, run_a: str, run_b: str, metric: str):
    """(query_ids, strata, a, b): per-query means over trials of both runs on their shared queries."""
    qa, va, sa = _per_query(store, run_a, metric)
    qb, vb, _ = _per_query(store, run_b, metric)
    shared, ia, ib = np.intersect1d(qa.astype(str), qb.astype(str), return_indices=True)
    if shared.size == 0:
        raise InputError(f"runs {run_a!r} and {run_b!r} share no query; they cannot be paired")
    return shared.astype(object), sa[ia], va[ia], vb[ib]


def read_declared(path: str | Path) -> tuple[dt.datetime, list[str]]:
    data = load_yaml(Path(path), "slices declaration")
    if not isinstance(data, dict) or "declared_at" not in data or not isinstance(data.get("slices"), list):
        raise InputError(f"{path}: a slices file needs `declared_at: <ISO date-time>` and `slices: [keys...]`")
    raw = data["declared_at"]
    try:
        when = raw if isinstance(raw, dt.datetime) else dt.datetime.fromisoformat(str(raw))
    except ValueError:
        raise InputError(f"{path}: declared_at {raw!r} is not an ISO date-time (2026-11-01T09:00:00)") from None
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC).replace(tzinfo=None)
    return when, [str(s) for s in data["slices"]]


def slice_analysis(store: Store, run_a: str, run_b: str, *, metric: str = "answer_f1", by=("stratum",),
                   golden: GoldenSet | None = None, declared: tuple[dt.datetime, list[str]] | None = None,
                   n_resamples: int = 2_000, confidence: float = 0.95, seed: int = 0,
                   rebaseline: bool = False) -> dict:
    """The paired change in ``metric`` from A to B, split by each key in ``by`` into weight x slice delta.
    Runs with differing pins are refused unless ``rebaseline``."""
    (ra, rb), diffs = comparable_runs(store, [run_a, run_b], [metric], rebaseline=rebaseline)
    qids, strata, a, b = paired_scores(store, ra.run_id, rb.run_id, metric)
    before_both = declared is not None and declared_before(declared[0], (ra, rb))
    keys = []
    for key in by:
        labels = slice_labels(golden, qids, strata, key)
        dec = slice_decomposition(a, b, labels)
        ok = ~(np.isnan(a) | np.isnan(b))
        names = [s.name for s in dec.slices]
        cols = np.full((qids.size, len(names)), np.nan)
        for j, nm in enumerate(names):
            m = ok & (labels.astype(str) == nm)
            cols[m, j] = (b - a)[m]
        boot = bootstrap_deltas(cols, metrics=names, n_resamples=n_resamples, confidence=confidence, seed=seed)
        pv = np.asarray([r.p_value for r in boot])
        padj = np.full(pv.size, np.nan)
        fin = ~np.isnan(pv)
        if fin.any():
            padj[fin] = adjust_pvalues(pv[fin], method="bh")
        is_declared = before_both and key in declared[1]
        rows = []
        for s, r, p in zip(dec.slices, boot, padj, strict=True):
            rows.append({**s.to_dict(), "ci_low": r.ci_low, "ci_high": r.ci_high, "p_value": r.p_value,
                         "p_adj": float(p), "wins": r.wins, "losses": r.losses, "ties": r.ties})
        keys.append({"by": key, "exploratory": not is_declared, "n": dec.n, "n_excluded": dec.n_excluded,
                     "mean_a": dec.mean_a, "mean_b": dec.mean_b, "delta": dec.delta,
                     "sum_of_contributions": math.fsum(r["contribution"] for r in rows), "slices": rows})
    return {"run_a": {"run_id": ra.run_id, "name": ra.name}, "run_b": {"run_id": rb.run_id, "name": rb.name},
            "metric": metric, "confidence": confidence, "n_resamples": n_resamples, "seed": seed,
            "declared_at": declared[0].isoformat() if declared is not None else None,
            "rebaselined": bool(diffs), "pin_differences": diffs, "keys": keys}


def _trace_view(t: Trace | None) -> dict | None:
    if t is None:
        return None
    return {"trace_id": t.trace_id, "outcome": t.outcome, "answer": t.answer, "error": t.error,
            "packed": [{"doc_id": u.doc_id, "start": u.start, "end": u.end, "text": u.text} for u in t.packed],
            "top_candidates": [{"doc_id": u.doc_id, "start": u.start, "end": u.end, "score": u.score}
                               for u in (t.reranked if t.reranked is not None else t.fused)[:5]],
            "citations": [c.unit_id for c in t.citations], "durations_ms": dict(t.durations_ms)}


def _severe(store: Store, run_a: str, run_b: str, qids: np.ndarray, a: np.ndarray, b: np.ndarray,
            traces_b: dict) -> np.ndarray:
    have = set(store.metrics(run_b))
    sev = np.zeros(qids.size, dtype=bool)
    for m in ("error", "abstention_recall"):
        if m in have:
            q, v, _ = _per_query(store, run_b, m)
            pos = {x: i for i, x in enumerate(q)}
            hit = (v > 0) if m == "error" else (v < 1)  # answered an unanswerable query at least once
            for i, qid in enumerate(qids):
                j = pos.get(qid)
                if j is not None and hit[j]:
                    sev[i] = True
    for i, qid in enumerate(qids):
        t = traces_b.get((qid, 0))
        if t is not None and t.outcome == "error":
            sev[i] = True
    with np.errstate(invalid="ignore"):
        sev |= (a >= SEVERE_CORRECT) & (b == 0)
    return sev


def export_cases(store: Store, run_a: str, run_b: str, *, metric: str = "answer_f1", golden: GoldenSet | None = None,
                 n_top: int = 10, n_random: int = 10, seed: int = 0, rebaseline: bool = False) -> dict:
    """Top gains, top losses, a random sample and every severe failure, with both runs' first-trial traces.
    ``n_top`` and ``n_random`` are counts >= 0. Runs with differing pins are refused unless ``rebaseline``."""
    for name, v in (("n_top", n_top), ("n_random", n_random)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InputError(f"{name}={v!r}: give a number of cases >= 0 (--top / --random on the command line)")
    (ra, rb), diffs = comparable_runs(store, [run_a, run_b], [metric], rebaseline=rebaseline)
    qids, strata, a, b = paired_scores(store, ra.run_id, rb.run_id, metric)
    ta, tb = run_traces(store, ra.run_id), run_traces(store, rb.run_id)
    d = b - a
    ok = ~np.isnan(d)
    order = np.flatnonzero(ok)[np.argsort(d[ok], kind="stable")]
    gains = [int(i) for i in order[::-1] if d[i] > 0][:n_top]
    losses = [int(i) for i in order if d[i] < 0][:n_top]
    rng = np.random.default_rng(seed)
    rand = sorted(rng.choice(qids.size, size=min(n_random, qids.size), replace=False).tolist())
    severe = np.flatnonzero(_severe(store, ra.run_id, rb.run_id, qids, a, b, tb)).tolist()

    def case(kind: str, i: int) -> dict:
        q = str(qids[i])
        g = golden[q] if golden is not None and q in golden else None
        return {"kind": kind, "query_id": q, "stratum": strata[i],
                "question": g.question if g else (ta.get((q, 0)) or tb.get((q, 0)) or Trace(trace_id="-",
                                                                                            query_id=q)).question,
                "reference_answer": g.reference_answer if g else None,
                "a": None if math.isnan(a[i]) else float(a[i]), "b": None if math.isnan(b[i]) else float(b[i]),
                "delta": None if math.isnan(d[i]) else float(d[i]),
                "trace_a": _trace_view(ta.get((q, 0))), "trace_b": _trace_view(tb.get((q, 0)))}

    cases = ([case("gain", i) for i in gains] + [case("loss", i) for i in losses]
             + [case("random", i) for i in rand] + [case("severe", i) for i in severe])
    return {"run_a": {"run_id": ra.run_id, "name": ra.name}, "run_b": {"run_id": rb.run_id, "name": rb.name},
            "metric": metric, "severe_rule": SEVERE_RULE, "seed": seed, "traces_found": {"a": bool(ta), "b": bool(tb)},
            "rebaselined": bool(diffs), "pin_differences": diffs,
            "counts": {"gain": len(gains), "loss": len(losses), "random": len(rand), "severe": len(severe)},
            "cases": cases}




CASES_KIND = "slices --cases"
CASE_KINDS = ("gain", "loss", "random", "severe")
# The first line of a Markdown export: how a later export recognises the file as ragassay's own.
MD_GENERATOR = "<!-- generator: ragassay case export -->"


def _is_case_export(path: Path) -> bool:
    """True for a file an earlier ``write_cases`` wrote (its first line says so), or an empty one (nothing is
    lost by replacing it)."""
    try:
        with path.open(encoding="utf-8") as fh:
            first = fh.readline()
    except (OSError, UnicodeDecodeError):
        return False
    if not first:
        return True
    if path.suffix == ".md":
        return first.rstrip("\n") == MD_GENERATOR
    try:
        case = json.loads(first)
    except ValueError:
        return False
    return isinstance(case, dict) and case.get("kind") in CASE_KINDS and {"query_id", "trace_a", "trace_b"} <= set(case)


def check_cases_path(out: str | Path) -> Path:
    """Refuse a case-export path before any work: it must end in .md or .jsonl, and may be new or an earlier
    case export (:func:`ragassay.fsio.check_output_file`); any other existing file is never replaced."""
    from ragassay.fsio import check_output_file

    out = Path(out)
    if out.suffix not in (".jsonl", ".md"):
        raise InputError(f"{out}: case export must end in .jsonl or .md")
    check_output_file(out, CASES_KIND, overwrite_ok=_is_case_export)
    return out


def write_cases(export: dict, out: str | Path) -> Path:
    """Write the export as ``.jsonl`` (one case per line) or ``.md`` (side-by-side tables), by suffix, atomically;
    the path is checked by :func:`check_cases_path`. In Markdown every text from the runs, traces and golden set
    is escaped as ``compare --format markdown`` escapes it, so an answer cannot open a link, a tag or a cell."""
    from ragassay.fsio import atomic_write_text

    out = check_cases_path(out)

    def cell(text) -> str:
        return "" if text is None else md_escape(text)

    if out.suffix == ".jsonl":
        text = "".join(json.dumps(c, ensure_ascii=False, sort_keys=True) + "\n" for c in export["cases"])
    else:
        na, nb, metric = cell(export["run_a"]["name"]), cell(export["run_b"]["name"]), cell(export["metric"])
        lines = [MD_GENERATOR, f"# Cases: {na} → {nb} on {metric}", ""]
        for c in export["cases"]:
            lines += [f"## {c['kind']}: {cell(c['query_id'])} ({cell(c['stratum'])})", "",
                      f"**Question:** {cell(c['question'])}  ", f"**Reference:** {cell(c['reference_answer'])}",
                      "", f"| | {na} | {nb} |", "|---|---|---|",
                      f"| {metric} | {cell(c['a'])} | {cell(c['b'])} |"]
            for field in ("outcome", "answer"):
                va = (c["trace_a"] or {}).get(field)
                vb = (c["trace_b"] or {}).get(field)
                lines.append(f"| {field} | {cell(va)} | {cell(vb)} |")
            ctx = [" ; ".join(f"{u['doc_id']}[{u['start']}:{u['end']}]" for u in (t or {}).get("packed", []))
                   for t in (c["trace_a"], c["trace_b"])]
            lines += [f"| context | {cell(ctx[0])} | {cell(ctx[1])} |", ""]
        text = "\n".join(lines) + "\n"
    atomic_write_text(out, text)
    return out


def slices_report_section(store: Store, run_a: str, run_b: str, *, metric: str = "answer_f1", by=("stratum",),
                          golden: GoldenSet | None = None, n_top: int = 10, n_random: int = 10,
                          n_resamples: int = 2_000, seed: int = 0, rebaseline: bool = False) -> dict:
    """Report data: the slice table(s) and the case list for one comparison (JSON-serializable)."""
    return {"kind": "slices",
            "slices": slice_analysis(store, run_a, run_b, metric=metric, by=by, golden=golden,
                                     n_resamples=n_resamples, seed=seed, rebaseline=rebaseline),
            "cases": export_cases(store, run_a, run_b, metric=metric, golden=golden, n_top=n_top,
                                  n_random=n_random, seed=seed, rebaseline=rebaseline)}
