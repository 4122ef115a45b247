"""`ragassay agent run` and `ragassay agent demo`: the reference agent (:mod:`ragassay.pipeline.agent`) on a
golden set, each (item, trial) in a fresh working directory, its traces written and optionally scored and
stored (stage rows as ``ragassay score`` stores them, agent rows from a verifier as ``score --verifier``)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import typer

from ragassay.cli.common import console, esc, print_json, progress
from ragassay.errors import InputError

RUN_KIND = "agent-run"
BUNDLED_VERIFIER = "ragassay.pipeline.agent:verify_answer"
DEMO_HUMAN_FIX_COST = 5.0


def _inputs(corpus: Path | None, golden: Path | None):
    """Corpus and golden set; both default to the bundled multi-hop example (built in memory)."""
    from ragassay.analysis.runner import load_inputs
    from ragassay.pipeline.agent import bundled_agent_dir

    d = bundled_agent_dir()
    if (corpus is None) != (golden is None):
        raise InputError("give --corpus and --golden together, or neither for the bundled multi-hop example")
    return load_inputs(corpus or d / "corpus", golden or d / "golden.yaml")


def _run_dir(out_dir: Path, name: str) -> Path:
    from ragassay.fsio import check_output_dir

    if not name.strip() or any(c in name for c in "/\\") or name in (".", ".."):
        raise InputError(f"--name {name!r}: a run name is one folder name (no slashes)")
    run_dir = out_dir / name
    check_output_dir(run_dir, RUN_KIND)
    return run_dir


def run_into(run_dir: Path, agent, corp, gs, *, trials: int, traces_out: Path | None = None,
             show_progress: bool = True) -> tuple[Path, list]:
    """Run ``agent`` on every golden item ``trials`` times under ``run_dir`` and write the trace file
    (``traces_out``, default ``<run_dir>/traces.jsonl``); returns its path and the traces."""
    from ragassay.fsio import make_dir, mark_output_dir
    from ragassay.pipeline.agent import run_agent
    from ragassay.trace.io import write_traces

    make_dir(run_dir)
    mark_output_dir(run_dir, RUN_KIND)
    with progress(enabled=show_progress) as bar:
        task = bar.add_task(agent.name, total=len(gs.queries) * trials)
        header, traces = run_agent(agent, gs.queries, run_dir, trials=trials, run_name=agent.name,
                                   corpus_digest=corp.digest, dataset_version=gs.dataset_version,
                                   progress=lambda done, total: bar.update(task, completed=done))
    path = traces_out or run_dir / "traces.jsonl"
    write_traces(path, header, traces)
    return path, traces


def score_into(st, path: Path, corp, gs, *, name: str, verifier: str | None, human_fix_cost: float | None):
    """Score a trace file into the open store: stage rows, then agent rows with ``verifier``; returns
    (run_id, scoring info)."""
    from ragassay.analysis.agent import load_verifier, score_agent_into_store
    from ragassay.analysis.runner import score_traces_into_store
    from ragassay.analysis.scoring import ScoringOptions

    ver = load_verifier(verifier) if verifier else None
    opts = ScoringOptions(hit_rule=gs.manifest.get("hit_rule") or "any_overlap",
                          relevance_threshold=gs.manifest.get("relevance_threshold") or 2)
    run_id, info = score_traces_into_store(st, path, corp, gs, options=opts, name=name)
    info = dict(info or {})
    info["agent"] = score_agent_into_store(st, run_id, path, gs, ver, human_fix_cost=human_fix_cost, force=True)
    return run_id, info


def _summary(name: str, traces: list, verdicts: list | None) -> dict:
    n = len(traces)
    claimed = sum(1 for t in traces if t.claimed_success)
    out = {"name": name, "traces": n, "claimed_success": claimed, "answered": sum(t.outcome == "answered"
                                                                                  for t in traces),
           "errors": sum(t.outcome == "error" for t in traces),
           "total_cost": round(sum(t.cost or 0.0 for t in traces), 8),
           "workdirs": sorted({str(Path(t.meta["workdir"]).parent.parent) for t in traces})}
    if verdicts is not None:
        out["verified_success"] = sum(1 for v in verdicts if v["success"])
        out["silent_failures"] = sum(1 for t, v in zip(traces, verdicts, strict=True)
                                     if t.claimed_success and not v["success"])
    return out


def agent_run(
    config: str = typer.Option("cheap", "--config", help="A bundled agent configuration (cheap, careful) or a "
                               "YAML file."),
    golden: Path = typer.Option(None, "--golden", help="Built golden set dir or authoring file (default: the "
                                "bundled multi-hop example; give --corpus with it)."),
    corpus: Path = typer.Option(None, "--corpus", help="Corpus dir or .jsonl (default: the bundled example's)."),
    trials: int = typer.Option(1, "--trials", min=1, help="Trials per item, each in its own fresh working "
                               "directory."),
    out_dir: Path = typer.Option(Path("agent-runs"), "--out-dir", help="Runs go to OUT_DIR/NAME/ (traces.jsonl "
                                 "and work/<query>/<trial>/)."),
    name: str = typer.Option(None, "--name", help="Run name (default: the config's name)."),
    out: Path = typer.Option(None, "--out", help="Trace file (default: OUT_DIR/NAME/traces.jsonl)."),
    store: Path = typer.Option(None, "--store", help="Also score the traces and store the run in this DuckDB "
                               "file (stage rows and agent rows)."),
    verifier: str = typer.Option(None, "--verifier", help="module:function deciding each trace's end state "
                                 "(default with the bundled example: its answer.txt check)."),
    human_fix_cost: float = typer.Option(None, "--human-fix-cost", help="USD to fix one failed task by hand "
                                         "(pinned with the run for cost per resolved task)."),
    json_out: bool = typer.Option(False, "--json", help="Print the run summary as JSON."),
) -> None:
    """Run the reference agent on a golden set, each (item, trial) in a fresh working directory."""
    from ragassay.fsio import check_output_file
    from ragassay.pipeline.agent import ReferenceAgent, load_agent_config, verdicts
    from ragassay.trace.io import read_traces

    cfg = load_agent_config(config)
    name = name or cfg.name
    run_dir = _run_dir(out_dir, name)
    if out is not None:
        check_output_file(out, "traces", overwrite_ok=lambda p: read_traces(p)[0] is not None)
    if verifier is None and golden is None:
        verifier = BUNDLED_VERIFIER
    if store is None and human_fix_cost is not None:
        raise InputError("--human-fix-cost is pinned with a stored run; give --store too")
    if verifier:
        from ragassay.analysis.agent import load_verifier

        load_verifier(verifier)  # an unimportable verifier is an input error before anything runs
    corp, gs = _inputs(corpus, golden)
    agent = ReferenceAgent(cfg, corp)
    path, traces = run_into(run_dir, agent, corp, gs, trials=trials, traces_out=out, show_progress=not json_out)
    ver = verdicts(traces, gs) if verifier == BUNDLED_VERIFIER else None
    summary = _summary(name, traces, ver)
    summary["traces_path"] = str(path)
    if store is not None:
        from ragassay.store import Store

        with Store.open(store) as st:
            run_id, info = score_into(st, path, corp, gs, name=name, verifier=verifier, human_fix_cost=human_fix_cost)
        summary.update(run_id=run_id, store=str(store), agent_scoring=info.get("agent"))
    if json_out:
        print_json(summary)
        return
    console.print(f"[bold]{esc(name)}[/]: {summary['traces']} trace(s) in {esc(path)}; claimed success "
                  f"{summary['claimed_success']}, total cost ${summary['total_cost']:.4f}")
    if "verified_success" in summary:
        console.print(f"  verified success {summary['verified_success']} of {summary['traces']}, silent failures "
                      f"{summary['silent_failures']} (claimed success, end state wrong)", markup=False)
    console.print(f"  working directories under {run_dir / 'work'}", markup=False)
    if store is not None:
        console.print(f"  stored as run {summary['run_id']} in {store}; see `ragassay agent report "
                      f"{summary['run_id']} --store {store}`", markup=False)


def agent_demo(
    out_dir: Path = typer.Option(None, "--out-dir", help="Keep the runs and the store here (default: a "
                                 "temporary folder, removed at the end)."),
    trials: int = typer.Option(1, "--trials", min=1, help="Trials per item."),
    human_fix_cost: float = typer.Option(DEMO_HUMAN_FIX_COST, "--human-fix-cost", help="USD to fix one failed "
                                         "task by hand."),
    json_out: bool = typer.Option(False, "--json", help="Print the agent report as JSON."),
) -> None:
    """Both bundled configurations (cheap, careful) on the bundled multi-hop example: task success, cost per
    resolved task and sufficiency per hop, with intervals, and the paired deltas (`agent report`'s figures)."""
    from ragassay.analysis.agent import agent_report
    from ragassay.cli.agent_text import print_agent_report
    from ragassay.fsio import check_output_dir, make_dir, mark_output_dir
    from ragassay.pipeline.agent import ReferenceAgent, load_agent_config
    from ragassay.store import Store

    if not human_fix_cost >= 0:
        raise InputError(f"--human-fix-cost {human_fix_cost}: give a cost >= 0")
    tmp = None
    if out_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="ragassay-agent-demo-")
        root = Path(tmp.name)
    else:
        check_output_dir(out_dir, "agent-demo")
        root = out_dir
        mark_output_dir(make_dir(root), "agent-demo")
    try:
        corp, gs = _inputs(None, None)
        store_path = root / "agent-demo.duckdb"
        if store_path.exists():
            store_path.unlink()  # our own earlier demo store (the folder carries the agent-demo marker)
        run_ids = []
        with Store.open(store_path) as st:
            for name in ("cheap", "careful"):
                agent = ReferenceAgent(load_agent_config(name), corp)
                run_dir = root / name
                check_output_dir(run_dir, RUN_KIND)
                path, _ = run_into(run_dir, agent, corp, gs, trials=trials, show_progress=not json_out)
                run_id, _ = score_into(st, path, corp, gs, name=name, verifier=BUNDLED_VERIFIER,
                                       human_fix_cost=human_fix_cost)
                run_ids.append(run_id)
            rep = agent_report(st, run_ids, human_fix_cost=human_fix_cost)
        if json_out:
            print_json(rep)
            return
        print_agent_report(rep)
        if out_dir is not None:
            console.print(f"store: {store_path}; read failures with `ragassay transcripts careful --store "
                          f"{store_path}`", markup=False)
    finally:
        if tmp is not None:
            tmp.cleanup()


def register(agent_group: typer.Typer) -> None:
    agent_group.command("run")(agent_run)
    agent_group.command("demo")(agent_demo)
