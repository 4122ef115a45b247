"""Reading transcripts (spec §12.5): a fixed-seed sample of a stored run's failures, spread across strata, each
shown as a readable transcript — question, reference, the agent's claim next to the verifier's verdict, every
step with its arguments, result excerpt, retrieved units and their text, errors, durations and cost, and the
answer — so a reader can tell a genuine mistake from a grader that rejected a valid answer.

What counts as a failure: a stored (query, trial) row whose *basis* metric is below ``below`` (default 0.5).
The basis is ``task_success`` when the run has agent rows (the verifier's verdict: 0 is a failure), else
``answer_f1`` (token F1 of the answer against the reference answer; a row below one half failed), or any
stored metric the caller names (higher must be better). Undefined rows (a verifier error, a query without a
reference answer) are neither failures nor passes; they are counted.

Sampling (``by="stratum"``): the failures of each stratum are put in a random order with one generator
seeded by ``seed`` (strata in sorted order, rows sorted by query and trial first), then taken round-robin
across strata until ``sample`` are chosen, so every stratum with failures is shown before any shows a second
one. ``by="none"`` shuffles all failures together. Same store, run, seed and sample size: same transcripts.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragassay._markdown import md_escape
from ragassay.errors import InputError

DEFAULT_BELOW = 0.5
AGENT_BASIS = "task_success"
ANSWER_BASIS = "answer_f1"
SHOWN_METRICS = ("task_success", "partial_credit", "silent_failure", "answer_f1", "answer_em")
GENERATOR_TAG = "ragassay-transcripts"
BY_CHOICES = ("stratum", "none")


@dataclass
class Failures:
    """The failing rows of a run under one basis: ``rows`` (query_id, trial, stratum) sorted, plus counts."""

    basis: str
    below: float
    rows: list[tuple[str, int, str]]
    n_rows: int
    n_undefined: int
    per_stratum: dict[str, int] = field(default_factory=dict)


def find_failures(store, run_id: str, metric: str | None = None, below: float = DEFAULT_BELOW) -> Failures:
    """The failing (query, trial) rows of ``run_id`` (see the module docstring for the basis)."""
    if not (isinstance(below, int | float) and math.isfinite(below)):
        raise InputError(f"--below {below!r}: give a finite number (a row fails when its metric is below it)")
    have = set(store.metrics(run_id))
    if metric is None:
        metric = AGENT_BASIS if AGENT_BASIS in have else ANSWER_BASIS if ANSWER_BASIS in have else None
        if metric is None:
            raise InputError(f"run {run_id} has neither {AGENT_BASIS} rows (score agent traces with a verifier) nor "
                             f"{ANSWER_BASIS} rows (answers scored against reference answers); name the metric "
                             "that decides a failure with --metric")
    elif metric not in have:
        raise InputError(f"--metric {metric}: run {run_id} has no such rows; it has {', '.join(sorted(have))}")
    t = store.results(run_id, metrics=[metric])
    qids = t["query_id"].to_pylist()
    trials = t["trial"].to_pylist()
    strata = t["stratum"].to_pylist()
    vals = np.array([np.nan if v is None else v for v in t["value"].to_pylist()], dtype=np.float64)
    defined = ~np.isnan(vals)
    fail = defined & (vals < below)
    rows = sorted((qids[i], int(trials[i]), strata[i] or "(none)") for i in np.flatnonzero(fail))
    per: dict[str, int] = {}
    for _, _, s in rows:
        per[s] = per.get(s, 0) + 1
    return Failures(metric, float(below), rows, len(vals), int((~defined).sum()), dict(sorted(per.items())))


def sample_failures(failures: Failures, sample: int = 10, by: str = "stratum", seed: int = 0
                    ) -> list[tuple[str, int, str]]:
    """``sample`` failing rows, spread round-robin across strata after a seeded shuffle within each."""
    if not isinstance(sample, int) or isinstance(sample, bool) or sample < 1:
        raise InputError(f"--sample {sample!r}: give a whole number >= 1")
    if by not in BY_CHOICES:
        raise InputError(f"--by {by!r}: use one of {', '.join(BY_CHOICES)}")
    rng = np.random.default_rng(seed)
    if by == "none":
        rows = failures.rows
        return [rows[i] for i in rng.permutation(len(rows))[:sample]]
    groups: dict[str, list[tuple[str, int, str]]] = {}
    for r in failures.rows:
        groups.setdefault(r[2], []).append(r)
    queues = [[g[i] for i in rng.permutation(len(g))] for _, g in sorted(groups.items())]
    out: list[tuple[str, int, str]] = []
    depth = 0
    while len(out) < sample and any(depth < len(q) for q in queues):
        for q in queues:
            if depth < len(q) and len(out) < sample:
                out.append(q[depth])
        depth += 1
    return out


def _units(units: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"unit_id": u.unit_id, "doc_id": u.doc_id, "start": u.start, "end": u.end, "rank": u.rank,
             "score": u.score, "text": u.text} for u in units]


def transcript(trace: Any, key: tuple[str, int, str], item: Any, verdict: Mapping[str, float | None]) -> dict:
    """One transcript as plain data (what the renderers and ``--json`` show)."""
    qid, trial, stratum = key
    out: dict[str, Any] = {"query_id": qid, "trial": trial, "stratum": stratum, "verdict": dict(verdict),
                           "reference": getattr(item, "reference_answer", None) if item is not None else None,
                           "reference_known": item is not None}
    if trace is None:
        out.update(found=False, question=getattr(item, "question", None))
        return out
    steps = []
    for i, s in enumerate(trace.steps, 1):
        steps.append({"step": i, "kind": s.kind, "name": s.name, "arguments": s.arguments, "query": s.query,
                      "hop": s.hop, "result": s.result, "result_digest": s.result_digest, "units": _units(s.units),
                      "error": s.error, "duration_ms": s.duration_ms, "tokens_in": s.tokens_in,
                      "tokens_out": s.tokens_out, "cost": s.cost})
    out.update(found=True, question=trace.question or getattr(item, "question", None),
               claimed_success=trace.claimed_success, outcome=trace.outcome, answer=trace.answer, error=trace.error,
               citations=[c.unit_id for c in trace.citations], cost=trace.cost, tokens_in=trace.tokens_in,
               tokens_out=trace.tokens_out, total_ms=trace.durations_ms.get("total"),
               workdir=(trace.meta or {}).get("workdir"), steps=steps,
               context=[] if trace.steps else _units(trace.packed))
    return out


def build_transcripts(store, run_ref: str, *, sample: int = 10, by: str = "stratum", seed: int = 0,
                      metric: str | None = None, below: float = DEFAULT_BELOW, golden: Any = None,
                      traces_path: str | Path | None = None) -> dict:
    """The sampled failures of a stored run as transcripts, with the counts behind the sample.

    Traces are read where the run keeps them (:func:`ragassay.analysis.pool.traces_path`) unless
    ``traces_path`` is given; ``golden`` (a GoldenSet) supplies the reference answers. A sampled row whose
    trace is missing is kept and counted (``missing_traces``), never dropped."""
    from ragassay.analysis.pool import NO_TRACES
    from ragassay.analysis.pool import traces_path as recorded
    from ragassay.trace.io import read_traces

    rec = store.get_run(run_ref)
    fails = find_failures(store, rec.run_id, metric, below)
    chosen = sample_failures(fails, sample, by, seed)
    path = Path(traces_path) if traces_path is not None else recorded(rec)
    if path is None:
        raise InputError(f"run {rec.name} ({rec.run_id}) {NO_TRACES}; or pass the trace file with --traces")
    if not path.is_file():
        raise InputError(f"{path}: the traces of run {rec.name} are not there; pass them with --traces")
    _, traces, problems = read_traces(path)
    by_key = {(t.query_id, t.trial): t for t in traces}
    keys = [(q, t) for q, t, _ in chosen]
    shown = [m for m in SHOWN_METRICS if m in set(store.metrics(rec.run_id))]
    shown += sorted(m for m in store.metrics(rec.run_id) if m.startswith("hop_sufficiency@"))
    values: dict[tuple[str, int], dict[str, float | None]] = {k: {} for k in keys}
    if keys:
        t = store.results(rec.run_id, metrics=shown)
        for q, tr, m, v in zip(t["query_id"].to_pylist(), t["trial"].to_pylist(), t["metric"].to_pylist(),
                               t["value"].to_pylist(), strict=True):
            undefined = v is None or (isinstance(v, float) and math.isnan(v))
            if (q, int(tr)) in values and not (undefined and m.startswith("hop_sufficiency@")):
                # a hop the item does not have is left out; any other undefined verdict is shown as such
                values[(q, int(tr))][m] = None if undefined else v
    items = []
    for k in chosen:
        item = golden[k[0]] if golden is not None and k[0] in golden else None
        items.append(transcript(by_key.get((k[0], k[1])), k, item, values[(k[0], k[1])]))
    return {"kind": "transcripts", "run_id": rec.run_id, "run_name": rec.name, "basis": fails.basis,
            "below": fails.below, "by": by, "seed": seed, "sample": sample, "n_rows": fails.n_rows,
            "n_failures": len(fails.rows), "n_undefined": fails.n_undefined, "failures_per_stratum": fails.per_stratum,
            "shown": len(items), "missing_traces": sum(1 for x in items if not x["found"]),
            "trace_problems": len(problems), "traces_path": str(path), "references": golden is not None,
            "transcripts": items}


# ---- rendering ----------------------------------------------------------------------------------------------
def _num(x: Any, fmt: str = "{:.4g}") -> str:
    return "undefined" if x is None else fmt.format(x)


def _verdict_text(v: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {_num(x)}" for k, x in v.items()) or "no verdict rows"


def _claim_text(t: Mapping[str, Any]) -> str:
    c = t.get("claimed_success")
    return "claimed success" if c is True else "claimed failure" if c is False else "no claim"


def _args(a: Mapping[str, Any]) -> str:
    return json.dumps(a, ensure_ascii=False, sort_keys=True)


def _reference(t: Mapping[str, Any]) -> str:
    if not t["reference_known"]:
        return "not shown (pass --golden)"
    return t["reference"] if t["reference"] is not None else "none in the golden set"


_CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:70em;padding:0 1em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em;border-top:1px solid #ccc;padding-top:1em}
.meta{color:#555}.bad{color:#a40000;font-weight:600}.ok{color:#1a6e1a;font-weight:600}
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #ddd;padding:.25em .5em;vertical-align:top;
text-align:left}pre{white-space:pre-wrap;margin:0;font:12px/1.4 ui-monospace,monospace}
.unit{margin:.2em 0 .2em 1.5em;color:#333}.step{margin:.6em 0}.err{color:#a40000}"""


def render_html(rep: Mapping[str, Any]) -> str:
    """A self-contained page (inline CSS, no scripts); every piece of stored text is HTML-escaped."""
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f'<meta name="generator" content="{GENERATOR_TAG}">',
           f"<title>Transcripts: {e(rep['run_name'])}</title><style>{_CSS}</style></head><body>",
           f"<h1>Failure transcripts of run {e(rep['run_name'])} ({e(rep['run_id'])})</h1>",
           f"<p class=\"meta\">{_summary_line(rep, e)}</p>"]
    for n, t in enumerate(rep["transcripts"], 1):
        out.append(f"<h2>{n}. {e(t['query_id'])} trial {t['trial']} <span class=\"meta\">stratum "
                   f"{e(t['stratum'])}</span></h2>")
        out.append("<table>")
        out.append(f"<tr><th>question</th><td>{e(t.get('question') or '')}</td></tr>")
        out.append(f"<tr><th>reference</th><td>{e(_reference(t))}</td></tr>")
        if not t["found"]:
            out.append("<tr><th>trace</th><td class=\"bad\">not found in the run's trace file</td></tr></table>")
            continue
        cls = "bad" if t.get("claimed_success") else "meta"
        out.append(f"<tr><th>agent's claim</th><td class=\"{cls}\">{e(_claim_text(t))}</td></tr>")
        out.append(f"<tr><th>verdict</th><td>{e(_verdict_text(t['verdict']))}</td></tr>")
        out.append(f"<tr><th>answer</th><td>{e(t['answer'] if t['answer'] is not None else '(none)')} "
                   f"<span class=\"meta\">({e(t['outcome'] or 'no outcome')})</span></td></tr>")
        if t.get("error"):
            out.append(f"<tr><th>error</th><td class=\"err\">{e(t['error'])}</td></tr>")
        out.append(f"<tr><th>cost</th><td>{e(_cost_line(t))}</td></tr>")
        if t.get("workdir"):
            out.append(f"<tr><th>working directory</th><td><code>{e(t['workdir'])}</code></td></tr>")
        out.append("</table>")
        for s in t["steps"]:
            head = (f"<b>step {s['step']}</b> {e(s['kind'])} <code>{e(s['name'])}</code>"
                    + (f" hop {s['hop']}" if s["hop"] is not None else "")
                    + f" <code>{e(_args(s['arguments']))}</code> <span class=\"meta\">{e(_step_cost(s))}</span>")
            out.append(f"<div class=\"step\">{head}")
            if s["error"]:
                out.append(f"<div class=\"err\">error: {e(s['error'])}</div>")
            if s["result"] is not None:
                out.append(f"<div class=\"unit\"><pre>{e(s['result'])}</pre></div>")
            for u in s["units"]:
                out.append(f"<div class=\"unit\">#{u['rank'] or '-'} <code>{e(u['unit_id'])}</code> "
                           f"{e(u['doc_id'])} [{u['start']}, {u['end']}) score {_num(u['score'])}"
                           f"<pre>{e(u['text'] or '')}</pre></div>")
            out.append("</div>")
        if t["context"]:
            out.append("<div class=\"step\"><b>context</b>")
            for u in t["context"]:
                out.append(f"<div class=\"unit\"><code>{e(u['unit_id'])}</code> {e(u['doc_id'])} "
                           f"[{u['start']}, {u['end']})<pre>{e(u['text'] or '')}</pre></div>")
            out.append("</div>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _summary_line(rep: Mapping[str, Any], esc=lambda s: s) -> str:
    per = ", ".join(f"{esc(k)} {v}" for k, v in rep["failures_per_stratum"].items()) or "none"
    return esc(f"{rep['shown']} of {rep['n_failures']} failures ({rep['basis']} below {rep['below']:g}; "
               f"{rep['n_undefined']} of {rep['n_rows']} rows undefined) sampled by {rep['by']} with seed "
               f"{rep['seed']}; {rep['missing_traces']} missing trace(s). Failures per stratum: ") + per


def _cost_line(t: Mapping[str, Any]) -> str:
    cost = "undefined" if t.get("cost") is None else f"${t['cost']:.6f}"
    ms = "undefined" if t.get("total_ms") is None else f"{t['total_ms']:.1f} ms"
    return (f"{cost}, {t.get('tokens_in') if t.get('tokens_in') is not None else '?'} tokens in, "
            f"{t.get('tokens_out') if t.get('tokens_out') is not None else '?'} out, {ms}, {len(t['steps'])} step(s)")


def _step_cost(s: Mapping[str, Any]) -> str:
    parts = []
    if s["duration_ms"] is not None:
        parts.append(f"{s['duration_ms']:.2f} ms")
    if s["tokens_in"] is not None:
        parts.append(f"{s['tokens_in']} in / {s['tokens_out']} out")
    if s["cost"] is not None:
        parts.append(f"${s['cost']:.6f}")
    return ", ".join(parts)


def render_markdown(rep: Mapping[str, Any]) -> str:
    """The same transcripts as Markdown; stored text is escaped (:func:`ragassay._markdown.md_escape`)."""
    m = md_escape
    out = [f"<!-- {GENERATOR_TAG} -->", f"# Failure transcripts of run {m(rep['run_name'])} ({m(rep['run_id'])})",
           "", m(_summary_line(rep)), ""]
    for n, t in enumerate(rep["transcripts"], 1):
        out += [f"## {n}. {m(t['query_id'])} trial {t['trial']} (stratum {m(t['stratum'])})", "",
                f"- question: {m(t.get('question') or '')}", f"- reference: {m(_reference(t))}"]
        if not t["found"]:
            out += ["- trace: not found in the run's trace file", ""]
            continue
        out += [f"- agent's claim: {m(_claim_text(t))}", f"- verdict: {m(_verdict_text(t['verdict']))}",
                f"- answer: {m(t['answer'] if t['answer'] is not None else '(none)')} ({m(t['outcome'] or 'no outcome')})",
                f"- cost: {m(_cost_line(t))}"]
        if t.get("error"):
            out.append(f"- error: {m(t['error'])}")
        out.append("")
        for s in t["steps"]:
            hop = f" hop {s['hop']}" if s["hop"] is not None else ""
            out.append(f"{s['step']}. {m(s['kind'])} {m(s['name'])}{hop} {m(_args(s['arguments']))} "
                       f"({m(_step_cost(s))})")
            if s["error"]:
                out.append(f"    - error: {m(s['error'])}")
            if s["result"] is not None:
                out.append(f"    - result: {m(s['result'])}")
            for u in s["units"]:
                out.append(f"    - \\#{u['rank'] or '-'} {m(u['unit_id'])} ({m(u['doc_id'])}): {m(u['text'] or '')}")
        for u in t["context"]:
            out.append(f"- context {m(u['unit_id'])} ({m(u['doc_id'])}): {m(u['text'] or '')}")
        out.append("")
    return "\n".join(out) + "\n"


def render_text(rep: Mapping[str, Any]) -> str:
    """A plain-text form for the terminal (printed without markup)."""
    out = [f"Failure transcripts of run {rep['run_name']} ({rep['run_id']})", _summary_line(rep)]
    for n, t in enumerate(rep["transcripts"], 1):
        out += ["", f"[{n}] {t['query_id']} trial {t['trial']} (stratum {t['stratum']})",
                f"  question:  {t.get('question') or ''}", f"  reference: {_reference(t)}"]
        if not t["found"]:
            out.append("  trace: not found in the run's trace file")
            continue
        out += [f"  claim:     {_claim_text(t)}", f"  verdict:   {_verdict_text(t['verdict'])}",
                f"  answer:    {t['answer'] if t['answer'] is not None else '(none)'} ({t['outcome'] or 'no outcome'})",
                f"  cost:      {_cost_line(t)}"]
        if t.get("error"):
            out.append(f"  error:     {t['error']}")
        for s in t["steps"]:
            hop = f" hop {s['hop']}" if s["hop"] is not None else ""
            out.append(f"  {s['step']:>2}. {s['kind']} {s['name']}{hop} {_args(s['arguments'])} ({_step_cost(s)})")
            if s["error"]:
                out.append(f"      error: {s['error']}")
            if s["result"] is not None:
                out.append(f"      -> {' '.join(s['result'].split())}")
            for u in s["units"]:
                out.append(f"      #{u['rank'] or '-'} {u['unit_id']}: {' '.join((u['text'] or '').split())}")
        for u in t["context"]:
            out.append(f"  context {u['unit_id']}: {' '.join((u['text'] or '').split())}")
    return "\n".join(out) + "\n"


def is_transcripts_file(path: Path) -> bool:
    """Whether ``path`` is an earlier transcripts page this module wrote (safe to overwrite)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return GENERATOR_TAG.encode() in head
