"""The report's PPI rows: each judge metric's raw judge means beside its PPI-corrected figures (docs/ppi.md).

Input: the ``Comparison.ppi`` entries (``ragassay.analysis.ppi.paired_ppi``) or single-run entries
(``ragassay.analysis.ppi.run_ppi``). :func:`ppi_rows` returns plain strings for a template (which escapes
them); :func:`ppi_section_html` returns a finished, escaped HTML fragment. Undefined figures print as
"undefined", never as 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from markupsafe import escape

from ragassay._markdown import md_escape
from ragassay.errors import SchemaError
from ragassay.report import fmt

COLUMNS = ("metric", "run(s)", "raw judge", "PPI-corrected", "interval", "labels only", "n labelled", "method",
           "warnings")


def _est(d: Mapping) -> tuple[str, str, str]:
    conf = d.get("confidence") or 0.95
    if not d.get("defined"):
        why = d.get("reason") or "undefined"
        return fmt.UNDEFINED, f"undefined ({why})", fmt.UNDEFINED
    return (fmt.num(d["estimate"]), f"{fmt.ci(d['ci_low'], d['ci_high'])} at {conf:.0%}",
            f"{fmt.num(d['classical'])} {fmt.ci(d['classical_low'], d['classical_high'])}")


def ppi_rows(entries: Sequence[Mapping]) -> list[dict[str, str]]:
    """One display row per entry, keyed by :data:`COLUMNS`: a single run's corrected mean, or a pair's
    corrected difference (B − A) with the raw judge means of both runs."""
    rows = []
    for i, e in enumerate(entries):
        if not isinstance(e, Mapping) or "metric" not in e:
            raise SchemaError(f"report data: `ppi[{i}]` must be a PPI entry (analysis/ppi.py); see docs/ppi.md")
        warnings = "; ".join(e.get("warnings") or ()) or "none"
        if "difference" in e:
            raw = e["raw_judge_mean"]
            est, interval, classical = _est(e["difference"])
            n = e["n_labelled"]
            rows.append({"metric": e["metric"], "run(s)": f"{e['a']['name']} → {e['b']['name']}",
                         "raw judge": f"{fmt.num(raw['a'])} → {fmt.num(raw['b'])} "
                                      f"(Δ {fmt.signed(raw['b'] - raw['a'])})",
                         "PPI-corrected": f"Δ {fmt.signed(e['difference']['estimate'])}" if est != fmt.UNDEFINED
                         else est,
                         "interval": interval, "labels only": classical,
                         "n labelled": f"{n['a']} / {n['b']} of {e['n_items']} ({e['mode']})",
                         "method": e["lam_mode"], "warnings": warnings})
        else:
            est, interval, classical = _est(e["ppi"])
            rows.append({"metric": e["metric"], "run(s)": e["run"]["name"], "raw judge": fmt.num(e["raw_judge_mean"]),
                         "PPI-corrected": est, "interval": interval, "labels only": classical,
                         "n labelled": f"{e['n_labelled']} of {e['n_items']}", "method": e["lam_mode"],
                         "warnings": warnings})
    return rows


def ppi_section_html(entries: Sequence[Mapping]) -> str:
    """An HTML section (heading, one sentence on what the figure is, the table) with every value escaped;
    the empty string when there are no entries."""
    rows = ppi_rows(entries)
    if not rows:
        return ""
    head = "".join(f"<th>{escape(c)}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{escape(r[c])}</td>" for c in COLUMNS) + "</tr>" for r in rows)
    return ('<section class="ppi"><h2>PPI-corrected judge metrics</h2>'
            "<p>Each judge mean corrected by human labels of a random subsample of the answers "
            "(prediction-powered inference): the raw judge figure, the corrected one with its interval, and the "
            "labels-only figure it improves on.</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></section>")


def ppi_markdown(entries: Sequence[Mapping]) -> str:
    """The same rows as a Markdown table for a PR comment (every cell escaped); empty without entries."""
    rows = ppi_rows(entries)
    if not rows:
        return ""
    lines = ["", "PPI-corrected judge metrics (human labels of a random subsample of the answers):", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(md_escape(r[c]) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines) + "\n"


__all__ = ["COLUMNS", "ppi_markdown", "ppi_rows", "ppi_section_html"]
