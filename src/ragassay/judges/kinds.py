"""Judging the items of every validation kind with exactly the requests the judge metrics send.

A validation shares the judge cache with judged runs only if it asks the very question the metric asks, so
the requests are built by the metrics' own code (:func:`ragassay.judges.metrics.first_stage`, under the
config's metrics and rubric criteria) from a judge item made of the labelled texts:

- ``support`` and ``citation``: the support request of faithfulness (:func:`validate.support_request`), the
  context being the item's context or the cited passage alone; a ``supported`` whose quote is not in it counts
  as unsupported, as in the metrics. A local judge (lexical, embedding) can judge these two kinds only.
- ``relevance``: the ``answer_relevance`` request for (question, answer).
- ``criterion``: the correctness request for the line's criterion (its description from the config's
  rubric); a verdict naming another criterion is left out as ``criterion_mismatch``, as the metric leaves
  the answer undefined.
- ``nuggets``: one nugget request per (question, answer), listing the nuggets of its lines in line order; a
  verdict that does not assign exactly those ids leaves all of them out as ``nugget_mismatch``. The call's
  cost and time are shared evenly by its items.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ragassay.errors import InputError
from ragassay.judges.labels import Item
from ragassay.judges.validate import (
    Judged,
    call_accounting,
    call_judge,
    judge_local,
    run_judge,
    validation_run,
)

# The judge metric whose judgement each kind validates: the judge config must score it, or the record
# would carry pins no run judged with that config has.
KIND_METRIC = {"citation": "citations", "relevance": "answer_relevance", "criterion": "correctness",
               "nuggets": "nuggets"}
LOCAL_KINDS = ("support", "citation")
# The claims judge's kinds have their own labels, figures and floor (judges.claims.validate_claims).
CLAIM_KINDS = ("claim_check", "claim_extract")


def check_judge_for_kind(cfg, kind: str, where: str) -> None:
    """Refuse a judge config that cannot validate ``kind``: a local judge for a kind it cannot judge, or an
    LLM judge config whose metrics do not include the metric the kind's judgement is for."""
    if kind in CLAIM_KINDS:
        raise InputError(f"{where}: --kind {kind} validates the claims judge: run `ragassay judge validate-claims "
                         f"--kind {kind}` (judges.claims.validate_claims)")
    if cfg.provider == "local" and kind not in LOCAL_KINDS:
        raise InputError(f"{where}: a local judge ({cfg.model}) judges support and citation only; --kind {kind} "
                         "needs an LLM judge (provider anthropic or openai)")
    metric = KIND_METRIC.get(kind)
    # a local judge always scores faithfulness and the citation metrics, and its pins ignore `metrics`
    if metric is not None and cfg.provider != "local" and metric not in cfg.metrics:
        raise InputError(f"{where}: --kind {kind} validates the judgement behind {metric}, which this judge config "
                         f"does not score (metrics {list(cfg.metrics)}); add {metric} to its metrics, so the record "
                         "has the pins of the runs this config judges")


def _plan(kind: str, run_id: str, items: Sequence[Item], cfg) -> list[tuple[object, list[int]]]:
    """(the metric's request, the indices of the items it answers) for every call a kind's items need."""
    from ragassay.judges.metrics import JudgeItem, first_stage

    groups: dict[tuple, list[int]] = {}
    if kind == "nuggets":
        for k in sorted(range(len(items)), key=lambda k: items[k].line):
            groups.setdefault((items[k].question, items[k].answer), []).append(k)
    else:
        groups = {(k,): [k] for k in range(len(items))}
    judge_items, wanted = [], []
    for idx in groups.values():
        it = items[idx[0]]
        if kind == "nuggets":
            nuggets = tuple((items[k].nugget_id, items[k].nugget_text, bool(items[k].vital)) for k in idx)
            judge_items.append(JudgeItem(it.item_id, 0, it.question, it.answer, "answered", nuggets=nuggets))
            wanted.append("nuggets")
        elif kind == "criterion":
            judge_items.append(JudgeItem(it.item_id, 0, it.question, it.answer, "answered", reference=it.reference))
            wanted.append(f"criterion:{it.criterion}")
        else:
            judge_items.append(JudgeItem(it.item_id, 0, it.question, it.answer, "answered"))
            wanted.append("relevance")
    requests = {(r.key.query_id, r.key.item): r
                for r in first_stage(run_id, judge_items, metrics=cfg.metrics, criteria=cfg.rubric_criteria())}
    return [(requests[(ji.query_id, w)], idx) for ji, w, idx in zip(judge_items, wanted, groups.values(),
                                                                       strict=True)]


def _labels(kind: str, verdict, items: Sequence[Item]) -> tuple[list[str | None], str]:
    """The verdict's label for each item it answers, or Nones with the reason it cannot be used."""
    if kind == "criterion" and verdict.criterion != items[0].criterion:
        return [None], "criterion_mismatch"
    if kind == "nuggets":
        got = {a.nugget_id: a.label for a in verdict.assignments}
        if len(got) != len(verdict.assignments) or set(got) != {it.nugget_id for it in items}:
            return [None] * len(items), "nugget_mismatch"
        return [got[it.nugget_id] for it in items], "ok"
    return [verdict.label], "ok"


def run_kind(cfg, kind: str, items: Sequence[Item], store=None, *,
             progress: Callable[[int, int], None] | None = None) -> tuple[list[Judged], dict]:
    """The judge's answer for every item of ``kind`` (in item order) and the call accounting. An LLM judge's
    calls belong to its validation run in ``store`` (the cache: a rerun pays nothing).

    ``progress(done, total)`` counts the items judged: a local judge reports each item as it is judged; an
    LLM judge's calls run concurrently inside its client, so it reports 0 before them and the total after."""
    from ragassay.judges.config import build_judge

    check_judge_for_kind(cfg, kind, "judge config")
    if progress is not None:
        progress(0, len(items))
    if kind in LOCAL_KINDS:
        if cfg.provider == "local" and cfg.cascade is None and progress is not None:
            # run_judge's own path for a single local judge (judge_local over every item, no client), with the
            # judge counted: judge_local asks it once per item
            judged = judge_local(_Counting(build_judge(cfg, store), len(items), progress), items)
            return judged, call_accounting(judged)
        out = run_judge(cfg, items, store)
        _done(progress, len(items))
        return out
    run_id = validation_run(store, cfg.pins()) if store is not None else "validation"
    plan = _plan(kind, run_id, items, cfg)
    answers, run = call_judge(build_judge(cfg, store), [r for r, _ in plan], store)
    out = [Judged(None, "not_started")] * len(items)  # every item is in exactly one call's group
    for request, idx in plan:
        got = answers.get((request.key.query_id, request.key.item))
        if got is None:
            continue
        j, cost, lat = got
        share = (cost / len(idx), lat / len(idx) if math.isfinite(lat) else math.nan)
        if j.outcome != "ok" or j.verdict is None:
            labels, outcome = [None] * len(idx), j.outcome
        else:
            labels, outcome = _labels(kind, j.verdict, [items[k] for k in idx])
        for k, label in zip(idx, labels, strict=True):
            out[k] = Judged(label, "ok" if label is not None else outcome, cost=share[0], latency_ms=share[1])
    _done(progress, len(items))
    return out, call_accounting(out, run)


class _Counting:
    """A local support judge that reports ``progress(done, total)`` after each ``judge_many`` call."""

    def __init__(self, judge, total: int, progress: Callable[[int, int], None]):
        self._judge, self._total, self._progress, self._done = judge, total, progress, 0

    def judge_many(self, claims, context):
        out = self._judge.judge_many(claims, context)
        self._done += 1
        self._progress(self._done, self._total)
        return out


def _done(progress: Callable[[int, int], None] | None, total: int) -> None:
    if progress is not None:
        progress(total, total)


__all__ = ["CLAIM_KINDS", "KIND_METRIC", "LOCAL_KINDS", "check_judge_for_kind", "run_kind"]
