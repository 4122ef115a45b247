"""`ragassay import beir|otel|inspect|ragas|deepeval|trec`: other tools' files -> a corpus and golden set, or a
trace file.

The trace importers write a ragassay trace JSONL (header pinned to the corpus and golden set) that
``ragassay score`` then scores; their problems (unmatched rows, unplaced contexts, bad lines) are printed and
counted, never dropped silently, and an import in which nothing became a trace is an error (exit 2).
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.text import Text

from ragassay.cli.common import console, err_console, esc, print_json

import_app = typer.Typer(help="Import BEIR datasets, OpenTelemetry spans, Inspect AI logs, RAGAS rows, DeepEval "
                              "test cases or TREC runs.", no_args_is_help=True)

OUT_TRACES = typer.Option(..., "-o", "--out", help="Trace JSONL file to write (new, or an earlier trace file).")
CORPUS = typer.Option(None, "--corpus", help="Corpus folder or .jsonl (default: bundled).")
GOLDEN = typer.Option(None, "--golden", help="Golden set folder or authoring file (default: bundled).")
JSON = typer.Option(False, "--json", help="Machine-readable output.")
THRESHOLD = typer.Option(90.0, "--threshold", help="Least rapidfuzz partial_ratio score (0 < t <= 100) at which a "
                         "context not found verbatim is placed.")


def _is_trace_file(path: Path) -> bool:
    import json

    try:
        with path.open(encoding="utf-8") as fh:
            first = json.loads(fh.readline())
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(first, dict) and first.get("type") == "header"


def _write(out: Path, header, traces, problems, corpus, golden, json_out: bool, what: str) -> None:
    from ragassay.fsio import check_output_file
    from ragassay.trace import write_traces

    check_output_file(out, "traces", overwrite_ok=_is_trace_file)
    if golden is not None:
        header = header.model_copy(update={"dataset_version": golden.dataset_version})
    header = header.model_copy(update={"corpus_digest": corpus.digest})
    write_traces(out, header, traces)
    lines = [f"{p.line}: {p.message}" for p in problems]
    matching = header.stats.get("matching")
    if json_out:
        info = {"traces": str(out), "n_traces": len(traces), "problems": lines,
                "dataset_version": header.dataset_version, "corpus_digest": corpus.digest}
        print_json(info if matching is None else {**info, "matching": matching})
        return
    for line in lines[:20]:
        err_console.print(Text("problem: ", style="yellow") + Text(f"{what} {line}"))
    if len(lines) > 20:
        err_console.print(f"... and {len(lines) - 20} more problem(s) (--json lists all)", markup=False)
    if matching is not None:
        by = ", ".join(f"{n} by {how}" for how, n in matching["matched_by"].items())
        noun = "OTel trace(s)" if what == "line" else f"{what}(s)"
        console.print(f"matched {matching['traces']} of {matching['records']} {noun} to golden queries ({by}); "
                      f"{len(matching['unmatched'])} unmatched, {len(matching['ambiguous'])} ambiguous, "
                      f"{matching['skipped']} skipped", markup=False)
    console.print(f"wrote {len(traces)} trace(s) to [bold]{esc(out)}[/] with {len(lines)} problem(s); score "
                  f"them with: ragassay score {esc(out)} --golden ... --corpus ...")


def _inputs(corpus: Path | None, golden: Path | None):
    from ragassay.analysis.runner import load_inputs

    return load_inputs(corpus, golden)


@import_app.command("beir")
def beir(
    src: Path = typer.Argument(..., help="BEIR dataset folder (corpus.jsonl, queries.jsonl, qrels/)."),
    out: Path = typer.Option(..., "-o", "--out", help="Output folder: corpus.jsonl, golden.jsonl, golden/."),
    split: str = typer.Option("test", "--split", help="Qrels split: qrels/<split>.tsv."),
    name: str = typer.Option(None, "--name", help="Dataset name (default: the folder's name)."),
    json_out: bool = JSON,
) -> None:
    """A BEIR dataset -> a corpus and a golden set with document-level labels (doc hit rule, relevant >= 1;
    BEIR's nDCG uses linear gain, recorded in the manifest)."""
    from ragassay.importers.beir import import_beir

    corpus, golden = import_beir(src, out, split=split, name=name)
    info = {"corpus": str(out / "corpus.jsonl"), "golden": str(out / "golden"), "n_docs": len(corpus.docs),
            "n_queries": len(golden), "negative_queries": sum(not q.answerable for q in golden.queries),
            "dataset_version": golden.dataset_version, "hit_rule": golden.manifest["hit_rule"],
            "gain": golden.manifest["generator"]["gain"]}
    if json_out:
        print_json(info)
        return
    console.print(f"{info['n_docs']} documents -> [bold]{esc(info['corpus'])}[/]; {info['n_queries']} queries "
                  f"({info['negative_queries']} negative) -> [bold]{esc(info['golden'])}[/] (hit rule doc, "
                  f"relevant = grade >= 1, dataset {esc(golden.dataset_version)}); BEIR's nDCG uses "
                  f"{info['gain']} gain: score with --gain {info['gain']} to compare")


@import_app.command("otel")
def otel(
    spans: Path = typer.Argument(..., help="Exported spans (ConsoleSpanExporter output or JSON lines)."),
    out: Path = OUT_TRACES, corpus: Path = CORPUS, golden: Path = GOLDEN,
    name: str = typer.Option("otel-import", "--name", help="Run name in the trace header."),
    json_out: bool = JSON,
) -> None:
    """OpenTelemetry spans (OpenInference, else GenAI conventions) -> traces, matched to golden queries; tool
    spans, and retrievers under agent or tool spans, -> agent steps."""
    from ragassay.importers.otel import read_span_file, traces_from_spans

    records = read_span_file(spans)
    corp, gs = _inputs(corpus, golden)
    header, traces, problems = traces_from_spans(records, corp, gs, run_name=name, source=str(spans))
    _write(out, header, traces, problems, corp, gs, json_out, "line")


@import_app.command("inspect")
def inspect(
    log: Path = typer.Argument(..., help="Inspect AI log: .json, or .eval (the zip Inspect writes)."),
    out: Path = OUT_TRACES, corpus: Path = CORPUS, golden: Path = GOLDEN,
    name: str = typer.Option("inspect-import", "--name", help="Run name in the trace header."),
    retrieval_tools: str = typer.Option("search|retriev", "--retrieval-tools", help="Regular expression (case "
                                        "ignored) for the tool names whose JSON results are retrieved documents."),
    json_out: bool = JSON,
) -> None:
    """Inspect AI samples -> traces with agent steps (tool calls; retrieval tools' documents placed in the
    corpus), matched to golden queries by metadata.query_id, sample id or question; epoch n is trial n-1."""
    from ragassay.importers.inspect_ai import traces_from_inspect

    corp, gs = _inputs(corpus, golden)
    header, traces, problems = traces_from_inspect(log, corp, gs, run_name=name, retrieval_tools=retrieval_tools)
    _write(out, header, traces, problems, corp, gs, json_out, "sample")


def _import_rows(read, path: Path, out: Path, corpus: Path | None, golden: Path | None, name: str,
                 threshold: float, json_out: bool) -> None:
    """The rows of another tool (RAGAS, DeepEval) -> traces: ``read(path, corpus, golden, threshold=,
    run_name=)`` matches each row to a golden query and places its contexts in the corpus; the threshold is
    checked before anything is read."""
    from ragassay.trace.adapters import check_threshold

    check_threshold(threshold)
    corp, gs = _inputs(corpus, golden)
    header, traces, problems = read(path, corp, gs, threshold=threshold, run_name=name)
    _write(out, header, traces, problems, corp, gs, json_out, "row")


@import_app.command("ragas")
def ragas(
    rows: Path = typer.Argument(..., help="RAGAS rows: .json (rows or columns) or .jsonl."),
    out: Path = OUT_TRACES, corpus: Path = CORPUS, golden: Path = GOLDEN,
    name: str = typer.Option("ragas-import", "--name", help="Run name in the trace header."),
    threshold: float = THRESHOLD,
    json_out: bool = JSON,
) -> None:
    """RAGAS rows (user_input, retrieved_contexts, response; or question, contexts, answer) -> traces matched
    to golden queries by query_id or question, each context placed in the corpus."""
    from ragassay.trace.adapters import traces_from_ragas_rows

    _import_rows(traces_from_ragas_rows, rows, out, corpus, golden, name, threshold, json_out)


@import_app.command("deepeval")
def deepeval(
    cases: Path = typer.Argument(..., help="DeepEval test cases: the JSON list EvaluationDataset.save_as writes, "
                                 "or .jsonl."),
    out: Path = OUT_TRACES, corpus: Path = CORPUS, golden: Path = GOLDEN,
    name: str = typer.Option("deepeval-import", "--name", help="Run name in the trace header."),
    threshold: float = THRESHOLD,
    json_out: bool = JSON,
) -> None:
    """DeepEval test cases (input, retrieval_context, actual_output) -> traces matched to golden queries, each
    retrieval context placed in the corpus."""
    from ragassay.importers.deepeval import traces_from_deepeval

    _import_rows(traces_from_deepeval, cases, out, corpus, golden, name, threshold, json_out)


@import_app.command("trec")
def trec(
    run: Path = typer.Argument(..., help="TREC run file: qid Q0 docid rank score tag."),
    out: Path = OUT_TRACES, corpus: Path = CORPUS, golden: Path = GOLDEN,
    ties: str = typer.Option("trec_eval9", "--ties", help="given | trec_eval9 | trec_eval10"),
    json_out: bool = JSON,
) -> None:
    """A TREC run -> retrieval-only traces of whole documents, ordered as trec_eval orders them."""
    from ragassay.trace.adapters import traces_from_trec_run

    corp, gs = _inputs(corpus, golden)
    header, traces, problems = traces_from_trec_run(run, corp, ties=ties)
    _write(out, header, traces, problems, corp, gs, json_out, "line")


def register(app: typer.Typer) -> None:
    app.add_typer(import_app, name="import")
