"""Streaming `score`: a trace file scored batch by batch into the store, memory bounded by the batch.

Batches come from :class:`~ragassay.trace.io.TraceBatchReader` as columns (no pydantic object per unit),
are validated against the corpus with :func:`~ragassay.trace.schema.validate_unit_columns`, scored with
the same span-credited taps and ranking kernels as :func:`~ragassay.analysis.scoring.score_traces`, and
written with :meth:`Store.write_batch` (one transaction per batch). The stored rows, query status and run
extras equal those of scoring the whole file at once (tested), including every problem and count:

- Which metrics a run has depends on the structure of all its traces (branch names, a reranker, a
  generator). A batch that reveals more structure than the batches before it re-reads and re-scores
  those (rows are replaced, never duplicated); in a consistent file this happens at most in batch one.
- Golden (query, trial) pairs without a trace are scored as empty after the last batch.
- A killed `score` leaves its run 'running'; ``resume=run_id`` reads the file again, skips writing the
  batches already marked done and ends with the same rows as an uninterrupted run.
"""

from __future__ import annotations

import collections
import itertools
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from operator import is_not, itemgetter
from pathlib import Path

import numpy as np
import pyarrow as pa

from ragassay._gc import gc_paused
from ragassay.analysis.scoring import (
    _ERROR,
    OUTCOME_CODES,
    GenerationColumns,
    Labels,
    ScoringOptions,
    _final_k,
    _generation_rows,
    _Tap,
    final_list_rows,
    ranking_metric_names,
    rerank_rows,
)
from ragassay.errors import InputError
from ragassay.golden import GoldenSet, HitRule
from ragassay.metrics import GradeMatrix, evaluate
from ragassay.trace.io import TraceBatch
from ragassay.trace.schema import (
    TraceFacts,
    UnitCheck,
    UnitColumns,
    dense_codes,
    take_strs,
    validate_unit_columns,
)
from ragassay.trace.sources import open_trace_batches

BATCH_TRACES = 2048
RESUME_PINS = ("source", "config_sha", "dataset_version", "corpus_digest", "metric_version",
                "hit_rule", "relevance_threshold", "gain", "ties")
MAX_EXAMPLES = 50


def check_resume_pins(rec, want) -> None:
    """Refuse to resume stored run ``rec`` when the run these inputs would create (``want``) differs in a pin."""
    if any(getattr(rec, k) != getattr(want, k) for k in RESUME_PINS):
        raise InputError(f"run {rec.name} ({rec.run_id}) was scored from {rec.source.removeprefix('traces:')} "
                         "with other pins; resume it with the same traces, golden set, corpus and options")


@dataclass
class Structure:
    """What the traces of a run contain; it decides which metrics every row gets (see score_traces)."""

    branches: set[str] = field(default_factory=set)
    retrieval: bool = False
    rerank: bool = False
    generation: bool = False
    outcome: bool = False

    def grow(self, part: KnownBatch) -> bool:
        """Add a batch's structure; True when the metric set changed."""
        before = (len(self.branches), self.retrieval, self.rerank, self.generation, self.outcome)
        facts = part.facts
        branches = facts.branches
        self.branches.update(itertools.chain.from_iterable(branches))
        # a flag already set cannot change: after the first batches only the branch names are looked at
        if not self.retrieval:
            self.retrieval = bool(part.has_list("fused").any()) or any(map(bool, branches))
        if not self.rerank:
            self.rerank = any(facts.reranked)
        if not (self.generation and self.outcome):
            has_outcome = any(map(is_not, facts.outcome, itertools.repeat(None)))
            self.generation = self.generation or has_outcome or bool(part.has_list("packed").any())
            self.outcome = self.outcome or has_outcome
        return before != (len(self.branches), self.retrieval, self.rerank, self.generation, self.outcome)


@dataclass
class KnownBatch:
    """The traces of a batch whose query is in the golden set (their fields as columns), with their units."""

    facts: TraceFacts
    units: UnitColumns
    list_trace: np.ndarray
    tokens: np.ndarray

    @classmethod
    def of(cls, batch: TraceBatch, golden: GoldenSet, keep: np.ndarray | None = None) -> KnownBatch:
        """``keep``: per trace, whether the golden set holds its query, when the caller has it at hand."""
        if keep is None:
            qids = batch.facts.query_id
            keep = np.fromiter(map(golden.__contains__, qids), dtype=bool, count=len(qids))
        if keep.all():
            return cls(batch.facts, batch.units, batch.list_trace, batch.tokens)
        u = batch.units
        new_index = np.cumsum(keep) - 1
        lists = np.flatnonzero(keep[batch.list_trace]) if len(batch.list_trace) else np.zeros(0, dtype=np.int64)
        unit_mask = np.repeat(keep[batch.list_trace], u.lengths) if len(u.lengths) else np.zeros(0, dtype=bool)
        idx = np.flatnonzero(unit_mask)
        cols = UnitColumns(keys=[u.keys[i] for i in lists], fields=[u.fields[i] for i in lists],
                           lengths=u.lengths[lists], unit_id=take_strs(u.unit_id, idx),
                           doc_id=take_strs(u.doc_id, idx), start=u.start[idx], end=u.end[idx],
                           score=u.score[idx], has_score=u.has_score[idx],
                           text=None if u.text is None else [u.text[i] for i in idx],
                           rank=None if u.rank is None else u.rank[idx])
        return cls(batch.facts.select(np.flatnonzero(keep).tolist()), cols,
                   new_index[batch.list_trace[lists]], batch.tokens[idx])

    @property
    def traces(self) -> list:
        """The Trace objects (made on first use)."""
        return self.facts.traces

    def has_list(self, name: str) -> np.ndarray:
        out = np.zeros(len(self.facts), dtype=bool)
        sel = np.asarray([f == name for f in self.units.fields], dtype=bool)
        out[self.list_trace[sel]] = True
        return out

    @classmethod
    def empty(cls) -> KnownBatch:
        z = np.zeros(0, dtype=np.int64)
        return cls(TraceFacts.empty(), UnitColumns([], [], z, [], [], z, z, np.zeros(0), np.zeros(0, dtype=bool), None,
                                   np.zeros(0)), z, np.zeros(0))


def _column_table(rows: list[tuple[str, int]], metric_names: list[str], values: list[np.ndarray],
                  per_row: dict[str, pa.Array]) -> pa.Table:
    """Result rows, metric-major as score_traces emits them, built with Arrow takes instead of lists."""
    n, m = len(rows), len(metric_names)
    tile = pa.array(np.tile(np.arange(n, dtype=np.int64), m))
    cols = {"query_id": pa.array([q for q, _ in rows], pa.string()).take(tile),
            "trial": pa.array(np.asarray([t for _, t in rows], dtype=np.int32)).take(tile),
            "metric": pa.DictionaryArray.from_arrays(pa.array(np.repeat(np.arange(m, dtype=np.int32), n)),
                                                     pa.array(metric_names, pa.string())).cast(pa.string()),
            "value": pa.array(np.concatenate(values) if values else np.zeros(0))}
    for k, v in per_row.items():
        cols[k] = v.take(tile)
    return pa.table(cols)


def _floats(values: np.ndarray) -> pa.Array:
    return pa.array(values, mask=np.isnan(values))


def score_known(golden: GoldenSet, labels: Labels, part: KnownBatch, rows: list[tuple[str, int]],
                row_trace: np.ndarray, structure: Structure, final_k: int, check: UnitCheck | np.ndarray,
                doc_lengths: dict[str, int] | None) -> tuple[pa.Table, np.ndarray]:
    """Rows for ``rows`` (trace index per row in ``row_trace``, -1 = no trace) and each row's
    context_tokens. ``check`` is the validation of ``part.units``: the units it flags are credited with
    nothing, and its doc codes are reused (a bare mask of the failing units works too, at the cost of
    coding the doc ids again)."""
    if isinstance(check, np.ndarray):
        check = UnitCheck(bad_mask=check)
    opt = labels.options
    rule = HitRule.parse(opt.hit_rule)
    idx, relevant_ev = labels.index, labels.relevant_ev
    n = len(rows)
    query_codes = np.fromiter(map(idx.query_codes.__getitem__, map(itemgetter(0), rows)), dtype=np.int64, count=n)
    n_rel = labels.n_rel_by_query[query_codes]
    facts = part.facts
    nt = len(facts)
    present = row_trace >= 0
    # per-trace arrays get one more entry, for "no trace": row_trace's -1 picks it
    trace_of_row = np.where(present, row_trace, nt)
    trace_row = np.full(nt + 1, -1, dtype=np.int64)
    trace_row[row_trace[present]] = np.flatnonzero(present)
    u = part.units
    doc_code, doc_ids = ((check.doc_code, check.doc_ids) if len(check.doc_code) == len(u.doc_id)
                         else dense_codes(u.doc_id))
    evidence_code = np.fromiter(map(idx.doc_codes.get, doc_ids, itertools.repeat(-1)), dtype=np.int64,
                                count=len(doc_ids))
    dc_all = evidence_code[doc_code]
    bad = check.bad_mask
    dc_all = np.where(bad, -1, dc_all) if len(bad) else dc_all
    fields = np.asarray(u.fields, dtype=object)
    list_row = trace_row[part.list_trace] if len(part.list_trace) else np.zeros(0, dtype=np.int64)
    unit_list = np.repeat(np.arange(len(u.lengths)), u.lengths)

    def tap(select: np.ndarray) -> _Tap:
        """A tap over the lists ``select`` (at most one per row)."""
        sel = select & (list_row >= 0)
        lengths = np.zeros(n, dtype=np.int64)
        lengths[list_row[sel]] = u.lengths[sel]
        um = sel[unit_list] if len(unit_list) else np.zeros(0, dtype=bool)
        units = np.flatnonzero(um)
        order = units[np.argsort(list_row[unit_list[units]], kind="stable")]
        return _Tap(idx, query_codes, lengths, dc_all[order], u.start[order], u.end[order], rule)

    def field_is(name: str) -> np.ndarray:
        return fields == name if len(fields) else np.zeros(0, dtype=bool)

    names: list[str] = []
    values: list[np.ndarray] = []

    def emit(metric: str, v: np.ndarray) -> None:
        names.append(metric)
        values.append(np.asarray(v, dtype=np.float64))

    for b in sorted(structure.branches):
        emit(f"recall@{b}_depth", tap(field_is(f"branches.{b}")).recall_at(np.inf, relevant_ev, n_rel))
    fused = tap(field_is("fused"))
    if structure.retrieval:
        emit("recall@fusion_depth", fused.recall_at(np.inf, relevant_ev, n_rel))
    if structure.rerank:
        reranked_trace = np.fromiter(facts.reranked, dtype=bool, count=nt)
        has_rr = reranked_trace[part.list_trace] if len(part.list_trace) else np.zeros(0, dtype=bool)
        final = tap((field_is("reranked") & has_rr) | (field_is("fused") & ~has_rr))
    else:
        final = fused
    if structure.retrieval:
        gm = GradeMatrix(query_ids=np.asarray([f"{q}\x00{tr}" for q, tr in rows], dtype=object),
                         grades=final.grades if final.grades.shape[1] else np.full((n, 1), np.nan),
                         lengths=final.lengths, judged=labels.judged_matrix(query_codes), missing=~present)
        ranked = {str(m): r.values
                  for m, r in evaluate(gm, ranking_metric_names(opt.cutoffs, final_k), opt.semantics()).items()}
        for metric, v in final_list_rows(final, ranked, opt.cutoffs, final_k, relevant_ev, n_rel):
            emit(metric, v)
    if structure.rerank:
        for metric, v in rerank_rows(fused, final, final_k, relevant_ev, n_rel):
            emit(metric, v)

    # per-trace facts (see scoring._context_tokens), lifted to rows; a missing trace delivered 0 tokens
    n_lists = np.bincount(part.list_trace, minlength=nt)
    packed_sel = field_is("packed")
    has_packed = np.zeros(nt, dtype=bool)
    has_packed[part.list_trace[packed_sel]] = True
    unit_trace = part.list_trace[unit_list] if len(unit_list) else np.zeros(0, dtype=np.int64)
    in_packed = packed_sel[unit_list] if len(unit_list) else np.zeros(0, dtype=bool)
    unknown_tokens = np.bincount(unit_trace[in_packed], weights=np.isnan(part.tokens[in_packed]), minlength=nt)
    outcome = np.fromiter(itertools.chain(map(OUTCOME_CODES.__getitem__, facts.outcome), (_ERROR,)),
                          dtype=np.int8, count=nt + 1)
    packed_tokens = np.fromiter(facts.packed_tokens, dtype=np.float64, count=nt)
    err = outcome[:nt] == _ERROR
    ctx_tokens = np.select([err, (packed_tokens != 0) | (has_packed & (unknown_tokens == 0)),
                            has_packed | (n_lists == 0)], [0.0, packed_tokens, np.nan], 0.0)
    ctx_tokens = np.append(ctx_tokens, 0.0)[trace_of_row]
    if structure.generation:
        silent = np.append(~err & (n_lists == 0), False)[trace_of_row]
        context = tap(packed_sel)
        emit("recall@context", np.where(silent, np.nan, context.recall_at(np.inf, relevant_ev, n_rel)))
        emit("context_tokens", ctx_tokens)
    if structure.outcome:
        answers = [*facts.answer, None]
        citations = facts.citations
        n_cites = np.fromiter(map(len, citations), dtype=np.int64, count=nt)
        cited = [(int(trace_row[t]), citations[t]) for t in np.flatnonzero((n_cites > 0) & (trace_row[:nt] >= 0))]
        pu = np.flatnonzero((packed_sel & (list_row >= 0))[unit_list]) if len(unit_list) else unit_list
        packed = (list_row[unit_list[pu]], take_strs(u.unit_id, pu), take_strs(u.doc_id, pu), u.start[pu], u.end[pu])
        gen = GenerationColumns.of(outcome[trace_of_row], [answers[t] for t in trace_of_row.tolist()], cited, packed)
        for name, v in _generation_rows(labels.references, query_codes, gen, doc_lengths):
            emit(name, v)

    judged = final.judged_fraction(idx, final_k)
    take = pa.array(trace_of_row)

    def per_trace(column: list, typ) -> pa.Array:
        return pa.array([*column, None], typ).take(take)

    per_row = {"stratum": labels.stratum.take(pa.array(query_codes)),
               "judged_fraction": _floats(judged),
               "latency_ms": per_trace(facts.total_ms, pa.float64()),
               "tokens_in": per_trace(facts.tokens_in, pa.int64()),
               "tokens_out": per_trace(facts.tokens_out, pa.int64()),
               "cost": per_trace(facts.cost, pa.float64()),
               "trace_id": per_trace(facts.trace_id, pa.string())}
    return _column_table(rows, names, values, per_row), ctx_tokens


def stream_score_into_store(store, traces_path: str | Path, corpus, golden: GoldenSet, *,
                            options: ScoringOptions | None = None, name: str | None = None,
                            allow_pin_mismatch: bool = False, batch_size: int = BATCH_TRACES,
                            resume: str | None = None, read_ahead: TraceReadAhead | None = None,
                            progress: Callable[[int, int], None] | None = None) -> tuple[str, dict]:
    """Score a trace file into ``store`` batch by batch; returns (run_id, import summary). See the module
    docstring; the arguments are those of :func:`ragassay.analysis.runner.score_traces_into_store`.
    ``read_ahead`` is the same source already being read (started before the inputs loaded).
    ``progress(done, total)`` is called after each batch is scored: bytes of a JSONL file, rows of a
    Parquet dataset."""
    opt = options or ScoringOptions()
    labels = Labels(golden, opt)
    if read_ahead is None:
        read_ahead = TraceReadAhead(traces_path, batch_size, early=0)
    with closing(read_ahead):
        if (str(read_ahead.path), read_ahead.batch_size) != (str(traces_path), batch_size):
            raise ValueError("read_ahead reads another source or batch size")
        return _stream_score(store, traces_path, corpus, golden, opt, labels, name, allow_pin_mismatch, batch_size,
                             resume, read_ahead, progress)


def _stream_score(store, traces_path, corpus, golden, opt, labels, name, allow_pin_mismatch, batch_size, resume,
                  read_ahead: TraceReadAhead, progress) -> tuple[str, dict]:
    from ragassay.analysis.run_record import (
        _context_tokens_mean_of,
        _done_markers,
        _pin_error,
        _pin_mismatch,
        _record,
        _update_extra,
        config_warnings,
        done_markers,
    )
    from ragassay.analysis.scoring import _doc_lengths

    batches = read_ahead.batches()
    first = next(batches, None)  # line 1 holds the header: the pins are known before anything is stored
    reader = read_ahead.reader
    header = reader.header
    mismatch = _pin_mismatch(header, golden, corpus)
    if mismatch and not allow_pin_mismatch:
        raise InputError(_pin_error(traces_path, mismatch))
    config = header.config if header else {}
    final_k = _final_k(header)
    doc_lengths = _doc_lengths(corpus)
    if resume:
        rec = store.get_run(resume)
        run_id = rec.run_id
        want = _record(rec.name, golden, corpus, config, header.config_sha if header else "", opt, rec.trials,
                       f"traces:{traces_path}")
        check_resume_pins(rec, want)
        done = store.resume_run(run_id)
    else:
        rec = _record(name or (header.run_name if header else Path(traces_path).stem), golden, corpus, config,
                      header.config_sha if header else "", opt, 1, f"traces:{traces_path}",
                      {"unit_failures": 0, "unit_failure_examples": [], "schema_failures": 0})
        run_id = store.create_run(rec)
        done = set()
    structure = Structure()
    spans: list[tuple[int, int, int]] = []
    ctx: dict[tuple[str, int], float] = {}
    unknown: set[str] = set()
    trials: set[int] = set()
    n_fail, examples = 0, []

    lock = read_ahead.lock  # the reader's batch state: the read-ahead thread reads, replays happen here
    writer = BatchWriter(store)

    def write(part: KnownBatch, check: UnitCheck, skip_done: bool) -> tuple[list[tuple[str, int]], np.ndarray]:
        """Score ``part`` and queue its rows; returns its (query_id, trial) keys and context tokens."""
        facts = part.facts
        rows = facts.keys
        table, ctx_tokens = score_known(golden, labels, part, rows, np.arange(len(rows)), structure, final_k,
                                        check, doc_lengths)
        if not (skip_done and rows and all(k in done for k in rows)):
            writer.submit(lambda: store.write_batch(run_id, table,
                                                    done=done_markers(rows, facts.outcome, facts.error)))
        return rows, ctx_tokens

    def _one_batch(batch: TraceBatch) -> None:
        nonlocal n_fail
        qids = batch.facts.query_id
        known = golden.contains_each(qids)
        unknown.update(itertools.compress(qids, ~known))
        trials.update(batch.facts.trial)
        part = KnownBatch.of(batch, golden, known)
        check = validate_unit_columns(part.units, corpus, reader.lines)
        if structure.grow(part):
            for span in spans:  # earlier batches lack the new metrics: score them again (rows replaced)
                with lock:
                    replayed = reader.replay(span)
                again = KnownBatch.of(replayed, golden)
                write(again, validate_unit_columns(again.units, corpus, reader.lines), skip_done=False)
        rows, ctx_tokens = write(part, check, skip_done=True)
        ctx.update(zip(rows, ctx_tokens.tolist(), strict=True))
        n_fail += check.count
        examples.extend(check.messages(traces_path, limit=MAX_EXAMPLES - len(examples)))
        spans.append(batch.span)
    # the loop allocates millions of short-lived acyclic objects; scans of the (large, long-lived) golden
    # set and corpus would free nothing and grow with the run
    with gc_paused():
        try:
            extent = reader.extent if progress is not None else 0
            for batch in itertools.chain([first] if first is not None else [], batches):
                _one_batch(batch)
                if progress is not None:
                    progress(batch.span[1], extent)
        finally:
            writer.close()
    trial_ids = sorted(trials) or [0]
    keys = [(q.query_id, tr) for tr in trial_ids for q in golden.queries]
    missing = [k for k in keys if k not in reader.lines]
    for start in range(0, len(missing), batch_size):
        rows = missing[start:start + batch_size]
        table, ctx_tokens = score_known(golden, labels, KnownBatch.empty(), rows, np.full(len(rows), -1), structure,
                                        final_k, UnitCheck(), doc_lengths)
        if not all(k in done for k in rows):
            store.write_batch(run_id, table, done=_done_markers(rows, {}))
        ctx.update(zip(rows, ctx_tokens.tolist(), strict=True))
    problems = reader.problems
    extra = {"schema_failures": len(problems),
             "problems": [f"{traces_path}:{p.line}: {p.message}" for p in problems[:MAX_EXAMPLES]],
             "unknown_queries": sorted(unknown), "unit_failures": n_fail, "unit_failure_examples": examples,
             "context_tokens_mean": _context_tokens_mean_of([ctx[k] for k in keys] if structure.generation else []),
             "warnings": config_warnings(config)}
    if mismatch:
        extra["pin_mismatch"] = mismatch
    _update_extra(store, run_id, extra)
    store.connection.execute("UPDATE runs SET trials = ? WHERE run_id = ?", [len(trial_ids), run_id])
    store.finish_run(run_id, "complete")
    return run_id, {"n_traces": reader.n_traces, "schema_failures": len(problems),
                    "unknown_queries": sorted(unknown), "missing": len(missing), "problems": extra["problems"],
                    "unit_failures": n_fail, "unit_failure_examples": examples, "warnings": extra["warnings"],
                    "pin_mismatch": mismatch}


_END = object()
EARLY_BATCHES = 12  # batches read ahead while the golden set and corpus load (at 2,048 traces, ~10 MB each)


class ReadAhead:
    """Batches from ``open_batches()`` (an iterable), read on a helper thread from the moment this is made.

    Until the first batch is taken up to ``early`` batches are read ahead, so a reader started before the
    golden set and corpus load parses the file beside them; after it, two (memory: the batch being scored
    plus two). ``lock`` is held while a batch is read, so a replay of an earlier batch never runs beside
    it. Batches come in file order; an error raised while opening or reading is raised by
    :meth:`batches` after the batches before it. :meth:`close` stops the thread (the consumer stopped, or
    failed before taking anything)."""

    STEADY = 2

    def __init__(self, open_batches, lock: threading.Lock | None = None, *, early: int = 0) -> None:
        self.lock = lock or threading.Lock()
        self._cond = threading.Condition()
        self._items: collections.deque = collections.deque()
        self._early = max(early, self.STEADY)
        self._taken = self._stop = False
        self._thread = threading.Thread(target=self._read, args=(open_batches,), name="ragassay-trace-reader",
                                        daemon=True)
        self._thread.start()

    def _room(self) -> bool:
        return self._stop or len(self._items) < (self.STEADY if self._taken else self._early)

    def _put(self, item) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify_all()

    def _read(self, open_batches) -> None:
        try:
            with self.lock:
                batches = iter(open_batches())
            while True:
                with self._cond:
                    self._cond.wait_for(self._room)
                    if self._stop:
                        return
                with self.lock:
                    batch = next(batches, _END)
                self._put((batch, None))
                if batch is _END:
                    return
        except BaseException as exc:  # handed to the consumer, which raises it in its own thread
            self._put((_END, exc))

    def batches(self):
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._items)
                batch, exc = self._items.popleft()
                self._taken = True
                self._cond.notify_all()
            if exc is not None:
                raise exc
            if batch is _END:
                return
            yield batch

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._items.clear()
            self._cond.notify_all()
        self._thread.join()


@contextmanager
def reading_ahead(path: str | Path, batch_size: int = BATCH_TRACES) -> Iterator[TraceReadAhead]:
    """A :class:`TraceReadAhead` of ``path``, started now, for a score whose golden set and corpus load next
    (``ragassay score``, ``ragassay.evaluate``), with the collector paused until it closes: the golden set,
    corpus and the run's bookkeeping (a key per trace) are long-lived and acyclic, and the scans that
    re-enabling the collector after their load and after the stream set off (~0.6 s at 100,000 traces)
    would free nothing; the streaming loop allocates no cycles that outlive a batch."""
    with gc_paused(), TraceReadAhead(path, batch_size) as ahead:
        yield ahead


class TraceReadAhead:
    """The trace source at ``path`` (:func:`open_trace_batches`), opened and read on a helper thread from the
    moment this is made: ``score`` starts it before loading the golden set and corpus, so the file is
    parsed (largely outside the GIL) beside that work. Hand it to :func:`stream_score_into_store`, which
    closes it; a caller that fails before then closes it itself (``with`` or :meth:`close`). An error
    opening or reading the source is raised where the batches are taken, after the inputs' own errors."""

    def __init__(self, path: str | Path, batch_size: int = BATCH_TRACES, *, early: int = EARLY_BATCHES) -> None:
        self.path, self.batch_size = path, batch_size
        self.reader = None

        def open_batches():
            self.reader = open_trace_batches(path, batch_size)
            return self.reader
        self._ahead = ReadAhead(open_batches, early=early)
        self.lock = self._ahead.lock

    def batches(self):
        return self._ahead.batches()

    def close(self) -> None:
        self._ahead.close()

    def __enter__(self) -> TraceReadAhead:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class BatchWriter:
    """The store's one writer, on its own thread: batches are written in the order submitted, each in its
    own transaction as before, while the next batch is scored. A failed write stops the writes after it
    (as a failure stopped the loop before) and is raised by the next ``submit`` or by ``close``."""

    def __init__(self, store) -> None:
        self._jobs: queue.Queue = queue.Queue(maxsize=2)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="ragassay-store-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            if self._error is None:
                try:
                    job()
                except BaseException as exc:  # raised in the scoring thread by submit/close
                    self._error = exc

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def submit(self, job) -> None:
        self._raise()
        self._jobs.put(job)

    def close(self) -> None:
        """Wait for every submitted write; raise the first failure."""
        self._jobs.put(None)
        self._thread.join()
        self._raise()

