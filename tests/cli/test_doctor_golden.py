"""`ragassay doctor`'s golden-set checks, each seen firing and seen staying quiet: stored runs of a purely
synthetic golden set (report deltas, not absolute scores), golden labels with no agreement record, and a
stratum the stored runs saturate still in the regression tier of a `golden status --tiers-out` file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps
from tests.analyses._runs import make_run

from ragassay.cli.app import main as _main
from ragassay.cli.doctor import agreement_check
from ragassay.corpus import load_corpus
from ragassay.golden import load_golden
from ragassay.golden.builder import build_golden
from ragassay.store import Store

DOCS = Path(__file__).resolve().parents[2] / "docs"
SENTENCES = [f"Clause {w} grants the licensee a right numbered {i}." for i, w in enumerate(
    ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"])]
A_IDS = ["a0", "a1", "a2", "a3"]
B_IDS = ["b0", "b1", "b2", "b3"]


def cli(args, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        _main([str(a) for a in args])
    cap = capsys.readouterr()
    return (e.value.code or 0), cap.out, cap.err


def checks(args, capsys, area: str) -> list[dict]:
    code, out, err = cli([*args, "--json"], capsys)
    assert code in (0, 1), err
    return [c for c in json.loads(out)["checks"] if c["area"] == area]


def build(tmp_path, sources: list[str], *, meta: str = "", name: str = "g") -> Path:
    """A built golden set of eight queries over one document: a0-a3 in stratum ``lexical``, b0-b3 in
    ``paraphrase``, each with its own source from ``sources``."""
    corpus = tmp_path / "corpus"
    if not corpus.exists():
        corpus.mkdir()
        (corpus / "doc.txt").write_text(" ".join(SENTENCES) + "\n")
    lines = [f"dataset: {name}", *filter(None, [meta]), "queries:"]
    for i, (qid, src) in enumerate(zip(A_IDS + B_IDS, sources, strict=True)):
        stratum = "lexical" if qid.startswith("a") else "paraphrase"
        lines += [f"  - query_id: {qid}", f"    question: What does clause {i} grant?", f"    stratum: {stratum}",
                  f"    source: {src}", "    evidence:", f'      - {{doc_id: doc, quote: "{SENTENCES[i]}", grade: 3}}']
    src_file = tmp_path / f"{name}.yaml"
    src_file.write_text("\n".join(lines) + "\n")
    out = tmp_path / name
    build_golden(src_file, load_corpus(corpus), out)
    return out


def set_manifest(golden: Path, **fields) -> None:
    """Rewrite manifest fields the loader does not verify (the kappa record), as another builder would."""
    path = golden / "manifest.json"
    m = json.loads(path.read_text())
    for k, v in fields.items():
        if v is ...:
            m.pop(k, None)
        else:
            m[k] = v
    path.write_text(json.dumps(m, indent=2))


def store_run(db: Path, name: str, version: str, a: list[float], b: list[float], *, extra=None) -> None:
    with Store.open(db) as st:
        make_run(st, name, {"recall@10": np.array(a + b)}, qids=A_IDS + B_IDS,
                 strata=["lexical"] * 4 + ["paraphrase"] * 4, config={"name": "one config"},
                 dataset_version=version, extra=extra)


# ------------------------------------------------------------------------------------- synthetic golden set
def test_runs_of_a_purely_synthetic_golden_set_are_told_to_report_deltas(tmp_path, capsys):
    golden = build(tmp_path, ["synthetic"] * 8)
    version = load_golden(golden).dataset_version
    db = tmp_path / "s.duckdb"
    store_run(db, "syn-run", version, [1.0] * 4, [0.5] * 4)
    store_run(db, "other-set", "elsewhere@1", [1.0] * 4, [0.5] * 4)
    (line,) = checks(["doctor", "--store", db, "--golden", golden], capsys, "synthetic golden")
    assert line["verdict"] == "WARN"
    assert line["detail"] == (f"1 stored run(s) scored on a golden set whose items are all synthetic ({version}): "
                              "syn-run; report deltas, not absolute scores (see docs/labels.md)")
    assert line["fix"].startswith("quote the change between runs on this set, not their levels")

    # without --golden, the sources a run recorded when it was scored say the same
    store_run(db, "recorded", "v@2", [1.0] * 4, [0.5] * 4, extra={"golden_sources": {"synthetic": 8}})
    store_run(db, "mixed", "v@3", [1.0] * 4, [0.5] * 4, extra={"golden_sources": {"human": 1, "synthetic": 7}})
    (line,) = checks(["doctor", "--store", db], capsys, "synthetic golden")
    assert line["verdict"] == "WARN" and line["detail"].startswith("1 stored run(s)") and ": recorded;" in \
        line["detail"]


def test_a_mixed_set_or_a_synthetic_set_no_run_uses_stays_quiet(tmp_path, capsys):
    mixed = build(tmp_path, ["human"] + ["synthetic"] * 7, name="mixed")
    db = tmp_path / "s.duckdb"
    store_run(db, "run", load_golden(mixed).dataset_version, [1.0] * 4, [0.5] * 4)
    (line,) = checks(["doctor", "--store", db, "--golden", mixed], capsys, "synthetic golden")
    assert line == {"area": "synthetic golden", "verdict": "PASS", "fix": "",
                    "detail": "golden sources: human 1, synthetic 7 (not purely synthetic)"}
    synthetic = build(tmp_path, ["synthetic"] * 8, name="unused")
    (line,) = checks(["doctor", "--store", db, "--golden", synthetic], capsys, "synthetic golden")
    assert line["verdict"] == "PASS" and line["detail"] == "golden sources: synthetic 8 (no stored run scores it)"
    # and with neither a synthetic run nor --golden there is nothing to say
    assert checks(["doctor", "--store", db], capsys, "synthetic golden") == []


# ------------------------------------------------------------------------------------------- agreement
def test_golden_labels_without_an_agreement_record_point_to_golden_agree(tmp_path, capsys):
    golden = build(tmp_path, ["human"] * 8)
    none_db = tmp_path / "none.duckdb"
    set_manifest(golden, annotators=["ann"], kappa_binary=None, kappa_graded=None, kappa_source=...)
    (line,) = checks(["doctor", "--store", none_db, "--golden", golden], capsys, "agreement")
    assert line["verdict"] == "WARN"
    assert line["detail"].startswith("the golden labels have no agreement record: kappa_binary undefined, "
                                     "kappa_graded undefined (annotators: ann)")
    assert "ragassay golden agree A.jsonl B.jsonl --golden G" in line["fix"]

    # kappa typed into the authoring file is recorded, by the builder that knows it, as declared
    set_manifest(golden, kappa_binary=0.81, kappa_graded=0.7, kappa_source="declared")
    (line,) = checks(["doctor", "--store", none_db, "--golden", golden], capsys, "agreement")
    assert line["verdict"] == "WARN" and "ragassay golden agree" in line["fix"]
    assert line["detail"].startswith("the manifest's kappa_binary 0.810, kappa_graded 0.700 were declared in the "
                                     "authoring file, not computed from label files")
    # on the terminal: one line with its fix
    code, out, _ = cli(["doctor", "--store", none_db, "--golden", golden], capsys)
    assert code == 0 and "WARN agreement: the manifest's kappa_binary 0.810" in out
    assert "fix: have two or more annotators label the same items" in out


def test_computed_or_recorded_kappa_stays_quiet(tmp_path, capsys):
    golden = build(tmp_path, ["human"] * 8)
    set_manifest(golden, annotators=["a1", "a2"], kappa_binary=0.74, kappa_graded=None, kappa_source="computed")
    (line,) = checks(["doctor", "--store", tmp_path / "none.duckdb", "--golden", golden], capsys, "agreement")
    assert line == {"area": "agreement", "verdict": "PASS", "fix": "",
                    "detail": "kappa_binary 0.740, kappa_graded undefined computed from the label files "
                              "(annotators: a1, a2)"}
    # a manifest written before kappa_source existed counts by its values
    assert agreement_check({"annotators": ["x"], "kappa_binary": 0.9, "kappa_graded": 0.8}).verdict == "PASS"
    # a computed record whose kappa is undefined (0/0) measured nothing
    undefined = agreement_check({"kappa_binary": None, "kappa_graded": None, "kappa_source": "computed"})
    assert undefined.verdict == "WARN" and "computed, but undefined" in undefined.detail


# ----------------------------------------------------------------------------------------------- tiers
def write_tiers(golden: Path, db: Path, tiers: Path, capsys, ci_floor: float = 0.3) -> dict:
    # four items cannot saturate a stratum at the default floor (their exact cap is 0.025 ** (1/4) = 0.398):
    # the rule recorded in the tier file, which doctor reads, is a floor of 0.3 unless a test says otherwise
    code, out, err = cli(["golden", "status", "--golden", golden, "--store", db, "--tiers-out", tiers, "--json",
                          "--ci-floor", ci_floor], capsys)
    assert code == 0, err
    return json.loads(out)


def lower_bound(values: list[float]) -> float:
    """The two-sided 95% t lower bound of the mean, from scipy, capped by mean x 0.025^(1/n) (the oracle for
    golden status's rule)."""
    v = np.asarray(values)
    t = float(sps.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=sps.sem(v))[0]) if v.std() else v.mean()
    return min(t, float(v.mean()) * 0.025 ** (1 / len(v)))


def test_a_stratum_saturated_since_the_tiers_were_written_is_flagged(tmp_path, capsys):
    golden = build(tmp_path, ["human"] * 8)
    version = load_golden(golden).dataset_version
    db = tmp_path / "s.duckdb"
    tiers = tmp_path / "tiers.yaml"
    store_run(db, "monday", version, [1.0, 1.0, 1.0, 0.0], [0.5] * 4)
    rep = write_tiers(golden, db, tiers, capsys)
    assert rep["saturated_strata"] == [] and rep["tiers"]["regression"]["query_ids"] == ["a3", *B_IDS]
    (line,) = checks(["doctor", "--store", db, "--golden", golden, "--tiers", tiers], capsys, "tiers")
    assert line["verdict"] == "PASS" and "(saturated: none;" in line["detail"]

    # tuesday's run of the same configuration passes every lexical item: mean 1, sd 0, so the bound is the cap
    assert lower_bound([1.0] * 4) == pytest.approx(0.3976, abs=1e-4)
    assert lower_bound([1.0, 1.0, 1.0, 0.0]) < 0.3
    store_run(db, "tuesday", version, [1.0] * 4, [0.5] * 4)
    (line,) = checks(["doctor", "--store", db, "--golden", golden, "--tiers", tiers], capsys, "tiers")
    assert line["verdict"] == "WARN"
    assert line["detail"] == (f"{tiers}: saturated stratum(s) still in the regression tier, the one that gates a "
                              "change: lexical (1 of its 4 items); saturated = every configuration's mean >= 0.95 "
                              "with saturation bound >= 0.3 on recall@10, over 1 configuration(s) stored. The gate "
                              "spends its time where no configuration can move (see docs/labels.md)")
    assert line["fix"].startswith(f"retire them to smoke: ragassay golden status --golden {golden} --store {db} "
                                  f"--tiers-out {tiers}")


def test_a_saturated_stratum_already_out_of_the_regression_tier_stays_quiet(tmp_path, capsys):
    golden = build(tmp_path, ["human"] * 8)
    db = tmp_path / "s.duckdb"
    tiers = tmp_path / "tiers.yaml"
    store_run(db, "run", load_golden(golden).dataset_version, [1.0] * 4, [0.5] * 4)
    rep = write_tiers(golden, db, tiers, capsys)
    assert rep["saturated_strata"] == ["lexical"] and rep["tiers"]["regression"]["query_ids"] == B_IDS
    (line,) = checks(["doctor", "--store", db, "--golden", golden, "--tiers", tiers], capsys, "tiers")
    assert line["verdict"] == "PASS"
    assert line["detail"].startswith(f"{tiers}: no stratum the stored runs saturate is in the regression tier "
                                     "(saturated: lexical;")


def test_bad_tier_input_is_refused_with_one_line_each(tmp_path, capsys):
    golden = build(tmp_path, ["human"] * 8)
    db = tmp_path / "s.duckdb"
    store_run(db, "run", load_golden(golden).dataset_version, [1.0] * 4, [0.5] * 4)
    tiers = tmp_path / "tiers.yaml"
    write_tiers(golden, db, tiers, capsys)

    code, _, err = cli(["doctor", "--store", db, "--tiers", tiers], capsys)
    assert code == 2 and "--tiers is read against the built golden set it was written for" in err

    plain = tmp_path / "plain.yaml"
    plain.write_text("tiers: {}\n")
    code, _, err = cli(["doctor", "--store", db, "--golden", golden, "--tiers", plain], capsys)
    assert code == 2 and "not a tier file" in err

    broken = tmp_path / "broken.yaml"
    broken.write_text(tiers.read_text().split("\n", 1)[0] + "\ndataset_version: x\nmetrics: []\n"
                      "rule: {threshold: high, ci_floor: 0.9, smoke_size: 25, seed: 0}\n")
    code, _, err = cli(["doctor", "--store", db, "--golden", golden, "--tiers", broken], capsys)
    rewrite = "; rewrite it with ragassay golden status --tiers-out"
    assert code == 2 and [line for line in err.splitlines() if line.startswith("error:")] == [
        f"error: {broken}: metrics: missing or not a list of metric names{rewrite}",
        f"error: {broken}: rule.threshold: missing or not a number{rewrite}",
        f"error: {broken}: tiers.regression.query_ids: missing or not a list of query ids{rewrite}"], err

    other = build(tmp_path, ["human"] * 7 + ["synthetic"], name="other")
    code, _, err = cli(["doctor", "--store", db, "--golden", other, "--tiers", tiers], capsys)
    assert code == 2 and "pass the set it was written for" in err


def test_the_doctor_table_names_each_new_check():
    doc = (DOCS / "importers.md").read_text(encoding="utf-8")
    for finding in ("a purely synthetic golden set", "golden labels with no agreement record",
                    "a saturated stratum still in the gate tier"):
        assert f"| {finding}" in doc
    assert "report deltas, not absolute scores" in doc and "--tiers" in doc


def test_the_bundled_golden_set_has_no_agreement_record(tmp_path, capsys):
    """docs/importers.md: on the demo, the golden set was labelled by one annotator and records no kappa."""
    from ragassay.corpus import bundled_corpus_dir
    from ragassay.golden import bundled_golden_source

    built = tmp_path / "golden"
    build_golden(bundled_golden_source(), load_corpus(bundled_corpus_dir()), built)
    (line,) = checks(["doctor", "--store", tmp_path / "none.duckdb", "--golden", built], capsys, "agreement")
    assert line["verdict"] == "WARN" and "(annotators: ragassay-maintainers)" in line["detail"]
    assert line["detail"].startswith("the golden labels have no agreement record: kappa_binary undefined")


def test_four_perfect_items_do_not_saturate_at_the_default_floor(tmp_path, capsys):
    golden = build(tmp_path, ["human"] * 8)
    db = tmp_path / "s.duckdb"
    store_run(db, "run", load_golden(golden).dataset_version, [1.0] * 4, [0.5] * 4)
    rep = write_tiers(golden, db, tmp_path / "tiers.yaml", capsys, ci_floor=0.9)
    lexical = rep["strata"][0]["metrics"]["recall@10"]
    assert rep["saturated_strata"] == [] and lexical["saturated"] is False
    assert lexical["configs"][0]["ci_low"] == pytest.approx(lower_bound([1.0] * 4))
