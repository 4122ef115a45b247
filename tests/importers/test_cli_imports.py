"""`ragassay import ...` and `ragassay doctor` through the command line."""

from __future__ import annotations

import json

import pytest

from ragassay.cli.app import main as _main
from ragassay.corpus import bundled_corpus_dir

from .test_importers import _write_beir


def cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        _main(args)
    cap = capsys.readouterr()
    return (e.value.code or 0), cap.out, cap.err


def test_import_beir_then_trec_then_score(tmp_path, capsys):
    src = tmp_path / "toy"
    _write_beir(src, qrels_rows=[("q1", "d1", 1), ("q2", "d2", 2), ("q4", "d3", 0)])
    code, out, _ = cli(["import", "beir", str(src), "-o", str(tmp_path / "out"), "--json"], capsys)
    assert code == 0
    info = json.loads(out)
    assert (info["n_docs"], info["n_queries"], info["negative_queries"], info["hit_rule"]) == (3, 3, 1, "doc")
    run = tmp_path / "r.run"
    run.write_text("q1 Q0 d1 1 2.0 s\nq2 Q0 d1 1 2.0 s\nq2 Q0 d9 2 1.0 s\n")
    g, c = str(tmp_path / "out" / "golden"), str(tmp_path / "out" / "corpus.jsonl")
    code, out, _ = cli(["import", "trec", str(run), "--golden", g, "--corpus", c, "-o",
                        str(tmp_path / "t.jsonl"), "--json"], capsys)
    assert code == 0
    res = json.loads(out)
    assert res["n_traces"] == 2 and len(res["problems"]) == 1 and "d9" in res["problems"][0]
    code, out, _ = cli(["score", str(tmp_path / "t.jsonl"), "--golden", g, "--corpus", c, "--hit-rule", "doc",
                        "--threshold", "1", "--store", str(tmp_path / "s.duckdb"), "--json"], capsys)
    assert code == 0
    # writing over a file that is not a trace file is refused
    (tmp_path / "notes.txt").write_text("mine")
    code, _, err = cli(["import", "trec", str(run), "--golden", g, "--corpus", c, "-o",
                        str(tmp_path / "notes.txt")], capsys)
    assert code == 2 and "refusing to overwrite" in err


def test_doctor_finds_a_golden_set_without_negatives_and_a_pin_mismatch(tmp_path, capsys):
    src = tmp_path / "toy"
    _write_beir(src, qrels_rows=[("q1", "d1", 1), ("q2", "d2", 2)])
    cli(["import", "beir", str(src), "-o", str(tmp_path / "out")], capsys)
    g = str(tmp_path / "out" / "golden")
    code, out, _ = cli(["doctor", "--store", str(tmp_path / "none.duckdb"), "--golden", g, "--corpus",
                        str(tmp_path / "out" / "corpus.jsonl"), "--json"], capsys)
    checks = {c["area"]: c for c in json.loads(out)["checks"]}
    assert checks["negative queries"]["verdict"] == "WARN" and checks["pins"]["verdict"] == "PASS"
    assert checks["store"]["verdict"] == "WARN" and checks["hit rule"]["detail"] == "hit rule 'doc'"
    code, out, _ = cli(["doctor", "--store", str(tmp_path / "none.duckdb"), "--golden", g, "--corpus",
                        str(bundled_corpus_dir())], capsys)
    assert code == 1 and "FAIL pins" in out and "rebuild the golden set" in out
