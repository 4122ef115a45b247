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


NO_GOLDEN = "no golden set given: span survival needs --golden"


def _survival_table(res: dict) -> Table:
    t = Table(title=f"span survival, parser {esc(res['parser'])}", show_edge=False)
    for c in ("stratum", "spans", "exact", "exact or fuzzy", "lost"):
        t.add_column(c, justify="left" if c == "stratum" else "right")
    for r in res["by_stratum"]:
        t.add_row(esc(r["group"]), str(r["n"]), _f(r["exact"]), _f(r["exact_or_fuzzy"]),
                  f"{_f(r['lost'])} ({r['n_lost']})")
    return t


def _proxy_table(out: list[dict]) -> Table:
    from ragassay.corpus.survival import GATES

    t = Table(title=esc(f"parse-quality proxies: median [min, max] over {len(out[0]['proxies'])} document(s)"),
              show_edge=False)
    for c in ("proxy", "gate", *(res["parser"] for res in out)):
        t.add_column(esc(c), justify="left" if c == "proxy" else "right")
    for name in out[0]["proxy_distributions"]:
        lo, hi = GATES.get(name, (None, None))
        cells = []
        for res in out:
            d = res["proxy_distributions"][name]
            flagged = sum(name in fl for fl in res["flags"].values())
            cells.append((esc(f"{_f(d['p50'])} [{_f(d['min'])}, {_f(d['max'])}]") if d["n"] else "undefined")
                         + (f", {d['n_undefined']} undefined" if d["n_undefined"] and d["n"] else "")
                         + (f", [red]{flagged} flagged[/]" if flagged else ""))
        t.add_row(name, f">= {lo:g}" if lo is not None else f"<= {hi:g}" if hi is not None else "-", *cells)
    return t


def _fidelity_table(res: dict) -> tuple[Table, list[str]]:
    fid = res["fidelity"]
    s = fid["summary"]
    text, tables = s.get("text"), s.get("tables")
    t = Table(title=f"parse fidelity, parser {esc(res['parser'])}", show_edge=False)
    cols = ["doc"] + (["NED", "CER", "reading τ", "blocks found"] if text else []) + (
        ["TEDS", "TEDS-S", "tables found"] if tables else [])
    for c in cols:
        t.add_column(c, justify="left" if c == "doc" else "right")

    def n(x) -> str:
        return "undefined" if x is None or x != x else str(int(x))

    for doc, r in fid["docs"].items():
        if (text and r["ned"] == r["ned"]) or (tables and r["n_tables"] == r["n_tables"]):
            t.add_row(esc(doc), *([_f(r["ned"]), _f(r["cer"]), _f(r["tau"]), f"{n(r['n_found'])}/{n(r['n_blocks'])}"]
                                  if text else []),
                      *([_f(r["teds"]), _f(r["teds_struct"]),
                         f"{n(r['n_tables'] - r['n_unmatched'])}/{n(r['n_tables'])}"] if tables else []))
    t.add_row("mean", *([_f(text["ned"]["mean"]), _f(text["cer"]["mean"]), _f(text["tau"]["mean"]), ""]
                        if text else []),
              *([_f(tables["teds"]["mean"]), _f(tables["teds_struct"]["mean"]), ""] if tables else []))
    notes = []
    if text:
        if text["n_docs_undefined"]:
            notes.append(f"{text['n_docs_undefined']} of {s['n_docs']} documents have no reference text: "
                         "NED, CER and τ undefined for them, left out of the means")
        extra = text["tau"]["n_undefined"] - text["n_docs_undefined"]
        if extra:
            notes.append(f"τ undefined for {extra} document(s) with a reference text (fewer than two blocks "
                         "found in the parse, or all found at one place)")
    if tables:
        if tables["n_docs_undefined"]:
            notes.append(f"{tables['n_docs_undefined']} of {s['n_docs']} documents have no reference tables: "
                         "TEDS undefined for them, left out of the means")
        if tables["n_unmatched"]:
            notes.append(f"{tables['n_unmatched']} of {tables['n_tables']} reference table(s) not found in the "
                         "parse (TEDS 0)")
        if tables["n_extra"]:
            notes.append(f"{tables['n_extra']} table(s) in the parse match no reference table")
    return t, notes


def register_parse(app: typer.Typer) -> None:
    @app.command("parse")
    def parse(
        source: Path = typer.Argument(None, help="Folder of source documents (.html/.pdf/.txt/.md), or, with "
                                                 "--parsed, a folder of .txt files or a .jsonl of parsed text. "
                                                 "Default: the bundled corpus."),
        parser: list[str] = typer.Option(["table-aware", "naive"], "--parser",
                                         help="Parser(s) to measure: table-aware, naive."),
        parsed: bool = typer.Option(False, "--parsed", help="SOURCE is another parser's output."),
        golden: Path = typer.Option(None, "--golden", help="Golden set (built folder or authoring file) for span "
                                                           "survival; without SOURCE the bundled one is used."),
        corpus: Path = typer.Option(None, "--corpus", help="Corpus the --golden set was built on (default: "
                                                           "SOURCE, or the bundled corpus)."),
        threshold: float = typer.Option(0.9, "--threshold", help="Fuzzy token-alignment similarity, in (0, 1]."),
        reference_text: Path = typer.Option(None, "--reference-text",
                                            help="Reference plain text per document (a folder of .txt files or a "
                                                 ".jsonl of {doc_id, text}): NED, CER and reading-order τ."),
        reference_tables: Path = typer.Option(None, "--reference-tables",
                                              help="Reference HTML tables per document (a folder of .html files "
                                                   "or a .jsonl of {doc_id, html}): TEDS."),
        json_out: bool = typer.Option(False, "--json"),
    ) -> None:
        """Span survival per stratum and format (exact / fuzzy / lost), parse-quality proxies per parser, and
        fidelity (NED, CER, reading-order τ, TEDS) against reference texts and tables."""
        from ragassay.corpus import bundled_corpus_dir
        from ragassay.corpus.parse import PARSERS, load_parsed, parse_dir, read_references
        from ragassay.corpus.survival import (
            distribution,
            parse_fidelity,
            parse_proxies,
            proxy_flags,
            span_survival,
        )

        bad = [p for p in parser if p not in PARSERS]
        checks.refuse(checks.number("--threshold", threshold, 0, 1, low_open=True,
                                    why="a token-alignment similarity, e.g. 0.9"),
                      f"unknown parser(s) {bad}; use {', '.join(PARSERS)}" if bad else None,
                      "--corpus names the corpus a --golden set was built on; pass --golden as well, or drop "
                      "--corpus" if corpus is not None and golden is None else None)
        # the bundled golden set only fits the bundled corpus: on your own documents survival needs --golden
        survive = golden is not None or source is None
        src = source or bundled_corpus_dir()
        runs = [("given", load_parsed(src))] if parsed else [(p, parse_dir(src, p)) for p in parser]
        doc_ids = {d.doc_id for _, docs in runs for d in docs}
        refs: dict[str, dict[str, str] | None] = {"text": None, "tables": None}
        problems: list[str] = []
        for kind, path in (("text", reference_text), ("tables", reference_tables)):
            if path is not None:
                refs[kind], bad_refs = read_references(path, kind, doc_ids)
                problems += bad_refs
        checks.refuse(*problems)
        gs = None
        if survive:
            from ragassay.analysis.runner import load_inputs

            gs = load_inputs(corpus or (None if parsed else source), golden)[1]
        out = []
        for name, docs in runs:
            entry: dict = {"parser": name}
            if gs is not None:
                entry |= span_survival({d.doc_id: (d.text, d.fmt) for d in docs}, gs, threshold=threshold,
                                       parser=name).to_dict()
            prox = {d.doc_id: parse_proxies(d.text, d.n_bytes, d.n_pages, d.source_html) for d in docs}
            names = next(iter(prox.values())).keys() if prox else []
            entry |= {"proxies": prox, "flags": {k: proxy_flags(v) for k, v in prox.items() if proxy_flags(v)},
                      "proxy_distributions": {k: distribution([v[k] for v in prox.values()]) for k in names},
                      "fidelity": parse_fidelity({d.doc_id: d.text for d in docs}, refs["text"], refs["tables"])
                      if refs["text"] is not None or refs["tables"] is not None else None}
            out.append(entry)
        skipped = None if survive else NO_GOLDEN
        if json_out:
            print_json({"parsers": out, "span_survival_skipped": skipped})
            return
        if skipped:
            console.print(skipped)
        for res in out:
            if "by_stratum" in res:
                console.print(_survival_table(res))
        console.print(_proxy_table(out))
        for res in out:
            for doc, fl in res["flags"].items():
                console.print(f"  flagged {esc(doc)} ({esc(res['parser'])}): {esc(', '.join(fl))}")
        for res in out:
            if res["fidelity"] is not None:
                t, notes = _fidelity_table(res)
                console.print(t)
                for line in notes:
                    console.print(f"  {line}")


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
