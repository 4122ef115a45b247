"""Agent and multi-hop metrics (spec §12): outcome, partial credit, silent failure, trajectory diagnostics,
cost per resolved task and retrieval sufficiency per hop.

Pure functions over arrays (one entry per scored (item, trial) row, or flattened per step / per unit with an
``owner`` row index). Undefined values are NaN, never 0. The outcome layer (``task_success``,
``partial_credit``, ``silent_failure``) comes from an independent verifier's verdict, never from the agent's
own claim; the trajectory layer (``tool_call_f1``, ``steps``, ``loops``, ``redundant_query_rate``,
``hop_sufficiency``) is diagnostic: recorded on every run, refused as a gate unless a policy opts in.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class AgentMetric:
    """A stored agent metric: which way is better, whether it lies in [0, 1], whether it is a trajectory
    diagnostic (not a gate by default), and a one-line definition."""

    name: str
    higher_is_better: bool
    bounded: bool
    trajectory: bool
    description: str


_METRICS = (
    AgentMetric("task_success", True, True, False, "verified end state: 1 success, 0 failure (verifier's verdict)"),
    AgentMetric("partial_credit", True, True, False, "sum of weight x subgoal score / sum of weights"),
    AgentMetric("silent_failure", False, True, False,
                "1 when the agent claimed success and the verifier found failure; undefined without a claim"),
    AgentMetric("tool_call_f1", True, True, True, "F1 of the calls made against the item's expected_tools"),
    AgentMetric("steps", False, False, True, "number of steps (tool and retrieval calls)"),
    AgentMetric("loops", False, False, True,
                "calls repeating an earlier identical call with a different step in between"),
    AgentMetric("redundant_query_rate", False, True, True,
                "retrieval steps whose canonical query repeats an earlier one / retrieval steps"),
    AgentMetric("agent_wall_ms", False, False, False, "wall-clock ms: the trace's total, else the sum of steps"),
    AgentMetric("agent_cost", False, False, False, "cost: the trace's cost, else the sum of the steps' costs"),
    AgentMetric("hop_sufficiency", True, True, True,
                "share of the item's hops whose retrieval returned a unit overlapping that hop's evidence"),
)
AGENT_METRICS: dict[str, AgentMetric] = {m.name: m for m in _METRICS}
HOP_PREFIX = "hop_sufficiency@hop"  # per hop: hop_sufficiency@hop1, @hop2, ... (0/1, undefined without that hop)
OUTCOME_METRICS = ("task_success", "partial_credit", "silent_failure")
LOWER_IS_BETTER = frozenset(m.name for m in _METRICS if not m.higher_is_better)
UNBOUNDED = frozenset(m.name for m in _METRICS if not m.bounded)


def is_trajectory(metric: str) -> bool:
    """True for a trajectory diagnostic (spec §12.2: read when the outcome drops, not a pass/fail criterion)."""
    m = AGENT_METRICS.get(metric)
    return (m is not None and m.trajectory) or metric.startswith(HOP_PREFIX)


def cost_per_resolved_task(mean_cost: float, success_rate: float, human_fix_cost: float = 0.0) -> float:
    """(mean cost per trial + (1 - success rate) x human fix cost) / success rate (spec §12 worked example:
    $0.10 at 60% with a $5 fix -> $3.50; $0.30 at 95% -> $0.58). NaN when nothing succeeded or an input is NaN."""
    if not success_rate > 0 or not np.isfinite(mean_cost):
        return float("nan")
    return float((mean_cost + (1.0 - success_rate) * human_fix_cost) / success_rate)


def cost_per_resolved_rows(cost: np.ndarray, success: np.ndarray, human_fix_cost: float = 0.0) -> float:
    """:func:`cost_per_resolved_task` from per-trial rows: mean over rows with a known cost, success rate over
    rows with a verdict (NaN entries are left out of their own mean)."""
    cost, success = np.asarray(cost, dtype=np.float64), np.asarray(success, dtype=np.float64)
    c, s = cost[~np.isnan(cost)], success[~np.isnan(success)]
    if not len(c) or not len(s):
        return float("nan")
    return cost_per_resolved_task(float(c.mean()), float(s.mean()), human_fix_cost)


def partial_credit(owner: np.ndarray, weight: np.ndarray, score: np.ndarray, n_rows: int) -> np.ndarray:
    """Per row: sum(weight x score) / sum(weight) over its sub-goals (``owner`` = row of each sub-goal). A row
    with no sub-goal is NaN here (the caller falls back to task success: one sub-goal, the whole task); a
    NaN score (the verifier could not judge) makes the row NaN."""
    owner = np.asarray(owner, dtype=np.int64)
    w, s = np.asarray(weight, dtype=np.float64), np.asarray(score, dtype=np.float64)
    num = np.bincount(owner, weights=w * s, minlength=n_rows)
    den = np.bincount(owner, weights=w, minlength=n_rows)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def silent_failure(claimed: np.ndarray, success: np.ndarray) -> np.ndarray:
    """Per row: 1 when the agent claimed success (``claimed`` 1) and the verifier found failure, 0 otherwise;
    NaN when the agent made no claim (``claimed`` NaN) or there is no verdict (``success`` NaN). A claim of
    failure is not a silent failure."""
    claimed, success = np.asarray(claimed, dtype=np.float64), np.asarray(success, dtype=np.float64)
    out = ((claimed == 1) & (success == 0)).astype(np.float64)
    return np.where(np.isnan(claimed) | np.isnan(success), np.nan, out)


def canonical_args(arguments: Mapping[str, Any] | None) -> str:
    """The hashing form of a call's arguments: sorted-key compact JSON (None -> ``{}``)."""
    return json.dumps(arguments or {}, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def canonical_query(q: str) -> str:
    """A retrieval query for redundancy: NFKC, case-folded, whitespace runs collapsed, ends stripped."""
    return " ".join(unicodedata.normalize("NFKC", q).casefold().split())


def _codes(values: Sequence[str]) -> np.ndarray:
    first: dict[str, int] = {}
    return np.fromiter(map(first.setdefault, values, range(len(values))), dtype=np.int64, count=len(values))


def tool_call_f1(call_owner: np.ndarray, call_name: Sequence[str], call_args: Sequence[str],
                 exp_owner: np.ndarray, exp_name: Sequence[str], exp_args: Sequence[str | None],
                 n_rows: int) -> np.ndarray:
    """Per row: F1 = 2m / (|calls| + |expected|) of the calls made against the expected tools.

    ``m`` is the size of a maximum one-to-one matching: an expected entry with arguments (canonical JSON,
    :func:`canonical_args`) matches a call of that name with equal arguments; one without (None) matches any
    call of that name. Entries with arguments are matched first, then the name-only ones to the calls left;
    that order gives a maximum matching, since a name-only entry can take any call an argument entry could.
    Precision is m / |calls| and recall m / |expected|; F1 is their harmonic mean. NaN for a row with no
    expected tools; 0 for a row with expected tools and no call."""
    call_owner, exp_owner = np.asarray(call_owner, dtype=np.int64), np.asarray(exp_owner, dtype=np.int64)
    m = np.zeros(n_rows, dtype=np.float64)
    full = [f"{n}\x00{a}" for n, a in zip(call_name, call_args, strict=True)]
    # multiset counts per (row, name, args) and per (row, name) of the calls, consumed as entries match
    by_full: dict[tuple[int, str], int] = {}
    by_name: dict[tuple[int, str], int] = {}
    for r, f, n in zip(call_owner.tolist(), full, call_name, strict=True):
        by_full[(r, f)] = by_full.get((r, f), 0) + 1
        by_name[(r, n)] = by_name.get((r, n), 0) + 1
    order = sorted(range(len(exp_owner)), key=lambda i: exp_args[i] is None)
    for i in order:
        r, n, a = int(exp_owner[i]), exp_name[i], exp_args[i]
        if a is not None:
            k = (r, f"{n}\x00{a}")
            if by_full.get(k, 0) > 0:
                by_full[k] -= 1
                by_name[(r, n)] -= 1
                m[r] += 1
        elif by_name.get((r, n), 0) > 0:
            by_name[(r, n)] -= 1
            m[r] += 1
    n_calls = np.bincount(call_owner, minlength=n_rows).astype(np.float64)
    n_exp = np.bincount(exp_owner, minlength=n_rows).astype(np.float64)
    return np.where(n_exp > 0, 2 * m / np.maximum(n_calls + n_exp, 1), np.nan)


def _previous_same(owner: np.ndarray, code: np.ndarray) -> np.ndarray:
    """Per entry (entries in row order, each row's in step order): the position of the previous entry of the
    same row with the same code, -1 if none."""
    n = len(owner)
    prev = np.full(n, -1, dtype=np.int64)
    if not n:
        return prev
    order = np.lexsort((np.arange(n), code, owner))
    same = (owner[order][1:] == owner[order][:-1]) & (code[order][1:] == code[order][:-1])
    prev[order[1:][same]] = order[:-1][same]
    return prev


def loop_counts(step_owner: np.ndarray, signature: Sequence[str], n_rows: int) -> np.ndarray:
    """Per row: the steps that repeat an identical call (same kind, name, arguments and, for retrieval, query:
    one ``signature`` string per step) whose most recent earlier occurrence is two or more steps back, so a
    different step came between them. An immediate repeat (a retry) is not a loop. 0 for a row without
    steps (an agent that did nothing did not loop)."""
    owner = np.asarray(step_owner, dtype=np.int64)
    prev = _previous_same(owner, _codes(signature))
    pos = np.arange(len(owner))
    loop = (prev >= 0) & (pos - prev >= 2)
    return np.bincount(owner[loop], minlength=n_rows).astype(np.float64)


def redundant_query_rate(ret_owner: np.ndarray, queries: Sequence[str], n_rows: int) -> np.ndarray:
    """Per row: retrieval steps whose :func:`canonical_query` equals an earlier retrieval step's of the same
    row, over the row's retrieval steps; NaN for a row with none."""
    owner = np.asarray(ret_owner, dtype=np.int64)
    prev = _previous_same(owner, _codes([canonical_query(q) for q in queries]))
    red = np.bincount(owner[prev >= 0], minlength=n_rows).astype(np.float64)
    total = np.bincount(owner, minlength=n_rows).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, red / np.maximum(total, 1), np.nan)


def hop_hits(unit_row: np.ndarray, unit_hop: np.ndarray, unit_doc: Sequence[str], unit_start: np.ndarray,
             unit_end: np.ndarray, ev_row: np.ndarray, ev_hop: np.ndarray, ev_doc: Sequence[str],
             ev_start: np.ndarray, ev_end: np.ndarray) -> np.ndarray:
    """Per evidence span: whether some retrieved unit of the same row and hop, in the same document, overlaps
    it (any_overlap: ``unit_start < ev_end and ev_start < unit_end``; an empty span overlaps nothing)."""
    n_ev = len(ev_row)
    hit = np.zeros(n_ev, dtype=bool)
    if not n_ev or not len(unit_row):
        return hit
    keys = [f"{r}\x00{h}\x00{d}" for r, h, d in zip(np.asarray(ev_row).tolist(), np.asarray(ev_hop).tolist(),
                                                      ev_doc, strict=True)]
    ukeys = [f"{r}\x00{h}\x00{d}" for r, h, d in zip(np.asarray(unit_row).tolist(), np.asarray(unit_hop).tolist(),
                                                       unit_doc, strict=True)]
    first: dict[str, int] = {}
    ek = np.fromiter(map(first.setdefault, keys, range(n_ev)), dtype=np.int64, count=n_ev)
    uk = np.fromiter((first.get(k, -1) for k in ukeys), dtype=np.int64, count=len(ukeys))
    ev_start, ev_end = np.asarray(ev_start, dtype=np.int64), np.asarray(ev_end, dtype=np.int64)
    unit_start, unit_end = np.asarray(unit_start, dtype=np.int64), np.asarray(unit_end, dtype=np.int64)
    # pair every unit with every evidence span of its key (keys are small: one row, one hop, one document)
    order = np.argsort(ek, kind="stable")
    sk = ek[order]
    lo = np.searchsorted(sk, uk, side="left")
    hi = np.searchsorted(sk, uk, side="right")
    cnt = np.where(uk >= 0, hi - lo, 0)
    u_idx = np.repeat(np.arange(len(uk)), cnt)
    e_idx = order[np.repeat(lo, cnt) + (np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt))]
    ok = (unit_start[u_idx] < ev_end[e_idx]) & (ev_start[e_idx] < unit_end[u_idx])
    hit[e_idx[ok]] = True
    return hit


def hop_sufficiency(ev_row: np.ndarray, ev_hop: np.ndarray, ev_hit: np.ndarray, n_rows: int,
                    n_hops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(per row: the share of its hops 1..n_hops[row] that are sufficient, NaN for a row without hops;
    per row x hop (width max n_hops): 1/0 for sufficient/not, NaN past the row's hops). A hop is sufficient
    when any of its evidence spans was hit (:func:`hop_hits`)."""
    n_hops = np.asarray(n_hops, dtype=np.int64)
    width = int(n_hops.max(initial=0))
    per = np.zeros((n_rows, max(width, 1)), dtype=np.float64)
    ev_row, ev_hop = np.asarray(ev_row, dtype=np.int64), np.asarray(ev_hop, dtype=np.int64)
    sel = np.asarray(ev_hit, dtype=bool)
    per[ev_row[sel], ev_hop[sel] - 1] = 1.0
    per[np.arange(max(width, 1))[None, :] >= n_hops[:, None]] = np.nan
    per = per[:, :width]
    with np.errstate(invalid="ignore"):
        frac = np.where(n_hops > 0, np.nansum(per, axis=1) / np.maximum(n_hops, 1), np.nan)
    return frac, per


def p95(values: np.ndarray) -> float:
    """The 95th percentile of the defined values, the smallest value with at least 95% of them at or below it
    (numpy's ``inverted_cdf``, which a weighted bootstrap reproduces exactly); NaN with none."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    return float(np.percentile(v, 95, method="inverted_cdf")) if len(v) else float("nan")
