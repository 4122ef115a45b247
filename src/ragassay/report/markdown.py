"""A comparison (and optionally its gate verdict) as GitHub-flavoured Markdown, for a pull-request comment.

Pure: takes the :class:`~ragassay.analysis.compare.Comparison` that ``compare`` computes and returns text.
User text (run names, metric and stratum names, claims) is escaped so that it cannot open a link, an HTML
tag or a table cell.
"""

from __future__ import annotations

from ragassay._markdown import md_escape
from ragassay.analysis.compare import coverage_lines, lost_text
from ragassay.analysis.compare import number_text as _num

_MARK = {"improved": "🟢 improved", "regressed": "🔴 regressed"}


def comparison_markdown(comp, *, all_strata: bool = False, gate=None) -> str:
    """The claims, then a table of the overall rows (every stratum too with ``all_strata``); a gate result,
    when given, heads the text with its verdict and lists its checks."""
    a, b = comp.run_a, comp.run_b
    out = []
    if gate is not None:
        out.append(f"### ragassay gate: **{gate.verdict}** — {md_escape(a.name)} → {md_escape(b.name)}")
        out.append("")
        out += [f"- {c.verdict} {md_escape(c.name)}: {md_escape(c.detail)}" for c in gate.checks]
        out += [f"- note: {md_escape(n)}" for n in gate.notes]
    else:
        out.append(f"### ragassay compare: {md_escape(a.name)} → {md_escape(b.name)}")
    out.append("")
    conf = comp.settings.get("confidence", 0.95)
    out.append(f"{comp.settings.get('n_resamples', 0):,} paired-bootstrap resamples, {conf:.0%} intervals, "
               f"Benjamini–Hochberg across {len(comp.rows)} rows.")
    out.append("")
    if comp.claims:
        out += [f"- {md_escape(c)}" for c in comp.claims]
        out.append("")
    cover = coverage_lines(comp)
    if cover:
        out += [f"- {md_escape(line.strip())}" for line in cover]
        out.append("")
    out.append("| metric | stratum | n | lost | A | B | Δ | CI | W/L/T | verdict |")
    out.append("|---|---|---:|---:|---:|---:|---:|---|---:|---|")
    for r in comp.rows:
        if not all_strata and r.stratum != "all":
            continue
        lost = lost_text(r.missing, r.lost, r.gained, r.filled)
        out.append(f"| {md_escape(r.metric)} | {md_escape(r.stratum)} | {r.n} | {lost} | {_num(r.mean_a)} | "
                   f"{_num(r.mean_b)} | {_num(r.delta, True)} | [{_num(r.ci_low, True)}, {_num(r.ci_high, True)}] "
                   f"| {r.wins}/{r.losses}/{r.ties} | {_MARK.get(r.verdict, md_escape(r.verdict))} |")
    if comp.excluded:
        out.append("")
        out += [f"- not compared: {md_escape(m)}: {md_escape(why)}" for m, why in comp.excluded]
    return "\n".join(out) + "\n"
