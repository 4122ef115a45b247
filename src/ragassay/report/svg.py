"""Inline SVG plots for the HTML report, generated in Python.

Every element goes through ``el``, which escapes attribute values and text children with
``markupsafe.escape`` and returns ``Markup``; raw data never reaches the output unescaped, and the result is
well-formed XML (only numeric character references, no HTML named entities). Each plot is an
``<svg class="plot plot-…" role="img" aria-label=…>`` with a ``<title>`` and ``<desc>`` for screen readers
and per-mark ``<title>`` tooltips. No xmlns or other URL is written: inline SVG in HTML needs none.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import numpy as np
from markupsafe import Markup, escape

from ragassay.report import fmt

PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#6E6E6E", "#000000")
SIGN_COLORS = {"ci-pos": "#1a7f37", "ci-neg": "#cf222e", "ci-zero": "#8c959f", "ci-undef": "#8c959f"}
RERANK_CATEGORIES = (
    ("rescued", "rescued", "#009E73"),
    ("broke", "broke", "#D55E00"),
    ("kept", "kept", "#0072B2"),
    ("missed_both", "missed both", "#B8BEC6"),
)
ABSTENTION_METRICS = (
    ("abstention_recall", "abstention recall (higher is better)", "#0072B2"),
    ("over_refusal", "over-refusal (lower is better)", "#D55E00"),
    ("abstention_precision", "abstention precision (higher is better)", "#009E73"),
)
_ATTR_NAME = re.compile(r"[a-zA-Z_:][-a-zA-Z0-9_:.]*\Z")
_MAX_STRIP_POINTS = 1500
_TEXT = "#1f2328"
_MUTED = "#59636e"
_GRID = "#d8dee4"


def el(tag: str, attrs: Mapping[str, object] | None = None, *children: object) -> Markup:
    """One SVG element. Attribute values and ``str`` children are escaped; ``Markup`` children (other
    elements) are inserted as they are. ``None`` attributes are dropped."""
    parts = [f"<{tag}"]
    for name, value in (attrs or {}).items():
        if value is None:
            continue
        if not _ATTR_NAME.match(name):
            raise ValueError(f"invalid SVG attribute name {name!r}")
        text = _coord(value) if isinstance(value, float) else str(value)
        parts.append(f' {name}="{escape(text)}"')
    if not children:
        return Markup("".join(parts) + "/>")
    body = "".join(str(escape(c)) for c in children if c is not None)
    return Markup("".join(parts) + ">" + body + f"</{tag}>")


def _coord(v: float) -> str:
    s = f"{v:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def _text(
    x: float,
    y: float,
    s: str,
    *,
    anchor: str = "start",
    size: float = 12,
    fill: str = _TEXT,
    weight: str | None = None,
    cls: str | None = None,
    tip: str | None = None,
) -> Markup:
    children: list[object] = [s]
    if tip is not None and tip != s:
        children = [el("title", {}, tip), s]
    return el(
        "text",
        {
            "x": float(x),
            "y": float(y),
            "text-anchor": anchor,
            "font-size": size,
            "fill": fill,
            "font-weight": weight,
            "class": cls,
        },
        *children,
    )


def _root(cls: str, width: int, height: int, label: str, desc: str, *children: object) -> Markup:
    return el(
        "svg",
        {
            "class": f"plot {cls}",
            "viewBox": f"0 0 {width} {height}",
            "width": width,
            "height": height,
            "role": "img",
            "aria-label": label,
            "font-family": "system-ui, -apple-system, 'Segoe UI', sans-serif",
        },
        el("title", {}, label),
        el("desc", {}, desc),
        *children,
    )


class _Scale:
    """Maps data values to pixels, linearly or on log10."""

    def __init__(self, d0: float, d1: float, r0: float, r1: float, *, log: bool = False):
        self.log = log
        self.d0, self.d1 = (math.log10(d0), math.log10(d1)) if log else (d0, d1)
        if self.d1 == self.d0:
            self.d1 = self.d0 + 1.0
        self.r0, self.r1 = r0, r1

    def __call__(self, v: float) -> float:
        t = math.log10(v) if self.log else v
        return self.r0 + (t - self.d0) / (self.d1 - self.d0) * (self.r1 - self.r0)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values (steps of 1, 2 or 5 × 10^k) covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    """1, 2, 5 × 10^k values inside [lo, hi] for a log axis."""
    out = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            v = m * 10.0**e
            if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9):
                out.append(v)
    return out


def _tick_label(v: float, ticks: Sequence[float]) -> str:
    step = min((abs(b - a) for a, b in zip(ticks, ticks[1:], strict=False)), default=1.0) or 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    if abs(v) >= 1 and float(v).is_integer():
        decimals = 0
    s = f"{v:.{decimals}f}"
    return "0" if float(s) == 0 else s.replace("-", "−")


def _x_axis(
    scale: _Scale, ticks: Sequence[float], y0: float, y1: float, label: str, *, fmt_tick=None
) -> list[Markup]:
    out: list[Markup] = []
    for t in ticks:
        x = scale(t)
        out.append(el("line", {"x1": x, "x2": x, "y1": y0, "y2": y1, "stroke": _GRID, "stroke-width": 1}))
        out.append(
            _text(
                x,
                y1 + 14,
                fmt_tick(t) if fmt_tick else _tick_label(t, ticks),
                anchor="middle",
                size=11,
                fill=_MUTED,
            )
        )
    out.append(_text((scale.r0 + scale.r1) / 2, y1 + 32, label, anchor="middle", size=11.5, fill=_MUTED))
    return out


def _legend(items: Sequence[tuple[str, str, str]], x: float, y: float, max_width: float) -> list[Markup]:
    """A one-line legend (wrapping when needed) of (label, colour, shape) items; shape is "box", "line"
    or "hollow"."""
    out: list[Markup] = []
    cx, cy = x, y
    for label, color, shape in items:
        shown = fmt.truncate(label, 48)
        w = 22 + 6.6 * len(shown)
        if cx + w > x + max_width and cx > x:
            cx, cy = x, cy + 18
        if shape == "line":
            out.append(
                el(
                    "line",
                    {
                        "x1": cx,
                        "x2": cx + 14.0,
                        "y1": cy - 4.0,
                        "y2": cy - 4.0,
                        "stroke": color,
                        "stroke-width": 2.5,
                    },
                )
            )
        elif shape == "hollow":
            out.append(
                el(
                    "circle",
                    {
                        "cx": cx + 7.0,
                        "cy": cy - 4.0,
                        "r": 4.5,
                        "fill": "#ffffff",
                        "stroke": color,
                        "stroke-width": 1.8,
                    },
                )
            )
        else:
            out.append(
                el("rect", {"x": cx, "y": cy - 10.0, "width": 12, "height": 12, "rx": 2, "fill": color})
            )
        out.append(_text(cx + 18, cy, shown, size=11.5, fill=_TEXT, tip=label))
        cx += w + 14
    return out


def _legend_height(items: Sequence[tuple[str, str, str]], max_width: float) -> float:
    rows, cx = 1, 0.0
    for label, _, _ in items:
        w = 22 + 6.6 * len(fmt.truncate(label, 48))
        if cx + w > max_width and cx > 0:
            rows, cx = rows + 1, 0.0
        cx += w + 14
    return rows * 18.0


def ci_class(lo: object, hi: object, delta: object) -> str:
    """Colour class of a forest row: the CI lies above 0, below 0, straddles it, or is undefined."""
    if not (fmt.is_defined(lo) and fmt.is_defined(hi)):
        return "ci-undef"
    if float(lo) > 0:
        return "ci-pos"
    if float(hi) < 0:
        return "ci-neg"
    return "ci-zero"


def forest_plot(forest: Mapping) -> Markup:
    """Paired deltas per stratum with their CIs, one block per comparison, a dashed line at zero.

    A filled marker means the interval excludes 0 (green above, red below); a hollow grey marker means it
    includes 0. Strata with an undefined delta are listed with the word "undefined" and no marker.
    """
    metric = str(forest.get("metric", ""))
    W, left, right = 860, 230, 190
    x0, x1 = float(left), float(W - right)
    legend = [
        ("CI above 0", SIGN_COLORS["ci-pos"], "box"),
        ("CI below 0", SIGN_COLORS["ci-neg"], "box"),
        ("CI includes 0", SIGN_COLORS["ci-zero"], "hollow"),
    ]
    top = 30.0 + _legend_height(legend, W - 20)
    row_h = 24.0
    lines: list[tuple[str, object, object]] = []
    values: list[float] = [0.0]
    for comp in forest.get("comparisons", []):
        lines.append(("group", str(comp.get("label", "")), None))
        for r in comp.get("rows", []):
            lines.append(("row", comp, r))
            values += [
                float(r[k])
                for k in ("delta", "ci_low", "ci_high")
                if fmt.is_defined(r.get(k)) and math.isfinite(float(r[k]))
            ]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.08 or 0.05
    ticks = nice_ticks(lo - pad, hi + pad, 6)
    scale = _Scale(min(ticks[0], lo - pad), max(ticks[-1], hi + pad), x0, x1)
    H = int(top + len(lines) * row_h + 48)
    y_end = top + len(lines) * row_h
    parts: list[Markup] = _legend(legend, 12, 20, W - 20)
    for i, (kind, a, b) in enumerate(lines):
        y = top + i * row_h
        cy = y + row_h / 2
        if kind == "group":
            parts.append(el("rect", {"x": 0, "y": y, "width": W, "height": row_h, "fill": "#f3f5f7"}))
            parts.append(_text(10, cy + 4, fmt.truncate(a, 90), size=12.5, weight="600", tip=a))
            continue
        r = b
        stratum = str(r.get("stratum", ""))
        n = r.get("n")
        label = f"{stratum} (n={fmt.num(n)})" if n is not None else stratum
        cls = ci_class(r.get("ci_low"), r.get("ci_high"), r.get("delta"))
        color = SIGN_COLORS[cls]
        delta = r.get("delta")
        summary = (
            f"{fmt.signed(delta)} {fmt.ci(r.get('ci_low'), r.get('ci_high'))}"
            if fmt.is_defined(delta)
            else fmt.UNDEFINED
        )
        tip = f"{a.get('label', '')} · {stratum}: Δ {summary}, n={fmt.num(n)}"
        g: list[object] = [
            el("title", {}, tip),
            _text(22, cy + 4, fmt.truncate(label, 32), size=12, weight="600" if stratum == "all" else None),
            _text(x1 + 12, cy + 4, summary, size=11.5, fill=_MUTED if cls == "ci-zero" else color),
        ]
        if fmt.is_defined(delta):
            if cls != "ci-undef":
                lx, hx = scale(float(r["ci_low"])), scale(float(r["ci_high"]))
                g.append(
                    el("line", {"x1": lx, "x2": hx, "y1": cy, "y2": cy, "stroke": color, "stroke-width": 2})
                )
                for xx in (lx, hx):
                    g.append(
                        el(
                            "line",
                            {
                                "x1": xx,
                                "x2": xx,
                                "y1": cy - 5,
                                "y2": cy + 5,
                                "stroke": color,
                                "stroke-width": 2,
                            },
                        )
                    )
            filled = cls in ("ci-pos", "ci-neg")
            g.append(
                el(
                    "circle",
                    {
                        "cx": scale(float(delta)),
                        "cy": cy,
                        "r": 5 if stratum == "all" else 4.2,
                        "fill": color if filled else "#ffffff",
                        "stroke": color,
                        "stroke-width": 2,
                        "class": "marker",
                    },
                )
            )
        parts.append(el("g", {"class": f"forest-row {cls}"}, *g))
    parts += _x_axis(scale, ticks, top, y_end, f"paired Δ {metric} (candidate − baseline) with 95% CI")
    zx = scale(0.0)
    parts.append(
        el(
            "line",
            {
                "x1": zx,
                "x2": zx,
                "y1": top - 4,
                "y2": y_end,
                "stroke": "#57606a",
                "stroke-width": 1.3,
                "stroke-dasharray": "4 3",
                "class": "zero-line",
            },
        )
    )
    label = f"Forest plot of paired {metric} deltas per stratum"
    desc = (
        "One row per stratum: the point is the mean paired difference, the whisker its 95% CI; the "
        "dashed vertical line is zero."
    )
    return _root("plot-forest", W, H, label, desc, *parts)


def recall_plot(curves: Sequence[Mapping], colors: Mapping[str, str]) -> Markup:
    """Recall at each cut-off k, one line per run. k is on a log axis when it spans ≥ 20×.

    Undefined points (None/NaN) break the line instead of being drawn as 0.
    """
    W, H = 860, 380
    ml, mr, mt, mb = 60, 40, 20, 58
    ks = [float(k) for c in curves for k in c.get("k", []) if fmt.is_defined(k) and float(k) > 0]
    kmin, kmax = (min(ks), max(ks)) if ks else (1.0, 10.0)
    use_log = kmin > 0 and kmax / kmin >= 20
    legend = [(str(c.get("run", "")), colors.get(str(c.get("run", "")), PALETTE[0]), "line") for c in curves]
    leg_h = _legend_height(legend, W - ml - mr)
    H = int(H + leg_h)
    plot_top = mt + leg_h + 8
    if use_log:
        xs = _Scale(kmin, kmax, ml, W - mr, log=True)
        xticks = log_ticks(kmin, kmax)
    else:
        xticks = nice_ticks(kmin, kmax, 8)
        xticks = [t for t in xticks if kmin <= t <= kmax] or [kmin, kmax]
        xs = _Scale(kmin, kmax, ml, W - mr)
    ys = _Scale(0.0, 1.0, H - mb, plot_top)
    parts: list[Markup] = _legend(legend, ml, mt + 4, W - ml - mr)
    for t in nice_ticks(0, 1, 5):
        y = ys(t)
        parts.append(el("line", {"x1": ml, "x2": W - mr, "y1": y, "y2": y, "stroke": _GRID}))
        parts.append(_text(ml - 8, y + 4, _tick_label(t, [0, 0.2]), anchor="end", size=11, fill=_MUTED))
    parts += _x_axis(
        xs,
        xticks,
        plot_top,
        H - mb,
        "k (cut-off depth" + (", log scale)" if use_log else ")"),
        fmt_tick=lambda t: f"{t:g}",
    )
    parts.append(
        el(
            "text",
            {
                "x": 14,
                "y": (plot_top + H - mb) / 2,
                "font-size": 11.5,
                "fill": _MUTED,
                "text-anchor": "middle",
                "transform": f"rotate(-90 14 {_coord((plot_top + H - mb) / 2)})",
            },
            "recall@k",
        )
    )
    for c in curves:
        run = str(c.get("run", ""))
        color = colors.get(run, PALETTE[0])
        pts = [
            (float(k), r)
            for k, r in zip(c.get("k", []), c.get("recall", []), strict=False)
            if fmt.is_defined(k) and float(k) > 0
        ]
        segs: list[list[tuple[float, float]]] = [[]]
        marks: list[Markup] = []
        for k, r in pts:
            if not fmt.is_defined(r):
                segs.append([])
                continue
            p = (xs(k), ys(float(r)))
            segs[-1].append(p)
            marks.append(
                el(
                    "circle",
                    {"cx": p[0], "cy": p[1], "r": 3, "fill": color},
                    el("title", {}, f"{run}: recall@{k:g} = {fmt.num(r)}"),
                )
            )
        lines = [
            el(
                "polyline",
                {
                    "points": " ".join(f"{_coord(x)},{_coord(y)}" for x, y in s),
                    "fill": "none",
                    "stroke": color,
                    "stroke-width": 2.2,
                    "stroke-linejoin": "round",
                },
            )
            for s in segs
            if len(s) >= 2
        ]
        parts.append(el("g", {"class": "curve"}, el("title", {}, run), *lines, *marks))
    return _root(
        "plot-recall",
        W,
        H,
        "Recall at depth k per run",
        "Each line is one run's mean recall@k as the cut-off k grows.",
        *parts,
    )


def rerank_plot(rows: Sequence[Mapping]) -> Markup:
    """Stacked horizontal bars of the per-query rerank outcome at final_k: rescued, broke, kept,
    missed both (fractions of the run's queries, counts written on the bars)."""
    W, left, right = 860, 190, 120
    x0, x1 = float(left), float(W - right)
    legend = [(lab, col, "box") for _, lab, col in RERANK_CATEGORIES]
    top = 30.0 + _legend_height(legend, W - 20)
    bar_h, gap = 24.0, 14.0
    H = int(top + len(rows) * (bar_h + gap) + 40)
    scale = _Scale(0.0, 1.0, x0, x1)
    parts: list[Markup] = _legend(legend, 12, 20, W - 20)
    for t in (0, 0.25, 0.5, 0.75, 1.0):
        x = scale(t)
        parts.append(
            el(
                "line",
                {
                    "x1": x,
                    "x2": x,
                    "y1": top - 4,
                    "y2": top + len(rows) * (bar_h + gap) - gap + 4,
                    "stroke": _GRID,
                },
            )
        )
        parts.append(
            _text(x, top + len(rows) * (bar_h + gap) + 8, f"{t:.0%}", anchor="middle", size=11, fill=_MUTED)
        )
    for i, r in enumerate(rows):
        y = top + i * (bar_h + gap)
        run = str(r.get("run", ""))
        counts = [int(r.get(key) or 0) for key, _, _ in RERANK_CATEGORIES]
        total = sum(counts)
        g: list[object] = [
            el(
                "title",
                {},
                f"{run}: "
                + ", ".join(f"{lab} {c}" for (_, lab, _), c in zip(RERANK_CATEGORIES, counts, strict=True)),
            )
        ]
        g.append(_text(left - 10, y + bar_h / 2 + 4, fmt.truncate(run, 26), anchor="end", size=12))
        x = x0
        for (key, lab, col), c in zip(RERANK_CATEGORIES, counts, strict=True):
            if total == 0 or c == 0:
                continue
            w = (x1 - x0) * c / total
            g.append(
                el(
                    "rect",
                    {
                        "x": x,
                        "y": y,
                        "width": w,
                        "height": bar_h,
                        "fill": col,
                        "class": f"seg seg-{key}",
                        "data-count": c,
                    },
                    el("title", {}, f"{run} · {lab}: {c} of {total} ({c / total:.1%})"),
                )
            )
            if w >= 24:
                g.append(
                    _text(
                        x + w / 2,
                        y + bar_h / 2 + 4,
                        str(c),
                        anchor="middle",
                        size=11.5,
                        fill="#1f2328" if key == "missed_both" else "#ffffff",
                        weight="600",
                    )
                )
            x += w
        fk = r.get("final_k")
        note = f"n={total}" + (f" · k={fmt.num(fk)}" if fk is not None else "")
        if total == 0:
            g.append(_text(x0 + 6, y + bar_h / 2 + 4, "no queries", size=11.5, fill=_MUTED))
        g.append(_text(x1 + 10, y + bar_h / 2 + 4, note, size=11.5, fill=_MUTED))
        parts.append(el("g", {"class": "rerank-row"}, *g))
    return _root(
        "plot-rerank",
        W,
        H,
        "Rerank movement per run",
        "Per-query outcome of reranking at final_k: rescued (moved evidence into the window), broke "
        "(pushed it out), kept, or missed both (evidence never among the candidates).",
        *parts,
    )


def abstention_plot(rows: Sequence[Mapping]) -> Markup:
    """Grouped bars per run: abstention recall, over-refusal and (when given) abstention precision on a
    0–1 axis; undefined rates are written as "undefined" with no bar."""
    metrics = [m for m in ABSTENTION_METRICS if any(m[0] in r for r in rows)]
    W, left, right = 860, 190, 90
    x0, x1 = float(left), float(W - right)
    legend = [(lab, col, "box") for _, lab, col in metrics]
    top = 30.0 + _legend_height(legend, W - 20)
    bar_h, gap = 14.0, 16.0
    group_h = bar_h * len(metrics) + 4 * (len(metrics) - 1)
    H = int(top + len(rows) * (group_h + gap) + 36)
    scale = _Scale(0.0, 1.0, x0, x1)
    y_end = top + len(rows) * (group_h + gap) - gap
    parts: list[Markup] = _legend(legend, 12, 20, W - 20)
    for t in (0, 0.2, 0.4, 0.6, 0.8, 1.0):
        x = scale(t)
        parts.append(el("line", {"x1": x, "x2": x, "y1": top - 4, "y2": y_end + 4, "stroke": _GRID}))
        parts.append(_text(x, y_end + 20, _tick_label(t, [0, 0.2]), anchor="middle", size=11, fill=_MUTED))
    for i, r in enumerate(rows):
        y = top + i * (group_h + gap)
        run = str(r.get("run", ""))
        g: list[object] = [
            el("title", {}, run),
            _text(left - 10, y + group_h / 2 + 4, fmt.truncate(run, 26), anchor="end", size=12),
        ]
        for j, (key, lab, col) in enumerate(metrics):
            by = y + j * (bar_h + 4)
            v = r.get(key)
            if fmt.is_defined(v):
                w = max(scale(min(max(float(v), 0.0), 1.0)) - x0, 0.0)
                g.append(
                    el(
                        "rect",
                        {
                            "x": x0,
                            "y": by,
                            "width": w,
                            "height": bar_h,
                            "fill": col,
                            "rx": 2,
                            "class": f"bar bar-{key}",
                        },
                        el("title", {}, f"{run} · {lab}: {fmt.num(v)}"),
                    )
                )
                g.append(_text(x0 + w + 6, by + bar_h - 2.5, fmt.num(v), size=11, fill=_TEXT))
            else:
                g.append(
                    _text(
                        x0 + 6,
                        by + bar_h - 2.5,
                        fmt.UNDEFINED,
                        size=11,
                        fill=_MUTED,
                        cls=f"undef undef-{key}",
                    )
                )
        parts.append(el("g", {"class": "abstention-row"}, *g))
    return _root(
        "plot-abstention",
        W,
        H,
        "Abstention recall and over-refusal per run",
        "For each run: the share of unanswerable queries declined (abstention recall), the share of "
        "answerable queries refused (over-refusal) and, when given, abstention precision.",
        *parts,
    )


def latency_plot(rows: Sequence[Mapping], colors: Mapping[str, str]) -> Markup:
    """Per-run strip of per-query latencies with the interquartile box, p50 (thick line), p95 and p99
    marked. The x axis is log10 when the values span ≥ 100×. Rows carry ``values`` (finite ms) and the
    precomputed ``p25, p50, p75, p95, p99``; at most 1,500 evenly spaced order statistics are drawn per run
    to bound file size (percentiles always use every value)."""
    W, left, right = 860, 190, 40
    x0, x1 = float(left), float(W - right)
    row_h, top = 70.0, 16.0
    allv = np.concatenate([np.asarray(r["values"], dtype=float) for r in rows]) if rows else np.zeros(0)
    vmin = float(allv.min()) if allv.size else 0.0
    vmax = float(allv.max()) if allv.size else 1.0
    use_log = vmin > 0 and vmax / vmin >= 100
    if use_log:
        scale = _Scale(vmin, vmax * 1.05, x0, x1, log=True)
        ticks = log_ticks(vmin, vmax * 1.05)
    else:
        ticks = nice_ticks(0.0, vmax * 1.05 if vmax > 0 else 1.0, 7)
        scale = _Scale(0.0, max(ticks[-1], vmax), x0, x1)
    H = int(top + len(rows) * row_h + 44)
    y_end = top + len(rows) * row_h
    parts: list[Markup] = _x_axis(
        scale,
        ticks,
        top,
        y_end,
        "per-query total latency (ms" + (", log scale)" if use_log else ")"),
        fmt_tick=lambda t: f"{t:g}",
    )
    golden = 0.6180339887498949
    for i, r in enumerate(rows):
        run = str(r.get("run", ""))
        color = colors.get(run, PALETTE[0])
        cy = top + i * row_h + row_h / 2 + 6
        v = np.sort(np.asarray(r["values"], dtype=float))
        g: list[object] = [
            el("title", {}, run),
            _text(left - 12, cy + 4, fmt.truncate(run, 26), anchor="end", size=12),
        ]
        if v.size == 0:
            g.append(_text(x0 + 6, cy + 4, "no finite latencies", size=11.5, fill=_MUTED))
            parts.append(el("g", {"class": "latency-row"}, *g))
            continue
        if v.size > _MAX_STRIP_POINTS:
            v = v[np.linspace(0, v.size - 1, _MAX_STRIP_POINTS).round().astype(int)]
        jitter = ((np.arange(v.size) * golden) % 1.0 - 0.5) * (row_h * 0.42)
        g.append(
            el(
                "rect",
                {
                    "x": scale(r["p25"]),
                    "y": cy - row_h * 0.26,
                    "width": max(scale(r["p75"]) - scale(r["p25"]), 1.0),
                    "height": row_h * 0.52,
                    "fill": color,
                    "fill-opacity": 0.10,
                    "stroke": color,
                    "stroke-opacity": 0.5,
                },
            )
        )
        dots = [
            el("circle", {"cx": scale(float(x)), "cy": cy + float(j), "r": 2.1})
            for x, j in zip(v, jitter, strict=True)
        ]
        g.append(el("g", {"fill": color, "fill-opacity": 0.45, "class": "strip"}, *dots))
        for q, width in (("p50", 3.0), ("p95", 1.6), ("p99", 1.6)):
            x = scale(r[q])
            g.append(
                el(
                    "line",
                    {
                        "x1": x,
                        "x2": x,
                        "y1": cy - row_h * 0.26,
                        "y2": cy + row_h * 0.26,
                        "stroke": _TEXT if q == "p50" else color,
                        "stroke-width": width,
                        "stroke-dasharray": None if q == "p50" else "3 2",
                        "class": f"pct pct-{q}",
                    },
                    el("title", {}, f"{run} {q} = {fmt.ms(r[q])} ms"),
                )
            )
        # labels are placed left to right and nudged apart so close percentiles stay legible
        xs: list[float] = []
        for q in ("p50", "p95", "p99"):
            xs.append(max(scale(r[q]), xs[-1] + 64 if xs else -1e9))
        shift = max(xs[-1] - (W - 34), 0.0)
        for q, x in zip(("p50", "p95", "p99"), xs, strict=True):
            g.append(
                _text(
                    x - shift,
                    cy - row_h * 0.32,
                    f"{q} {fmt.ms(r[q])}",
                    anchor="middle",
                    size=10.5,
                    fill=_MUTED,
                )
            )
        parts.append(el("g", {"class": "latency-row"}, *g))
    return _root(
        "plot-latency",
        W,
        H,
        "Per-query latency distribution per run",
        "Each dot is one query's total latency; the box spans p25 to p75, the solid line is p50 and the "
        "dashed lines are p95 and p99.",
        *parts,
    )
