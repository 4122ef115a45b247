"""Agent scoring (spec §12): verifiers, agent result rows, and the per-run agent report.

A verifier decides each trace's end state independently of the agent's own claim:

- a Python callable ``f(trace, item) -> bool | {"success": bool, "subgoals": {id: bool | float in [0, 1]}}``,
  named ``module:function`` or ``path/to/file.py:function`` (:func:`load_verifier`);
- a command (:class:`CommandVerifier`), run once per trace with ``RAGASSAY_TRACE`` (the trace as JSON),
  ``RAGASSAY_ITEM`` (the golden item as JSON) and, when the trace's ``meta`` has it, ``RAGASSAY_WORKDIR``;
  exit 0 is success, exit 1-125 failure; a timeout, a signal, an exit above 125 (126/127: not runnable / not
  found; 128+N: killed by signal N, as a shell reports it) or a stdout that starts with ``{`` and is not JSON
  is a verifier *error*. A stdout that is a JSON object may carry ``{"subgoals": {id: score}}``.

A verifier that raises, returns something else, or names a sub-goal the item does not have is a counted
error with its message; that row's outcome metrics are undefined (never a failure, never a success).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragassay.errors import InputError
from ragassay.golden import GoldenSet
from ragassay.golden.schema import GoldenQuery
from ragassay.metrics import agent as am
from ragassay.trace import Trace

AGENT_METRIC_VERSION = "ragassay-agent-metrics-1"
DEFAULT_TIMEOUT_S = 60.0
LOOP_RULE = "identical (kind, name, arguments, query) call whose previous occurrence is >= 2 steps back"


@dataclass(frozen=True)
class Verdict:
    """One verifier outcome: ``success`` 1.0 / 0.0 (NaN on error), sub-goal scores, and the error message."""

    success: float
    subgoals: dict[str, float] = field(default_factory=dict)
    error: str | None = None


def _error(msg: str) -> Verdict:
    return Verdict(math.nan, {}, msg)


def _subgoal_scores(raw: Any, item: GoldenQuery) -> dict[str, float] | str:
    """Validated sub-goal scores, or the error message."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        return f"'subgoals' must be a mapping of subgoal id to a score, got {type(raw).__name__}"
    known = {g.id for g in item.subgoals}
    out = {}
    for k, v in raw.items():
        if k not in known:
            return f"subgoal {k!r} is not one of item {item.query_id}'s subgoals {sorted(known)}"
        if isinstance(v, bool):
            out[k] = float(v)
        elif isinstance(v, int | float) and 0 <= v <= 1:
            out[k] = float(v)
        else:
            return f"subgoal {k!r}: score {v!r} is not true/false or a number in [0, 1]"
    return out


def _verdict_of(result: Any, item: GoldenQuery) -> Verdict:
    if isinstance(result, bool) or isinstance(result, np.bool_):
        return Verdict(float(bool(result)))
    if isinstance(result, dict):
        success = result.get("success")
        if not isinstance(success, bool):
            return _error(f"the verifier's result needs 'success': true or false, got {success!r}")
        extra = sorted(set(result) - {"success", "subgoals"})
        if extra:
            return _error(f"unknown key(s) {extra} in the verifier's result; allowed: success, subgoals")
        sub = _subgoal_scores(result.get("subgoals"), item)
        if isinstance(sub, str):
            return _error(sub)
        return Verdict(float(success), sub)
    return _error(f"the verifier returned {type(result).__name__}; return a bool or "
                  "{'success': bool, 'subgoals': {id: score}}")


class PythonVerifier:
    """A Python callable ``f(trace, item)``; see the module docstring."""

    def __init__(self, func: Callable[[Trace, GoldenQuery], Any], spec: str):
        self.func, self.spec = func, spec

    def __call__(self, trace: Trace, item: GoldenQuery) -> Verdict:
        try:
            result = self.func(trace, item)
        except Exception as exc:  # a broken verifier is a counted error, not a failed task
            return _error(f"the verifier raised {type(exc).__name__}: {exc}")
        return _verdict_of(result, item)

    def pins(self) -> dict:
        """The spec and the sha256 of the verifier's module file, when it has one (a changed verifier is a
        different instrument)."""
        import inspect

        try:
            source = inspect.getsourcefile(self.func)
            sha = hashlib.sha256(Path(source).read_bytes()).hexdigest() if source else None
        except (TypeError, OSError):
            sha = None
        return {"kind": "python", "spec": self.spec, "source_sha256": sha}


def load_verifier(spec: str) -> PythonVerifier:
    """``module:function`` or ``path/to/file.py:function`` -> a :class:`PythonVerifier`."""
    mod_name, sep, func_name = spec.rpartition(":")
    if not sep or not mod_name or not func_name:
        raise InputError(f"--verifier {spec!r}: write module:function or path/to/file.py:function")
    try:
        if mod_name.endswith(".py"):
            path = Path(mod_name)
            if not path.is_file():
                raise InputError(f"--verifier {spec!r}: {path} not found")
            ms = importlib.util.spec_from_file_location(f"_ragassay_verifier_{path.stem}", path)
            module = importlib.util.module_from_spec(ms)
            ms.loader.exec_module(module)
        else:
            if "" not in sys.path and os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(mod_name)
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"--verifier {spec!r}: cannot import {mod_name} ({type(exc).__name__}: {exc})") from exc
    func = getattr(module, func_name, None)
    if not callable(func):
        raise InputError(f"--verifier {spec!r}: {mod_name} has no callable {func_name!r}")
    return PythonVerifier(func, spec)


class CommandVerifier:
    """A shell command run per trace; see the module docstring for the contract."""

    def __init__(self, cmd: str, timeout_s: float = DEFAULT_TIMEOUT_S):
        if not cmd.strip():
            raise InputError("--verifier-cmd is empty; give the command that checks one trace's end state")
        if not timeout_s > 0:
            raise InputError(f"--verifier-timeout {timeout_s}: give a number of seconds > 0")
        self.cmd, self.timeout_s = cmd, float(timeout_s)

    def __call__(self, trace: Trace, item: GoldenQuery) -> Verdict:
        with tempfile.TemporaryDirectory(prefix="ragassay-verify-") as tmp:
            tpath, ipath = Path(tmp) / "trace.json", Path(tmp) / "item.json"
            tpath.write_text(trace.model_dump_json(), encoding="utf-8")
            ipath.write_text(json.dumps(item.model_dump(mode="json"), ensure_ascii=False), encoding="utf-8")
            env = {**os.environ, "RAGASSAY_TRACE": str(tpath), "RAGASSAY_ITEM": str(ipath)}
            env.pop("RAGASSAY_WORKDIR", None)
            workdir = trace.meta.get("workdir")
            if isinstance(workdir, str) and workdir:
                env["RAGASSAY_WORKDIR"] = workdir
            try:
                proc = subprocess.run(self.cmd, shell=True, env=env, capture_output=True, text=True,
                                      timeout=self.timeout_s, check=False)
            except subprocess.TimeoutExpired:
                return _error(f"the verifier command timed out after {self.timeout_s:g} s")
            except OSError as exc:
                return _error(f"the verifier command could not start ({exc})")
        rc = proc.returncode
        if rc < 0 or rc > 125:
            tail = (proc.stderr or "").strip().splitlines()[-1:] or [""]
            # a shell reports a child killed by signal N as exit 128 + N
            why = (f"killed by signal {-rc}" if rc < 0 else f"exit {rc}, signal {rc - 128}" if rc > 128
                   else f"exit {rc}")
            return _error(f"the verifier command crashed ({why}) {tail[0]}".rstrip())
        out = (proc.stdout or "").strip()
        sub: dict[str, float] = {}
        if out.startswith("{"):
            try:
                data = json.loads(out)
            except json.JSONDecodeError as exc:
                return _error(f"the verifier command's stdout is not JSON ({exc.msg})")
            got = _subgoal_scores(data.get("subgoals"), item)
            if isinstance(got, str):
                return _error(got)
            sub = got
        return Verdict(1.0 if rc == 0 else 0.0, sub)

    def pins(self) -> dict:
        return {"kind": "command", "cmd": self.cmd, "timeout_s": self.timeout_s}


Verifier = PythonVerifier | CommandVerifier


@dataclass
class AgentScore:
    """Agent result rows as columns (store ``results`` columns) and what could not be scored, counted."""

    columns: dict[str, list]
    metrics: list[str]
    n_rows: int
    n_missing: int
    verifier_errors: list[str]
    n_unscored_subgoals: int
    n_no_claim: int

    def info(self) -> dict:
        return {"agent_rows": self.n_rows, "agent_missing_traces": self.n_missing,
                "verifier_errors": len(self.verifier_errors), "verifier_error_examples": self.verifier_errors[:10],
                "unscored_subgoals": self.n_unscored_subgoals, "no_claim": self.n_no_claim,
                "agent_metrics": self.metrics}


def _step_signature(s) -> str:
    return json.dumps([s.kind, s.name, am.canonical_args(s.arguments), s.query], ensure_ascii=False)


def _hop_of_steps(trace: Trace) -> list[tuple[int, Any]]:
    """(hop, step) of each retrieval step: its ``hop``, else its 1-based place among the retrieval steps."""
    out = []
    k = 0
    for s in trace.steps:
        if s.kind == "retrieval":
            k += 1
            out.append((s.hop if s.hop is not None else k, s))
    return out


def score_agent(golden: GoldenSet, traces: Sequence[Trace], verifier: Verifier | None = None, *,
                trials: Sequence[int] | None = None) -> AgentScore:
    """Agent rows for every (golden query, trial): outcome metrics when a ``verifier`` is given, trajectory
    and cost metrics always. A golden query with no trace for a trial scores task success and partial credit
    0 (a missing run is a failure) and the rest undefined, and is counted."""
    by_key = {t.key: t for t in traces if t.query_id in golden}
    trial_ids = sorted(set(trials) if trials is not None else ({t.trial for t in traces} or {0}))
    keys = [(q.query_id, tr) for tr in trial_ids for q in golden.queries]
    rts = [by_key.get(k) for k in keys]
    items = [golden[q] for q, _ in keys]
    n = len(keys)
    missing = np.fromiter((rt is None for rt in rts), dtype=bool, count=n)
    values: dict[str, np.ndarray] = {}
    errors: list[str] = []
    unscored = 0
    if verifier is not None:
        success = np.where(missing, 0.0, np.nan)
        sg_owner, sg_weight, sg_score = [], [], []
        for i, (rt, item) in enumerate(zip(rts, items, strict=True)):
            if rt is None:
                sg_owner += [i] * len(item.subgoals)
                sg_weight += [g.weight for g in item.subgoals]
                sg_score += [0.0] * len(item.subgoals)
                continue
            v = verifier(rt, item)
            if v.error is not None:
                errors.append(f"query {rt.query_id} trial {rt.trial}: {v.error}")
                continue
            success[i] = v.success
            if not v.subgoals:
                # a bare verdict on an item with subgoals: partial credit falls back to it (counted below)
                unscored += len(item.subgoals)
                continue
            for g in item.subgoals:
                sg_owner.append(i)
                sg_weight.append(g.weight)
                got = v.subgoals.get(g.id)
                unscored += got is None
                sg_score.append(0.0 if got is None else got)
        partial = am.partial_credit(np.asarray(sg_owner, dtype=np.int64), np.asarray(sg_weight),
                                    np.asarray(sg_score), n)
        has_sub = np.zeros(n, dtype=bool)
        has_sub[np.asarray(sg_owner, dtype=np.int64)] = True
        partial = np.where(has_sub & ~np.isnan(success), partial, success)
        claimed = np.asarray([math.nan if rt is None or rt.claimed_success is None else float(rt.claimed_success)
                              for rt in rts], dtype=np.float64)
        values["task_success"], values["partial_credit"] = success, partial
        values["silent_failure"] = am.silent_failure(claimed, success)
    present = [(i, rt) for i, rt in enumerate(rts) if rt is not None]
    steps = [(i, s) for i, rt in present for s in rt.steps]
    s_owner = np.fromiter((i for i, _ in steps), dtype=np.int64, count=len(steps))
    exp = [(i, e) for i, it in enumerate(items) if rts[i] is not None for e in it.expected_tools]
    values["tool_call_f1"] = am.tool_call_f1(
        s_owner, [s.name for _, s in steps], [am.canonical_args(s.arguments) for _, s in steps],
        np.fromiter((i for i, _ in exp), dtype=np.int64, count=len(exp)), [e.name for _, e in exp],
        [None if e.arguments is None else am.canonical_args(e.arguments) for _, e in exp], n)
    values["steps"] = np.where(missing, np.nan, np.bincount(s_owner, minlength=n).astype(np.float64))
    values["loops"] = np.where(missing, np.nan, am.loop_counts(s_owner, [_step_signature(s) for _, s in steps], n))
    ret = [(i, s) for i, s in steps if s.kind == "retrieval"]
    values["redundant_query_rate"] = am.redundant_query_rate(
        np.fromiter((i for i, _ in ret), dtype=np.int64, count=len(ret)), [s.query or "" for _, s in ret], n)
    values["agent_wall_ms"] = np.asarray([_wall(rt) for rt in rts], dtype=np.float64)
    values["agent_cost"] = np.asarray([_cost(rt) for rt in rts], dtype=np.float64)
    frac, per = _hops(items, rts)
    values["hop_sufficiency"] = frac
    for h in range(per.shape[1]):
        values[f"{am.HOP_PREFIX}{h + 1}"] = per[:, h]

    metrics = list(values)
    cols: dict[str, list] = {"query_id": [], "trial": [], "metric": [], "value": []}
    for m in metrics:
        cols["query_id"] += [q for q, _ in keys]
        cols["trial"] += [t for _, t in keys]
        cols["metric"] += [m] * n
        cols["value"] += [float(v) for v in values[m]]
    k = len(metrics)
    cols["stratum"] = [it.stratum for it in items] * k
    cols["trace_id"] = [rt.trace_id if rt else None for rt in rts] * k
    cols["cost"] = [None if math.isnan(c) else float(c) for c in values["agent_cost"]] * k
    cols["latency_ms"] = [None if math.isnan(w) else float(w) for w in values["agent_wall_ms"]] * k
    no_claim = sum(1 for rt in rts if rt is not None and rt.claimed_success is None)
    return AgentScore(cols, metrics, n, int(missing.sum()), errors, unscored, no_claim)


def _wall(rt: Trace | None) -> float:
    if rt is None:
        return math.nan
    if "total" in rt.durations_ms:
        return float(rt.durations_ms["total"])
    d = [s.duration_ms for s in rt.steps if s.duration_ms is not None]
    return float(sum(d)) if d else math.nan


def _cost(rt: Trace | None) -> float:
    if rt is None:
        return math.nan
    if rt.cost is not None:
        return float(rt.cost)
    c = [s.cost for s in rt.steps if s.cost is not None]
    return float(sum(c)) if c else math.nan


def _hops(items: Sequence[GoldenQuery], rts: Sequence[Trace | None]) -> tuple[np.ndarray, np.ndarray]:
    n = len(items)
    n_hops = np.fromiter((it.hops if rt is not None else 0 for it, rt in zip(items, rts, strict=True)),
                         dtype=np.int64, count=n)
    ev = [(i, e) for i, it in enumerate(items) if n_hops[i] for e in it.evidence if e.hop and e.grade >= 1]
    units = [(i, h, u) for i, rt in enumerate(rts) if rt is not None and n_hops[i]
             for h, s in _hop_of_steps(rt) for u in s.units]
    hit = am.hop_hits(
        np.fromiter((i for i, _, _ in units), dtype=np.int64, count=len(units)),
        np.fromiter((h for _, h, _ in units), dtype=np.int64, count=len(units)),
        [u.doc_id for _, _, u in units], np.fromiter((u.start for _, _, u in units), dtype=np.int64, count=len(units)),
        np.fromiter((u.end for _, _, u in units), dtype=np.int64, count=len(units)),
        np.fromiter((i for i, _ in ev), dtype=np.int64, count=len(ev)),
        np.fromiter((e.hop for _, e in ev), dtype=np.int64, count=len(ev)), [e.doc_id for _, e in ev],
        np.fromiter((e.start for _, e in ev), dtype=np.int64, count=len(ev)),
        np.fromiter((e.end for _, e in ev), dtype=np.int64, count=len(ev)))
    frac, per = am.hop_sufficiency(np.fromiter((i for i, _ in ev), dtype=np.int64, count=len(ev)),
                                   np.fromiter((e.hop for _, e in ev), dtype=np.int64, count=len(ev)), hit, n, n_hops)
    # the missing-trace rows are undefined (nothing was retrieved, and nothing was run)
    return frac, per


def needs_agent_scoring(traces: Sequence[Trace], verifier: Verifier | None) -> bool:
    return verifier is not None or any(t.steps for t in traces)


def _mentions_agent_fields(path: Path) -> bool:
    """Whether the file holds the text ``"steps"`` anywhere (one byte scan; a mention inside a string only
    costs the full read that then finds no step)."""
    import mmap

    with path.open("rb") as fh:
        if path.stat().st_size == 0:
            return False
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return mm.find(b'"steps"') >= 0


def _verifier_sha(pins: dict) -> str:
    return hashlib.sha256(json.dumps(pins, sort_keys=True).encode()).hexdigest()


def score_agent_into_store(store, run_id: str, traces_path: str | Path, golden: GoldenSet,
                           verifier: Verifier | None = None, *, human_fix_cost: float | None = None,
                           force: bool = False) -> dict | None:
    """Add a stored run's agent rows (read from its JSONL trace file) and record the agent pins in the run's
    ``extra["agent"]``. Returns the counts (:meth:`AgentScore.info`), or None when the traces carry no steps
    and no verifier is given (a plain RAG run is left as it was)."""
    from ragassay.trace import read_traces

    path = Path(traces_path)
    if path.is_dir() or path.suffix.lower() == ".parquet":
        raise InputError(f"{path}: agent scoring reads JSONL traces (the Parquet trace format does not carry "
                         "agent steps); score the JSONL file")
    if not force and verifier is None and not _mentions_agent_fields(path):
        return None  # a plain RAG file is not read a second time
    _, traces, _ = read_traces(path)
    if not force and not needs_agent_scoring(traces, verifier):
        return None
    rec = store.get_run(run_id)
    trials = sorted({t.trial for t in traces}) or [0]
    scored = score_agent(golden, traces, verifier, trials=trials)
    status = rec.status
    store.resume_run(rec.run_id)
    try:
        store.write_batch(rec.run_id, scored.columns)
    finally:
        store.finish_run(rec.run_id, status if status in ("complete", "failed") else "complete")
    pins = {"metric_version": AGENT_METRIC_VERSION, "loop_rule": LOOP_RULE,
            "verifier": verifier.pins() if verifier is not None else None,
            "human_fix_cost": human_fix_cost, **scored.info()}
    if verifier is not None:
        pins["verifier_sha"] = _verifier_sha(verifier.pins())
    store.update_run_extra(rec.run_id, {"agent": pins})
    return scored.info()


# ---------------------------------------------------------------------------------------------- the report

HEADLINE = ("task_success", "partial_credit", "silent_failure", "agent_cost", "cost_per_resolved_task",
            "p95_wall_ms")
DIAGNOSTICS = ("tool_call_f1", "steps", "loops", "redundant_query_rate", "hop_sufficiency")
# the stored metric whose defined rows a derived figure counts
_BASIS = {"cost_per_resolved_task": "task_success", "p95_wall_ms": "agent_wall_ms"}
_CHUNK = 256  # resamples per weight matrix: memory stays at _CHUNK x items


@dataclass
class _RunData:
    run_id: str
    name: str
    queries: np.ndarray  # the run's query ids, sorted
    row_query: np.ndarray  # per stored (query, trial) row: index into queries
    values: dict[str, np.ndarray]  # metric -> per row (NaN = undefined)
    pins: dict


def _load(store, ref: str) -> _RunData:
    rec = store.get_run(ref)
    have = set(store.metrics(rec.run_id))
    names = [m for m in (*am.AGENT_METRICS, *sorted(h for h in have if h.startswith(am.HOP_PREFIX))) if m in have]
    if not names:
        raise InputError(f"run {rec.name} ({rec.run_id}) has no agent rows; score its traces with "
                         "`ragassay score TRACES --golden G --verifier module:function` (or traces with steps)")
    wide = store.results_wide(rec.run_id, names)
    queries, row_query = np.unique(wide.query_ids.astype(str), return_inverse=True)
    return _RunData(rec.run_id, rec.name, queries, row_query,
                    {m: wide.values[:, j] for j, m in enumerate(names)}, dict((rec.extra or {}).get("agent") or {}))


def _weighted_mean(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per resample (rows of ``w``, weights per row of ``x``): the mean of the defined entries of ``x``."""
    d = ~np.isnan(x)
    num = w[:, d] @ x[d]
    den = w[:, d].sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def _weighted_p95(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per resample: :func:`~ragassay.metrics.agent.p95` of ``x`` with each entry repeated by its weight."""
    d = np.flatnonzero(~np.isnan(x))
    if not len(d):
        return np.full(len(w), np.nan)
    order = d[np.argsort(x[d], kind="stable")]
    cum = np.cumsum(w[:, order], axis=1)
    total = cum[:, -1]
    idx = np.argmax(cum >= 0.95 * total[:, None] - 1e-9 * np.maximum(total[:, None], 1), axis=1)
    return np.where(total > 0, x[order][idx], np.nan)


def _figures(r: _RunData, fix_cost: float) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """name -> f(row weights (B, rows)) -> (B,) values, for every figure this run can give."""
    v = r.values
    out: dict[str, Callable[[np.ndarray], np.ndarray]] = {}
    for m in ("task_success", "partial_credit", "silent_failure"):
        if m in v:
            out[m] = (lambda x: lambda w: _weighted_mean(w, x))(v[m])
    if "task_success" in v and "agent_cost" in v:
        s, c = v["task_success"], v["agent_cost"]

        def cpr(w, s=s, c=c):
            rate, cost = _weighted_mean(w, s), _weighted_mean(w, c)
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(rate > 0, (cost + (1 - rate) * fix_cost) / np.where(rate > 0, rate, 1), np.nan)
        out["cost_per_resolved_task"] = cpr
    if "agent_wall_ms" in v:
        out["p95_wall_ms"] = (lambda x: lambda w: _weighted_p95(w, x))(v["agent_wall_ms"])
    for m in (*DIAGNOSTICS, "agent_cost", *sorted(k for k in v if k.startswith(am.HOP_PREFIX))):
        if m in v:
            out[m] = (lambda x: lambda w: _weighted_mean(w, x))(v[m])
    return out


def _interval(draws: np.ndarray, confidence: float) -> tuple[float | None, float | None, int]:
    ok = draws[np.isfinite(draws)]
    if not len(ok):
        return None, None, len(draws)
    a = (1 - confidence) / 2
    lo, hi = np.percentile(ok, [100 * a, 100 * (1 - a)])
    return float(lo), float(hi), int(len(draws) - len(ok))


def _num(x: float) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


def _resampled(runs: Sequence[_RunData], queries: np.ndarray, stats: Sequence[dict], n_resamples: int, seed: int):
    """Per run and figure, the point value and the resampled values, with one shared item resample (paired)."""
    from ragassay.stats.bootstrap import resample_counts

    k = len(queries)
    maps = [np.searchsorted(queries, r.queries) for r in runs]  # the run's query index -> shared index
    rows = [m[r.row_query] for m, r in zip(maps, runs, strict=True)]
    point = [{name: float(f(np.ones((1, len(row))))[0]) for name, f in st.items()}
             for st, row in zip(stats, rows, strict=True)]
    draws = [{name: [] for name in st} for st in stats]
    rng = np.random.default_rng(seed)
    done = 0
    while done < n_resamples:
        b = min(_CHUNK, n_resamples - done)
        w_items = resample_counts(rng, k, b) if k else np.zeros((b, 0))
        for st, row, dr in zip(stats, rows, draws, strict=True):
            w = w_items[:, row]
            for name, f in st.items():
                dr[name].append(f(w))
        done += b
    return point, [{name: np.concatenate(x) for name, x in dr.items()} for dr in draws]


def agent_report(store, refs: Sequence[str], *, human_fix_cost: float | None = None, n_resamples: int = 2000,
                 seed: int = 0, confidence: float = 0.95, rebaseline: bool = False) -> dict:
    """Per run: task success, partial credit, silent-failure rate, cost per resolved task, p95 wall-clock and
    sufficiency per hop, each with a percentile bootstrap interval over items (queries; a query's trials move
    together); trajectory diagnostics apart. With two runs, the paired deltas (second minus first) over the
    items both runs scored, one shared item resample, including the delta of cost per resolved task.
    ``human_fix_cost``: None takes each run's pinned value (``score --human-fix-cost``), else 0. Two runs must
    be comparable as ``compare`` checks them, the agent verifier's pins included (unless ``rebaseline``; the
    differences are then listed in ``pin_differences``)."""
    if not 1 <= len(refs) <= 2:
        raise InputError("agent report takes one run, or two runs to compare (baseline first)")
    diffs: list[dict] = []
    if len(refs) == 2:
        from ragassay.analysis.compare import comparable_runs
        from ragassay.metrics.agent import OUTCOME_METRICS

        diffs = comparable_runs(store, list(refs), list(OUTCOME_METRICS), rebaseline=rebaseline)[1]
    if human_fix_cost is not None and not (math.isfinite(human_fix_cost) and human_fix_cost >= 0):
        raise InputError(f"--human-fix-cost {human_fix_cost}: give a cost >= 0 (USD per failed task fixed by hand)")
    if not 0 < confidence < 1:
        raise InputError(f"confidence {confidence}: give a value in (0, 1), e.g. 0.95")
    runs = [_load(store, ref) for ref in refs]
    fix = [human_fix_cost if human_fix_cost is not None else float(r.pins.get("human_fix_cost") or 0.0)
           for r in runs]
    if len(runs) == 2 and fix[0] != fix[1]:
        raise InputError(f"the runs were scored with different human fix costs ({fix[0]:g}, {fix[1]:g}); pass "
                         "--human-fix-cost to compare them on one")
    stats = [_figures(r, f) for r, f in zip(runs, fix, strict=True)]
    out_runs = []
    for r, st, f in zip(runs, stats, fix, strict=True):
        point, draws = _resampled([r], r.queries, [st], n_resamples, seed)
        out_runs.append(_run_block(r, point[0], draws[0], f, confidence))
    delta = None
    if len(runs) == 2:
        a, b = runs
        common = np.intersect1d(a.queries, b.queries)
        subs = [_subset(r, common) for r in runs]
        sub_stats = [_figures(s, f) for s, f in zip(subs, fix, strict=True)]
        names = [n for n in sub_stats[0] if n in sub_stats[1]]
        sub_stats = [{n: st[n] for n in names} for st in sub_stats]
        point, draws = _resampled(subs, common, sub_stats, n_resamples, seed)
        figs = {}
        for n in names:
            d = point[1][n] - point[0][n]
            lo, hi, und = _interval(draws[1][n] - draws[0][n], confidence)
            figs[n] = {"a": _num(point[0][n]), "b": _num(point[1][n]), "delta": _num(d), "lo": lo, "hi": hi,
                       "undefined_draws": und, "diagnostic": n in DIAGNOSTICS}
        delta = {"n_items": int(len(common)), "only_a": int(len(np.setdiff1d(a.queries, common))),
                 "only_b": int(len(np.setdiff1d(b.queries, common))), "figures": figs}
    return {"kind": "agent-report", "human_fix_cost": fix[0], "confidence": confidence, "n_resamples": n_resamples,
            "seed": seed, "runs": out_runs, "delta": delta, "rebaselined": bool(diffs), "pin_differences": diffs}


def _subset(r: _RunData, keep: np.ndarray) -> _RunData:
    sel = np.isin(r.queries[r.row_query], keep)
    q, inv = np.unique(r.queries[r.row_query][sel], return_inverse=True)
    return _RunData(r.run_id, r.name, q, inv, {m: x[sel] for m, x in r.values.items()}, r.pins)


def _run_block(r: _RunData, point: dict, draws: dict, fix: float, confidence: float) -> dict:
    def fig(n):
        base = r.values.get(_BASIS.get(n, n))
        lo, hi, und = _interval(draws[n], confidence)
        defined = int((~np.isnan(base)).sum()) if base is not None else 0
        return {"value": _num(point[n]), "lo": lo, "hi": hi, "n": defined,
                "undefined": int(len(r.row_query) - defined), "undefined_draws": und}

    headline = {n: fig(n) for n in HEADLINE if n in point}
    hops = [{"hop": int(n[len(am.HOP_PREFIX):]), **fig(n)} for n in point if n.startswith(am.HOP_PREFIX)]
    diagnostics = {n: fig(n) for n in DIAGNOSTICS if n in point}
    return {"run_id": r.run_id, "name": r.name, "n_items": int(len(r.queries)), "n_rows": int(len(r.row_query)),
            "human_fix_cost": fix, "verifier": r.pins.get("verifier"),
            "verifier_errors": r.pins.get("verifier_errors"), "headline": headline,
            "hops": sorted(hops, key=lambda h: h["hop"]), "diagnostics": diagnostics}
