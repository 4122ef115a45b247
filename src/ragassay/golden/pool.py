"""Pooling across runs (spec §3.6): the units some run ranks in its top k that no label covers yet, a
labelling page for them, and the labels merged back into the authoring file as span evidence.

A unit is *judged* for a query when it overlaps (``any_overlap``: at least one shared character) any
evidence span of that query, whatever its grade, 0 included: the rule behind the ``judged_fraction`` of
every stored row (:mod:`ragassay.analysis.scoring`). The pool of a set of runs at depth k is the union over
runs, queries and trials of the top k units of each final list (reranked, else fused), minus the judged
units, deduplicated by ``(query_id, doc_id, start, end)``. Negative queries (``answerable: false``) are
not pooled: their evidence must stay empty. A unit that failed the corpus check (given as ``None``) or
whose text is blank cannot be shown or quoted; it is counted, never queued.

A queue ``ragassay online promote`` wrote (pool.json kind :data:`PROMOTE_KIND`) holds production questions
that are not in the golden set yet, with their authoring stubs in :data:`STUBS_FILE`; its labels make new
queries (:func:`merge_promoted`) rather than new evidence on old ones. Its question-only items (no retrieved
unit resolved) have no passage: the labelling page cannot grade them and :func:`read_labels` refuses a label
on one.

Nothing here reads the store; :mod:`ragassay.analysis.pool` feeds it the runs' lists.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ragassay.errors import InputError
from ragassay.golden.labels import EvidenceIndex, HitRule
from ragassay.golden.resolve import resolve_quote
from ragassay.golden.schema import MAX_GRADE
from ragassay.golden.set import GoldenSet
from ragassay.yamlio import read_utf8

QUEUE_FILE = "queue.jsonl"
POOL_FILE = "pool.json"
PAGE_FILE = "label.html"
OUTPUT_KIND = "golden-pool"
# A queue `ragassay online promote` wrote: its pool.json kind, and the authoring stubs of its new questions
PROMOTE_KIND = "ragassay online promote"
STUBS_FILE = "queries.jsonl"
LABEL_KEYS = ("query_id", "doc_id", "start", "end", "quote", "grade")
_REQUIRED = ("query_id", "doc_id", "start", "end", "grade")

# (doc_id, start, end) of a retrieved unit, or None for a unit that failed the corpus check
Span = tuple[str, int, int] | None
# one final list: (run key, query_id, units in rank order)
RankedList = tuple[str, str, Sequence[Span]]


@dataclass(frozen=True)
class PoolItem:
    """One (query, unit) to label and the best (lowest) rank at which each run retrieved it."""

    query_id: str
    question: str
    stratum: str
    doc_id: str
    start: int
    end: int
    quote: str
    retrieved_by: tuple[tuple[str, int], ...]

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.query_id, self.doc_id, self.start, self.end)


@dataclass(frozen=True)
class Pool:
    """The queue and what went into it: ``counts`` has ``lists`` (final lists read), ``slots`` (top-k
    positions filled), ``distinct`` (distinct units among them), ``judged``, ``queued``, ``invalid``
    (failed the corpus check), ``blank`` (no text to show), ``negative_lists`` and ``unknown_lists``
    (lists of negative queries, or of queries the golden set lacks)."""

    items: list[PoolItem]
    k: int
    counts: dict[str, int] = field(default_factory=dict)


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"--k must be a positive integer (the depth to pool), got {k!r}")


def pool_units(golden: GoldenSet, texts: Mapping[str, str], lists: Iterable[RankedList], k: int) -> Pool:
    """The unjudged units in the top ``k`` of any list, in golden-set order, then by best rank over runs.

    ``texts`` maps doc_id -> canonical text (the quote is ``text[start:end]``). See the module docstring for
    the rule; every list position is counted in exactly one of judged, queued, invalid or blank (after
    deduplication), or its list is counted as a negative or unknown query's.
    """
    _check_k(k)
    counts = Counter(lists=0, slots=0, distinct=0, judged=0, queued=0, invalid=0, blank=0, negative_lists=0,
                     unknown_lists=0)
    best: dict[tuple[str, str, int, int], dict[str, int]] = {}
    for run, qid, units in lists:
        counts["lists"] += 1
        if qid not in golden:
            counts["unknown_lists"] += 1
            continue
        if not golden[qid].answerable:
            counts["negative_lists"] += 1
            continue
        for rank, unit in enumerate(units[:k], 1):
            counts["slots"] += 1
            if unit is None:
                counts["invalid"] += 1
                continue
            doc, start, end = unit
            ranks = best.setdefault((qid, doc, start, end), {})
            ranks[run] = min(ranks.get(run, rank), rank)
    keys = list(best)
    counts["distinct"] = len(keys)
    judged = _judged(golden, keys)
    order = {q: i for i, q in enumerate(golden.query_ids)}
    items = []
    for key, is_judged in zip(keys, judged, strict=True):
        if is_judged:
            counts["judged"] += 1
            continue
        qid, doc, start, end = key
        quote = texts[doc][start:end]
        if not quote.strip():
            counts["blank"] += 1
            continue
        q = golden[qid]
        ranks = best[key]
        items.append(PoolItem(qid, q.question, q.stratum, doc, start, end, quote,
                              tuple(sorted(ranks.items(), key=lambda r: (r[1], r[0])))))
    items.sort(key=lambda it: (order[it.query_id], min(r for _, r in it.retrieved_by), it.doc_id, it.start,
                               it.end))
    counts["queued"] = len(items)
    return Pool(items, k, dict(counts))


def _judged(golden: GoldenSet, keys: Sequence[tuple[str, str, int, int]]) -> np.ndarray:
    """Per (query, doc, start, end): overlaps any evidence span of the query, of any grade."""
    if not keys:
        return np.zeros(0, dtype=bool)
    qids, docs, starts, ends = zip(*keys, strict=True)
    return EvidenceIndex(golden).grades(qids, docs, starts, ends, HitRule("any_overlap"))[1]


def judged_fraction(golden: GoldenSet, lists: Iterable[tuple[str, Sequence[Span]]], k: int
                    ) -> tuple[float | None, int, int]:
    """Mean over final lists of (top-k units judged / min(k, list length)); ``(mean, n_defined, n_undefined)``.

    A list of a query the golden set lacks is skipped; an empty list is undefined (counted, not 0); a unit
    that failed the corpus check (None) keeps its rank and counts as unjudged, as in scoring. The mean is
    None when no list is defined.
    """
    _check_k(k)
    keys, owner, den = [], [], []
    for i, (qid, units) in enumerate(lst for lst in lists if lst[0] in golden):
        top = units[:k]
        den.append(len(top))
        for u in top:
            if u is not None:
                keys.append((qid, *u))
                owner.append(i)
    den_a = np.asarray(den, dtype=np.float64)
    num = np.bincount(np.asarray(owner, dtype=np.int64)[_judged(golden, keys)], minlength=len(den))
    defined = den_a > 0
    if not defined.any():
        return None, 0, int((~defined).sum())
    return float(np.mean(num[defined] / den_a[defined])), int(defined.sum()), int((~defined).sum())


def queue_record(item: PoolItem, names: Mapping[str, str]) -> dict[str, Any]:
    """One queue.jsonl line; ``names`` maps a run key to the name shown beside it."""
    return {"query_id": item.query_id, "question": item.question, "stratum": item.stratum, "doc_id": item.doc_id,
            "start": item.start, "end": item.end, "quote": item.quote,
            "retrieved_by": [{"run": names.get(r, r), "run_id": r, "rank": rank} for r, rank in item.retrieved_by]}


def queue_bytes(records: Sequence[Mapping[str, Any]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=False) + "\n" for r in records).encode("utf-8")


def _script_json(obj: Any) -> str:
    """JSON that cannot end or comment out its <script> element: <, >, & and the JS line separators escaped."""
    text = json.dumps(obj, ensure_ascii=False)
    for ch, rep in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                    ("\u2029", "\\u2029")):
        text = text.replace(ch, rep)
    return text


def render_page(records: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> str:
    """The self-contained labelling page: the queue as inert JSON, text set only through ``textContent``,
    and a Content-Security-Policy that admits the page's own script (by hash) and nothing from the network."""
    template = resources.files("ragassay.golden").joinpath("templates/label.html").read_text(encoding="utf-8")
    script = re.search(r"<script>(.*?)</script>", template, flags=re.S).group(1)
    digest = hashlib.sha256(script.encode("utf-8")).digest()
    fill = {"SCRIPT_HASH": "sha256-" + base64.b64encode(digest).decode("ascii"),
            "TITLE": html.escape(f"label {len(records)} passages · {meta.get('dataset_version')}"),
            "DATA": _script_json({"meta": dict(meta), "items": [dict(r) for r in records]})}
    # one pass, so text from the corpus that happens to read {{TITLE}} is never filled in
    return re.sub(r"\{\{(SCRIPT_HASH|TITLE|DATA)\}\}", lambda m: fill[m.group(1)], template)


# ------------------------------------------------------------------------------------ reading a queue

@dataclass(frozen=True)
class Queue:
    """A queue folder as ``golden pool`` or ``online promote`` wrote it: its meta (pool.json), items keyed by
    (query_id, doc_id, start, end) and, for a promote queue, the authoring stubs of its questions
    (queries.jsonl) as ``(line, record)`` pairs."""

    meta: dict[str, Any]
    items: dict[tuple[str, str, int, int], dict[str, Any]]
    stubs: list[tuple[int, Any]] | None = None
    folder: Path | None = None

    @property
    def promoted(self) -> bool:
        """True for a queue of production questions (``online promote``): new queries, not new labels."""
        return self.stubs is not None


def question_only(item: Mapping[str, Any]) -> bool:
    """A promoted request none of whose retrieved units resolved: a question with no passage to grade."""
    return not item.get("doc_id") or not item.get("quote")


def read_queue(folder: str | Path) -> Queue:
    folder = Path(folder)
    pool_file, queue_file = folder / POOL_FILE, folder / QUEUE_FILE
    if not (pool_file.is_file() and queue_file.is_file()):
        raise InputError(f"{folder}: not a labelling queue (no {POOL_FILE} and {QUEUE_FILE}); pass the folder "
                         "`ragassay golden pool --out` or `ragassay online promote --out` wrote")
    try:
        meta = json.loads(read_utf8(pool_file, "pool meta"))
        items = {}
        for line in read_utf8(queue_file, "labelling queue").splitlines():
            if line.strip():
                rec = json.loads(line)
                items[(rec["query_id"], rec["doc_id"], rec["start"], rec["end"])] = rec
    except (ValueError, KeyError, TypeError) as e:
        raise InputError(f"{folder}: the queue files are damaged ({e}); pool the runs again") from e
    stubs = None
    if isinstance(meta, dict) and meta.get("kind") == PROMOTE_KIND:
        stubs_file = folder / STUBS_FILE
        if not stubs_file.is_file():
            raise InputError(f"{folder}: a promote queue without its {STUBS_FILE} (the authoring stubs of its "
                             "questions); promote again")
        stubs = []
        for n, line in enumerate(read_utf8(stubs_file, "authoring stubs").split("\n"), 1):
            if line.strip():
                try:
                    stubs.append((n, json.loads(line)))
                except ValueError as e:
                    raise InputError(f"{stubs_file}:{n}: not a JSON object ({e}); fix the line or promote "
                                     "again") from e
    return Queue(meta, items, stubs, folder)


# ------------------------------------------------------------------------------------ labels

@dataclass(frozen=True)
class Label:
    query_id: str
    doc_id: str
    start: int
    end: int
    grade: int
    line: int


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _pairs_once(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key {k!r} given twice")
        out[k] = v
    return out


def read_labels(path: str | Path, queue: Queue, query_ids: set[str], allow_empty: bool = False) -> list[Label]:
    """Labels from a JSONL file, one ``{query_id, doc_id, start, end, grade[, quote]}`` per line, checked
    against the queue. Every problem is one ``file:line`` line of a single :class:`InputError`: a line that
    is not a JSON object, a key unknown, missing or given twice, a grade that is not an integer 0–3, a query
    the authoring file lacks, a (query, unit) labelled twice, a unit not in the queue, a quote that is not
    the queued unit's text, a question-only item. Blank lines are skipped; a file with no label is refused
    unless ``allow_empty`` (a promote queue, whose stubs may carry evidence quoted by hand)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such labels file; pass the labels.jsonl the labelling page saved")
    problems: list[str] = []
    labels: list[Label] = []
    seen: dict[tuple, int] = {}
    for n, line in enumerate(read_utf8(path, "labels").split("\n"), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            rec = json.loads(line, object_pairs_hook=_pairs_once)
        except ValueError as e:
            problems.append(f"{where}: not a JSON object ({e})")
            continue
        if not isinstance(rec, dict):
            problems.append(f"{where}: expected a JSON object with {', '.join(_REQUIRED)}")
            continue
        unknown = sorted(set(rec) - set(LABEL_KEYS))
        missing = [k for k in _REQUIRED if k not in rec]
        if unknown or missing:
            problems.append(f"{where}: " + "; ".join(
                ([f"unknown key(s) {', '.join(unknown)}"] if unknown else [])
                + ([f"missing {', '.join(missing)}"] if missing else [])) + f"; a label has {', '.join(LABEL_KEYS)}")
            continue
        qid, doc, start, end, grade = (rec[k] for k in _REQUIRED)
        if not (isinstance(qid, str) and isinstance(doc, str) and _int(start) and _int(end)):
            problems.append(f"{where}: query_id and doc_id must be strings, start and end integers")
            continue
        bad = []
        if not _int(grade) or not 0 <= grade <= MAX_GRADE:
            bad.append(f"grade {json.dumps(grade)} is not an integer 0–{MAX_GRADE}")
        if qid not in query_ids:
            bad.append(f"query {qid!r} is not in the authoring file")
        key = (qid, doc, start, end)
        if key in seen:
            bad.append(f"{qid} {doc}[{start}:{end}] is labelled twice (first at line {seen[key]}); keep one")
        else:
            seen[key] = n
        queued = queue.items.get(key)
        if queued is None:
            bad.append(f"{qid} {doc}[{start}:{end}] is not in the queue; label only the queued units")
        elif question_only(queued):
            bad.append(f"{qid} is a question-only item: no retrieved unit resolved, so there is no passage to "
                       f"grade; quote its evidence by hand in the queue's {STUBS_FILE} stub instead")
        elif "quote" in rec and rec["quote"] != queued["quote"]:
            bad.append(f"{qid} {doc}[{start}:{end}]: the quote is not the queued unit's text")
        if bad:
            problems.extend(f"{where}: {b}" for b in bad)
            continue
        labels.append(Label(qid, doc, start, end, grade, n))
    if problems:
        raise InputError("\n".join(problems))
    if not labels and not allow_empty:
        raise InputError(f"{path}: holds no label; label some units on the page and save")
    return labels


def quote_evidence(doc_text: str, doc_id: str, start: int, end: int, grade: int) -> dict[str, Any]:
    """The authoring evidence for span [start, end): its text as the quote, with the 1-based ``occurrence``
    that makes ``golden build`` resolve it to this span when the text repeats in the document."""
    quote = doc_text[start:end]
    res = resolve_quote(doc_text, quote)
    ev: dict[str, Any] = {"doc_id": doc_id, "quote": quote, "grade": grade}
    if res.n_found == 1 and res.start is not None and res.start < end and res.end > start:
        return ev
    inside = [i for i, off in enumerate(res.offsets) if start <= off < end]
    if res.n_found < 2 or not inside:
        raise InputError(f"{doc_id}[{start}:{end}]: its text does not resolve back to this span; the corpus "
                         "differs from the one the queue was pooled on: pool again")
    ev["occurrence"] = inside[0] + 1
    return ev


def merge_into(queries: Sequence[Mapping[str, Any]], labels: Sequence[Label], texts: Mapping[str, str]
               ) -> list[dict[str, Any]]:
    """The authored queries with each label appended to its query's evidence (see :func:`quote_evidence`),
    in label-file order; the input is not modified."""
    by_query: dict[str, list[Label]] = {}
    for lab in labels:
        by_query.setdefault(lab.query_id, []).append(lab)
    out = []
    for q in queries:
        q = dict(q)
        new = by_query.get(q["query_id"], [])
        if new:
            q["evidence"] = list(q.get("evidence") or []) + [
                quote_evidence(texts[lab.doc_id], lab.doc_id, lab.start, lab.end, lab.grade) for lab in new]
        out.append(q)
    return out


def new_judgements(labels: Sequence[Label], strata: Mapping[str, str]) -> dict[str, Any]:
    """Counts of the merged labels: per query, per stratum and per grade."""
    per_query = Counter(lab.query_id for lab in labels)
    return {"n": len(labels),
            "per_query": dict(sorted(per_query.items())),
            "per_stratum": dict(sorted(Counter(strata[lab.query_id] for lab in labels).items())),
            "per_grade": {str(g): sum(lab.grade == g for lab in labels) for g in range(MAX_GRADE + 1)}}


# ------------------------------------------------------------------------------------ a promote queue

@dataclass(frozen=True)
class PromotedMerge:
    """What a promote queue's labels make of its questions. ``queries`` (stub order) are the ones that enter
    the authoring file and ``labels`` the labels merged into them; every other question is in exactly one of
    ``all_zero`` (labelled, every passage graded 0), ``not_graded`` (passages queued, none graded),
    ``question_only`` (no passage to grade and no evidence quoted by hand) or ``already_in_set`` (its
    query_id is in the authoring file already). ``left_out_labels`` counts the labels of ``all_zero``."""

    queries: list[dict[str, Any]]
    labels: list[Label]
    all_zero: list[str]
    not_graded: list[str]
    question_only: list[str]
    already_in_set: list[str]
    left_out_labels: int

    @property
    def added(self) -> list[str]:
        return [q["query_id"] for q in self.queries]


def merge_promoted(queue: Queue, labels: Sequence[Label], texts: Mapping[str, str], existing: set[str],
                   labels_path: str | Path) -> PromotedMerge:
    """The stubs of a promote queue as new authoring queries, each with its graded passages as evidence
    (after any evidence quoted by hand in its stub), in label-file order; see :class:`PromotedMerge`.

    A question enters when it then has evidence graded 1 or more, or when its stub was edited to
    ``answerable: false`` and carries no evidence and no label (a negative question, by hand). A question
    whose every graded passage is 0 is left out and counted: retrieval found nothing relevant, which does not
    show the corpus holds no answer, so it is neither a negative question nor an answerable one yet. Problems
    (a stub the builder would refuse or given twice, a label on a question already in the authoring file or
    on a stub marked ``answerable: false``) are one ``file:line`` line each of a single :class:`InputError`.
    """
    from pydantic import ValidationError

    from ragassay.golden.schema import AuthoredQuery

    stubs_file = (queue.folder or Path(".")) / STUBS_FILE
    by_query: dict[str, list[Label]] = {}
    for lab in labels:
        by_query.setdefault(lab.query_id, []).append(lab)
    problems: list[str] = []
    stubs: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for n, raw in queue.stubs or []:
        try:
            stub = AuthoredQuery.model_validate(raw).model_dump(mode="json", exclude_defaults=True)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(x) for x in first["loc"]) or "stub"
            problems.append(f"{stubs_file}:{n}: {where}: {first['msg']}; fix the stub or promote again")
            continue
        qid = stub["query_id"]
        if qid in seen:
            problems.append(f"{stubs_file}:{n}: {qid} is given twice (first at line {seen[qid]}); keep one")
            continue
        seen[qid] = n
        mine = by_query.get(qid, [])
        if qid in existing:
            problems.extend(f"{labels_path}:{lab.line}: {qid} is already in the authoring file (merged from an "
                            "earlier queue?); merge into the file from before that merge, or drop the label"
                            for lab in mine)
        elif not stub.get("answerable", True) and (mine or stub.get("evidence")):
            problems.append(f"{stubs_file}:{n}: {qid} is marked answerable: false but has "
                            f"{'labels' if mine else 'evidence'}; a negative question keeps its evidence empty")
        stubs.append(stub)
    if problems:
        raise InputError("\n".join(problems))
    has_passage = {qid for (qid, *_), item in queue.items.items() if not question_only(item)}
    out: list[dict[str, Any]] = []
    merged: list[Label] = []
    all_zero, not_graded, q_only, already = [], [], [], []
    left_out = 0
    for stub in stubs:
        qid = stub["query_id"]
        if qid in existing:
            already.append(qid)
            continue
        mine = by_query.get(qid, [])
        evidence = list(stub.get("evidence") or []) + [
            quote_evidence(texts[lab.doc_id], lab.doc_id, lab.start, lab.end, lab.grade) for lab in mine]
        if any(ev["grade"] >= 1 for ev in evidence) or not stub.get("answerable", True):
            out.append({**stub, "evidence": evidence} if evidence else stub)
            merged.extend(mine)
        elif evidence:
            all_zero.append(qid)
            left_out += len(mine)
        elif qid in has_passage:
            not_graded.append(qid)
        else:
            q_only.append(qid)
    return PromotedMerge(out, merged, all_zero, not_graded, q_only, already, left_out)
