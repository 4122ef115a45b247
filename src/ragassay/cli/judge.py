"""`ragassay judge`: score a stored run's answers with a judge and store the judge metrics."""

from __future__ import annotations

import math
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from ragassay.cli.common import console, esc, print_json
from ragassay.errors import InputError

STORE_OPT = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file.")


def _traces_path(rec, given: Path | None) -> Path:
    if given is not None:
        return given
    if rec.source.startswith("traces:"):
        return Path(rec.source.removeprefix("traces:"))
    folder = (rec.extra or {}).get("traces_dir")
    if folder:
        return Path(folder) / f"{rec.run_id}.jsonl"
    raise InputError(f"run {rec.name} ({rec.run_id}) recorded no traces (run it with --traces-dir, or score a "
                     "trace file); pass the traces with --traces")


def judge(
    run: str = typer.Argument(..., help="Stored run to judge (run_id, unique prefix or name)."),
    judge_config: Path = typer.Option(..., "--judge", help="Judge config YAML (provider, model, metrics, prices)."),
    store: Path = STORE_OPT,
    traces: Path = typer.Option(None, "--traces", help="The run's traces JSONL (default: where the run recorded "
                                                       "them)."),
    corpus: Path = typer.Option(None, "--corpus", help="Corpus the run used (default: bundled)."),
    golden: Path = typer.Option(None, "--golden", help="Golden set the run used (default: bundled)."),
    resume: bool = typer.Option(False, "--resume", help="Continue or re-score a run judged before under the "
                                                        "same judge; stored calls are not paid again."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Judge a stored run's answers (faithfulness, relevance, correctness, citations, nuggets), store the
    judge metrics with the judge's pins, and print the cost line."""
    from ragassay.judges.config import load_judge_config

    cfg = load_judge_config(judge_config)  # a bad config is refused before anything else is read
    if not store.is_file():
        raise InputError(f"{store}: no such store; run or score the run first (or pass --store)")
    from ragassay.analysis.runner import load_inputs
    from ragassay.judges.score import judge_stored_run
    from ragassay.store import Store
    from ragassay.trace.io import read_traces

    with Store.open(store) as st:
        rec = st.get_run(run)
        path = _traces_path(rec, traces)
        if not path.is_file():
            raise InputError(f"{path}: the traces of run {rec.name} are not there; pass them with --traces")
        _, recs, problems = read_traces(path)
        corp, gs = load_inputs(corpus, golden)
        summary = judge_stored_run(st, rec.run_id, recs, gs, corp, cfg, resume=resume)
    out = summary.to_dict()
    out["trace_problems"] = len(problems)
    if json_out:
        print_json(out)
        return
    console.print(Text(f"judged run {summary.run_name} ({summary.run_id}) with {summary.pins['judge_model']}: "
                       f"{summary.items} answers"))
    if problems:
        console.print(f"warning: {len(problems)} malformed trace record(s) in {esc(path)} were skipped")
    table = Table("metric", "mean", "defined", "undefined")
    for m, v in out["metrics"].items():
        mean = v["mean"]
        table.add_row(Text(m), "undefined" if mean is None or math.isnan(mean) else f"{mean:.3f}",
                      str(v["defined"]), str(v["undefined"]))
    console.print(table)
    if out["undefined"]:
        console.print(Text("undefined: " + "; ".join(f"{u['metric']} {u['reason']} ×{u['count']}"
                                                     for u in out["undefined"])))
    console.print(Text("calls: " + ", ".join(f"{k} {n}" for k, n in out["calls"].items())
                       + f"; quote not found {out['quote_not_found']}"))
    if summary.cost is not None:
        console.print(Text(summary.cost.text()), soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("judge")(judge)
