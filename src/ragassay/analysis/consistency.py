"""Self-consistency over repeated trials (spec 34.5, §10.8): pass@1, pass^k, per-item variance, and the
modal-answer fraction and distinct-pair agreement under a stated answer-clustering rule.

Clustering rule ``normalized-exact`` (the default): two answers are the same when their SQuAD-normalized
text is equal (lowercase, no punctuation, no articles, folded whitespace); an abstention is its own answer
``<abstained>``, a refusal ``<refused>``, an error ``<error>`` (as is a stored trial without a trace, as in
scoring). Every trial is clustered, so answers (4 alike) and one refusal give modal fraction 4/5 = 0.8 and
pair agreement (4*3)/(5*4) = 0.6. The pass rates count the trials whose correctness metric is defined (a
refusal or error has no ``answer_f1``). Agreement is reported apart from correctness: identical wrong
answers are perfectly consistent. One trial gives a modal fraction of 1, which is no evidence of
stability, so the repeat count is always reported.
"""

from __future__ import annotations

import numpy as np

from ragassay.analysis.decomposition import DEFAULT_CORRECT, CorrectRule
from ragassay.errors import InputError
from ragassay.metrics.generation import normalize_answer, pass_at_k
from ragassay.stats import modal_fraction, pair_agreement
from ragassay.store import Store

CLUSTER_RULE = "normalized-exact"


def answer_key(answer: str | None, outcome: str | None) -> str:
    """The cluster an answer falls in under :data:`CLUSTER_RULE`."""
    if outcome in ("abstained", "refused", "error"):
        return f"<{outcome}>"
    return normalize_answer(answer or "")


def cluster_counts(keys) -> list[int]:
    """Counts of each distinct cluster key, largest first."""
    _, c = np.unique(np.asarray(list(keys), dtype=object).astype(str), return_counts=True)
    return sorted(c.tolist(), reverse=True)


def consistency_of(passes: dict[str, list[bool]], answers: dict[str, list[str]] | None = None,
                   values: dict[str, list[float]] | None = None, k: int | None = None) -> dict:
    """Per item and on average: pass@1, pass^k (all of the first k trials pass), its unbiased estimate,
    the per-item variance of the pass outcome and of the metric value, modal fraction and pair agreement.

    ``passes`` maps item -> pass/fail per trial with a defined metric; ``answers`` item -> cluster key per
    trial, every trial (optional). An item with answers but no defined pass (every trial refused, say) has
    clusters and undefined (None) pass figures. ``k`` defaults to the smallest count of defined trials."""
    scored = sorted(i for i in passes if passes[i])
    items = sorted(set(scored) | {i for i in answers or {} if answers[i]})
    if not items:
        raise InputError("consistency needs at least one item with trials")
    k = k or min((len(passes[i]) for i in scored), default=1)
    pk = pass_at_k([passes[i] for i in scored], k) if scored else None
    at = {item: j for j, item in enumerate(scored)}
    rows = []
    for item in items:
        j = at.get(item)
        if j is None:
            row = {"item": item, "trials": 0, "pass@1": None, f"pass^{k}": None, "pass_variance": None}
        else:
            row = {"item": item, "trials": int(pk.n_trials[j]), "pass@1": float(pk.pass_at_1[j]),
                   f"pass^{k}": _f(pk.pass_hat_k[j]), "pass_variance": _f(pk.variance[j])}
        if values is not None and item in values:
            v = np.asarray(values[item], dtype=float)
            v = v[~np.isnan(v)]
            row["value_variance"] = float(v.var(ddof=1)) if v.size > 1 else None
        if answers is not None and item in answers and answers[item]:
            c = cluster_counts(answers[item])
            row["clusters"] = c
            row["modal_fraction"] = modal_fraction(c)
            row["pair_agreement"] = pair_agreement(c) if sum(c) > 1 else None
        rows.append(row)

    def mean(key: str):
        v = [r[key] for r in rows if r.get(key) is not None]
        return float(np.mean(v)) if v else None

    summary = {"n_items": len(rows), "k": k, "pass@1": mean("pass@1"), f"pass^{k}": mean(f"pass^{k}"),
               f"pass^{k}_unbiased": _f(float(np.nanmean(pk.pass_hat_k_unbiased)))
               if pk is not None and np.isfinite(pk.pass_hat_k_unbiased).any() else None,
               "mean_pass_variance": mean("pass_variance"), "mean_value_variance": mean("value_variance"),
               "modal_fraction": mean("modal_fraction"), "pair_agreement": mean("pair_agreement"),
               "n_high_variance": sum(1 for r in rows if (r.get("pass_variance") or 0) > 0)}
    return {"cluster_rule": CLUSTER_RULE, "summary": summary, "items": rows}


def _f(x) -> float | None:
    x = float(x)
    return None if np.isnan(x) else x


def consistency_of_run(store: Store, run_ref: str, *, correct: str = DEFAULT_CORRECT, traces=None,
                       k: int | None = None) -> dict:
    """Consistency of a stored run with several trials per query. ``traces`` (by (query, trial)) supply
    the answers to cluster, one per stored trial whatever its outcome (a stored trial without a trace is
    ``<error>``); without them only pass rates and variances are reported."""
    rule = CorrectRule.parse(correct)
    run = store.get_run(run_ref)
    if rule.metric not in store.metrics(run.run_id):
        raise InputError(f"run {run.name!r} has no {rule.metric!r} rows; name another with --correct")
    w = store.results_wide(run.run_id, [rule.metric])
    passes: dict[str, list[bool]] = {}
    values: dict[str, list[float]] = {}
    answers: dict[str, list[str]] = {}
    trials: dict[str, int] = {}
    correct = rule.apply(w.values[:, 0])  # refuses a metric whose values are not scores in [0, 1]
    for q, t, v, ok in zip(w.query_ids, w.trials, w.values[:, 0], correct, strict=True):
        trials[q] = trials.get(q, 0) + 1
        if traces:
            # a refused or errored trial has no metric value but is still an answer of its own
            tr = traces.get((q, int(t)))
            answers.setdefault(q, []).append(answer_key(tr.answer, tr.outcome) if tr is not None else "<error>")
        if not np.isnan(v):
            passes.setdefault(q, []).append(bool(ok))
            values.setdefault(q, []).append(float(v))
    if traces and not any((q, int(t)) in traces for q, t in zip(w.query_ids, w.trials, strict=True)):
        raise InputError(f"the traces given hold none of run {run.name!r}'s stored (query, trial) keys; they are "
                         f"another run's: give the traces this run was scored from")
    if not passes and not answers:
        raise InputError(f"run {run.name!r} has no defined {rule.metric!r} value to assess")
    n_trials = max(trials.values())
    res = consistency_of(passes, answers if traces else None, values, k)
    return {"run": {"run_id": run.run_id, "name": run.name}, "correct_rule": str(rule), "trials": n_trials,
            "answers_clustered": bool(traces), **res,
            "note": None if n_trials > 1 else "one trial per query: rerun with --trials N (N >= 2) to measure "
                                             "consistency; a single answer always agrees with itself"}


def consistency_report_section(store: Store, run_ref: str, *, correct: str = DEFAULT_CORRECT, traces=None) -> dict:
    """Report data for the consistency section: the summary and the 20 highest-variance items."""
    res = consistency_of_run(store, run_ref, correct=correct, traces=traces)
    top = sorted(res["items"], key=lambda r: -(r.get("pass_variance") or 0))[:20]
    return {"kind": "consistency", **{k: v for k, v in res.items() if k != "items"}, "high_variance_items": top}
