"""The text of the agent commands: ``score``'s agent-scoring summary and the agent report (``agent report``,
``agent demo``), kept apart from the command modules so each can print it without importing the other."""

from __future__ import annotations

from ragassay.cli.common import console, esc

# ragassay.metrics.agent.HOP_PREFIX, spelled here so that printing needs no numpy (a test holds them equal)
HOP_PREFIX = "hop_sufficiency@hop"

_LABELS = {"task_success": "task success", "partial_credit": "partial credit",
           "silent_failure": "silent-failure rate", "cost_per_resolved_task": "cost per resolved task",
           "p95_wall_ms": "p95 wall-clock", "agent_cost": "mean cost per run", "tool_call_f1": "tool-call F1", "steps": "steps", "loops": "loops",
           "redundant_query_rate": "redundant-query rate", "hop_sufficiency": "hop sufficiency (per item)"}


def print_agent_scoring(info: dict) -> None:
    """The one-paragraph summary of a run's agent scoring (``score``'s output)."""
    console.print(f"agent rows: {info['agent_rows']} (query, trial) rows, metrics {', '.join(info['agent_metrics'])}; "
                  f"{info['verifier_errors']} verifier error(s) (outcome undefined, not a failure), "
                  f"{info['agent_missing_traces']} missing trace(s) (scored as failed), "
                  f"{info['unscored_subgoals']} subgoal(s) the verifier did not score (credited 0), "
                  f"{info['no_claim']} trace(s) without a success claim (silent failure undefined)", markup=False)
    for line in info["verifier_error_examples"]:
        console.print(f"  {line}", style="yellow", markup=False)


def _usd(x: float) -> str:
    # cents from ten cents up; below that, four decimals, so a run's $0.0120 and $0.0252 stay apart
    return f"${x:,.2f}" if abs(x) >= 0.1 else f"${x:.4f}"


def _fmt(name: str, x: float | None) -> str:
    if x is None:
        return "undefined"
    if name == "cost_per_resolved_task" or name == "agent_cost":
        return _usd(x)
    if name == "p95_wall_ms":
        return f"{x:,.0f} ms"
    if name in ("steps", "loops"):
        return f"{x:.2f}"
    return f"{x:.1%}"


def _fmt_delta(name: str, x: float | None) -> str:
    if x is None:
        return "undefined"
    if name in ("cost_per_resolved_task", "agent_cost"):
        return f"{'+' if x >= 0 else '-'}{_usd(abs(x))}"
    if name == "p95_wall_ms":
        return f"{x:+,.0f} ms"
    if name in ("steps", "loops"):
        return f"{x:+.2f}"
    return f"{100 * x:+.1f} pp"


def _label(name: str) -> str:
    if name.startswith(HOP_PREFIX):
        return f"hop {name[len(HOP_PREFIX):]} sufficiency"
    return _LABELS.get(name, name)


def _fig_line(name: str, f: dict) -> str:
    label = _label(name)
    if f["value"] is None:
        return f"  {label}: undefined ({f['undefined']} rows undefined, n {f['n']})"
    ci = ("interval undefined" if f["lo"] is None
          else f"[{_fmt(name, f['lo'])}, {_fmt(name, f['hi'])}]")
    extra = f", {f['undefined_draws']} undefined resamples" if f["undefined_draws"] else ""
    und = f", {f['undefined']} undefined" if f["undefined"] else ""
    return f"  {label}: {_fmt(name, f['value'])} {ci} (n {f['n']}{und}{extra})"


def print_agent_report(rep: dict) -> None:
    """The agent report (:func:`ragassay.analysis.agent.agent_report`) as text."""
    pct = f"{rep['confidence']:.0%}"
    console.print(f"agent report: {pct} percentile bootstrap over items ({rep['n_resamples']} resamples, seed "
                  f"{rep['seed']}); human fix cost ${rep['human_fix_cost']:,.2f} per failed task", markup=False)
    for d in rep.get("pin_differences") or ():
        console.print(f"  rebaselined: {d['pin']} {d['a']} ({d['run_a']}) vs {d['b']} ({d['run_b']})", style="yellow",
                      markup=False)
    for r in rep["runs"]:
        ver = r["verifier"]
        who = "no verifier (outcome metrics not scored)" if not ver else \
            f"verifier {ver.get('spec') or ver.get('cmd')}"
        console.print(f"[bold]{esc(r['name'])}[/] ({r['run_id']}): {r['n_items']} items, {r['n_rows']} "
                      f"(item, trial) rows, {esc(who)}, {r['verifier_errors'] or 0} verifier error(s)")
        for name, f in r["headline"].items():
            console.print(_fig_line(name, f), markup=False)
        for h in r["hops"]:
            console.print(_fig_line(f"{HOP_PREFIX}{h['hop']}", h), markup=False)
        if r["diagnostics"]:
            console.print("  diagnostics (not gates):", markup=False)
            for name, f in r["diagnostics"].items():
                console.print("  " + _fig_line(name, f), markup=False)
    d = rep["delta"]
    if d is None:
        return
    a, b = (r["name"] for r in rep["runs"])
    console.print(f"[bold]paired: {esc(b)} minus {esc(a)}[/] over {d['n_items']} shared items "
                  f"({d['only_a']} only in the first, {d['only_b']} only in the second, left out)")
    diag = []
    for name, f in d["figures"].items():
        label = _label(name)
        ci = "interval undefined" if f["lo"] is None else \
            f"[{_fmt_delta(name, f['lo'])}, {_fmt_delta(name, f['hi'])}]"
        line = (f"  {label}: {_fmt(name, f['a'])} -> {_fmt(name, f['b'])}, delta {_fmt_delta(name, f['delta'])} "
                f"{ci}")
        if f["diagnostic"]:
            diag.append(line)
        else:
            console.print(line, markup=False)
    if diag:
        console.print("  diagnostics (not gates):", markup=False)
        for line in diag:
            console.print("  " + line, markup=False)
