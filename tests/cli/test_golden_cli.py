import json
import os
import stat
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


def test_rebuild_over_an_earlier_build_is_allowed_and_gets_shared_modes(tmp_path, capsys):
    old = os.umask(0o022)
    try:
        src = tmp_path / "g.yaml"
        src.write_text(GOOD)
        out = tmp_path / "out"
        main(["golden", "build", str(src), "--corpus", str(_corpus(tmp_path)), "-o", str(out)])
        first = json.loads((out / "manifest.json").read_text())["dataset_version"]
        src.write_text(GOOD.replace("grade: 3", "grade: 2"))
        main(["golden", "build", str(src), "--corpus", str(_corpus(tmp_path)), "-o", str(out)])
    finally:
        os.umask(old)
    second = json.loads((out / "manifest.json").read_text())["dataset_version"]
    assert first != second and first.split("@")[0] == second.split("@")[0] == "g"
    assert sorted(p.name for p in out.iterdir()) == ["golden.jsonl", "manifest.json"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert {stat.S_IMODE((out / n).stat().st_mode) for n in ("golden.jsonl", "manifest.json")} == {0o644}


def test_build_into_an_existing_empty_folder_fills_it_in_place(tmp_path, capsys, monkeypatch):
    src = tmp_path / "g.yaml"
    src.write_text(GOOD)
    corpus = _corpus(tmp_path)
    work = tmp_path / "empty"
    work.mkdir()
    monkeypatch.chdir(work)
    main(["golden", "build", str(src), "--corpus", str(corpus), "-o", "."])
    assert sorted(os.listdir(work)) == ["golden.jsonl", "manifest.json"] and os.getcwd() == str(work)
    capsys.readouterr()
    main(["golden", "check", ".", "--json"])
    assert json.loads(capsys.readouterr().out)["manifest"]["n_queries"] == 2


def test_markup_in_dataset_names_is_printed_literally(tmp_path, capsys):
    src = tmp_path / "g.yaml"
    src.write_text('dataset: "[/bold]x[red]"\nannotators: ["[/]"]\n' + GOOD)
    main(["golden", "build", str(src), "--corpus", str(_corpus(tmp_path)), "-o", str(tmp_path / "out")])
    assert "built [/bold]x[red]@" in capsys.readouterr().out
    main(["golden", "check", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert "[/bold]x[red]@" in out and "annotators [/]" in out
