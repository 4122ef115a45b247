"""`ragassay golden diff`: items added, removed, relabelled and edited between two built sets."""

import json

import pytest

from ragassay.cli.app import main as _main
from ragassay.cli.golden import golden_app
from ragassay.cli.golden_status import register
from ragassay.corpus import load_corpus
from ragassay.golden import build_golden
from ragassay.golden.diff import golden_diff

DOCS = {"mit": "Permission is hereby granted, free of charge, to any person obtaining a copy.\n",
        "gpl": "Convey the machine-readable Corresponding Source.\n\nNOTE: The end.\n"}

V1 = """
dataset: d
queries:
  - query_id: q1
    question: Who may obtain a copy?
    stratum: lexical
    evidence:
      - {doc_id: mit, quote: "to any person obtaining a copy", grade: 3}
  - query_id: q2
    question: What must be conveyed?
    stratum: paraphrase
    evidence:
      - {doc_id: gpl, quote: "machine-readable Corresponding Source", grade: 3}
  - query_id: q3
    question: Gone later?
    stratum: lexical
    evidence:
      - {doc_id: gpl, quote: "The end.", grade: 1}
  - query_id: q4
    question: Unchanged?
    stratum: paraphrase
    evidence:
      - {doc_id: mit, quote: "free of charge", grade: 2}
  - query_id: q5
    question: Which span?
    stratum: lexical
    evidence:
      - {doc_id: mit, quote: "Permission is hereby granted", grade: 3}
  - query_id: q6
    question: Answerable?
    stratum: temporal
    evidence:
      - {doc_id: gpl, quote: "Convey", grade: 2}
"""

V2 = """
dataset: d
queries:
  - query_id: q1
    question: Who is allowed to obtain a copy?
    stratum: lexical
    evidence:
      - {doc_id: mit, quote: "to any person obtaining a copy", grade: 3}
  - query_id: q2
    question: What must be conveyed?
    stratum: paraphrase
    evidence:
      - {doc_id: gpl, quote: "machine-readable Corresponding Source", grade: 2}
  - query_id: q4
    question: Unchanged?
    stratum: paraphrase
    evidence:
      - {doc_id: mit, quote: "free of charge", grade: 2}
  - query_id: q5
    question: Which span?
    stratum: lexical
    evidence:
      - {doc_id: mit, quote: "Permission is hereby granted, free of charge", grade: 3}
  - query_id: q6
    question: Answerable?
    stratum: negative
    answerable: false
  - query_id: q7
    question: New?
    stratum: tabular
    evidence:
      - {doc_id: gpl, quote: "NOTE", grade: 1}
"""


def _build(tmp_path, name, body, docs=DOCS):
    cdir = tmp_path / f"c-{name}"
    cdir.mkdir()
    for k, v in docs.items():
        (cdir / f"{k}.txt").write_text(v)
    src = tmp_path / f"{name}.yaml"
    src.write_text(body)
    build_golden(src, load_corpus(cdir), tmp_path / name)
    return tmp_path / name


def test_diff_worked_example_per_item_and_per_stratum(tmp_path):
    from ragassay.golden import load_golden

    d = golden_diff(load_golden(_build(tmp_path, "v1", V1)), load_golden(_build(tmp_path, "v2", V2)))
    assert d["span_identity"] == "offsets" and d["n_old"] == 6 and d["n_new"] == 6
    assert d["added"] == ["q7"] and d["removed"] == ["q3"]
    assert d["relabelled"] == [{"query_id": "q2", "changes": ["grade"]},
                               {"query_id": "q5", "changes": ["evidence"]},
                               {"query_id": "q6", "changes": ["evidence", "answerable", "stratum"]}]
    assert d["edited"] == [{"query_id": "q1", "changes": ["question"]}]
    assert d["n_unchanged"] == 1
    z = {"added": 0, "removed": 0, "relabelled": 0, "edited": 0, "unchanged": 0}
    assert d["strata"] == {
        "lexical": {**z, "removed": 1, "relabelled": 1, "edited": 1},
        "negative": {**z, "relabelled": 1},  # counted under its new stratum
        "paraphrase": {**z, "relabelled": 1, "unchanged": 1},
        "tabular": {**z, "added": 1},
    }
    assert set(d["pins"]) == {"dataset_version"}


def test_diff_of_a_set_with_itself_is_empty(tmp_path):
    from ragassay.golden import load_golden

    gs = load_golden(_build(tmp_path, "v1", V1))
    d = golden_diff(gs, gs)
    assert (d["added"], d["removed"], d["relabelled"], d["edited"], d["pins"]) == ([], [], [], [], {})
    assert d["n_unchanged"] == 6


def test_diff_across_corpora_compares_spans_by_quote(tmp_path):
    """A preface shifts every gpl offset: by offsets every gpl item would look relabelled, by quote none is."""
    from ragassay.golden import load_golden

    moved = {**DOCS, "gpl": "Preface.\n" + DOCS["gpl"]}
    d = golden_diff(load_golden(_build(tmp_path, "v1", V1)), load_golden(_build(tmp_path, "m", V1, moved)))
    assert d["span_identity"] == "quotes"
    assert d["relabelled"] == [] and d["edited"] == [] and d["n_unchanged"] == 6
    assert set(d["pins"]) == {"corpus_digest", "dataset_version"}


def cli(args, capsys):
    register(golden_app)
    with pytest.raises(SystemExit) as e:
        _main(args)
    out = capsys.readouterr()
    return e.value.code or 0, out.out, out.err


def test_cli_diff_json_and_summary(tmp_path, capsys):
    a, b = _build(tmp_path, "v1", V1), _build(tmp_path, "v2", V2)
    code, out, _ = cli(["golden", "diff", str(a), str(b), "--json"], capsys)
    assert code == 0
    d = json.loads(out)
    assert d["added"] == ["q7"] and [c["query_id"] for c in d["relabelled"]] == ["q2", "q5", "q6"]
    code, out, _ = cli(["golden", "diff", str(a), str(b)], capsys)
    assert code == 0
    assert "1 added, 1 removed, 3 relabelled, 1 edited, 1 unchanged (spans compared by offsets)" in out
    assert "relabelled: q6 (evidence, answerable, stratum)" in out


def test_cli_diff_bad_folder_is_one_error_line_exit_2(tmp_path, capsys):
    a = _build(tmp_path, "v1", V1)
    code, out, err = cli(["golden", "diff", str(a), str(tmp_path / "missing")], capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"error: {tmp_path / 'missing'}: not a built golden set")
    assert len(err.splitlines()) == 1
