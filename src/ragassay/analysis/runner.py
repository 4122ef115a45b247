"""Runs: golden set + pipeline (or imported traces) -> scored rows in the store, resumable after a kill.

A run writes one batch per group of queries: the batch's result rows and its (query, trial) done markers
commit in one transaction, so a killed run resumes with `--resume` and ends with no lost and no
duplicated rows.

Every run record's ``extra`` carries what a reader of the numbers must know: ``unit_failures`` (int,
always present; units that failed validation against the corpus, a hard gate) with the first 50 as
``unit_failure_examples``, ``context_tokens_mean`` (mean tokens the packer actually delivered, over the
rows where it is defined; None when never defined), ``warnings`` (list of sentences), and for imported
traces ``schema_failures``, ``problems``, ``unknown_queries`` and, when allowed, ``pin_mismatch``.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ragassay._gc import gc_frozen, gc_paused
from ragassay.analysis.run_record import _done_markers, _record, _update_extra, config_warnings
from ragassay.analysis.scoring import Labels, ScoringOptions, _doc_lengths, _final_k
from ragassay.corpus import Corpus, bundled_corpus_dir, load_corpus
from ragassay.errors import InputError
from ragassay.executors import LocalExecutor, PipelineWorkers, get_executor
from ragassay.executors.local import BatchResult
from ragassay.executors.shared import PipelineRecipe
from ragassay.fsio import check_output_dir, make_dir, mark_output_dir
from ragassay.golden import GOLDEN_FILE, GoldenSet, bundled_golden_source, load_golden
from ragassay.store import Store
from ragassay.trace import RunHeader, Trace, TraceWriter, UnitCheck
from ragassay.trace.schema import TraceFacts, UnitColumns, validate_unit_columns

BATCH_QUERIES = 64
MAX_COMMIT_QUERIES = 1024
# Parts of a pipeline run timed by ``profile`` (wall seconds): building the pipeline (chunking, indexes),
# the golden set's label arrays, running the queries, scoring them, writing traces, writing rows (on the
# writer thread, beside the other parts: its wall seconds include waits for the interpreter lock). Entries
# ``stage:<name>`` add up the per-item stage times the traces record (within ``queries``).
PROFILE_PARTS = ("build", "labels", "queries", "score", "traces", "store")
MAX_EXAMPLES = 50


def load_inputs(corpus_path: str | Path | None, golden_path: str | Path | None,
                build_dir: str | Path | None = None) -> tuple[Corpus, GoldenSet]:
    """Corpus (default: bundled) and golden set: a built directory, or an authoring file built on the fly."""
    corpus = load_corpus(corpus_path or bundled_corpus_dir())
    src = Path(golden_path) if golden_path else bundled_golden_source()
    if src.is_dir() and (src / GOLDEN_FILE).exists():
        golden = load_golden(src)
        if golden.manifest.get("corpus_digest") != corpus.digest:
            raise InputError(f"{src}: golden set was built against corpus {golden.manifest.get('corpus_digest')}, "
                             f"but the corpus given has digest {corpus.digest}; rebuild the golden set")
    else:
        from ragassay.golden import build_golden  # the builder (rapidfuzz, resolution) only when building

        golden = build_golden(src, corpus, build_dir)
    return corpus, golden


def _context_tokens_mean(store: Store, run_id: str) -> float | None:
    vals = store.results(run_id, metrics=["context_tokens"])["value"].to_numpy(zero_copy_only=False)
    vals = vals[~np.isnan(vals.astype(float))] if len(vals) else vals
    return float(vals.mean()) if len(vals) else None


def run_pipeline_into_store(store: Store, config_path: str | Path, corpus: Corpus, golden: GoldenSet, *,
                            trials: int = 1, options: ScoringOptions | None = None, name: str | None = None,
                            resume: str | None = None, traces_dir: str | Path | None = None,
                            cache_dir: str | Path | None = None, batched: bool = False,
                            progress: Callable[[int, int], None] | None = None,
                            profile: dict[str, float] | None = None,
                            executor: str | LocalExecutor | None = None) -> tuple[str, RunHeader]:
    """Run the reference pipeline on every (query, trial), scoring and storing batch by batch.

    Each query runs on its own (:meth:`Pipeline.run_query`), so its stored latency is its own wall time.
    ``batched=True`` runs the retrieval stages for 64 queries at once (:meth:`Pipeline.run_batch`): faster,
    but no single request's time exists, so latency is stored as NULL. A ``profile`` dict is filled with
    wall seconds per part of the run (see :data:`PROFILE_PARTS`).

    ``executor`` (:func:`ragassay.executors.get_executor`: ``"local"`` by default, ``"ray[:ADDRESS]"``) says
    where the queries run; the pipeline is built once per worker (its embeddings computed once for all),
    each batch is scored where it ran, batches come back in order and this process alone writes them, so
    every executor stores the rows the local one stores. An executor
    given by name is closed at the end; one given as an object belongs to the caller.
    """
    owned = not isinstance(executor, LocalExecutor)
    ex = get_executor(executor)
    try:
        return _run_pipeline(store, config_path, corpus, golden, trials=trials, options=options, name=name,
                             resume=resume, traces_dir=traces_dir, cache_dir=cache_dir, batched=batched,
                             progress=progress, profile=profile, ex=ex)
    finally:
        if owned:
            ex.close()


def _run_pipeline(store: Store, config_path: str | Path, corpus: Corpus, golden: GoldenSet, *, trials: int,
                  options: ScoringOptions | None, name: str | None, resume: str | None,
                  traces_dir: str | Path | None, cache_dir: str | Path | None, batched: bool,
                  progress: Callable[[int, int], None] | None, profile: dict[str, float] | None,
                  ex: LocalExecutor) -> tuple[str, RunHeader]:
    prof = profile if profile is not None else {}
    for part in PROFILE_PARTS:
        prof[part] = 0.0
    t_part = time.perf_counter()
    from ragassay.pipeline import load_config

    opt = options or ScoringOptions()
    if traces_dir is not None:
        check_output_dir(Path(traces_dir), "traces")
    cfg = load_config(config_path)
    if cache_dir is not None:
        from ragassay.pipeline.cache import check_cache_dir

        check_cache_dir(Path(cache_dir))  # the same claim load_config makes for a config's own cache_dir
        cfg = cfg.model_copy(update={"cache_dir": str(cache_dir)})
    # without a trace file the traces are scored and dropped: the pipeline keeps their ranked lists as
    # columns only
    pipe = ex.pipeline_workers(PipelineRecipe(cfg, corpus, scoring_only=traces_dir is None), golden)
    try:
        return _run_batches(store, pipe, config_path, corpus, golden, cfg, trials, opt, name, resume, traces_dir,
                            batched, progress, prof, t_part)
    finally:
        pipe.close()


def _run_batches(store: Store, pipe: PipelineWorkers, config_path: str | Path, corpus: Corpus, golden: GoldenSet,
                 cfg: Any, trials: int, opt: ScoringOptions, name: str | None, resume: str | None,
                 traces_dir: str | Path | None, batched: bool, progress: Callable[[int, int], None] | None,
                 prof: dict[str, float], t_part: float) -> tuple[str, RunHeader]:
    prof["build"] = time.perf_counter() - t_part
    run_name = name or cfg.name or Path(config_path).stem
    header = pipe.header(golden.dataset_version, run_name)
    if resume:
        rec = store.get_run(resume)
        run_id = rec.run_id
        if rec.config_sha != pipe.config_sha:
            raise InputError(f"run {rec.name} ({run_id}) was made with config sha {rec.config_sha[:12]}…, "
                             f"but {config_path} has {pipe.config_sha[:12]}…; resume with the same config")
        trials = rec.trials
        n_failures = int((rec.extra or {}).get("unit_failures", 0))
        examples = list((rec.extra or {}).get("unit_failure_examples", []))
    else:
        extra = {"build_ms": header.durations_ms, "pipeline_stats": header.stats,
                 "token_counter": header.token_counter,
                 "traces_dir": str(Path(traces_dir).resolve()) if traces_dir is not None else None,
                 "latency": "not measured (batched)" if batched else "per query",
                 "unit_failures": 0, "unit_failure_examples": [], "warnings": config_warnings(pipe.config)}
        rec = _record(run_name, golden, corpus, pipe.config, pipe.config_sha, opt, trials, "pipeline", extra)
        run_id = store.create_run(rec)
        n_failures, examples = 0, []
    done = store.done_keys(run_id)
    todo = [(q.query_id, tr) for tr in range(trials) for q in golden.queries if (q.query_id, tr) not in done]
    if traces_dir is not None:
        make_dir(Path(traces_dir))
        mark_output_dir(Path(traces_dir), "traces")
    t_part = time.perf_counter()
    labels = Labels(golden, opt)
    prof["labels"] = time.perf_counter() - t_part
    total = len(todo)
    # Rows commit in groups of batches: a DuckDB transaction costs about as much as scoring 64 queries, so
    # one per batch made the store half of a large run. At most ~16 groups per run, none above 1,024
    # queries, so a kill still loses little and small runs commit every batch as before.
    group = max(BATCH_QUERIES, min(MAX_COMMIT_QUERIES, total // 16))
    pending: list[BatchResult] = []

    def write(group: list[BatchResult]) -> None:
        """One commit group: its rows and done markers in one transaction, then its unit failures."""
        nonlocal n_failures, examples
        t_store = time.perf_counter()
        store.write_batch(run_id, pa.concat_tables([r.scored.table for r in group]),
                          done=[d for r in group for d in r.done])
        failed = [r.scored.unit_check for r in group if r.scored.unit_check.count]
        for check in failed:
            n_failures += check.count
            examples += check.messages(limit=MAX_EXAMPLES - len(examples))
        if failed:
            _update_extra(store, run_id, {"unit_failures": n_failures, "unit_failure_examples": examples})
        prof["store"] += time.perf_counter() - t_store

    def flush() -> None:
        store_writer.submit(functools.partial(write, list(pending)))
        pending.clear()

    from ragassay.analysis.stream import BatchWriter

    starts = range(0, total, BATCH_QUERIES)
    score = functools.partial(_score_batch, _ScoreContext(golden, header, opt, corpus, labels, traces_dir is not None,
                                                          _doc_lengths(corpus), _final_k(header)))
    # The store's one writer runs on its own thread (DuckDB releases the GIL), so a commit group is
    # written while the next batches run and score: same groups, same order, same transactions, so
    # resume is unchanged. The golden set, corpus, pipeline and label arrays live for the whole run:
    # frozen, the collector never rescans them. The batches allocate millions of short-lived acyclic
    # objects (freed by reference counting): with the collector paused over the loop, re-enabling it
    # after each batch no longer sets off a collection over that batch's still-live traces.
    with gc_frozen(), gc_paused():
        store_writer = BatchWriter(store)
        try:
            trace_writer = None
            results = pipe.map([todo[start:start + BATCH_QUERIES] for start in starts], batched, score)
            for start in starts:
                t_part = time.perf_counter()
                res: BatchResult = next(results)
                t_got = time.perf_counter()
                # scoring ran inside the batch (here, or on a worker): its own seconds are the score part
                prof["queries"] += max(0.0, t_got - t_part - res.score_s)
                prof["score"] += res.score_s
                if res.traces is not None:
                    if trace_writer is None:
                        trace_writer = TraceWriter(Path(traces_dir) / f"{run_id}.jsonl", header, mode="a")
                    # a batch whose traces landed but whose rows did not commit is re-run on resume: write
                    # it once
                    trace_writer.write_all([t for t in res.traces if t.key not in trace_writer.done])
                prof["traces"] += time.perf_counter() - t_got
                pending.append(res)
                if sum(len(r.done) for r in pending) >= group or start + BATCH_QUERIES >= total:
                    flush()
                for stage, sec in res.stage_s.items():
                    prof[f"stage:{stage}"] = prof.get(f"stage:{stage}", 0.0) + sec
                if progress:
                    progress(min(start + BATCH_QUERIES, total), total)
            if trace_writer is not None:
                trace_writer.close()
        finally:
            store_writer.close()
    _update_extra(store, run_id, {"context_tokens_mean": _context_tokens_mean(store, run_id)})
    store.finish_run(run_id, "complete")
    return run_id, header


@dataclass(frozen=True)
class _ScoreContext:
    """What scoring a batch needs besides the batch: shipped once to every worker."""

    golden: GoldenSet
    header: RunHeader
    options: ScoringOptions
    corpus: Corpus
    labels: Labels
    keep_traces: bool
    doc_lengths: dict[str, int]
    final_k: int


@dataclass
class ScoredBatch:
    """A batch's result rows (an Arrow table, in the stored column layout) and its unit validation."""

    table: pa.Table
    unit_check: UnitCheck


def _batch_units(traces: list[Trace]) -> tuple[UnitColumns, np.ndarray, np.ndarray]:
    """The traces' units as columns, each list's trace position, and each unit's token count (NaN when
    absent): the pipeline hands these over with a batch (``BatchTraces.units``); other traces (per-query
    runs, oracle runs) are read here."""
    made = getattr(traces, "units", None)
    if made is not None:
        return made.units, made.list_trace, made.tokens
    lists = [(i, us) for i, t in enumerate(traces) for _, us in t.unit_lists() if us]
    units = [u for _, us in lists for u in us]
    tokens = np.fromiter((np.nan if u.tokens is None else u.tokens for u in units), dtype=np.float64,
                         count=len(units))
    return (UnitColumns.from_traces(traces),
            np.fromiter((i for i, _ in lists), dtype=np.int64, count=len(lists)), tokens)


def score_batch(ctx: _ScoreContext, keys: Sequence[tuple[str, int]], traces: list[Trace]) -> ScoredBatch:
    """Rows for ``keys`` (a key without a trace is scored as empty), equal to
    :func:`~ragassay.analysis.scoring.score_traces` of the same traces with ``keys`` row for row (tested),
    computed from unit columns with the streaming scorer's kernels (:func:`~ragassay.analysis.stream.score_known`)
    instead of one Python object per unit. Which metrics the rows get follows the batch's own traces,
    as in ``score_traces``."""
    from ragassay.analysis.stream import KnownBatch, Structure, score_known

    units, list_trace, tokens = _batch_units(traces)
    part = KnownBatch(TraceFacts.from_traces(traces), units, list_trace, tokens)
    position = {t.key: i for i, t in enumerate(traces)}
    row_trace = np.fromiter(map(position.get, keys, itertools.repeat(-1)), dtype=np.int64, count=len(keys))
    structure = Structure()
    structure.grow(part)
    check = validate_unit_columns(units, ctx.corpus)
    table, _ = score_known(ctx.golden, ctx.labels, part, list(keys), row_trace, structure, ctx.final_k, check,
                           ctx.doc_lengths)
    return ScoredBatch(table, check)


def _score_batch(ctx: _ScoreContext, keys: Sequence[tuple[str, int]], traces: list[Trace]) -> BatchResult:
    """A batch's rows and done markers, scored where its traces were made (this process or a worker)."""
    t = time.perf_counter()
    scored = score_batch(ctx, keys, traces)
    score_s = time.perf_counter() - t
    stage_s: dict[str, float] = {}
    for tr in traces:
        for stage, ms in tr.durations_ms.items():
            if stage != "total":
                stage_s[stage] = stage_s.get(stage, 0.0) + ms / 1000.0
    return BatchResult(scored, _done_markers(keys, {tr.key: tr for tr in traces}), stage_s, score_s,
                       traces if ctx.keep_traces else None)


def score_traces_into_store(store: Store, traces_path: str | Path, corpus: Corpus, golden: GoldenSet, *,
                            options: ScoringOptions | None = None, name: str | None = None,
                            allow_pin_mismatch: bool = False, batch_size: int | None = None,
                            resume: str | None = None, read_ahead=None, progress=None) -> tuple[str, dict]:
    """Import another system's traces (JSONL), score them and store them as a run, batch by batch
    (:mod:`ragassay.analysis.stream`: memory bounded by ``batch_size`` traces).

    Malformed records are counted (``schema_failures``) and listed, and every unit is validated against
    the corpus (``unit_failures``), never silently dropped. A header whose corpus digest or dataset version
    differs from the golden set's raises :class:`InputError` unless ``allow_pin_mismatch``; then the
    mismatch is recorded in the run's ``extra["pin_mismatch"]``. ``resume`` (a run id) finishes a killed
    import of the same file into the same run. ``read_ahead`` is a
    :class:`~ragassay.analysis.stream.TraceReadAhead` of the same file already reading (its batch size wins).
    ``progress(done, total)`` is called after each batch (bytes of the file).
    """
    from ragassay.analysis.stream import BATCH_TRACES, stream_score_into_store

    if read_ahead is not None and batch_size is None:
        batch_size = read_ahead.batch_size
    return stream_score_into_store(store, traces_path, corpus, golden, options=options, name=name,
                                   allow_pin_mismatch=allow_pin_mismatch, batch_size=batch_size or BATCH_TRACES,
                                   resume=resume, read_ahead=read_ahead, progress=progress)
