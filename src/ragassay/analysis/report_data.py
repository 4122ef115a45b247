"""The data behind the HTML report, assembled from the store (rows), the traces and the golden set.

Everything here is plain JSON-able data; :func:`ragassay.report.render_report` only renders it.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import numpy as np

from ragassay import __version__
from ragassay.analysis.compare import Comparison, run_pins
from ragassay.analysis.summary import STAGES, run_summary, stage_of
from ragassay.golden import EvidenceIndex, GoldenSet, HitRule
from ragassay.trace import read_traces

STAGE_METRICS = ("recall@bm25_depth", "recall@dense_depth", "recall@fusion_depth", "recall@final_k",
                 "ndcg@final_k", "rr@final_k", "recall@context", "context_tokens", "answer_f1", "answer_em",
                 "abstention_recall", "over_refusal", "refused", "error", "citation_validity")
FOREST_METRIC = "recall@final_k"
STRATUM_ROWS_METRICS = ("recall@fusion_depth", "recall@final_k", "ndcg@final_k", "answer_f1")
MAX_RETRIEVED_SHOWN = 5
MAX_TEXT = 400


def _num(x) -> float | None:
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"


def pins_of(rec, metrics=()) -> dict:
    """A run's pins for the report; ``metrics`` (its metric names) adds the derived cutoffs and final_k."""
    derived = run_pins(rec, metrics)
    return {"dataset_version": rec.dataset_version, "corpus_digest": rec.corpus_digest,
            "config_sha": rec.config_sha, "metric_version": rec.metric_version, "hit_rule": rec.hit_rule,
            "gain": rec.gain, "relevance_threshold": rec.relevance_threshold, "ties": rec.ties,
            "cutoffs": list(derived["cutoffs"]) if derived["cutoffs"] else None, "final_k": derived["final_k"],
            "git_sha": rec.git_sha, "trials": rec.trials, "source": rec.source}


def load_run_traces(rec, traces_dir: str | Path | None = None) -> tuple[dict, str | None]:
    """(query_id, trial) -> Trace for a run, and why they are unavailable (None when they loaded).

    The traces are ``<folder>/<run_id>.jsonl`` in ``traces_dir``, else in the folder recorded with the run."""
    folder = traces_dir or (rec.extra or {}).get("traces_dir")
    if not folder:
        return {}, (f"run {rec.name}: no traces folder was recorded with the run and none was given; "
                    f"pass --traces-dir (the folder `ragassay run --traces-dir` wrote)")
    folder = Path(folder)
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        return {}, f"run {rec.name}: traces folder {folder} {what}; pass --traces-dir"
    path = folder / f"{rec.run_id}.jsonl"
    if not path.is_file():
        return {}, f"run {rec.name}: no {path.name} in {folder}; pass the --traces-dir that holds it"
    _, traces, problems = read_traces(path, strict=False)
    by_key = {t.key: t for t in traces}
    if problems:
        return by_key, (f"run {rec.name}: {len(problems)} malformed record(s) in {path} were skipped "
                        f"(first: line {problems[0].line}: {problems[0].message})")
    return by_key, None


def build_report_data(store, run_ids: list[str], golden: GoldenSet, corpus, *,
                      comparisons: list[Comparison] = (), gate=None, oracle_ladder: dict | None = None,
                      traces_dir: str | Path | None = None, title: str = "ragassay report") -> dict:
    recs = [store.get_run(r) for r in run_ids]
    names = [r.name for r in recs]
    summaries = {r.run_id: run_summary(store.results(r.run_id)) for r in recs}
    data: dict = {
        "title": title,
        "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "ragassay_version": __version__,
        "runs": [{"run_id": r.run_id, "name": r.name, "pins": pins_of(r, store.metrics(r.run_id)),
                  "config": r.config} for r in recs],
        "manifest": golden.manifest,
    }
    # stage table
    by_run = {r.run_id: {m["metric"]: m for m in summaries[r.run_id]["metrics"]} for r in recs}
    present = {m for r in recs for m in by_run[r.run_id]}
    order = {m: i for i, m in enumerate(STAGE_METRICS)}
    all_metrics = sorted(present, key=lambda m: (STAGES.index(stage_of(m)), order.get(m, len(order)), m))
    rows = []
    for m in all_metrics:
        cells = [by_run[r.run_id].get(m) for r in recs]
        stage = next(c["stage"] for c in cells if c)
        rows.append({"stage": stage, "metric": m, "values": [_num(c["mean"]) if c else None for c in cells],
                     "n_defined": [c["n_defined"] if c else 0 for c in cells],
                     "n_undefined": [c["n_undefined"] if c else 0 for c in cells]})
    data["stage_table"] = {"runs": names, "rows": rows}
    # per-stratum table on the forest metric (fall back to answer_f1 for runs without retrieval)
    strata_metric = FOREST_METRIC if any(FOREST_METRIC in by_run[r.run_id] for r in recs) else "answer_f1"
    strata = golden.manifest.get("strata", {})
    cell = {(r.run_id, p["stratum"]): p for r in recs for p in summaries[r.run_id]["per_stratum"]
            if p["metric"] == strata_metric}
    data["strata_table"] = {"runs": names, "metric": strata_metric, "rows": [
        {"stratum": s, "n": n, "values": [_num(cell[(r.run_id, s)]["mean"]) if (r.run_id, s) in cell else None
                                          for r in recs]} for s, n in strata.items()]}
    # comparisons, forest
    if comparisons:
        # every metric overall, and per stratum only the headline metrics (the full table is `compare --json`)
        data["comparisons"] = [{"baseline": c.run_a.name, "candidate": c.run_b.name,
                                "rows": [r.to_dict() for r in c.rows
                                         if r.stratum == "all" or r.metric in STRATUM_ROWS_METRICS],
                                "claims": c.claims,
                                "pin_differences": [{"pin": k, "a": a, "b": b} for k, a, b in c.pin_differences],
                                "excluded": [{"metric": m, "reason": why} for m, why in c.excluded],
                                "config_diff": [{"key": k, "a": a, "b": b} for k, a, b in c.config_diff]}
                               for c in comparisons]
        forest = []
        for c in comparisons:
            frows = [{"stratum": r.stratum, "delta": _num(r.delta), "ci_low": _num(r.ci_low),
                      "ci_high": _num(r.ci_high), "n": r.n} for r in c.rows if r.metric == FOREST_METRIC]
            if frows:
                forest.append({"label": f"{c.run_b.name} vs {c.run_a.name}", "rows": frows})
        if forest:
            data["forest"] = {"metric": FOREST_METRIC, "comparisons": forest}
    traces, unavailable = {}, []
    for r in recs:
        traces[r.run_id], why = load_run_traces(r, traces_dir)
        if why:
            unavailable.append({"run": r.name, "reason": why})
    # a run without traces still has its rows; what its traces would show is marked unavailable, with why
    data["warnings"] = [u["reason"] for u in unavailable]
    data["traces_unavailable"] = unavailable
    idx = EvidenceIndex(golden)
    _curves_and_movement(data, recs, traces, golden, idx)
    data["rerank_movement"] = [_movement(store, r) for r in recs if "rerank_rescued" in by_run[r.run_id]]
    data["abstention"] = [_abstention(r, by_run[r.run_id], store) for r in recs
                          if "abstention_recall" in by_run[r.run_id]]
    data["latency"] = [{"run": r.name, "values_ms": _latencies(store, r.run_id)} for r in recs]
    if oracle_ladder:
        data["oracle_ladder"] = oracle_ladder
    if gate is not None:
        data["gate"] = {"verdict": gate.verdict, "baseline": gate.comparison.run_a.name,
                        "candidate": gate.comparison.run_b.name,
                        "checks": [{"name": c.name, "kind": c.kind, "verdict": c.verdict, "detail": c.detail}
                                   for c in gate.checks]}
    data["queries"], data["worst_regressions"] = _queries(store, recs, traces, golden, corpus, idx, comparisons)
    return data


def _curves_and_movement(data, recs, traces, golden, idx) -> None:
    curves = []
    for r in recs:
        tr = traces[r.run_id]
        if not tr:
            continue
        lists, keys = [], []
        for q in golden.queries:
            t = tr.get((q.query_id, 0))
            if t is None or not (t.fused or t.reranked):
                continue
            lists.append(t.reranked if t.reranked is not None else t.fused)
            keys.append(q.query_id)
        if not lists:
            continue
        depth = max(len(x) for x in lists)
        thr = r.relevance_threshold or 2
        hits = np.zeros((len(lists), depth))
        n_rel = np.zeros(len(lists))
        for i, (qid, units) in enumerate(zip(keys, lists, strict=True)):
            rel = [e for e in golden[qid].evidence if e.grade >= thr]
            n_rel[i] = len(rel)
            if not rel or not units:
                continue
            unit_i, ev_i = idx.hit_pairs(idx.encode([qid] * len(units), [u.doc_id for u in units]),
                                         [u.start for u in units], [u.end for u in units], HitRule.parse(r.hit_rule))
            first: dict[int, int] = {}
            for u, e in zip(unit_i.tolist(), ev_i.tolist(), strict=True):
                if idx.grade[e] >= thr:
                    first[e] = min(first.get(e, depth), u)
            for rank in first.values():
                hits[i, rank] += 1
        ok = n_rel > 0
        if not ok.any():
            continue
        cum = np.cumsum(hits[ok], axis=1) / n_rel[ok, None]
        ks = [k for k in (1, 2, 3, 5, 10, 20, 30, 50, 100) if k <= depth]
        curves.append({"run": r.name, "k": ks, "recall": [float(cum[:, k - 1].mean()) for k in ks]})
    data["recall_curves"] = curves


def _movement(store, rec) -> dict:
    names = ("rescued", "broke", "kept", "missed_both")
    cols = store.results(rec.run_id, metrics=[f"rerank_{n}" for n in names]).to_pydict()
    counts = dict.fromkeys(names, 0)
    for m, v in zip(cols["metric"], cols["value"], strict=True):
        if v:
            counts[m.removeprefix("rerank_")] += int(v)
    final_k = ((rec.config or {}).get("reranker") or {}).get("final_k")
    return {"run": rec.name, "final_k": final_k, **counts}


def _abstention(rec, metrics: dict, store) -> dict:
    cols = store.results(rec.run_id, metrics=["abstention_recall", "over_refusal", "refused", "error"]).to_pydict()
    ab = [v for m, v in zip(cols["metric"], cols["value"], strict=True) if m == "abstention_recall" and v is not None]
    ov = [v for m, v in zip(cols["metric"], cols["value"], strict=True) if m == "over_refusal" and v is not None]
    tp, fp = sum(ab), sum(ov)
    return {"run": rec.name, "abstention_recall": _num(metrics["abstention_recall"]["mean"]),
            "over_refusal": _num(metrics.get("over_refusal", {}).get("mean")),
            "abstention_precision": (tp / (tp + fp)) if (tp + fp) else None,
            "n_negative": len(ab), "n_answerable": len(ov),
            "refused": int(sum(v or 0 for m, v in zip(cols["metric"], cols["value"], strict=True) if m == "refused")),
            "errors": int(sum(v or 0 for m, v in zip(cols["metric"], cols["value"], strict=True) if m == "error"))}


def _latencies(store, run_id: str) -> list[float]:
    cols = store.results(run_id).to_pydict()
    seen, out = set(), []
    for q, t, lat in zip(cols["query_id"], cols["trial"], cols["latency_ms"], strict=True):
        if (q, t) not in seen:
            seen.add((q, t))
            if lat is not None:
                out.append(float(lat))
    return out


def _queries(store, recs, traces, golden: GoldenSet, corpus, idx, comparisons):
    per_run_values = {}
    for r in recs:
        cols = store.results(r.run_id).to_pydict()
        vals: dict[str, dict[str, float | None]] = {}
        for q, t, m, v in zip(cols["query_id"], cols["trial"], cols["metric"], cols["value"], strict=True):
            if t == 0:
                vals.setdefault(q, {})[m] = _num(v)
        per_run_values[r.run_id] = vals
    worst: dict[str, dict] = {}
    for c in comparisons:
        va, vb = per_run_values.get(c.run_a.run_id, {}), per_run_values.get(c.run_b.run_id, {})
        for q in golden.queries:
            a = (va.get(q.query_id) or {}).get(FOREST_METRIC)
            b = (vb.get(q.query_id) or {}).get(FOREST_METRIC)
            if a is None or b is None:
                continue
            d = b - a
            if q.query_id not in worst or d < worst[q.query_id]["delta"]:
                worst[q.query_id] = {"metric": FOREST_METRIC, "baseline": c.run_a.name, "candidate": c.run_b.name,
                                     "delta": d}
    out = []
    for q in golden.queries:
        ev = [{"doc_id": e.doc_id, "start": e.start, "end": e.end, "grade": e.grade,
               "text": _clip(corpus[e.doc_id].text[e.start:e.end])} for e in q.evidence]
        runs = {}
        for r in recs:
            t = traces[r.run_id].get((q.query_id, 0))
            retrieved = []
            if t is not None:
                units = (t.reranked if t.reranked is not None else t.fused) or t.packed
                units = units[:MAX_RETRIEVED_SHOWN]
                if units:
                    grades, _ = idx.grades([q.query_id] * len(units), [u.doc_id for u in units],
                                           [u.start for u in units], [u.end for u in units],
                                           HitRule.parse(r.hit_rule))
                    for rank, (u, g) in enumerate(zip(units, grades.tolist(), strict=True), 1):
                        text = corpus[u.doc_id].text[u.start:u.end] if u.doc_id in corpus else (u.text or "")
                        retrieved.append({"rank": rank, "doc_id": u.doc_id, "start": u.start, "end": u.end,
                                          "grade": g, "text": _clip(text)})
            runs[r.name] = {"outcome": t.outcome if t else None, "answer": t.answer if t else None,
                            "metrics": per_run_values[r.run_id].get(q.query_id, {}), "retrieved": retrieved}
        w = worst.get(q.query_id)
        out.append({"query_id": q.query_id, "stratum": q.stratum, "question": q.question,
                    "answerable": q.answerable, "evidence": ev, "runs": runs,
                    "worst_delta": w if w and w["delta"] < 0 else None})
    ranked = sorted((q for q in out if q["worst_delta"]), key=lambda q: q["worst_delta"]["delta"])
    return out, [q["query_id"] for q in ranked[:10]]

