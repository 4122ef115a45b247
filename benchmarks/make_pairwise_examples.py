"""Build the bundled example pairwise label file, src/ragassay/data/judge_examples/pairwise.jsonl.

Deterministic (seed 26): one pair per answerable query of the bundled license golden set, its context the
query's evidence quotes of grade 2 or more (what `ragassay judge pairwise` shows the judge). A third of the
pairs are ties (the reference answer twice, or the reference answer and the same answer prefixed with "In
short: "); the others set the reference answer against a worse one — another query's reference answer (about
another document: off-topic) or a non-answer — in a slot drawn at random, labelled a or b accordingly. The
labels follow from the construction, so every line says ``"labelled_by": "automated"``. Rows are shuffled
before ids are assigned, so an id says nothing about its label.

Run: .venv/bin/python benchmarks/make_pairwise_examples.py [--out DIR]  (rewrites the file; a test checks it
is current). ``--out DIR`` writes DIR/pairwise.jsonl instead, leaving the bundled file alone (the CI run of every
benchmark, tests/test_benchmarks_run.py, does so and compares it with the bundled one).
"""

import argparse
import json
from pathlib import Path

import numpy as np

from ragassay.analysis.runner import load_inputs
from ragassay.judges.pairwise import CLASSES, golden_context

SEED = 26
OUT = Path(__file__).resolve().parents[1] / "src" / "ragassay" / "data" / "judge_examples" / "pairwise.jsonl"
NON_ANSWERS = (
    "I could not find this in the documents.",
    "It depends on the license and on how the software is used.",
    "Please consult a lawyer for questions about licenses.",
    "The license text does not say.",
)


def examples() -> list[dict]:
    _, golden = load_inputs(None, None)
    queries = [golden[q] for q in golden.query_ids if golden[q].answerable and golden[q].reference_answer]
    rng = np.random.default_rng(SEED)
    order = [int(i) for i in rng.permutation(len(queries))]
    rows = []
    for k, qi in enumerate(order):
        q = queries[qi]
        ref = q.reference_answer
        kind = k % 3
        if kind == 0:
            other = ref if k % 2 == 0 else f"In short: {ref}"
            first, second = (ref, other) if rng.random() < 0.5 else (other, ref)
            label = "tie"
        else:
            if kind == 1:
                step = 1
                off = queries[order[(k + step) % len(order)]]
                while off.evidence[0].doc_id == q.evidence[0].doc_id:
                    step += 1
                    off = queries[order[(k + step) % len(order)]]
                worse = off.reference_answer
            else:
                worse = NON_ANSWERS[k % len(NON_ANSWERS)]
            ref_first = bool(rng.random() < 0.5)
            first, second = (ref, worse) if ref_first else (worse, ref)
            label = "a" if ref_first else "b"
        row = {"question": q.question}
        ctx = golden_context(q)
        if ctx:
            row["context"] = ctx
        rows.append({**row, "answer_a": first, "answer_b": second, "label": label, "labelled_by": "automated",
                     "kind": "pairwise"})
    shuffled = [rows[int(i)] for i in rng.permutation(len(rows))]
    out = [{"item_id": f"pw-{k + 1:03d}", **row} for k, row in enumerate(shuffled)]
    counts = {c: sum(r["label"] == c for r in out) for c in CLASSES}
    assert len(out) >= 120 and min(counts.values()) >= 15, counts
    return out


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT.parent, help="folder to write pairwise.jsonl to (default: bundled)")
    path = ap.parse_args().out / OUT.name
    rows = examples()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(rows), encoding="utf-8")
    counts = {c: sum(r["label"] == c for r in rows) for c in CLASSES}
    print(f"wrote {len(rows)} pairs to {path}: {counts}")


if __name__ == "__main__":
    main()
