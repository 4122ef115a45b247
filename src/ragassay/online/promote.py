"""Promote production failures to a labelling queue (spec §15.4, the flywheel): requests that carry a failure
signal, sampled per stratum on purpose, become items in the pooled-labelling format ``ragassay golden pool``
writes (:mod:`ragassay.golden.pool`: ``queue.jsonl``, ``pool.json``, the ``label.html`` page), plus
``queries.jsonl``, one authoring stub per request (``source: production``, ``created`` its day, tags) that
``ragassay golden merge-labels`` turns into golden-set entries once the labels come back
(:func:`ragassay.golden.pool.merge_promoted`).

**Selection.** A request is a candidate when it carries any of the chosen signals. Per stratum, at most
``per_stratum`` candidates are taken: the ones with the most chosen signals first, ties broken by a seeded
hash of the request id (so a re-run with the same seed picks the same requests). A candidate whose question
(case and whitespace folded) is one already taken is passed over and counted: a question is labelled once.

**Units.** A retrieved unit id of the reference pipeline's form ``DOC:START-END`` that names a span of a
document in the corpus given is a unit: one queue item per unit, its text the quote. A request none of whose
units resolves (no corpus given, ids of another form, spans outside the document) is one question-only item
(``doc_id`` empty, offsets 0, empty quote): the labelling page shows it with no passage to grade, and its
evidence must be quoted by hand in the authoring stub.

**Cohort.** Every item carries the tags ``source:production``, ``date:YYYY-MM-DD``, ``signal:NAME`` (each
chosen signal it carries) and ``cohort:TAG``; the queue's ``pool.json`` names the cohort and says the items are
measured as their own stratum for a release or two before they join the regression tier (they are harder
than the old ones).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Any

from ragassay import fsio
from ragassay.errors import InputError
from ragassay.golden.pool import PROMOTE_KIND
from ragassay.golden.pool import STUBS_FILE as QUERIES_FILE
from ragassay.online.judge import FAILURE_SIGNALS, SIGNALS, fetch_texts, read_records, signals_of, uniforms

OUTPUT_KIND = "online-promote"
_UNIT = re.compile(r"^(?P<doc>.+):(?P<start>\d+)-(?P<end>\d+)$")
SEPARATE = ("measure these items as their own cohort for a release or two (they are harder than the old ones), "
            "then merge them into the regression tier")


def parse_signals(text: str | None) -> tuple[str, ...]:
    """``thumbs_down,rephrased`` -> the names, checked; None -> the failure signals."""
    if text is None:
        return FAILURE_SIGNALS
    names = tuple(dict.fromkeys(s.strip() for s in str(text).split(",") if s.strip()))
    bad = [s for s in names if s not in SIGNALS]
    if bad or not names:
        raise InputError(f"--signals {text!r}: {'unknown ' + ', '.join(bad) if bad else 'no signal named'}; choose "
                         f"from {', '.join(SIGNALS)}")
    return names


def stratum_id(stratum: str | None) -> str:
    """A production stratum as a golden-set stratum (lowercase letters, digits, underscores, starting with a
    letter): other characters become ``_``; none -> ``unstratified``."""
    if stratum is None or not str(stratum).strip():
        return "unstratified"
    s = re.sub(r"[^a-z0-9_]+", "_", str(stratum).strip().lower()).strip("_")
    return s if s and s[0].isalpha() else f"s_{s}" if s else "unstratified"


def query_id(request_id: str) -> str:
    """``prod-<request id>`` with whitespace and control characters replaced (a golden id has none)."""
    return "prod-" + "".join("_" if c.isspace() or not c.isprintable() else c for c in str(request_id))


def resolve_units(unit_ids: Sequence[str] | None, texts: Mapping[str, str] | None
                  ) -> tuple[list[tuple[str, int, int, str]], int]:
    """(doc_id, start, end, quote) of each unit id that resolves in ``texts`` (deduplicated, in order), and how
    many did not."""
    out, bad, seen = [], 0, set()
    for uid in unit_ids or []:
        m = _UNIT.match(str(uid)) if uid is not None else None
        if m is None or texts is None:
            bad += 1
            continue
        doc, start, end = m.group("doc"), int(m.group("start")), int(m.group("end"))
        text = texts.get(doc)
        if text is None or not 0 <= start < end <= len(text) or not text[start:end].strip():
            bad += 1
            continue
        if (doc, start, end) not in seen:
            seen.add((doc, start, end))
            out.append((doc, start, end, text[start:end]))
    return out, bad


def _folded(question: str | None) -> str:
    return " ".join(str(question or "").casefold().split())


def select_failures(rec: dict[str, list], signals: Sequence[str], per_stratum: int, seed: int = 0,
                    questions: Mapping[str, str | None] | None = None) -> tuple[list[int], dict[str, Any]]:
    """Record indexes chosen (grouped by stratum, strata in name order) and counts per stratum; with
    ``questions`` (request_id -> question), a question already taken is passed over (``repeats``)."""
    n = len(rec["request_id"])
    sigs = [[s for s in signals_of(rec, k) if s in signals] for k in range(n)]
    cand = [k for k in range(n) if sigs[k]]
    u = uniforms([rec["request_id"][k] for k in cand], seed)
    by: dict[str, list[tuple[int, float, int]]] = {}
    for k, uk in zip(cand, u, strict=True):
        by.setdefault(stratum_id(rec["stratum"][k]), []).append((-len(sigs[k]), float(uk), k))
    chosen, per, seen = [], {}, set()
    for s in sorted(by):
        take, repeats = [], 0
        for _, _, k in sorted(by[s]):
            if len(take) == per_stratum:
                break
            if questions is not None:
                q = _folded(questions.get(rec["request_id"][k]))
                if q in seen:
                    repeats += 1
                    continue
                seen.add(q)
            take.append(k)
        chosen += take
        per[s] = {"candidates": len(by[s]), "promoted": len(take), "repeats": repeats}
    return chosen, per


def promote(store: str | Path, out: str | Path, *, per_stratum: int = 20, signals: Sequence[str] = FAILURE_SIGNALS,
            date_from: date | None = None, date_to: date | None = None, texts: Mapping[str, str] | None = None,
            corpus_digest: str | None = None, cohort: str | None = None, seed: int = 0) -> dict[str, Any]:
    """Write the queue folder ``out`` (new, empty, or an earlier promote queue; anything else is refused)
    and return its ``pool.json`` content."""
    from ragassay.golden.pool import PAGE_FILE, POOL_FILE, QUEUE_FILE, queue_bytes, render_page
    from ragassay.golden.schema import AuthoredQuery

    out = Path(out)
    if isinstance(per_stratum, bool) or not isinstance(per_stratum, int) or per_stratum < 1:
        raise InputError(f"--per-stratum must be an integer >= 1, got {per_stratum!r}")
    fsio.check_output_dir(out, OUTPUT_KIND)
    rec = read_records(store, date_from, date_to)
    n = len(rec["request_id"])
    candidates = [rec["request_id"][k] for k in range(n) if any(x in signals for x in signals_of(rec, k))]
    questions = {rid: t["question"] for rid, t in fetch_texts(store, candidates, ("question",)).items()}
    chosen, per = select_failures(rec, signals, per_stratum, seed, questions)
    if cohort is None:
        last = max((rec["day"][k] for k in chosen), default=None) or (date_to.isoformat() if date_to else None)
        cohort = f"production-{last[:7]}" if last else "production"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", cohort):
        raise InputError(f"--cohort {cohort!r}: use letters, digits, '.', '_' and '-' (it becomes a tag)")
    fetched = fetch_texts(store, [rec["request_id"][k] for k in chosen], ("question", "answer", "unit_ids"))
    records, stubs = [], []
    counts = Counter(requests=len(chosen), items=0, unit_items=0, question_only=0, unresolved_units=0)
    for k in chosen:
        rid = str(rec["request_id"][k])
        qid = query_id(rid)
        day = rec["day"][k]
        stratum = stratum_id(rec["stratum"][k])
        carried = [s for s in signals_of(rec, k) if s in signals]
        tags = ["source:production", f"date:{day}", *(f"signal:{s}" for s in carried), f"cohort:{cohort}"]
        text = fetched[rid]
        units, bad = resolve_units(text["unit_ids"], texts)
        counts["unresolved_units"] += bad
        common = {"query_id": qid, "question": text["question"], "stratum": stratum, "request_id": rid,
                  "source": "production", "date": day, "signals": carried, "cohort": cohort, "tags": tags,
                  "answer": text["answer"]}
        if units:
            for rank, (doc, start, end, quote) in enumerate(units, 1):
                records.append({**common, "doc_id": doc, "start": start, "end": end, "quote": quote,
                                "retrieved_by": [{"run": "production", "run_id": rid, "rank": rank}]})
            counts["unit_items"] += len(units)
        else:
            records.append({**common, "doc_id": "", "start": 0, "end": 0, "quote": "",
                            "retrieved_by": [{"run": "production", "run_id": rid, "rank": 0}],
                            "note": "question only: no retrieved unit resolved in the corpus; quote its evidence "
                                    "by hand"})
            counts["question_only"] += 1
        stub = {"query_id": qid, "question": text["question"], "stratum": stratum, "tags": tags,
                "answerable": True, "source": "production", "created": day}
        AuthoredQuery.model_validate(stub)  # a stub the golden builder would refuse is a bug here, not later
        stubs.append(stub)
    counts["items"] = len(records)
    body = queue_bytes(records)
    meta = {"kind": PROMOTE_KIND, "dataset_version": cohort, "cohort": cohort,
            "measure_separately": SEPARATE, "corpus_digest": corpus_digest, "k": per_stratum,
            "runs": [{"name": "production", "run_id": "production"}], "signals": list(signals),
            "from": None if date_from is None else date_from.isoformat(),
            "to": None if date_to is None else date_to.isoformat(), "seed": seed, "store": str(store),
            "per_stratum": per, "counts": dict(counts), "n_items": len(records),
            "queue_sha256": hashlib.sha256(body).hexdigest()}
    fsio.make_dir(out)
    fsio.atomic_write_bytes(out / QUEUE_FILE, body)
    fsio.atomic_write_text(out / QUERIES_FILE, "".join(json.dumps(s, ensure_ascii=False) + "\n" for s in stubs))
    fsio.atomic_write_text(out / POOL_FILE, json.dumps(meta, ensure_ascii=False, indent=2) + "\n")
    fsio.atomic_write_text(out / PAGE_FILE, render_page(records, meta))
    fsio.mark_output_dir(out, OUTPUT_KIND)
    return {**meta, "out": str(out)}


__all__ = ["OUTPUT_KIND", "QUERIES_FILE", "parse_signals", "promote", "query_id", "resolve_units", "select_failures",
           "stratum_id"]
