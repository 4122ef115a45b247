"""`ragassay golden status` (saturation, headroom, tiers, rot) and `ragassay golden diff` (two built sets).

:func:`register` adds both to the ``golden`` group; the store, numpy and the corpus loader are imported only
when a command runs.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ragassay.cli.common import console, err_console, esc, print_json
from ragassay.errors import InputError

TIERS_KIND = "golden tiers"
# The first line of every tier file this command writes: how it recognises a file it may replace.
TIERS_HEADER = "# ragassay golden tiers: written by `ragassay golden status --tiers-out`; ragassay may replace it"
LISTED = 10


def _is_tier_file(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8") as fh:
            return fh.readline().rstrip("\n") == TIERS_HEADER
    except (OSError, UnicodeDecodeError):
        return False


def check_tiers_path(path: Path) -> Path:
    """Refuse a tier file path before any work: it must end in .yaml or .yml and be new or an earlier tier
    file (:func:`ragassay.fsio.check_output_file`)."""
    from ragassay.fsio import check_output_file

    if path.suffix not in (".yaml", ".yml"):
        raise InputError(f"{path}: the tier file must end in .yaml or .yml")
    check_output_file(path, TIERS_KIND, overwrite_ok=_is_tier_file)
    return path


def write_tiers(report: dict, path: Path) -> None:
    """The three tiers (ids, expected time) and the rule that chose them, as YAML, written atomically."""
    import yaml

    from ragassay.fsio import atomic_write_text

    body = {"dataset_version": report["dataset_version"], "metrics": report["metrics"], "rule": report["rule"],
            "runs": [r["name"] for r in report["runs"]], "tiers": report["tiers"]}
    atomic_write_text(path, TIERS_HEADER + "\n" + yaml.safe_dump(body, sort_keys=False, allow_unicode=True))


def _fmt(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.3f}"


def _flag(x: bool | None) -> str:
    return {True: "yes", False: "no", None: "undefined"}[x]


def _ms(x: float | None) -> str:
    if x is None:
        return "unknown"
    return f"{x / 1000:.1f} s" if x >= 1000 else f"{x:.0f} ms"


def _listing(ids: list[str]) -> str:
    return ", ".join(ids[:LISTED]) + (f", ... ({len(ids) - LISTED} more)" if len(ids) > LISTED else "")


def _print_status(rep: dict) -> None:
    ex = rep["excluded"]
    console.print(f"[bold]{esc(rep['dataset_version'])}[/]: {len(rep['runs'])} run(s), "
                  f"{len(rep['configs'])} configuration(s), latest {esc(rep['latest_run'])}; left out "
                  f"{ex['n_other_version']} of other versions, {ex['n_unfinished']} unfinished, "
                  f"{ex['n_missing_metric']} without the metric(s)")
    rule = rep["rule"]
    console.print(f"saturated: every configuration's stratum mean >= {rule['threshold']} with saturation "
                  f"bound >= {rule['ci_floor']} (95% t bound, capped by mean x 0.025^(1/n)); an item passes at >= {rule['threshold']}")
    t = Table(show_edge=False)
    for col in ("stratum", "items", "metric", "best", "best run", "latest", "headroom", "saturated",
                "passed by all", "undefined items"):
        t.add_column(col, justify="left" if col in ("stratum", "metric", "best run") else "right")
    for s in rep["strata"]:
        for k, (metric, v) in enumerate(s["metrics"].items()):
            first = k == 0
            t.add_row(esc(s["stratum"]) if first else "", str(s["n_items"]) if first else "", esc(metric),
                      _fmt(v["best"]), esc(v["best_run"] or "-"), _fmt(v["latest"]), _fmt(v["headroom_best"]),
                      _flag(v["saturated"]), str(len(s["passed_by_all"])) if first else "",
                      str(s["n_undefined_items"]) if first else "")
    console.print(t)
    items = rep["items"]
    console.print(f"items: {items['passed_by_all']} of {items['n']} passed by every configuration, "
                  f"{items['stable']} stable, {len(items['flipped'])} flipped, {len(items['undefined'])} "
                  "undefined")
    for name, tier in rep["tiers"].items():
        unknown = f" ({tier['n_latency_unknown']} without latency)" if tier["n_latency_unknown"] else ""
        console.print(f"tier {name}: {tier['n']} items, expected {_ms(tier['expected_ms'])} per trial{unknown}")
    rot = rep.get("rot")
    if rot is not None:
        if not rot["corpus_changed"]:
            console.print("rot: the corpus is the one the set was built on; nothing can have rotted")
        else:
            console.print(f"rot: {rot['n_items']} item(s) with evidence that no longer resolves, in "
                          f"{len(rot['docs'])} document(s)")
            for r in rot["evidence"][:LISTED]:
                console.print(f"  {esc(r['query_id'])}  {esc(r['doc_id'])}  {esc(r['reason'])}")
            if len(rot["evidence"]) > LISTED:
                console.print(f"  ... ({len(rot['evidence']) - LISTED} more; --json lists them all)")


def status(
    golden: Path = typer.Option(..., "--golden", help="Built golden set directory."),
    store: Path = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file."),
    metric: list[str] = typer.Option(None, "--metric", help="Score metric(s) in [0, 1] (default recall@10)."),
    runs: list[str] = typer.Option(None, "--runs", help="Only these runs (id, prefix or name); default all."),
    tiers_out: Path = typer.Option(None, "--tiers-out", help="Write the smoke/regression/full tiers (.yaml)."),
    corpus: Path = typer.Option(None, "--corpus", help="Check the evidence still resolves in this corpus."),
    threshold: float = typer.Option(0.95, "--threshold", help="Saturation level and item pass mark."),
    ci_floor: float = typer.Option(0.90, "--ci-floor", help="Lowest saturation bound (t bound capped by mean x 0.025^(1/n)) a saturated mean may have."),
    smoke_size: int = typer.Option(25, "--smoke-size", help="Most items in the smoke tier."),
    seed: int = typer.Option(0, "--seed", help="Seed of the smoke tier's stratified sample."),
    json_out: bool = typer.Option(False, "--json", help="Print the status as JSON."),
) -> None:
    """Per stratum: best and latest score, headroom, saturation; items every configuration passes; tiers;
    rot against a changed corpus."""
    from ragassay.analysis.golden_status import DEFAULT_METRICS, stored_golden_status
    from ragassay.golden import load_golden
    from ragassay.golden.status import StatusOptions, golden_rot
    from ragassay.store import Store

    options = StatusOptions(threshold=threshold, ci_floor=ci_floor, smoke_size=smoke_size, seed=seed)
    if tiers_out is not None:
        check_tiers_path(tiers_out)
    gs = load_golden(golden)
    corp = None
    if corpus is not None:
        from ragassay.corpus import load_corpus

        corp = load_corpus(corpus)
        if corp.skipped:  # counted, never dropped unmentioned (as `golden build` does)
            err_console.print(f"warning: {len(corp.skipped)} file(s) in {corpus} not loaded: "
                              f"{'; '.join(corp.skipped[:3])}{'; ...' if len(corp.skipped) > 3 else ''}",
                              markup=False, soft_wrap=True)
    with Store.open(store, read_only=True) as st:
        rep = stored_golden_status(st, gs, metrics=metric or DEFAULT_METRICS, runs=runs or None, options=options)
    if corp is not None:
        rep["rot"] = golden_rot(gs, corp)
    if tiers_out is not None:
        write_tiers(rep, tiers_out)
        rep["tiers_out"] = str(tiers_out)
    if json_out:
        print_json(rep)
        return
    _print_status(rep)
    if tiers_out is not None:
        console.print(f"tiers -> {esc(tiers_out)}")


def diff(
    old: Path = typer.Argument(..., help="The older built golden set directory."),
    new: Path = typer.Argument(..., help="The newer built golden set directory."),
    json_out: bool = typer.Option(False, "--json", help="Print the diff as JSON."),
) -> None:
    """Items added, removed, relabelled (evidence, grade or answerable changed) and edited, per stratum."""
    from ragassay.golden import load_golden
    from ragassay.golden.diff import golden_diff

    d = golden_diff(load_golden(old), load_golden(new))
    if json_out:
        print_json(d)
        return
    console.print(f"[bold]{esc(d['old'])}[/] -> [bold]{esc(d['new'])}[/]: {len(d['added'])} added, "
                  f"{len(d['removed'])} removed, {len(d['relabelled'])} relabelled, {len(d['edited'])} edited, "
                  f"{d['n_unchanged']} unchanged (spans compared by {d['span_identity']})")
    for pin, v in d["pins"].items():
        if pin != "dataset_version":
            console.print(f"{esc(pin)} changed: {esc(v['old'])} -> {esc(v['new'])}")
    t = Table(show_edge=False)
    for col in ("stratum", "added", "removed", "relabelled", "edited", "unchanged"):
        t.add_column(col, justify="left" if col == "stratum" else "right")
    for s, row in d["strata"].items():
        t.add_row(esc(s), *(str(row[k]) for k in ("added", "removed", "relabelled", "edited", "unchanged")))
    console.print(t)
    for kind in ("added", "removed"):
        if d[kind]:
            console.print(f"{kind}: {esc(_listing(d[kind]))}")
    for kind in ("relabelled", "edited"):
        for c in d[kind][:LISTED]:
            console.print(f"{kind}: {esc(c['query_id'])} ({', '.join(c['changes'])})")
        if len(d[kind]) > LISTED:
            console.print(f"... {len(d[kind]) - LISTED} more {kind}; --json lists them all", markup=False)


def register(golden_app: typer.Typer) -> None:
    """Add ``status`` and ``diff`` to the ``golden`` group (once, however often it is called)."""
    have = {c.name for c in golden_app.registered_commands}
    if "status" not in have:
        golden_app.command("status")(status)
    if "diff" not in have:
        golden_app.command("diff")(diff)
