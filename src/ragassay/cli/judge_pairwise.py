"""`ragassay judge pairwise A B`: judge the answers of two stored runs question by question with a pairwise
judge, in both orders (spec §11.2–§11.3), and print B's preference score, the win rates and the position
bias; whether the judge is validated for the pairwise kind is printed beside them. Nothing is stored in
``results``; every call is in ``judge_calls`` (the cache) under a run of its own (source ``judge:pairwise``)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.text import Text

from ragassay.cli import checks
from ragassay.cli.common import console, print_json
from ragassay.errors import InputError

SOURCE = "judge:pairwise"


def _pct(s: dict | None) -> str:
    if not s or s.get("value") is None:
        return "undefined"
    lo, hi = s.get("ci_low"), s.get("ci_high")
    ci = "no interval" if lo is None else f"{lo:.1%}, {hi:.1%}"
    return f"{s['value']:.1%} [{ci}]"


def _comparable(st, a: str, b: str) -> tuple:
    """The two run records, refused when their golden-set versions differ (the only pin a pairwise
    comparison rests on: a query id must name the same question in both runs)."""
    from ragassay.analysis.compare import check_comparable

    rec_a, rec_b = check_comparable(st, [a, b], pins=("dataset_version",), roles=("A", "B"),
                                    hint="pairwise judging pairs the runs on (query_id, trial): judge runs scored "
                                         "on the same golden set")
    if rec_a.run_id == rec_b.run_id:
        raise InputError(f"A and B are the same run ({rec_a.name}, {rec_a.run_id}); give two runs to compare")
    for rec in (rec_a, rec_b):
        if rec.status == "running":
            raise InputError(f"run {rec.name} ({rec.run_id}) is still running; judge it once it has finished")
    return rec_a, rec_b


def _traces_path(rec, given: Path | None) -> Path:
    if given is not None:
        return given
    path = rec.traces_path()
    if path is not None:
        return path
    raise InputError(f"run {rec.name} ({rec.run_id}) recorded no traces (run it with --keep-traces or "
                     "--traces-dir DIR, or score a trace file); pass the traces with --traces")


def _load_traces(st, rec, given: Path | None, role: str, golden):
    from ragassay.judges.score import check_traces_of
    from ragassay.trace.io import read_traces

    path = _traces_path(rec, given)
    if not path.is_file():
        raise InputError(f"{path}: the traces of run {role} ({rec.name}) are not there; pass them with "
                         f"--traces-{role.lower()}")
    header, traces, problems = read_traces(path)
    check_traces_of(st, rec, traces, header, f"the traces {path} given for run {role}", golden=golden)
    unknown = sorted({t.query_id for t in traces} - set(golden.query_ids))
    if unknown:
        raise InputError(f"{len(unknown)} trace(s) of run {role} name queries not in the golden set (first: "
                         f"{unknown[:3]}); pass the runs' golden set with --golden")
    return {(t.query_id, t.trial): t for t in traces}, len(problems)


def _side_problem(trace, role: str) -> str | None:
    if trace is None:
        return f"{role}_missing"
    if trace.outcome != "answered":
        return f"{role}_{trace.outcome}"
    if not (trace.answer and trace.answer.strip()):
        return f"{role}_empty_answer"
    return None


def _pairs(golden, by_a: dict, by_b: dict):
    """The pairs to judge and the left-out count per reason (a side missing, abstained, refused, errored or
    answered with nothing: the judge cannot prefer such a pair on content)."""
    from collections import Counter

    from ragassay.judges.pairwise import Pair, golden_context

    pairs, left_out = [], Counter()
    for key in sorted(set(by_a) | set(by_b)):
        ta, tb = by_a.get(key), by_b.get(key)
        why = [w for w in (_side_problem(ta, "a"), _side_problem(tb, "b")) if w]
        if why:
            left_out["+".join(why)] += 1
            continue
        q = golden[key[0]]
        pairs.append(Pair(key[0], key[1], q.question or ta.question or "", ta.answer, tb.answer, golden_context(q)))
    return pairs, dict(sorted(left_out.items()))


def _pairwise_run(st, rec_a, rec_b) -> str:
    """The store run that owns the calls of this (A, B) comparison, reused on every rerun."""
    from ragassay.store import RunRecord

    for rec in st.list_runs():
        extra = rec.extra or {}
        if rec.source == SOURCE and extra.get("run_a") == rec_a.run_id and extra.get("run_b") == rec_b.run_id:
            return rec.run_id
    run_id = st.create_run(RunRecord(name=f"judge-pairwise {rec_a.name} vs {rec_b.name}", source=SOURCE,
                                     dataset_version=rec_a.dataset_version,
                                     extra={"purpose": "pairwise judge calls", "run_a": rec_a.run_id,
                                            "run_b": rec_b.run_id}))
    st.finish_run(run_id, "complete")
    return run_id


def pairwise(
    run_a: str = typer.Argument(..., help="Run A (run_id, unique prefix or name)."),
    run_b: str = typer.Argument(..., help="Run B; the preference score is B's (1 = B always better)."),
    judge_config: Path = typer.Option(..., "--judge", help="Judge config YAML (an LLM judge: provider anthropic "
                                                           "or openai)."),
    store: Path = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file."),
    traces_a: Path = typer.Option(None, "--traces-a", help="Run A's traces JSONL (default: where it recorded "
                                                           "them)."),
    traces_b: Path = typer.Option(None, "--traces-b", help="Run B's traces JSONL (default: where it recorded "
                                                           "them)."),
    corpus: Path = typer.Option(None, "--corpus", help="Corpus the runs used (default: bundled)."),
    golden: Path = typer.Option(None, "--golden", help="Golden set the runs used (default: bundled)."),
    resamples: int = typer.Option(2_000, "--resamples", help="Bootstrap resamples (100 to 1,000,000)."),
    seed: int = typer.Option(0, "--seed"),
    confidence: float = typer.Option(0.95, "--confidence"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Judge runs A and B answer by answer with a pairwise judge, each pair in both orders (A first, then B
    first): B's win rate, A's, ties, inconsistent pairs (the orders disagree), B's preference score with a
    bootstrap CI over queries, the position bias (first-slot share, order disagreement = the noise floor),
    pairs left out by reason and the cost line. A pair judged before is answered from the store."""
    checks.refuse(checks.resamples(resamples), checks.seed(seed))
    if not 0 < confidence < 1:
        raise InputError(f"--confidence must be in (0, 1), got {confidence}")
    from ragassay.judges.config import build_judge, load_judge_config
    from ragassay.judges.pairwise import pairwise_pins

    cfg = load_judge_config(judge_config)
    pins = pairwise_pins(cfg)  # a local judge is refused here, before anything else is read
    if not store.is_file():
        raise InputError(f"{store}: no such store; pass the store that holds runs {run_a} and {run_b} with --store")
    from ragassay.analysis.runner import load_inputs
    from ragassay.judges.cost import cost_line
    from ragassay.judges.pairwise import judge_pairs, matching_pairwise_validation, preference_figures
    from ragassay.judges.providers import JudgeStopped
    from ragassay.store import Store

    with Store.open(store) as st:
        rec_a, rec_b = _comparable(st, run_a, run_b)
        _, gs = load_inputs(corpus, golden)
        if gs.dataset_version != rec_a.dataset_version:
            raise InputError(f"runs {rec_a.name} and {rec_b.name} were scored on dataset {rec_a.dataset_version}, "
                             f"but the golden set given is {gs.dataset_version}; pass their golden set with --golden")
        by_a, bad_a = _load_traces(st, rec_a, traces_a, "A", gs)
        by_b, bad_b = _load_traces(st, rec_b, traces_b, "B", gs)
        pairs, left_out = _pairs(gs, by_a, by_b)
        run_id = _pairwise_run(st, rec_a, rec_b)
        results, run = judge_pairs(build_judge(cfg, st), run_id, pairs)
        if run.stopped is not None:
            raise JudgeStopped(f"judge run stopped: {run.stopped}; {len(run.judgements)} call(s) made, "
                               f"{len(run.not_started)} not started, ${run.spend:.4f} spent. Finished calls are "
                               "stored: rerun (with a higher spend_cap) to pay only for the rest")
        cost = cost_line([j.record for j in run.judgements], len(pairs), st)
        validation = matching_pairwise_validation(st, pins)
    figures = preference_figures(results, [r.key for r in results], n_resamples=resamples, seed=seed,
                                 confidence=confidence)
    out = {
        "run_a": {"run_id": rec_a.run_id, "name": rec_a.name},
        "run_b": {"run_id": rec_b.run_id, "name": rec_b.name},
        "judge": pins, "validation": validation, "pairing": "(query_id, trial)", "clusters": "query_id",
        "n_keys": len(pairs) + sum(left_out.values()), "n_judged_pairs": len(pairs), **figures,
        "left_out": left_out, "trace_problems": {"a": bad_a, "b": bad_b},
        "cost": cost.to_dict(), "n_resamples": resamples, "confidence": confidence, "seed": seed,
        "calls_run_id": run_id,
        "pairs": [{"query_id": r.key, "trial": r.trial, "a_first": r.order_ab, "b_first": r.order_ba,
                   "preference": r.preference, "reason": r.reason} for r in results],
    }
    if json_out:
        print_json(out)
        return
    _print(out, cost.text())


def _print(out: dict, cost_text: str) -> None:
    v = out["validation"]
    mark = "" if v["status"] == "validated" else " [unvalidated judge]"
    console.print(Text(f"pairwise {out['run_a']['name']} (A) vs {out['run_b']['name']} (B), judged by "
                       f"{out['judge']['judge_model']} in both orders: {out['n']} pairs with a preference of "
                       f"{out['n_keys']} (query, trial) pairs"))
    console.print(Text(f"judge {v['status']} for pairwise preferences: {v['detail']}"))
    r = out["rates"]
    if out["n"]:
        console.print(Text(f"B wins {r['b_win']:.1%}, A wins {r['a_win']:.1%}, ties {r['tie']:.1%}, inconsistent "
                           f"{r['inconsistent']:.1%} (the two orders disagree)"))
    p = out["preference"]
    p_text = "" if p.get("p_value") is None else f", p {p['p_value']:.3g} against no preference"
    if p["value"] is None:
        pref = "undefined"
    else:
        ci = "no interval" if p["ci_low"] is None else f"{p['ci_low']:.3f}, {p['ci_high']:.3f}"
        pref = f"{p['value']:.3f} [{ci}]"
    console.print(Text(f"preference for B: {pref}{p_text} (B win 1, tie or inconsistent 0.5, A win 0; 0.5 = no "
                       f"preference; CI over {p['n_clusters']} queries){mark}"))
    pb = out["position_bias"]
    first, dis = pb["first_slot_rate"], pb["disagreement"]
    console.print(Text(f"position bias: slot 1 took {_pct(first)} of {first['non_tie_verdicts']} non-tie verdicts "
                       f"(50% = none); the orders disagree on {_pct(dis)} of pairs (the noise floor)"))
    if out["left_out"]:
        console.print(Text("left out, not judged: " + ", ".join(f"{k} {n}" for k, n in out["left_out"].items())))
    if out["undefined"]:
        console.print(Text("judged without a preference: " + ", ".join(f"{k} {n}" for k, n in
                                                                        out["undefined"].items())))
    bad = out["trace_problems"]
    if bad["a"] or bad["b"]:
        console.print(Text(f"warning: malformed trace records skipped: {bad['a']} in A, {bad['b']} in B"))
    console.print(Text(cost_text), soft_wrap=True)
