"""`ragassay analyze attribution | attacks | hygiene` (docs/analyses-causal.md).

Registered through :data:`ragassay.cli.analyze.KINDS`; each command takes ``--json`` and prints a short
summary. The heavy modules are imported inside the commands, so listing the kinds stays cheap.

The ``--rebaseline`` option and its summary line, shared by every analysis that pairs stored runs, live here
and :mod:`ragassay.cli.analyze` imports them: that module imports this one (its kinds table), so the reverse
would make the two import each other.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from ragassay.cli import checks
from ragassay.cli.common import console, esc, print_json
from ragassay.errors import InputError

JSON_OPT = typer.Option(False, "--json", help="Print JSON instead of the summary.")
REBASELINE_OPT = typer.Option(False, "--rebaseline", help="Analyse runs whose pins differ (golden set, corpus, "
                                                          "metric version, ...); the output names the pins.")
CONFIG_OPT = typer.Option(None, "--config", help="Pipeline config YAML (default: the bundled BM25 config).")
GOLDEN_OPT = typer.Option(None, "--golden", help="Golden set: built folder or authoring file (default: bundled).")
CORPUS_OPT = typer.Option(None, "--corpus", help="Corpus folder or JSONL (default: bundled).")


def _v(x: float | None, signed: bool = False) -> str:
    if x is None or x != x:
        return "undefined"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def print_rebaselined(diffs: list[dict]) -> None:
    """One line naming every differing pin a rebaselined analysis let through (nothing when none)."""
    if diffs:
        console.print(Text("rebaselined: ", style="yellow") + Text("; ".join(
            f"{d['pin']}: {'unset' if d['a'] is None else d['a']} ({d['run_a']}) → "
            f"{'unset' if d['b'] is None else d['b']} ({d['run_b']})" for d in diffs)))


def _pipeline_and_traces(config: Path | None, corpus: Path | None, golden: Path | None, limit: int | None):
    from ragassay.analysis.demo import demo_config_dir
    from ragassay.analysis.runner import load_inputs
    from ragassay.pipeline import Pipeline

    c, g = load_inputs(corpus, golden)
    pipe = Pipeline.from_config(config or demo_config_dir() / "bm25.yaml", c)
    queries = g.queries[:limit] if limit else g.queries
    _, traces = pipe.run(queries, progress=False)
    return c, queries, pipe, traces


def attribution(
    config: Path = CONFIG_OPT, golden: Path = GOLDEN_OPT, corpus: Path = CORPUS_OPT,
    stage: str = typer.Option("packed", "--stage", help="packed (the generator's input) or final (top --k of "
                                                        "the ranked list)."),
    k: int = typer.Option(None, "--k", help="At most this many context items per query."),
    metric: str = typer.Option("answer_f1", "-m", "--metric",
                               help="answer_f1, answer_em or answer_f1_or_abstention."),
    shapley: str = typer.Option("auto", "--shapley", help="auto (exact up to --max-exact), exact, monte_carlo "
                                                          "or none (leave-one-out only)."),
    max_exact: int = typer.Option(10, "--max-exact", help="Largest item count for exact Shapley (2^n calls)."),
    permutations: int = typer.Option(200, "--permutations", help="Monte Carlo permutations per query."),
    repeats: int = typer.Option(1, "--repeats", help="Generations per subset (stochastic generators)."),
    duplicates: str = typer.Option("all", "--duplicates", help="all: removing an item removes every copy; "
                                                               "first: each copy is its own item."),
    refill: str = typer.Option("none", "--refill", help="none, or reserve: refill vacated tokens from the cut "
                                                        "units."),
    limit: int = typer.Option(None, "--limit", help="Only the first N golden queries (N >= 1)."),
    seed: int = typer.Option(0, "--seed"), resamples: int = typer.Option(2000, "--resamples"),
    json_out: bool = JSON_OPT,
) -> None:
    """Leave-one-out deltas and Shapley shares of each context item (regenerate without it, re-score)."""
    from ragassay.analysis.attribution import (
        RemovalPolicy,
        attribute,
        attribution_report_section,
        contexts_from_traces,
    )

    checks.refuse(checks.count("--k", k), checks.count("--max-exact", max_exact, 0),
                  checks.count("--permutations", permutations, 2), checks.count("--repeats", repeats),
                  checks.count("--limit", limit), checks.seed(seed), checks.resamples(resamples))
    policy = RemovalPolicy(duplicates=duplicates, refill=refill)  # type: ignore[arg-type]
    c, queries, pipe, traces = _pipeline_and_traces(config, corpus, golden, limit)
    contexts, reserves = contexts_from_traces(traces, c, stage=stage, k=k)
    res = attribute(queries, contexts, pipe._generator, metric=metric, reserves=reserves, policy=policy,
                    shapley=shapley, max_exact=max_exact, permutations=permutations, repeats=repeats, seed=seed,
                    n_resamples=resamples)
    if json_out:
        print_json(res.to_dict())
        return
    section = attribution_report_section(res)
    console.print(f"{len(res.queries)} queries, metric {esc(res.metric)}, shapley {res.shapley}, repeats "
                  f"{res.repeats}, policy {res.policy.to_dict()}: {res.calls:,} generator calls "
                  f"({res.cache_hits:,} cache hits); {res.n_undefined} undefined")
    t = Table(show_edge=False)
    for col in ("group", "figure", "queries", "mean", "95% CI"):
        t.add_column(col)
    for g in section["groups"]:
        t.add_row(esc(g["group"]), g["figure"], str(g["n_queries"]), _v(g["mean"], True),
                  f"[{_v(g['ci_low'], True)}, {_v(g['ci_high'], True)}]" if g["defined"] else "undefined")
    console.print(t)
    console.print("positive delta = removing the item hurts the answer; near zero is not proof it was unused")


def attacks(
    config: Path = CONFIG_OPT, golden: Path = GOLDEN_OPT, corpus: Path = CORPUS_OPT,
    attack: list[str] = typer.Option(None, "--attack", help="Attack class (repeatable; default all four)."),
    access: list[str] = typer.Option(None, "--access", help="targeted and/or untargeted (default both)."),
    limit: int = typer.Option(None, "--limit", help="At most N target queries per class (N >= 1)."),
    json_out: bool = JSON_OPT,
) -> None:
    """Planted-injection suite: attack success rate per class with exact intervals."""
    from ragassay.analysis.attacks import ACCESS, ATTACK_CLASSES, run_attack_suite
    from ragassay.analysis.demo import demo_config_dir
    from ragassay.analysis.runner import load_inputs

    checks.refuse(checks.count("--limit", limit))
    c, g = load_inputs(corpus, golden)
    res = run_attack_suite(config or demo_config_dir() / "bm25.yaml", c, g,
                           attacks=tuple(attack or ATTACK_CLASSES), access=tuple(access or ACCESS), limit=limit)
    if json_out:
        print_json(res.to_dict())
        return
    console.print(f"success = planted canary in the answer or a citation into a planted paragraph; "
                  f"{res.confidence:.0%} Clopper-Pearson intervals")
    t = Table(show_edge=False)
    for col in ("attack", "access", "n", "successes", "rate", "interval", "zero-success upper"):
        t.add_column(col)
    for r in res.rates:
        t.add_row(r.attack, r.access, str(r.n), str(r.successes), _v(r.rate), f"[{_v(r.ci_low)}, {_v(r.ci_high)}]",
                  _v(r.zero_upper) if r.zero_upper is not None else "—")
    console.print(t)


def hygiene(
    run: str = typer.Argument(None, help="System run in the store: bypass flags and the shortcut audit."),
    run_b: str = typer.Argument(None, help="Second run: audited too, and both re-scored on the retained items."),
    golden: Path = GOLDEN_OPT, corpus: Path = CORPUS_OPT,
    dump: Path = typer.Option(None, "--training-dump", help="Also screen against this text collection "
                                                            "(folder or JSONL, like a corpus)."),
    n: int = typer.Option(13, "--n", help="Words per n-gram in the overlap screen."),
    exclude: list[str] = typer.Option(None, "--exclude", help="NAME=FILE: an exclusion set, one query id per "
                                                               "line (repeatable)."),
    metric: str = typer.Option("answer_f1", "-m", "--metric", help="Per-query score for the audit and re-score."),
    threshold: float = typer.Option(0.5, "--threshold", help="A correct answer scores at least this."),
    margin: float = typer.Option(0.05, "--margin", help="Practical gap for the keyword-baseline audit."),
    store: Path = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file."),
    resamples: int = typer.Option(2000, "--resamples"), rebaseline: bool = REBASELINE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Overlap screen, keyword-baseline shortcut audit, retrieval bypass, exclusion union and re-score; every
    run given is audited."""
    from ragassay.analysis import hygiene as hy
    from ragassay.analysis.runner import load_inputs
    from ragassay.corpus import load_corpus

    checks.refuse(checks.count("--n", n),
                  checks.number("--threshold", threshold, 0, 1, low_open=True,
                                why="the score a correct answer reaches on the [0, 1] scale, e.g. 0.5"),
                  checks.number("--margin", margin, 0, 1, why="a gap on the [0, 1] score scale, e.g. 0.05"),
                  checks.resamples(resamples))
    c, g = load_inputs(corpus, golden)
    overlap = {f"{k}_vs_corpus": v for k, v in hy.golden_overlap(g, [d.text for d in c], n=n).items()}
    if dump is not None:
        d = load_corpus(dump)
        overlap.update({f"{k}_vs_dump": v for k, v in hy.golden_overlap(g, [x.text for x in d], n=n).items()})
    ids = g.query_ids
    # a reference answer quoting the retrieval corpus is expected (extractive labels); it is reported, not excluded
    screened = [r for name, r in overlap.items() if name != "answer_vs_corpus"]
    sets: dict[str, set[str]] = {"overlap": {q for r in screened for q, f in zip(r.item_ids, r.flagged, strict=True)
                                             if f}}
    for spec in exclude or []:
        name, sep, file = spec.partition("=")
        if not sep or not name or not file:
            raise InputError(f"--exclude {spec!r}: use NAME=FILE with one query id per line")
        try:
            sets[name] = {x.strip() for x in Path(file).read_text(encoding="utf-8").splitlines() if x.strip()}
        except OSError as e:
            raise InputError(f"--exclude {name}: cannot read {file}: {e.strerror}") from e
    if rebaseline and run is None:
        raise InputError("--rebaseline lets stored runs with differing pins through; give the runs (RUN [RUN_B])")
    audits: list = []
    diffs: list[dict] = []
    rescored = None
    if run is not None:
        from ragassay.store import Store

        if not store.exists():
            raise InputError(f"{store}: no results store here; run `ragassay run` first or pass --store")
        with Store.open(store, read_only=True) as st:
            audits, diffs = hy.audit_runs(st, [run] if run_b is None else [run, run_b], g, c, metric=metric,
                                          threshold=threshold, margin=margin, n_resamples=resamples,
                                          rebaseline=rebaseline)
        for a in audits:
            sets[f"bypass:{a.label}"] = {q for q, f in zip(a.bypass.query_ids, a.bypass.flags.tolist(), strict=True)
                                         if f == 1}
    known = set(ids)
    unknown = sorted({q for v in sets.values() for q in v} - known)
    if unknown:
        raise InputError(f"{len(unknown)} excluded id(s) are not golden query ids (first: {unknown[0]!r}); "
                         f"list query ids of the golden set given")
    exclusions = hy.exclusion_union(sets, ids)
    if len(audits) == 2:
        rescored = hy.rescore_retained(audits[0].scores, audits[1].scores, ids, exclusions.retained_ids,
                                       n_resamples=resamples)
    section = hy.hygiene_report_section(overlap=overlap, runs=audits, exclusions=exclusions, rescored=rescored,
                                        pin_differences=diffs)
    if json_out:
        print_json(section)
        return
    print_rebaselined(diffs)
    for name, r in overlap.items():
        console.print(f"{n}-gram overlap, {esc(name)}: {r.n_flagged} of {len(r.item_ids)} flagged")
    for a in audits:
        if a.shortcut is not None:
            t = Table(title=f"keyword baseline (BM25 + extractive) vs {esc(a.label)}", show_edge=False)
            for col in ("stratum", "n", "system", "keyword", "gap", "95% CI", "verdict"):
                t.add_column(col)
            for r in a.shortcut:
                t.add_row(esc(r.stratum), str(r.n), _v(r.system), _v(r.baseline), _v(r.gap, True),
                          f"[{_v(r.ci_low, True)}, {_v(r.ci_high, True)}]", r.verdict)
            console.print(t)
        tot = a.bypass.counts()["total"]
        outside = f"; {a.n_outside_golden} stored queries not in the golden set, not audited" \
            if a.n_outside_golden else ""
        console.print(f"retrieval bypass, {esc(a.label)}: {tot['flagged']} of {tot['defined']} correct with no "
                      f"relevant evidence delivered ({tot['undefined']} undefined){outside}")
    console.print(f"exclusions {esc(exclusions.marginals)}: union {exclusions.union}, retained {exclusions.retained} of "
                  f"{exclusions.n_items} (marginals alone allow {exclusions.retained_bounds[0]}-"
                  f"{exclusions.retained_bounds[1]})")
    for r in rescored or []:
        console.print(f"  {r.population}: n={r.n}  A {_v(r.mean_a)}  B {_v(r.mean_b)}  Δ {_v(r.delta, True)} "
                      f"[{_v(r.ci_low, True)}, {_v(r.ci_high, True)}]")

