"""`ragassay run`, `ragassay score` and `ragassay runs`: produce, import and list scored runs."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from ragassay._progress import scoring_bar
from ragassay.analysis.summary import stored_run_summary
from ragassay.cli.common import console, print_json
from ragassay.errors import InputError, RagassayError
from ragassay.store import Store

HEADLINE = ("recall@fusion_depth", "ndcg@final_k", "recall@context", "answer_f1", "abstention_recall",
            "over_refusal")

STORE_OPT = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file.")
CORPUS_OPT = typer.Option(None, "--corpus", help="Corpus dir or .jsonl (default: the bundled licenses).")
GOLDEN_OPT = typer.Option(None, "--golden", help="Built golden set dir or authoring file (default: bundled).")
EXECUTOR_OPT = typer.Option("local", "--executor", help="Where the work runs: local (default), ray (the cluster "
                            "ray.init() would join: RAY_ADDRESS, else this machine's `ray start` cluster, else a "
                            "new local one) or ray:ADDRESS (e.g. ray:auto); the driver writes the store and the "
                            "rows are the local ones.")
PIN_OPT = typer.Option(False, "--allow-pin-mismatch",
                       help="Score traces whose header names another corpus digest or dataset version "
                            "(recorded with the run).")


def _fmt(x: float | None) -> str:
    return "undefined" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def print_run_summary(rec, summary: dict) -> None:
    # user-supplied names go through escape(): a run called "[/bold]" must print, not crash rich
    console.print(f"[bold]{escape(rec.name)}[/] run {rec.run_id}  dataset {escape(str(rec.dataset_version))}  "
                  f"{summary['n_items']} (query, trial) items  hit rule {escape(str(rec.hit_rule))}  "
                  f"relevant: grade ≥ {rec.relevance_threshold}  gain {escape(str(rec.gain))}")
    t = Table(title="per stage", show_edge=False)
    for c in ("stage", "metric", "mean", "defined", "undefined"):
        t.add_column(c, justify="right" if c in ("mean", "defined", "undefined") else "left")
    for r in summary["metrics"]:
        t.add_row(*(Text(c) for c in (r["stage"], r["metric"], _fmt(r["mean"]), str(r["n_defined"]),
                                      str(r["n_undefined"]))))
    console.print(t)
    shown = [m for m in HEADLINE if any(r["metric"] == m for r in summary["metrics"])]
    if shown:
        st = Table(title="per stratum", show_edge=False)
        st.add_column("stratum")
        for m in shown:
            st.add_column(m, justify="right")
        cell = {(r["metric"], r["stratum"]): r for r in summary["per_stratum"]}
        for s in summary["strata"]:
            st.add_row(Text(s), *[Text(_fmt(cell[(m, s)]["mean"]) + f" ({cell[(m, s)]['n_defined']})"
                                       if (m, s) in cell else "") for m in shown])
        console.print(st)
    jf = summary["judged_fraction"]
    if jf["n"]:
        console.print(f"judged fraction: {jf['mean']:.3f} of the top final_k units overlap a labelled span "
                      f"(mean over {jf['n']} (query, trial) items; {jf['n_undefined']} with an empty list)")
    extra = rec.extra or {}
    tokens = extra.get("context_tokens_mean")
    if tokens is not None:
        budget = ((rec.config or {}).get("packer") or {}).get("budget_tokens")
        of = f" (budget {budget:,})" if isinstance(budget, int) else ""
        console.print(f"context delivered: {tokens:,.0f} tokens per query on average{of}")
    if summary["latency_ms"]:
        lat = summary["latency_ms"]
        console.print(f"latency per query: p50 {lat['p50']:.1f} ms, p95 {lat['p95']:.1f} ms, "
                      f"p99 {lat['p99']:.1f} ms (n = {lat['n']})")
    else:
        console.print("latency: not measured (no per-request times in this run)")
    n_bad = int(extra.get("unit_failures", 0))
    if n_bad:
        console.print(f"{n_bad} unit(s) failed validation against the corpus and were not credited:",
                      style="yellow")
        for line in extra.get("unit_failure_examples", [])[:10]:
            console.print(f"  {line}", style="yellow", markup=False)
    for w in extra.get("warnings", []):
        console.print(f"warning: {w}", style="yellow", markup=False)
    console.print("[dim]undefined = no relevant evidence for that query (e.g. recall on a negative query) "
                  "or nothing to measure (no context reported, no token counts); never counted as 0[/]")


def _report(st, run_id: str, info: dict | None, store: Path, json_out: bool,
            profile: dict[str, float] | None = None, judged=None) -> None:
    rec = st.get_run(run_id)
    summary = stored_run_summary(st, run_id)  # one metric at a time: the whole table is ~1 GB at 100k queries
    if json_out:
        kept = _kept_traces(rec)
        out = {"run": rec.to_dict(), "summary": summary, "import": info,
               "warnings": (rec.extra or {}).get("warnings", []), "traces": str(kept) if kept else None}
        if profile is not None:
            out["profile_s"] = profile
        if judged is not None:
            out["judge"] = judged.to_dict()
        print_json(out)
        return
    print_run_summary(rec, summary)
    if info:
        print_import(info)
    if profile is not None:
        print_profile(profile)
    if judged is not None:
        from ragassay.cli.judge import print_judge_summary

        print_judge_summary(judged)
    console.print(f"stored as run [bold]{rec.run_id}[/] in {escape(str(store))}")
    kept = _kept_traces(rec)
    if kept is not None:
        console.print(f"traces: {kept} (read by `ragassay judge` and the report's per-query view)", markup=False)
    elif rec.source == "pipeline":
        console.print("traces: not kept; rerun with --keep-traces (or --traces-dir DIR) so `ragassay judge` and "
                      "the report's per-query view can read the answers and retrieved units", markup=False)


def _kept_traces(rec) -> Path | None:
    """The trace file a run wrote (``extra.traces_dir``), or None when it wrote none."""
    folder = (rec.extra or {}).get("traces_dir")
    return Path(folder) / f"{rec.run_id}.jsonl" if folder else None


def print_profile(profile: dict[str, float]) -> None:
    """Where a run's wall time went; per-item stage times (summed over items) are indented under queries."""
    t = Table(title="profile (wall seconds)", show_edge=False)
    t.add_column("part")
    t.add_column("s", justify="right")
    t.add_column("share", justify="right")
    parts = {k: v for k, v in profile.items() if not k.startswith("stage:")}
    total = sum(parts.values()) or 1.0
    for k, v in parts.items():
        t.add_row(Text(k), f"{v:.2f}", f"{v / total:.0%}")
        if k == "queries":
            for sk, sv in profile.items():
                if sk.startswith("stage:"):
                    t.add_row(Text("  " + sk.removeprefix("stage:")), f"{sv:.2f}", "")
    t.add_row(Text("total"), f"{total:.2f}", "")
    console.print(t)


def print_import(info: dict) -> None:
    console.print(f"imported {info['n_traces']} traces: {info['schema_failures']} malformed record(s), "
                  f"{info['unit_failures']} unit(s) failing validation, "
                  f"{len(info['unknown_queries'])} unknown query id(s), {info['missing']} golden "
                  "(query, trial) without a trace (scored as empty)", markup=False)
    for p in info["problems"][:10]:
        console.print(f"  {p}", style="yellow", markup=False)
    for k, v in (info.get("pin_mismatch") or {}).items():
        console.print(f"warning: scored despite a pin mismatch: {k} {v['traces']} in the traces, {v['golden']} "
                      "in the golden set", style="yellow", markup=False)
    agent = info.get("agent")
    if agent:
        from ragassay.cli.agent_text import print_agent_scoring

        print_agent_scoring(agent)


HIT_RULE_OPT = typer.Option(None, "--hit-rule", help="any_overlap | min_fraction:F | doc (default: the golden "
                            "set's manifest, else any_overlap).")
THRESHOLD_OPT = typer.Option(None, "--threshold", help="Relevant = grade ≥ this (default: the golden set's "
                             "manifest, else 2).")


def _options(gs, hit_rule: str | None, threshold: int | None, gain: str | None):
    """Scoring options: a flag wins, then the golden set's own manifest (a BEIR set says `doc`, 1 and linear
    gain), then the defaults. ``gs=None`` checks the flags alone."""
    from ragassay.analysis.scoring import ScoringOptions, manifest_gain

    manifest = (gs.manifest or {}) if gs is not None else {}
    rule = hit_rule or manifest.get("hit_rule") or "any_overlap"
    level = threshold if threshold is not None else manifest.get("relevance_threshold", 2)
    return ScoringOptions(hit_rule=rule, relevance_threshold=level, gain=gain or manifest_gain(manifest))


@contextmanager
def kept_only_with_runs(store: Path) -> Iterator[None]:
    """Run a block that creates ``store`` by opening it; when the block fails and the store did not exist
    before, remove it unless it holds a run. A refused command leaves no empty store file behind, and a run
    interrupted after it was created stays in the store for ``--resume``."""
    existed = store.exists() or store.is_symlink()
    try:
        yield
    except BaseException:
        if not existed and store.is_file() and not _holds_runs(store):
            store.unlink()
            Path(f"{store}.wal").unlink(missing_ok=True)
        raise


@contextmanager
def store_for_runs(store: Path) -> Iterator[Store]:
    """The store a command writes runs into (run, score, analyze ablation, sweep), opened inside
    :func:`kept_only_with_runs`: the one way those commands open it."""
    with kept_only_with_runs(store), Store.open(store) as st:
        yield st


def _holds_runs(store: Path) -> bool:
    try:
        with Store.open(store, read_only=True) as st:
            return bool(st.list_runs())
    except RagassayError:  # unreadable (another writer's lock, say): never remove what cannot be checked
        return True


def _default_traces_dir(store: Path) -> Path:
    """Where a run keeps its traces without ``--traces-dir``: beside the store (:func:`default_traces_dir`),
    as ``ragassay.evaluate`` keeps them."""
    from ragassay.api import default_traces_dir

    return default_traces_dir(store)


def _resumed_traces_dir(store: Path, resume: str, given: Path | None, asked: str | None) -> Path | None:
    """The folder a resumed run keeps its traces in: the one it recorded when it started, None if it kept none.
    A resumed run can neither start keeping traces (``asked``: the flag that wants them) nor move them
    (``given``: another --traces-dir): its file would lack the traces of the batches run before."""
    with Store.open(store, read_only=True) as st:
        rec = st.get_run(resume)
    folder = (rec.extra or {}).get("traces_dir")
    if folder is None:
        flag = "--traces-dir" if given is not None else asked
        if flag is not None:
            raise InputError(f"--resume {resume}: run {rec.name} ({rec.run_id}) kept no traces when it started, so "
                             f"{flag} would keep only the resumed part; resume it without {flag}, or start the "
                             "run again with --keep-traces")
        return None
    if given is not None and Path(given).resolve() != Path(folder).resolve():
        raise InputError(f"--resume {resume}: run {rec.name} ({rec.run_id}) keeps its traces in {folder}, not "
                         f"{given}; leave out --traces-dir (the resumed run appends to its own file)")
    return Path(folder)


def _judge_run(st, run_id: str, gs, corp, cfg):
    """Judge a finished run's answers from its recorded traces (the `ragassay judge score` path)."""
    from ragassay.analysis.slicing import run_traces
    from ragassay.judges.score import judge_stored_run

    return judge_stored_run(st, run_id, list(run_traces(st, run_id).values()), gs, corp, cfg)


def run(
    config: Path = typer.Argument(..., help="Pipeline config YAML."),
    store: Path = STORE_OPT,
    corpus: Path = CORPUS_OPT,
    golden: Path = GOLDEN_OPT,
    trials: int = typer.Option(1, "--trials", min=1, help="Runs per query (nondeterministic systems)."),
    name: str = typer.Option(None, "--name", help="Run name (default: the config's name)."),
    resume: str = typer.Option(None, "--resume", help="Finish an interrupted run (run id, prefix or name)."),
    traces: Path = typer.Option(None, "--traces", help="Import traces from this JSONL instead of running."),
    traces_dir: Path = typer.Option(None, "--traces-dir", help="Keep the run's traces here (a new or empty "
                                    "folder, or one ragassay wrote traces to)."),
    keep_traces: bool = typer.Option(False, "--keep-traces", help="Keep the run's traces beside the store "
                                     "(<store>.traces/), for `judge RUN` and the report's per-query view."),
    batched: bool = typer.Option(False, "--batched", help="Run retrieval for 64 queries at a time: faster, but "
                                 "no per-request latency exists (stored as NULL)."),
    allow_pin_mismatch: bool = PIN_OPT,
    profile: bool = typer.Option(False, "--profile", help="Print where the run's time went: build, labels, "
                                 "queries (with their stages), scoring, traces, store."),
    hit_rule: str = HIT_RULE_OPT,
    threshold: int = THRESHOLD_OPT,
    gain: str = typer.Option(None, "--gain", help="nDCG gain: exp | linear (default: the golden set's manifest, "
                                              "else exp)."),
    judge: Path = typer.Option(None, "--judge", help="Also judge the run's answers with this judge config "
                               "(as `ragassay judge score`), and print the cost line."),
    executor: str = EXECUTOR_OPT,
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Run the reference pipeline on the golden set (or import traces), score every stage, store the rows."""
    from ragassay.analysis.runner import load_inputs, run_pipeline_into_store, score_traces_into_store
    from ragassay.executors import check_executor

    _options(None, hit_rule, threshold, gain)  # bad flags are refused before anything is loaded
    executor = check_executor(executor)
    if resume is not None and not store.is_file():
        raise InputError(f"--resume {resume}: there is no results store at {store} to resume a run from; pass "
                         "the --store that holds the interrupted run")
    if traces is not None and not traces.exists():
        raise InputError(f"{traces}: trace file not found; pass the path of a .jsonl trace file with --traces")
    if keep_traces and traces_dir is not None:
        raise InputError("--keep-traces keeps them beside the store and --traces-dir in DIR; pass one of them")
    if traces is not None and (keep_traces or traces_dir is not None):
        raise InputError(f"{'--keep-traces' if keep_traces else '--traces-dir'} keeps the traces a pipeline run "
                         "makes; a file imported with --traces stays the run's traces where it is: leave it out")
    judge_cfg = None
    if judge is not None:
        from ragassay.judges.config import load_judge_config

        judge_cfg = load_judge_config(judge)  # a bad judge config is refused before the run, not after it
    # the traces are kept when asked, when the run is judged (the judge reads its answers from them) and when a
    # resumed run kept them; otherwise not: writing them takes longer than the run itself on large sets
    by_default = traces is None and traces_dir is None and (keep_traces or judge is not None or resume is not None)
    if resume is not None and traces is None:
        asked = "--keep-traces" if keep_traces else "--judge" if judge is not None else None
        traces_dir = _resumed_traces_dir(store, resume, traces_dir, asked)
    elif by_default:
        traces_dir = _default_traces_dir(store)
    if traces_dir is not None:
        from ragassay.fsio import check_output_dir

        try:
            check_output_dir(traces_dir, "traces")  # before the store is created: a refusal leaves no trace
        except InputError as e:
            if not by_default:
                raise
            raise InputError(f"{e} (the run's traces folder beside --store; choose one with --traces-dir DIR, "
                             "or keep none by leaving out --keep-traces / --judge)") from None
    if traces is None:
        from ragassay.pipeline import load_config

        load_config(config)  # a bad config is refused before anything is loaded or a store is created
    corp, gs = load_inputs(corpus, golden)
    opts = _options(gs, hit_rule, threshold, gain)
    with store_for_runs(store) as st:
        if resume is not None:
            st.get_run(resume)  # an unknown run is refused before the progress bar starts
        info = None
        if traces is not None:
            run_id, info = score_traces_into_store(st, traces, corp, gs, options=opts, name=name,
                                                   allow_pin_mismatch=allow_pin_mismatch)
        else:
            cols = (TextColumn("[bold]scoring {task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeRemainingColumn())
            with Progress(*cols, transient=True, disable=json_out, console=console) as bar:
                task = bar.add_task(escape(name or config.stem), total=None)

                def tick(done: int, total: int) -> None:
                    bar.update(task, completed=done, total=total)

                timing: dict[str, float] = {}
                run_id, _ = run_pipeline_into_store(st, config, corp, gs, trials=trials, options=opts, name=name,
                                                    resume=resume, traces_dir=traces_dir, batched=batched,
                                                    progress=tick, profile=timing, executor=executor)
        judged = _judge_run(st, run_id, gs, corp, judge_cfg) if judge_cfg is not None else None
        _report(st, run_id, info, store, json_out, timing if profile and traces is None else None, judged)


def _score_progress(source: Path, json_out: bool):
    """A bar on the terminal while ``score`` works through ``source`` (none with ``--json``, or when output
    is not a terminal); yields the ``progress(done, total)`` callback: bytes of a JSONL file or rows of a
    Parquet dataset scored, or files stored on Ray workers."""
    return scoring_bar(source.name, disable=json_out or not console.is_terminal, console=console)


def score(
    traces: list[Path] = typer.Argument(..., help="Traces JSONL from any system, or a Parquet trace dataset (a "
                                        ".parquet file or a directory of them, one run); several JSONL files make "
                                        "one run each (partitions of the work on --executor ray)."),
    golden: Path = typer.Option(..., "--golden", help="Built golden set dir or authoring file."),
    corpus: Path = CORPUS_OPT,
    store: Path = STORE_OPT,
    name: str = typer.Option(None, "--name"),
    hit_rule: str = HIT_RULE_OPT,
    threshold: int = THRESHOLD_OPT,
    gain: str = typer.Option(None, "--gain", help="nDCG gain: exp | linear (default: the golden set's "
                                                                 "manifest, else exp)."),
    allow_pin_mismatch: bool = PIN_OPT,
    resume: str = typer.Option(None, "--resume", help="Finish an interrupted score of the same traces (run id, "
                               "prefix or name): rows already stored are kept, none is duplicated."),
    batch_size: int = typer.Option(2048, "--batch-size", min=1, help="Traces read, scored and stored at a "
                                   "time; memory grows with it."),
    executor: str = EXECUTOR_OPT,
    verifier: str = typer.Option(None, "--verifier", help="Agent runs: a Python verifier module:function (or "
                                 "file.py:function) deciding each trace's end state; see docs/agents.md."),
    verifier_cmd: str = typer.Option(None, "--verifier-cmd", help="Agent runs: a command run per trace (env "
                                     "RAGASSAY_TRACE, RAGASSAY_ITEM, RAGASSAY_WORKDIR); exit 0 = success."),
    verifier_timeout: float = typer.Option(60.0, "--verifier-timeout", help="Seconds per --verifier-cmd call; "
                                           "a timeout is a counted verifier error."),
    human_fix_cost: float = typer.Option(None, "--human-fix-cost", help="Agent runs: USD to fix one failed "
                                         "task by hand, pinned for `agent report`'s cost per resolved task."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Score another system's traces against a golden set and store them as a run, batch by batch."""
    from ragassay.analysis.partitions import score_dataset_into_store, score_files_into_store
    from ragassay.analysis.runner import load_inputs
    from ragassay.executors import check_executor
    from ragassay.trace.parquet import is_parquet_source

    _options(None, hit_rule, threshold, gain)
    from ragassay.cli.agent import agent_scorer

    add_agent = agent_scorer(traces, verifier, verifier_cmd, verifier_timeout, human_fix_cost)
    executor = check_executor(executor)
    one = len(traces) == 1 and (executor == "local" or is_parquet_source(traces[0]))
    if resume and not one:
        raise InputError("--resume finishes the score of one trace file (or, with --executor ray, one Parquet "
                         "trace dataset); drop --resume to score several files (one new run each)")
    if len(traces) > 1 and any(is_parquet_source(p) for p in traces):
        raise InputError("a Parquet trace dataset is one run: pass its directory alone (JSONL files may be "
                         "given several at a time, one run each)")
    missing = [p for p in traces if not p.exists()]
    if missing:
        # every file is checked before the first is scored: a missing third file must not leave two runs stored
        raise InputError("\n".join(f"{p}: trace file not found; pass the path of a .jsonl trace file" for p in missing))
    if one and executor == "local":
        from ragassay.analysis.stream import reading_ahead

        # the file is read (largely outside the GIL) while the golden set and corpus load
        with reading_ahead(traces[0], batch_size) as ahead:
            corp, gs = load_inputs(corpus, golden)
            opts = _options(gs, hit_rule, threshold, gain)
            with store_for_runs(store) as st, st.memory_limited():
                with _score_progress(traces[0], json_out) as tick:
                    run_id, info = score_dataset_into_store(st, traces[0], corp, gs, options=opts, name=name,
                                                            allow_pin_mismatch=allow_pin_mismatch,
                                                            batch_size=batch_size, resume=resume, read_ahead=ahead,
                                                            progress=tick)
                add_agent(st, run_id, traces[0], gs, info)
                _report(st, run_id, info, store, json_out)
        return
    corp, gs = load_inputs(corpus, golden)
    opts = _options(gs, hit_rule, threshold, gain)
    with store_for_runs(store) as st, st.memory_limited():
        if one:
            with _score_progress(traces[0], json_out) as tick:
                run_id, info = score_dataset_into_store(st, traces[0], corp, gs, options=opts, name=name,
                                                        allow_pin_mismatch=allow_pin_mismatch,
                                                        batch_size=batch_size, executor=executor, resume=resume,
                                                        progress=tick)
            add_agent(st, run_id, traces[0], gs, info)
            _report(st, run_id, info, store, json_out)
            return
        done = score_files_into_store(st, traces, corp, gs, options=opts, name=name,
                                      allow_pin_mismatch=allow_pin_mismatch, batch_size=batch_size,
                                      executor=executor)
        for (run_id, info), path in zip(done, traces, strict=True):
            add_agent(st, run_id, path, gs, info)
        if json_out:
            print_json({"runs": [{"run": st.get_run(r).to_dict(), "summary": stored_run_summary(st, r),
                                  "import": info} for r, info in done]})
            return
        for run_id, info in done:
            _report(st, run_id, info, store, json_out)


def runs(store: Path = STORE_OPT, json_out: bool = typer.Option(False, "--json")) -> None:
    """List the runs in a store."""
    with Store.open(store, read_only=True) as st:
        recs = st.list_runs()
    if json_out:
        print_json([r.to_dict() for r in recs])
        return
    t = Table(show_edge=False)
    for c in ("run_id", "name", "status", "created", "dataset", "config sha", "trials"):
        t.add_column(c)
    for r in recs:
        t.add_row(*(Text(c) for c in (r.run_id, r.name, r.status, str(r.created_at)[:19],
                                      r.dataset_version or "", (r.config_sha or "")[:12], str(r.trials))))
    console.print(t)


def export(
    out: Path = typer.Option(..., "-o", "--out", help="Directory for runs/results/query_status .parquet files."),
    run_ids: list[str] = typer.Argument(None, help="Runs to export (default: all)."),
    store: Path = STORE_OPT,
    partitioned: bool = typer.Option(
        False, "--partitioned",
        help="Write a dataset partitioned by run (<table>/run_id=<id>/part-0.parquet, plus runs.parquet) that "
             "DuckDB, pyarrow and Polars read directly and compare --from-parquet reads without importing."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Export the store's tables (all runs, or the given ones) to Parquet."""
    with Store.open(store, read_only=True) as st:
        paths = st.export_parquet(out, run_ids or None, partitioned=partitioned)
    if json_out:
        print_json({k: str(v) for k, v in paths.items()})
        return
    for table, path in paths.items():
        console.print(f"{table}: {path}", markup=False)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("score")(score)
    app.command("runs")(runs)
    app.command("export")(export)
