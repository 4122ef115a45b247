import json
import subprocess
import sys

import pytest

from ragassay.cli.app import main as _main


def main(args):
    with pytest.raises(SystemExit) as e:
        _main(args)
    assert e.value.code in (0, None)

GOOD = """queries:
  - query_id: q1
    question: Who may obtain a copy?
    stratum: lexical
    evidence:
      - {doc_id: mit, quote: "to any person obtaining a copy", grade: 3}
  - query_id: q2
    question: Nope
    stratum: negative
    answerable: false
"""


def _corpus(tmp_path):
    root = tmp_path / "c"
    root.mkdir(exist_ok=True)
    (root / "mit.txt").write_text("Permission is hereby granted, free of charge, to any person obtaining a copy.\n")
    return root


def _run(args):
    return subprocess.run([sys.executable, "-c", "from ragassay.cli.app import main; main()", *args],
                          capture_output=True, text=True)


def test_build_then_check_json(tmp_path, capsys):
    src = tmp_path / "g.yaml"
    src.write_text(GOOD)
    main(["golden", "build", str(src), "--corpus", str(_corpus(tmp_path)), "-o", str(tmp_path / "out")])
    capsys.readouterr()
    main(["golden", "check", str(tmp_path / "out"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["manifest"]["n_queries"] == 2
    assert out["negative_share"] == 0.5
    assert any("strata with no queries" in w for w in out["warnings"])


def test_build_failure_is_one_line_per_problem_exit_2_no_traceback(tmp_path):
    src = tmp_path / "g.yaml"
    src.write_text(GOOD.replace("to any person obtaining a copy", "to every person obtaining a copy")
                   .replace("stratum: negative\n    answerable: false", "stratum: paraphrase"))
    r = _run(["golden", "build", str(src), "--corpus", str(_corpus(tmp_path)), "-o", str(tmp_path / "out")])
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines[0] == "error: golden set build failed with 2 problem(s); nothing was written"
    assert lines[1].startswith(f"error: {src}:6: q1: quote not found in doc mit (closest match")
    assert lines[2].startswith(f"error: {src}:7: q2: answerable query has no evidence")
    assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()
    r = _run(["golden", "build", str(src), "--corpus", str(_corpus(tmp_path)), "-o", str(tmp_path / "o"), "--debug"])
    assert r.returncode == 1 and "Traceback" in r.stderr and "GoldenBuildError" in r.stderr


def test_check_on_a_missing_directory_says_how_to_fix(tmp_path):
    r = _run(["golden", "check", str(tmp_path / "nope")])
    assert r.returncode == 2
    assert "not a built golden set" in r.stderr and "ragassay golden build" in r.stderr


def test_check_warns_when_negatives_are_under_ten_percent(tmp_path, capsys):
    src = tmp_path / "g.yaml"
    src.write_text(GOOD.split("  - query_id: q2")[0])  # the answerable query only
    main(["golden", "build", str(src), "--corpus", str(_corpus(tmp_path)), "-o", str(tmp_path / "out")])
    capsys.readouterr()
    main(["golden", "check", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert "only 0.0% negative (unanswerable) queries" in " ".join(out.split())
    assert "label type binary" in " ".join(out.split())
