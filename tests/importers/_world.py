"""A three-document corpus and a five-query golden set small enough to score by hand, and the CLI runner the
importer tests share.

Evidence: q1 "Cats purr when they are content." (grade 3), q2 "Dogs bark at strangers." (2), q3 "Fish
breathe through gills." (2). q2's question is authored with a run of spaces, and d1 and d2 share one
question (so a row with that question is ambiguous).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragassay.cli.app import main

DOCS = {
    "cats": "Cats purr when they are content. Cats sleep for most of the day.\n",
    "dogs": "Dogs bark at strangers. Dogs wag their tails when happy.\n",
    "fish": "Fish swim in schools. Fish breathe through gills.\n",
}
GOLDEN = """\
dataset: pets
queries:
  - query_id: q1
    question: Why do cats purr?
    stratum: cats
    evidence:
      - {doc_id: cats, quote: "Cats purr when they are content.", grade: 3}
  - query_id: q2
    question: "What do dogs do   at strangers?"
    stratum: dogs
    evidence:
      - {doc_id: dogs, quote: "Dogs bark at strangers.", grade: 2}
  - query_id: q3
    question: How do fish breathe?
    stratum: fish
    evidence:
      - {doc_id: fish, quote: "Fish breathe through gills.", grade: 2}
  - query_id: d1
    question: Tell me about pets.
    stratum: neg
    answerable: false
  - query_id: d2
    question: Tell me about pets.
    stratum: neg
    answerable: false
"""


def make_world(root: Path) -> dict[str, str]:
    """Corpus folder and built golden set under ``root``; returns the CLI paths."""
    docs = root / "corpus"
    docs.mkdir(parents=True)
    for doc_id, text in DOCS.items():
        (docs / f"{doc_id}.txt").write_text(text)
    (root / "golden.yaml").write_text(GOLDEN)
    code, _, err = cli(["golden", "build", str(root / "golden.yaml"), "--corpus", str(docs), "-o",
                        str(root / "golden")])
    assert code == 0, err
    return {"corpus": str(docs), "golden": str(root / "golden"), "root": str(root)}


def cli(args: list[str], capsys: pytest.CaptureFixture | None = None) -> tuple[int, str, str]:
    """``ragassay ARGS`` in process: (exit code, stdout, stderr)."""
    if capsys is not None:
        capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    cap = capsys.readouterr() if capsys is not None else None
    return (e.value.code or 0), (cap.out if cap else ""), (cap.err if cap else "")


def import_json(kind: str, src: Path, world: dict, capsys, *extra: str) -> dict:
    """``ragassay import KIND SRC -o <root>/<stem>.jsonl --json``, exit 0 asserted; its JSON output."""
    out = Path(world["root"]) / f"{Path(src).stem}-{kind}.jsonl"
    code, stdout, err = cli(["import", kind, src, "--golden", world["golden"], "--corpus", world["corpus"], "-o", out,
                             "--json", *extra], capsys)
    assert code == 0, err
    return json.loads(stdout)


def score(traces: str, world: dict, name: str, capsys, *extra: str) -> dict[tuple[str, str], float]:
    """``ragassay score`` the traces into ``<root>/s.duckdb`` as run ``name``; {(query_id, metric): value}."""
    import ragassay

    db = Path(world["root"]) / "s.duckdb"
    code, _, err = cli(["score", traces, "--golden", world["golden"], "--corpus", world["corpus"], "--store", db,
                        "--name", name, "--json", *extra], capsys)
    assert code == 0, err
    df = ragassay.load_run(name, store=db).to_pandas()
    return {(q, m): v for q, m, v in zip(df.query_id, df.metric, df.value, strict=True)}
