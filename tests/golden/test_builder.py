import json

import pytest

from ragassay.errors import GoldenBuildError, InputError
from ragassay.golden import build_golden, load_golden, resolve_quote

GOOD = """
dataset: tiny
annotators: [a1, a2]
kappa_binary: 0.78
queries:
  - query_id: q1
    question: What must accompany object code?
    stratum: paraphrase
    tags: [gpl]
    evidence:
      - doc_id: gpl
        quote: "provided that you also convey the machine-readable Corresponding Source."
        grade: 3
      - doc_id: gpl
        quote: "The end."
        occurrence: 2
        grade: 1
    reference_answer: The machine-readable Corresponding Source.
    nuggets:
      - {id: n1, text: Corresponding Source must be conveyed, vital: true}
    created: 2026-11-01
  - query_id: q2
    question: Is there a warranty clause in the MIT text?
    stratum: negative
    answerable: false
    created: 2026-11-02
"""


def test_build_resolves_quotes_to_canonical_spans(corpus, write_yaml, tmp_path):
    gs = build_golden(write_yaml(GOOD), corpus, tmp_path / "out")
    q1 = gs["q1"]
    ev = q1.evidence[0]
    text = corpus["gpl"].text
    assert text[ev.start:ev.end] == "provided that you also convey the\nmachine-readable Corresponding Source."
    assert ev.match == "whitespace"
    second = q1.evidence[1]
    assert text[second.start:second.end] == "The end." and second.start == text.rindex("The end.")
    m = gs.manifest
    assert m["n_queries"] == 2 and m["strata"] == {"negative": 1, "paraphrase": 1}
    assert m["label_type"] == "graded_0_3" and m["hit_rule"] == "any_overlap"
    assert m["annotators"] == ["a1", "a2"] and m["kappa_binary"] == 0.78
    assert m["corpus_digest"] == corpus.digest and m["built_at"] == "2026-11-02T00:00:00Z"
    assert m["source_mix"] == {"human": 2}
    loaded = load_golden(tmp_path / "out")
    assert loaded.queries == gs.queries and loaded.manifest == json.loads((tmp_path / "out/manifest.json").read_text())


def test_building_twice_is_byte_identical(corpus, write_yaml, tmp_path):
    src = write_yaml(GOOD)
    build_golden(src, corpus, tmp_path / "a")
    build_golden(src, corpus, tmp_path / "b")
    for name in ("golden.jsonl", "manifest.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_rebuild_replaces_an_existing_output_atomically(corpus, write_yaml, tmp_path):
    out = tmp_path / "out"
    build_golden(write_yaml(GOOD), corpus, out)
    build_golden(write_yaml(GOOD.replace("dataset: tiny", "dataset: tiny2")), corpus, out)
    assert json.loads((out / "manifest.json").read_text())["dataset"] == "tiny2"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out")) == []


def test_jsonl_authoring_format(corpus, tmp_path):
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps({"type": "meta", "dataset": "j"}) + "\n" + json.dumps({
        "query_id": "q1", "question": "who may obtain a copy?", "stratum": "lexical",
        "evidence": [{"doc_id": "mit", "quote": "to any person obtaining a copy", "grade": 2}]}) + "\n")
    gs = build_golden(p, corpus)
    ev = gs["q1"].evidence[0]
    assert corpus["mit"].text[ev.start:ev.end] == "to any person obtaining a copy"
    assert gs.manifest["dataset"] == "j" and gs.manifest["label_type"] == "binary"


def test_every_problem_is_listed_with_file_line_and_nothing_is_written(corpus, write_yaml, tmp_path):
    src = write_yaml("""
    queries:
      - query_id: q1
        question: unknown doc
        stratum: lexical
        evidence:
          - {doc_id: gpl3, quote: "Conveying Non-Source Forms", grade: 3}
      - query_id: q2
        question: near miss
        stratum: lexical
        evidence:
          - {doc_id: gpl, quote: "You may convey a covered work in source code form", grade: 3}
      - query_id: q3
        question: ambiguous
        stratum: lexical
        evidence:
          - {doc_id: gpl, quote: "The end.", grade: 2}
      - query_id: q1
        question: duplicate id
        stratum: lexical
        evidence:
          - {doc_id: mit, quote: "free of charge", grade: 2}
      - query_id: q5
        question: answerable without evidence
        stratum: paraphrase
      - query_id: q6
        question: negative with evidence
        stratum: negative
        answerable: false
        evidence:
          - {doc_id: mit, quote: "free of charge", grade: 1}
      - query_id: q7
        question: grade out of range
        stratum: lexical
        evidence:
          - {doc_id: mit, quote: "free of charge", grade: 4}
      - query_id: q8
        question: unknown field
        stratum: lexical
        colour: red
        evidence:
          - {doc_id: mit, quote: "free of charge", grade: 2}
      - query_id: q9
        question: occurrence out of range
        stratum: lexical
        evidence:
          - {doc_id: gpl, quote: "The end.", grade: 2, occurrence: 3}
    """)
    out = tmp_path / "never"
    with pytest.raises(GoldenBuildError) as e:
        build_golden(src, corpus, out)
    problems = e.value.problems
    assert not out.exists()
    f = str(src)
    expected = [
        f"{f}:6: q1: unknown doc_id 'gpl3' (closest doc id: 'gpl')",
        f"{f}:11: q2: quote not found in doc gpl (closest match",
        f"{f}:16: q3: quote in doc gpl ambiguous: occurs 2 times",
        f"{f}:17: q1: duplicate query_id (first defined at {f}:2)",
        f"{f}:22: q5: answerable query has no evidence with grade >= 1",
        f"{f}:25: q6: negative (answerable: false) query has evidence",
        f"{f}:35: q7: evidence grade 4 out of range 0–3",
        f"{f}:36: q8: colour: Extra inputs are not permitted",
        f"{f}:46: q9: quote in doc gpl occurrence 3 requested but the quote occurs 2 time(s)",
    ]
    assert len(problems) == len(expected), problems
    for want, got in zip(expected, problems, strict=True):
        assert got.startswith(want), (want, got)
    assert "add `occurrence: N` (1-based) or quote a longer passage" in problems[2]
    assert "You may convey a covered work in" in problems[1]


def test_negative_stratum_must_be_unanswerable(corpus, write_yaml):
    src = write_yaml("""
    queries:
      - query_id: n1
        question: q
        stratum: negative
        evidence:
          - {doc_id: mit, quote: "free of charge", grade: 2}
    """)
    with pytest.raises(GoldenBuildError, match="stratum 'negative' requires `answerable: false`"):
        build_golden(src, corpus)


def test_bad_yaml_and_unknown_top_level_keys(corpus, write_yaml):
    with pytest.raises(InputError, match=r"golden.yaml:3: invalid YAML"):
        build_golden(write_yaml("queries:\n  - query_id: [unclosed\n"), corpus)
    with pytest.raises(InputError, match=r"unknown top-level key\(s\) \['colour'\]"):
        build_golden(write_yaml("colour: red\nqueries: []\n"), corpus)


def test_resolution_tiers():
    text = "Alpha beta,\ngamma delta. Alpha beta, gamma delta."
    r = resolve_quote(text, "gamma delta.")
    assert r.error.startswith("ambiguous: occurs 2 times") and r.offsets == (12, 37)
    r = resolve_quote(text, "Alpha beta gamma delta", occurrence=1)
    assert (r.start, r.end, r.match) == (0, 23, "punctuation")
    r = resolve_quote(text, "beta,\tgamma delta. Alpha")
    assert (r.start, r.end, r.match) == (6, 30, "whitespace")
    r = resolve_quote(text, "beta, gamma", occurrence=1)
    assert (r.start, r.match, r.n_found) == (31, "exact", 1)
    assert resolve_quote(text, "epsilon").error == "not found"
