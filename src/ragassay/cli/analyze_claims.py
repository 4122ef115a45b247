"""`ragassay analyze claims A B`: the claim-by-claim diff of two runs judged for claims (docs/claims.md)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.text import Text

from ragassay.cli.common import console, print_json
from ragassay.errors import InputError

# The options of `analyze`, declared here: cli.analyze names this module in its KINDS table, so importing it
# back would make an import circle.
STORE_OPT = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file.")
JSON_OPT = typer.Option(False, "--json", help="Print JSON instead of the summary.")


def _open(store: Path):
    from ragassay.store import Store

    if not store.exists():
        raise InputError(f"{store}: no results store here; run `ragassay run` first or pass --store")
    return Store.open(store, read_only=True)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _where(s: dict | None) -> str:
    if s is None:
        return "no supporting unit"
    rel = "" if s["relevant"] is None else (" relevant" if s["relevant"] else " irrelevant")
    return f"{s['doc_id']}[{s['start']}:{s['end']}]{rel} \"{s['excerpt']}\""


def claims(
    run_a: str = typer.Argument(..., help="Run A, the baseline (id, prefix or name)."),
    run_b: str = typer.Argument(..., help="Run B, the candidate (id, prefix or name)."),
    out: Path = typer.Option(None, "--out", help="Also write the diff as Markdown to this file."),
    excerpt: int = typer.Option(160, "--excerpt", help="Characters of supporting text shown per claim (>= 10)."),
    store: Path = STORE_OPT, json_out: bool = JSON_OPT,
) -> None:
    """Claim-by-claim diff: per query, response claims gained, lost and changed verdict between runs A and B,
    and the reference claims whose retrieval or presence in the answer changed, each with its supporting unit."""
    from ragassay.analysis.claims_diff import claims_diff, claims_diff_markdown

    if out is not None and out.suffix.lower() not in (".md", ".markdown"):
        raise InputError(f"--out {out}: the diff is written as Markdown; name the file *.md")
    with _open(store) as st:
        diff = claims_diff(st, run_a, run_b, excerpt_chars=excerpt)
    if out is not None:
        from ragassay.fsio import atomic_write_text

        atomic_write_text(out, claims_diff_markdown(diff) + "\n")
    if json_out:
        print_json(diff)
        return
    t = diff["totals"]
    console.print(Text(f"claims {diff['run_a']['name']} → {diff['run_b']['name']}: {diff['compared']} (query, "
                       f"trial) pairs, {diff['changed_queries']} with a change; response claims gained "
                       f"{t['gained']}, lost {t['lost']}, changed {t['changed']}; reference claims changed "
                       f"{t['reference']} (judge {diff['judge']['judge_model']}, relevance {diff['relevance']})"))
    for q in diff["queries"]:
        console.print(Text(f"{q['query_id']} (trial {q['trial']})", style="bold"))
        for c in q["gained"]:
            console.print(Text(f"  + {_one_line(c['claim'])} [{c['class'] or 'unclassified'}] {_where(c['support'])}"))
        for c in q["lost"]:
            console.print(Text(f"  - {_one_line(c['claim'])} [{c['class'] or 'unclassified'}] {_where(c['support'])}"))
        for c in q["changed"]:
            moves = ", ".join(f"{f} {c['a'][f]} -> {c['b'][f]}" for f in c["fields"])
            console.print(Text(f"  ~ {_one_line(c['claim'])} ({moves}) {_where(c['support_b'])}"))
        for c in q["reference"]:
            moves = ", ".join(f"{f} {c['a'][f]} -> {c['b'][f]}" for f in c["fields"])
            console.print(Text(f"  reference: {_one_line(c['claim'])} ({moves}) {_where(c['support_b'])}"))
    if out is not None:
        console.print(Text(f"wrote {out}"))
