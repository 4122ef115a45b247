"""Judge a stored run: read its traces, judge every answer, store the judge metrics and the judge's pins.

The metric rows join the run's other rows by (run, query, trial); the calls are in ``judge_calls`` (the
cache); the pins go on the run (``judge_model``, ``rubric_sha`` and ``extra["judge"]`` with the prompt sha)
so ``compare`` and ``gate`` can refuse runs judged differently. A run is judged under one judge: judging it
again needs ``resume`` and the same pins (a rerun pays only for what is not in the store yet).

A config with a ``cascade`` routes the support judgements through it (:mod:`ragassay.judges.routing`): the
local judgements it makes are stored in ``judge_calls`` with the metric rows, and the count per route in the
judge summary (``cascade``) and the cost line.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragassay.errors import InputError, PinMismatchError
from ragassay.judges.config import JudgeConfig, build_judge, build_tier1, judge_settings
from ragassay.judges.cost import CostLine, cost_line
from ragassay.judges.metrics import JudgedMetrics, items_from, judge_items
from ragassay.judges.providers import JudgeStopped

# (judge, config) -> a context manager giving the client an LLM judge's calls go through
OpenClient = Callable[[Any, JudgeConfig], AbstractContextManager[Any]]
# progress(done, total): called as the items of a judging loop are judged
Progress = Callable[[int, int], None]

PIN_KEYS = ("judge_model", "rubric_sha", "prompt_sha", "settings")


@dataclass
class JudgeSummary:
    run_id: str
    run_name: str
    pins: dict[str, Any]
    judged: JudgedMetrics
    cost: CostLine | None
    items: int
    cascade: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        means = self.judged.means()
        return {
            "run_id": self.run_id, "run_name": self.run_name, "pins": self.pins, "items": self.items,
            "metrics": {m: {"mean": v, "defined": d, "undefined": u} for m, (v, d, u) in means.items()},
            "undefined": [{"metric": m, "reason": r, "count": n}
                          for (m, r), n in sorted(self.judged.undefined.items())],
            "calls": dict(sorted(self.judged.calls.items())),
            "quote_not_found": self.judged.quote_not_found,
            "cost": None if self.cost is None else self.cost.to_dict(),
            "cascade": self.cascade,
        }


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return None if math.isnan(obj) else obj
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


class CountedItems(Sequence):
    """``items`` that call ``progress(done, total)`` as a loop walks them: handing out item k counts the k
    before it as done, and the end of the walk counts them all. The local judges' per-item loops take a
    sequence and walk it once, so they drive a counting bar without a callback of their own. The caller
    reports 0 before the work starts; a count is reported once and never goes back, whoever walks again."""

    def __init__(self, items: Sequence, progress: Progress):
        self._items, self._progress, self._done = items, progress, 0

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i):
        return self._items[i]

    def __iter__(self):
        for k, item in enumerate(self._items):
            self.report(k)
            yield item
        self.report(len(self._items))

    def report(self, done: int) -> None:
        if done > self._done:
            self._done = done
            self._progress(done, len(self._items))


def counted(items: Sequence, progress: Progress | None) -> Sequence:
    """``items`` reporting to ``progress`` as they are walked (:class:`CountedItems`), or as they are without one."""
    return items if progress is None else CountedItems(items, progress)


def check_traces_of(store, rec, traces: Sequence, header=None, where: str = "the traces", golden=None) -> None:
    """Refuse traces that are not run ``rec``'s own: a header whose config sha or golden-set version differs
    from the run's, a trace whose (query, trial) the run has no rows for or whose trace_id differs from the one
    stored with that (query, trial), or (with ``golden``) a trace whose outcome or answer does not give the
    ``error`` / ``refused`` / ``answer_f1`` the run stored for it — two runs of one config share their trace
    ids, so only the answers tell them apart. Judging another run's traces would store its numbers as this
    run's without a word."""
    problems = []
    if header is not None:
        if rec.config_sha and header.config_sha and header.config_sha != rec.config_sha:
            problems.append(f"config sha {header.config_sha[:12]} in the trace header, {rec.config_sha[:12]} on the "
                            "run")
        if rec.dataset_version and header.dataset_version and header.dataset_version != rec.dataset_version:
            problems.append(f"golden-set version {header.dataset_version} in the trace header, "
                            f"{rec.dataset_version} on the run")
    stored = store.trace_ids(rec.run_id)
    unknown = [t for t in traces if (t.query_id, t.trial) not in stored]
    other = [t for t in traces if stored.get((t.query_id, t.trial)) not in (None, t.trace_id)]
    if unknown:
        t = unknown[0]
        problems.append(f"{len(unknown)} trace(s) for (query, trial) pairs the run has no rows for (first: "
                        f"{t.query_id} trial {t.trial})")
    if other:
        t = other[0]
        problems.append(f"{len(other)} trace(s) whose trace_id differs from the run's (first: {t.query_id} trial "
                        f"{t.trial}: {t.trace_id} in the file, {stored[(t.query_id, t.trial)]} stored)")
    if golden is not None and not problems:
        problems += _answers_disagree(store, rec, traces, golden)
    if problems:
        raise InputError(f"{where} are not run {rec.name}'s ({rec.run_id}): " + "; ".join(problems)
                         + ". Pass the traces this run was scored from (see `ragassay runs --json` for its source)")


def _answers_disagree(store, rec, traces: Sequence, golden) -> list[str]:
    """The traces whose outcome or answer does not reproduce the run's stored ``error``, ``refused`` and
    ``answer_f1``: error = outcome error or missing, refused = outcome refused, and (for an answered trace of
    an answerable query with a reference answer) SQuAD token F1 against the reference through scoring's own
    array code (:func:`~ragassay.metrics.generation.token_f1_codes`). A stored value that is undefined is not
    compared. Whole-run arrays: it runs on every ``judge RUN``."""
    from ragassay.metrics.generation import answer_tokens, token_f1_codes
    from ragassay.trace.schema import first_index_codes

    have = set(store.metrics(rec.run_id))
    wanted = [m for m in ("error", "refused", "answer_f1") if m in have]
    if not wanted or not traces:
        return []
    n = len(traces)
    rows = store.results(rec.run_id, wanted, columns=["query_id", "trial", "metric", "value"], ordered=False)
    col = {m: j for j, m in enumerate(wanted)}
    # one row of `by_key` per stored (query, trial), at the index of its first result row; a trace whose
    # (query, trial) the run has no row for reads the NaN row at the end
    key, first = first_index_codes(list(zip(rows["query_id"].to_pylist(), rows["trial"].to_pylist(), strict=True)))
    by_key = np.full((rows.num_rows + 1, len(wanted)), np.nan)
    by_key[key, [col[m] for m in rows["metric"].to_pylist()]] = rows["value"].to_numpy(zero_copy_only=False)
    at = np.fromiter(map(first.get, ((t.query_id, t.trial) for t in traces), itertools.repeat(rows.num_rows)),
                     dtype=np.int64, count=n)
    stored = by_key[at]
    outcome = [t.outcome for t in traces]
    want = np.full((n, len(wanted)), np.nan)
    if "error" in col:
        want[:, col["error"]] = [o in (None, "error") for o in outcome]
    if "refused" in col:
        want[:, col["refused"]] = [o == "refused" for o in outcome]
    if "answer_f1" in col:
        refs = [(k, q.reference_answer) for k, t in enumerate(traces) if t.outcome == "answered"
                and (q := golden[t.query_id] if t.query_id in golden else None) is not None
                and q.answerable and q.reference_answer]
        if refs:
            scored = np.fromiter((k for k, _ in refs), dtype=np.int64, count=len(refs))
            gold, gold_counts = answer_tokens([r for _, r in refs])
            pred, pred_counts = answer_tokens([traces[k].answer or "" for k, _ in refs])
            codes, _ = first_index_codes(np.concatenate([gold, pred]).tolist())
            want[scored, col["answer_f1"]] = token_f1_codes(codes[len(gold):], pred_counts, codes[:len(gold)],
                                                            gold_counts)[0]
    with np.errstate(invalid="ignore"):
        off = np.abs(stored - want) > 1e-9  # False wherever either side is undefined
    bad = np.flatnonzero(off.any(axis=1))
    if not bad.size:
        return []
    k = int(bad[0])
    m = int(np.argmax(off[k]))
    t = traces[k]
    return [f"{bad.size} trace(s) whose answer or outcome does not give the scores the run stored (first: "
            f"{t.query_id} trial {t.trial}: {wanted[m]} {stored[k, m]:.4g} stored, {want[k, m]:.4g} from the "
            "file) — traces of another run of the same config share its trace ids"]


def judged_inputs(store, rec, traces: Sequence, header, traces_label: str, golden, corpus):
    """The checks every judge of a stored run makes before a call (the run finished, of this golden set, the
    traces its own) and the text of a packed unit (its own, else the corpus span): ``unit_text(unit)``."""
    if rec.status == "running":
        raise InputError(f"run {rec.name} ({rec.run_id}) is still running; judge it once it has finished")
    if rec.dataset_version != golden.dataset_version:
        raise InputError(f"run {rec.name} was scored on dataset {rec.dataset_version}, but the golden set given "
                         f"is {golden.dataset_version}; pass the run's golden set with --golden")
    unknown = sorted({t.query_id for t in traces} - set(golden.query_ids))
    if unknown:
        raise InputError(f"{len(unknown)} trace(s) name queries not in the golden set (first: {unknown[:3]}); "
                         "pass the run's golden set with --golden")
    check_traces_of(store, rec, traces, header, traces_label, golden=golden)

    def unit_text(u) -> str:
        if u.text is not None:
            return u.text
        if u.doc_id not in corpus:
            raise InputError(f"packed unit {u.unit_id} names doc {u.doc_id!r}, which is not in the corpus; pass "
                             "the run's corpus with --corpus")
        return corpus[u.doc_id].text[u.start:u.end]

    return unit_text


def judge_stored_run(store, run_ref: str, traces: Sequence, golden, corpus, cfg: JudgeConfig, *,
                     resume: bool = False, open_client: OpenClient | None = None, header=None,
                     traces_label: str = "the traces", progress: Progress | None = None) -> JudgeSummary:
    """Judge the answers of stored run ``run_ref`` from its ``traces`` and store the judge metrics.

    ``progress(done, total)`` counts the answers judged, total the answers: a local judge (and a local
    cascade) reports each answer as it is judged; an LLM judge's calls run concurrently inside its client in
    two rounds, so it reports 0 before them and the total once they are done.

    ``open_client(judge, cfg)`` says where an LLM judge's calls are made: a context manager giving the
    client they go through (by default the judge itself, here). Executors sit above judges, so the caller
    hands theirs in: :func:`ragassay.analysis.judging.executor_client` (``"ray[:ADDRESS]"``) spreads the
    calls over a Ray cluster's workers behind one shared
    :class:`~ragassay.judges.providers.ray_limiter.RayLimiter` (the config's ``concurrency`` and
    ``spend_cap`` hold for the whole cluster), while this process keeps the cache lookups and writes every
    call record, so the stored rows are the local ones. A local judge (lexical, embedding) always runs here.

    Raises ``InputError`` for a run judged before (without ``resume``), ``PinMismatchError`` for a run judged
    under other pins, and ``JudgeStopped`` when the spend cap or a fatal provider error stopped the calls
    (finished calls are stored; nothing is written to ``results`` until every item is judged)."""
    rec = store.get_run(run_ref)
    pins = cfg.pins()
    before = (rec.extra or {}).get("judge")
    if before and not resume:
        raise InputError(f"run {rec.name} ({rec.run_id}) was already judged by {before.get('judge_model')}; "
                         "pass --resume to finish or re-score it under the same judge (paid calls come from "
                         "the store)")
    if before:
        was = {**{k: before.get(k) for k in PIN_KEYS}, "settings": judge_settings(before)}
        differ = [k for k in PIN_KEYS if was[k] != pins[k]]
        if differ:
            raise PinMismatchError(
                f"run {rec.name} was judged under other pins ({'; '.join(f'{k} {was[k]} -> {pins[k]}' for k in differ)}); "
                "--resume continues the same judge only. A run holds one judge's metrics: score the traces into a "
                "new run to judge them differently (paid calls stay in the store either way)")
    unit_text = judged_inputs(store, rec, traces, header, traces_label, golden, corpus)
    items = items_from(traces, golden, unit_text)
    if progress is not None:
        progress(0, len(items))
    judge = build_judge(cfg, store)
    tier1 = build_tier1(cfg)
    routing = None
    if cfg.provider == "local" and tier1 is not None:
        from ragassay.judges.routing import route_local

        judged, routing = route_local(rec.run_id, counted(items, progress), tier1, judge, lo=cfg.cascade.band.lo,
                                      hi=cfg.cascade.band.hi, numeric=cfg.numeric)
        cost = cost_line([], len(items), cascade=routing.cost(store))
    elif cfg.provider == "local":
        from ragassay.judges.local import local_judge_items

        judged = local_judge_items(counted(items, progress), judge, numeric=cfg.numeric)
        cost = None
    else:
        judged, routing = _judge_on(open_client, judge, cfg, rec.run_id, items, tier1, pins["judge_model"])
        cost = cost_line([j.record for j in judged.judgements], len(items), store,
                         cascade=None if routing is None else routing.cost(store))
        if judged.stopped is not None:
            raise JudgeStopped(
                f"judge run stopped: {judged.stopped}; {sum(judged.calls.values())} call(s) planned, "
                f"{judged.calls.get('not_started', 0)} not started, ${judged.spend:.4f} spent. Finished calls "
                f"are stored: rerun with --resume (and a higher spend_cap) to pay only for the rest")
        if progress is not None:
            progress(len(items), len(items))
        records = [j.record for j in judged.judgements]
        if records and all(r.outcome == "error" for r in records):
            # no call got an answer: every judge metric would be undefined, a silent run that says nothing
            raise JudgeStopped(
                f"every one of the {len(records)} judge call(s) ended in error (first: {records[0].reason}); "
                "nothing was stored as metrics. Fix the judge config or the provider and judge the run again")
    summary = JudgeSummary(rec.run_id, rec.name, pins, judged, cost, len(items),
                           None if routing is None else routing.summary())
    status = rec.status
    store.resume_run(rec.run_id)
    try:
        store.write_batch(rec.run_id, judged.columns)
        if routing is not None:
            # append-only: a resumed run's identical records are already there and stay as they were
            store.record_judge_calls([r.to_row() for r in routing.local_records()])
        store.set_judge_pins(rec.run_id, pins, _clean(summary.to_dict()))
    finally:
        store.finish_run(rec.run_id, status if status in ("complete", "failed") else "complete")
    return summary


def _judge_on(open_client: OpenClient | None, judge, cfg: JudgeConfig, run_id: str, items: list, tier1,
              tier2: str):
    """(judged metrics, cascade routing or None) of an LLM judge through the client ``open_client`` gives, or
    the judge itself without one (a cascade's tier 1 runs here)."""

    def judge_with(client):
        if tier1 is None:
            return judge_items(client, run_id, items, metrics=cfg.metrics, criteria=cfg.rubric_criteria()), None
        from ragassay.judges.routing import route_llm

        return route_llm(client, run_id, items, tier1, tier2=tier2, lo=cfg.cascade.band.lo, hi=cfg.cascade.band.hi,
                         metrics=cfg.metrics, criteria=cfg.rubric_criteria())

    if open_client is None:
        return judge_with(judge)
    with open_client(judge, cfg) as client:
        return judge_with(client)


__all__ = ["PIN_KEYS", "CountedItems", "JudgeSummary", "Progress", "check_traces_of", "counted", "judge_stored_run"]
