"""The report's claims section: per run, a stacked bar of the five-way breakdown of its response claims
(:func:`ragassay.analysis.claims_diff.claim_breakdowns`) and a table of the eleven claim metrics with their
undefined counts. Every run name and label is escaped; the fragment is self-contained HTML (inline SVG)."""

from __future__ import annotations

from collections.abc import Mapping

from markupsafe import Markup, escape

from ragassay.report.svg import el

# class -> (legend label, colour); colour-blind-safe, the two wrong classes in warm colours
CLASS_STYLE = {
    "correct_relevant": ("correct, relevant support", "#009E73"),
    "correct_irrelevant": ("correct, irrelevant support only", "#56B4E9"),
    "self_knowledge": ("correct, unsupported (self-knowledge)", "#0072B2"),
    "noise": ("incorrect, supported (noise)", "#E69F00"),
    "hallucination": ("incorrect, unsupported (hallucination)", "#D55E00"),
}
_W, _LABEL_W, _BAR_H, _GAP = 640, 150, 22, 8


def breakdown_svg(data: Mapping) -> Markup:
    """A horizontal 100% stacked bar per run; a run without classified claims gets a labelled empty bar."""
    runs = data["runs"]
    legend_rows = len(CLASS_STYLE)
    height = len(runs) * (_BAR_H + _GAP) + legend_rows * 18 + 24
    bar_w = _W - _LABEL_W - 60
    parts = []
    for k, r in enumerate(runs):
        y = k * (_BAR_H + _GAP)
        parts.append(el("text", {"x": float(_LABEL_W - 8), "y": float(y + _BAR_H * 0.7), "text-anchor": "end",
                                 "font-size": 12, "fill": "#1f2328"}, str(r["name"])))
        x = float(_LABEL_W)
        if not r["claims"]:
            parts.append(el("rect", {"x": x, "y": float(y), "width": float(bar_w), "height": _BAR_H, "fill": "none",
                                     "stroke": "#8c959f"}))
            parts.append(el("text", {"x": x + 6, "y": float(y + _BAR_H * 0.7), "font-size": 11, "fill": "#59636e"},
                            "no classified claims"))
            continue
        for cls, (label, colour) in CLASS_STYLE.items():
            share = r["shares"].get(cls) or 0.0
            w = share * bar_w
            if w > 0:
                tip = f"{r['name']}: {label} {r['counts'][cls]} of {r['claims']} ({share:.1%})"
                parts.append(el("rect", {"x": x, "y": float(y), "width": w, "height": _BAR_H, "fill": colour},
                                el("title", {}, tip)))
            x += w
        parts.append(el("text", {"x": float(_LABEL_W + bar_w + 6), "y": float(y + _BAR_H * 0.7), "font-size": 11,
                                 "fill": "#59636e"}, f"n={r['claims']}"))
    y0 = len(runs) * (_BAR_H + _GAP) + 8
    for i, (label, colour) in enumerate(CLASS_STYLE.values()):
        y = y0 + i * 18
        parts.append(el("rect", {"x": float(_LABEL_W), "y": float(y), "width": 12, "height": 12, "fill": colour}))
        parts.append(el("text", {"x": float(_LABEL_W + 18), "y": float(y + 10), "font-size": 11, "fill": "#1f2328"},
                        label))
    return el("svg", {"class": "plot claims-breakdown", "viewBox": f"0 0 {_W} {height}", "width": _W,
                      "height": height, "role": "img", "aria-label": "five-way breakdown of response claims per run",
                      "font-family": "system-ui, -apple-system, 'Segoe UI', sans-serif"},
              el("title", {}, "Response claims by class"),
              el("desc", {}, "Share of each run's response claims that are correct with relevant support, correct "
                             "with irrelevant support only, correct without support, incorrect with support, and "
                             "incorrect without support."),
              *parts)


def _cell(m: Mapping) -> str:
    if m["mean"] is None:
        return f"undefined ({m['undefined']})"
    return f"{m['mean']:.3f}" + (f" ({m['undefined']} undefined)" if m["undefined"] else "")


def claims_html(data: Mapping) -> Markup:
    """The section: heading, the stacked bar, and the metric table (one column per run)."""
    runs = data["runs"]
    head = "".join(f"<th>{escape(r['name'])}</th>" for r in runs)
    metrics = list(runs[0]["metrics"]) if runs else []
    rows = "".join(f"<tr><td>{escape(m)}</td>" + "".join(f"<td>{escape(_cell(r['metrics'][m]))}</td>" for r in runs)
                   + "</tr>" for m in metrics)
    judges = "; ".join(f"{r['name']}: {r['judge_model']}, relevance {r['relevance']}, {r['items_classified']} of "
                       f"{r['items']} answers classified" for r in runs)
    return Markup(
        "<section class=\"claims\" id=\"claims\"><h2>Claims</h2>"
        f"<p>{escape(judges)}</p>"
        f"{breakdown_svg(data)}"
        f"<table><thead><tr><th>metric</th>{head}</tr></thead><tbody>{rows}</tbody></table></section>")


def claims_report_section(d: Mapping) -> dict:
    """The generic report section (``{"title", "tables", "notes"}``, as ``report --include`` takes) of one saved
    ``judge claims --json`` output: the eleven means with their counts, and the pooled breakdown."""
    metrics = [[m, v["mean"], v["defined"], v["undefined"]] for m, v in d["metrics"].items()]
    b = d["breakdown"]
    shares = [[CLASS_STYLE[c][0], s] for c, s in b["shares"].items()]
    judge = d["judge"]
    return {"title": f"Claims: {d['run_name']}",
            "tables": [{"title": "Claim metrics", "columns": ["metric", "mean", "defined", "undefined"],
                        "rows": metrics},
                       {"title": f"Response claims by class ({b['claims']} claims)", "columns": ["class", "share"],
                        "rows": shares}],
            "notes": [f"judge {judge['judge_model']}, relevance rule {judge['relevance']}; quote not found "
                      f"{d['quote_not_found']}"]}


__all__ = ["CLASS_STYLE", "breakdown_svg", "claims_html", "claims_report_section"]
