"""Build the bundled example label files of the citation, relevance, criterion and nuggets validation kinds,
src/ragassay/data/judge_examples/<kind>.jsonl, from the bundled license golden set (questions, evidence
quotes, reference answers, nuggets). Deterministic (seed 4); the labels follow from the construction, so every
line says ``"labelled_by": "automated"``:

- citation: the passage is an evidence quote (grade 2 or more); the claim is its first sentence, verbatim
  (supported); the first sentence of a quote from another document sharing under 20% of its words, that
  sentence with its first standalone number raised by one, or it followed by a sentence of another document
  (unsupported: the passage does not support the claim as a whole); or the query's question, which asserts
  nothing (cannot_tell).
- relevance: the query's reference answer (relevant); the reference answer followed by another query's
  (partially_relevant: it drifts); a refusal to an unanswerable query (partially_relevant: a justified
  refusal, as the rubric says); another query's reference answer about another document (irrelevant).
- criterion (the default rubric): the reference answer passes all three criteria; one vital nugget alone
  is partial on complete and passes no_contradiction; a non-answer or an off-topic answer fails central_fact
  and complete; the reference answer with its first number raised by one fails no_contradiction.
- nuggets: each answer is built from its query's nuggets: a nugget stated in full (support), its first 60%
  of words (partial_support, nuggets of 6 words or more) or left out (not_support); an answer that states
  none is a non-answer. Every nugget of the query is listed, in the golden order, as the nugget metrics list
  them.

Rows are shuffled before ids are assigned (nuggets: whole answers are, their nuggets stay in order), so an id
says nothing about its label.

Run: .venv/bin/python benchmarks/make_judge_examples.py [--out DIR]  (rewrites the files; a test checks they
are current). ``--out DIR`` writes them to DIR instead, leaving the bundled files alone (the CI run of every
benchmark, tests/test_benchmarks_run.py, does so and compares them with the bundled ones).
"""

import argparse
import json
import math
import re
from pathlib import Path

import numpy as np

from ragassay.analysis.runner import load_inputs

SEED = 4
OUT = Path(__file__).resolve().parents[1] / "src" / "ragassay" / "data" / "judge_examples"
NON_ANSWER = "The license text does not say."
REFUSALS = (
    "The provided license texts do not cover this, so I cannot answer it from them.",
    "None of the documents I was given mention this; I cannot answer.",
    "I could not find this license in the documents, so I will not guess.",
)
_WORDS = re.compile(r"(?u)\w+")
# A standalone integer: not part of a name like GPL-3 or a version like 2.1.
_NUMBER = re.compile(r"(?<![-.\w])(\d+)(?![-\w]|\.\d)")


def _raise_number(text: str) -> str:
    """``text`` with its first standalone number raised by one: the same sentence, a different fact."""
    return _NUMBER.sub(lambda m: str(int(m.group(1)) + 1), text, count=1)


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORDS.findall(text)}


def _first_sentence(text: str) -> str:
    for s in re.split(r"(?<=[.;:])\s+", text):
        if len(s.split()) >= 5:
            return s
    return text


def _doc(q) -> str | None:
    return q.evidence[0].doc_id if q.evidence else None


def _row(kind: str, doc: str | None, **fields) -> dict:
    return {**fields, **({"doc_id": doc} if doc else {}), "labelled_by": "automated", "kind": kind}


def _number(rows: list[dict], prefix: str) -> list[dict]:
    return [{"item_id": f"{prefix}-{k + 1:03d}", **row} for k, row in enumerate(rows)]


def _shuffled(rows: list[dict], rng) -> list[dict]:
    return [rows[int(i)] for i in rng.permutation(len(rows))]


def _other(pool: list, k: int, ok) -> object:
    """The first entry after ``k`` (cyclically) that ``ok`` accepts."""
    for step in range(1, len(pool)):
        cand = pool[(k + step) % len(pool)]
        if ok(cand):
            return cand
    raise ValueError("no entry qualifies")


def citation(golden, rng) -> list[dict]:
    pool, seen = [], set()
    for qid in golden.query_ids:
        q = golden[qid]
        for e in q.evidence:
            if e.grade >= 2 and (e.doc_id, e.quote) not in seen:
                seen.add((e.doc_id, e.quote))
                pool.append((q, e))
    pool = [pool[int(i)] for i in rng.permutation(len(pool))]
    rows = []
    for k, (q, e) in enumerate(pool[:132]):
        mine, own = _words(e.quote), _first_sentence(e.quote)

        def far(cand, mine=mine, doc=e.doc_id):
            other = _words(_first_sentence(cand[1].quote))
            return cand[1].doc_id != doc and len(mine & other) / len(mine | other) < 0.2

        if k % 16 == 15:
            claim, label, case = q.question, "cannot_tell", "question"
        elif k % 4 in (0, 2):
            claim, label, case = own, "supported", "verbatim"
        elif k % 4 == 1:
            claim, label, case = _first_sentence(_other(pool, k, far)[1].quote), "unsupported", "other_document"
        elif _NUMBER.search(own):
            claim, label, case = _raise_number(own), "unsupported", "changed_number"
        else:
            claim = f"{own} {_first_sentence(_other(pool, k, far)[1].quote)}"
            label, case = "unsupported", "added_claim"
        rows.append(_row("citation", e.doc_id, claim=claim, passage=e.quote, label=label, case=case))
    return _number(_shuffled(rows, rng), "cit")


def _answerable(golden, rng) -> list:
    qs = [golden[q] for q in golden.query_ids if golden[q].answerable and golden[q].reference_answer]
    return [qs[int(i)] for i in rng.permutation(len(qs))]


def _off_topic(pool: list, k: int) -> str:
    return _other(pool, k, lambda c: _doc(c) != _doc(pool[k])).reference_answer


def relevance(golden, rng) -> list[dict]:
    qs = _answerable(golden, rng)
    rows = []
    for k, q in enumerate(qs[:115]):
        if k < 45:
            answer, label, case = q.reference_answer, "relevant", "reference"
        elif k < 70:
            answer, label, case = f"{q.reference_answer} {_off_topic(qs, k)}", "partially_relevant", "drift"
        else:
            answer, label, case = _off_topic(qs, k), "irrelevant", "off_topic"
        rows.append(_row("relevance", _doc(q), question=q.question, answer=answer, label=label, case=case))
    negatives = [golden[q] for q in golden.query_ids if not golden[q].answerable]
    for k, q in enumerate(negatives):
        rows.append(_row("relevance", _doc(q), question=q.question, answer=REFUSALS[k % len(REFUSALS)],
                         label="partially_relevant", case="refusal"))
    return _number(_shuffled(rows, rng), "rel")


def criterion(golden, rng) -> list[dict]:
    qs = _answerable(golden, rng)
    left = list(range(len(qs)))

    def take(n: int, ok=lambda q: True) -> list[int]:
        got = [k for k in left if ok(qs[k])][:n]
        for k in got:
            left.remove(k)
        return got

    rows = []

    def add(k: int, answer: str, case: str, labels: dict[str, str]) -> None:
        q = qs[k]
        for name, label in labels.items():
            rows.append(_row("criterion", _doc(q), question=q.question, reference=q.reference_answer,
                             answer=answer, criterion=name, label=label, case=case))

    for k in take(25):
        add(k, qs[k].reference_answer, "reference", {"central_fact": "pass", "no_contradiction": "pass",
                                                     "complete": "pass"})
    for k in take(20, lambda q: len(q.nuggets) >= 2 and any(n.vital for n in q.nuggets)):
        nugget = next(n for n in qs[k].nuggets if n.vital)
        add(k, f"{nugget.text}.", "one_nugget", {"no_contradiction": "pass", "complete": "partial"})
    for k in take(12):
        add(k, NON_ANSWER, "non_answer", {"central_fact": "fail", "complete": "fail"})
    for k in take(12):
        add(k, _off_topic(qs, k), "off_topic", {"central_fact": "fail", "complete": "fail"})
    for k in take(20, lambda q: _NUMBER.search(q.reference_answer) is not None):
        add(k, _raise_number(qs[k].reference_answer), "changed_number", {"no_contradiction": "fail"})
    return _number(_shuffled(rows, rng), "crit")


def nuggets(golden, rng) -> list[dict]:
    qs = [golden[q] for q in golden.query_ids if golden[q].nuggets]
    groups = []
    for i in rng.permutation(len(qs)):
        q = qs[int(i)]
        labels, parts = [], []
        for n in q.nuggets:
            words = n.text.split()
            label = str(rng.choice(["support", "partial_support", "not_support"], p=[0.4, 0.3, 0.3]))
            if label == "partial_support" and len(words) < 6:
                label = "support" if rng.random() < 0.5 else "not_support"
            labels.append(label)
            if label == "support":
                parts.append(f"{n.text}.")
            elif label == "partial_support":
                parts.append(" ".join(words[:math.ceil(0.6 * len(words))]) + ".")
        answer = " ".join(parts) or NON_ANSWER
        groups.append([_row("nuggets", _doc(q), question=q.question, answer=answer, nugget_id=n.id,
                            nugget_text=n.text, vital=n.vital, label=label, case=q.stratum)
                       for n, label in zip(q.nuggets, labels, strict=True)])
    return _number([row for g in groups for row in g], "nug")


BUILDERS = {"citation": citation, "relevance": relevance, "criterion": criterion, "nuggets": nuggets}


def examples() -> dict[str, list[dict]]:
    """Every kind's rows, each kind from its own generator seeded with SEED."""
    _, golden = load_inputs(None, None)
    return {kind: build(golden, np.random.default_rng(SEED)) for kind, build in BUILDERS.items()}


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT, help="folder to write <kind>.jsonl to (default: bundled)")
    out = ap.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    for kind, rows in examples().items():
        (out / f"{kind}.jsonl").write_text(render(rows), encoding="utf-8")
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["label"]] = counts.get(r["label"], 0) + 1
        print(f"wrote {len(rows)} {kind} items to {out / f'{kind}.jsonl'}: {dict(sorted(counts.items()))}")


if __name__ == "__main__":
    main()
