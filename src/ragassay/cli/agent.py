"""`ragassay agent`: agent runs (spec §12). ``agent report`` prints a stored run's outcome figures (task
success, partial credit, silent failures, cost per resolved task, p95 wall-clock, sufficiency per hop) with
bootstrap intervals, paired deltas for two runs, and the trajectory diagnostics apart. The verifier options of
``ragassay score`` are resolved here too (:func:`agent_scorer`). Other agent commands (``agent run``,
``agent demo``) live in ``ragassay.cli.agent_run`` and join this group when that module exists."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import typer

from ragassay.cli.common import print_json
from ragassay.errors import InputError

agent = typer.Typer(help="Agent runs: report outcome metrics, cost per resolved task and trajectory "
                         "diagnostics.", no_args_is_help=True)


def agent_scorer(traces: Sequence[Path], verifier: str | None, verifier_cmd: str | None, timeout_s: float,
                 human_fix_cost: float | None) -> Callable:
    """Check ``score``'s agent options before any work and return ``add(store, run_id, path, golden, info)``,
    which adds the run's agent rows (when its traces carry steps or a verifier is given) and puts the counts
    in ``info["agent"]``."""
    if verifier and verifier_cmd:
        raise InputError("give --verifier or --verifier-cmd, not both")
    if human_fix_cost is not None and not (math.isfinite(human_fix_cost) and human_fix_cost >= 0):
        raise InputError(f"--human-fix-cost {human_fix_cost}: give a cost >= 0 (USD per failed task fixed by hand)")
    parquet = [p for p in traces if p.is_dir() or p.suffix.lower() == ".parquet"]
    if (verifier or verifier_cmd) and parquet:
        raise InputError(f"{parquet[0]}: a verifier scores JSONL traces (the Parquet trace format does not carry "
                         "agent steps); score the JSONL file")
    ver = None
    if verifier or verifier_cmd:  # (a plain score does not import the agent module before it starts reading)
        from ragassay.analysis.agent import CommandVerifier, load_verifier

        ver = load_verifier(verifier) if verifier else CommandVerifier(verifier_cmd, timeout_s)

    def add(store, run_id: str, path: Path, golden, info: dict | None) -> None:
        from ragassay.analysis.agent import score_agent_into_store

        if Path(path).is_dir() or Path(path).suffix.lower() == ".parquet":
            return
        got = score_agent_into_store(store, run_id, path, golden, ver, human_fix_cost=human_fix_cost)
        if got is not None and info is not None:
            info["agent"] = got
    return add


@agent.command("report")
def report(
    runs: list[str] = typer.Argument(..., help="One run, or two (baseline first) for paired deltas."),
    store: Path = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file."),
    human_fix_cost: float = typer.Option(None, "--human-fix-cost", help="USD to fix one failed task by hand "
                                         "(default: the value pinned at scoring, else 0)."),
    n_resamples: int = typer.Option(2000, "--resamples", min=100, help="Bootstrap resamples."),
    seed: int = typer.Option(0, "--seed", min=0),
    confidence: float = typer.Option(0.95, "--confidence", help="Interval coverage, in (0, 1)."),
    rebaseline: bool = typer.Option(False, "--rebaseline", help="Compare two runs whose pins differ (golden set, "
                                    "corpus, verifier, ...); the output names the pins."),
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """Task success, partial credit, silent failures, cost per resolved task, p95 wall-clock and per-hop
    sufficiency with bootstrap intervals (paired deltas for two runs); trajectory diagnostics apart."""
    from ragassay.analysis.agent import agent_report
    from ragassay.cli.agent_text import print_agent_report
    from ragassay.store import Store

    if not store.is_file():
        raise InputError(f"{store}: no such store; score agent traces first (`ragassay score TRACES --golden G "
                         "--verifier module:function --store S`)")
    with Store.open(store, read_only=True) as st:
        rep = agent_report(st, runs, human_fix_cost=human_fix_cost, n_resamples=n_resamples, seed=seed,
                           confidence=confidence, rebaseline=rebaseline)
    if json_out:
        print_json(rep)
        return
    print_agent_report(rep)


def register(app: typer.Typer) -> None:
    if importlib.util.find_spec("ragassay.cli.agent_run") is not None:
        from ragassay.cli import agent_run

        agent_run.register(agent)
    app.add_typer(agent, name="agent")
