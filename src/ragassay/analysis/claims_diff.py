"""A claim-by-claim diff of two runs judged for claims (``ragassay analyze claims A B``).

Per (query, trial) present in both runs, the response claims are matched by text (whitespace folded,
case-folded): a claim only B states is **gained**, one only A states is **lost**, one both state whose status
moved is **changed**. A response claim's status is its correctness against the reference (entailed, neutral,
contradicted), its strongest verdict against the retrieved units (entailed before contradicted before neutral)
and its five-way class (:data:`ragassay.metrics.claims.BREAKDOWN`, undefined without a reference). The
reference's own (ground-truth) claims are diffed too: whether a unit retrieved it and whether the answer
states it. Each claim carries the unit that supports it — doc_id, the verified span and a text excerpt
(:func:`ragassay.metrics.claims.support_of`).

Refused: runs over different golden-set versions, a run not judged for claims (the message names the
command), runs judged for claims under different pins (judge, rubric, relevance rule), and runs whose judged
(query, trial) pairs differ.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from ragassay._markdown import md_escape
from ragassay.errors import InputError, PinMismatchError
from ragassay.metrics.claims import BREAKDOWN, VERDICTS, ClaimTable, claim_classes, relevant_units, support_of

EXCERPT_CHARS = 160
_STRENGTH = {"entailed": 2, "contradicted": 1, "neutral": 0}
_PIN_KEYS = ("judge_model", "rubric_sha", "prompt_sha", "settings", "relevance")


def _key(text: str) -> str:
    return " ".join(text.split()).casefold()


def _excerpt(t: ClaimTable, unit: int, start: int, end: int, limit: int) -> str:
    if not t.unit_texts:
        return ""
    base = int(t.unit_spans[unit, 0])
    text = t.unit_texts[unit][start - base:end - base]
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _support(t: ClaimTable, side: str, i: int, relevance: str, limit: int) -> dict | None:
    s = support_of(t, side, i, relevance)
    if s is None:
        return None
    unit, doc, start, end = s
    rel = relevant_units(t, relevance)
    return {"unit_id": t.unit_ids[unit], "doc_id": doc, "start": start, "end": end,
            "relevant": None if rel is None else bool(rel[unit]), "excerpt": _excerpt(t, unit, start, end, limit)}


def _response_status(t: ClaimTable, relevance: str, classes: np.ndarray | None) -> list[dict]:
    out = []
    for i, claim in enumerate(t.response_claims):
        row = t.response_units[i]
        best = max((VERDICTS[c] for c in row), key=_STRENGTH.__getitem__, default="neutral")
        out.append({"claim": claim, "correct": VERDICTS[t.response_vs_reference[i]] if t.has_reference else None,
                    "context": best, "class": None if classes is None else BREAKDOWN[int(classes[i])]})
    return out


def _gt_status(t: ClaimTable) -> list[dict]:
    return [{"claim": c, "retrieved": bool((t.gt_units[i] == VERDICTS.index("entailed")).any()),
             "in_answer": VERDICTS[t.gt_vs_response[i]]} for i, c in enumerate(t.gt_claims)]


def diff_tables(a: ClaimTable, b: ClaimTable, relevance: str, limit: int = EXCERPT_CHARS) -> dict[str, Any]:
    """The diff of one (query, trial): claims gained, lost and changed from ``a`` to ``b``, and the reference
    claims whose retrieval or presence in the answer changed (module docstring)."""
    ca, _ = claim_classes(a, relevance)
    cb, _ = claim_classes(b, relevance)
    sa, sb = _response_status(a, relevance, ca), _response_status(b, relevance, cb)
    ia = {_key(s["claim"]): i for i, s in enumerate(sa)}
    ib = {_key(s["claim"]): i for i, s in enumerate(sb)}
    gained = [{**sb[i], "support": _support(b, "response", i, relevance, limit)} for k, i in ib.items() if k not in ia]
    lost = [{**sa[i], "support": _support(a, "response", i, relevance, limit)} for k, i in ia.items() if k not in ib]
    changed = []
    for k, i in ia.items():
        j = ib.get(k)
        if j is None:
            continue
        was, now = sa[i], sb[j]
        moved = [f for f in ("correct", "context", "class") if was[f] != now[f]]
        if moved:
            changed.append({"claim": now["claim"], "fields": moved, "a": {f: was[f] for f in moved},
                            "b": {f: now[f] for f in moved},
                            "support_a": _support(a, "response", i, relevance, limit),
                            "support_b": _support(b, "response", j, relevance, limit)})
    # one judge extracts the same reference claims for both runs (an LLM's from the cache), so they pair by text
    ga, gb = _gt_status(a), _gt_status(b)
    gi = {_key(x["claim"]): i for i, x in enumerate(gb)}
    reference = []
    for i, x in enumerate(ga):
        j = gi.get(_key(x["claim"]))
        if j is None:
            continue
        y = gb[j]
        moved = [f for f in ("retrieved", "in_answer") if x[f] != y[f]]
        if moved:
            reference.append({"claim": y["claim"], "fields": moved, "a": {f: x[f] for f in moved},
                              "b": {f: y[f] for f in moved}, "support_b": _support(b, "gt", j, relevance, limit),
                              "support_a": _support(a, "gt", i, relevance, limit)})
    return {"query_id": a.query_id, "trial": a.trial, "gained": gained, "lost": lost, "changed": changed,
            "reference": reference, "response_claims": [len(a.response_claims), len(b.response_claims)]}


def _require_claims(rec) -> dict:
    pins = (rec.extra or {}).get("claims_judge")
    if not pins:
        raise InputError(f"run {rec.name} ({rec.run_id}) was not judged for claims; run `ragassay judge claims "
                         f"{rec.name} --judge JUDGE.yaml --store STORE` first (provider local, model lexical works "
                         "offline)")
    return pins


def claims_diff(store, run_a: str, run_b: str, *, excerpt_chars: int = EXCERPT_CHARS) -> dict[str, Any]:
    """The claim-by-claim diff of ``run_a`` → ``run_b`` (module docstring); only queries with a change are
    listed, with totals over every query."""
    from ragassay.judges.claims import stored_tables

    if excerpt_chars < 10:
        raise InputError(f"excerpt length {excerpt_chars} must be at least 10 characters")
    ra, rb = store.get_run(run_a), store.get_run(run_b)
    if ra.dataset_version != rb.dataset_version:
        raise PinMismatchError(f"runs {ra.name} and {rb.name} were scored on different golden-set versions "
                               f"({ra.dataset_version} and {rb.dataset_version}); a claim diff needs the same "
                               "queries and references")
    pa_, pb = _require_claims(ra), _require_claims(rb)
    differ = [k for k in _PIN_KEYS if pa_.get(k) != pb.get(k)]
    if differ:
        raise PinMismatchError(f"runs {ra.name} and {rb.name} were judged for claims under different pins ("
                               + "; ".join(f"{k} {pa_.get(k)} vs {pb.get(k)}" for k in differ)
                               + "); judge both with the same config (`ragassay judge claims RUN --judge J.yaml "
                                 "--resume` re-scores under one judge)")
    ta, tb = stored_tables(store, ra.run_id), stored_tables(store, rb.run_id)
    only_a, only_b = sorted(set(ta) - set(tb)), sorted(set(tb) - set(ta))
    if only_a or only_b:
        first = (only_a or only_b)[0]
        raise InputError(f"runs {ra.name} and {rb.name} hold claim tables for different queries ({len(only_a)} only "
                         f"in {ra.name}, {len(only_b)} only in {rb.name}; first {first[0]} trial {first[1]}); diff "
                         "runs over the same queries and trials")
    relevance = pa_.get("relevance", "claims")
    queries, totals = [], Counter()
    for key in sorted(ta):
        d = diff_tables(ta[key], tb[key], relevance, excerpt_chars)
        for f in ("gained", "lost", "changed", "reference"):
            totals[f] += len(d[f])
        if d["gained"] or d["lost"] or d["changed"] or d["reference"]:
            queries.append(d)
    return {"run_a": {"run_id": ra.run_id, "name": ra.name}, "run_b": {"run_id": rb.run_id, "name": rb.name},
            "judge": {k: pa_.get(k) for k in _PIN_KEYS}, "relevance": relevance, "compared": len(ta),
            "changed_queries": len(queries), "totals": {f: totals[f] for f in ("gained", "lost", "changed",
                                                                              "reference")},
            "queries": queries}


def _where(s: dict | None) -> str:
    if s is None:
        return "no supporting unit"
    rel = "" if s["relevant"] is None else (" relevant" if s["relevant"] else " irrelevant")
    return f"{md_escape(s['doc_id'])}[{s['start']}:{s['end']}]{rel} “{md_escape(s['excerpt'])}”"


def claims_diff_markdown(diff: dict[str, Any]) -> str:
    """The diff as Markdown; every user text escaped."""
    a, b = md_escape(diff["run_a"]["name"]), md_escape(diff["run_b"]["name"])
    t = diff["totals"]
    lines = [f"# Claims: {a} → {b}", "",
             f"{diff['compared']} (query, trial) pairs compared, {diff['changed_queries']} with a change; "
             f"response claims gained {t['gained']}, lost {t['lost']}, changed {t['changed']}; reference claims "
             f"changed {t['reference']}. Judge {md_escape(diff['judge']['judge_model'])}, relevance rule "
             f"{md_escape(diff['relevance'])}.", ""]
    for q in diff["queries"]:
        lines += [f"## {md_escape(q['query_id'])} (trial {q['trial']})", ""]
        for c in q["gained"]:
            lines.append(f"- gained: {md_escape(c['claim'])} — {c['class'] or 'unclassified'}; {_where(c['support'])}")
        for c in q["lost"]:
            lines.append(f"- lost: {md_escape(c['claim'])} — {c['class'] or 'unclassified'}; {_where(c['support'])}")
        for c in q["changed"]:
            moves = ", ".join(f"{f} {c['a'][f]} → {c['b'][f]}" for f in c["fields"])
            lines.append(f"- changed: {md_escape(c['claim'])} — {moves}; now {_where(c['support_b'])}")
        for c in q["reference"]:
            moves = ", ".join(f"{f} {c['a'][f]} → {c['b'][f]}" for f in c["fields"])
            lines.append(f"- reference claim: {md_escape(c['claim'])} — {moves}; now {_where(c['support_b'])}")
        lines.append("")
    return "\n".join(lines)




def claim_breakdowns(store, runs: list[str]) -> dict[str, Any]:
    """Per run judged for claims: the five-way breakdown pooled over every response claim (counts and shares)
    and the mean, defined and undefined count of each of the eleven metrics, for the report's claims section.
    A run not judged for claims is refused with the command to run."""
    from ragassay.judges.claims import stored_tables
    from ragassay.metrics.claims import CLAIM_METRICS, claim_metrics

    out = []
    for ref in runs:
        rec = store.get_run(ref)
        pins = _require_claims(rec)
        tables = list(stored_tables(store, rec.run_id).values())
        scores = claim_metrics(tables, pins.get("relevance", "claims"))
        ok = scores.breakdown[:, 0] >= 0
        counts = scores.breakdown[ok].sum(axis=0)
        metrics = {}
        for m in CLAIM_METRICS:
            mean, defined, undefined = scores.mean(m)
            metrics[m] = {"mean": None if np.isnan(mean) else mean, "defined": defined, "undefined": undefined}
        out.append({"run_id": rec.run_id, "name": rec.name, "judge_model": pins.get("judge_model"),
                    "relevance": pins.get("relevance"), "items": len(tables), "items_classified": int(ok.sum()),
                    "claims": int(counts.sum()), "counts": {b: int(c) for b, c in zip(BREAKDOWN, counts, strict=True)},
                    "shares": {b: (float(c) / counts.sum() if counts.sum() else None)
                               for b, c in zip(BREAKDOWN, counts, strict=True)},
                    "metrics": metrics})
    return {"classes": list(BREAKDOWN), "runs": out}


__all__ = ["EXCERPT_CHARS", "claim_breakdowns", "claims_diff", "claims_diff_markdown", "diff_tables"]
