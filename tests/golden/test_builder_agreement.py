"""`build_golden(..., agreement=[A, B])`: the manifest's kappas are computed from annotators' label files by
golden.agree, never copied; hand-typed kappas are kept as `declared`, and lose to computed ones with a
warning line."""

import hashlib
import json
from itertools import combinations

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from ragassay.cli.app import main
from ragassay.errors import InputError
from ragassay.golden import build_golden, load_golden
from ragassay.golden.builder import agreement_warnings

SCALE = [0, 1, 2, 3]
QUERIES = """queries:
  - query_id: q1
    question: Who may obtain a copy?
    stratum: lexical
    evidence:
      - {doc_id: mit, quote: "to any person obtaining a copy", grade: 3}
  - query_id: q2
    question: Which sections govern object code?
    stratum: paraphrase
    evidence:
      - {doc_id: gpl, quote: "sections 4 and 5", grade: 2}
"""


def _labels(tmp_path, n_annotators=2, n_items=60, seed=3, names=None):
    """Label files over q1/q2 whose annotators agree with a hidden truth 70% of the time; returns the paths
    and the (annotators x items) grade matrix."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 4, n_items)
    grades = np.where(rng.random((n_annotators, n_items)) < 0.7, truth,
                      rng.integers(0, 4, (n_annotators, n_items)))
    paths = []
    for a, name in enumerate(names or [f"ann{a + 1}" for a in range(n_annotators)]):
        p = tmp_path / f"{name}.jsonl"
        p.write_text("".join(json.dumps({"query_id": f"q{1 + i % 2}", "unit_id": f"u{i:03d}",
                                         "grade": int(grades[a, i])}) + "\n" for i in range(n_items)))
        paths.append(p)
    return paths, grades


def test_manifest_kappas_are_golden_agrees_figures_on_the_same_files(tmp_path, corpus, write_yaml, capsys):
    paths, g = _labels(tmp_path)
    gs = build_golden(write_yaml(QUERIES), corpus, tmp_path / "g", agreement=paths)
    m = load_golden(tmp_path / "g").manifest
    assert m == gs.manifest
    # independent reference: scikit-learn on the grade matrix
    assert m["kappa_binary"] == pytest.approx(cohen_kappa_score(g[0] >= 2, g[1] >= 2), abs=1e-12)
    assert m["kappa_graded"] == pytest.approx(cohen_kappa_score(g[0], g[1], labels=SCALE, weights="linear"),
                                              abs=1e-12)
    assert m["kappa_source"] == "computed" and m["annotators"] == ["ann1", "ann2"]
    # the figures `golden agree` prints for the same files against the built set, intervals included
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["golden", "agree", *map(str, paths), "--golden", str(tmp_path / "g"), "--json"])
    assert e.value.code in (0, None)
    rep = json.loads(capsys.readouterr().out)
    block = m["agreement"]
    for k in ("kappa_binary", "kappa_graded", "alpha_ordinal", "alpha_nominal", "n_items", "n_labels",
              "kappa_method"):
        assert block[k] == rep["overall"][k], k
    assert m["kappa_binary"] == rep["manifest_fields"]["kappa_binary"]
    assert m["kappa_graded"] == rep["manifest_fields"]["kappa_graded"]
    assert (block["n_items"], block["n_single"], block["threshold"]) == (60, 0, 2)
    assert (block["n_resamples"], block["seed"], block["confidence"]) == (1000, 0, 0.95)
    assert block["label_files"] == [{"file": p.name, "annotator": f"ann{i + 1}",
                                     "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
                                    for i, p in enumerate(paths)]
    assert block["declared"] is None and agreement_warnings(m) == []


def test_three_annotators_give_lights_kappa_the_mean_over_pairs(tmp_path, corpus, write_yaml):
    paths, g = _labels(tmp_path, n_annotators=3, seed=8)
    m = build_golden(write_yaml(QUERIES), corpus, agreement=paths).manifest
    pairs = list(combinations(range(3), 2))
    assert m["agreement"]["kappa_method"] == "light"
    assert m["kappa_binary"] == pytest.approx(np.mean([cohen_kappa_score(g[i] >= 2, g[j] >= 2) for i, j in pairs]),
                                              abs=1e-12)
    assert m["kappa_graded"] == pytest.approx(
        np.mean([cohen_kappa_score(g[i], g[j], labels=SCALE, weights="linear") for i, j in pairs]), abs=1e-12)


def test_hand_typed_kappas_are_recorded_as_declared(corpus, write_yaml):
    m = build_golden(write_yaml("annotators: [x, y]\nkappa_binary: 0.81\n" + QUERIES), corpus).manifest
    assert (m["kappa_binary"], m["kappa_graded"], m["kappa_source"]) == (0.81, None, "declared")
    assert m["annotators"] == ["x", "y"] and m["agreement"] is None and agreement_warnings(m) == []


def test_no_kappa_anywhere_has_no_source(corpus, write_yaml):
    m = build_golden(write_yaml("annotators: [x]\n" + QUERIES), corpus).manifest
    assert (m["kappa_binary"], m["kappa_graded"], m["kappa_source"], m["agreement"]) == (None, None, None, None)


def test_computed_kappas_win_over_declared_ones_with_a_warning_line(tmp_path, corpus, write_yaml):
    paths, g = _labels(tmp_path)
    src = write_yaml("annotators: [x, y]\nkappa_binary: 0.81\nkappa_graded: 0.7\n" + QUERIES)
    m = build_golden(src, corpus, agreement=paths).manifest
    kb = cohen_kappa_score(g[0] >= 2, g[1] >= 2)
    assert m["kappa_source"] == "computed" and m["kappa_binary"] == pytest.approx(kb, abs=1e-12)
    assert m["annotators"] == ["ann1", "ann2"]
    assert m["agreement"]["declared"] == {"kappa_binary": 0.81, "kappa_graded": 0.7, "annotators": ["x", "y"]}
    (line,) = agreement_warnings(m)
    assert "declares kappa_binary 0.810, kappa_graded 0.700 (annotators x, y)" in line
    assert f"kappa_binary {kb:.3f}" in line and "(annotators ann1, ann2)" in line


def test_undefined_computed_kappa_stays_undefined_not_the_declared_value(tmp_path, corpus, write_yaml):
    # every label is 3: kappa is 0/0, undefined; the declared 0.9 must not stand in for it
    paths = []
    for name in ("a", "b"):
        p = tmp_path / f"{name}.jsonl"
        p.write_text("".join(json.dumps({"query_id": "q1", "unit_id": f"u{i}", "grade": 3}) + "\n" for i in range(5)))
        paths.append(p)
    m = build_golden(write_yaml("kappa_binary: 0.9\n" + QUERIES), corpus, agreement=paths).manifest
    assert m["kappa_binary"] is None and m["kappa_source"] == "computed"
    assert m["agreement"]["kappa_binary"]["undefined_reason"]
    (line,) = agreement_warnings(m)
    assert "declares kappa_binary 0.900, kappa_graded undefined; the manifest" in line
    assert "instead: kappa_binary undefined, kappa_graded undefined (annotators a, b)" in line


def test_bad_label_files_stop_the_build_and_write_nothing(tmp_path, corpus, write_yaml):
    a = tmp_path / "a.jsonl"
    a.write_text('{"query_id": "q9", "unit_id": "u1", "grade": 2}\n')
    b = tmp_path / "b.jsonl"
    b.write_text('{"query_id": "q1", "unit_id": "u1", "grade": 2}\n{"query_id": "q1", "unit_id": "u2", "grade": 7}\n')
    with pytest.raises(InputError) as e:
        build_golden(write_yaml(QUERIES), corpus, tmp_path / "g", agreement=[a, b])
    lines = str(e.value).splitlines()
    assert f"{a}:1: query q9 is not in the golden set" in lines
    assert f"{b}:2: grade 7 is outside the scale 0-3" in lines
    assert not (tmp_path / "g").exists()
    with pytest.raises(InputError, match="two or more annotators"):
        build_golden(write_yaml(QUERIES), corpus, agreement=[b])
    with pytest.raises(InputError, match="--skip-single applies to label files"):
        build_golden(write_yaml(QUERIES), corpus, skip_single=True)


def test_single_annotator_items_fail_unless_skipped_then_counted(tmp_path, corpus, write_yaml):
    paths, g = _labels(tmp_path, n_items=20)
    with paths[0].open("a") as fh:
        fh.write(json.dumps({"query_id": "q1", "unit_id": "only-a", "grade": 1}) + "\n")
    with pytest.raises(InputError, match="labelled by only one annotator"):
        build_golden(write_yaml(QUERIES), corpus, agreement=paths)
    m = build_golden(write_yaml(QUERIES), corpus, agreement=paths, skip_single=True).manifest
    assert (m["agreement"]["n_items"], m["agreement"]["n_single"]) == (20, 1)
    assert m["kappa_binary"] == pytest.approx(cohen_kappa_score(g[0] >= 2, g[1] >= 2), abs=1e-12)


def test_agreement_uses_the_sets_relevance_threshold(tmp_path, corpus, write_yaml):
    paths, g = _labels(tmp_path, seed=11)
    m = build_golden(write_yaml("relevance_threshold: 3\n" + QUERIES), corpus, agreement=paths).manifest
    assert m["agreement"]["threshold"] == 3
    assert m["kappa_binary"] == pytest.approx(cohen_kappa_score(g[0] >= 3, g[1] >= 3), abs=1e-12)


def test_rebuilding_with_the_same_label_files_is_byte_identical(tmp_path, corpus, write_yaml):
    paths, _ = _labels(tmp_path)
    src = write_yaml(QUERIES)
    build_golden(src, corpus, tmp_path / "g1", agreement=paths)
    build_golden(src, corpus, tmp_path / "g2", agreement=paths)
    assert (tmp_path / "g1" / "manifest.json").read_bytes() == (tmp_path / "g2" / "manifest.json").read_bytes()


def test_golden_build_agreement_from_the_cli_computes_the_kappas_and_warns_about_declared_ones(
        tmp_path, corpus, write_yaml, capsys):
    paths, g = _labels(tmp_path)
    src = write_yaml("annotators: [x, y]\nkappa_binary: 0.81\nkappa_graded: 0.7\n" + QUERIES)
    args = ["golden", "build", str(src), "--corpus", str(tmp_path / "corpus"), "--out", str(tmp_path / "g")]
    for p in paths:
        args += ["--agreement", str(p)]
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main([*args, "--json"])
    out, err = capsys.readouterr()
    assert (e.value.code or 0) == 0, err
    m = json.loads(out)
    assert m["kappa_source"] == "computed"
    assert m["kappa_binary"] == pytest.approx(cohen_kappa_score(g[0] >= 2, g[1] >= 2), abs=1e-12)
    assert "warning:" in err and "declares kappa_binary 0.810" in " ".join(err.split())
    with pytest.raises(SystemExit) as e:
        main(["golden", "build", str(src), "--corpus", str(tmp_path / "corpus"), "--out", str(tmp_path / "h"),
              "--skip-single"])
    _, err = capsys.readouterr()
    assert e.value.code == 2 and "error:" in err and not (tmp_path / "h").exists()
