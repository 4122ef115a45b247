"""HTML fragments and report sections for the online flywheel: judge-on-sample quality, the offline–online gap
table with its calibration scatter, and the promote queue summary.

The ``*_html`` functions return escaped ``Markup`` (every value through ``markupsafe.escape`` or the SVG
``el`` helper); the ``*_report_section`` functions return the generic ``{"title", "tables", "notes"}`` section
that ``ragassay report --include`` renders, from the saved ``--json`` output of ``online judge``, ``online gap``
and ``online promote`` (their ``kind`` is ``online-judge``, ``online-gap``, or the promote meta's
``ragassay online promote``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from markupsafe import Markup, escape

from ragassay.report import fmt
from ragassay.report.svg import _GRID, _MUTED, _Scale, _text, _tick_label, el, nice_ticks

SVG_KIND = "online gap svg"
_SVG_CLASS = "plot-online-gap"


# ---------------------------------------------------------------------------------------------- the scatter
def calibration_svg(rows: Sequence[Mapping], calibration: Mapping) -> Markup:
    """Online delta against offline delta, one point per release (with each delta's interval as a bar where
    known), the fitted calibration line when defined, and dashed zero lines."""
    metric = str(calibration.get("metric", ""))
    measure = str(calibration.get("online_measure", ""))
    pts = [r for r in rows if fmt.is_defined((r.get("offline") or {}).get("delta"))
           and fmt.is_defined((r.get("online") or {}).get("delta"))]
    W, H, left, right, top, bottom = 560, 360, 70, 20, 20, 50
    label = f"online vs offline delta: {measure} against {metric}"
    if not pts:
        desc = "no release has both deltas yet"
        return _svg(W, 80, label, desc, _text(left, 40, desc, fill=_MUTED))

    def bounds(side: str) -> tuple[float, float]:
        vals = [0.0]
        for r in pts:
            d = r[side]
            vals += [float(d["delta"])] + [float(d[k]) for k in ("ci_low", "ci_high") if fmt.is_defined(d.get(k))]
        lo, hi = min(vals), max(vals)
        pad = (hi - lo) * 0.08 or 0.01
        return lo - pad, hi + pad

    xlo, xhi = bounds("offline")
    ylo, yhi = bounds("online")
    sx, sy = _Scale(xlo, xhi, left, W - right), _Scale(ylo, yhi, H - bottom, top)
    parts: list[Markup] = []
    xt, yt = nice_ticks(xlo, xhi), nice_ticks(ylo, yhi)
    for t in xt:
        if xlo <= t <= xhi:
            parts.append(el("line", {"x1": sx(t), "x2": sx(t), "y1": float(top), "y2": float(H - bottom),
                                     "stroke": _GRID}))
            parts.append(_text(sx(t), H - bottom + 14, _tick_label(t, xt), anchor="middle", size=11, fill=_MUTED))
    for t in yt:
        if ylo <= t <= yhi:
            parts.append(el("line", {"x1": float(left), "x2": float(W - right), "y1": sy(t), "y2": sy(t),
                                     "stroke": _GRID}))
            parts.append(_text(left - 6, sy(t) + 4, _tick_label(t, yt), anchor="end", size=11, fill=_MUTED))
    parts.append(el("line", {"x1": sx(0.0), "x2": sx(0.0), "y1": float(top), "y2": float(H - bottom),
                             "stroke": _MUTED, "stroke-dasharray": "4 3"}))
    parts.append(el("line", {"x1": float(left), "x2": float(W - right), "y1": sy(0.0), "y2": sy(0.0),
                             "stroke": _MUTED, "stroke-dasharray": "4 3"}))
    parts.append(_text((left + W - right) / 2, H - 12, f"offline Δ {metric}", anchor="middle", size=11.5,
                       fill=_MUTED))
    parts.append(_text(14, top + 8, f"online Δ {measure}", size=11.5, fill=_MUTED))
    if fmt.is_defined(calibration.get("slope")):
        b, a = float(calibration["slope"]), float(calibration["intercept"])
        parts.append(el("line", {"class": "calibration-line", "x1": sx(xlo), "y1": sy(a + b * xlo), "x2": sx(xhi),
                                 "y2": sy(a + b * xhi), "stroke": "#D55E00", "stroke-width": 2}))
    for r in pts:
        off, on = r["offline"], r["online"]
        x, y = float(off["delta"]), float(on["delta"])
        if fmt.is_defined(on.get("ci_low")) and fmt.is_defined(on.get("ci_high")):
            parts.append(el("line", {"x1": sx(x), "x2": sx(x), "y1": sy(float(on["ci_low"])),
                                     "y2": sy(float(on["ci_high"])), "stroke": "#0072B2", "stroke-width": 1.2}))
        if fmt.is_defined(off.get("ci_low")) and fmt.is_defined(off.get("ci_high")):
            parts.append(el("line", {"x1": sx(float(off["ci_low"])), "x2": sx(float(off["ci_high"])), "y1": sy(y),
                                     "y2": sy(y), "stroke": "#0072B2", "stroke-width": 1.2}))
        tip = (f"release {r.get('release')} vs {r.get('previous')}: offline {fmt.signed(x)}, "
               f"online {fmt.signed(y)}")
        parts.append(el("circle", {"class": "release", "cx": sx(x), "cy": sy(y), "r": 4.5, "fill": "#0072B2"},
                        el("title", {}, tip)))
    desc = (f"{len(pts)} release(s); " + (f"fit: slope {fmt.num(calibration.get('slope'), 4)}, intercept "
                                          f"{fmt.signed(calibration.get('intercept'), 4)}"
                                          if fmt.is_defined(calibration.get("slope"))
                                          else f"calibration undefined: {calibration.get('undefined', '')}"))
    return _svg(W, H, label, desc, *parts)


def _svg(width: int, height: int, label: str, desc: str, *children: object) -> Markup:
    return el("svg", {"class": f"plot {_SVG_CLASS}", "viewBox": f"0 0 {width} {height}", "width": width,
                      "height": height, "role": "img", "aria-label": label,
                      "font-family": "system-ui, -apple-system, 'Segoe UI', sans-serif"},
              el("title", {}, label), el("desc", {}, desc), *children)


def is_calibration_svg(path: Path) -> bool:
    """True for a file :func:`calibration_svg` wrote (so ``online gap --svg`` may replace it)."""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return head.startswith(b"<svg") and f'class="plot {_SVG_CLASS}"'.encode() in head


# ---------------------------------------------------------------------------------------------- tables
def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> Markup:
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{escape(_cell(v))}</td>" for v in r) + "</tr>" for r in rows)
    return Markup(f"<table class=\"online\"><caption>{escape(title)}</caption><thead><tr>{head}</tr></thead>"
                  f"<tbody>{body}</tbody></table>")


def _cell(v: object) -> str:
    return fmt.num(v) if v is None or fmt.is_number(v) else str(v)


def _html(section: Mapping, extra: Markup | None = None) -> Markup:
    parts = [f"<section class=\"online\"><h2>{escape(section['title'])}</h2>"]
    parts += [str(_table(t["title"], t["columns"], t["rows"])) for t in section["tables"]]
    if extra is not None:
        parts.append(str(extra))
    parts += [f"<p class=\"note\">{escape(n)}</p>" for n in section["notes"]]
    return Markup("".join(parts) + "</section>")


# ---------------------------------------------------------------------------------------------- sections
def judge_report_section(d: Mapping) -> dict:
    """``online judge --json``: quality per metric, day and stratum, weighted and unweighted."""
    rows = [[r["metric"], r["day"], r["stratum"], r.get("value"), r.get("ci_low"), r.get("ci_high"),
             r.get("n_defined"), r.get("n_sampled"), r.get("unweighted"), r.get("covered")] for r in d["quality"]]
    c, s = d["counts"], d["spend"]
    return {"title": f"Judge on a sample: {d['judge']['judge_model']}",
            "tables": [{"title": "Quality per day and stratum (weighted Hájek estimate; unweighted beside it)",
                        "columns": ["metric", "day", "stratum", "weighted", "low", "high", "n judged", "sampled",
                                    "unweighted", "covered"], "rows": rows}],
            "notes": [f"sampled {c['sampled']} of {c['records']} requests ({c['sampled_failures']} with a failure "
                      f"signal) at rate {d['design']['rate']:g}, failures x{d['design']['oversample_failures']:g}",
                      f"judged now {c['judged_now']}, already judged {c['already_judged']}, skipped {c['skipped']}, "
                      f"errors {c['errors']}; spent ${s['usd']:.4f}"]}


def gap_report_section(d: Mapping) -> dict:
    """``online gap --json``: one row per release of the (metric, online measure) pair and the calibration."""
    rows = [[r["release"], r["previous"], r["offline"].get("delta"), r["offline"].get("ci_low"),
             r["offline"].get("ci_high"), r["online"].get("delta"), r["online"].get("ci_low"),
             r["online"].get("ci_high")] for r in d["rows"]]
    cal = d["calibration"]
    note = (f"calibration undefined: {cal['undefined']}" if cal.get("undefined") else
            f"calibration over {cal['n']} releases (online Δ = intercept + slope × offline Δ): slope "
            f"{fmt.num(cal['slope'], 4)}, intercept {fmt.signed(cal['intercept'], 4)}, r {fmt.num(cal.get('r'))}")
    return {"title": f"Offline–online gap: {cal['online_measure']} against {cal['metric']}",
            "tables": [{"title": "Predicted (offline) and observed (online) delta per release",
                        "columns": ["release", "previous", "offline Δ", "low", "high", "online Δ", "low", "high"],
                        "rows": rows}],
            "notes": [note]}


def promote_report_section(d: Mapping) -> dict:
    """``online promote --json`` (or its pool.json): the queue per stratum and the cohort."""
    c = d["counts"]
    return {"title": f"Promoted production failures: cohort {d['cohort']}",
            "tables": [{"title": "Requests per stratum", "columns": ["stratum", "candidates", "promoted", "repeats"],
                        "rows": [[s, v["candidates"], v["promoted"], v.get("repeats", 0)]
                                 for s, v in d["per_stratum"].items()]}],
            "notes": [f"{c['requests']} request(s), {c['items']} queue item(s): {c['unit_items']} passages, "
                      f"{c['question_only']} question-only; signals {', '.join(d['signals'])}",
                      str(d.get("measure_separately", ""))]}


def judge_html(d: Mapping) -> Markup:
    return _html(judge_report_section(d))


def gap_html(d: Mapping) -> Markup:
    """The gap table, the calibration line and the scatter, as one escaped ``<section>``."""
    return _html(gap_report_section(d), calibration_svg(d["rows"], d["calibration"]))


def promote_html(d: Mapping) -> Markup:
    return _html(promote_report_section(d))


__all__ = ["SVG_KIND", "calibration_svg", "gap_html", "gap_report_section", "is_calibration_svg", "judge_html",
           "judge_report_section", "promote_html", "promote_report_section"]
