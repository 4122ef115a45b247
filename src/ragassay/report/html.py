"""The self-contained HTML report: one ``index.html`` with inline CSS, a small inline script for the
per-query table, and inline SVG plots.

``render_report(data, out_dir)`` takes a plain JSON-like dict (the contract is in ``docs/report.md``),
validates its shape at the boundary, turns it into display rows and renders ``templates/report.html.j2``
with Jinja2 autoescaping, so every string that came from ``data`` is escaped. The page makes no network
request: a Content-Security-Policy meta tag forbids every fetch (``default-src 'none'``) and allows only the
report's own script, by its sha256 hash, so an injected script could not run even if escaping failed.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import orjson
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from ragassay import fsio
from ragassay.analysis.compare import lost_text
from ragassay.errors import SchemaError
from ragassay.report import analyses, fmt, include, svg
from ragassay.report.claims import claims_html
from ragassay.report.ppi import COLUMNS as PPI_COLUMNS
from ragassay.report.ppi import ppi_rows

PIN_ORDER = (
    "dataset_version",
    "corpus_digest",
    "config_sha",
    "metric_version",
    "hit_rule",
    "gain",
    "relevance_threshold",
    "ties",
    "cutoffs",
    "final_k",
    "git_sha",
    "trials",
)
# Pins that differ between runs by construction (the thing being compared); any other pin that differs
# means the runs were measured under different definitions.
DESIGN_PINS = frozenset({"config_sha", "git_sha"})
# Pins derived from a run's metrics: a run without such metrics (no ranked list) has none, which conflicts
# with nothing.
DERIVED_PINS = frozenset({"cutoffs", "final_k"})
OUTCOMES = ("answered", "abstained", "refused", "error")
REPORT_KIND = "report"
VERDICT_CLASS = {
    "improved": "good",
    "regressed": "bad",
    "equivalent": "good-muted",
    "no credible change": "neutral",
    "pass": "good",
    "warn": "warn",
    "fail": "bad",
}
GATE_CLASS = {"PASS": "pass", "WARN": "warn", "FAIL": "fail"}
DEFAULT_QUERY_COLUMNS = 2
# Rows the per-query table draws at once; the rest wait in the embedded data until paged, sorted or found.
QUERY_PAGE_SIZE = 100
# Query data above this many characters of JSON is embedded gzip-compressed (see _embed): about 20,000 queries.
COMPRESS_ABOVE = 8_000_000
_TEMPLATES = Path(__file__).parent / "templates"
_PARQUET_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*\.parquet")


def render_report(data: Mapping, out_dir: str | Path) -> Path:
    """Render ``data`` to ``out_dir/index.html`` and return that path.

    ``out_dir`` must be new, empty, or an earlier ragassay report (recognised by the
    ``<meta name="generator" content="ragassay ...">`` of its ``index.html``); anything else is refused with an
    ``InputError`` before a byte is written, so ``-o docs/`` can never overwrite a user's page. The file is
    written to a temporary file and moved into place with ``os.replace``, so a reader never sees a
    half-written report, with the mode ``open()`` would give it. ``data`` needs ``title`` and ``runs``;
    every other section is rendered only when its key is present. Malformed data raises ``SchemaError``
    naming the key path.
    """
    out = Path(out_dir)
    fsio.check_output_dir(out, REPORT_KIND)
    context = build_context(data)
    html = _environment().get_template("report.html.j2").render(**context)
    target = out / "index.html"
    fsio.atomic_write_text(target, html)
    return target


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("ragassay.report", "templates"),
        autoescape=select_autoescape(
            enabled_extensions=("html", "html.j2", "j2"), default=True, default_for_string=True
        ),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = fmt.num
    env.filters["signed"] = fmt.signed
    env.filters["pvalue"] = fmt.pvalue
    env.filters["ms"] = fmt.ms
    env.filters["value"] = fmt.value_text
    env.filters["sortv"] = fmt.sort_key
    return env


def _asset(name: str) -> str:
    return (_TEMPLATES / name).read_text(encoding="utf-8")


def _csp(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return (
        f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:; "
        "base-uri 'none'; form-action 'none'"
    )


# ---------------------------------------------------------------------------------------------- validation


def _fail(path: str, problem: str, fix: str) -> SchemaError:
    return SchemaError(f"report data: `{path}` {problem}; {fix}")


def _mapping(x: object, path: str) -> Mapping:
    if not isinstance(x, Mapping):
        raise _fail(path, f"must be an object, got {type(x).__name__}", "see docs/report.md for the contract")
    return x


def _list(x: object, path: str) -> Sequence:
    if isinstance(x, (str, bytes)) or not isinstance(x, Sequence):
        raise _fail(path, f"must be a list, got {type(x).__name__}", "see docs/report.md for the contract")
    return x


def _need(d: Mapping, key: str, path: str) -> object:
    if key not in d:
        raise _fail(f"{path}.{key}" if path else key, "is missing", "add it (see docs/report.md)")
    return d[key]


# Exact types that are numbers or null: a column of these needs no per-value check (bool is not among them).
_PLAIN_NUMBERS = {float, int, type(None)}


def _numbers(x: object, path: str, n: int | None = None, what: str = "") -> list:
    seq = _list(x, path)
    if not set(map(type, seq)) <= _PLAIN_NUMBERS:
        for i, v in enumerate(seq):
            if v is not None and not fmt.is_number(v):
                raise _fail(f"{path}[{i}]", f"must be a number or null, got {v!r}", "write null for undefined")
    if n is not None and len(seq) != n:
        raise _fail(
            path, f"has {len(seq)} values but {what} names {n}", "give one value per run (null if undefined)"
        )
    return list(seq)


# ---------------------------------------------------------------------------------------------- context


def build_context(data: Mapping) -> dict:
    """Validate ``data`` and turn it into the display rows the template renders (all text still raw; the
    template escapes it)."""
    data = _mapping(data, "<root>")
    title = _need(data, "title", "")
    if not isinstance(title, str) or not title.strip():
        raise _fail("title", "must be a non-empty string", "name the report, e.g. 'bm25 vs hybrid'")
    runs = _list(_need(data, "runs", ""), "runs")
    run_names: list[str] = []
    for i, r in enumerate(runs):
        r = _mapping(r, f"runs[{i}]")
        run_names.append(str(_need(r, "name", f"runs[{i}]")))
    colors = {name: svg.PALETTE[i % len(svg.PALETTE)] for i, name in enumerate(run_names)}
    script = _asset("report.js")
    ctx: dict = {
        "title": title,
        "generated_at": data.get("generated_at"),
        "ragassay_version": data.get("ragassay_version"),
        "css": Markup(_asset("report.css")),  # code-owned asset, not data
        "script": Markup(script),
        "csp": _csp(script),
        "runs": _runs_view(runs, run_names),
        "manifest": _manifest_view(data["manifest"]) if "manifest" in data else None,
        "provenance": _provenance_view(data["golden_provenance"]) if "golden_provenance" in data else None,
        "stage_table": _stage_view(data["stage_table"]) if "stage_table" in data else None,
        "strata_table": _strata_view(data["strata_table"]) if "strata_table" in data else None,
        "comparisons": [
            _comparison_view(c, i) for i, c in enumerate(_list(data["comparisons"], "comparisons"))
        ]
        if "comparisons" in data
        else None,
        "forest": _forest_view(data["forest"]) if "forest" in data else None,
        "recall": _recall_view(data["recall_curves"], colors) if "recall_curves" in data else None,
        "rerank": _rerank_view(data["rerank_movement"]) if "rerank_movement" in data else None,
        "abstention": _abstention_view(data["abstention"]) if "abstention" in data else None,
        "latency": _latency_view(data["latency"], colors) if "latency" in data else None,
        "oracle": _oracle_view(data["oracle_ladder"]) if "oracle_ladder" in data else None,
        "gate": _gate_view(data["gate"]) if "gate" in data else None,
        "decomposition": analyses.decomposition_view(data["decomposition"], data.get("analysis_resamples"))
        if "decomposition" in data else None,
        "slices": analyses.slices_view(data["slices"]) if "slices" in data else None,
        "latency_stages": analyses.latency_stages_view(data["latency_stages"]) if "latency_stages" in data else None,
        "consistency": analyses.consistency_view(data["consistency"]) if "consistency" in data else None,
        "attribution": analyses.attribution_view(data["attribution"]) if "attribution" in data else None,
        "ablation": analyses.ablation_view(data["ablation"]) if "ablation" in data else None,
        "judge_validation": analyses.judge_validation_view(data["judge_validation"])
        if data.get("judge_validation") else None,
        "analysis_resamples": (f"{int(data['analysis_resamples']):,}"
                               + (f", {data['analysis_resamples_note']}" if data.get("analysis_resamples_note") else ""))
        if fmt.is_number(data.get("analysis_resamples")) else None,
        "warnings": [str(w) for w in _list(data.get("warnings", []), "warnings")],
        "traces_unavailable": [
            {"run": str(u.get("run", "")), "reason": str(u.get("reason", ""))}
            for u in (
                _mapping(x, f"traces_unavailable[{i}]")
                for i, x in enumerate(_list(data.get("traces_unavailable", []), "traces_unavailable"))
            )
        ],
    }
    parquet = data.get("parquet")
    if parquet is not None and not (isinstance(parquet, str) and _PARQUET_NAME.fullmatch(parquet)):
        raise _fail("parquet", f"must be a file name beside the page, got {parquet!r}",
                    "give the bare name, e.g. queries.parquet")
    ctx["parquet"] = parquet
    # claims_html escapes every value itself and returns Markup
    ctx["claims"] = claims_html(_mapping(data["claims"], "claims")) if "claims" in data else None
    queries = _queries_view(data, run_names) if "queries" in data else None
    ctx["queries"] = queries
    ctx["worst"] = _worst_view(data, queries) if "worst_regressions" in data else None
    ctx["nav"] = [
        (anchor, label)
        for anchor, label, key in (
            ("gate", "Gate", "gate"),
            ("comparisons", "Comparisons", "comparisons"),
            ("forest", "Forest plot", "forest"),
            ("stages", "Stages", "stage_table"),
            ("strata", "Strata", "strata_table"),
            ("recall", "Recall@k", "recall"),
            ("rerank", "Rerank movement", "rerank"),
            ("abstention", "Abstention", "abstention"),
            ("latency", "Latency", "latency"),
            ("oracle", "Oracle ladder", "oracle"),
            ("decomposition", "Delivery and use", "decomposition"),
            ("slices", "Slices", "slices"),
            ("latency-stages", "Stage latency", "latency_stages"),
            ("consistency", "Consistency", "consistency"),
            ("attribution", "Attribution", "attribution"),
            ("ablation", "Ablation", "ablation"),
            ("judge-validation", "Judge validation", "judge_validation"),
            ("claims", "Claims", "claims"),
            ("runs", "Runs & pins", "runs"),
            ("provenance", "Golden provenance", "provenance"),
            ("manifest", "Golden set", "manifest"),
            ("worst", "Worst regressions", "worst"),
            ("per-query", "Queries", "queries"),
        )
        if ctx.get(key)
    ]
    ctx["includes"] = [include.section_view(sec, i)
                       for i, sec in enumerate(_list(data.get("includes", []), "includes"))]
    # included sections sit before the run tables, after the analyses of the runs themselves
    at = next((i for i, (anchor, _) in enumerate(ctx["nav"]) if anchor == "runs"), len(ctx["nav"]))
    ctx["nav"][at:at] = [(s["anchor"], s["title"]) for s in ctx["includes"]]
    return ctx


def _differs(values: Sequence[str]) -> bool:
    return len(set(values)) > 1


def _runs_view(runs: Sequence[Mapping], names: list[str]) -> dict:
    pin_keys: list[str] = [k for k in PIN_ORDER if any(k in (r.get("pins") or {}) for r in runs)]
    for i, r in enumerate(runs):
        pins = _mapping(r.get("pins") or {}, f"runs[{i}].pins")
        pin_keys += [str(k) for k in pins if str(k) not in pin_keys]
    pins_rows = []
    for k in pin_keys:
        raw = [(r.get("pins") or {}).get(k) for r in runs]
        vals = [fmt.value_text(v) for v in raw]
        known = [v for v, x in zip(vals, raw, strict=True) if x is not None or k not in DERIVED_PINS]
        pins_rows.append({"key": k, "values": vals, "differs": _differs(known)})
    flat = [fmt.flatten(_mapping(r.get("config") or {}, f"runs[{i}].config")) for i, r in enumerate(runs)]
    cfg_keys: list[str] = []
    for f in flat:
        cfg_keys += [k for k in f if k not in cfg_keys]
    cfg_rows = []
    for k in cfg_keys:
        vals = [fmt.value_text(f.get(k)) if k in f else "—" for f in flat]
        cfg_rows.append({"key": k, "values": vals, "differs": _differs(vals)})
    return {
        "names": names,
        "ids": [str(r.get("run_id", "")) for r in runs],
        "pins": pins_rows,
        "pins_conflict": [r["key"] for r in pins_rows if r["differs"] and r["key"] not in DESIGN_PINS],
        "config": cfg_rows,
        "config_differ": sum(r["differs"] for r in cfg_rows),
    }


def _manifest_view(m: object) -> dict:
    m = _mapping(m, "manifest")
    scalars = [
        (k, fmt.value_text(v)) for k, v in fmt.flatten({k: v for k, v in m.items() if k != "strata"}).items()
    ]
    strata = None
    if isinstance(m.get("strata"), Mapping):
        cols: list[str] = []
        for v in m["strata"].values():
            for k in fmt.flatten(v) if isinstance(v, Mapping) else {"queries": v}:
                if k not in cols:
                    cols.append(k)
        rows = []
        for name, v in m["strata"].items():
            f = fmt.flatten(v) if isinstance(v, Mapping) else {"queries": v}
            rows.append(
                {"name": str(name), "values": [fmt.value_text(f[c]) if c in f else "—" for c in cols]}
            )
        strata = {"columns": cols, "rows": rows}
    elif "strata" in m:
        scalars.append(("strata", fmt.value_text(m["strata"])))
    return {"scalars": scalars, "strata": strata}


KAPPA_SOURCE_TEXT = {"computed": "computed by golden agree", "declared": "declared in the authoring file"}


def _opt_number(x: object, path: str) -> object:
    if x is not None and not fmt.is_number(x):
        raise _fail(path, f"must be a number or null, got {x!r}", "write null for undefined")
    return x


def _count(x: object, path: str) -> int:
    if not fmt.is_number(x) or float(x) != int(x) or x < 0:
        raise _fail(path, f"must be a count (an integer >= 0), got {x!r}", "give the number of items")
    return int(x)


def _estimate_text(e: object, path: str) -> str:
    """A computed figure (``{"value", "ci_low", "ci_high", "undefined_reason"}``) as "0.712 [0.60, 0.81]"."""
    e = _mapping(e, path)
    if not fmt.is_defined(_opt_number(e.get("value"), f"{path}.value")):
        why = e.get("undefined_reason")
        return fmt.UNDEFINED + (f" ({why})" if why else "")
    lo, hi = _opt_number(e.get("ci_low"), f"{path}.ci_low"), _opt_number(e.get("ci_high"), f"{path}.ci_high")
    return fmt.num(e["value"]) + (f" {fmt.ci(lo, hi)}" if fmt.is_defined(lo) and fmt.is_defined(hi) else "")


def _provenance_view(p: object) -> dict:
    """The golden set's provenance (docs/report.md): sources and the synthetic share, annotators and kappa
    with where the kappa came from, each run's judged fraction, and saturation per stratum."""
    path = "golden_provenance"
    p = _mapping(p, path)
    src = _mapping(_need(p, "sources", path), f"{path}.sources")
    mix = _mapping(_need(src, "source_mix", f"{path}.sources"), f"{path}.sources.source_mix")
    n = sum(_count(v, f"{path}.sources.source_mix.{k}") for k, v in mix.items())
    share = _opt_number(src.get("synthetic_share"), f"{path}.sources.synthetic_share")
    n_syn = _count(mix.get("synthetic", 0), f"{path}.sources.source_mix.synthetic")
    sources = {
        "mix": [{"source": str(k), "n": int(v), "share": f"{int(v) / n:.0%}" if n else fmt.UNDEFINED}
                for k, v in mix.items()],
        "n": n,
        "synthetic": fmt.UNDEFINED if share is None else f"{share:.0%}",
        "all_synthetic": bool(n) and n_syn == n,
        "note": str(src["note"]) if src.get("note") else None,
    }
    ag = _mapping(_need(p, "agreement", path), f"{path}.agreement")
    kinds = {k: _opt_number(ag.get(k), f"{path}.agreement.{k}") for k in ("kappa_binary", "kappa_graded")}
    source = ag.get("kappa_source")
    if source is not None and source not in KAPPA_SOURCE_TEXT:
        raise _fail(f"{path}.agreement.kappa_source", f"must be computed, declared or null, got {source!r}",
                    "see docs/report.md")
    computed = None
    if ag.get("computed") is not None:
        c = _mapping(ag["computed"], f"{path}.agreement.computed")
        cp = f"{path}.agreement.computed"
        computed = {
            "n_items": _count(_need(c, "n_items", cp), f"{cp}.n_items"),
            "n_single": _count(c.get("n_single", 0), f"{cp}.n_single"),
            "method": "Cohen's kappa" if c.get("kappa_method") == "cohen" else "Light's kappa (mean over pairs)",
            "figures": [(k, _estimate_text(c[k], f"{cp}.{k}"))
                        for k in ("kappa_binary", "kappa_graded", "alpha_ordinal", "alpha_nominal") if k in c],
            "files": [{"file": str(f.get("file", "")), "annotator": str(f.get("annotator", "")),
                       "sha256": str(f.get("sha256", ""))}
                      for f in (_mapping(x, f"{cp}.label_files[{i}]")
                                for i, x in enumerate(_list(c.get("label_files", []), f"{cp}.label_files")))],
        }
    agreement = {
        "annotators": [str(a) for a in _list(ag.get("annotators") or [], f"{path}.agreement.annotators")],
        "kappas": [(k, fmt.num(v) if v is not None else ("undefined" if source == "computed" else "not recorded"))
                   for k, v in kinds.items()],
        "source": KAPPA_SOURCE_TEXT.get(source) if source else None,
        "declared": source == "declared",
        "computed": computed,
    }
    judged = []
    for i, j in enumerate(_list(p.get("judged", []), f"{path}.judged")):
        jp = f"{path}.judged[{i}]"
        j = _mapping(j, jp)
        k = _opt_number(j.get("k"), f"{jp}.k")
        judged.append({"run": str(_need(j, "run", jp)), "k": fmt.num(k) if k is not None else "—",
                       "cell": _cell(_opt_number(j.get("mean"), f"{jp}.mean"), j.get("n"), j.get("n_undefined"))})
    return {"sources": sources, "agreement": agreement, "judged": judged,
            "saturation": _saturation_view(p.get("saturation"), f"{path}.saturation")}


def _saturation_view(s: object, path: str) -> dict | None:
    if s is None:
        return None
    s = _mapping(s, path)
    rule = s.get("rule")
    rule_text = None
    if rule is not None:
        rule = _mapping(rule, f"{path}.rule")
        t, floor = (_opt_number(rule.get(k), f"{path}.rule.{k}") for k in ("threshold", "ci_floor"))
        conf = _opt_number(rule.get("confidence"), f"{path}.rule.confidence")
        rule_text = (f"every configuration's stratum mean ≥ {fmt.value_text(t)} and the lower bound of its "
                     f"{fmt.value_text(100 * conf) if conf is not None else '95'}% t interval ≥ "
                     f"{fmt.value_text(floor)}")
    rows = []
    for i, r in enumerate(_list(s.get("strata", []), f"{path}.strata")):
        rp = f"{path}.strata[{i}]"
        r = _mapping(r, rp)
        sat = r.get("saturated")
        if sat is not None and not isinstance(sat, bool):
            raise _fail(f"{rp}.saturated", f"must be true, false or null, got {sat!r}", "null means undefined")
        rows.append({
            "stratum": str(_need(r, "stratum", rp)),
            "n_items": _count(r.get("n_items", 0), f"{rp}.n_items"),
            "best": _cell(_opt_number(r.get("best"), f"{rp}.best")),
            "best_run": str(r["best_run"]) if r.get("best_run") is not None else None,
            "latest": _cell(_opt_number(r.get("latest"), f"{rp}.latest")),
            "headroom": _cell(_opt_number(r.get("headroom"), f"{rp}.headroom")),
            "saturated": fmt.UNDEFINED if sat is None else ("yes" if sat else "no"),
            "saturated_class": "warn" if sat else "",  # a saturated stratum can no longer show a gain
            "n_passed_by_all": _count(r.get("n_passed_by_all", 0), f"{rp}.n_passed_by_all"),
            "n_undefined_items": _count(r.get("n_undefined_items", 0), f"{rp}.n_undefined_items"),
        })
    return {
        "metric": str(s.get("metric") or ""),
        "rule": rule_text,
        "configs": [str(c) for c in _list(s.get("configs", []), f"{path}.configs")],
        "latest_run": str(s["latest_run"]) if s.get("latest_run") is not None else None,
        "excluded": [{"run": str(e.get("run", "")), "reason": str(e.get("reason", ""))}
                     for e in (_mapping(x, f"{path}.excluded[{i}]")
                               for i, x in enumerate(_list(s.get("excluded", []), f"{path}.excluded")))],
        "rows": rows,
        "n_saturated": sum(r["saturated"] == "yes" for r in rows),
        "n_undefined": sum(r["saturated"] == fmt.UNDEFINED for r in rows),
        "reason": str(s["reason"]) if s.get("reason") else None,
    }


def _cell(value: object, n_def: object = None, n_undef: object = None) -> dict:
    """A table cell: the value, and a note with the undefined count when some queries had no value."""
    nu = int(n_undef) if fmt.is_number(n_undef) else None
    nd = int(n_def) if fmt.is_number(n_def) else None
    if fmt.is_defined(value):
        text = fmt.num(value)
        note = f"{nu} undefined" if nu else None
    else:
        text = fmt.UNDEFINED
        note = f"n={nu}" if nu else None
    tip = None
    if nd is not None or nu is not None:
        tip = f"defined for {nd if nd is not None else '?'} queries, undefined for {nu if nu is not None else '?'}"
    return {
        "text": text,
        "note": note,
        "tip": tip,
        "undefined": not fmt.is_defined(value),
        "sort": fmt.sort_key(value),
    }


def _run_table(t: object, name: str) -> tuple[dict, list[str], list[tuple[str, dict, list]]]:
    """A table with one value per run in each row: (the table, its runs, (path, row, values) per row)."""
    t = _mapping(t, name)
    runs = [str(x) for x in _list(_need(t, "runs", name), f"{name}.runs")]
    rows = []
    for i, r in enumerate(_list(_need(t, "rows", name), f"{name}.rows")):
        p = f"{name}.rows[{i}]"
        r = _mapping(r, p)
        rows.append((p, r, _numbers(_need(r, "values", p), f"{p}.values", len(runs), f"{name}.runs")))
    return t, runs, rows


def _stage_view(t: object) -> dict:
    _, runs, table_rows = _run_table(t, "stage_table")
    rows = []
    for p, r, vals in table_rows:
        nd = _numbers(r.get("n_defined", [None] * len(runs)), f"{p}.n_defined", len(runs), "stage_table.runs")
        nu = _numbers(
            r.get("n_undefined", [None] * len(runs)), f"{p}.n_undefined", len(runs), "stage_table.runs"
        )
        rows.append(
            {
                "stage": str(r.get("stage", "")),
                "metric": str(r.get("metric", "")),
                "cells": [_cell(v, a, b) for v, a, b in zip(vals, nd, nu, strict=True)],
            }
        )
    return {"runs": runs, "rows": rows}


def _strata_view(t: object) -> dict:
    t, runs, table_rows = _run_table(t, "strata_table")
    rows = [
        {"stratum": str(r.get("stratum", "")), "n": r.get("n"), "cells": [_cell(v) for v in vals]}
        for _, r, vals in table_rows
    ]
    return {"runs": runs, "metric": str(t.get("metric", "")), "rows": rows}


def _verdict_class(v: object) -> str:
    return VERDICT_CLASS.get(str(v).strip().lower(), "neutral")


def _comparison_view(c: object, i: int) -> dict:
    p = f"comparisons[{i}]"
    c = _mapping(c, p)
    rows = []
    for j, r in enumerate(_list(c.get("rows", []), f"{p}.rows")):
        r = _mapping(r, f"{p}.rows[{j}]")
        for k in ("mean_a", "mean_b", "delta", "ci_low", "ci_high", "p", "p_adj", "sigma_d", "mde"):
            if r.get(k) is not None and not fmt.is_number(r[k]):
                raise _fail(
                    f"{p}.rows[{j}].{k}",
                    f"must be a number or null, got {r[k]!r}",
                    "write null for undefined",
                )
        wlt = [r.get(k) for k in ("wins", "losses", "ties")]
        rows.append(
            {
                "metric": str(r.get("metric", "")),
                "stratum": str(r.get("stratum", "")),
                "is_all": str(r.get("stratum", "")) == "all",
                "n": fmt.num(r.get("n")),
                "mean_a": fmt.num(r.get("mean_a")),
                "mean_b": fmt.num(r.get("mean_b")),
                "delta": fmt.signed(r.get("delta")),
                "ci": fmt.ci(r.get("ci_low"), r.get("ci_high")),
                # colour by "better/worse", not by sign: a rise in a lower-is-better metric is a loss
                "ci_class": (svg.ci_class(r.get("ci_low"), r.get("ci_high"), r.get("delta"))
                             if r.get("higher_is_better", True)
                             else svg.ci_class(*(None if v is None else -v
                                                 for v in (r.get("ci_high"), r.get("ci_low"), r.get("delta"))))),
                "p": fmt.pvalue(r.get("p")),
                "p_adj": fmt.pvalue(r.get("p_adj")),
                "wlt": "/".join(fmt.num(x) if x is not None else "—" for x in wlt),
                "lost": (lost_text(r.get("missing"), r["lost"], r.get("gained") or 0, r.get("filled") or 0)
                         if r.get("lost") is not None else "—"),
                "sigma_d": fmt.num(r.get("sigma_d")),
                "mde": fmt.num(r.get("mde")),
                "verdict": str(r.get("verdict", "")),
                "verdict_class": _verdict_class(r.get("verdict", "")),
            }
        )
    diff = [
        {"key": str(d.get("key", "")), "a": fmt.value_text(d.get("a")), "b": fmt.value_text(d.get("b"))}
        for d in (
            _mapping(x, f"{p}.config_diff[{k}]")
            for k, x in enumerate(_list(c.get("config_diff", []), f"{p}.config_diff"))
        )
    ]
    pins = [
        {"pin": str(d.get("pin", "")), "a": fmt.value_text(d.get("a")), "b": fmt.value_text(d.get("b"))}
        for d in (
            _mapping(x, f"{p}.pin_differences[{k}]")
            for k, x in enumerate(_list(c.get("pin_differences", []), f"{p}.pin_differences"))
        )
    ]
    excluded = [
        {"metric": str(d.get("metric", "")), "reason": str(d.get("reason", ""))}
        for d in (
            _mapping(x, f"{p}.excluded[{k}]") for k, x in enumerate(_list(c.get("excluded", []), f"{p}.excluded"))
        )
    ]
    return {
        "baseline": str(c.get("baseline", "")),
        "candidate": str(c.get("candidate", "")),
        "pin_differences": pins,
        "excluded": excluded,
        "rows": rows,
        "claims": [str(s) for s in _list(c.get("claims", []), f"{p}.claims")],
        "coverage": [str(s).strip() for s in _list(c.get("coverage", []), f"{p}.coverage")],
        "config_diff": diff,
        "resamples": fmt.num(c["n_resamples"]) if fmt.is_number(c.get("n_resamples")) else None,
        "resamples_note": str(c["resamples_note"]) if c.get("resamples_note") else None,
        # judge metrics corrected by human labels (report --labels): plain strings, escaped by the template
        "ppi": ppi_rows(_list(c.get("ppi", []), f"{p}.ppi")),
        "ppi_columns": list(PPI_COLUMNS),
    }


def _forest_view(f: object) -> dict | None:
    f = _mapping(f, "forest")
    comps = _list(f.get("comparisons", []), "forest.comparisons")
    for i, c in enumerate(comps):
        c = _mapping(c, f"forest.comparisons[{i}]")
        for j, r in enumerate(_list(c.get("rows", []), f"forest.comparisons[{i}].rows")):
            r = _mapping(r, f"forest.comparisons[{i}].rows[{j}]")
            for k in ("delta", "ci_low", "ci_high"):
                if r.get(k) is not None and not fmt.is_number(r[k]):
                    raise _fail(
                        f"forest.comparisons[{i}].rows[{j}].{k}",
                        f"must be a number or null, got {r[k]!r}",
                        "write null for undefined",
                    )
    if not any(c.get("rows") for c in comps):
        return None
    return {"metric": str(f.get("metric", "")), "svg": svg.forest_plot(f)}


def _recall_view(curves: object, colors: dict[str, str]) -> dict | None:
    curves = _list(curves, "recall_curves")
    for i, c in enumerate(curves):
        c = _mapping(c, f"recall_curves[{i}]")
        k = _numbers(_need(c, "k", f"recall_curves[{i}]"), f"recall_curves[{i}].k")
        _numbers(
            _need(c, "recall", f"recall_curves[{i}]"),
            f"recall_curves[{i}].recall",
            len(k),
            f"recall_curves[{i}].k",
        )
        colors.setdefault(str(c.get("run", "")), svg.PALETTE[len(colors) % len(svg.PALETTE)])
    if not curves:
        return None
    return {"svg": svg.recall_plot(curves, colors)}


def _rerank_view(rows: object) -> dict | None:
    rows = [_mapping(r, f"rerank_movement[{i}]") for i, r in enumerate(_list(rows, "rerank_movement"))]
    table = []
    for i, r in enumerate(rows):
        counts = {}
        for key, _, _ in svg.RERANK_CATEGORIES:
            v = r.get(key, 0)
            if not (fmt.is_number(v) and float(v) >= 0 and float(v) == int(v)):
                raise _fail(
                    f"rerank_movement[{i}].{key}",
                    f"must be a non-negative count, got {v!r}",
                    "give the number of queries in that bucket",
                )
            counts[key] = int(v)
        total = sum(counts.values())
        table.append(
            {
                "run": str(r.get("run", "")),
                "final_k": r.get("final_k"),
                "total": total,
                "cells": [
                    (counts[k], f"{counts[k] / total:.1%}" if total else fmt.UNDEFINED)
                    for k, _, _ in svg.RERANK_CATEGORIES
                ],
            }
        )
    if not rows:
        return None
    return {
        "svg": svg.rerank_plot(rows),
        "rows": table,
        "labels": [lab for _, lab, _ in svg.RERANK_CATEGORIES],
    }


def _abstention_view(rows: object) -> dict | None:
    rows = [_mapping(r, f"abstention[{i}]") for i, r in enumerate(_list(rows, "abstention"))]
    for i, r in enumerate(rows):
        for k, _, _ in svg.ABSTENTION_METRICS:
            if r.get(k) is not None and not fmt.is_number(r[k]):
                raise _fail(
                    f"abstention[{i}].{k}",
                    f"must be a number or null, got {r[k]!r}",
                    "write null for undefined",
                )
    if not rows:
        return None
    table = [
        {
            "run": str(r.get("run", "")),
            "recall": fmt.num(r.get("abstention_recall")),
            "over": fmt.num(r.get("over_refusal")),
            "precision": fmt.num(r.get("abstention_precision")),
            "n_negative": fmt.num(r.get("n_negative")),
            "n_answerable": fmt.num(r.get("n_answerable")),
            "refused": fmt.num(r.get("refused")),
            "errors": fmt.num(r.get("errors")),
        }
        for r in rows
    ]
    return {"svg": svg.abstention_plot(rows), "rows": table}


def latency_summary(values: Sequence) -> dict:
    """Percentiles of per-query latency over the finite values (linear interpolation between order
    statistics, numpy's default, = Hyndman–Fan type 7). Non-finite values are counted, not used."""
    v = np.asarray([np.nan if x is None else x for x in values], dtype=float)
    finite = v[np.isfinite(v)]
    out = {"values": finite, "n": int(finite.size), "n_dropped": int(v.size - finite.size)}
    if finite.size:
        p = np.percentile(finite, [25, 50, 75, 95, 99])
        out.update(zip(("p25", "p50", "p75", "p95", "p99"), (float(x) for x in p), strict=True))
        out.update(mean=float(finite.mean()), max=float(finite.max()))
    else:
        out.update({k: math.nan for k in ("p25", "p50", "p75", "p95", "p99", "mean", "max")})
    return out


def _latency_view(rows: object, colors: dict[str, str]) -> dict | None:
    stats = []
    for i, r in enumerate(_list(rows, "latency")):
        r = _mapping(r, f"latency[{i}]")
        vals = _numbers(_need(r, "values_ms", f"latency[{i}]"), f"latency[{i}].values_ms")
        s = latency_summary(vals)
        s["run"] = str(r.get("run", ""))
        colors.setdefault(s["run"], svg.PALETTE[len(colors) % len(svg.PALETTE)])
        stats.append(s)
    if not stats:
        return None
    return {"svg": svg.latency_plot(stats, colors), "rows": stats}


def _oracle_view(o: object) -> dict:
    o = _mapping(o, "oracle_ladder")
    if "rungs" in o:
        return analyses.ladder_view(o)
    rows = [
        _mapping(r, f"oracle_ladder.rows[{i}]")
        for i, r in enumerate(_list(o.get("rows", []), "oracle_ladder.rows"))
    ]
    cols: list[str] = []
    for r in rows:
        cols += [str(k) for k in r if k != "config" and str(k) not in cols]
    body = [{"config": str(r.get("config", "")), "cells": [_cell(r.get(c)) for c in cols]} for r in rows]
    diag = o.get("diagnosis")
    return {"stats": False, "columns": cols, "rows": body, "diagnosis": str(diag) if diag is not None else None}


def _gate_view(g: object) -> dict:
    g = _mapping(g, "gate")
    verdict = str(_need(g, "verdict", "gate")).upper()
    checks = [
        {
            "name": str(c.get("name", "")),
            "kind": str(c.get("kind", "")),
            "verdict": str(c.get("verdict", "")),
            "verdict_class": _verdict_class(c.get("verdict", "")),
            "detail": str(c.get("detail", "")),
        }
        for c in (
            _mapping(x, f"gate.checks[{i}]") for i, x in enumerate(_list(g.get("checks", []), "gate.checks"))
        )
    ]
    return {
        "verdict": verdict,
        "cls": GATE_CLASS.get(verdict, "neutral"),
        "baseline": str(g.get("baseline", "")),
        "candidate": str(g.get("candidate", "")),
        "checks": checks,
    }


def _compact_from_rows(queries: Sequence, run_names: list[str]) -> dict:
    """The row form of ``queries`` (one object per query, as documented) turned into the column form
    ``build_report_data`` writes, validating as it goes."""
    rows = [_mapping(q, f"queries[{i}]") for i, q in enumerate(queries)]
    qruns = list(run_names)
    for i, q in enumerate(rows):
        _need(q, "query_id", f"queries[{i}]")
        for name in _mapping(q.get("runs") or {}, f"queries[{i}].runs"):
            if str(name) not in qruns:
                qruns.append(str(name))
    spans: dict = {}
    span_cols: dict[str, list] = {"doc_id": [], "start": [], "end": [], "text": [], "exact": []}

    def span(x: Mapping) -> int:
        s, e = x.get("start"), x.get("end")
        s = int(s) if fmt.is_number(s) else None
        e = int(e) if fmt.is_number(e) else None
        key = (str(x.get("doc_id", "")), s, e, str(x.get("text") or ""))
        if key not in spans:
            spans[key] = len(span_cols["doc_id"])
            for k, v in zip(("doc_id", "start", "end", "text"), key, strict=True):
                span_cols[k].append(v)
            span_cols["exact"].append(s is not None and e is not None and len(key[3]) == e - s)
        return spans[key]

    ev = {"n": [], "span": [], "grade": []}
    runs = {name: {"name": name, "present": [], "outcome": [], "answer": [], "metrics": {},
                   "retrieved": {"n": [], "span": [], "grade": []}} for name in qruns}
    worst = {"metric": "", "delta": [], "baseline": [], "candidate": []}
    metrics_seen: dict[str, list[str]] = {name: [] for name in qruns}
    for i, q in enumerate(rows):
        evidence = [_mapping(e, f"queries[{i}].evidence[{j}]")
                    for j, e in enumerate(_list(q.get("evidence") or [], f"queries[{i}].evidence"))]
        ev["n"].append(len(evidence))
        for e in evidence:
            ev["span"].append(span(e))
            ev["grade"].append(e.get("grade"))
        runs_map = q.get("runs") or {}
        for name in qruns:
            rr = runs_map.get(name)
            out = runs[name]
            out["present"].append(rr is not None)
            rr = _mapping(rr or {}, f"queries[{i}].runs.{name}")
            out["outcome"].append(rr.get("outcome"))
            out["answer"].append(rr.get("answer"))
            for m, v in _mapping(rr.get("metrics") or {}, f"queries[{i}].runs.{name}.metrics").items():
                if str(m) not in out["metrics"]:
                    out["metrics"][str(m)] = [None] * i
                    metrics_seen[name].append(str(m))
                out["metrics"][str(m)].append(v)
            for col in out["metrics"].values():
                if len(col) == i:
                    col.append(None)
            units = [_mapping(u, f"queries[{i}].runs.{name}.retrieved[{j}]")
                     for j, u in enumerate(_list(rr.get("retrieved") or [], f"queries[{i}].runs.{name}.retrieved"))]
            out["retrieved"]["n"].append(len(units))
            for u in units:
                out["retrieved"]["span"].append(span(u))
                out["retrieved"]["grade"].append(u.get("grade"))
        wd = q.get("worst_delta")
        wd = _mapping(wd, f"queries[{i}].worst_delta") if wd else {}
        worst["metric"] = worst["metric"] or str(wd.get("metric", ""))
        worst["delta"].append(wd.get("delta"))
        worst["baseline"].append(wd.get("baseline"))
        worst["candidate"].append(wd.get("candidate"))
    return {
        "query_id": [str(q["query_id"]) for q in rows],
        "stratum": [str(q.get("stratum", "")) for q in rows],
        "question": [str(q.get("question", "")) for q in rows],
        "answerable": [q.get("answerable") for q in rows],
        "evidence": ev,
        "spans": {**span_cols, "cut": [False] * len(span_cols["doc_id"])},
        "runs": [runs[name] for name in qruns],
        "worst": worst,
    }


def _column(t: Mapping, key: str, path: str, n: int | None) -> list:
    col = _list(_need(t, key, path), f"{path}.{key}")
    if n is not None and len(col) != n:
        raise _fail(f"{path}.{key}", f"has {len(col)} entries, expected {n}", "give one entry per query")
    return list(col)


def _numeric(col: list, path: str) -> list:
    if set(map(type, col)) <= _PLAIN_NUMBERS:
        # the common case (build_report_data's plain floats), checked by type in one pass, and when no value
        # is NaN or infinite (numpy counts them) returned as it is
        if _all_finite(col):
            return list(col)
        return [None if v is None or not math.isfinite(v) else v for v in col]
    for i, v in enumerate(col):
        if v is not None and not fmt.is_number(v):
            raise _fail(f"{path}[{i}]", f"must be a number or null, got {v!r}", "write null for undefined")
    # NaN is not JSON; undefined is null on the page
    return [None if v is None or not math.isfinite(float(v)) else v for v in col]


def _all_finite(col: list) -> bool:
    """Whether every value of a list of plain numbers and None is None or finite."""
    try:
        values = np.asarray(col, dtype=np.float64)  # None becomes NaN
    except OverflowError:  # an int beyond float range is finite
        return all(v is None or isinstance(v, int) or math.isfinite(v) for v in col)
    return int(np.isfinite(values).sum()) + col.count(None) == len(col)


def _whole(col: list) -> list:
    """Whole numbers as ints ("2" rather than "2.0" on the page, a tenth of a large page), others as given."""
    values = np.asarray([np.nan if g is None else g for g in col], dtype=np.float64) if None in col else \
        np.asarray(col, dtype=np.float64)
    if len(values) and np.all(np.isfinite(values) & (values == np.rint(values)) & (np.abs(values) < 2.0**53)):
        return values.astype(np.int64).tolist()
    return [int(g) if g is not None and float(g).is_integer() else g for g in col]


def _flags(col: Sequence) -> list[int]:
    """Booleans for the page as 1/0 (the script reads them as truthy), shorter than true/false."""
    return [1 if x else 0 for x in col]


def _strings(col: list) -> list:
    return [None if v is None else str(v) for v in col]


def _codes(col: Sequence, table: dict) -> list:
    """Repeated strings as small integers into ``table`` (value -> code, grown as needed); None stays None.
    An outcome repeated for each of 100,000 queries costs two bytes a query instead of eleven."""
    return [None if v is None else table.setdefault(v, len(table)) for v in col]


def _runs_of(col: Mapping, path: str, n_units: int, n_spans: int) -> dict:
    """A ``{n, span, grade}`` list of units per query: checked that the counts add up and spans exist."""
    counts = [int(x) for x in _numeric(_column(col, "n", path, None), f"{path}.n")]
    span = _column(col, "span", path, sum(counts))
    arr = np.asarray(span)
    # a list of plain ints (what build_report_data writes) is checked in one vectorised pass
    ok = arr.dtype.kind in "iu" and arr.size > 0 and int(arr.min()) >= 0 and int(arr.max()) < n_spans
    if not ok and any(not fmt.is_number(s) or not 0 <= int(s) < n_spans for s in span):
        raise _fail(f"{path}.span", f"refers to a span outside queries.spans (0..{n_spans - 1})",
                    "refer to spans by their index")
    grade = _whole(_numeric(_column(col, "grade", path, sum(counts)), f"{path}.grade"))
    if len(counts) != n_units:
        raise _fail(f"{path}.n", f"has {len(counts)} entries, expected {n_units}", "give one count per query")
    return {"n": counts, "span": arr.tolist() if ok else [int(s) for s in span], "grade": grade}


def _queries_view(data: Mapping, run_names: list[str]) -> dict | None:
    raw = data["queries"]
    t = _mapping(raw, "queries") if isinstance(raw, Mapping) else _compact_from_rows(_list(raw, "queries"), run_names)
    ids = [str(x) for x in _column(t, "query_id", "queries", None)]
    n = len(ids)
    if not n:
        return None
    sp = _mapping(_need(t, "spans", "queries"), "queries.spans")
    n_spans = len(_column(sp, "doc_id", "queries.spans", None))
    spans = {"doc_id": _strings(_column(sp, "doc_id", "queries.spans", n_spans)),
             "start": _numeric(_column(sp, "start", "queries.spans", n_spans), "queries.spans.start"),
             "end": _numeric(_column(sp, "end", "queries.spans", n_spans), "queries.spans.end"),
             "text": _strings(_column(sp, "text", "queries.spans", n_spans)),
             "exact": _flags(_column(sp, "exact", "queries.spans", n_spans)),
             "cut": _flags(sp.get("cut") or [False] * n_spans)}
    strata_col = _strings(_column(t, "stratum", "queries", n))
    strata = sorted(set(strata_col))
    s_index = {s: i for i, s in enumerate(strata)}
    outcome_codes: dict = {}
    runs = []
    for k, r in enumerate(_list(_need(t, "runs", "queries"), "queries.runs")):
        p = f"queries.runs[{k}]"
        r = _mapping(r, p)
        metrics = _mapping(r.get("metrics") or {}, f"{p}.metrics")
        outcome = _strings(_column(r, "outcome", p, n))
        runs.append({
            "name": str(_need(r, "name", p)),
            "present": _flags(_column(r, "present", p, n)),
            "outcome": _codes(outcome, outcome_codes),
            "answer": _strings(_column(r, "answer", p, n)),
            "metrics": {str(m): _numeric(_column(metrics, m, f"{p}.metrics", n), f"{p}.metrics.{m}")
                        for m in metrics},
            "retrieved": _runs_of(_mapping(_need(r, "retrieved", p), f"{p}.retrieved"), f"{p}.retrieved", n,
                                  n_spans),
            "any_outcome": any(o is not None for o in outcome),
        })
    wanted = data.get("query_columns")
    metric_order: list[str] = []
    for r in runs:
        metric_order += [m for m in r["metrics"] if m not in metric_order]
    columns = ([str(m) for m in _list(wanted, "query_columns")] if wanted is not None
               else metric_order[:DEFAULT_QUERY_COLUMNS])
    w = _mapping(t.get("worst") or {}, "queries.worst")
    worst_delta = _numeric(_column(w, "delta", "queries.worst", n), "queries.worst.delta") if w else [None] * n
    worst_base = _strings(w.get("baseline") or [None] * n) if w else [None] * n
    worst_cand = _strings(w.get("candidate") or [None] * n) if w else [None] * n
    pair_codes: dict = {}
    worst_pair = _codes([None if b is None and c is None else (b, c) for b, c in zip(worst_base, worst_cand,
                                                                                     strict=True)], pair_codes)
    has_worst = any(d is not None and d < 0 for d in worst_delta)
    lead = [("query", "text", "id"), ("stratum", "text", "stratum"), ("answerable", "text", "answerable")]
    col = 0
    header_lead, header_groups, header_tail, keys = [], [], [], []
    for label, kind, key in lead:
        header_lead.append({"label": label, "kind": kind, "col": col})
        keys.append([key])
        col += 1
    for k, r in enumerate(runs):
        subs = []
        sub = ([("outcome", "text", ["outcome", k])] if r["any_outcome"] else []) + [
            (m, "num", ["metric", k, m]) for m in columns]
        for label, kind, key in sub:
            subs.append({"label": label, "kind": kind, "col": col, "run": r["name"]})
            keys.append(key)
            col += 1
        if subs:
            header_groups.append({"run": r["name"], "subs": subs})
    if has_worst:
        header_tail.append({"label": "worst Δ", "kind": "num", "col": col})
        keys.append(["worst"])
        col += 1
    anchors = fmt.anchor_ids(ids)
    payload = {
        "id": ids,
        "anchor": {i: a for i, (q, a) in enumerate(anchors.items()) if a != "q-" + q},
        "strata": strata,
        "stratum": [s_index[s] for s in strata_col],
        "question": _strings(_column(t, "question", "queries", n)),
        "answerable": [None if a is None else int(bool(a)) for a in _column(t, "answerable", "queries", n)],
        "evidence": _runs_of(_mapping(_need(t, "evidence", "queries"), "queries.evidence"), "queries.evidence", n,
                             n_spans),
        "spans": spans,
        "runs": [{k: v for k, v in r.items() if k != "any_outcome"} for r in runs],
        "columns": keys,
        # outcomes and worst pairs as codes into these tables (the script expands them on load)
        "outcomes": list(outcome_codes),
        "worst": {"metric": str(w.get("metric", "")) if w else "", "delta": worst_delta,
                  "pairs": [list(pair) for pair in pair_codes], "pair": worst_pair},
        "page_size": QUERY_PAGE_SIZE,
    }
    notes = []
    n_cut = sum(spans["cut"])
    if n_cut:
        notes.append(f"{n_cut:,} evidence or unit texts are clipped to {sp.get('max_chars')} characters on this "
                     "page to keep it small; the corpus holds the full text.")
    if t.get("n_answers_cut"):
        notes.append(f"{t['n_answers_cut']:,} answers are clipped to {t.get('answer_max_chars')} characters; the "
                     "traces hold the full text.")
    if t.get("metrics_omitted"):
        notes.append(f"Only the table's metrics are embedded per query ({t['metrics_omitted']:,} other values "
                     f"are in {data.get('parquet') or 'the store'}).")
    return {
        "headers": {"lead": header_lead, "groups": header_groups, "tail": header_tail, "n": col},
        "n": n,
        "strata": strata,
        "anchors": anchors,
        "ids": ids,
        "question": payload["question"],
        "stratum": strata_col,
        "worst_delta": worst_delta,
        "worst_metric": payload["worst"]["metric"],
        "worst_pair": list(zip(worst_base, worst_cand, strict=True)),
        "columns": columns,
        "ncols": col,
        "notes": notes,
        **_embed(_json_pieces(payload)),
    }


def _embed(pieces: Iterable[str]) -> dict:
    """The query data as the page carries it: the JSON itself, or above :data:`COMPRESS_ABOVE` characters
    its raw DEFLATE stream in base64 (40 MB of JSON becomes about 11 MB; the page's script inflates it,
    synchronously, before drawing the table). Base64 holds only ``[A-Za-z0-9+/=]``, so it is as inert in the
    page as escaped JSON. ``pieces`` (:func:`_json_pieces`) are compressed as they come, so the whole JSON
    text never sits in memory beside its encoded bytes."""
    head, size, rest = [], 0, iter(pieces)
    for piece in rest:
        head.append(piece)
        size += len(piece)
        if size > COMPRESS_ABOVE:
            break
    else:
        return {"json": Markup("".join(head)), "encoding": None, "json_bytes": None}
    # level 1: a third of a second for 40 MB, within a few percent of the best level's size once in base64.
    # zlib releases the GIL: a worker thread compresses ~1 MB blocks in order while this thread writes the
    # next pieces (at most a few blocks wait, so memory stays bounded). DEFLATE's output does not depend on
    # how its input is split across calls.
    deflate = zlib.compressobj(1, zlib.DEFLATED, -15)
    packed, pending, block, n_block, n_raw = [], [], [], 0, 0
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragassay-deflate") as pool:
        for piece in itertools.chain(head, rest, [None]):
            if piece is not None:
                raw = piece.encode("utf-8")
                n_raw += len(raw)
                block.append(raw)
                n_block += len(raw)
            if n_block >= _DEFLATE_BLOCK or (piece is None and block):
                pending.append(pool.submit(deflate.compress, b"".join(block)))
                block, n_block = [], 0
                while len(pending) > 3:
                    packed.append(pending.pop(0).result())
        packed += [job.result() for job in pending]
    packed.append(deflate.flush())
    return {"json": Markup(base64.b64encode(b"".join(packed)).decode("ascii")), "encoding": "deflate-base64",
            "json_bytes": n_raw}


_DEFLATE_BLOCK = 1 << 20


def _json_pieces(obj: object, depth: int = 3) -> Iterator[str]:
    """:func:`script_json` of ``obj`` in pieces that concatenate to it: objects with string keys and lists
    are opened ``depth`` levels down, so no piece is more than one column of the query data."""
    if depth and isinstance(obj, Mapping) and all(isinstance(k, str) for k in obj):
        yield "{"
        for i, (k, v) in enumerate(obj.items()):
            yield ("," if i else "") + script_json(k) + ":"
            yield from _json_pieces(v, depth - 1)
        yield "}"
    elif depth and isinstance(obj, list) and len(obj) <= 16:
        yield "["
        for i, v in enumerate(obj):
            if i:
                yield ","
            yield from _json_pieces(v, depth - 1)
        yield "]"
    else:
        yield script_json(obj)


_PLAIN = frozenset({str, int, bool, type(None)})


def _orjson_writes_as_json(obj: object) -> bool:
    """Whether ``obj`` holds only what orjson writes byte for byte as ``json.dumps(ensure_ascii=False)``
    does (every code point escaped alike, tested): str, int, bool and None in lists and str-keyed dicts.
    Floats are not (orjson writes 1e-05 as 0.00001, NaN as null), nor other types (orjson writes
    dataclasses, tuples' subclasses and the like that json refuses): those go to json."""
    t = type(obj)
    if t in _PLAIN:
        return True
    if t is list:
        types = set(map(type, obj))
        if types <= _PLAIN:
            return True
        if types == {list}:  # a column of short lists: their items' types in one pass
            inner = set(map(type, itertools.chain.from_iterable(obj)))
            if inner <= _PLAIN:
                return True
        return all(map(_orjson_writes_as_json, obj))
    if t is dict:
        return all(type(k) is str for k in obj) and all(map(_orjson_writes_as_json, obj.values()))
    return False


def script_json(obj: object) -> str:
    """JSON for a ``<script type="application/json">`` element: ``<``, ``>``, ``&`` and U+2028/U+2029 written
    as escapes, so no text in it can close the element or open a comment, whatever the data holds."""
    text = None
    if _orjson_writes_as_json(obj):
        try:
            text = orjson.dumps(obj).decode("utf-8")
        except orjson.JSONEncodeError:  # an int beyond 64 bits, a lone surrogate, nesting past 255: json's turn
            pass
    if text is None:
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _worst_view(data: Mapping, queries: dict | None) -> list[dict] | None:
    ids = [str(x) for x in _list(data["worst_regressions"], "worst_regressions")]
    if not ids:
        return None
    anchors = queries["anchors"] if queries else {}
    at = {q: i for i, q in enumerate(queries["ids"])} if queries else {}
    out = []
    for qid in ids:
        i = at.get(qid)
        d = queries["worst_delta"][i] if i is not None else None
        out.append(
            {
                "query_id": qid,
                "anchor": anchors.get(qid),
                "stratum": queries["stratum"][i] if i is not None else "",
                "question": queries["question"][i] or "" if i is not None else "",
                "worst": {"text": fmt.signed(d), "metric": queries["worst_metric"],
                          "pair": "{} → {}".format(*queries["worst_pair"][i])} if d is not None else None,
            }
        )
    return out
