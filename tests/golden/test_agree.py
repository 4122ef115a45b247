"""`ragassay golden agree`: kappa vs scikit-learn, alpha vs the krippendorff package, strata, the disagreement
list, and the error contract on bad label files."""

import json
from itertools import combinations

import krippendorff
import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from ragassay.cli.app import main as _main
from ragassay.errors import InputError
from ragassay.golden import build_golden
from ragassay.golden.agree import agree, read_labels

SCALE = [0, 1, 2, 3]


@pytest.fixture
def cli(capsys):
    """Run `ragassay ...` in-process; returns (exit code, stdout, stderr)."""

    def run(args):
        capsys.readouterr()
        with pytest.raises(SystemExit) as e:
            _main(args)
        got = capsys.readouterr()
        return e.value.code or 0, got.out, got.err

    return run


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _random_files(tmp_path, seed, n_annotators, n_items, missing=0.0):
    """Label files of annotators who agree with a hidden truth 70% of the time; ``missing`` drops labels.
    Returns the paths and the (annotators x items) matrix with NaN for a dropped label."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 4, n_items)
    grades = np.where(rng.random((n_annotators, n_items)) < 0.7, truth,
                      rng.integers(0, 4, (n_annotators, n_items))).astype(float)
    grades[rng.random(grades.shape) < missing] = np.nan
    paths = []
    for a in range(n_annotators):
        rows = [{"query_id": f"q{i // 3:03d}", "doc_id": "gpl", "quote": f"passage {i:03d}", "grade": int(grades[a, i])}
                for i in range(n_items) if not np.isnan(grades[a, i])]
        paths.append(_write(tmp_path / f"a{a + 1}.jsonl", rows))
    return paths, grades


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pairwise_kappas_match_sklearn_on_random_label_files(tmp_path, seed):
    paths, grades = _random_files(tmp_path, seed, 3, 80, missing=0.15)
    rep = agree(read_labels(paths), skip_single=True, n_resamples=20)
    pairs = {(p["a"], p["b"]): p for p in rep["overall"]["pairs"]}
    for i, j in combinations(range(3), 2):
        both = ~np.isnan(grades[i]) & ~np.isnan(grades[j])
        a, b = grades[i, both].astype(int), grades[j, both].astype(int)
        p = pairs[(f"a{i + 1}", f"a{j + 1}")]
        assert p["n_items"] == both.sum()
        assert p["agreement"]["value"] == pytest.approx(np.mean(a == b), abs=1e-12)
        assert p["kappa_binary"]["value"] == pytest.approx(cohen_kappa_score(a >= 2, b >= 2), abs=1e-12)
        assert p["kappa"]["value"] == pytest.approx(cohen_kappa_score(a, b, labels=SCALE), abs=1e-12)
        for w in ("linear", "quadratic"):
            assert p[f"kappa_{w}"]["value"] == pytest.approx(cohen_kappa_score(a, b, labels=SCALE, weights=w),
                                                             abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_alpha_matches_krippendorff_package_with_missing_labels(tmp_path, seed):
    paths, grades = _random_files(tmp_path, seed, 4, 70, missing=0.2)
    rep = agree(read_labels(paths), skip_single=True, n_resamples=20)
    keep = (~np.isnan(grades)).sum(axis=0) >= 2
    for level in ("nominal", "ordinal"):
        ref = krippendorff.alpha(reliability_data=grades[:, keep], level_of_measurement=level)
        assert rep["overall"][f"alpha_{level}"]["value"] == pytest.approx(ref, abs=1e-10)
    assert rep["overall"]["n_items"] == keep.sum()
    assert rep["n_single"] == ((~np.isnan(grades)).sum(axis=0) == 1).sum()


def test_manifest_fields_are_cohen_for_two_annotators_and_light_mean_for_three(tmp_path):
    paths, grades = _random_files(tmp_path, 5, 3, 60)
    g = grades.astype(int)
    two = agree(read_labels(paths[:2]), n_resamples=10)
    assert two["overall"]["kappa_method"] == "cohen"
    assert two["manifest_fields"] == {
        "annotators": ["a1", "a2"],
        "kappa_binary": pytest.approx(cohen_kappa_score(g[0] >= 2, g[1] >= 2), abs=1e-12),
        "kappa_graded": pytest.approx(cohen_kappa_score(g[0], g[1], labels=SCALE, weights="linear"), abs=1e-12)}
    three = agree(read_labels(paths), n_resamples=10)
    pairs = list(combinations(range(3), 2))
    assert three["overall"]["kappa_method"] == "light"
    assert three["manifest_fields"]["kappa_binary"] == pytest.approx(
        np.mean([cohen_kappa_score(g[i] >= 2, g[j] >= 2) for i, j in pairs]), abs=1e-12)
    assert three["manifest_fields"]["kappa_graded"] == pytest.approx(
        np.mean([cohen_kappa_score(g[i], g[j], labels=SCALE, weights="linear") for i, j in pairs]), abs=1e-12)


def test_spec_worked_example_80_percent_agreement_is_kappa_052(tmp_path):
    # §3.7 / FAQ: 60 both relevant, 20 both not, 10 + 10 split; each says relevant 70% of the time.
    a = [3] * 60 + [0] * 20 + [3] * 10 + [0] * 10
    b = [3] * 60 + [0] * 20 + [0] * 10 + [3] * 10
    paths = [_write(tmp_path / f"{n}.jsonl", [{"query_id": f"q{i}", "unit_id": "u1", "grade": g}
                                              for i, g in enumerate(gs)]) for n, gs in (("x", a), ("y", b))]
    rep = agree(read_labels(paths), n_resamples=200)
    k = rep["overall"]["kappa_binary"]
    assert k["value"] == pytest.approx((0.80 - 0.58) / 0.42, abs=1e-12)
    assert round(k["value"], 2) == 0.52
    assert k["ci_low"] < k["value"] < k["ci_high"]
    assert [d["query_id"] for d in rep["disagreements"]] == sorted(f"q{i}" for i in range(80, 100))
    assert all(d["relevance_split"] and d["spread"] == 3 for d in rep["disagreements"])


def test_bootstrap_interval_is_seeded_and_recomputes_the_resampled_statistic(tmp_path):
    paths, grades = _random_files(tmp_path, 3, 2, 50)
    ls = read_labels(paths)
    r1, r2 = (agree(ls, n_resamples=300, seed=7) for _ in range(2))
    assert r1["overall"] == r2["overall"]
    # the same draws by hand: items resampled with replacement, kappa recomputed on each resample
    g = grades.astype(int)
    idx = np.random.default_rng(7).integers(0, 50, size=(300, 50))
    boots = [cohen_kappa_score(g[0, ix], g[1, ix], labels=SCALE, weights="linear") for ix in idx]
    k = r1["overall"]["kappa_graded"]
    assert k["ci_low"] == pytest.approx(np.quantile(boots, 0.025), abs=1e-12)
    assert k["ci_high"] == pytest.approx(np.quantile(boots, 0.975), abs=1e-12)
    assert agree(ls, n_resamples=300, seed=8)["overall"]["kappa_graded"]["ci_low"] != k["ci_low"]


def test_one_shared_label_everywhere_is_undefined_with_a_count_never_zero(tmp_path):
    paths = [_write(tmp_path / f"{n}.jsonl", [{"query_id": f"q{i}", "unit_id": "u", "grade": 3} for i in range(5)])
             for n in ("a", "b")]
    rep = agree(read_labels(paths), n_resamples=10)
    o = rep["overall"]
    assert o["kappa_binary"]["value"] is None and "undefined" in o["kappa_binary"]["undefined_reason"]
    assert o["alpha_ordinal"]["value"] is None and o["alpha_ordinal"]["ci_low"] is None
    assert o["pairs"][0]["agreement"]["value"] == 1.0
    assert o["n_undefined"] == 8  # 4 set-level figures + the pair's 4 kappas
    assert rep["manifest_fields"]["kappa_binary"] is None and rep["disagreements"] == []


GOLDEN = """queries:
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


def _golden(tmp_path, corpus, write_yaml):
    build_golden(write_yaml(GOLDEN), corpus, tmp_path / "g")
    return tmp_path / "g"


def test_per_stratum_figures_from_the_golden_set_match_sklearn(tmp_path, corpus, write_yaml, cli):
    g = _golden(tmp_path, corpus, write_yaml)
    rng = np.random.default_rng(4)
    qids = np.where(rng.random(60) < 0.5, "q1", "q2")
    a = rng.integers(0, 4, 60)
    b = np.where(rng.random(60) < 0.6, a, rng.integers(0, 4, 60))
    paths = [_write(tmp_path / f"{n}.jsonl", [{"query_id": q, "unit_id": f"u{i:02d}", "grade": int(x)}
                                              for i, (q, x) in enumerate(zip(qids, gs, strict=True))])
             for n, gs in (("a", a), ("b", b))]
    code, out, err = cli(["golden", "agree", *map(str, paths), "--golden", str(g), "--json", "--resamples", "50"])
    assert code == 0, err
    rep = json.loads(out)
    assert set(rep["strata"]) == {"lexical", "paraphrase"}
    for stratum, q in (("lexical", "q1"), ("paraphrase", "q2")):
        m = qids == q
        s = rep["strata"][stratum]
        assert s["n_items"] == m.sum()
        assert s["kappa_graded"]["value"] == pytest.approx(
            cohen_kappa_score(a[m], b[m], labels=SCALE, weights="linear"), abs=1e-12)
        assert s["kappa_binary"]["value"] == pytest.approx(cohen_kappa_score(a[m] >= 2, b[m] >= 2), abs=1e-12)
    assert all(d["stratum"] == ("lexical" if d["query_id"] == "q1" else "paraphrase") for d in rep["disagreements"])
    assert rep["threshold"] == 2
    code, _, err = cli(["golden", "agree", *map(str, paths), "--golden", str(g), "--threshold", "3"])
    assert code == 2 and "differs from the golden set's relevance_threshold 2" in err


def test_a_query_missing_from_the_golden_set_is_an_error_line(tmp_path, corpus, write_yaml, cli):
    g = _golden(tmp_path, corpus, write_yaml)
    rows = [{"query_id": "q1", "unit_id": "u", "grade": 1}, {"query_id": "q9", "unit_id": "u", "grade": 1}]
    a, b = _write(tmp_path / "a.jsonl", rows), _write(tmp_path / "b.jsonl", rows)
    code, _, err = cli(["golden", "agree", str(a), str(b), "--golden", str(g)])
    assert code == 2
    assert f"error: {a}:2: query q9 is not in the golden set" in err.splitlines()
    assert f"error: {b}:2: query q9 is not in the golden set" in err.splitlines()


def test_summary_and_disagreements_written_to_out_replacing_only_our_own_file(tmp_path, cli):
    paths, grades = _random_files(tmp_path, 2, 2, 40)
    out = tmp_path / "dis.jsonl"
    code, text, err = cli(["golden", "agree", *map(str, paths), "--out", str(out), "--resamples", "20"])
    assert code == 0, err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    n_dis = int((grades[0] != grades[1]).sum())
    assert len(rows) == n_dis and f"{n_dis} disagreement(s)" in text
    assert '"kappa_binary": ' in text and "manifest fields" in text
    r = rows[0]
    assert r["kind"] == "label_disagreement" and set(r["grades"]) == {"a1", "a2"}
    assert r["sources"]["a1"].startswith(f"{paths[0]}:")
    assert [x["relevance_split"] for x in rows] == sorted((x["relevance_split"] for x in rows), reverse=True)
    # an earlier disagreement list is replaced; any other file is refused before any work
    assert cli(["golden", "agree", *map(str, paths), "--out", str(out), "--resamples", "5"])[0] == 0
    other = tmp_path / "notes.jsonl"
    other.write_text('{"mine": 1}\n')
    code, _, err = cli(["golden", "agree", *map(str, paths), "--out", str(other)])
    assert code == 2 and "refusing to overwrite" in err and other.read_text() == '{"mine": 1}\n'


def test_single_annotator_items_fail_listed_unless_skipped_then_counted(tmp_path, cli):
    a = _write(tmp_path / "a.jsonl", [{"query_id": "q1", "unit_id": u, "grade": g}
                                      for u, g in (("u1", 3), ("u2", 0), ("u3", 2))])
    b = _write(tmp_path / "b.jsonl", [{"query_id": "q1", "unit_id": u, "grade": g}
                                      for u, g in (("u1", 3), ("u2", 1), ("u4", 0))])
    code, _, err = cli(["golden", "agree", str(a), str(b)])
    lines = err.splitlines()
    assert code == 2 and lines[0].startswith("error: 2 item(s) labelled by only one annotator")
    assert lines[1:] == [f"error: {a}:3: query q1 unit u3 labelled only by a",
                         f"error: {b}:3: query q1 unit u4 labelled only by b"]
    code, out, _ = cli(["golden", "agree", str(a), str(b), "--skip-single", "--json", "--resamples", "5"])
    rep = json.loads(out)
    assert code == 0 and rep["n_single"] == 2 and rep["overall"]["n_items"] == 2
    assert [s["unit_id"] for s in rep["single_items"]] == ["u3", "u4"]
    code, text, _ = cli(["golden", "agree", str(a), str(b), "--skip-single", "--resamples", "5"])
    assert "left out 2 item(s) labelled by only one annotator" in text


def test_bad_label_files_give_one_error_line_each_and_exit_2(tmp_path, cli):
    good = _write(tmp_path / "good.jsonl", [{"query_id": "q1", "doc_id": "d", "quote": "x", "grade": 1}])
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([
        '{"query_id": "q1", "doc_id": "d", "quote": "x", "grade": 1}',
        "{not json",
        '{"query_id": "q2", "doc_id": "d", "quote": "x", "grade": 4}',
        '{"query_id": "q3", "doc_id": "d", "quote": "x", "grade": "2"}',
        '{"query_id": "q1", "doc_id": "d", "quote": "x", "grade": 2}',
        '{"query_id": "q4", "unit_id": "u", "doc_id": "d", "quote": "x", "grade": 1}',
        '{"query_id": "q5", "unit_id": "u", "grade": 1, "gradee": 2}',
        "[1, 2]",
        '{"query_id": "q6", "unit_id": "u", "grade": 1, "grade": 3}',
        '{"unit_id": "u", "grade": 1}',
        '{"query_id": "q7", "unit_id": "u"}',
    ]) + "\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    code, out, err = cli(["golden", "agree", str(good), str(bad), str(empty), str(tmp_path / "nope.jsonl")])
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.splitlines() == [
        "error: 12 problem(s) in the label files; fix them and run again",
        f"error: {bad}:2: invalid JSON (Expecting property name enclosed in double quotes at column 2)",
        f"error: {bad}:3: grade 4 is outside the scale 0-3",
        f'error: {bad}:4: grade "2" is not an integer; write a grade 0-3',
        f'error: {bad}:5: duplicate label of query q1 doc d quote "x" (first at {bad}:1); keep one line per item '
        "and annotator",
        f"error: {bad}:6: name the passage by doc_id + quote, by doc_id + start + end, or by unit_id (exactly one "
        "of them)",
        f"error: {bad}:7: unknown field(s) gradee; a label line has query_id, doc_id + quote, doc_id + start + end, "
        "or unit_id, grade "
        "and optionally annotator",
        f"error: {bad}:8: expected a JSON object, got list",
        f"error: {bad}:9: key 'grade' given twice; keep one",
        f"error: {bad}:10: missing query_id",
        f"error: {bad}:11: missing grade (an integer 0-3)",
        f"error: {empty}: no labels (the file is empty); pass one JSONL label file per annotator",
        f"error: {tmp_path / 'nope.jsonl'}: no such file; pass the label file",
    ]


def test_one_annotator_and_annotator_names_are_checked(tmp_path, cli):
    a = _write(tmp_path / "a.jsonl", [{"query_id": "q1", "unit_id": "u", "grade": 1}])
    code, _, err = cli(["golden", "agree", str(a)])
    assert code == 2 and "error: agreement needs two or more annotators' label files, got 1" in err.splitlines()
    # the `annotator` field names the annotator (default: the file stem); two files of one annotator are refused
    b = _write(tmp_path / "b.jsonl", [{"query_id": "q1", "unit_id": "u", "grade": 1, "annotator": "a"}])
    code, _, err = cli(["golden", "agree", str(a), str(b)])
    assert code == 2 and f"error: {b}: annotator a also labelled {a}" in err
    mixed = _write(tmp_path / "m.jsonl", [{"query_id": "q1", "unit_id": "u", "grade": 1, "annotator": "x"},
                                          {"query_id": "q2", "unit_id": "u", "grade": 1, "annotator": "y"}])
    with pytest.raises(InputError, match="holds labels of several annotators"):
        read_labels([a, mixed])
    c = _write(tmp_path / "c.jsonl", [{"query_id": "q1", "unit_id": "u", "grade": 2, "annotator": "rater-7"}])
    assert read_labels([a, c]).annotators == ("a", "rater-7")


def test_bad_options_are_input_errors(tmp_path):
    paths, _ = _random_files(tmp_path, 0, 2, 10)
    ls = read_labels(paths)
    with pytest.raises(InputError, match="outside 1-3"):
        agree(ls, threshold=0)
    with pytest.raises(InputError, match="at least 1 bootstrap resample"):
        agree(ls, n_resamples=0)
    with pytest.raises(InputError, match="strictly between 0 and 1"):
        agree(ls, confidence=1.0)


def test_summary_says_when_an_interval_left_out_undefined_resamples(tmp_path, cli):
    # two items, one relevant, one not: a draw of the same item twice has one class only, so kappa is 0/0 there
    rows = [{"query_id": "q1", "unit_id": "u1", "grade": 2}, {"query_id": "q2", "unit_id": "u2", "grade": 0}]
    paths = [_write(tmp_path / f"{n}.jsonl", rows) for n in ("a", "b")]
    args = ["golden", "agree", *map(str, paths), "--resamples", "50"]
    code, text, err = cli(args)
    assert code == 0, err
    rep = json.loads(cli([*args, "--json"])[1])
    left_out = rep["overall"]["kappa_binary"]["undefined_resamples"]
    # oracle: the same seeded draws of item indices; undefined exactly when both draws are one item
    draws = np.random.default_rng(0).integers(0, 2, size=(50, 2))
    assert left_out == int((draws[:, 0] == draws[:, 1]).sum()) > 0
    flat = " ".join(text.split())
    assert "rest on fewer resamples than asked" in flat and f"{left_out} of 50" in flat
    # with enough items every draw is defined and nothing is said
    paths, _ = _random_files(tmp_path, 0, 2, 60)
    code, text, _ = cli(["golden", "agree", *map(str, paths), "--resamples", "20"])
    assert code == 0 and "fewer resamples" not in text


def test_span_labels_as_the_pooled_labelling_page_saves_them_are_items(tmp_path):
    # two annotators' downloads from label.html: doc_id + start + end name the item; the quote beside them
    # (the span's text) may differ in whitespace and is not part of its identity
    spans = [("q1", "d1", 0, 10), ("q1", "d1", 20, 31), ("q2", "d2", 5, 9), ("q2", "d1", 0, 10), ("q3", "d2", 1, 4)]
    g1, g2 = [3, 0, 2, 1, 0], [3, 1, 2, 1, 0]
    paths = [_write(tmp_path / f"{who}.jsonl",
                    [{"query_id": q, "doc_id": d, "start": a, "end": b, "quote": f"text {a}{' ' * k}", "grade": g}
                     for (q, d, a, b), g in zip(spans, grades, strict=True)])
             for k, (who, grades) in enumerate((("ann", g1), ("bob", g2)))]
    labels = read_labels(paths)
    assert labels.annotators == ("ann", "bob") and len(labels.items) == 5
    rep = agree(labels, threshold=2, n_resamples=200, seed=0)
    assert rep["overall"]["kappa_graded"]["value"] == pytest.approx(
        cohen_kappa_score(g1, g2, labels=SCALE, weights="linear"))
    assert [d["start"] for d in rep["disagreements"]] == [20]  # q1's second span: 0 against 1
    # a span line that is not a span, or mixes the forms, is an error line naming it
    bad = _write(tmp_path / "bad.jsonl", [{"query_id": "q1", "doc_id": "d1", "start": 9, "end": 3, "grade": 1},
                                          {"query_id": "q1", "doc_id": "d1", "start": 1, "grade": 1},
                                          {"query_id": "q1", "unit_id": "u", "start": 0, "end": 2, "grade": 1}])
    with pytest.raises(InputError) as e:
        read_labels([paths[0], bad])
    msg = str(e.value)
    assert f"{bad}:1: start 9 and end 3 must be integers with 0 <= start < end" in msg
    assert f"{bad}:2: a span names its passage by doc_id + start + end" in msg
    assert f"{bad}:3: a span names its passage by doc_id + start + end (and no unit_id)" in msg
