"""`ragassay demo`: the embedded default on the bundled license corpus."""

from __future__ import annotations

import math
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from ragassay.analysis.compare import synthetic_note
from ragassay.analysis.summary import STAGES, stage_of
from ragassay.cli.common import console, esc, print_json
from ragassay.cli.compare import print_gate
from ragassay.cli.golden import print_manifest_summary
from ragassay.judges.validate import METRIC_KIND

DEMO_STAGE_METRICS = ("recall@bm25_depth", "recall@dense_depth", "recall@fusion_depth", "recall@final_k",
                      "ndcg@final_k", "rr@final_k", "recall@5", "ndcg@5", "recall@context", "context_tokens",
                      "answer_f1", "abstention_recall", "over_refusal", "citation_validity", "rerank_rescued",
                      "rerank_broke", "faithfulness")
STRATA_METRICS = ("recall@5", "answer_f1")


def _f(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3f}"


def _stage_of(metric: str) -> str:
    # a judge metric is judged from the answer, so it sits after generation whatever its name says
    return "judge" if metric in METRIC_KIND else stage_of(metric)


def _stage_table(summaries: dict[str, dict]) -> Table:
    t = Table(title="per stage (mean over queries; — = not measured by that configuration; a judge metric "
                    "shows its judge's validation status)", show_edge=False)
    t.add_column("stage")
    t.add_column("metric")
    for name in summaries:
        t.add_column(name, justify="right")
    means = {name: {m["metric"]: m for m in s["metrics"]} for name, s in summaries.items()}
    rows = [m for m in DEMO_STAGE_METRICS if any(m in v for v in means.values())]
    rows.sort(key=lambda m: (*STAGES, "judge").index(_stage_of(m)))
    for m in rows:
        cells = []
        for name in summaries:
            c = means[name].get(m)
            cells.append(_cell(c, m) if c else "—")
        t.add_row(*(Text(x) for x in (_stage_of(m), m, *cells)))
    return t


def _cell(c: dict, metric: str) -> str:
    text = _f(c["mean"])
    if c["n_undefined"] and metric in ("recall@fusion_depth", "answer_f1"):
        text += f" ({c['n_undefined']} undef.)"
    if metric in METRIC_KIND:
        # a judge's number is never shown without whether that judge met the floor
        text += f" ({c.get('judge_status', 'unvalidated')})"
    return text


def _strata_table(summaries: dict[str, dict]) -> Table:
    t = Table(title="per stratum", show_edge=False)
    t.add_column("stratum")
    cols = [(name, m) for m in STRATA_METRICS for name in summaries
            if any(p["metric"] == m for p in summaries[name]["per_stratum"])]
    for name, m in cols:
        t.add_column(f"{m}\n{name}", justify="right")
    strata = sorted({s for v in summaries.values() for s in v["strata"]})
    cell = {(name, p["metric"], p["stratum"]): p for name, v in summaries.items() for p in v["per_stratum"]}
    for s in strata:
        t.add_row(Text(s), *[Text(_f(cell[(n, m, s)]["mean"]) if (n, m, s) in cell else "—") for n, m in cols])
    return t


def _verdict_counts(comp) -> str:
    overall = [r for r in comp.rows if r.stratum == "all"]
    better = sum(r.verdict.startswith("improved") for r in overall)
    worse = sum(r.verdict.startswith("regressed") for r in overall)
    neither = len(overall) - better - worse
    return f"credibly better on {better}, credibly worse on {worse}, neither on {neither} of {len(overall)} metrics"


def _claim_rows(comp, limit: int = 3) -> list:
    """The headline rows with a credible change, largest first, then the judge metrics' rows credible or not:
    the demo shows faithfulness in every comparison, its claim ending with the judge's validation status."""
    rows = [r for r in comp.rows if r.stratum == "all" and r.metric in DEMO_STAGE_METRICS
            and r.metric != "context_tokens" and r.verdict.split(",")[0] in ("improved", "regressed")]
    rows.sort(key=lambda r: -abs(r.delta))
    top = rows[:limit]
    return top + [r for r in comp.rows if r.stratum == "all" and r.defined and r.metric in METRIC_KIND
                  and r.metric in DEMO_STAGE_METRICS and r not in top]


def _est(s: dict, signed: bool = True) -> str:
    """An estimate with its interval; undefined (an empty hit or miss cell) is said, never printed as 0."""
    if not s.get("defined"):
        return "undefined"
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(s['value'])} [{f.format(s['ci_low'])}, {f.format(s['ci_high'])}]"


def _decomposition_table(dec: dict, ladder: dict) -> Table:
    t = Table(title=f"evidence delivery and use: A = h·c1 + (1−h)·c0; h = share delivered "
                    f"({dec['runs'][0]['delivery_rule']}), c1/c0 = share correct ({dec['runs'][0]['correct_rule']}) "
                    f"when delivered / not; {dec['n_resamples']:,} resamples"
              if dec["runs"] else "evidence delivery and use", show_edge=False)
    for c in ("configuration", "n", "A", "h", "c1", "c0"):
        t.add_column(c, justify="left" if c == "configuration" else "right")
    oracle = {r["name"] for r in ladder.get("rungs", []) if r["oracle"]}
    for r in dec["runs"]:
        row = next(x for x in r["rows"] if x["stratum"] == "all")
        name = r["run"]["name"] + (" (oracle)" if r["run"]["name"] in oracle else "")
        t.add_row(*(Text(x) for x in (name, str(row["n"]), *(_est(row[k], False) for k in ("A", "h", "c1", "c0")))))
    return t


def _attribution_table(att: dict) -> Table:
    t = Table(title=f"leave-one-out on {len(att['top_queries'])} queries: {att['metric']} lost when the item is "
                    f"removed (items that are not relevant and change nothing are left out here; all are in the "
                    f"report)", show_edge=False)
    for c in ("query", "full", "item", "relevant", "Δ"):
        t.add_column(c, justify="right" if c in ("full", "Δ") else "left")
    for q in att["top_queries"]:
        shown = [it for it in q["items"] if it["relevant"] or it["loo_delta"] is None or round(it["loo_delta"], 3)]
        for i, it in enumerate(shown):
            rel = "—" if it["relevant"] is None else ("yes" if it["relevant"] else "no")
            delta = "undefined" if it["loo_delta"] is None else f"{it['loo_delta'] + 0.0:+.3f}"
            t.add_row(*(Text(x) for x in (q["query_id"] if i == 0 else "", _f(q["baseline"]) if i == 0 else "",
                                          f"{it['doc_id']} [{it['start']}:{it['end']}]", rel, delta)))
    return t


_LABELS = {"support": "the bundled calibration set", "citation": "the bundled citation example"}


def _judge_block(v: dict) -> list[Text]:
    """The judge-validation lines of one kind: what was validated on what, kappa and per-class recall with
    their CIs, and the floor verdict that decides how the metrics it speaks for are shown."""
    left = ", ".join(f"{k} {n}" for k, n in v["excluded"].items())
    passes = v["passes_kappa"]
    kind = v.get("kind", "support")
    lines = [
        Text(f"{kind}: judge {v['judge_model']} validated on {_LABELS.get(kind, v.get('label_set'))} (version "
             f"{v['label_set_version'][:12]}, labelled by: {v.get('labelled_by') or 'unstated'}): {v['n']} of "
             f"{v['n_items']} items compared" + (f" ({left} left out)" if left else "")
             + f", {v['scale']} scale, {v['n_resamples']:,} resamples"
             + (f"; its two blind annotation passes (automated annotators, not people; see "
                f"data/judge_calibration/README.md) agree at kappa {passes:.3f}" if passes is not None else "")),
        Text(f"  kappa {_est(v['kappa'], False)}, agreement {_est(v['agreement'], False)}; recall "
             + ", ".join(f"{c} {_est(r, False)}" for c, r in v["recall"].items())),
    ]
    fl = v["floor"]
    floor = (f"at the lower end of each interval kappa ≥ {fl['min_kappa']:g} and every class recall ≥ "
             f"{fl['min_class_recall']:g}, over ≥ {fl['min_items']} items and {fl['min_per_class']} per class, "
             "on labels given by people")
    speaks = ", ".join(v.get("metrics") or ())
    if v["meets_floor"]:
        lines.append(Text(f"  meets the gate floor ({floor}): {v['floor_detail']}; {speaks} shown as validated"))
    else:
        lines.append(Text(f"  does NOT meet the gate floor ({floor}): {v['floor_detail']}; {speaks} shown as "
                          "unvalidated: they cannot pass or fail a gate"))
    return lines


def _share(s: dict) -> str:
    if not s.get("defined") or s.get("value") is None:
        return "undefined"
    return f"{s['value']:.0%} [{s['ci_low']:.0%}, {s['ci_high']:.0%}]"


def _cascade_line(c: dict) -> Text:
    """The cascade's measured saving: agreement of each tier and of the cascade, the share escalated, and the
    time saved against tier 2 on every item (the tiers are local: neither costs money)."""
    if c.get("undefined"):
        return Text(f"cascade {c['tier1']} → {c['tier2']}: undefined ({c['undefined']})")
    t, lat = c["tiers"], c["latency"]
    saved = (f"time saved {_share(lat['saved'])} against {c['tier2']} on every item "
             f"({lat['cascade_ms']:.0f} vs {lat['tier2_alone_ms']:.0f} ms)" if "saved" in lat
             else f"time saved undefined ({lat.get('undefined')})")
    return Text(f"cascade {c['tier1']} → {c['tier2']} on the calibration set's report split (n {c['n_report']}): "
                f"kappa {_est(t['cascade']['kappa'], False)} vs tier 1 {_est(t['tier1']['kappa'], False)}, tier 2 "
                f"{_est(t['tier2']['kappa'], False)}; escalated {_share(c['escalated'])}; {saved}")


def sources_line(manifest: dict) -> Text:
    """Where the golden items came from: each source's count and share of n, and for a set with synthetic
    items the note ``compare`` prints (a purely synthetic set: read the deltas, not the absolute means)."""
    mix = dict(manifest.get("source_mix") or {})
    n = sum(mix.values())
    parts = [f"{src} {k} ({k / n:.0%})" for src, k in (("human", mix.get("human", 0)),
                                                         ("synthetic", mix.get("synthetic", 0)))]
    parts += [f"{src} {k} ({k / n:.0%})" for src, k in mix.items() if src not in ("human", "synthetic")]
    note = synthetic_note({"a": mix})
    return Text(f"golden sources: {', '.join(parts)} of {n} items" + (f"; {note}" if note else "") if n
                else "golden sources: no items")


def saturation_line(status: dict) -> Text:
    """`golden status` in one line: how many strata are saturated on its metric over the configurations run,
    which are undefined (a stratum with no defined value, or a configuration with < 2), and where the most
    headroom is left; runs left out are counted."""
    metric = status["metrics"][0]
    rows = [(s["stratum"], s["metrics"][metric]) for s in status["strata"]]
    saturated = [name for name, f in rows if f["saturated"]]
    undefined = [name for name, f in rows if f["saturated"] is None]
    left = sum(v for k, v in status["excluded"].items() if k.startswith("n_"))
    text = (f"saturation (golden status, {metric} over {len(status['configs'])} configurations"
            + (f", {left} run(s) left out" if left else "") + f"): {len(saturated)} of {len(rows)} strata "
            "saturated" + (f" ({', '.join(saturated)})" if saturated else "")
            + (f", {len(undefined)} undefined ({', '.join(undefined)})" if undefined else ""))
    room = [(f["headroom_best"], name, f) for name, f in rows if f["headroom_best"] is not None]
    if room:
        h, name, f = max(room)
        text += f"; most headroom: {name} {h:.3f} (best {f['best_run']} {f['best']:.3f})"
    return Text(text)


def demo_json(res) -> dict:
    """What `demo --json` prints: every figure of the demo, the judge's validation summary and the validation
    status of each run's judge metrics (a judge metric's mean in ``summaries`` carries ``judge_status``)."""
    return {"out": str(res.out), "run_ids": res.run_ids, "summaries": res.summaries,
            "comparisons": [c.to_dict() for c in res.comparisons], "gate": res.gate.to_dict(),
            "oracle_ladder": res.ladder, "decomposition": res.decomposition,
            "attribution": res.attribution, "report": str(res.report) if res.report else None,
            "judge_validation": {"validation": res.judge_validation["summary"],
                                 "kinds": res.judge_validation["kinds"],
                                 "cascade": res.judge_validation["cascade"],
                                 "statuses": res.judge_validation["statuses"]},
            "golden_status": res.golden_status, "timings_s": res.timings}


def demo(
    out: Path = typer.Option(Path("ragassay-demo"), "-o", "--out", help="Where to write the demo's outputs."),
    resamples: int = typer.Option(10_000, "--resamples", min=100, help="Bootstrap resamples per comparison."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Build the bundled golden set, run four configurations (BM25, hybrid, hybrid + reranker, oracle
    context), validate the local lexical judge on the bundled calibration set and judge every run's answers
    with it (faithfulness shown with its validation status), compare with the baseline, gate, and write the
    store, the traces and an HTML report."""
    from ragassay.analysis.demo import DEMO_CONFIGS, claim_demo_dir, run_demo
    from ragassay.report import render_report

    claim_demo_dir(out)  # before any work: a refused -o costs nothing
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), transient=True,
                  disable=json_out, console=console) as bar:
        tasks = {c: bar.add_task(esc(c), total=None) for c in DEMO_CONFIGS}

        def tick(name: str, done: int, total: int) -> None:
            bar.update(tasks[name], completed=done, total=total)

        res = run_demo(out, n_resamples=resamples, report=render_report, progress=tick)
    if json_out:
        print_json(demo_json(res))
        return
    corpus = res.corpus
    console.print(f"[bold]ragassay demo[/]: {len(corpus)} license documents ({corpus.n_chars:,} characters), "
                  f"four configurations")
    print_manifest_summary(res.golden.manifest)
    console.print(sources_line(res.golden.manifest))
    console.print(saturation_line(res.golden_status))
    console.print("\n[bold]judge validation[/] (docs/judge-validation.md):")
    for summary in res.judge_validation["kinds"].values():
        for line in _judge_block(summary):
            console.print(line)
    console.print(_cascade_line(res.judge_validation["cascade"]))
    console.print(_stage_table(res.summaries))
    console.print(_strata_table(res.summaries))
    for comp in res.comparisons:
        a, b = esc(comp.run_a.name), esc(comp.run_b.name)
        console.print(f"\n[bold]{b} vs {a}[/]: {_verdict_counts(comp)} (all claims: ragassay compare {a} {b} "
                      f"--store {esc(res.out / 'ragassay.duckdb')})")
        for row in _claim_rows(comp):
            console.print("• " + comp.claim(row), markup=False)
    console.print(_decomposition_table(res.decomposition, res.ladder))
    for ch in res.decomposition["changes"]:
        row = next(r for r in ch["rows"] if r["stratum"] == "all")["change"]
        console.print(Text(f"{ch['run_b']['name']} vs {ch['run_a']['name']}: ΔA {_est(row['delta_A'])} = delivery "
                           f"{_est(row['delivery'])} + use {_est(row['use'])}"))
    console.print("\n[bold]oracle ladder[/] (docs/analyses.md#ladder): ", end="")
    console.print(res.ladder["diagnosis"], markup=False)
    if res.attribution:
        console.print(_attribution_table(res.attribution))
    console.print()
    print_gate(res.gate)
    console.print(f"\nstore {esc(res.out / 'ragassay.duckdb')}; traces {esc(res.out / 'traces')}")
    if res.report:
        console.print(f"report [bold]{esc(res.report)}[/]")
    console.print(f"[dim]done in {res.timings['total']:.1f} s[/]")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
