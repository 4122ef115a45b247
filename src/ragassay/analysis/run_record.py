"""A run's record and its bookkeeping, shared by the pipeline runner (:mod:`ragassay.analysis.runner`), the
streaming trace scorer (:mod:`ragassay.analysis.stream`) and the dataset scorer
(:mod:`ragassay.analysis.partitions`): the record with its pins, the pins a trace header contradicts, the
config warnings, the run's ``extra`` updates and the per-(query, trial) done markers.

The runner drives the streaming scorer's kernels, so the pieces both need live here, below both.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragassay import __version__
from ragassay.analysis.scoring import METRIC_VERSION, ScoringOptions
from ragassay.corpus import Corpus
from ragassay.golden import GoldenSet
from ragassay.store import RunRecord, Store
from ragassay.trace import RunHeader


def git_sha(cwd: str | Path | None = None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=cwd or Path.cwd())
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _record(name: str, golden: GoldenSet, corpus: Corpus, config: dict, config_sha: str, options: ScoringOptions,
            trials: int, source: str, extra: dict | None = None) -> RunRecord:
    return RunRecord(
        run_id="", name=name, status="running", created_at=dt.datetime.now(dt.UTC).replace(tzinfo=None),
        finished_at=None, git_sha=git_sha(), dataset_version=golden.dataset_version,
        corpus_digest=corpus.digest, golden_sha256=golden.manifest.get("golden_sha256"), config=config,
        config_sha=config_sha, metric_version=METRIC_VERSION, judge_model=None, rubric_sha=None,
        gain=options.gain, relevance_threshold=options.relevance_threshold, hit_rule=options.pins()["hit_rule"],
        ties=options.ties, trials=trials, n_queries=len(golden), source=source, ragassay_version=__version__,
        # where the golden labels came from (human, llm, production, synthetic): compare and the report say
        # when a figure rests on a purely synthetic set
        extra={**(extra or {}), "golden_sources": dict(golden.manifest.get("source_mix") or {})},
    )


def config_warnings(config: dict | None) -> list[str]:
    """Settings that make a figure mean less than it seems; stored in ``extra["warnings"]`` and printed."""
    cfg = config or {}
    rr, fu = cfg.get("reranker"), cfg.get("fusion")
    out = []
    if isinstance(rr, dict) and isinstance(fu, dict) and rr.get("kind") not in (None, "none"):
        depth, k = fu.get("depth"), rr.get("final_k")
        if isinstance(depth, int) and isinstance(k, int) and depth <= k:
            out.append(f"fusion_depth {depth} <= final_k {k} with a reranker: the reranker only reorders the "
                       f"units that reach final_k and cannot change which ones do; raise fusion.depth above "
                       f"{k} to give it candidates")
    return out


def _pin_mismatch(header: RunHeader | None, golden: GoldenSet, corpus: Corpus) -> dict[str, dict[str, Any]]:
    """Pins the trace header states that differ from the golden set's: {pin: {"traces": x, "golden": y}}."""
    if header is None:
        return {}
    want = {"corpus_digest": golden.manifest.get("corpus_digest") or corpus.digest,
            "dataset_version": golden.dataset_version}
    have = {"corpus_digest": header.corpus_digest, "dataset_version": header.dataset_version}
    return {k: {"traces": have[k], "golden": want[k]} for k in want
            if have[k] is not None and want[k] is not None and have[k] != want[k]}


def _update_extra(store: Store, run_id: str, updates: dict[str, Any]) -> None:
    # The store has no API to amend a run's extra; this is the documented runs table, written as the
    # store writes it (sorted-key JSON).
    extra = {**(store.get_run(run_id).extra or {}), **updates}
    store.connection.execute("UPDATE runs SET extra = ?::JSON WHERE run_id = ?",
                             [json.dumps(extra, sort_keys=True, default=str), run_id])


def done_markers(keys: Sequence[tuple[str, int]], outcomes: Sequence[str | None],
                 errors: Sequence[str | None]) -> list[tuple[str, int, str, str | None]]:
    """Query status per key from its trace's outcome and error: 'error' for a failed trace (retried on
    resume), else 'done'."""
    return [(q, tr, "error" if oc == "error" else "done", err)
            for (q, tr), oc, err in zip(keys, outcomes, errors, strict=True)]


def _done_markers(keys: Sequence[tuple[str, int]], trace_by_key: dict) -> list[tuple[str, int, str, str | None]]:
    """:func:`done_markers` of ``keys`` from trace objects; a key without a trace is an 'error' ("no trace")."""
    found = list(map(trace_by_key.get, keys))
    return done_markers(keys, ["error" if t is None else t.outcome for t in found],
                        ["no trace" if t is None else t.error for t in found])


def _context_tokens_mean_of(values: Sequence[float]) -> float | None:
    defined = [v for v in values if not math.isnan(v)]
    return float(np.mean(defined)) if defined else None


def _pin_error(traces_path: str | Path, mismatch: dict[str, dict[str, Any]]) -> str:
    return "\n".join(
        [f"{traces_path}:1: the trace header's {k} {v['traces']!r} differs from the golden set's "
         f"{v['golden']!r}" for k, v in mismatch.items()]
        + ["the traces were made against other data; score them with the matching golden set and corpus, "
           "or pass --allow-pin-mismatch to score them anyway (recorded with the run)"])

