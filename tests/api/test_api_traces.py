"""What `ragassay.evaluate` keeps for later: the traces (beside the store, where `judge` and the report read
them), the golden set and corpus (`Run.report`), and a clean stdout (progress only on a terminal's stderr)."""

from __future__ import annotations

import gc
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import click
import numpy as np
import pytest
from click.testing import CliRunner
from tests.judges.fake_provider import FakeProvider
from tests.judges.test_cli_judge import judge_yaml, responder

import ragassay
from ragassay.cli.app import main
from ragassay.corpus import load_corpus
from ragassay.errors import InputError
from ragassay.golden import build_golden
from ragassay.store import Store
from ragassay.trace.io import read_traces

DOCS = {
    "a": "The notice period is thirty days. Fees are payable monthly in advance. Late payment accrues interest.\n",
    "b": "The warranty lasts two years. Returns are accepted within fourteen days of delivery.\n",
}
QUERIES = [  # (query_id, question, stratum, doc, quote)
    ("q1", "How long is the notice period?", "terms", "a", "The notice period is thirty days."),
    ("q2", "When are fees payable?", "terms", "a", "Fees are payable monthly in advance."),
    ("q3", "What happens on late payment?", "terms", "a", "Late payment accrues interest."),
    ("q4", "How long does the warranty last?", "goods", "b", "The warranty lasts two years."),
    ("q5", "When are returns accepted?", "goods", "b", "Returns are accepted within fourteen days of delivery."),
]


def _golden_yaml() -> str:
    lines = ["dataset: own-set", "queries:"]
    for qid, question, stratum, doc, quote in QUERIES:
        lines += [f"  - query_id: {qid}", f"    question: '{question}'", f"    stratum: {stratum}",
                  "    answerable: true", "    evidence:", f"      - {{doc_id: {doc}, quote: '{quote}', grade: 3}}",
                  f"    reference_answer: '{quote}'", "    source: human", "    created: 2026-01-01"]
    lines += ["  - query_id: q6", "    question: 'Who won the 1998 World Cup?'", "    stratum: negative",
              "    answerable: false", "    evidence: []", "    source: human", "    created: 2026-01-01"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """A two-document corpus and a six-query golden set (two strata, one negative) of our own."""
    root = tmp_path_factory.mktemp("own")
    (root / "docs").mkdir()
    for doc_id, text in DOCS.items():
        (root / "docs" / f"{doc_id}.txt").write_text(text)
    (root / "golden.yaml").write_text(_golden_yaml())
    corpus = load_corpus(root / "docs")
    build_golden(root / "golden.yaml", corpus, root / "golden")
    return root


def answer_of(question: str) -> str:
    return f"ANSWER<{question}>"


def own_system(question: str) -> dict:
    """Returns the document holding the answer (whole) and an answer naming the question; abstains on a
    question the corpus cannot answer."""
    found = next((q for q in QUERIES if q[1] == question), None)
    if found is None:
        return {"outcome": "abstained"}
    doc, quote = found[3], found[4]
    unit = {"unit_id": doc, "doc_id": doc, "start": 0, "end": len(DOCS[doc]), "score": 1.0}
    return {"fused": [unit], "packed": [unit], "answer": f"{quote} || {answer_of(question)}",
            "outcome": "answered"}


class Res(NamedTuple):
    code: int
    out: str
    err: str


@click.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def _ragassay(args) -> None:
    main(list(args))


def cli(*args) -> Res:
    """``ragassay ARGS`` through the real entry point, under typer's (click's) CliRunner."""
    res = CliRunner().invoke(_ragassay, [str(a) for a in args])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return Res(res.exit_code, res.stdout, res.stderr)


@pytest.fixture
def fake_provider():
    server = FakeProvider(lifetime_s=120.0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_evaluate_keeps_the_traces_beside_the_store_and_judge_run_reads_them(own, tmp_path, fake_provider,
                                                                             monkeypatch):
    db = tmp_path / "evals.duckdb"
    run = ragassay.evaluate(own_system, golden=own / "golden", corpus=own / "docs", store=db, name="mine")
    kept = tmp_path / "evals.traces" / f"{run.run_id}.jsonl"
    assert run.traces_path == kept and kept.is_file()
    assert run.record.extra["traces_dir"] == str(kept.parent) and run.record.source == f"traces:{kept}"
    header, traces, problems = read_traces(kept)
    assert problems == [] and header.dataset_version == run.record.dataset_version
    assert {t.query_id: t.answer for t in traces}["q2"] == own_system("When are fees payable?")["answer"]
    # only the marker and the kept file: the pending file was moved, not copied
    assert sorted(p.name for p in kept.parent.iterdir()) == [".ragassay-traces", kept.name]
    assert kept.stat().st_mode & 0o777 == (kept.parent / ".ragassay-traces").stat().st_mode & 0o777

    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test")
    fake_provider.responder = responder
    cfg = judge_yaml(tmp_path, fake_provider)
    res = cli("judge", "mine", "--judge", cfg, "--store", db, "--golden", own / "golden", "--corpus", own / "docs",
              "--json")
    assert res.code == 0, res.err
    judged = json.loads(res.out)
    # each answer: its evidence quote (supported) + one made-up claim (unsupported); q6 is not answerable
    assert judged["metrics"]["faithfulness"] == {"mean": 0.5, "defined": 5, "undefined": 1}
    assert judged["trace_problems"] == 0 and judged["items"] == 6


def test_traces_dir_chooses_the_folder_and_a_foreign_one_is_refused_before_anything_is_stored(own, tmp_path):
    mine = tmp_path / "kept" / "here"
    run = ragassay.evaluate(own_system, golden=own / "golden", corpus=own / "docs", store=tmp_path / "r.duckdb",
                            traces_dir=mine)
    assert run.traces_path == mine.resolve() / f"{run.run_id}.jsonl" and run.traces_path.is_file()
    assert not (tmp_path / "r.traces").exists()
    with Store.open(tmp_path / "open.db") as st:  # an open file-backed store: beside its file
        opened = ragassay.evaluate(own_system, golden=own / "golden", corpus=own / "docs", store=st)
        assert opened.traces_path == (tmp_path / "open.traces").resolve() / f"{opened.run_id}.jsonl"
        assert opened.traces_path.is_file()

    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "todo.txt").write_text("keep me\n")
    with pytest.raises(InputError, match="notes: folder is not empty and is not an earlier ragassay traces"):
        ragassay.evaluate(own_system, golden=own / "golden", corpus=own / "docs", store=tmp_path / "s.duckdb",
                          traces_dir=foreign)
    assert not (tmp_path / "s.duckdb").exists() and sorted(p.name for p in foreign.iterdir()) == ["todo.txt"]
    with pytest.raises(InputError, match=r"traces_dir=3 \(int\): give a folder path"):
        ragassay.evaluate(own_system, golden=own / "golden", corpus=own / "docs", store=tmp_path / "s.duckdb",
                          traces_dir=3)


def test_a_refused_store_leaves_no_pending_trace_file(own, tmp_path):
    # the traces are made and written before the store opens; a store that cannot open leaves nothing behind
    with pytest.raises(InputError, match="directory .*missing does not exist"):
        ragassay.evaluate(own_system, golden=own / "golden", corpus=own / "docs",
                          store=tmp_path / "missing" / "r.duckdb", traces_dir=tmp_path / "t")
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == [".ragassay-traces"]


def test_run_report_uses_the_golden_set_and_corpus_evaluate_was_given(own, tmp_path):
    db = tmp_path / "r.duckdb"
    base = ragassay.evaluate(own_system, golden=own / "golden.yaml", corpus=own / "docs", store=db, name="base")
    cand = ragassay.evaluate(lambda q: {**own_system(q), "answer": "no idea"}, golden=own / "golden.yaml",
                             corpus=own / "docs", store=db, name="cand")
    assert base.golden.dataset_version == base.record.dataset_version and base.corpus.digest == base.record.corpus_digest
    page = base.report(tmp_path / "report", cand, n_resamples=200).read_text(encoding="utf-8")
    assert "own-set" in page and "Per-query traces unavailable" not in page
    # the per-query view shows the answers read from the kept traces (HTML-escaped on the page)
    assert "ANSWER&lt;How long does the warranty last?&gt;" in page or \
        "ANSWER\\u003cHow long does the warranty last?\\u003e" in page
    # a run loaded from the store knows neither: the bundled set is the default, and is refused
    with pytest.raises(InputError, match="not the bundled set") as e:
        ragassay.load_run("base", store=db).report(tmp_path / "other")
    assert "pass --golden and --corpus" in str(e.value)  # the one check `ragassay report` makes
    # the page is the CLI's: its per-query Parquet file is written beside it
    assert (tmp_path / "report" / "queries.parquet").is_file()


def test_an_in_memory_store_keeps_the_traces_in_a_temporary_folder_that_lives_with_the_store(own, tmp_path):
    with pytest.raises(InputError, match="store=':memory:' \\(str\\): give a DuckDB file path or an open Store"):
        ragassay.evaluate(own_system, golden=own / "golden", corpus=own / "docs", store=":memory:")
    st = Store.open(":memory:")
    run = ragassay.evaluate(own_system, golden=own / "golden", corpus=own / "docs", store=st, name="mem")
    other = ragassay.evaluate(own_system, golden=own / "golden", corpus=own / "docs", store=st, name="mem2")
    folder = run.traces_path.parent
    assert run.traces_path.is_file() and other.traces_path.parent == folder  # one folder per store
    assert not Path("ragassay.traces").exists() and not str(folder).startswith(str(tmp_path))
    page = run.report(tmp_path / "report", n_resamples=200).read_text(encoding="utf-8")
    assert "Per-query traces unavailable" not in page
    st.close()
    del run, other, st
    gc.collect()
    assert not folder.exists()


def test_a_trace_file_is_the_runs_traces_where_it_is(own, tmp_path):
    made = ragassay.evaluate(own_system, golden=own / "golden", corpus=own / "docs", store=tmp_path / "a.duckdb")
    mine = tmp_path / "mine.jsonl"
    mine.write_bytes(made.traces_path.read_bytes())
    run = ragassay.evaluate(mine, golden=own / "golden", corpus=own / "docs", store=tmp_path / "b.duckdb")
    assert run.traces_path == mine and run.record.source == f"traces:{mine}"
    assert "traces_dir" not in run.record.extra and not (tmp_path / "b.traces").exists()


def test_progress_draws_on_a_terminal_stderr_and_keeps_the_runs_config(own, tmp_path, monkeypatch, capsys):
    from rich.console import Console

    from ragassay import api

    async def async_system(question: str) -> dict:
        return own_system(question)

    plain = ragassay.evaluate(async_system, golden=own / "golden", corpus=own / "docs", store=tmp_path / "r.duckdb",
                              name="plain", progress=True)
    assert capsys.readouterr() == ("", "")  # stderr is not a terminal under pytest: nothing is drawn
    screen = io.StringIO()
    monkeypatch.setattr(api, "_stderr_console", lambda: Console(file=screen, force_terminal=True, width=100))
    shown = ragassay.evaluate(async_system, golden=own / "golden", corpus=own / "docs",
                              store=tmp_path / "r.duckdb", name="shown", progress=True)
    assert capsys.readouterr().out == ""
    drawn = screen.getvalue()
    assert "shown" in drawn and "6/6" in drawn and "scoring shown" in drawn
    # the counting wrapper keeps the callable's identity: same config, same sha, same rows
    assert shown.record.config == plain.record.config and shown.record.config_sha == plain.record.config_sha
    assert shown.record.config["callable"].endswith("async_system")
    means = [[(m["metric"], m["mean"], m["n_defined"]) for m in r.summary()["metrics"]] for r in (shown, plain)]
    assert [m[::2] for m in means[0]] == [m[::2] for m in means[1]]
    np.testing.assert_array_equal([m[1] for m in means[0]], [m[1] for m in means[1]])  # NaN equals NaN here


def test_evaluate_and_run_methods_print_nothing_on_a_piped_stdout(own, tmp_path):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(f"""
        import ragassay
        from tests.api.test_api_traces import own_system

        print("start")
        kw = dict(golden={str(own / "golden")!r}, corpus={str(own / "docs")!r}, store="s.duckdb")
        a = ragassay.evaluate(own_system, name="a", progress=True, **kw)
        b = ragassay.evaluate(lambda q: {{**own_system(q), "answer": "x"}}, name="b", progress=True, **kw)
        rows = a.to_arrow().num_rows
        a.summary(); a.metric("answer_f1")
        comp = a.compare(b, n_resamples=200)
        a.gate(b, {{"n_resamples": 200}})
        a.report("report", b, n_resamples=200)
        ragassay.load_run("a", store="s.duckdb").summary()
        print("end", rows > 0, len(comp.rows) > 0)
    """))
    res = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert res.returncode == 0, res.stderr
    assert res.stdout == "start\nend True True\n"
    assert "scoring" not in res.stderr  # stderr is a pipe too: no bar is drawn there either


def test_a_store_in_a_missing_folder_is_refused_before_its_traces_folder_would_create_it(own, tmp_path):
    with pytest.raises(InputError, match=r"r\.duckdb: directory .*missing does not exist; create it or choose"):
        ragassay.evaluate(own_system, golden=own / "golden", corpus=own / "docs", store=tmp_path / "missing" /
                          "r.duckdb")
    assert not (tmp_path / "missing").exists()


def test_a_store_named_like_its_traces_folder_is_refused_unless_the_folder_is_chosen(own, tmp_path):
    with pytest.raises(InputError, match=r"r\.traces: a store named \*\.traces would share its path with its "
                                         "traces folder"):
        ragassay.evaluate(own_system, golden=own / "golden", corpus=own / "docs", store=tmp_path / "r.traces")
    assert list(tmp_path.iterdir()) == []
    run = ragassay.evaluate(own_system, golden=own / "golden", corpus=own / "docs", store=tmp_path / "r.traces",
                            traces_dir=tmp_path / "kept")
    assert (tmp_path / "r.traces").is_file() and run.traces_path == (tmp_path / "kept").resolve() / \
        f"{run.run_id}.jsonl"


def test_a_relative_store_keeps_its_traces_by_absolute_path(own, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    run = ragassay.evaluate(own_system, golden=own / "golden", corpus=own / "docs", store="sub/r.duckdb")
    kept = tmp_path / "sub" / "r.traces" / f"{run.run_id}.jsonl"
    assert run.traces_path == kept.resolve() and run.record.source == f"traces:{kept.resolve()}"
    assert [t.query_id for t in read_traces(kept)[1]] == ["q1", "q2", "q3", "q4", "q5", "q6"]
    assert sorted(p.name for p in kept.parent.iterdir()) == [".ragassay-traces", kept.name]  # no pending file


def test_a_trace_file_system_refuses_a_traces_dir(own, tmp_path):
    made = ragassay.evaluate(own_system, golden=own / "golden", corpus=own / "docs", store=tmp_path / "a.duckdb")
    with pytest.raises(InputError, match=r"traces_dir=.*: a trace file given as the system stays the run's traces "
                                         "where it is; leave traces_dir out"):
        ragassay.evaluate(made.traces_path, golden=own / "golden", corpus=own / "docs", store=tmp_path / "b.duckdb",
                          traces_dir=tmp_path / "t")
    assert not (tmp_path / "b.duckdb").exists() and not (tmp_path / "t").exists()
