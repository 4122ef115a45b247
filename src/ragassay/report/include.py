"""Sections from the analyses that need their own runs (``ragassay report --include FILE.json``).

Each FILE is the saved ``--json`` output of one command. Its kind is read from its top-level keys, first
match wins (docs/report.md):

- ``index-eval``: has ``curve`` and ``operating_knob``;
- ``embed-check``: has any of ``gap``, ``top1``, ``duplicates``, ``truncation``, ``drift`` (and no ``curve``);
- ``corpus check``: has ``n_spans_checked`` and ``token_drift_by_class``;
- ``parse``: has ``parsers``;
- ``chunks``: has ``cards``;
- ``sweep``: has ``cost_quality``, ``comparison`` and ``budget_tokens``;
- ``analyze attacks``: has ``rates``, ``attempts`` and ``rubric``;
- ``analyze hygiene``: ``kind`` is ``"hygiene"``;
- ``judge validate``: has ``judge_model``, ``figures`` and ``kappa``;
- ``analyze ablation``: has ``expectations``, ``placebo``, ``margin`` and ``metric``;
- ``analyze rerank-cost``: ``kind`` is ``"rerank-cost"``;
- ``cost``: has ``runs``, ``projection`` and ``labelling``;
- ``online judge`` / ``online gap`` / ``online promote``: ``kind`` is ``"online-judge"``, ``"online-gap"`` or
  ``"ragassay online promote"``;
- ``judge claims``: has ``breakdown``, ``judge`` and ``quote_not_found``.

Every kind becomes the generic ``{"title", "tables": [{"title", "columns", "rows"}], "notes"}`` section (through
the owning module's ``*_report_section`` function, with an adapter where that function has another shape), and
:func:`section_view` turns it into display text for the one generic table the template renders.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

from ragassay.errors import InputError
from ragassay.report import fmt
from ragassay.report.analyses import labeller_heading

_KNOWN = ("index-eval, embed-check, corpus check, parse, chunks, sweep, analyze attacks, analyze hygiene, "
          "judge validate, analyze ablation, analyze rerank-cost, cost, online judge, online gap, online promote or judge claims")
_EMBED_KEYS = ("gap", "top1", "duplicates", "truncation", "drift")


def _index_eval(d: Mapping) -> dict:
    from ragassay.metrics.ann import index_report_section

    sec = index_report_section(index_eval=dict(d))
    sec["title"] = f"Index evaluation: {d.get('source', '')}".rstrip(": ")
    return sec


def _embed_check(d: Mapping) -> dict:
    from ragassay.metrics.ann import index_report_section

    sec = index_report_section(embed_check=dict(d))
    sec["title"] = "Embedding check"
    return sec


def _corpus_check(d: Mapping) -> dict:
    from ragassay.analysis.sweep import stages_report_section

    # stages_report_section carries the check as-is; the tables are laid out here
    cc = stages_report_section(corpus_check=dict(d))["corpus_check"]
    drift = cc.get("token_drift_by_class") or {}
    failures = cc.get("failures") or {}
    tables = [
        {"title": "Corpus check", "columns": ["ok", "documents", "spans checked", "failures"],
         "rows": [[bool(cc.get("ok")), cc.get("n_docs"), cc.get("n_spans_checked"),
                   sum(len(v) if isinstance(v, list | dict) else 1 for v in failures.values())]]},
        {"title": "Token-count ratio by document class",
         "columns": ["class", "documents", "median", "min", "max", "outliers"],
         "rows": [[cls, r.get("n_docs"), r.get("median"), r.get("min"), r.get("max"),
                   ", ".join(str(o) for o in (r.get("outliers") or [])) or "none"]
                  for cls, r in sorted(drift.items()) if isinstance(r, Mapping)]},
    ]
    if failures:
        tables.append({"title": "Failures", "columns": ["check", "detail"],
                       "rows": [[str(k), fmt.value_text(v)] for k, v in sorted(failures.items())]})
    return {"title": "Corpus check", "tables": tables, "notes": []}


def _cell(v: object) -> object:
    """Scalars stay as they are (the view formats numbers); anything nested is shown as compact text."""
    return v if v is None or isinstance(v, str | bool | int | float) else fmt.value_text(v)


def _records(title: str, rows: list, columns: list[str] | None = None) -> dict:
    """One table from a list of flat records; columns default to the union of keys in first-seen order."""
    rows = [r for r in rows if isinstance(r, Mapping)]
    cols = columns or list(dict.fromkeys(k for r in rows for k in r))
    return {"title": title, "columns": cols, "rows": [[_cell(r.get(c)) for c in cols] for r in rows]}


def _parse(d: Mapping) -> dict:
    """``parse --json``: span survival per parser (when it ran: it needs a golden set) and the fidelity
    summary per parser (when references were given)."""
    from ragassay.analysis.sweep import stages_report_section

    parsers = list(d["parsers"])
    measured = [p for p in parsers if "by_stratum" in p]
    tables, notes = [], []
    if measured:
        surv = stages_report_section(survival=measured)["survival"]
        cols = ["group", "n", "exact", "exact_or_fuzzy", "lost", "n_lost"]
        tables.append({"title": "Span survival per parser", "columns": ["parser", "spans lost"],
                       "rows": [[s["parser"], s["n_lost"]] for s in surv]})
        for s in surv:
            tables.append(_records(f"{s['parser']}: survival by stratum", s["by_stratum"], cols))
            tables.append(_records(f"{s['parser']}: survival by format", s["by_format"], cols))
    if d.get("span_survival_skipped"):
        notes.append(str(d["span_survival_skipped"]))
    fidelity = [(str(p.get("parser", "")), (p.get("fidelity") or {}).get("summary")) for p in parsers]
    fidelity = [(name, summary) for name, summary in fidelity if isinstance(summary, Mapping)]
    if fidelity:
        # one row per (parser, figure): {"text": {"ned": {"mean", "n", "n_undefined"}, ...}, "tables": {...}}
        rows = [[name, f"{part}.{figure}", v.get("mean"), v.get("n"), v.get("n_undefined")]
                for name, summary in fidelity for part, figures in summary.items() if isinstance(figures, Mapping)
                for figure, v in figures.items() if isinstance(v, Mapping) and "mean" in v]
        tables.append({"title": "Parse fidelity per parser (means over documents with a reference)",
                       "columns": ["parser", "figure", "mean", "n", "undefined"], "rows": rows})
    return {"title": "Parse measurement", "tables": tables, "notes": notes}


def _chunks(d: Mapping) -> dict:
    from ragassay.analysis.sweep import stages_report_section

    cards = stages_report_section(chunk_cards=list(d["cards"]))["chunk_cards"]
    return {"title": "Chunking report cards", "tables": [_records("Chunking report card per kind x size", cards)],
            "notes": []}


def _mean(v: object) -> object:
    return v.get("mean") if isinstance(v, Mapping) else v


def _sweep(d: Mapping) -> dict:
    from ragassay.analysis.sweep import stages_report_section

    sw = stages_report_section(sweep=dict(d))["sweep"]
    cq = sw["cost_quality"]
    # the per-config means; the card and run ids stay in the saved file
    metrics = list(dict.fromkeys(k for r in cq for k, v in r.items() if isinstance(v, Mapping) and "mean" in v))
    cost = ["k_used_mean", "tokens_used_mean", "run_ms", "index_build_ms"]
    cq_table = {"title": f"Cost and quality at {sw['budget_tokens']} tokens (and k={sw['fixed_k']})",
                "columns": ["config", *cost, *metrics],
                "rows": [[r.get("config"), *(_cell(r.get(c)) for c in cost), *(_mean(r.get(m)) for m in metrics)]
                         for r in cq]}
    cmp_cols = ["config", "metric", "stratum", "n", "mean_a", "mean_b", "delta", "ci_low", "ci_high", "p_adj_sweep",
                "sweep_verdict"]
    return {"title": f"Sweep: {sw['name']}", "tables": [cq_table, _records(
        f"Paired comparison against {sw['baseline']}", sw["comparison"], cmp_cols)],
        "notes": [f"baseline: {sw['baseline']}"]}


def _attacks(d: Mapping) -> dict:
    from ragassay.analysis.attacks import AttackSuiteResult, Attempt, ClassRate, attacks_report_section

    res = AttackSuiteResult(attempts=tuple(Attempt(**a) for a in d["attempts"]),
                            rates=tuple(ClassRate(**r) for r in d["rates"]),
                            confidence=float(d["confidence"]), config=str(d.get("config", "")))
    sec = attacks_report_section(res)
    return {"title": f"Planted-injection attacks: {sec['config']}".rstrip(": "),
            "tables": [_records(f"Attack success rate ({sec['confidence']:.0%} exact interval)", sec["rates"]),
                       _records("Successful attempts", sec["successes"])],
            "notes": [f"success: {sec['rubric']}"]}


def _hygiene(d: Mapping) -> dict:
    # the saved file is hygiene_report_section's own output: only the layout is done here
    tables = []
    if d.get("overlap"):
        tables.append({"title": "n-gram overlap", "columns": ["screen", "n", "items", "flagged", "empty",
                                                               "flagged ids"],
                       "rows": [[k, v.get("n"), v.get("n_items"), v.get("n_flagged"), v.get("n_empty"),
                                 ", ".join(map(str, v.get("flagged_ids") or [])) or "none"]
                                for k, v in d["overlap"].items()]})
    if d.get("shortcut") is not None:
        tables.append(_records("Keyword-baseline shortcut audit", d["shortcut"]))
    if d.get("bypass") is not None:
        tables.append(_records("Retrieval bypass", d["bypass"]))
    ex = d.get("exclusions")
    if ex:
        tables.append({"title": "Exclusions", "columns": ["items", "excluded (union)", "union bounds", "retained",
                                                        "retained bounds", "per set"],
                       "rows": [[ex.get("n_items"), ex.get("union"), _cell(ex.get("union_bounds")), ex.get("retained"),
                                 _cell(ex.get("retained_bounds")), _cell(ex.get("marginals"))]]})
    if d.get("rescored") is not None:
        tables.append(_records("Re-scored on the retained items", d["rescored"]))
    return {"title": "Evaluation hygiene", "tables": tables, "notes": []}


def _ci(v: object) -> list:
    return [v.get("value"), v.get("ci_low"), v.get("ci_high")] if isinstance(v, Mapping) else [v, None, None]


def _judge_validate(d: Mapping) -> dict:
    from ragassay.judges.validate import validation_report_section

    v = validation_report_section(dict(d))
    who = labeller_heading(v["labelled_by"])
    tables = [
        # "human" / "automated" name the labels; "labels" / "labels (mixed)" are the noun themselves
        {"title": f"Agreement with the {who}" if who.startswith("labels") else f"Agreement with the {who} labels",
         "columns": ["judge", "n", "figure", "value", "low", "high"],
         "rows": [[v["judge_model"], v["n"], "kappa", *_ci(v["kappa"])],
                  [v["judge_model"], v["n"], "agreement", *_ci(v["agreement"])],
                  [v["judge_model"], v["n"], "min class recall", v["min_class_recall"], None, None]]},
        {"title": "Per class", "columns": ["class", "support", "predicted", "precision", "recall", "f1"],
         "rows": [[c.get("label"), c.get("support"), c.get("predicted"), _ci(c.get("precision"))[0],
                   _ci(c.get("recall"))[0], _ci(c.get("f1"))[0]] for c in v["per_class"]]},
        {"title": f"Confusion matrix (rows: {who}, columns: judge)", "columns": [who, *v["classes"]],
         "rows": [[c, *row] for c, row in zip(v["classes"], v["confusion"], strict=True)]},
    ]
    rel = v["reliability"]
    if rel["raw"]:
        tables.append({"title": "Reliability (raw score)", "columns": ["mean score", "fraction positive", "count"],
                       "rows": [[p["mean_score"], p["frac_positive"], p["count"]] for p in rel["raw"]]})
    if v["cascade"]:
        tables.append(_records("Cascade", [v["cascade"]]))
    meets, detail = d.get("meets_default_floor"), d.get("floor_detail")
    if not isinstance(meets, bool) or not detail:
        from ragassay.judges.validate import Floor

        meets, detail = Floor().check(dict(d))
    notes = [f"meets the gate's default floor: {'yes' if meets else 'no'} ({detail})", f"labelled by: {v['labelled_by']}"]
    if v.get("passes_kappa") is not None:
        notes.append(f"the label set's two annotation passes agree at kappa {v['passes_kappa']:.3f} (the ceiling "
                     "for any judge, not the judge's agreement)")
    return {"title": f"Judge validation: {v['judge_model']}", "tables": tables, "notes": notes}


_ABLATION_COLS = ["n", "delta", "ci_low", "ci_high", "wins", "losses", "ties"]


def _tost_p(r: Mapping) -> object:
    t = r.get("tost")
    return t.get("p_value") if isinstance(t, Mapping) else None


def _note(r: Mapping) -> str:
    """Why a verdict has no interval or no TOST p (no paired query; zero-variance differences)."""
    t = r.get("tost")
    if r.get("reason"):
        return str(r["reason"])
    return f"TOST undefined: {t['reason']}" if isinstance(t, Mapping) and t.get("reason") else ""


def _ablation(d: Mapping) -> dict:
    # the saved file is evaluate_ablation's output (ablation_report_section adds only its kind): layout only
    metric, margin, alpha = d["metric"], float(d["margin"]), float(d["alpha"])
    exp_rows = [[r["stratum"], r["role"], r["expect"], *(_cell(r.get(c)) for c in _ABLATION_COLS), _tost_p(r),
                 r["verdict"], _note(r)] for r in d["expectations"]]
    tables = [{"title": f"Expectations: {metric}, intervention - baseline ({1 - alpha:.0%} paired bootstrap CI)",
               "columns": ["stratum", "role", "expect", *_ABLATION_COLS, "TOST p", "verdict", "note"],
               "rows": exp_rows}]
    p = d["placebo"]
    if isinstance(p, Mapping):
        tables.append({"title": f"Placebo: placebo - baseline, equivalent within ±{margin:g}?",
                       "columns": [*_ABLATION_COLS, "TOST p", "verdict", "passed", "note"],
                       "rows": [[*(_cell(p.get(c)) for c in _ABLATION_COLS), _tost_p(p), p["verdict"],
                                 bool(p.get("passed")), _note(p)]]})
    tables.append({"title": "Runs", "columns": ["arm", "run", "run id"],
                   "rows": [[arm, r.get("name"), r.get("run_id")] for arm, r in d["runs"].items()]})
    counts = d.get("counts") or {}
    notes = [f"intervention: {fmt.value_text(d.get('intervention'))}",
             f"placebo change: {fmt.value_text(d.get('placebo_change'))}" if isinstance(p, Mapping) else "no placebo",
             f"margin ±{margin:g}, alpha {alpha:g}; "
             + ", ".join(f"{counts.get(v, 0)} {v}" for v in ("confirmed", "contradicted", "inconclusive"))]
    return {"title": f"Ablation: {d['name']}", "tables": tables, "notes": notes}


def _rerank_cost(d: Mapping) -> dict:
    # the saved file is rerank_cost's own output: layout only; "not measured" latency stays text, never 0
    rows = []
    for r in d["rows"]:
        delta, lat = r.get("delta") or {}, r["latency"]
        measured = lat.get("status") == "measured"
        rows.append([r["name"], r.get("fusion_depth"), r.get("reranker"), r["quality"]["value"],
                     "baseline" if r["role"] == "baseline" else delta.get("value"), delta.get("ci_low"),
                     delta.get("ci_high"), delta.get("p_adj"),
                     lat.get("added_p95_ms") if measured else "not measured", lat.get("ci_low"), lat.get("ci_high"),
                     r.get("delta_per_100ms"), r["cost"]["per_1k_queries"],
                     {True: "yes", False: "no", None: "not placed"}[r.get("pareto")]])
    metric = d["metric"]
    return {"title": f"Quality per millisecond: {metric} against {d['baseline']['name']}",
            "tables": [{"title": f"{metric}, added p95 latency and cost per config (Pareto set marked)",
                        "columns": ["config", "fusion_depth", "reranker", metric, "Δ", "Δ low", "Δ high", "p(BH)",
                                    "added p95 ms", "ms low", "ms high", "Δ per 100 ms", "$/1k queries", "Pareto"],
                        "rows": rows}],
            "notes": [f"Pareto set: {', '.join(d['pareto']) or 'none'}", *d.get("notes", [])]}


def _usd(fig: Mapping | None):
    # a figure of `ragassay cost`: USD, or its reason for being undefined (never 0 in its place)
    if not fig:
        return None
    return fig["usd"] if fig.get("usd") is not None else f"undefined: {fig.get('undefined')}"


def _cost(d: Mapping) -> dict:
    # the saved file is `ragassay cost --json`: spend as paid and the modelled figures per run; a projection
    # (--project) in its own table, labelled projected, never mixed with what was paid
    paid, projected, notes = [], [], []
    for r in d["runs"]:
        m, det = r.get("modelled") or {}, r.get("deterministic_first") or {}
        paid.append([r["run_name"], r.get("judge_model"), r["calls"]["total"], r["calls"].get("llm"),
                     r.get("spend"), _usd(m.get("sync_uncached")), _usd(m.get("batch_cached")),
                     det.get("share") if det.get("share") is not None else f"undefined: {det.get('undefined')}",
                     r.get("monthly_total")])
        notes += [f"{r['run_name']}: {n}" for n in r.get("notes", [])]
        p = r.get("projected")
        if p:
            f, fd, ratios = p["figures"], p.get("figures_deterministic_first") or {}, p.get("ratios") or {}
            share = (p.get("deterministic_first") or {}).get("share")
            ratio = (ratios.get("sync_uncached_over_batch_cached_deterministic_first") or {}).get("value")
            projected.append([r["run_name"], p["judge_model"], p["calls"]["total"], p["tokens"]["input"],
                              p["tokens"]["output"], _usd(f.get("sync_uncached")), _usd(f.get("batch_uncached")),
                              _usd(f.get("batch_cached")), share, _usd(fd.get("batch_cached")), ratio])
            notes += [f"{r['run_name']} (projected): {p['basis']}", f"{r['run_name']} (projected): "
                      f"{p['tokens']['estimate']}; output {p['tokens']['output_basis']}"]
    lab = d.get("labelling") or {}
    notes.append(f"labelling: ${lab['usd']:.2f} per month" if lab.get("usd") is not None
                 else f"labelling: {lab.get('undefined')}")
    tables = [{"title": "Spend as paid and the same calls modelled (judge_calls of each run)",
               "columns": ["run", "judge", "calls", "LLM calls", "spend $", "sync uncached $", "batch cached $",
                           "deterministic-first share", "monthly $"], "rows": paid}]
    if projected:
        tables.append({"title": "Projected: the same answers judged by an LLM judge (no call made)",
                       "columns": ["run", "judge", "calls", "input tokens", "output tokens", "sync uncached $",
                                   "batch uncached $", "batch cached $", "deterministic-first share",
                                   "batch cached + deterministic-first $", "sync uncached / that"],
                       "rows": projected})
    return {"title": "The eval layer's own cost", "tables": tables, "notes": notes}


def _online(name: str) -> Callable[[Mapping], dict]:
    # report.online renders the online commands' saved --json (imported when such a file is included)
    def convert(d: Mapping) -> dict:
        from ragassay.report import online

        return getattr(online, name)(d)

    return convert


def _claims(d: Mapping) -> dict:
    from ragassay.report.claims import claims_report_section

    return claims_report_section(d)


KINDS: tuple[tuple[str, Callable[[Mapping], bool], Callable[[Mapping], dict]], ...] = (
    ("index-eval", lambda d: "curve" in d and "operating_knob" in d, _index_eval),
    ("embed-check", lambda d: "curve" not in d and any(k in d for k in _EMBED_KEYS), _embed_check),
    ("corpus check", lambda d: "n_spans_checked" in d and "token_drift_by_class" in d, _corpus_check),
    ("parse", lambda d: "parsers" in d, _parse),
    ("chunks", lambda d: "cards" in d, _chunks),
    ("sweep", lambda d: all(k in d for k in ("cost_quality", "comparison", "budget_tokens")), _sweep),
    ("analyze attacks", lambda d: all(k in d for k in ("rates", "attempts", "rubric")), _attacks),
    ("analyze hygiene", lambda d: d.get("kind") == "hygiene", _hygiene),
    ("judge validate", lambda d: all(k in d for k in ("judge_model", "figures", "kappa")), _judge_validate),
    ("analyze ablation", lambda d: all(k in d for k in ("expectations", "placebo", "margin", "metric")), _ablation),
    ("analyze rerank-cost", lambda d: d.get("kind") == "rerank-cost", _rerank_cost),
    ("cost", lambda d: all(k in d for k in ("runs", "projection", "labelling")), _cost),
    ("online judge", lambda d: d.get("kind") == "online-judge", _online("judge_report_section")),
    ("online gap", lambda d: d.get("kind") == "online-gap", _online("gap_report_section")),
    ("online promote", lambda d: d.get("kind") == "ragassay online promote", _online("promote_report_section")),
    ("judge claims", lambda d: all(k in d for k in ("breakdown", "judge", "quote_not_found")), _claims),
)


def load_include(path: str | Path) -> dict:
    """The generic section of one saved ``--json`` output, with ``kind`` set; a clean error names the file."""
    path = Path(path)
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror or e})\npass the file a command's --json wrote") from e
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not JSON ({e})\npass the saved --json output of "
                         f"{_KNOWN}") from e
    if not isinstance(d, dict):
        raise InputError(f"{path}: the top level is a {type(d).__name__}, not an object\npass the saved --json "
                         f"output of {_KNOWN}")
    for kind, matches, convert in KINDS:
        if matches(d):
            try:
                sec = convert(d)
            except (KeyError, TypeError, AttributeError, ValueError) as e:
                raise InputError(f"{path}: looks like {kind} output but is malformed ({type(e).__name__}: {e})\n"
                                 f"re-run `ragassay {kind} --json` and save its output unchanged") from e
            sec["kind"] = kind
            return sec
    raise InputError(f"{path}: not a recognized --json output (keys: {', '.join(sorted(d)[:8])})\n"
                     f"--include takes the saved --json of {_KNOWN}")


def _fail(path: str, problem: str) -> InputError:
    return InputError(f"include {path}: {problem}")


def section_view(sec: object, i: int) -> dict:
    """Display text of one generic section (still raw: the template escapes it). Numbers get three decimals,
    None/NaN read "undefined", anything else is shown as compact text."""
    p = f"includes[{i}]"
    if not isinstance(sec, Mapping):
        raise _fail(p, "must be an object with title, tables and notes")
    tables = sec.get("tables") or []
    if not isinstance(tables, list):
        raise _fail(f"{p}.tables", "must be a list")
    out = []
    for j, t in enumerate(tables):
        if not isinstance(t, Mapping) or not isinstance(t.get("columns"), list) or not isinstance(t.get("rows"), list):
            raise _fail(f"{p}.tables[{j}]", "must have a columns list and a rows list")
        cols = [str(c) for c in t["columns"]]
        rows = []
        for r in t["rows"]:
            if not isinstance(r, list) or len(r) != len(cols):
                raise _fail(f"{p}.tables[{j}].rows", f"each row must be a list of {len(cols)} values")
            rows.append([{"text": fmt.num(v) if v is None or fmt.is_number(v) or isinstance(v, bool)
                          else fmt.value_text(v),
                          "num": fmt.is_number(v), "undefined": not fmt.is_defined(v) and (v is None or
                                                                                        fmt.is_number(v))}
                         for v in r])
        out.append({"title": str(t.get("title", "")), "columns": cols, "rows": rows})
    return {"title": str(sec.get("title", "")), "kind": str(sec.get("kind", "")), "anchor": f"include-{i + 1}",
            "tables": out, "notes": [str(n) for n in sec.get("notes") or []]}
