"""Importers that turn other systems' output into traces, each returning (traces, problems).

* :func:`traces_from_callable`: call a Python function per question (sync or async) under a concurrency
  limit; it may return a Trace, a dict of Trace fields, or just the answer string; an exception becomes an
  ``error`` trace.
* :func:`traces_from_jsonl`: a trace file written by any system (see :mod:`ragassay.trace.io`); its ranked
  lists get the run checks of ``ragassay trec``.
* :func:`traces_from_ragas_rows`: RAGAS rows in the column names of RAGAS 0.2 and later or of earlier
  versions, matched to golden queries by query id or question text (:class:`QuestionMatcher`); each context
  string is located in the corpus (exact match on canonicalized text first, then rapidfuzz
  ``partial_ratio_alignment`` at a threshold); unmatched rows and unlocatable and ambiguous contexts are
  counted and reported per row, wrong types are errors. :func:`traces_from_rows` is its engine, shared with
  the DeepEval importer.
* :func:`traces_from_trec_run`: a TREC run file (``qid Q0 docid rank score tag``) as retrieval-only
  traces of whole documents, ordered like trec_eval (score descending, then docid descending), read and
  checked by the same code as ``ragassay trec``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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
    """Traces written by any system in the ragassay JSONL format (non-strict: problems are returned).

    On top of the reader's checks, every ranked list (each branch, ``fused``, ``reranked``) goes through
    the checks ``ragassay trec`` applies to a run (:func:`ragassay.metrics.trec.ranking_problems`): a
    non-finite score or a unit listed twice is a problem on the trace's line, and that trace is skipped.
    An empty file is an error, as for ``ragassay trec``.
    """
    from ragassay.metrics.trec import ranking_problems

    path = Path(path)
    _check_text_file(path, "a header line and one trace per line")
    header, traces, problems = read_traces(path, strict=False)
    kept, bad = [], []
    for t in traces:
        found = []
        for name, units in _ranked_lists(t):
            found += [
                f"{name} rank {i + 1}: {msg}"
                for i, msg in ranking_problems(
                    [t.query_id] * len(units), [u.unit_id for u in units], [u.score for u in units],
                    lambda i, name=name: f"{name} rank {i + 1}", what="unit",
                )
            ]
        if found:
            bad.append((t.key, found))
        else:
            kept.append(t)
    if bad:
        lines = _trace_lines(path)
        problems = sorted(problems + [Problem(lines[key], msg) for key, msgs in bad for msg in msgs])
    return header, kept, problems


def _ranked_lists(t: Trace):
    for name, units in t.branches.items():
        yield f"branches.{name}", units
    yield "fused", t.fused
    if t.reranked is not None:
        yield "reranked", t.reranked


def _trace_lines(path: Path) -> dict[tuple[str, int], int]:
    """The line of the record the reader kept for each (query_id, trial): the first valid one."""
    out: dict[tuple[str, int], int] = {}
    with path.open(encoding="utf-8") as fh:
        for n, raw in enumerate(fh, start=1):
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and rec.pop("type", None) == "trace":
                try:
                    out.setdefault(Trace.model_validate(rec).key, n)
                except ValidationError:
                    continue
    return out


def _check_text_file(path: Path, expected: str) -> str:
    """The file's text; InputError (naming the line) when it is missing, empty or not UTF-8."""
    if not path.is_file():
        raise InputError(f"{path}: file not found; check the path")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError(
            f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); re-save the file as UTF-8"
        ) from None
    if not text.strip():
        raise InputError(f"{path}: file is empty; expected {expected}")
    return text


def load_rows(rows: str | Path | Sequence[dict], what: str = "RAGAS rows",
               columns: bool = True) -> tuple[str, list[Any]]:
    """(name for messages, the rows) from a list of dicts, a pandas DataFrame, or a .json file (a list of rows;
    with ``columns`` also an object of columns) or .jsonl file (one row a line)."""
    if not isinstance(rows, (str, Path)):
        if hasattr(rows, "columns") and hasattr(rows, "to_dict"):  # a pandas DataFrame, e.g. RAGAS' to_pandas()
            return "rows", rows.to_dict(orient="records")
        if isinstance(rows, (dict, bytes)) or not isinstance(rows, Iterable):
            hint = ("; for columns ({'question': [...], ...}) write them to a .json file or pass a list of rows"
                    if columns else "")
            raise InputError(f"{what} must be a list of dicts or a path, got {type(rows).__name__}{hint}")
        return "rows", list(rows)
    path = Path(rows)
    text = _check_text_file(path, f"{what} (a JSON list{', a JSON object of columns' if columns else ''} or "
                                  "JSON lines)")
    if path.suffix == ".jsonl":
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise InputError(f"{path}:{n}: not valid JSON ({exc.msg}); fix the line") from None
        return str(path), out
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if isinstance(data, dict) and columns:  # column-oriented export: {"question": [...], "contexts": [...], ...}
        not_lists = [k for k, v in data.items() if not isinstance(v, list)]
        if not_lists:
            raise InputError(
                f"{path}: a column-oriented file needs a list per column; {not_lists[0]!r} is a "
                f"{type(data[not_lists[0]]).__name__}"
            )
        lengths = {k: len(v) for k, v in data.items()}
        if len(set(lengths.values())) > 1:
            sizes = ", ".join(f"{k}: {n}" for k, n in lengths.items())
            raise InputError(
                f"{path}: columns have different lengths ({sizes}); every column needs one value per row"
            )
        keys = list(data)
        return str(path), [dict(zip(keys, vals, strict=True)) for vals in zip(*data.values(), strict=True)]
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON list of rows{' or an object of columns' if columns else ''}, "
                         f"got {type(data).__name__}")
    return str(path), data


def locate(context: str, corpus: Any, threshold: float = 90.0) -> list[tuple[str, int, int, float]]:
    """Every place a context string may come from: a list of (doc_id, start, end, score 0-100).

    Every exact occurrence of the canonicalized string, in doc_id order then offset (overlapping ones
    included); when there is none, the rapidfuzz ``partial_ratio_alignment`` of each document that reaches
    the best score, if that score is ``>= threshold``. Empty: not found. More than one: ambiguous.
    """
    from rapidfuzz import fuzz

    from ragassay.corpus import canonicalize

    needle = canonicalize(context).strip()
    if not needle:
        return []
    exact = []
    for doc in corpus.docs.values():
        at = doc.text.find(needle)
        while at >= 0:
            exact.append((doc.doc_id, at, at + len(needle), 100.0))
            at = doc.text.find(needle, at + 1)
    if exact:
        return exact
    found = []
    for doc in corpus.docs.values():
        if len(needle) > len(doc.text):
            continue
        al = fuzz.partial_ratio_alignment(needle, doc.text, score_cutoff=threshold)
        if al is not None:
            found.append((doc.doc_id, al.dest_start, al.dest_end, float(al.score)))
    best = max((f[3] for f in found), default=None)
    return [f for f in found if f[3] == best]


def check_threshold(threshold: Any) -> float:
    """The fuzzy placement threshold of :func:`locate`, checked: a rapidfuzz ``partial_ratio`` score, a
    percentage with 0 < threshold <= 100 (0 would place any text somewhere; above 100 nothing fuzzy)."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 100:
        raise InputError(f"threshold {threshold!r} is out of range: it is the least rapidfuzz partial_ratio score "
                         "(a percentage, more than 0 and at most 100) at which a context not found verbatim is "
                         "placed; the default is 90")
    return float(threshold)


def question_key(text: str) -> str:
    """The form in which an imported question is compared with the golden questions: the corpus
    canonicalization (invisible characters removed, newlines unified, NFC), then every run of whitespace,
    newlines included, folded to one space and the ends trimmed. Case and punctuation count."""
    from ragassay.corpus import canonicalize

    return " ".join(canonicalize(text).split())


def _short(text: str, n: int = 60) -> str:
    return repr(text if len(text) <= n else text[:n] + "…")


class QuestionMatcher:
    """Matches imported records (RAGAS or DeepEval rows, OTel traces) to golden queries and keeps the account.

    A record that carries a query id is matched by it, and the id must be in the golden set. One that does
    not is matched by its question: its :func:`question_key` equal to that of exactly one golden question.
    None equal: unmatched; several: ambiguous, never guessed. With ``golden=None`` ids are taken as given and
    a record without one gets the caller's fallback id. ``unit`` names the position in listings (row, line);
    ``id_name`` says, in messages, where a record's query id goes.
    """

    def __init__(self, golden: Any, unit: str = "row", id_name: str = "a query_id"):
        self.golden, self.unit, self.id_name = golden, unit, id_name
        self._by_key: dict[str, list[str]] = {}
        for q in golden.queries if golden is not None else ():
            self._by_key.setdefault(question_key(q.question), []).append(q.query_id)
        self.matched: dict[str, int] = {}
        self.unmatched: list[dict] = []
        self.ambiguous: list[dict] = []

    def match(self, pos: int, given: Any, question: Any, fallback: str | None = None
              ) -> tuple[str | None, str, str | None]:
        """``(query id or None, how, problem)``: how is ``query_id``, ``question`` or ``position`` (the
        fallback); the problem (None when matched) says why the record is skipped."""
        if given is not None and given != "":
            qid = str(given)
            if self.golden is None or qid in self.golden:
                return qid, "query_id", None
            self.unmatched.append({self.unit: pos, "query_id": qid, "question": question})
            return None, "query_id", f"query_id {qid!r} is not in the golden set; skipped"
        if self.golden is None:
            return fallback, "position", None
        if not isinstance(question, str) or not question.strip():
            self.unmatched.append({self.unit: pos, "query_id": None, "question": None})
            return None, "question", f"no question to match to the golden set; skipped (give it {self.id_name})"
        ids = self._by_key.get(question_key(question), [])
        if len(ids) == 1:
            return ids[0], "question", None
        if not ids:
            self.unmatched.append({self.unit: pos, "query_id": None, "question": question})
            return None, "question", (f"question {_short(question)} matches no golden question; skipped (word it "
                                      f"as the golden set does, or give it {self.id_name})")
        self.ambiguous.append({self.unit: pos, "question": question, "query_ids": ids})
        return None, "question", (f"question {_short(question)} matches {len(ids)} golden queries "
                                  f"({', '.join(ids[:5])}); skipped (give it {self.id_name})")

    def count(self, how: str) -> None:
        """One trace made from a record matched ``how``."""
        self.matched[how] = self.matched.get(how, 0) + 1

    def stats(self, total: int) -> dict:
        """The account for the trace header and ``--json``: records seen, traces made (by how each was
        matched), the unmatched and ambiguous records listed, and the rest skipped (see the problems)."""
        made = sum(self.matched.values())
        return {"records": total, "traces": made, "matched_by": dict(sorted(self.matched.items())),
                "unmatched": self.unmatched, "ambiguous": self.ambiguous,
                "skipped": total - made - len(self.unmatched) - len(self.ambiguous)}

    def nothing_imported(self, source: str, total: int, problems: list[Problem], what: str = "row") -> InputError:
        """The error for an import in which none of the ``total`` records (``what``) became a trace: one
        line with the counts and the first problem."""
        s = self.stats(total)
        first = f"; first: {self.unit} {problems[0].line}: {problems[0].message}" if problems else ""
        return InputError(f"{source}: none of its {total} {what}(s) became a trace ({len(s['unmatched'])} "
                          f"unmatched, {len(s['ambiguous'])} ambiguous, {s['skipped']} skipped){first}")


def _row_query_id(row: dict) -> Any:
    return row.get("query_id")


@dataclass(frozen=True)
class RowFormat:
    """Which keys of a row hold the question, the retrieved contexts (a list of strings, best first) and the
    answer; which keys are copied into the trace's ``meta``; and where a row's query id is (None: absent)."""

    name: str
    question: str
    contexts: str
    answer: str
    keep: tuple[str, ...] = ()
    query_id: Callable[[dict], Any] = _row_query_id


RAGAS_OLD = RowFormat("ragas<0.2", "question", "contexts", "answer", keep=("ground_truth", "ground_truths"))
RAGAS_NEW = RowFormat("ragas>=0.2", "user_input", "retrieved_contexts", "response", keep=("reference",))
_OLD_NAMES = ("question", "contexts", "answer", "ground_truth", "ground_truths")
_NEW_NAMES = ("user_input", "retrieved_contexts", "response", "reference")


def _ragas_format(source: str, data: list[Any]) -> RowFormat:
    """The RAGAS spelling of a file's columns; a file that mixes the two is an InputError naming them."""
    keys: set[str] = set()
    for row in data:
        if isinstance(row, dict):
            keys.update(row)
    old = [k for k in _OLD_NAMES if k in keys]
    new = [k for k in _NEW_NAMES if k in keys]
    if old and new:
        raise InputError(f"{source}: mixes RAGAS column names from before 0.2 ({', '.join(old)}) with those of 0.2 "
                         f"and later ({', '.join(new)}); rename the columns to one spelling")
    return RAGAS_NEW if new else RAGAS_OLD


def _text_field(source: str, n: int, qid: str, row: dict, key: str, required: bool) -> str | None:
    """A row's string field; a wrong type (a number, NaN, a list) is an InputError naming the row."""
    value = row.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        shown = "null" if value is None else f"a {type(value).__name__} ({value!r:.40})"
        raise InputError(f"{source}: row {n} ({qid}): {key} is {shown}; {key} must be a string")
    return value


def _contexts(source: str, n: int, qid: str, row: dict, key: str) -> list[str]:
    """A row's contexts: a list of strings, else an InputError naming the row (a plain string is never
    searched for as one context, nor NaN as the text "nan")."""
    contexts = row[key]
    if not isinstance(contexts, list):
        kind = "a plain string" if isinstance(contexts, str) else (
            "null" if contexts is None else f"a {type(contexts).__name__}")
        raise InputError(f"{source}: row {n} ({qid}): {key} is {kind}; {key} must be a list of strings (wrap a "
                         "single context as [\"...\"]; use [] when nothing was retrieved)")
    for j, ctx in enumerate(contexts):
        if not isinstance(ctx, str):
            raise InputError(f"{source}: row {n} ({qid}): context {j} is "
                             f"{'null' if ctx is None else f'a {type(ctx).__name__} ({ctx!r:.40})'}; "
                             f"{key} must be a list of strings")
    return contexts


def _place(contexts: list[str], qid: str, n: int, corpus: Any, threshold: float, problems: list[Problem]
           ) -> tuple[list[Unit], int, int]:
    """The contexts located in the corpus as ranked units, and how many were not found or ambiguous (each a
    problem on row ``n``)."""
    units, unlocated, ambiguous = [], 0, 0
    for j, ctx in enumerate(contexts):
        hits = locate(ctx, corpus, threshold)
        if not hits:
            unlocated += 1
            problems.append(Problem(n, f"context {j} of {qid} not found in the corpus (threshold {threshold}): "
                                       f"{ctx[:60]!r}"))
            continue
        if len(hits) > 1:
            ambiguous += 1
            where = ", ".join(f"{d}@{s}" for d, s, _, _ in hits[:5])
            more = f" and {len(hits) - 5} more" if len(hits) > 5 else ""
            problems.append(Problem(n, f"context {j} of {qid} is ambiguous: found at {len(hits)} places "
                                       f"({where}{more}); not placed: {ctx[:60]!r}"))
            continue
        doc_id, s, e, score = hits[0]
        units.append(Unit(unit_id=f"{qid}:ctx{j}", doc_id=doc_id, start=s, end=e, score=score, rank=len(units) + 1,
                          text=corpus.docs[doc_id].text[s:e]))
    return units, unlocated, ambiguous


def traces_from_rows(
    rows: Iterable[tuple[int, Any]],
    corpus: Any,
    golden: Any,
    fmt: RowFormat,
    *,
    source: str,
    total: int,
    threshold: float,
    run_name: str,
    kind: str,
    problems: Sequence[Problem] = (),
) -> tuple[RunHeader, list[Trace], list[Problem]]:
    """Numbered rows -> one trace each, whose ``fused`` and ``packed`` lists are the placed contexts in order.

    The engine of the RAGAS and DeepEval importers (``fmt`` names the keys). A row is matched to a golden
    query by :class:`QuestionMatcher` (its query id, else its question); an unmatched or ambiguous row, a row
    without the question or contexts key, and a row whose query an earlier row already gave are skipped,
    each a problem on its row. Wrong types are InputErrors naming the row. Each context is placed with
    :func:`locate`: not found or ambiguous is a problem, counted in ``meta.unlocated_contexts`` /
    ``meta.ambiguous_contexts``, and not placed. No trace at all (``total`` rows) is an InputError. The
    header's ``stats["matching"]`` is :meth:`QuestionMatcher.stats`.
    """
    threshold = check_threshold(threshold)
    header = RunHeader(run_name=run_name, source=kind,
                       config={"threshold": threshold, "locator": "exact-then-partial_ratio_alignment",
                               "ambiguous": "not placed", "columns": fmt.name,
                               "match": "query_id, else question" if golden is not None else "query_id, else row"},
                       corpus_digest=getattr(corpus, "digest", None),
                       dataset_version=getattr(golden, "dataset_version", None))
    matcher = QuestionMatcher(golden)
    traces: list[Trace] = []
    problems = list(problems)
    seen: dict[str, int] = {}
    for n, row in rows:
        if not isinstance(row, dict) or fmt.question not in row or fmt.contexts not in row:
            problems.append(Problem(n, f"row needs '{fmt.question}' and '{fmt.contexts}'; skipped"))
            continue
        given = fmt.query_id(row)
        label = str(given) if given is not None and given != "" else f"row-{n}"
        question = _text_field(source, n, label, row, fmt.question, required=True)
        answer = _text_field(source, n, label, row, fmt.answer, required=False)
        contexts = _contexts(source, n, label, row, fmt.contexts)
        qid, how, why = matcher.match(n, given, question, fallback=label)
        if qid is None:
            problems.append(Problem(n, why or "not matched; skipped"))
            continue
        if qid in seen:
            said = f"query_id {qid!r} repeats" if how != "question" else f"question of query {qid!r} repeats"
            problems.append(Problem(n, f"{said} row {seen[qid]}; skipped"))
            continue
        seen[qid] = n
        units, unlocated, ambiguous = _place(contexts, qid, n, corpus, threshold, problems)
        meta = {"unlocated_contexts": unlocated, "ambiguous_contexts": ambiguous, "n_contexts": len(contexts)}
        meta.update({k: row[k] for k in fmt.keep if row.get(k) is not None})
        matcher.count(how)
        traces.append(Trace(trace_id=make_trace_id(header.config_sha, qid, 0), query_id=qid,
                            question=question, fused=units, packed=units, answer=answer or None,
                            outcome="answered" if answer else "abstained", meta=meta))
    problems.sort(key=lambda p: p.line)
    if not traces:
        raise matcher.nothing_imported(source, total, problems)
    header.stats["matching"] = matcher.stats(total)
    return header, traces, problems


def traces_from_ragas_rows(
    rows: str | Path | Sequence[dict],
    corpus: Any,
    golden: Any = None,
    *,
    threshold: float = 90.0,
    run_name: str = "ragas-import",
) -> tuple[RunHeader, list[Trace], list[Problem]]:
    """RAGAS rows as RAGAS writes them -> traces (see :func:`traces_from_rows`).

    Columns of RAGAS 0.2 and later (``user_input``, ``retrieved_contexts``, ``response``, ``reference``) or
    of earlier versions (``question``, ``contexts``, ``answer``, ``ground_truth`` / ``ground_truths``); a file
    mixing the two is an InputError naming the columns. The question (a string) and contexts (a list of
    strings) are required, the answer optional (empty or missing = abstained); the reference is kept in
    ``meta``. With a golden set, a row is matched by its ``query_id`` when it has one, else by its question
    text (:func:`question_key`); without one, its ``query_id`` or ``row-<n>`` is taken as given.
    """
    source, data = load_rows(rows)
    if not data:
        raise InputError(f"{source}: no rows; expected RAGAS rows with 'user_input' and 'retrieved_contexts' (or "
                         "'question' and 'contexts')")
    return traces_from_rows(enumerate(data, start=1), corpus, golden, _ragas_format(source, data), source=source,
                            total=len(data), threshold=threshold, run_name=run_name, kind="ragas")


def traces_from_trec_run(
    path: str | Path, corpus: Any, ties: str = "trec_eval9"
) -> tuple[RunHeader, list[Trace], list[Problem]]:
    """Retrieval-only traces from a TREC run file; a unit is a whole document [0, len(text)).

    Lines are read and checked by :func:`ragassay.metrics.trec.read_run_lines`, the checks ``ragassay trec``
    applies (``#`` comments and fields after the tag ignored; a wrong field count, a non-numeric or
    non-finite score and a doc ranked twice for one query are problems with the same messages; an empty file
    is an error); a bad line is skipped and counted, as is a doc id not in the corpus. Order within a query
    follows ``ties`` as in :class:`~ragassay.metrics.semantics.Semantics` (score descending, then doc id
    descending; ``trec_eval9`` compares scores as float32, ``trec_eval10`` as doubles, ``given`` keeps file
    order among equal scores); the rank column is ignored, as trec_eval ignores it.
    """
    import numpy as np

    from ragassay.metrics.semantics import tie_rule
    from ragassay.metrics.trec import read_run_lines

    path = Path(path)
    rule = tie_rule(ties)
    rows, found = read_run_lines(path)
    problems = [Problem(n, msg) for n, msg in found]
    per_q: dict[str, list[tuple[str, float]]] = {}
    tags: set[str] = set()
    for n, (qid, _, docid, _, score, tag) in rows:
        if docid not in corpus:
            problems.append(Problem(n, f"docid {docid!r} is not in the corpus"))
            continue
        per_q.setdefault(qid, []).append((docid, float(score)))
        tags.add(tag)
    problems.sort()
    tag = ",".join(sorted(tags)) or path.stem
    header = RunHeader(run_name=tag, source="trec", config={"run_file": path.name, "tag": tag, "ties": rule},
                       corpus_digest=getattr(corpus, "digest", None))
    sha = config_sha(header.config)
    traces = []
    for qid in sorted(per_q):
        if rule == "given":
            ranked = sorted(per_q[qid], key=lambda x: -x[1])
        else:
            as_key = np.float32 if rule == "trec_eval9" else float
            ranked = sorted(per_q[qid], key=lambda x: (-as_key(x[1]), _desc(x[0])))
        units = [Unit(unit_id=d, doc_id=d, start=0, end=len(corpus.docs[d].text), score=s, rank=r)
                 for r, (d, s) in enumerate(ranked, start=1)]
        traces.append(Trace(trace_id=make_trace_id(sha, qid, 0), query_id=qid, branches={tag: units},
                            fused=units))
    return header, traces, problems


class _desc(str):
    """A string that sorts in reverse, for descending tie-breaks inside an ascending sort key."""

    def __lt__(self, other: str) -> bool:  # type: ignore[override]
        return str.__gt__(self, other)
