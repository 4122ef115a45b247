"""Importers that turn other systems' output into traces, each returning (traces, problems).

* :func:`traces_from_callable`: call a Python function per question (sync or async) under a concurrency
  limit; it may return a Trace, a dict of Trace fields, or just the answer string; an exception becomes an
  ``error`` trace.
* :func:`traces_from_jsonl`: a trace file written by any system (see :mod:`ragassay.trace.io`).
* :func:`traces_from_ragas_rows`: RAGAS-style rows (question, contexts, answer, ground_truth); each context
  string is located in the corpus (exact match on canonicalized text first, then rapidfuzz
  ``partial_ratio_alignment`` at a threshold); unlocatable contexts are counted and reported per row.
* :func:`traces_from_trec_run`: a TREC run file (``qid Q0 docid rank score tag``) as retrieval-only
  traces of whole documents, ordered like trec_eval (score descending, then docid descending).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragassay.errors import InputError
from ragassay.trace.io import Problem, read_traces
from ragassay.trace.schema import RunHeader, Trace, Unit, config_sha, make_trace_id


def _query_pairs(queries: Iterable[Any]) -> list[tuple[str, str]]:
    out = []
    for i, q in enumerate(queries):
        if isinstance(q, tuple):
            out.append((str(q[0]), str(q[1])))
        elif isinstance(q, dict):
            out.append((str(q["query_id"]), str(q["question"])))
        else:
            out.append((str(q.query_id), str(q.question)))
        if not out[-1][1]:
            raise InputError(f"query #{i} ({out[-1][0]}) has an empty question")
    return out


def _to_trace(result: Any, qid: str, question: str, trial: int, sha: str, ms: float) -> Trace:
    ident = {"trace_id": make_trace_id(sha, qid, trial), "query_id": qid, "trial": trial}
    if isinstance(result, Trace):
        data = result.model_dump()
    elif isinstance(result, dict):
        data = dict(result)
    elif isinstance(result, str):
        data = {"answer": result, "outcome": "answered"}
    elif result is None:
        data = {"outcome": "abstained"}
    else:
        raise TypeError(f"the callable returned {type(result).__name__}; return a Trace, a dict or a string")
    data.update(ident)
    data.setdefault("question", question)
    data.setdefault("durations_ms", {})
    data["durations_ms"].setdefault("total", ms)
    return Trace.model_validate(data)


def traces_from_callable(
    fn: Callable[[str], Any],
    queries: Iterable[Any],
    *,
    trials: int = 1,
    concurrency: int = 4,
    progress: bool = True,
    run_name: str = "callable",
) -> tuple[RunHeader, list[Trace], list[Problem]]:
    """Run ``fn(question)`` for every (query, trial); results keep the input order.

    ``queries`` are objects with query_id/question, dicts with those keys, or (query_id, question) tuples.
    Problems list, by 1-based position, the calls that raised or returned something invalid (those become
    ``error`` traces, so nothing is dropped).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    pairs = _query_pairs(queries)
    jobs = [(qid, q, t) for t in range(trials) for qid, q in pairs]
    config = {"callable": getattr(fn, "__qualname__", repr(fn)), "concurrency": concurrency, "trials": trials}
    header = RunHeader(run_name=run_name, source="callable", config=config)
    sha = header.config_sha
    results: list[Trace | None] = [None] * len(jobs)
    problems: list[Problem] = []

    def finish(pos: int, outcome: Any, ms: float) -> None:
        qid, question, trial = jobs[pos]
        try:
            if isinstance(outcome, BaseException):
                raise outcome
            results[pos] = _to_trace(outcome, qid, question, trial, sha, ms)
        except (Exception, ValidationError) as exc:  # noqa: BLE001 - recorded as an error trace
            problems.append(Problem(pos + 1, f"query {qid} trial {trial}: {type(exc).__name__}: {exc}"))
            results[pos] = Trace(trace_id=make_trace_id(sha, qid, trial), query_id=qid, trial=trial,
                                 question=question, outcome="error", error=f"{type(exc).__name__}: {exc}",
                                 durations_ms={"total": ms})

    cols = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*cols, transient=True, disable=not progress) as bar:
        task = bar.add_task(run_name, total=len(jobs))
        if inspect.iscoroutinefunction(fn):

            async def main() -> None:
                sem = asyncio.Semaphore(concurrency)

                async def one(pos: int) -> None:
                    async with sem:
                        t0 = time.perf_counter()
                        try:
                            out: Any = await fn(jobs[pos][1])
                        except Exception as exc:  # noqa: BLE001
                            out = exc
                        finish(pos, out, (time.perf_counter() - t0) * 1000)
                        bar.advance(task)

                await asyncio.gather(*(one(i) for i in range(len(jobs))))

            asyncio.run(main())
        else:

            def call(pos: int) -> tuple[int, Any, float]:
                t0 = time.perf_counter()
                try:
                    out: Any = fn(jobs[pos][1])
                except Exception as exc:  # noqa: BLE001
                    out = exc
                return pos, out, (time.perf_counter() - t0) * 1000

            with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
                for pos, out, ms in pool.map(call, range(len(jobs))):
                    finish(pos, out, ms)
                    bar.advance(task)
    problems.sort()
    return header, [r for r in results if r is not None], problems


def traces_from_jsonl(path: str | Path) -> tuple[RunHeader | None, list[Trace], list[Problem]]:
    """Traces written by any system in the ragassay JSONL format (non-strict: problems are returned)."""
    return read_traces(path, strict=False)


def _load_rows(rows: str | Path | Sequence[dict]) -> list[dict]:
    if isinstance(rows, (str, Path)):
        path = Path(rows)
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".jsonl":
            out = []
            for n, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise InputError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
            return out
        data = json.loads(text)
        if isinstance(data, dict):  # column-oriented export: {"question": [...], "contexts": [...], ...}
            keys = list(data)
            return [dict(zip(keys, vals, strict=True)) for vals in zip(*(data[k] for k in keys), strict=True)]
        return list(data)
    return list(rows)


def locate(context: str, corpus: Any, threshold: float = 90.0) -> tuple[str, int, int, float] | None:
    """Find a context string in the corpus: (doc_id, start, end, score 0-100) or None.

    Exact ``str.find`` of the canonicalized string across documents (doc_id order) first; otherwise the best
    rapidfuzz ``partial_ratio_alignment`` over documents, accepted at ``score >= threshold``.
    """
    from rapidfuzz import fuzz

    from ragassay.corpus import canonicalize

    needle = canonicalize(context).strip()
    if not needle:
        return None
    for doc in corpus.docs.values():
        at = doc.text.find(needle)
        if at >= 0:
            return doc.doc_id, at, at + len(needle), 100.0
    best = None
    for doc in corpus.docs.values():
        if len(needle) > len(doc.text):
            continue
        al = fuzz.partial_ratio_alignment(needle, doc.text, score_cutoff=threshold)
        if al is not None and (best is None or al.score > best[3]):
            best = (doc.doc_id, al.dest_start, al.dest_end, float(al.score))
    return best


def traces_from_ragas_rows(
    rows: str | Path | Sequence[dict],
    corpus: Any,
    *,
    threshold: float = 90.0,
    run_name: str = "ragas-import",
) -> tuple[RunHeader, list[Trace], list[Problem]]:
    """RAGAS-style rows -> traces whose ``fused`` and ``packed`` lists are the located contexts in order.

    A row needs ``question`` and ``contexts``; ``answer`` (empty or missing = abstained), ``ground_truth`` and
    ``query_id`` (default ``row-<n>``) are optional. Each unlocatable context is one problem (row number,
    context index, a prefix of the text) and is counted in the trace's ``meta.unlocated_contexts``.
    """
    data = _load_rows(rows)
    header = RunHeader(run_name=run_name, source="ragas",
                       config={"threshold": threshold, "locator": "exact-then-partial_ratio_alignment"},
                       corpus_digest=getattr(corpus, "digest", None))
    traces, problems = [], []
    for n, row in enumerate(data, start=1):
        if not isinstance(row, dict) or "question" not in row or "contexts" not in row:
            problems.append(Problem(n, "row needs 'question' and 'contexts'; skipped"))
            continue
        qid = str(row.get("query_id") or f"row-{n}")
        units, unlocated = [], 0
        for j, ctx in enumerate(row["contexts"] or []):
            hit = locate(str(ctx), corpus, threshold)
            if hit is None:
                unlocated += 1
                problems.append(Problem(n, f"context {j} of {qid} not found in the corpus "
                                           f"(threshold {threshold}): {str(ctx)[:60]!r}"))
                continue
            doc_id, s, e, score = hit
            text = corpus.docs[doc_id].text[s:e]
            units.append(Unit(unit_id=f"{qid}:ctx{j}", doc_id=doc_id, start=s, end=e, score=score,
                              rank=len(units) + 1, text=text))
        answer = row.get("answer")
        meta = {"unlocated_contexts": unlocated, "n_contexts": len(row["contexts"] or [])}
        if row.get("ground_truth") is not None:
            meta["ground_truth"] = row["ground_truth"]
        traces.append(Trace(trace_id=make_trace_id(header.config_sha, qid, 0), query_id=qid,
                            question=row["question"], fused=units, packed=units, answer=answer or None,
                            outcome="answered" if answer else "abstained", meta=meta))
    return header, traces, problems


def traces_from_trec_run(path: str | Path, corpus: Any) -> tuple[RunHeader, list[Trace], list[Problem]]:
    """Retrieval-only traces from a TREC run file; a unit is a whole document [0, len(text))."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: run file not found")
    per_q: dict[str, list[tuple[str, float]]] = {}
    tags: set[str] = set()
    problems: list[Problem] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 6:
            problems.append(Problem(n, f"expected 6 columns 'qid Q0 docid rank score tag', got {len(parts)}"))
            continue
        qid, _, docid, rank, score, tag = parts
        try:
            int(rank)
            sc = float(score)
        except ValueError:
            problems.append(Problem(n, f"rank {rank!r} / score {score!r} are not numbers"))
            continue
        if docid not in corpus:
            problems.append(Problem(n, f"docid {docid!r} is not in the corpus"))
            continue
        per_q.setdefault(qid, []).append((docid, sc))
        tags.add(tag)
    tag = ",".join(sorted(tags)) or path.stem
    header = RunHeader(run_name=tag, source="trec", config={"run_file": path.name, "tag": tag},
                       corpus_digest=getattr(corpus, "digest", None))
    sha = config_sha(header.config)
    traces = []
    for qid in sorted(per_q):
        # trec_eval orders by score descending and breaks ties by docno descending; the rank column is ignored.
        ranked = sorted(per_q[qid], key=lambda x: (-x[1], _desc(x[0])))
        units = [Unit(unit_id=d, doc_id=d, start=0, end=len(corpus.docs[d].text), score=s, rank=r)
                 for r, (d, s) in enumerate(ranked, start=1)]
        traces.append(Trace(trace_id=make_trace_id(sha, qid, 0), query_id=qid, branches={tag: units},
                            fused=units))
    return header, traces, problems


class _desc(str):
    """A string that sorts in reverse, for descending tie-breaks inside an ascending sort key."""

    def __lt__(self, other: str) -> bool:  # type: ignore[override]
        return str.__gt__(self, other)
