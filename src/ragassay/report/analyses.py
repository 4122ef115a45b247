"""Display rows for the report's analysis sections (decomposition, oracle ladder, slices, stage latency,
consistency, attribution, ablation): each view validates its part of the data at the boundary and returns
plain strings; the template escapes them. The data shapes are the ``*_report_section`` outputs of
``ragassay.analysis`` (docs/analyses.md, docs/report.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ragassay.errors import SchemaError
from ragassay.report import fmt, svg

LADDER_COLUMNS = ("recall@fusion_depth", "ndcg@final_k", "recall@context", "correct")


def _fail(path: str, problem: str) -> SchemaError:
    return SchemaError(f"report data: `{path}` {problem}; see docs/report.md for the contract")


def _map(x: object, path: str) -> Mapping:
    if not isinstance(x, Mapping):
        raise _fail(path, f"must be an object, got {type(x).__name__}")
    return x


def _seq(x: object, path: str) -> Sequence:
    if isinstance(x, (str, bytes)) or not isinstance(x, Sequence):
        raise _fail(path, f"must be a list, got {type(x).__name__}")
    return x


def _maps(x: object, path: str) -> list[Mapping]:
    return [_map(v, f"{path}[{i}]") for i, v in enumerate(_seq(x, path))]


def _n(x: object, path: str) -> float | None:
    """A number or None (undefined); anything else is refused."""
    if x is not None and not fmt.is_number(x):
        raise _fail(path, f"must be a number or null, got {x!r}")
    return x


def _stat(s: object, path: str, signed: bool = False) -> dict:
    """A ``{value, ci_low, ci_high, n, defined}`` estimate as display text: "0.660 [0.612, 0.707]", or
    "undefined (n=0)" when the estimate is undefined (an empty cell is never shown as 0)."""
    s = _map(s if s is not None else {}, path)
    v, lo, hi = (_n(s.get(k), f"{path}.{k}") for k in ("value", "ci_low", "ci_high"))
    n = _n(s.get("n"), f"{path}.n")
    show = fmt.signed if signed else fmt.num
    if not fmt.is_defined(v):
        return {"text": fmt.UNDEFINED, "ci": f"n={fmt.num(n)}" if n is not None else "", "undefined": True,
                "cls": "ci-undef"}
    return {"text": show(v), "ci": fmt.ci(lo, hi) if fmt.is_defined(lo) else "", "undefined": False,
            "cls": svg.ci_class(lo, hi, v) if signed else ""}


def decomposition_view(d: object, resamples: object = None) -> dict | None:
    """Per run: A, h, c1, c0 overall and per stratum; per change: ΔA split into delivery and use."""
    d = _map(d, "decomposition")
    runs = []
    for i, r in enumerate(_maps(d.get("runs", []), "decomposition.runs")):
        p = f"decomposition.runs[{i}]"
        rows = []
        for j, row in enumerate(_maps(r.get("rows", []), f"{p}.rows")):
            q = f"{p}.rows[{j}]"
            rows.append({"stratum": str(row.get("stratum", "")), "n": fmt.num(_n(row.get("n"), f"{q}.n")),
                         "n_excluded": fmt.num(_n(row.get("n_excluded"), f"{q}.n_excluded")),
                         "cells": [_stat(row.get(k), f"{q}.{k}") for k in ("A", "h", "c1", "c0")]})
        name = str(_map(r.get("run") or {}, f"{p}.run").get("name", ""))
        runs.append({"name": name, "correct_rule": str(r.get("correct_rule", "")),
                     "delivery_rule": str(r.get("delivery_rule", "")),
                     "overall": [x for x in rows if x["stratum"] == "all"],
                     "strata": [x for x in rows if x["stratum"] != "all"]})
    changes = []
    for i, c in enumerate(_maps(d.get("changes", []), "decomposition.changes")):
        p = f"decomposition.changes[{i}]"
        rows = []
        for j, row in enumerate(_maps(c.get("rows", []), f"{p}.rows")):
            q = f"{p}.rows[{j}]"
            ch = _map(row.get("change") or {}, f"{q}.change")
            a, b = _map(row.get("a") or {}, f"{q}.a"), _map(row.get("b") or {}, f"{q}.b")
            rows.append({"stratum": str(row.get("stratum", "")), "n": fmt.num(_n(ch.get("n"), f"{q}.change.n")),
                         "cells": [_stat(ch.get(k), f"{q}.change.{k}", signed=True)
                                   for k in ("delta_A", "delivery", "use")],
                         "moves": [f"{_stat(a.get(k), f'{q}.a.{k}')['text']} → {_stat(b.get(k), f'{q}.b.{k}')['text']}"
                                   for k in ("h", "c1", "c0")]})
        changes.append({"a": str(_map(c.get("run_a") or {}, f"{p}.run_a").get("name", "")),
                        "b": str(_map(c.get("run_b") or {}, f"{p}.run_b").get("name", "")),
                        "overall": [x for x in rows if x["stratum"] == "all"],
                        "strata": [x for x in rows if x["stratum"] != "all"]})
    skipped = [{"run": str(s.get("run", "")), "reason": str(s.get("reason", ""))}
               for s in _maps(d.get("skipped", []), "decomposition.skipped")]
    if not runs and not skipped:
        return None
    return {"runs": runs, "changes": changes, "skipped": skipped,
            "resamples": fmt.num(_n(d.get("n_resamples", resamples), "decomposition.n_resamples")),
            "correct_rule": runs[0]["correct_rule"] if runs else "",
            "delivery_rule": runs[0]["delivery_rule"] if runs else ""}


def ladder_view(o: Mapping) -> dict:
    """The oracle ladder of ``analysis.decomposition.oracle_ladder``: each rung's stage means with intervals,
    the paired oracle-minus-best-pipeline gap and the diagnosis."""
    rows = []
    for i, r in enumerate(_maps(o.get("rungs", []), "oracle_ladder.rungs")):
        p = f"oracle_ladder.rungs[{i}]"
        rows.append({"config": str(r.get("name", "")), "oracle": bool(r.get("oracle")),
                     "cells": [_stat(r.get(k), f"{p}.{k}") for k in LADDER_COLUMNS]})
    gap = _stat(o["oracle_gap"], "oracle_ladder.oracle_gap", signed=True) if o.get("oracle_gap") else None
    diag = o.get("diagnosis")
    return {"stats": True, "columns": [*LADDER_COLUMNS[:-1], f"correct ({o.get('correct_rule', '')})"],
            "rows": rows, "gap": gap, "best": str(o.get("best_pipeline", "")),
            "diagnosis": str(diag) if diag is not None else None}


def slices_view(items: object) -> list[dict] | None:
    out = []
    for i, s in enumerate(_maps(items, "slices")):
        p = f"slices[{i}]"
        keys = []
        for j, k in enumerate(_maps(s.get("keys", []), f"{p}.keys")):
            q = f"{p}.keys[{j}]"
            rows = []
            for m, r in enumerate(_maps(k.get("slices", []), f"{q}.slices")):
                x = f"{q}.slices[{m}]"
                vals = {f: _n(r.get(f), f"{x}.{f}") for f in ("n", "weight", "mean_a", "mean_b", "delta", "ci_low",
                                                               "ci_high", "p_adj", "contribution")}
                rows.append({"name": str(r.get("name", "")), "n": fmt.num(vals["n"]), "weight": fmt.num(vals["weight"]),
                             "a": fmt.num(vals["mean_a"]), "b": fmt.num(vals["mean_b"]),
                             "delta": fmt.signed(vals["delta"]), "ci": fmt.ci(vals["ci_low"], vals["ci_high"]),
                             "cls": svg.ci_class(vals["ci_low"], vals["ci_high"], vals["delta"]),
                             "p_adj": fmt.pvalue(vals["p_adj"]), "contribution": fmt.signed(vals["contribution"])})
            keys.append({"by": str(k.get("by", "")), "exploratory": bool(k.get("exploratory", True)),
                         "n": fmt.num(_n(k.get("n"), f"{q}.n")),
                         "delta": fmt.signed(_n(k.get("delta"), f"{q}.delta")),
                         "sum": fmt.signed(_n(k.get("sum_of_contributions"), f"{q}.sum_of_contributions")),
                         "rows": rows})
        out.append({"a": str(_map(s.get("run_a") or {}, f"{p}.run_a").get("name", "")),
                    "b": str(_map(s.get("run_b") or {}, f"{p}.run_b").get("name", "")),
                    "metric": str(s.get("metric", "")), "keys": keys})
    return out or None


def latency_stages_view(items: object) -> list[dict] | None:
    out = []
    for i, r in enumerate(_maps(items, "latency_stages")):
        p = f"latency_stages[{i}]"
        stages = []
        for name, s in _map(r.get("stages") or {}, f"{p}.stages").items():
            s = _map(s, f"{p}.stages.{name}")
            stages.append({"stage": str(name), "n": fmt.num(_n(s.get("n"), f"{p}.stages.{name}.n")),
                           **{k: fmt.ms(_n(s.get(k), f"{p}.stages.{name}.{k}")) for k in ("p50", "p90", "p99")}})
        e = _map(r.get("end_to_end") or {}, f"{p}.end_to_end")
        sums = _map(r.get("sum_of_stage_percentiles") or {}, f"{p}.sum_of_stage_percentiles")
        x = _map(r.get("exceedance") or {}, f"{p}.exceedance")
        exc = None
        if x:
            exc = {k: fmt.num(_n(x.get(k), f"{p}.exceedance.{k}"), 4)
                   for k in ("observed_any", "independent_prediction", "lower_bound", "union_bound")}
            exc["rule"] = str(x.get("threshold_rule", ""))
            exc["n"] = fmt.num(_n(x.get("n"), f"{p}.exceedance.n"))
        out.append({"run": str(r.get("run", "")), "stages": stages,
                    "e2e": {k: fmt.ms(_n(e.get(k), f"{p}.end_to_end.{k}")) for k in ("p50", "p90", "p99")},
                    "e2e_n": fmt.num(_n(e.get("n"), f"{p}.end_to_end.n")),
                    "sum_p99": fmt.ms(_n(sums.get("p99"), f"{p}.sum_of_stage_percentiles.p99")),
                    "sum_p50": fmt.ms(_n(sums.get("p50"), f"{p}.sum_of_stage_percentiles.p50")),
                    "exceedance": exc})
    return out or None


def consistency_view(items: object) -> list[dict] | None:
    out = []
    for i, r in enumerate(_maps(items, "consistency")):
        p = f"consistency[{i}]"
        s = _map(r.get("summary") or {}, f"{p}.summary")
        k = _n(s.get("k"), f"{p}.summary.k")
        kk = f"pass^{int(k)}" if fmt.is_defined(k) else "pass^k"
        figures = [("pass@1", s.get("pass@1")), (kk, s.get(kk)), ("modal fraction", s.get("modal_fraction")),
                   ("pair agreement", s.get("pair_agreement")), ("mean pass variance", s.get("mean_pass_variance"))]
        items_rows = []
        for j, it in enumerate(_maps(r.get("high_variance_items", []), f"{p}.high_variance_items")):
            q = f"{p}.high_variance_items[{j}]"
            clusters = it.get("clusters")
            items_rows.append({"item": str(it.get("item", "")), "trials": fmt.num(_n(it.get("trials"), f"{q}.trials")),
                               "pass1": fmt.num(_n(it.get("pass@1"), f"{q}.pass@1")),
                               "passk": fmt.num(_n(it.get(kk), f"{q}.{kk}")),
                               "variance": fmt.num(_n(it.get("pass_variance"), f"{q}.pass_variance")),
                               "clusters": " + ".join(str(int(c)) for c in clusters
                                                      if fmt.is_number(c)) if isinstance(clusters, list) else "—"})
        out.append({"run": str(_map(r.get("run") or {}, f"{p}.run").get("name", "")),
                    "trials": fmt.num(_n(r.get("trials"), f"{p}.trials")),
                    "n_items": fmt.num(_n(s.get("n_items"), f"{p}.summary.n_items")),
                    "rule": str(r.get("correct_rule", "")), "cluster_rule": str(r.get("cluster_rule", "")),
                    "figures": [(name, fmt.num(_n(v, f"{p}.summary.{name}"))) for name, v in figures],
                    "note": str(r["note"]) if r.get("note") else None, "kk": kk,
                    "n_varying": fmt.num(_n(s.get("n_high_variance"), f"{p}.summary.n_high_variance")),
                    "items": [x for x in items_rows if x["variance"] not in ("0.000", fmt.UNDEFINED)]})
    return out or None


def attribution_view(a: object) -> dict | None:
    a = _map(a, "attribution")
    groups = []
    for i, g in enumerate(_maps(a.get("groups", []), "attribution.groups")):
        p = f"attribution.groups[{i}]"
        mean, lo, hi = (_n(g.get(k), f"{p}.{k}") for k in ("mean", "ci_low", "ci_high"))
        groups.append({"group": str(g.get("group", "")), "figure": str(g.get("figure", "")),
                       "n": fmt.num(_n(g.get("n_queries"), f"{p}.n_queries")),
                       "mean": fmt.signed(mean) if g.get("defined", True) else fmt.UNDEFINED,
                       "ci": fmt.ci(lo, hi) if g.get("defined", True) else str(g.get("reason") or ""),
                       "cls": svg.ci_class(lo, hi, mean)})
    queries = []
    for i, q in enumerate(_maps(a.get("top_queries", []), "attribution.top_queries")):
        p = f"attribution.top_queries[{i}]"
        items = []
        for j, it in enumerate(_maps(q.get("items", []), f"{p}.items")):
            x = f"{p}.items[{j}]"
            rel = it.get("relevant")
            items.append({"unit": f"{it.get('doc_id', '')} [{fmt.num(_n(it.get('start'), f'{x}.start'))}:"
                                  f"{fmt.num(_n(it.get('end'), f'{x}.end'))}]",
                          "relevant": "—" if rel is None else ("yes" if rel else "no"),
                          "loo": fmt.signed(_n(it.get("loo_delta"), f"{x}.loo_delta")),
                          "shapley": fmt.signed(_n(it.get("shapley"), f"{x}.shapley"))})
        queries.append({"query_id": str(q.get("query_id", "")), "stratum": str(q.get("stratum") or ""),
                        "baseline": fmt.num(_n(q.get("baseline"), f"{p}.baseline")),
                        "empty": fmt.num(_n(q.get("empty"), f"{p}.empty")), "method": str(q.get("method", "")),
                        "items": items})
    if not groups and not queries:
        return None
    policy = a.get("policy")
    return {"metric": str(a.get("metric", "")), "shapley": str(a.get("shapley", "")),
            "policy": fmt.value_text(policy) if policy is not None else "",
            "n_queries": fmt.num(_n(a.get("n_queries"), "attribution.n_queries")),
            "n_undefined": fmt.num(_n(a.get("n_undefined"), "attribution.n_undefined")),
            "calls": fmt.num(_n(a.get("calls"), "attribution.calls")), "groups": groups, "queries": queries,
            "limit_note": str(a["limit_note"]) if a.get("limit_note") else None}


def ablation_view(a: object) -> dict | None:
    a = _map(a, "ablation")
    rows = []
    for i, r in enumerate(_maps(a.get("expectations", []), "ablation.expectations")):
        p = f"ablation.expectations[{i}]"
        d, lo, hi = (_n(r.get(k), f"{p}.{k}") for k in ("delta", "ci_low", "ci_high"))
        verdict = str(r.get("verdict", ""))
        rows.append({"stratum": str(r.get("stratum", "")), "role": str(r.get("role", "")),
                     "expect": str(r.get("expect", "")), "n": fmt.num(_n(r.get("n"), f"{p}.n")),
                     "delta": fmt.signed(d), "ci": fmt.ci(lo, hi), "verdict": verdict,
                     "cls": {"confirmed": "good", "contradicted": "bad"}.get(verdict, "neutral")})
    placebo = _map(a.get("placebo") or {}, "ablation.placebo")
    if not rows and not placebo:
        return None
    return {"name": str(a.get("name", "")), "metric": str(a.get("metric", "")),
            "margin": fmt.num(_n(a.get("margin"), "ablation.margin")), "rows": rows,
            "placebo": {"passed": bool(placebo.get("passed")),
                        "delta": fmt.signed(_n(placebo.get("delta"), "ablation.placebo.delta"))} if placebo else None}


def labeller_heading(who: object) -> str:
    """The heading of the label column: who gave the labels, from the label set (never assumed human); the
    page's judge-validation section and an included ``judge validate`` file both use it."""
    return {"human": "human", "automated": "automated", "mixed": "labels (mixed)"}.get(str(who), "labels")


def judge_validation_view(j: object) -> dict | None:
    """The judge validation (``ragassay.analysis.demo.judge_validation_section``): the floor verdict, kappa and
    per-class figures with intervals, the confusion matrix, reliability bins of P(bad) before and after
    isotonic recalibration, the band, the bias probes, per-case agreement, and each judge metric's status."""
    j = _map(j, "judge_validation")
    p = "judge_validation"
    per_class = [{"label": str(c.get("label", "")), "support": fmt.num(_n(c.get("support"), f"{p}.per_class[{i}].support")),
                  "predicted": fmt.num(_n(c.get("predicted"), f"{p}.per_class[{i}].predicted")),
                  "cells": [_stat(c.get(k), f"{p}.per_class[{i}].{k}") for k in ("precision", "recall", "f1")]}
                 for i, c in enumerate(_maps(j.get("per_class", []), f"{p}.per_class"))]
    classes = [str(c) for c in _seq(j.get("classes", []), f"{p}.classes")]
    rows = _seq(j.get("confusion", []), f"{p}.confusion")
    if len(rows) != len(classes) or any(len(_seq(r, f"{p}.confusion[{i}]")) != len(classes)
                                        for i, r in enumerate(rows)):
        raise _fail(f"{p}.confusion", f"must be {len(classes)} x {len(classes)} (one row and column per class)")
    confusion = [{"label": lab, "counts": [fmt.num(_n(v, f"{p}.confusion[{i}][{k}]")) for k, v in enumerate(row)]}
                 for i, (lab, row) in enumerate(zip(classes, rows, strict=True))]
    rel = _map(j.get("reliability") or {}, f"{p}.reliability")
    reliability = {}
    for key in ("raw", "recalibrated"):
        reliability[key] = [{k: fmt.num(_n(b.get(k), f"{p}.reliability.{key}[{i}].{k}"))
                             for k in ("mean_score", "frac_positive", "count")}
                            for i, b in enumerate(_maps(rel.get(key, []), f"{p}.reliability.{key}"))]
        reliability[f"ece_{key}"] = _stat(rel.get(f"ece_{key}"), f"{p}.reliability.ece_{key}")
    band = _map(j.get("band") or {}, f"{p}.band")
    rep = _map(band.get("report") or {}, f"{p}.band.report")
    bias = _map(j.get("bias") or {}, f"{p}.bias")
    selfp = _map(bias.get("self_preference") or {}, f"{p}.bias.self_preference")
    verdict = _map(j.get("verdict") or {}, f"{p}.verdict")
    return {
        "judge_model": str(j.get("judge_model", "")), "label_set_version": str(j.get("label_set_version") or "")[:12],
        "n": fmt.num(_n(j.get("n"), f"{p}.n")), "n_items": fmt.num(_n(j.get("n_items"), f"{p}.n_items")),
        "excluded": [f"{k} {fmt.num(_n(v, f'{p}.excluded.{k}'))}"
                     for k, v in _map(j.get("excluded") or {}, f"{p}.excluded").items()],
        "scale": str(j.get("scale") or ""), "passes_kappa": fmt.num(k) if (k := _n(j.get("passes_kappa"), f"{p}.passes_kappa")) is not None else None,
        "kappa": _stat(j.get("kappa"), f"{p}.kappa"), "agreement": _stat(j.get("agreement"), f"{p}.agreement"),
        "meets_floor": bool(verdict.get("meets_floor")), "floor_detail": str(verdict.get("detail", "")),
        "min_kappa": fmt.num(_n(verdict.get("min_kappa"), f"{p}.verdict.min_kappa"), 2),
        "min_class_recall": fmt.num(_n(verdict.get("min_class_recall"), f"{p}.verdict.min_class_recall"), 2),
        "min_items": fmt.num(_n(verdict.get("min_items"), f"{p}.verdict.min_items")),
        "min_per_class": fmt.num(_n(verdict.get("min_per_class"), f"{p}.verdict.min_per_class")),
        "labeller": labeller_heading(j.get("labelled_by")),
        "per_class": per_class, "classes": classes, "confusion": confusion, "reliability": reliability,
        "band": {"lo": fmt.num(_n(band.get("lo"), f"{p}.band.lo")), "hi": fmt.num(_n(band.get("hi"), f"{p}.band.hi")),
                 **{k: fmt.num(_n(rep.get(k), f"{p}.band.report.{k}"))
                    for k in ("escalation_rate", "false_pass_rate", "false_fail_rate")}} if band else None,
        # a probe's sign is a direction of bias, not better or worse: no good/bad colour
        "verbosity": {**_stat(bias.get("verbosity_slope_per_100_words"),
                              f"{p}.bias.verbosity_slope_per_100_words", signed=True), "cls": ""},
        "self_preference": {"text": str(selfp["undefined"]), "ci": "", "undefined": True, "cls": ""}
        if "undefined" in selfp else {**_stat(selfp, f"{p}.bias.self_preference", signed=True), "cls": ""},
        "by_case": [{"case": str(c), "n": fmt.num(_n(r.get("n"), f"{p}.by_case.{c}.n")),
                     "agreement": fmt.num(_n(r.get("agreement"), f"{p}.by_case.{c}.agreement"))}
                    for c, r in ((c, _map(r, f"{p}.by_case.{c}"))
                                 for c, r in _map(j.get("by_case") or {}, f"{p}.by_case").items())],
        "metrics": [{"run": str(m.get("run", "")), "metric": str(m.get("metric", "")),
                     "mean": fmt.num(_n(m.get("mean"), f"{p}.metrics[{i}].mean")), "status": str(m.get("status", "")),
                     "reason": str(m.get("reason", ""))}
                    for i, m in enumerate(_maps(j.get("metrics", []), f"{p}.metrics"))],
        "kinds": [{"kind": str(k.get("kind", "")), "labels": str(k.get("label_set") or ""),
                   "labeller": labeller_heading(k.get("labelled_by")), "n": fmt.num(_n(k.get("n"), f"{p}.kinds[{i}].n")),
                   "kappa": _stat(k.get("kappa"), f"{p}.kinds[{i}].kappa"),
                   "metrics": ", ".join(str(m) for m in _seq(k.get("metrics") or [], f"{p}.kinds[{i}].metrics")),
                   "status": "validated" if k.get("meets_floor") else "unvalidated",
                   "detail": str(k.get("floor_detail", ""))}
                  for i, k in enumerate(_maps(j.get("kinds", []), f"{p}.kinds"))],
        "cascade": _cascade_view(j.get("cascade"), f"{p}.cascade"),
    }


def _cascade_view(c: object, p: str) -> dict | None:
    """A cascade's measured figures (tier 1 → tier 2 on the report split): each tier's and the cascade's
    kappa, the share escalated, and the cost and time saved against tier 2 alone, each with its CI."""
    if c is None:
        return None
    c = _map(c, p)
    if c.get("undefined"):
        return {"tier1": str(c.get("tier1", "")), "tier2": str(c.get("tier2", "")), "undefined": str(c["undefined"])}
    tiers = _map(c.get("tiers") or {}, f"{p}.tiers")
    lat, cost = _map(c.get("latency") or {}, f"{p}.latency"), _map(c.get("cost") or {}, f"{p}.cost")
    return {"tier1": str(c.get("tier1", "")), "tier2": str(c.get("tier2", "")), "undefined": None,
            "n": fmt.num(_n(c.get("n_report"), f"{p}.n_report")),
            "kappa": {t: _stat(_map(tiers.get(t) or {}, f"{p}.tiers.{t}").get("kappa"), f"{p}.tiers.{t}.kappa")
                      for t in ("tier1", "tier2", "cascade")},
            "escalated": _stat(c.get("escalated"), f"{p}.escalated"),
            "time_saved": _stat(lat["saved"], f"{p}.latency.saved") if "saved" in lat else None,
            "time_undefined": str(lat.get("undefined") or ""),
            "cost_saved": _stat(cost.get("saved"), f"{p}.cost.saved")}
