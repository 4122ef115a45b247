"""``ragassay golden pool`` and ``merge-labels`` over a store: pick the runs, read each run's final lists from
its traces, and hand them to :mod:`ragassay.golden.pool`.

A run is refused (one line each, every problem at once) when it is of another golden version than the set
given (runs of mixed versions cannot share one queue), not complete, run on another corpus, or without
traces, and when its traces are not its own (:func:`ragassay.judges.score.check_traces_of`). Units are
checked against the corpus as scoring checks them (:func:`ragassay.trace.validate_units`): a unit that
fails keeps its rank and is never judged or queued.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragassay import fsio
from ragassay.corpus import Corpus
from ragassay.errors import InputError
from ragassay.golden.pool import (
    OUTPUT_KIND,
    PAGE_FILE,
    POOL_FILE,
    QUEUE_FILE,
    Pool,
    Span,
    judged_fraction,
    pool_units,
    queue_bytes,
    queue_record,
    render_page,
)
from ragassay.golden.set import GoldenSet
from ragassay.store import RunRecord, Store

NO_TRACES = ("recorded no traces; run it again with --keep-traces (or --traces-dir DIR), or score its "
             "trace file with `ragassay score TRACES --golden G`")


def traces_path(rec: RunRecord) -> Path | None:
    """Where a run's traces are (:meth:`RunRecord.traces_path`)."""
    return rec.traces_path()


def select_runs(store: Store, refs: Sequence[str], golden: GoldenSet, corpus: Corpus) -> list[RunRecord]:
    """The runs named by ``refs`` (deduplicated, in the order given), each checked as the module docstring
    says; every problem is one line of a single :class:`InputError`."""
    recs = list({r.run_id: r for r in (store.get_run(ref) for ref in refs)}.values())
    version = golden.dataset_version
    problems = []
    versions = sorted({str(r.dataset_version) for r in recs})
    if len(versions) > 1:
        problems.append(f"the runs are of mixed golden versions ({', '.join(versions)}); pool runs scored on one "
                        "golden set")
    for r in recs:
        who = f"run {r.name} ({r.run_id})"
        if r.dataset_version != version:
            problems.append(f"{who} is of golden version {r.dataset_version!r}, not {version!r} (the set passed "
                            "with --golden); pass the set it was scored on, or drop it")
        if r.status != "complete":
            problems.append(f"{who} is {r.status}, not complete; finish it first (ragassay run ... --resume)")
        if r.corpus_digest and r.corpus_digest != corpus.digest:
            problems.append(f"{who} ran on another corpus ({r.corpus_digest[:19]}…, not {corpus.digest[:19]}…); "
                            "pass the corpus it ran on")
        path = traces_path(r)
        if path is None:
            problems.append(f"{who} {NO_TRACES}")
        elif not path.is_file():
            problems.append(f"{who}: its traces {path} are not there; restore them, or score the trace file again "
                            "with `ragassay score TRACES --golden G`")
    if problems:
        raise InputError("\n".join(problems))
    return recs


def final_lists(store: Store, rec: RunRecord, corpus: Corpus) -> tuple[list[tuple[str, list[Span]]], int]:
    """Per trace of the run: (query_id, its final list — reranked, else fused — with None for each unit
    that fails the corpus check), and the number of malformed trace lines skipped."""
    from ragassay.judges.score import check_traces_of
    from ragassay.trace import validate_units
    from ragassay.trace.io import read_traces

    path = traces_path(rec)
    header, traces, problems = read_traces(path)
    check_traces_of(store, rec, traces, header, f"the traces {path}")
    check = validate_units(traces, corpus)
    out = []
    for t in traces:
        name, units = ("reranked", t.reranked) if t.reranked is not None else ("fused", t.fused)
        bad = check.bad_positions((t.query_id, t.trial), name) if check.count else set()
        out.append((t.query_id, [None if i in bad else (u.doc_id, u.start, u.end) for i, u in enumerate(units)]))
    return out, len(problems)


class _Texts:
    """doc_id -> canonical text, read from the corpus on demand."""

    def __init__(self, corpus: Corpus):
        self._corpus = corpus

    def __getitem__(self, doc_id: str) -> str:
        return self._corpus[doc_id].text


def pool_runs(store: Store, refs: Sequence[str], golden: GoldenSet, corpus: Corpus, k: int
              ) -> tuple[Pool, list[dict[str, Any]]]:
    """The pool of the runs at depth ``k`` and, per run, its name, id, traces path and skipped lines."""
    if golden.manifest.get("corpus_digest") != corpus.digest:
        raise InputError(f"the corpus ({corpus.digest[:19]}…) is not the one the golden set was built on "
                         f"({str(golden.manifest.get('corpus_digest'))[:19]}…); pass that corpus")
    recs = select_runs(store, refs, golden, corpus)
    lists, runs = [], []
    for rec in recs:
        per_trace, skipped = final_lists(store, rec, corpus)
        lists.extend((rec.run_id, qid, units) for qid, units in per_trace)
        runs.append({"name": rec.name, "run_id": rec.run_id, "traces": str(traces_path(rec)),
                     "skipped_lines": skipped})
    return pool_units(golden, _Texts(corpus), lists, k), runs


def write_queue(out: Path, pool: Pool, runs: list[dict[str, Any]], golden: GoldenSet) -> dict[str, Any]:
    """Write ``queue.jsonl``, ``pool.json`` and the labelling page into ``out`` (new, empty or an earlier
    queue: :func:`ragassay.fsio.check_output_dir`); returns pool.json's content."""
    names = {r["run_id"]: r["name"] for r in runs}
    records = [queue_record(it, names) for it in pool.items]
    body = queue_bytes(records)
    meta = {"kind": "ragassay golden pool", "dataset_version": golden.dataset_version,
            "corpus_digest": golden.manifest.get("corpus_digest"), "k": pool.k, "runs": runs,
            "counts": pool.counts, "n_items": len(records), "queue_sha256": hashlib.sha256(body).hexdigest()}
    fsio.check_output_dir(out, OUTPUT_KIND)
    fsio.make_dir(out)
    fsio.atomic_write_bytes(out / QUEUE_FILE, body)
    fsio.atomic_write_text(out / POOL_FILE, json.dumps(meta, ensure_ascii=False, indent=2) + "\n")
    fsio.atomic_write_text(out / PAGE_FILE, render_page(records, meta))
    fsio.mark_output_dir(out, OUTPUT_KIND)
    return meta


def runs_judged_fraction(store: Store, refs: Sequence[str], before: GoldenSet, after: GoldenSet,
                         corpus: Corpus, k: int) -> list[dict[str, Any]]:
    """Per run (of ``before``'s version): mean judged fraction@k of its final lists under each set, with the
    counts of defined and undefined (empty) lists."""
    out = []
    for rec in select_runs(store, refs, before, corpus):
        lists = final_lists(store, rec, corpus)[0]
        b, n_def, n_undef = judged_fraction(before, lists, k)
        a = judged_fraction(after, lists, k)[0]
        out.append({"name": rec.name, "run_id": rec.run_id, "before": b, "after": a, "n_defined": n_def,
                    "n_undefined": n_undef})
    return out
