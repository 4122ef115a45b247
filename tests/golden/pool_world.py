"""A small store for the pooling tests: three documents, a golden set of two answerable queries and one
negative, and two runs scored from trace files (run B has a reranker, so its final list is the reranked one),
with top-3 lists whose pool is worked out by hand in test_pool.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ragassay.cli.app import main as _main
from ragassay.cli.golden import golden_app
from ragassay.cli.golden_pool import register
from ragassay.trace.io import write_traces
from ragassay.trace.schema import RunHeader, Trace, Unit

DOCS = {
    "a": "Alpha one. Alpha two. Alpha three. Alpha four.\n",
    "b": "Beta zero. Beta two. Beta three.\n",
    "c": "Gamma one. Gamma two. Gamma one.\n",
}
AUTHORING = """
dataset: poolset
queries:
  - query_id: q1
    question: Which alpha comes first?
    stratum: lexical
    evidence:
      - {doc_id: a, quote: "Alpha one.", grade: 3}
      - {doc_id: b, quote: "Beta zero.", grade: 0}
  - query_id: q2
    question: What is the second beta?
    stratum: paraphrase
    evidence:
      - {doc_id: b, quote: "Beta two.", grade: 2}
  - query_id: q3
    question: Is there a delta?
    stratum: negative
    answerable: false
"""
K = 3


def span(doc: str, text: str, occurrence: int = 1) -> tuple[str, int, int]:
    at = -1
    for _ in range(occurrence):
        at = DOCS[doc].index(text, at + 1)
    return (doc, at, at + len(text))


ALPHA_ONE, ALPHA_TWO, ALPHA_THREE, ALPHA_FOUR = (span("a", f"Alpha {w}.") for w in ("one", "two", "three", "four"))
BETA_ZERO, BETA_TWO = span("b", "Beta zero."), span("b", "Beta two.")
BETA_OVERLAP = span("b", "two. Beta three")  # shares "two." with the evidence "Beta two.": judged
GAMMA_ONE, GAMMA_TWO, GAMMA_ONE_AGAIN = span("c", "Gamma one."), span("c", "Gamma two."), span("c", "Gamma one.", 2)

# final lists (rank order); run B's fused lists differ from its reranked ones, which are its final lists
RUN_A = {"q1": [ALPHA_ONE, GAMMA_ONE, BETA_ZERO, ALPHA_FOUR], "q2": [BETA_TWO, ALPHA_TWO, GAMMA_ONE],
         "q3": [ALPHA_THREE]}
RUN_B = {"q1": [GAMMA_ONE_AGAIN, ALPHA_TWO, ALPHA_ONE], "q2": [GAMMA_TWO, ALPHA_TWO, BETA_OVERLAP],
         "q3": [ALPHA_THREE]}
RUN_B_FUSED = {q: [ALPHA_FOUR, *reversed(units)] for q, units in RUN_B.items()}


def units(spans) -> list[Unit]:
    return [Unit(unit_id=f"{d}:{s}-{e}", doc_id=d, start=s, end=e, score=1.0 / r) for r, (d, s, e) in
            enumerate(spans, 1)]


def write_run(path: Path, name: str, final: dict, golden, corpus, fused: dict | None = None) -> Path:
    traces = [Trace(trace_id=f"{name}-{q}", query_id=q, question=golden[q].question,
                    fused=units((fused or final)[q]), reranked=units(final[q]) if fused else None)
              for q in final]
    header = RunHeader(run_name=name, config={"name": name, "reranker": {"final_k": K}},
                       corpus_digest=corpus.digest, dataset_version=golden.dataset_version)
    return write_traces(path, header, traces)


def cli(args, capsys) -> tuple[int, str, str]:
    register(golden_app)
    with pytest.raises(SystemExit) as e:
        _main([str(a) for a in args])
    out = capsys.readouterr()
    return e.value.code or 0, out.out, out.err


def make_world(tmp: Path, capsys) -> dict:
    """Corpus folder, authoring file, built set and a store with runs A and B scored from their traces."""
    from ragassay.corpus import load_corpus
    from ragassay.golden import build_golden

    corpus_dir = tmp / "corpus"
    corpus_dir.mkdir()
    for doc, text in DOCS.items():
        (corpus_dir / f"{doc}.txt").write_text(text, encoding="utf-8")
    corpus = load_corpus(corpus_dir)
    authoring = tmp / "golden.yaml"
    authoring.write_text(textwrap.dedent(AUTHORING).lstrip(), encoding="utf-8")
    golden = build_golden(authoring, corpus, tmp / "g")
    store = tmp / "s.duckdb"
    for name, final, fused in (("A", RUN_A, None), ("B", RUN_B, RUN_B_FUSED)):
        path = write_run(tmp / f"{name}.jsonl", name, final, golden, corpus, fused)
        code, _, err = cli(["score", path, "--golden", tmp / "g", "--corpus", corpus_dir, "--store", store,
                            "--name", name, "--json"], capsys)
        assert code == 0, err
    return {"tmp": tmp, "corpus_dir": corpus_dir, "corpus": corpus, "authoring": authoring, "golden": golden,
            "golden_dir": tmp / "g", "store": store}
