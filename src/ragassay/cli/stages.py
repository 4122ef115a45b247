"""`ragassay corpus check`, `ragassay parse`, `ragassay chunks` and `ragassay sweep`: the stages before retrieval."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ragassay.cli import checks
from ragassay.cli.common import console, esc, print_json

STORE_OPT = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file.")
corpus_app = typer.Typer(help="Check a corpus's canonicalization.", no_args_is_help=True)


def _f(x, digits: int = 3) -> str:
    return "undefined" if x is None or x != x else f"{x:.{digits}f}"


@corpus_app.command("check")
def corpus_check(
    corpus: Path = typer.Argument(None, help="Corpus folder or .jsonl (default: the bundled corpus)."),
    spans: int = typer.Option(50, "--spans", min=1, help="Random spans per document for the offset round trip."),
    tolerance: float = typer.Option(0.05, "--drift-tolerance", help="Largest token-ratio distance from the "
                                                                   "class median before a document is listed "
                                                                   "(a finite number >= 0)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Idempotence, offset round trip and token-count drift per document class; exit 1 on any failure."""
    from ragassay.corpus import bundled_corpus_dir, load_corpus
    from ragassay.corpus.check import check_corpus

    checks.refuse(checks.number("--drift-tolerance", tolerance, 0,
                                why="a distance of token ratios from the class median, e.g. 0.05"))
    res = check_corpus(load_corpus(corpus or bundled_corpus_dir()), n_spans=spans, drift_tolerance=tolerance)
    if json_out:
        print_json(res.to_dict())
    else:
        console.print(f"{res.n_docs} documents, {res.n_spans} spans round-tripped: "
                      + ("[green]all properties hold[/]" if res.ok else f"[red]{len(res.failures)} document(s) fail[/]"))
        for cls, d in res.drift.items():
            console.print(f"  token ratio canonical/raw, {esc(cls)}: median {_f(d['median'])} "
                          f"[{_f(d['min'])}, {_f(d['max'])}] over {d['n_docs']} docs")
        for doc, problems in res.failures.items():
            for p in problems:
                console.print(f"  [red]{esc(doc)}[/]: {esc(p)}")
    if not res.ok:
        raise typer.Exit(1)


def register_parse(app: typer.Typer) -> None:
    @app.command("parse")
    def parse(
        source: Path = typer.Argument(None, help="Folder of source documents (.html/.pdf/.txt/.md), or, with "
                                                 "--parsed, a folder of .txt files or a .jsonl of parsed text. "
                                                 "Default: the bundled corpus."),
        parser: list[str] = typer.Option(["table-aware", "naive"], "--parser",
                                         help="Parser(s) to measure: table-aware, naive."),
        parsed: bool = typer.Option(False, "--parsed", help="SOURCE is another parser's output."),
        golden: Path = typer.Option(None, "--golden", help="Golden set (built folder or authoring file)."),
        corpus: Path = typer.Option(None, "--corpus", help="Corpus the golden set was built on (default: "
                                                           "SOURCE, or the bundled corpus)."),
        threshold: float = typer.Option(0.9, "--threshold", help="Fuzzy token-alignment similarity, in (0, 1]."),
        json_out: bool = typer.Option(False, "--json"),
    ) -> None:
        """Span survival per stratum and format (exact / fuzzy / lost) and parse-quality proxies per parser."""
        from ragassay.analysis.runner import load_inputs
        from ragassay.corpus import bundled_corpus_dir
        from ragassay.corpus.parse import PARSERS, load_parsed, parse_dir
        from ragassay.corpus.survival import distribution, parse_proxies, proxy_flags, span_survival
        from ragassay.errors import InputError

        checks.refuse(checks.number("--threshold", threshold, 0, 1, low_open=True,
                                    why="a token-alignment similarity, e.g. 0.9"))
        src = source or bundled_corpus_dir()
        _, gs = load_inputs(corpus or (None if parsed else src), golden)
        bad = [p for p in parser if p not in PARSERS]
        if bad:
            raise InputError(f"unknown parser(s) {bad}; use {', '.join(PARSERS)}")
        runs = [("given", load_parsed(src))] if parsed else [(p, parse_dir(src, p)) for p in parser]
        out = []
        for name, docs in runs:
            surv = span_survival({d.doc_id: (d.text, d.fmt) for d in docs}, gs, threshold=threshold, parser=name)
            prox = {d.doc_id: parse_proxies(d.text, d.n_bytes, d.n_pages, d.source_html) for d in docs}
            flags = {k: proxy_flags(v) for k, v in prox.items() if proxy_flags(v)}
            names = next(iter(prox.values())).keys() if prox else []
            out.append({**surv.to_dict(), "proxies": prox, "flags": flags,
                        "proxy_distributions": {k: distribution([v[k] for v in prox.values()]) for k in names}})
        if json_out:
            print_json({"parsers": out})
            return
        for res in out:
            t = Table(title=f"span survival, parser {esc(res['parser'])}", show_edge=False)
            for c in ("stratum", "spans", "exact", "exact or fuzzy", "lost"):
                t.add_column(c, justify="left" if c == "stratum" else "right")
            for r in res["by_stratum"]:
                t.add_row(esc(r["group"]), str(r["n"]), _f(r["exact"]), _f(r["exact_or_fuzzy"]),
                          f"{_f(r['lost'])} ({r['n_lost']})")
            console.print(t)
            for doc, fl in res["flags"].items():
                console.print(f"  flagged {esc(doc)}: {esc(', '.join(fl))}")


def register_chunks(app: typer.Typer) -> None:
    @app.command("chunks")
    def chunks(
        kind: list[str] = typer.Option(["recursive"], "--kind", help="fixed, recursive or sentence (repeatable)."),
        size: list[int] = typer.Option([128], "--size", help="Tokens per chunk (repeatable)."),
        overlap: int = typer.Option(0, "--overlap", help="Overlap of fixed windows, in tokens."),
        golden: Path = typer.Option(None, "--golden"),
        corpus: Path = typer.Option(None, "--corpus"),
        json_out: bool = typer.Option(False, "--json"),
    ) -> None:
        """Chunking report card per kind x size: chunks, sizes, chunks and tokens per answer span, split spans,
        Precision_Omega, build time."""
        import time

        from ragassay.analysis.runner import load_inputs
        from ragassay.errors import InputError
        from ragassay.metrics.tokens import TokenSpace, precision_omega, report_card
        from ragassay.pipeline.chunkers import chunk_corpus

        corp, gs = load_inputs(corpus, golden)
        space = TokenSpace.from_corpus(corp)
        thr = int(gs.manifest.get("relevance_threshold", 2))
        ev = [(i, e) for i, q in enumerate(gs) for e in q.evidence if e.grade >= thr]
        eq = [i for i, _ in ev]
        elo, ehi = space.intervals([e.doc_id for _, e in ev], [e.start for _, e in ev], [e.end for _, e in ev])
        cards = []
        for k in kind:
            for s in size:
                ov = overlap if k == "fixed" else 0
                try:
                    t0 = time.perf_counter()
                    ch = chunk_corpus({d.doc_id: d.text for d in corp}, k, s, ov)
                    ms = (time.perf_counter() - t0) * 1e3
                except ValueError as e:
                    raise InputError(f"--kind {k} --size {s} --overlap {ov}: {e}") from None
                clo, chi = space.intervals([c.doc_id for c in ch], [c.start for c in ch], [c.end for c in ch])
                om = precision_omega(len(gs), clo, chi, eq, elo, ehi)
                card = report_card(clo, chi, elo, ehi, build_ms=ms, omega=om)
                cards.append({"kind": k, "size": s, "overlap": ov, **card.to_dict()})
        if json_out:
            print_json({"cards": cards})
            return
        t = Table(title="chunking report card", show_edge=False)
        for c in ("chunker", "chunks", "mean size", "p95 size", "chunks/span", "p95 chunks/span", "tokens/span",
                  "split spans", "Precision_Ω", "build ms"):
            t.add_column(c, justify="left" if c == "chunker" else "right")
        for c in cards:
            t.add_row(f"{c['kind']}-{c['size']}" + (f"-o{c['overlap']}" if c["overlap"] else ""), str(c["n_chunks"]),
                      _f(c["size_mean"], 1), _f(c["size_p95"], 0), _f(c["chunks_per_span_mean"], 2),
                      _f(c["chunks_per_span_p95"], 0), _f(c["tokens_per_span_mean"], 0),
                      f"{c['spans_split']}/{c['n_spans']}", _f(c["precision_omega_mean"]), _f(c["build_ms"], 0))
        console.print(t)


def _pm(d: dict) -> str:
    return f"{_f(d['mean'])} ± {_f(d['sd'], 2)}"


def print_sweep(res: dict) -> None:
    k = res["fixed_k"]
    for tag, title in (("budget", f"at a fixed budget of {res['budget_tokens']} tokens (k floats)"),
                       (f"k{k}", f"at fixed k = {k}")):
        t = Table(title=f"sweep {esc(res['name'])}: token metrics {title}", show_edge=False)
        for c in ("config", "chunks", "mean size", "k used", "tokens used", "recall", "precision", "IoU",
                  "Precision_Ω", "recall@context", "split spans", "build ms"):
            t.add_column(c, justify="left" if c == "config" else "right")
        for r in res["cost_quality"]:
            card = r["card"]
            t.add_row(esc(r["config"]) + (" (baseline)" if r["config"] == res["baseline"] else ""),
                      str(card["n_chunks"]), _f(card["size_mean"], 1),
                      _f(r["k_used_mean" if tag == "budget" else f"k_used_mean@{tag}"], 1),
                      _f(r["tokens_used_mean" if tag == "budget" else f"tokens_used_mean@{tag}"], 0), _pm(r[f"token_recall@{tag}"]), _pm(r[f"token_precision@{tag}"]),
                      _pm(r[f"token_iou@{tag}"]), _pm(r["precision_omega"]), _f(r["recall@context"]["mean"]),
                      f"{card['spans_split']}/{card['n_spans']}", _f(r["index_build_ms"] + card["build_ms"], 0))
        console.print(t)
    t = Table(title=f"paired comparison vs {esc(res['baseline'])} (bootstrap CI, BH across the sweep)",
              show_edge=False)
    for c in ("config", "metric", "delta", "CI", "W/L/T", "p adj", "verdict"):
        t.add_column(c, justify="left" if c in ("config", "metric", "verdict") else "right")
    for r in res["comparison"]:
        t.add_row(esc(r["config"]), esc(r["metric"]), _f(r["delta"]), f"[{_f(r['ci_low'])}, {_f(r['ci_high'])}]",
                  f"{r['wins']}/{r['losses']}/{r['ties']}", _f(r["p_adj_sweep"]), r["sweep_verdict"])
    console.print(t)


def register_sweep(app: typer.Typer) -> None:
    @app.command("sweep")
    def sweep(
        sweep_file: Path = typer.Argument(None, help="Sweep YAML (default: the bundled Lab 2 chunking sweep)."),
        golden: Path = typer.Option(None, "--golden"),
        corpus: Path = typer.Option(None, "--corpus"),
        store: Path = STORE_OPT,
        workdir: Path = typer.Option(Path("ragassay-sweep"), "--workdir", help="Folder for the generated "
                                                                              "configs and traces (new or empty)."),
        n_resamples: int = typer.Option(2000, "--resamples", help="Bootstrap resamples (100 to 1,000,000)."),
        json_out: bool = typer.Option(False, "--json"),
    ) -> None:
        """Run a grid of configs, store each run, and print the cost/quality tables at a fixed token budget and
        the paired comparison against the baseline."""
        from ragassay.analysis.runner import load_inputs
        from ragassay.analysis.sweep import bundled_sweep, load_sweep, run_sweep
        from ragassay.cli.run import store_for_runs
        from ragassay.fsio import check_output_dir

        # everything is checked before the workdir or the store is created: a refused sweep leaves neither
        checks.refuse(checks.resamples(n_resamples))
        spec = load_sweep(sweep_file or bundled_sweep())
        check_output_dir(workdir, "sweep")
        corp, gs = load_inputs(corpus, golden)
        with store_for_runs(store) as st:
            res = run_sweep(st, spec, corp, gs, workdir, n_resamples=n_resamples,
                            progress=None if json_out else
                            lambda i, n, name: console.print(f"  [{i}/{n}] {esc(name)} stored", highlight=False))
        d = res.to_dict()
        if json_out:
            print_json(d)
            return
        print_sweep(d)
        console.print(f"{len(d['run_ids'])} runs stored in {esc(str(store))}; configs and traces in {esc(str(workdir))}")


def register(app: typer.Typer) -> None:
    app.add_typer(corpus_app, name="corpus")
    register_parse(app)
    register_chunks(app)
    register_sweep(app)
