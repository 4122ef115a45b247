"""Runs: golden set + pipeline (or imported traces) -> scored rows in the store, resumable after a kill.

A run writes one batch per group of queries: the batch's result rows and its (query, trial) done markers
commit in one transaction, so a killed run resumes with `--resume` and ends with no lost and no
duplicated rows.
"""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from ragassay import __version__
from ragassay.analysis.scoring import METRIC_VERSION, ScoredRun, ScoringOptions, score_traces
from ragassay.corpus import Corpus, bundled_corpus_dir, load_corpus
from ragassay.errors import InputError
from ragassay.golden import GOLDEN_FILE, GoldenSet, build_golden, bundled_golden_source, load_golden
from ragassay.store import RunRecord, Store
from ragassay.trace import RunHeader, Trace, TraceWriter, read_traces

BATCH_QUERIES = 64


def git_sha(cwd: str | Path | None = None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=cwd or Path.cwd())
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


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
        golden = build_golden(src, corpus, build_dir)
    return corpus, golden


def _record(name: str, golden: GoldenSet, corpus: Corpus, config: dict, config_sha: str, options: ScoringOptions,
            trials: int, source: str, extra: dict | None = None) -> RunRecord:
    return RunRecord(
        run_id="", name=name, status="running", created_at=dt.datetime.now(dt.UTC).replace(tzinfo=None),
        finished_at=None, git_sha=git_sha(), dataset_version=golden.dataset_version,
        corpus_digest=corpus.digest, golden_sha256=golden.manifest.get("golden_sha256"), config=config,
        config_sha=config_sha, metric_version=METRIC_VERSION, judge_model=None, rubric_sha=None,
        gain=options.gain, relevance_threshold=options.relevance_threshold, hit_rule=options.pins()["hit_rule"],
        ties=options.ties, trials=trials, n_queries=len(golden), source=source, ragassay_version=__version__,
        extra=extra or {},
    )


def _write_scored(store: Store, run_id: str, scored: ScoredRun, keys: Sequence[tuple[str, int]],
                  trace_by_key: dict) -> None:
    done = []
    for k in keys:
        t = trace_by_key.get(k)
        status = "error" if t is None or t.outcome == "error" else "done"
        done.append((k[0], k[1], status, (t.error if t is not None else "no trace")))
    store.write_batch(run_id, scored.columns, done=done)


def run_pipeline_into_store(store: Store, config_path: str | Path, corpus: Corpus, golden: GoldenSet, *,
                            trials: int = 1, options: ScoringOptions | None = None, name: str | None = None,
                            resume: str | None = None, traces_dir: str | Path | None = None,
                            cache_dir: str | Path | None = None,
                            progress: Callable[[int, int], None] | None = None) -> tuple[str, RunHeader]:
    """Run the reference pipeline on every (query, trial), scoring and storing batch by batch."""
    from ragassay.pipeline import Pipeline, load_config

    opt = options or ScoringOptions()
    cfg = load_config(config_path)
    if cache_dir is not None:
        cfg = cfg.model_copy(update={"cache_dir": str(cache_dir)})
    pipe = Pipeline.from_config(cfg, corpus)
    run_name = name or cfg.name or Path(config_path).stem
    header = pipe.header(golden.dataset_version, run_name)
    doc_lengths = {d.doc_id: len(d.text) for d in corpus}
    if resume:
        rec = store.get_run(resume)
        run_id = rec.run_id
        if rec.config_sha != pipe.config_sha:
            raise InputError(f"run {rec.name} ({run_id}) was made with config sha {rec.config_sha[:12]}…, "
                             f"but {config_path} has {pipe.config_sha[:12]}…; resume with the same config")
        trials = rec.trials
    else:
        extra = {"build_ms": header.durations_ms, "pipeline_stats": header.stats,
                 "token_counter": header.token_counter,
                 "traces_dir": str(Path(traces_dir).resolve()) if traces_dir is not None else None}
        rec = _record(run_name, golden, corpus, pipe.config, pipe.config_sha, opt, trials, "pipeline", extra)
        run_id = store.create_run(rec)
    done = store.done_keys(run_id)
    todo = [(q, tr) for tr in range(trials) for q in golden.queries if (q.query_id, tr) not in done]
    writer = None
    if traces_dir is not None:
        Path(traces_dir).mkdir(parents=True, exist_ok=True)
    total = len(todo)
    for start in range(0, total, BATCH_QUERIES):
        batch = todo[start:start + BATCH_QUERIES]
        traces: list[Trace] = pipe.run_batch(batch)
        keys = [(q.query_id, tr) for q, tr in batch]
        scored = score_traces(golden, traces, header, opt, keys=keys, doc_lengths=doc_lengths)
        if traces_dir is not None:
            if writer is None:
                writer = TraceWriter(Path(traces_dir) / f"{run_id}.jsonl", header, mode="a")
            # a batch whose traces landed but whose rows did not commit is re-run on resume: write it once
            writer.write_all([t for t in traces if t.key not in writer.done])
        _write_scored(store, run_id, scored, keys, {t.key: t for t in traces})
        if progress:
            progress(min(start + BATCH_QUERIES, total), total)
    if writer is not None:
        writer.close()
    store.finish_run(run_id, "complete")
    return run_id, header


def score_traces_into_store(store: Store, traces_path: str | Path, corpus: Corpus, golden: GoldenSet, *,
                            options: ScoringOptions | None = None, name: str | None = None) -> tuple[str, dict]:
    """Import another system's traces (JSONL), score them and store them as a run.

    Malformed records are counted (``schema_failures``) and listed, never silently dropped.
    """
    opt = options or ScoringOptions()
    header, traces, problems = read_traces(traces_path, strict=False)
    config = header.config if header else {}
    sha = header.config_sha if header else ""
    unknown = sorted({t.query_id for t in traces if t.query_id not in golden})
    extra = {"schema_failures": len(problems),
             "problems": [f"{traces_path}:{p.line}: {p.message}" for p in problems[:50]],
             "unknown_queries": unknown}
    trials = sorted({t.trial for t in traces}) or [0]
    rec = _record(name or (header.run_name if header else Path(traces_path).stem), golden, corpus, config, sha, opt,
                  len(trials), f"traces:{traces_path}", extra)
    run_id = store.create_run(rec)
    known = [t for t in traces if t.query_id in golden]
    scored = score_traces(golden, known, header, opt, trials=trials,
                          doc_lengths={d.doc_id: len(d.text) for d in corpus})
    keys = [(q.query_id, tr) for tr in trials for q in golden.queries]
    _write_scored(store, run_id, scored, keys, {t.key: t for t in known})
    store.finish_run(run_id, "complete")
    return run_id, {"n_traces": len(traces), "schema_failures": len(problems), "unknown_queries": unknown,
                    "missing": len(scored.missing), "problems": extra["problems"]}
