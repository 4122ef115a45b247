"""`ragassay judge`, `judge validate` and `golden build` show a progress bar on a terminal (stderr, a real
pseudo-terminal here) and none with --json or when stderr is not a terminal; --json stdout stays one JSON
document."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys

import pytest
from tests.judges.test_cli_judge import write_run_traces

from ragassay.analysis.runner import load_inputs
from ragassay.golden import bundled_golden_source

# the glyph rich draws a bar with (filled or pulsing); a JSON document never holds it
BAR = "━"
GOLDEN = """queries:
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


def run_cli(args, cwd, *, stderr_tty: bool) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `ragassay ARGS` in a fresh process: stdout is a pipe, stderr a
    pseudo-terminal when ``stderr_tty`` (else a pipe), so the bar's text can be told from the JSON."""
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160", "PYTHONIOENCODING": "utf-8"}
    env.pop("NO_COLOR", None)
    cmd = [sys.executable, "-c", "from ragassay.cli.app import main; main()", *map(str, args)]
    if not stderr_tty:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        return p.returncode, p.stdout, p.stderr
    master, slave = pty.openpty()
    with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=slave) as proc:
        os.close(slave)
        err, out = b"", b""
        streams = {master: "err", proc.stdout.fileno(): "out"}
        while streams:  # drain both, or a full terminal buffer would block the child
            ready, _, _ = select.select(list(streams), [], [], 300)
            if not ready:
                proc.kill()
                pytest.fail(f"no output for 300 s from {args}")
            for fd in ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # EIO: the terminal's last writer (the child) has gone
                    chunk = b""
                if not chunk:
                    del streams[fd]
                elif streams[fd] == "err":
                    err += chunk
                else:
                    out += chunk
        code = proc.wait(timeout=60)
    os.close(master)
    return code, out.decode("utf-8"), err.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def scored_store(tmp_path_factory):
    """A store with one scored run ``a`` (four bundled queries) and a local lexical judge config."""
    tmp = tmp_path_factory.mktemp("judge")
    traces = write_run_traces(tmp / "traces.jsonl", load_inputs(None, None))
    db = tmp / "s.duckdb"
    code, _, err = run_cli(["score", traces, "--golden", bundled_golden_source(), "--store", db, "--name", "a",
                            "--json"], tmp, stderr_tty=False)
    assert code == 0, err
    judge = tmp / "local.yaml"
    judge.write_text("provider: local\nmodel: lexical\nmetrics: [faithfulness]\n")
    return tmp, db, judge


def test_judging_a_stored_run_shows_a_bar_on_a_terminal_and_none_with_json(scored_store):
    tmp, db, judge = scored_store
    code, out, err = run_cli(["judge", "a", "--judge", judge, "--store", db, "--resume"], tmp, stderr_tty=True)
    assert code == 0, err
    assert "judging 4 answers of run a with local:lexical" in err and BAR in err
    assert "judged run a" in out and "judging" not in out  # the summary is on stdout; the bar only on stderr

    code, out, err = run_cli(["judge", "a", "--judge", judge, "--store", db, "--resume", "--json"], tmp,
                             stderr_tty=True)
    assert code == 0, err
    assert json.loads(out)["metrics"]["faithfulness"]["defined"] == 3  # three answered, one abstained
    assert BAR not in out and BAR not in err and "judging" not in err


def test_judging_shows_no_bar_when_stderr_is_not_a_terminal(scored_store):
    tmp, db, judge = scored_store
    code, out, err = run_cli(["judge", "a", "--judge", judge, "--store", db, "--resume"], tmp, stderr_tty=False)
    assert code == 0, err
    assert "judged run a" in out
    assert BAR not in err and "judging" not in err


@pytest.mark.slow  # validates the lexical judge on the bundled calibration set twice (a few seconds each)
def test_judge_validate_shows_a_bar_on_a_terminal_and_none_with_json(scored_store):
    tmp, db, judge = scored_store
    code, out, err = run_cli(["judge", "validate", "--judge", judge, "--store", db, "--resamples", "200"], tmp,
                             stderr_tty=True)
    assert code == 0, err
    assert "support labels with local:lexical" in err and BAR in err
    assert "validated local:lexical" in out

    code, out, err = run_cli(["judge", "validate", "--judge", judge, "--store", db, "--resamples", "200",
                              "--json"], tmp, stderr_tty=True)
    assert code == 0, err
    record = json.loads(out)
    assert record["judge_model"] == "local:lexical" and record["kind"] == "support"
    assert BAR not in out and BAR not in err


def test_golden_build_shows_a_bar_on_a_terminal_and_none_with_json(tmp_path):
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "mit.txt").write_text("Permission is hereby granted, free of charge, to any person obtaining a "
                                    "copy.\n")
    src = tmp_path / "g.yaml"
    src.write_text(GOLDEN)
    code, out, err = run_cli(["golden", "build", src, "--corpus", corpus, "-o", tmp_path / "built"], tmp_path,
                             stderr_tty=True)
    assert code == 0, err
    assert "resolving the quotes of" in err and "against 1 documents" in err and BAR in err
    assert "built " in out and "2 queries" in out

    code, out, err = run_cli(["golden", "build", src, "--corpus", corpus, "-o", tmp_path / "built2", "--json"],
                             tmp_path, stderr_tty=True)
    assert code == 0, err
    manifest = json.loads(out)
    assert manifest["n_queries"] == 2 and manifest["n_negative"] == 1
    assert BAR not in out and BAR not in err and "resolving" not in err

    code, out, err = run_cli(["golden", "build", src, "--corpus", corpus, "-o", tmp_path / "built3"], tmp_path,
                             stderr_tty=False)
    assert code == 0, err
    assert "2 queries" in out and BAR not in err and "resolving" not in err
