"""`ragassay golden build` and `ragassay golden check`; `synth`, `agree`, `status`, `diff`, `pool` and
`merge-labels` join the group from their own modules."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from ragassay.cli import golden_agree, golden_pool, golden_status, golden_synth
from ragassay.cli.common import console, err_console, print_json, progress
from ragassay.corpus import load_corpus
from ragassay.golden import STRATA, build_golden, load_golden

NEGATIVE_SHARE_WARNING = 0.10

golden_app = typer.Typer(help="Build and check span-labelled golden sets.", no_args_is_help=True)


@golden_app.command("build")
def build(
    src: Path = typer.Argument(..., help="Authoring file (.yaml/.yml or .jsonl) with quotes."),
    corpus: Path = typer.Option(..., "--corpus", help="Corpus directory or .jsonl file."),
    out: Path = typer.Option(..., "-o", "--out", help="Output directory for golden.jsonl + manifest.json."),
    built_at: str = typer.Option(None, help="Timestamp to record (default: newest `created` date)."),
    agreement: list[Path] = typer.Option(None, "--agreement", help="An annotator's label file (golden agree's "
                                         "JSONL); give two or more to compute the manifest's annotators and "
                                         "kappas."),
    skip_single: bool = typer.Option(False, "--skip-single", help="With --agreement: leave out items only one "
                                     "annotator labelled (counted in the manifest)."),
    json_out: bool = typer.Option(False, "--json", help="Print the manifest as JSON."),
) -> None:
    """Resolve every quote to a canonical span; fail listing every problem, writing nothing. With
    --agreement, the manifest's kappas are computed from the annotators' label files (golden agree), never
    copied. A bar shows on a terminal while it works (none with --json or when stderr is not a terminal)."""
    from ragassay.golden.builder import agreement_warnings

    with progress(enabled=not json_out) as bar:
        # no total: load_corpus and build_golden report no per-file or per-quote progress
        task = bar.add_task(escape(f"loading the corpus {corpus}"), total=None)
        corp = load_corpus(corpus)
        bar.update(task, description=escape(f"resolving the quotes of {src} against {len(corp)} documents"))
        gs = build_golden(src, corp, out, built_at=built_at, agreement=agreement or (), skip_single=skip_single)
    report_skipped(corp.skipped, corpus)
    for w in agreement_warnings(gs.manifest):
        err_console.print(f"warning: {w}", markup=False, soft_wrap=True)
    if json_out:
        print_json(gs.manifest)
        return
    m = gs.manifest
    console.print(f"built [bold]{escape(m['dataset_version'])}[/]: {m['n_queries']} queries, "
                  f"{m['n_evidence']} evidence spans over {m['n_docs']} docs -> {escape(str(out))}")


def report_skipped(skipped: list[str], corpus: Path) -> None:
    """Files in the corpus folder that were not loaded are counted on stderr, never dropped unmentioned."""
    if not skipped:
        return
    shown = "; ".join(skipped[:3]) + ("; ..." if len(skipped) > 3 else "")
    err_console.print(f"warning: {len(skipped)} file(s) in {corpus} not loaded: {shown}", markup=False,
                      soft_wrap=True)


def summarize(manifest: dict) -> dict:
    n = manifest["n_queries"]
    share = manifest["n_negative"] / n if n else 0.0
    warnings = []
    if share < NEGATIVE_SHARE_WARNING:
        warnings.append(f"only {share:.1%} negative (unanswerable) queries; abstention cannot be measured "
                        f"well below {NEGATIVE_SHARE_WARNING:.0%}")
    missing = [s for s in STRATA if s not in manifest["strata"]]
    if missing:
        warnings.append(f"strata with no queries: {', '.join(missing)}")
    return {"negative_share": share, "warnings": warnings}


def print_manifest_summary(manifest: dict) -> None:
    info = summarize(manifest)
    console.print(f"[bold]{escape(manifest['dataset_version'])}[/]  "
                  f"corpus {escape(manifest['corpus_digest'][:19])}…  "
                  f"{manifest['n_queries']} queries  label type {manifest['label_type']}  "
                  f"hit rule {escape(manifest['hit_rule'])}  built {escape(manifest['built_at'])}")
    t = Table(title="strata", show_edge=False)
    t.add_column("stratum")
    t.add_column("queries", justify="right")
    t.add_column("share", justify="right")
    n = manifest["n_queries"] or 1
    for s, c in manifest["strata"].items():
        t.add_row(escape(s), str(c), f"{c / n:.0%}")
    console.print(t)
    console.print(f"negative share {info['negative_share']:.1%}; evidence spans {manifest['n_evidence']} "
                  f"({', '.join(f'{k} {v}' for k, v in manifest['match_kinds'].items())}); "
                  f"queries with nuggets {manifest['n_with_nuggets']}; annotators "
                  f"{escape(', '.join(manifest['annotators'])) or 'unrecorded'}; "
                  f"kappa {manifest['kappa_binary'] if manifest['kappa_binary'] is not None else 'unknown'}")
    for w in info["warnings"]:
        console.print(f"[yellow]warning:[/] {escape(w)}")


@golden_app.command("check")
def check(
    path: Path = typer.Argument(..., help="A built golden set directory."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Strata table, negative share, label type and manifest pins of a built set."""
    gs = load_golden(path)
    if json_out:
        print_json({"manifest": gs.manifest, **summarize(gs.manifest)})
        return
    print_manifest_summary(gs.manifest)


# the commands kept in their own modules join the group once, when this module loads (register runs on every
# main() call)
golden_synth.register(golden_app)
golden_agree.register(golden_app)
golden_status.register(golden_app)
golden_pool.register(golden_app)


def register(app: typer.Typer) -> None:
    app.add_typer(golden_app, name="golden")
