"""Every authoring mistake is a ``file:line`` problem and nothing is written."""

from __future__ import annotations

import json

import pytest

from ragassay.errors import GoldenBuildError, InputError
from ragassay.golden import build_golden

Q = """  - query_id: q1
    question: Who may obtain a copy?
    stratum: lexical
    evidence:
      - {doc_id: mit, quote: "to any person obtaining a copy", grade: 3}
"""


def _problems(corpus, src, out):
    with pytest.raises(GoldenBuildError) as e:
        build_golden(src, corpus, out)
    assert not out.exists()
    return e.value.problems


@pytest.mark.parametrize(("field", "value", "line", "message"), [
    ("grade", '"3"', 6, "q1: evidence.0.grade: Input should be a valid integer"),
    ("grade", "2.5", 6, "q1: evidence.0.grade: Input should be a valid integer"),
    ("grade", "true", 6, "q1: evidence.0.grade: Input should be a valid integer"),
    ("occurrence", '"1"', 6, "q1: evidence.0.occurrence: Input should be a valid integer"),
])
def test_evidence_field_types_are_not_coerced(corpus, write_yaml, tmp_path, field, value, line, message):
    body = Q.replace("grade: 3}", f"grade: 3, {field}: {value}}}" if field != "grade" else f"grade: {value}}}")
    src = write_yaml("queries:\n" + body)
    assert _problems(corpus, src, tmp_path / "out") == [f"{src}:{line}: {message}"]


@pytest.mark.parametrize(("line_text", "message"), [
    ("    answerable: \"false\"", "q1: answerable: Input should be a valid boolean"),
    ("    created: 20261129", "q1: created: Value error, must be a date written as YYYY-MM-DD"),
    ("    nuggets: [{id: n 1, text: x}]", "q1: nuggets.0.id: Value error, must be non-empty, without whitespace"),
    ("    nuggets: [{id: n1, text: x, vital: \"yes\"}]", "q1: nuggets.0.vital: Input should be a valid boolean"),
])
def test_query_field_types(corpus, write_yaml, tmp_path, line_text, message):
    src = write_yaml("queries:\n" + Q + line_text + "\n")
    problems = _problems(corpus, src, tmp_path / "out")
    assert len(problems) == 1 and problems[0].startswith(f"{src}:2: {message}"), problems


def test_evidence_not_a_list_and_item_not_a_mapping(corpus, write_yaml, tmp_path):
    src = write_yaml("queries:\n" + Q.replace(
        '    evidence:\n      - {doc_id: mit, quote: "to any person obtaining a copy", grade: 3}\n',
        "    evidence: {doc_id: mit}\n") + "  - just a string\n  - [a, list]\n")
    assert _problems(corpus, src, tmp_path / "out") == [
        f"{src}:2: q1: evidence: Input should be a valid list",
        f"{src}:6: ?: each query must be a mapping (query_id, question, stratum, ...), got str",
        f"{src}:7: ?: each query must be a mapping (query_id, question, stratum, ...), got list",
    ]


def test_blank_question_quote_and_spaced_query_id(corpus, write_yaml, tmp_path):
    src = write_yaml("queries:\n" + Q.replace("question: Who may obtain a copy?", 'question: "  "')
                     .replace("query_id: q1", "query_id: q 1")
                     .replace('quote: "to any person obtaining a copy"', 'quote: "   "'))
    assert _problems(corpus, src, tmp_path / "out") == [
        f"{src}:2: q 1: query_id: Value error, must be non-empty, without whitespace or control characters",
        f"{src}:2: q 1: question: Value error, must contain non-whitespace text",
        f"{src}:6: q 1: evidence.0.quote: Value error, must contain non-whitespace text",
    ]


def test_same_quote_twice_in_one_query(corpus, write_yaml, tmp_path):
    src = write_yaml("queries:\n" + Q + '      - {doc_id: mit, quote: "to any person obtaining a copy", grade: 1}\n')
    assert _problems(corpus, src, tmp_path / "out") == [
        f"{src}:7: q1: the same quote from doc mit is given twice (first as evidence item 1); keep one with its grade"
    ]


@pytest.mark.parametrize(("meta", "line", "message"), [
    ("annotators: a1", 1, "annotators: Input should be a valid list"),
    ("kappa_binary: high", 1, "kappa_binary: Value error, must be a number between -1 and 1"),
    ("kappa_binary: 1.5", 1, "kappa_binary: Input should be less than or equal to 1"),
    ("relevance_threshold: x", 1, "relevance_threshold: Input should be a valid integer"),
    ("relevance_threshold: 0", 1, "relevance_threshold: Input should be greater than or equal to 1"),
    ("hit_rule: 5", 1, "hit_rule: Input should be a valid string"),
    ("hit_rule: min_fraction:2", 1, "hit rule 'min_fraction:2': the fraction must be in (0, 1]"),
    ("hit_rule: nearest", 1, "unknown hit rule 'nearest'"),
    ("generator: llm", 1, "generator: Input should be a valid dictionary"),
    ("dataset: [a]", 1, "dataset: Input should be a valid string"),
])
def test_top_level_key_types(corpus, write_yaml, tmp_path, meta, line, message):
    src = write_yaml(meta + "\nqueries:\n" + Q)
    problems = _problems(corpus, src, tmp_path / "out")
    assert len(problems) == 1 and problems[0].startswith(f"{src}:{line}: {message}"), problems


@pytest.mark.parametrize(("body", "message"), [
    ("", ":1: the file holds no YAML document; expected a list of queries or a mapping with a `queries:` list"),
    ("# nothing\n", ":1: the file holds no YAML document"),
    ("just text\n", ":1: got a str; expected a list of queries"),
    ("42\n", ":1: got a int; expected a list of queries"),
    ("dataset: x\n", ":1: no `queries:` key"),
    ("dataset: x\nqueries:\n", ":2: `queries:` must be a list of queries, got nothing"),
    ("dataset: x\nqueries: {q1: 1}\n", ":2: `queries:` must be a list of queries, got a dict"),
    ("1: x\nqueries: []\n", ":1: unknown top-level key(s) ['1']"),
    ("queries: []\n", ":1: no queries"),
])
def test_file_shape_errors(corpus, write_yaml, tmp_path, body, message):
    src = write_yaml(body) if body else tmp_path / "golden.yaml"
    if not body:
        src.write_bytes(b"")
    with pytest.raises(InputError) as e:
        build_golden(src, corpus, tmp_path / "out")
    assert f"{src}{message}" in str(e.value)
    assert not (tmp_path / "out").exists()


def test_jsonl_authoring_errors_are_line_numbered(corpus, tmp_path):
    p = tmp_path / "g.jsonl"
    good = {"query_id": "q1", "question": "who?", "stratum": "lexical",
            "evidence": [{"doc_id": "mit", "quote": "free of charge", "grade": 2}]}
    p.write_text("\n".join([
        json.dumps(good),
        json.dumps({"type": "meta", "dataset": "late"}),
        '{"query_id": "q2", "query_id": "q3"}',
        json.dumps({"type": "note"}),
        "{not json",
    ]) + "\n")
    with pytest.raises(GoldenBuildError) as e:
        build_golden(p, corpus, tmp_path / "out")
    assert e.value.problems == [
        f"{p}:2: the meta line must come before the first query",
        f"{p}:3: key 'query_id' given twice; keep one",
        f"{p}:4: unknown record type 'note'; only {{\"type\": \"meta\"}} lines and query objects are allowed",
        f"{p}:5: invalid JSON (Expecting property name enclosed in double quotes at column 2)",
    ]
    p.write_bytes(json.dumps(good).encode() + b"\n" + b'{"query_id": "q\xe9"}\n')
    with pytest.raises(InputError, match=r"g.jsonl: not UTF-8 text \(byte 0xE9 at offset \d+\)"):
        build_golden(p, corpus)
    p.write_text(json.dumps({"type": "meta", "relevance_threshold": "2"}) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(GoldenBuildError, match=r"g.jsonl:1: relevance_threshold: Input should be a valid integer"):
        build_golden(p, corpus)
    assert not (tmp_path / "out").exists()


def test_a_folder_as_source_is_a_clean_error(corpus, tmp_path):
    with pytest.raises(InputError, match="is a folder; pass a .yaml/.yml or .jsonl authoring file"):
        build_golden(tmp_path, corpus)
