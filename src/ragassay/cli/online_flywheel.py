"""``ragassay online judge`` (a validated judge on a stratified sample of production traffic), ``online gap``
(the offline–online gap per release and its calibration) and ``online promote`` (production failures into a
labelling queue). :func:`register` adds them to the ``online`` group; their modules load only when one runs.
"""

from __future__ import annotations

import math
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from ragassay.cli.common import console, print_json, progress

STORE_OPT = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file; production records live "
                                                                  "beside it in <store>.online/.")
FROM_OPT = typer.Option(None, "--from", help="First day (YYYY-MM-DD, UTC) of the records to use.")
TO_OPT = typer.Option(None, "--to", help="Last day (YYYY-MM-DD, UTC) of the records to use.")


def _num(x, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "undefined"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def _ci(lo, hi, signed: bool = False) -> str:
    return "—" if lo is None or hi is None else f"[{_num(lo, signed)}, {_num(hi, signed)}]"


def judge_cmd(
    store: Path = STORE_OPT,
    judge_config: Path = typer.Option(..., "--judge", help="Judge config YAML; the judge must be validated (ragassay "
                                                           "judge validate) for each metric it scores."),
    sample: str = typer.Option("2%", "--sample", help="Share of requests sampled in each day x stratum cell "
                                                      "(2% or 0.02)."),
    oversample: str = typer.Option(None, "--oversample", help="failures=FACTOR: requests with a failure signal "
                                   "(thumbs-down, rephrased, escalated, empty retrieval) are sampled at rate x "
                                   "FACTOR; the weights undo it."),
    max_spend: float = typer.Option(None, "--max-spend", help="USD this run may spend on judge calls (with the "
                                    "config's spend_cap, the lower one holds); it stops before passing it."),
    date_from: str = FROM_OPT,
    date_to: str = TO_OPT,
    seed: int = typer.Option(0, "--seed", help="Seed of the draw: the same seed draws the same requests."),
    confidence: float = typer.Option(0.95, "--confidence"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Judge a stratified sample of production traffic with a validated judge and print quality per day and
    stratum: the weighted (Hájek) estimate with its interval, n judged, and the unweighted mean beside it.
    Verdicts are stored; a re-run judges only what is not judged yet."""
    from ragassay.cli import checks
    from ragassay.judges.config import load_judge_config
    from ragassay.online.judge import date_window, parse_oversample, parse_rate, run_online_judge

    checks.refuse(checks.seed(seed), checks.number("--confidence", confidence, 0, 1, low_open=True, high_open=True),
                  checks.number("--max-spend", max_spend, 0))
    rate, factor = parse_rate(sample), parse_oversample(oversample)
    lo, hi = date_window(date_from, date_to)
    cfg = load_judge_config(judge_config)
    with progress(enabled=not json_out) as bar:
        task = bar.add_task("judging sampled requests", total=None)
        out = run_online_judge(store, cfg, str(judge_config), rate=rate, factor=factor, seed=seed, date_from=lo,
                               date_to=hi, max_spend=max_spend, confidence=confidence,
                               progress=lambda done, total: bar.update(task, completed=done, total=total))
    if json_out:
        print_json(out)
        return
    c, s = out["counts"], out["spend"]
    console.print(Text(f"judge {out['judge']['judge_model']} on {c['records']} production requests: sampled "
                       f"{c['sampled']} ({c['sampled_failures']} with a failure signal) in {c['cells']} cells at "
                       f"{rate:.2%}" + (f", failures x{factor:g}" if factor != 1 else "")))
    spent = "" if out["judge"]["judge_model"].startswith("local:") else (
        f"; spent ${s['usd']:.4f}" + (f" of ${s['cap']:.4f}" if s["cap"] is not None else "")
        + f" in {s['paid_calls']} paid call(s)" + (f"; stopped: {s['stopped']}" if s["stopped"] else ""))
    console.print(Text(f"judged now {c['judged_now']}, already judged {c['already_judged']}, skipped {c['skipped']}"
                       f", errors {c['errors']}{spent}"))
    table = Table("metric", "day", "stratum", "weighted", "interval", "n judged", "sampled", "unweighted",
                  "covered")
    for r in out["quality"]:
        table.add_row(Text(r["metric"]), Text(r["day"]), Text(r["stratum"]), _num(r["value"]),
                      _ci(r["ci_low"], r["ci_high"]), str(r["n_defined"]), str(r["n_sampled"]),
                      _num(r["unweighted"]), "undefined" if r["covered"] is None else f"{r['covered']:.0%}")
    console.print(table)
    console.print(Text("weighted: Hájek mean with weights N/n per day x stratum x failure cell; interval: "
                       f"linearized variance, {confidence:.0%}; unweighted: the plain mean of the same verdicts "
                       "(biased toward failures when they are oversampled)"))
    if c["skipped"] or c["errors"]:
        console.print(Text(f"run it again to judge the {c['skipped'] + c['errors']} request(s) left (paid calls come "
                           "from the store, not the provider)"))


def gap_cmd(
    store: Path = STORE_OPT,
    release: str = typer.Option(..., "--release", help="The release whose gap to record."),
    metric: str = typer.Option(..., "--metric", help="The offline metric (e.g. answer_f1, ndcg@10)."),
    offline_delta: float = typer.Option(None, "--offline-delta", help="The offline predicted delta, given."),
    offline: tuple[str, str] | None = typer.Option(None, "--offline", help="Two stored runs, baseline then "
                                                   "candidate (--offline A B); their paired delta on --metric is "
                                                   "the prediction."),
    online: str = typer.Option("signal:thumbs_down", "--online", help="The online measure: judge:METRIC "
                               "(judge-on-sample quality; needs --judge) or signal:NAME (a signal's rate)."),
    judge_config: Path = typer.Option(None, "--judge", help="Judge config whose stored verdicts judge:METRIC reads."),
    previous: str = typer.Option(None, "--previous", help="The release compared against (default: the one before "
                                                          "it by first record)."),
    svg: Path = typer.Option(None, "--svg", help="Also write the calibration scatter as an SVG file."),
    resamples: int = typer.Option(10_000, "--resamples", help="Bootstrap resamples for --offline."),
    seed: int = typer.Option(0, "--seed"),
    confidence: float = typer.Option(0.95, "--confidence"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Record one release's offline predicted delta and online observed delta in <store>.online/gap.jsonl
    (again for the same release and metric replaces the row), print the table and the calibration of online on
    offline deltas over releases (undefined under 3)."""
    from ragassay.cli import checks
    from ragassay.online.gap import measure_gap

    checks.refuse(checks.seed(seed), checks.resamples(resamples),
                  checks.number("--confidence", confidence, 0, 1, low_open=True, high_open=True))
    key = None
    if judge_config is not None:
        from ragassay.judges.config import load_judge_config
        from ragassay.online.judge import judge_key

        key = judge_key(load_judge_config(judge_config).pins())
    if svg is not None:
        from ragassay.fsio import atomic_write_text, check_output_file
        from ragassay.report.online import SVG_KIND, calibration_svg, is_calibration_svg

        # refused before the row is recorded: a refused command changes nothing
        check_output_file(svg, SVG_KIND, overwrite_ok=is_calibration_svg)
    out = measure_gap(store, release, metric, online, offline_delta=offline_delta,
                      offline_runs=list(offline) if offline else None,
                      previous=previous, judge_key=key, seed=seed, confidence=confidence, n_resamples=resamples)
    if svg is not None:
        atomic_write_text(svg, str(calibration_svg(out["rows"], out["calibration"])))
        out["svg"] = str(svg)
    if json_out:
        print_json(out)
        return
    row = out["row"]
    console.print(Text(f"recorded release {release} (vs {row['previous']}) in {out['file']}"))
    table = Table("release", "previous", "offline Δ " + metric, "interval", "online Δ " + online, "interval")
    for r in out["rows"]:
        table.add_row(Text(r["release"]), Text(r["previous"]), _num(r["offline"]["delta"], True),
                      _ci(r["offline"]["ci_low"], r["offline"]["ci_high"], True), _num(r["online"]["delta"], True),
                      _ci(r["online"]["ci_low"], r["online"]["ci_high"], True))
    console.print(table)
    cal = out["calibration"]
    if cal.get("undefined"):
        console.print(Text(f"calibration: undefined ({cal['undefined']})"))
    else:
        console.print(Text(f"calibration over {cal['n']} releases (online Δ = intercept + slope x offline Δ): slope "
                           f"{cal['slope']:.4f}, intercept {cal['intercept']:+.4f}, r {_num(cal['r'])}"))
    if svg is not None:
        console.print(Text(f"wrote the calibration scatter to {svg}"))


def promote_cmd(
    store: Path = STORE_OPT,
    out: Path = typer.Option(..., "--out", help="Queue folder to write (new, empty, or an earlier promote queue)."),
    per_stratum: int = typer.Option(20, "--per-stratum", help="At most this many requests per stratum."),
    signals: str = typer.Option(None, "--signals", help="Comma-separated signals that select a request (default: "
                                "thumbs_down,rephrased,escalated,empty_retrieval; also abandoned, refusal, error)."),
    corpus: Path = typer.Option(None, "--corpus", help="The corpus the retrieved unit ids point into (DOC:START-END);"
                                                       " without it every item is question-only."),
    cohort: str = typer.Option(None, "--cohort", help="Cohort tag (default production-YYYY-MM of the latest day)."),
    date_from: str = FROM_OPT,
    date_to: str = TO_OPT,
    seed: int = typer.Option(0, "--seed"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Turn production requests with failure signals into a labelling queue in the `golden pool` format
    (queue.jsonl, pool.json, label.html) plus queries.jsonl authoring stubs tagged source, date, signal and
    cohort."""
    from ragassay.cli import checks
    from ragassay.online.judge import date_window
    from ragassay.online.promote import parse_signals, promote

    checks.refuse(checks.count("--per-stratum", per_stratum, 1), checks.seed(seed))
    names = parse_signals(signals)
    lo, hi = date_window(date_from, date_to)
    texts = digest = None
    if corpus is not None:
        from ragassay.corpus import load_corpus

        corp = load_corpus(corpus)
        texts = {d.doc_id: d.text for d in corp}
        digest = corp.digest
    meta = promote(store, out, per_stratum=per_stratum, signals=names, date_from=lo, date_to=hi, texts=texts,
                   corpus_digest=digest, cohort=cohort, seed=seed)
    if json_out:
        print_json(meta)
        return
    c = meta["counts"]
    console.print(Text(f"promoted {c['requests']} production request(s) with {', '.join(names)} into {out}: "
                       f"{c['items']} item(s) ({c['unit_items']} passages, {c['question_only']} question-only), "
                       f"cohort {meta['cohort']}"))
    for s, v in meta["per_stratum"].items():
        console.print(Text(f"  {s}: {v['promoted']} of {v['candidates']} candidates"
                           + (f" ({v['repeats']} repeating a question already taken)" if v["repeats"] else "")))
    if c["unresolved_units"]:
        console.print(Text(f"{c['unresolved_units']} retrieved unit id(s) did not resolve in the corpus"
                           + ("" if corpus is not None else " (no --corpus given)")))
    console.print(Text(f"label them on {out / 'label.html'}; the authoring stubs are in {out / 'queries.jsonl'}; "
                       f"{meta['measure_separately']}"))
    if not c["requests"]:
        console.print(Text("no request carries the chosen signals in this window"))


def register(online_app: typer.Typer) -> None:
    """Add ``judge``, ``gap`` and ``promote`` to the ``online`` group (once, however often it is called)."""
    have = {c.name for c in online_app.registered_commands}
    for name, fn in (("judge", judge_cmd), ("gap", gap_cmd), ("promote", promote_cmd)):
        if name not in have:
            online_app.command(name)(fn)


__all__ = ["register"]
