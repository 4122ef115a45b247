"""`ragassay judge`: score a stored run's answers with a judge (`judge score`, also `judge RUN`), validate a
judge against human labels (`judge validate`), and measure a judge change on archived answers
(`judge rebaseline`); judge a run claim by claim (`judge claims`, docs/claims.md) and validate the claims
judge (`judge validate-claims`)."""

from __future__ import annotations

import math
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from ragassay.cli import checks
from ragassay.cli.common import console, esc, print_json, progress
from ragassay.errors import InputError

STORE_OPT = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file.")


class _ScoreByDefault(TyperGroup):
    """`ragassay judge RUN ...` keeps meaning `ragassay judge score RUN ...`: anything that is not a
    subcommand (or the group's own --help) goes to `score`."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["score", *args]
        return super().parse_args(ctx, args)


judge_app = typer.Typer(cls=_ScoreByDefault, no_args_is_help=True,
                        help="Judge a stored run's answers (score, the default), validate a judge against human "
                             "labels, or measure a judge change on archived answers (rebaseline).")


def _run_traces(st, run: str, traces: Path | None):
    """(run record, trace path, header, traces, problems) of a stored run: ``--traces`` or where the run keeps
    them (:meth:`RunRecord.traces_path`)."""
    from ragassay.trace.io import read_traces

    rec = st.get_run(run)
    path = _traces_path(rec, traces)
    if not path.is_file():
        raise InputError(f"{path}: the traces of run {rec.name} are not there; pass them with --traces")
    return (rec, path, *read_traces(path))

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
    executor: str = typer.Option("local", "--executor", help="Where an LLM judge's calls are made: local "
                                 "(default), ray (RAY_ADDRESS, else this machine's `ray start` cluster, else a new "
                                 "local one) or ray:ADDRESS; on Ray the config's "
                                 "concurrency and spend_cap hold for the whole cluster, and the stored rows "
                                 "are the local ones."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Judge a stored run's answers (faithfulness, relevance, correctness, citations, nuggets), store the
    judge metrics with the judge's pins, and print the cost line."""
    from ragassay.executors import check_executor
    from ragassay.judges.config import load_judge_config

    executor = check_executor(executor)
    cfg = load_judge_config(judge_config)  # a bad config is refused before anything else is read
    if not store.is_file():
        raise InputError(f"{store}: no such store; run or score the run first (or pass --store)")
    from ragassay.analysis.judging import executor_client
    from ragassay.analysis.runner import load_inputs
    from ragassay.judges.score import judge_stored_run
    from ragassay.store import Store

    with Store.open(store) as st, progress(enabled=not json_out) as bar:
        rec, path, header, recs, problems = _run_traces(st, run, traces)
        corp, gs = load_inputs(corpus, golden)
        tick = counting(bar, f"judging {len(recs)} answers of run {rec.name} with {cfg.pins()['judge_model']}")
        summary = judge_stored_run(st, rec.run_id, recs, gs, corp, cfg, resume=resume,
                                   open_client=executor_client(executor), header=header, traces_label=str(path),
                                   progress=tick)
    out = summary.to_dict()
    out["trace_problems"] = len(problems)
    if json_out:
        print_json(out)
        return
    if problems:
        console.print(f"warning: {len(problems)} malformed trace record(s) in {esc(path)} were skipped")
    print_judge_summary(summary)


def counting(bar, label: str):
    """A task on ``bar`` titled ``label`` and the ``progress(done, total)`` callback a judging loop calls: the
    bar fills and the title ends in the count (``judging 6 answers ... 3/6``). Until the first call it pulses."""
    task = bar.add_task(esc(label), total=None)

    def tick(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total, description=f"{esc(label)} {done}/{total}")

    return tick


def print_judge_summary(summary) -> None:
    """The judged metrics with defined/undefined counts, undefined reasons, call outcomes and the cost line."""
    out = summary.to_dict()
    console.print(Text(f"judged run {summary.run_name} ({summary.run_id}) with {summary.pins['judge_model']}: "
                       f"{summary.items} answers"))
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


judge_app.command("score")(judge)
from ragassay.cli.judge_pairwise import _traces_path, pairwise  # noqa: E402  (light: its heavy imports run with it)

judge_app.command("pairwise")(pairwise)

from ragassay.cli.judge_ppi import ppi  # noqa: E402  (light: its heavy imports run with it)

judge_app.command("ppi")(ppi)


def _fmt(s: dict | None, signed: bool = False) -> str:
    if not s or not s.get("defined") or s.get("value") is None:
        return "undefined"
    f = "{:+.3f}" if signed else "{:.3f}"
    lo = "—" if s["ci_low"] is None else f.format(s["ci_low"])
    hi = "—" if s["ci_high"] is None else f.format(s["ci_high"])
    return f"{f.format(s['value'])} [{lo}, {hi}]"


def _labels_path(given: Path | None, kind: str) -> Path:
    if given is not None:
        return given
    from ragassay.judges.labels import default_labels

    found = default_labels(kind)
    if found is None:
        raise InputError(f"no --labels given and this ragassay ships no bundled labels for --kind {kind}; pass a "
                         "labels.jsonl (see docs/judge-validation.md)")
    return found


VALIDATION_KINDS = ("support", "citation", "relevance", "criterion", "nuggets", "pairwise")


@judge_app.command("validate")
def validate(
    judge_config: Path = typer.Option(..., "--judge", help="Judge config YAML (for a cascade: the tier-2 judge)."),
    kind: str = typer.Option("support", "--kind", help="The judgement validated: support (faithfulness), citation "
                             "(citation precision/recall), relevance (answer_relevance), criterion (correctness, "
                             "per rubric criterion), nuggets (the nugget metrics) or pairwise."),
    labels: Path = typer.Option(None, "--labels", help="Human labels JSONL of the kind (default: the bundled "
                                                       "calibration set for support, the bundled example of the "
                                                       "kind otherwise)."),
    store: Path = STORE_OPT,
    tier1: Path = typer.Option(None, "--tier1", help="Validate a cascade (--kind support): this judge config (a "
                                                     "local judge with a score) as tier 1, --judge inside its "
                                                     "band."),
    scale: str = typer.Option(None, "--scale", help="binary (the top level vs the rest; the default) or ordinal "
                                                    "(three levels, linear-weighted kappa; not for citation)."),
    judge_family: str = typer.Option(None, "--judge-family", help="The judge's model family, for the "
                                                                   "self-preference check."),
    max_false_pass: float = typer.Option(0.02, "--max-false-pass", help="Band budget: share of bad items "
                                                                          "allowed to auto-pass."),
    max_false_fail: float = typer.Option(0.02, "--max-false-fail", help="Band budget: share of good items "
                                                                          "allowed to auto-fail."),
    min_per_class: int = typer.Option(10, "--min-per-class", help="Refuse a label set with fewer compared "
                                      "labels than this in any class (the gate's floor default)."),
    min_items: int = typer.Option(100, "--min-items", help="Refuse a label set with fewer compared labels "
                                  "than this in all (the gate's floor default)."),
    resamples: int = typer.Option(2_000, "--resamples", help="Bootstrap resamples (100 to 1,000,000)."),
    seed: int = typer.Option(0, "--seed"),
    confidence: float = typer.Option(0.95, "--confidence"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Validate a judge's verdicts of one kind (--kind) against human labels like a classifier: kappa and
    agreement, per-class precision/recall/F1 (and per criterion), confusion matrix, label distributions,
    verbosity and self-preference probes, calibration (ECE, Brier, isotonic, band) for judges with a score;
    store the validation record. A label set with a single class, or fewer labels than the minimums, is
    refused before any call is made."""
    from ragassay.judges.config import load_judge_config
    from ragassay.judges.kinds import CLAIM_KINDS
    from ragassay.judges.validate import (
        KIND_SCALES,
        Floor,
        label_counts,
        validate_judgements,
        validation_record,
    )
    from ragassay.store import Store

    if kind in CLAIM_KINDS:  # the claims judge's kinds (docs/claims.md)
        validate_claims_cmd(judge_config=judge_config, kind=kind, labels=labels, store=store, resamples=resamples,
                            seed=seed, json_out=json_out)
        return
    if kind not in VALIDATION_KINDS:
        raise InputError(f"--kind must be one of {', '.join(VALIDATION_KINDS)} (or claim_check, claim_extract), "
                         f"got {kind!r}")
    if kind != "pairwise":
        scale = scale or "binary"
        if scale not in KIND_SCALES[kind]:
            raise InputError(f"--scale must be one of {', '.join(KIND_SCALES[kind])} for --kind {kind}, got "
                             f"{scale!r}")
    elif scale is not None or judge_family is not None:
        raise InputError("--scale and --judge-family do not apply to --kind pairwise (its scale is the preference "
                         "a < tie < b)")
    if tier1 is not None and kind != "support":
        raise InputError(f"--tier1 validates a cascade over support judgements: use it with --kind support, not "
                         f"{kind}")
    checks.refuse(checks.count("--min-per-class", min_per_class), checks.count("--min-items", min_items),
                  checks.resamples(resamples), checks.seed(seed))
    if not 0 < confidence < 1:
        raise InputError(f"--confidence must be in (0, 1), got {confidence}")
    for name, v in (("--max-false-pass", max_false_pass), ("--max-false-fail", max_false_fail)):
        if not 0 <= v < 1:
            raise InputError(f"{name} must be in [0, 1), got {v}")
    cfg = load_judge_config(judge_config)
    default = Floor()
    floor = Floor(default.min_kappa, default.min_class_recall, min_per_class, min_items)
    opts = {"n_resamples": resamples, "seed": seed, "confidence": confidence}
    if kind == "pairwise":
        from ragassay.judges.pairwise import pairwise_pins, validate_pairwise

        path = _labels_path(labels, kind)
        with Store.open(store) as st:
            with progress(enabled=not json_out) as bar:
                tick = counting(bar, f"judging the pairwise labels of {path.name} with "
                                     f"{cfg.pins()['judge_model']}")
                figures, calls, label_set = validate_pairwise(cfg, path, st, floor=floor, progress=tick, **opts)
            record = validation_record(pairwise_pins(cfg), label_set, figures, calls=calls, kind="pairwise")
            record["validation_id"] = st.record_judge_validation(record)
        _finish_validation(record, default, label_set, str(judge_config), json_out)
        return
    from ragassay.judges.kinds import check_judge_for_kind, run_kind
    from ragassay.judges.labels import load_labels

    check_judge_for_kind(cfg, kind, str(judge_config))
    cfg1 = load_judge_config(tier1) if tier1 is not None else None
    if cfg1 is not None and cfg.cascade is not None:
        raise InputError(f"{judge_config} names a cascade already: it is validated as a whole (its tier 1 and band "
                         "route the items as they route a run's claims); drop --tier1, or pass the tier-2 config")
    if cfg1 is not None and cfg1.provider != "local":
        raise InputError(f"{tier1}: tier 1 of a cascade must be a local judge (it needs a score to route by)")
    label_set = load_labels(_labels_path(labels, kind), kind, criteria=[c.name for c in cfg.rubric_criteria()])
    counts = label_counts(label_set.items, scale, kind)
    problem = floor.label_set_problem(counts)
    if problem:
        shown = ", ".join(f"{c} {n}" for c, n in counts.items())
        raise InputError(f"{label_set.path}: {problem} on the {scale} scale ({shown}); a validation on it could not "
                         f"earn the gate's floor. Label more items (--min-per-class {min_per_class}, --min-items "
                         f"{min_items}); nothing was judged or recorded")
    with Store.open(store) as st, progress(enabled=not json_out) as bar:
        tick = counting(bar, f"judging {len(label_set.items)} {kind} labels with {cfg.pins()['judge_model']}")
        judged, calls = run_kind(cfg, kind, label_set.items, st, progress=tick)
        if calls["stopped"]:
            from ragassay.judges.providers import JudgeStopped

            raise JudgeStopped(f"judge run stopped: {calls['stopped']}; finished calls are stored: rerun (with a "
                               "higher spend_cap) to pay only for the rest. No validation was recorded")
        # the bootstrap reports no progress: its own task pulses with the elapsed time
        task = bar.add_task(f"validating against {len(label_set.items)} labels ({resamples} resamples)", total=None)
        figures = validate_judgements(label_set.items, judged, kind=kind, scale=scale, judge_family=judge_family,
                                      max_false_pass=max_false_pass, max_false_fail=max_false_fail, **opts)
        cascade = None
        if cfg1 is not None:
            from ragassay.judges.cascade import cascade_figures

            bar.update(task, visible=False)
            judged1, _ = run_kind(cfg1, kind, label_set.items, st, progress=counting(
                bar, f"judging them with tier 1 {cfg1.pins()['judge_model']}"))
            cascade = cascade_figures(label_set.items, judged1, judged, max_false_pass=max_false_pass,
                                      max_false_fail=max_false_fail, **opts)
            cascade["tier1"] = cfg1.pins()["judge_model"]
        record = validation_record(cfg.pins(), label_set, figures, calls=calls, kind=kind, cascade=cascade)
        record["validation_id"] = st.record_judge_validation(record)
    _finish_validation(record, default, label_set, str(judge_config), json_out)


def _finish_validation(record: dict, default, label_set, judge_path: str, json_out: bool) -> None:
    """Check the stored record against the default floor and print it (``--json``: the whole record)."""
    ok, why = default.check(record)
    record["created_at"] = record["created_at"].isoformat()
    record["meets_default_floor"] = ok
    record["floor_detail"] = why
    record["floor"] = {"min_kappa": default.min_kappa, "min_class_recall": default.min_class_recall,
                       "min_per_class": default.min_per_class, "min_items": default.min_items,
                       "on": "the lower ends of the 95% intervals"}
    if json_out:
        print_json(record)
        return
    _print_validation(record, label_set, judge_path)


def _print_validation(record: dict, label_set, judge_path: str) -> None:
    f = record["figures"]
    console.print(Text(f"validated {record['judge_model']} ({judge_path}) on {label_set.path} "
                       f"(version {record['label_set_version'][:12]}): {f['n']} of {f['n_items']} items compared, "
                       f"kind {record['kind']}, scale {f['scale']}; validation {record['validation_id']}"))
    if record["metrics"]:
        console.print(Text(f"speaks for: {', '.join(record['metrics'])}"))
    routed = (record.get("calls") or {}).get("cascade")
    if routed:
        r = routed["routes"]
        console.print(Text(f"cascade {routed['tier1']} → {record['judge_model']}, band [{routed['band']['lo']:g}, "
                           f"{routed['band']['hi']:g}] on P(bad): auto-pass {r['auto_pass']}, auto-fail "
                           f"{r['auto_fail']}, escalated {r['escalated']} (validated as a whole)"))
    if f["excluded"]:
        console.print(Text("left out: " + ", ".join(f"{k} {v}" for k, v in f["excluded"].items())))
    who = record.get("labelled_by") or "unstated"
    head = {"human": "human", "automated": "automated", "mixed": "labels (mixed)"}.get(who, "labels")
    console.print(Text(f"labelled by: {who}" + (" (not people: validate on human labels of your own data before a "
                                                 "judge decides a gate)" if who != "human" else "")))
    if record.get("passes_kappa") is not None:
        console.print(Text(f"annotation passes: kappa {record['passes_kappa']:.3f} between the two annotation passes "
                           "(the ceiling for any judge; not the judge's agreement)"))
    console.print(Text(f"kappa {_fmt(f['kappa'])}{' (linear weights)' if f.get('kappa_weights') else ''}, "
                       f"agreement {_fmt(f['agreement'])}"))
    table = Table("class", head, "judge", "precision", "recall", "F1")
    for c in f["per_class"]:
        table.add_row(Text(c["label"]), str(c["support"]), str(c["predicted"]), _fmt(c["precision"]),
                      _fmt(c["recall"]), _fmt(c["f1"]))
    console.print(table)
    conf = Table(f"{head} \\ judge", *f["classes"])
    for lab, row in zip(f["classes"], f["confusion"], strict=True):
        conf.add_row(Text(lab), *map(str, row))
    console.print(conf)
    per = f.get("per_criterion")
    if per:
        crit = Table("criterion", "compared", "kappa", "agreement", "min class recall")
        for name, g in per.items():
            low = g.get("min_class_recall")
            crit.add_row(Text(name), str(g["n"]), _fmt(g["kappa"]), _fmt(g.get("agreement")),
                         "undefined" if low is None else f"{low:.3f}")
        console.print(Text("per criterion (the floor reads the pooled figures above):"))
        console.print(crit)
    v = f["verbosity"]
    if "undefined" in v:
        console.print(Text(f"verbosity slope: {v['undefined']}"))
    else:
        console.print(Text(f"verbosity slope: {_fmt(v, True)} in the judge's {v.get('top_class', 'supported')} rate "
                           "per 100 words, holding the human label fixed"))
    sp = f["self_preference"]
    console.print(Text("self-preference: " + (sp["undefined"] if "undefined" in sp else
                                              f"{_fmt(sp, True)} lenience on {sp['judge_family']} answers "
                                              f"(n {sp['n_own']}) minus the others (n {sp['n_other']})")))
    cal = f["calibration"]
    if "raw" in cal:
        line = f"calibration (report split, n {cal['n_report']}): ECE {_fmt(cal['raw']['ece'])}, " \
               f"Brier {_fmt(cal['raw']['brier'])}"
        if "recalibrated" in cal:
            line += f"; after isotonic (fit split, n {cal['n_fit']}): ECE {_fmt(cal['recalibrated']['ece'])}, " \
                    f"Brier {_fmt(cal['recalibrated']['brier'])}"
        console.print(Text(line))
        band = cal.get("band")
        if band:
            rep = band.get("report") or {}
            console.print(Text(f"band picked on the fit split: auto-pass P(bad) < {band['lo']:.3f}, auto-fail > "
                               f"{band['hi']:.3f}; on the report split escalates "
                               f"{rep.get('escalation_rate', math.nan):.1%}, false pass "
                               f"{rep.get('false_pass_rate', math.nan):.1%}, false fail "
                               f"{rep.get('false_fail_rate', math.nan):.1%}"))
    else:
        console.print(Text(f"calibration: {cal.get('undefined')}"))
    c = record.get("cascade")
    if c:
        if "undefined" in c:
            console.print(Text(f"cascade: undefined ({c['undefined']})"))
        else:
            t = c["tiers"]
            console.print(Text(f"cascade {c['tier1']} → {record['judge_model']} (report split, n {c['n_report']}): "
                               f"kappa {_fmt(t['cascade']['kappa'])} vs tier 1 {_fmt(t['tier1']['kappa'])}, tier 2 "
                               f"{_fmt(t['tier2']['kappa'])}; escalated {_fmt(c['escalated'])}; cost saved "
                               f"{_fmt(c['cost']['saved'])}; latency saved "
                               f"{_fmt(c['latency'].get('saved'))}"))
    verdict = "meets" if record["meets_default_floor"] else "does NOT meet"
    fl = record["floor"]
    console.print(Text(f"{verdict} the default gate floor (at the lower end of each 95% interval: kappa ≥ "
                       f"{fl['min_kappa']:g}, every class recall ≥ {fl['min_class_recall']:g}; at least "
                       f"{fl['min_items']} items and {fl['min_per_class']} per class): {record['floor_detail']}"))


@judge_app.command("rebaseline")
def rebaseline_cmd(
    old: Path = typer.Argument(..., help="The judge config the runs were judged with."),
    new: Path = typer.Argument(..., help="The judge config replacing it."),
    runs: list[str] = typer.Option(..., "--runs", help="Archived runs to re-score (repeat the option)."),
    store: Path = STORE_OPT,
    corpus: Path = typer.Option(None, "--corpus", help="Corpus the runs used (default: bundled)."),
    golden: Path = typer.Option(None, "--golden", help="Golden set the runs used (default: bundled)."),
    resamples: int = typer.Option(2_000, "--resamples", help="Bootstrap resamples (100 to 1,000,000)."),
    seed: int = typer.Option(0, "--seed"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Re-score archived answers with the old and the new judge and publish the offset per metric (new - old)
    with a paired bootstrap CI, so history stays comparable across a judge change. The runs are not modified."""
    from ragassay.analysis.runner import load_inputs
    from ragassay.judges.config import load_judge_config
    from ragassay.judges.metrics import items_from
    from ragassay.judges.validate import rebaseline
    from ragassay.store import Store
    from ragassay.trace.io import read_traces

    checks.refuse(checks.resamples(resamples), checks.seed(seed))
    old_cfg, new_cfg = load_judge_config(old), load_judge_config(new)
    if not store.is_file():
        raise InputError(f"{store}: no such store; pass the store that holds the runs with --store")
    corp, gs = load_inputs(corpus, golden)

    def unit_text(u) -> str:
        if u.text is not None:
            return u.text
        if u.doc_id not in corp:
            raise InputError(f"packed unit {u.unit_id} names doc {u.doc_id!r}, which is not in the corpus; pass "
                             "the runs' corpus with --corpus")
        return corp[u.doc_id].text[u.start:u.end]

    with Store.open(store) as st, progress(enabled=not json_out) as bar:
        task = bar.add_task("reading the archived answers", total=None)
        loaded = []
        for ref in runs:
            rec = st.get_run(ref)
            path = _traces_path(rec, None)
            if not path.is_file():
                raise InputError(f"{path}: the traces of run {rec.name} are not there; the answers must be "
                                 "archived to re-score them")
            _, recs, _ = read_traces(path)
            loaded.append((rec, items_from(recs, gs, unit_text)))
        # no total: rebaseline reports no per-answer progress, so the bar pulses with the elapsed time
        bar.update(task, description=esc(f"re-judging {sum(len(items) for _, items in loaded)} answers with "
                                         f"{old_cfg.pins()['judge_model']} and {new_cfg.pins()['judge_model']}"))
        out = rebaseline(st, loaded, old_cfg, new_cfg, n_resamples=resamples, seed=seed)
    if json_out:
        print_json(out)
        return
    console.print(Text(f"rebaseline {out['old']['judge_model']} → {out['new']['judge_model']} on "
                       f"{len(out['runs'])} run(s), pairs {out['pairing']}:"))
    table = Table("metric", "n", "old", "new", "offset (new − old) [95% CI]", "undefined old/new (both)")
    for m, r in out["metrics"].items():
        table.add_row(Text(m), str(r["n"]), f"{r['mean_old']:.3f}", f"{r['mean_new']:.3f}", _fmt(r["offset"], True),
                      f"{r['undefined_old']}/{r['undefined_new']} ({r['undefined_both']})")
    console.print(table)


@judge_app.command("claims")
def claims_cmd(
    run: str = typer.Argument(..., help="Stored run to judge for claims (run_id, unique prefix or name)."),
    judge_config: Path = typer.Option(..., "--judge", help="Judge config YAML: provider local (model lexical) for "
                                      "the offline extractor and checker, or an LLM judge; `claims: {relevance: "
                                      "claims | spans}` picks the relevance rule."),
    store: Path = STORE_OPT,
    traces: Path = typer.Option(None, "--traces", help="The run's traces JSONL (default: where the run recorded "
                                                       "them)."),
    corpus: Path = typer.Option(None, "--corpus", help="Corpus the run used (default: bundled)."),
    golden: Path = typer.Option(None, "--golden", help="Golden set the run used (default: bundled)."),
    resume: bool = typer.Option(False, "--resume", help="Re-score a run judged for claims before, under the same "
                                                        "judge; stored calls are not paid again."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Judge a stored run's answers claim by claim (RAGChecker's eleven metrics: overall precision, recall,
    F1; claim recall, context precision; context utilization, noise sensitivity, hallucination,
    self-knowledge, faithfulness) and store them with the claim tables that `analyze claims` diffs."""
    from ragassay.judges.config import load_judge_config

    cfg = load_judge_config(judge_config)
    if not store.is_file():
        raise InputError(f"{store}: no such store; run or score the run first (or pass --store)")
    from ragassay.analysis.runner import load_inputs
    from ragassay.judges.claims import claim_pins, judge_claims_run
    from ragassay.store import Store

    claim_pins(cfg)  # a config the claims judge cannot use is refused before anything is read
    with Store.open(store) as st, progress(enabled=not json_out) as bar:
        rec, path, header, recs, problems = _run_traces(st, run, traces)
        corp, gs = load_inputs(corpus, golden)
        tick = counting(bar, f"judging {len(recs)} answers of run {rec.name} for claims")
        summary = judge_claims_run(st, rec.run_id, recs, gs, corp, cfg, resume=resume, header=header,
                                   traces_label=str(path), progress=tick)
    out = summary.to_dict()
    out["trace_problems"] = len(problems)
    if json_out:
        print_json(out)
        return
    if problems:
        console.print(f"warning: {len(problems)} malformed trace record(s) in {esc(path)} were skipped")
    console.print(Text(f"judged run {summary.run_name} ({summary.run_id}) for claims with "
                       f"{summary.pins['judge_model']} (relevance rule {summary.pins['relevance']}): "
                       f"{summary.items} answers"))
    table = Table("metric", "mean", "defined", "undefined")
    for m, v in out["metrics"].items():
        table.add_row(Text(m), "undefined" if v["mean"] is None else f"{v['mean']:.3f}", str(v["defined"]),
                      str(v["undefined"]))
    console.print(table)
    b = out["breakdown"]
    console.print(Text(f"response claims ({b['claims']}): " + ", ".join(
        f"{k} {'undefined' if v is None else f'{v:.1%}'}" for k, v in b["shares"].items())))
    if out["undefined"]:
        console.print(Text("undefined: " + "; ".join(f"{u['metric']} {u['reason']} ×{u['count']}"
                                                     for u in out["undefined"])))
    console.print(Text("checks: " + ", ".join(f"{k} {n}" for k, n in out["calls"].items())
                       + f"; quote not found {out['quote_not_found']}"))


@judge_app.command("validate-claims")
def validate_claims_cmd(
    judge_config: Path = typer.Option(..., "--judge", help="The claims judge config YAML."),
    kind: str = typer.Option("claim_check", "--kind", help="claim_check (three-way check of one claim against "
                             "one passage) or claim_extract (claims found in a text)."),
    labels: Path = typer.Option(None, "--labels", help="Label JSONL (default: the bundled automated example of "
                                                       "the kind)."),
    store: Path = STORE_OPT,
    resamples: int = typer.Option(2_000, "--resamples", help="Bootstrap resamples (100 to 1,000,000)."),
    seed: int = typer.Option(0, "--seed"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Validate the claims judge against labels: agreement (kappa, per-class recall) of the three-way check,
    or recall and precision of claim extraction, with bootstrap CIs; store the record and check the floor."""
    from ragassay.judges.claims import VALIDATION_KINDS as CLAIM_KINDS
    from ragassay.judges.claims import bundled_claim_labels, validate_claims
    from ragassay.judges.config import load_judge_config
    from ragassay.store import Store

    if kind not in CLAIM_KINDS:
        raise InputError(f"--kind {kind}: choose one of {list(CLAIM_KINDS)}")
    checks.refuse(checks.resamples(resamples), checks.seed(seed))
    cfg = load_judge_config(judge_config)
    path = labels if labels is not None else bundled_claim_labels(kind)
    with Store.open(store) as st:
        record = validate_claims(cfg, kind, path, st, n_resamples=resamples, seed=seed)
    record["created_at"] = record["created_at"].isoformat()
    if json_out:
        print_json(record)
        return
    f = record["figures"]
    console.print(Text(f"validated the claims judge {record['judge_model']} on {path} (kind {kind}, version "
                       f"{record['label_set_version'][:12]}, labelled by {record['labelled_by']}): {record['n']} of "
                       f"{record['n_items']} items compared; validation {record['validation_id']}"))
    if kind == "claim_check":
        console.print(Text(f"kappa {_fmt(f['kappa'])}, agreement {_fmt(f['agreement'])}"))
        table = Table("class", "labels", "judge", "precision", "recall")
        for c in f["per_class"]:
            table.add_row(Text(c["label"]), str(c["support"]), str(c["predicted"]), _fmt(c["precision"]),
                          _fmt(c["recall"]))
        console.print(table)
    else:
        console.print(Text(f"extraction recall {_fmt(f['recall'])}, precision {_fmt(f['precision'])}, F1 "
                           f"{_fmt(f['f1'])} ({f['human_claims']} labelled claims, {f['judge_claims']} extracted; "
                           f"match {f['match']})"))
    verdict = "meets" if record["meets_floor"] else "does NOT meet"
    console.print(Text(f"{verdict} the floor: {record['floor_detail']}"))


def register(app: typer.Typer) -> None:
    app.add_typer(judge_app, name="judge")
