"""Bad input at the newer doors (issue 27, item 4): the analyses, the stage commands, convert, doctor, the
judge commands' numbers and ``ragassay.evaluate``. Each case ends as a clean refusal — exit 2, one ``error:``
line per problem naming the flag (or argument) and the value, nothing on stdout — or, through the Python API,
an ``InputError`` saying the same; and nothing is created or changed on disk (a digest of the tree before and
after)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from tests.analyses._runs import make_run
from tests.malformed.conftest import tree_digest

import ragassay
from ragassay.errors import InputError
from ragassay.store import RunRecord, Store
from ragassay.trace import RunHeader, Trace, write_traces

N = 12
DOC = "The notice period is thirty days. Fees are payable monthly in advance.\n"
HOSTILE = "[x](javascript:alert(1)) | <script>alert(1)</script>\n# heading *bold* _it_ `code` ~s~ !{b}"
BOMB = ("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nqueries: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A user's folder: a store with two comparable runs (answer_f1, recall@context, context_tokens with values
    outside [0, 1], latency), a corpus, notes that must survive, and files a case export must not replace."""
    root = tmp_path_factory.mktemp("doors")
    rng = np.random.default_rng(0)
    with Store.open(root / "r.duckdb") as st:
        for name in ("a", "b"):
            make_run(st, name, {"answer_f1": rng.random(N), "recall@context": (rng.random(N) > 0.4).astype(float),
                                "context_tokens": np.full(N, 400.0)}, latency=np.arange(1.0, N + 1))
    (root / "corpus").mkdir()
    (root / "corpus" / "a.txt").write_text(DOC)
    (root / "notes.md").write_text("# my notes\nkeep me\n")
    (root / "mine.jsonl").write_text('{"id": 1, "mine": true}\n')
    (root / "folder.md").mkdir()
    (root / "bomb.yaml").write_text(BOMB)
    return root


@pytest.fixture
def at(world, monkeypatch):
    """Run from inside the user's folder (default outputs land there); yield the folder."""
    monkeypatch.chdir(world)
    return world


def _refused(cli, root: Path, args, fragments) -> None:
    """The command refuses cleanly: exit 2, every stderr line an error line, each fragment said, nothing on
    stdout, and the folder exactly as it was."""
    before = tree_digest(root)
    res = cli(*args)
    res.assert_clean_error(*fragments)
    assert res.out == "", res.out
    assert tree_digest(root) == before


R = "--resamples must be an integer between 100 and 1,000,000"

# (args run from the user's folder, fragments of stderr). Paths that do not exist (j.yaml, abl.yaml, cfg.yaml)
# prove the numbers are checked before any file is read.
FLAG_CASES = [
    # --resamples, every command that takes it
    (("analyze", "decomposition", "a", "--store", "r.duckdb", "--resamples", "0"), [f"{R}, got 0"]),
    (("analyze", "decomposition", "a", "b", "--store", "r.duckdb", "--resamples", "-5"), [f"{R}, got -5"]),
    (("analyze", "decomposition", "a", "--store", "missing.duckdb", "--resamples", "99"), [f"{R}, got 99"]),
    (("analyze", "decomposition", "a", "--store", "r.duckdb", "--resamples", "1000001"), [f"{R}, got 1000001"]),
    (("analyze", "ladder", "a", "b", "--store", "r.duckdb", "--resamples", "0"), [f"{R}, got 0"]),
    (("analyze", "slices", "a", "b", "--store", "r.duckdb", "--resamples", "0"), [f"{R}, got 0"]),
    (("analyze", "ablation", "abl.yaml", "--resamples", "0"), [f"{R}, got 0"]),
    (("analyze", "attribution", "--resamples", "0"), [f"{R}, got 0"]),
    (("analyze", "hygiene", "--resamples", "0"), [f"{R}, got 0"]),
    (("compare", "a", "b", "--store", "missing.duckdb", "--resamples", "0"), [f"{R}, got 0"]),
    (("report", "a", "-o", "rep", "--store", "missing.duckdb", "--resamples", "0"), [f"{R}, got 0"]),
    (("report", "a", "-o", "rep", "--store", "r.duckdb", "--analysis-resamples", "0"),
     ["--analysis-resamples must be an integer between 100 and 1,000,000, got 0"]),
    (("report", "a", "-o", "rep", "--store", "r.duckdb", "--analysis-resamples", "2000000"),
     ["--analysis-resamples must be an integer between 100 and 1,000,000, got 2000000"]),
    (("sweep", "--resamples", "0"), [f"{R}, got 0"]),
    (("sweep", "--resamples", "99"), [f"{R}, got 99"]),
    (("judge", "validate", "--judge", "j.yaml", "--resamples", "0"), [f"{R}, got 0"]),
    (("judge", "rebaseline", "j.yaml", "k.yaml", "--runs", "a", "--resamples", "0"), [f"{R}, got 0"]),
    (("judge", "pairwise", "a", "b", "--judge", "j.yaml", "--resamples", "0"), [f"{R}, got 0"]),
    # --seed: numpy refuses a negative one with a traceback
    (("analyze", "decomposition", "a", "--store", "r.duckdb", "--seed", "-1"), ["--seed must be an integer >= 0, got -1"]),
    (("analyze", "slices", "a", "b", "--store", "r.duckdb", "--seed", "-1"), ["--seed must be an integer >= 0, got -1"]),
    (("analyze", "attribution", "--seed", "-2"), ["--seed must be an integer >= 0, got -2"]),
    (("compare", "a", "b", "--store", "r.duckdb", "--seed", "-1"), ["--seed must be an integer >= 0, got -1"]),
    (("judge", "validate", "--judge", "j.yaml", "--seed", "-1"), ["--seed must be an integer >= 0, got -1"]),
    (("judge", "rebaseline", "j.yaml", "k.yaml", "--runs", "a", "--seed", "-1"),
     ["--seed must be an integer >= 0, got -1"]),
    (("judge", "pairwise", "a", "b", "--judge", "j.yaml", "--seed", "-1"), ["--seed must be an integer >= 0, got -1"]),
    # counts
    (("analyze", "slices", "a", "b", "--store", "r.duckdb", "--top", "-1"), ["--top must be an integer >= 0, got -1"]),
    (("analyze", "slices", "a", "b", "--store", "missing.duckdb", "--random", "-2"),
     ["--random must be an integer >= 0, got -2"]),
    (("analyze", "slices", "a", "b", "--store", "r.duckdb", "--top", "-1", "--random", "-2", "--cases", "c.md"),
     ["--top must be an integer >= 0, got -1", "--random must be an integer >= 0, got -2"]),
    (("analyze", "attribution", "--limit", "0"), ["--limit must be an integer >= 1, got 0"]),
    (("analyze", "attribution", "--limit", "-1"), ["--limit must be an integer >= 1, got -1"]),
    (("analyze", "attacks", "--limit", "0"), ["--limit must be an integer >= 1, got 0"]),
    (("analyze", "attacks", "--limit", "-1"), ["--limit must be an integer >= 1, got -1"]),
    (("analyze", "attribution", "--k", "0"), ["--k must be an integer >= 1, got 0"]),
    (("analyze", "attribution", "--permutations", "1"), ["--permutations must be an integer >= 2, got 1"]),
    (("analyze", "attribution", "--repeats", "0"), ["--repeats must be an integer >= 1, got 0"]),
    (("analyze", "attribution", "--max-exact", "-1"), ["--max-exact must be an integer >= 0, got -1"]),
    (("analyze", "ablation", "abl.yaml", "--trials", "0"), ["--trials must be an integer >= 1, got 0"]),
    (("analyze", "latency", "--load", "cfg.yaml", "--concurrency", "0"),
     ["--concurrency must be an integer >= 1, got 0"]),
    (("analyze", "latency", "--load", "cfg.yaml", "--requests", "0"), ["--requests must be an integer >= 1, got 0"]),
    (("analyze", "latency", "--load", "cfg.yaml", "--requests", "-3", "--concurrency", "-1"),
     ["--concurrency must be an integer >= 1, got -1", "--requests must be an integer >= 1, got -3"]),
    (("analyze", "hygiene", "--n", "0"), ["--n must be an integer >= 1, got 0"]),
    (("judge", "validate", "--judge", "j.yaml", "--min-items", "0"), ["--min-items must be an integer >= 1, got 0"]),
    (("run", "cfg.yaml", "--trials", "0"), ["--trials"]),
    (("power", "--sigma-d", "0.2", "--n", "0"), ["--n must be at least 2 paired items", "got 0"]),
    # floats with a range (NaN and infinities included)
    (("analyze", "hygiene", "--threshold", "2"), ["--threshold must be a finite number in (0, 1], got 2"]),
    (("analyze", "hygiene", "--threshold", "0"), ["--threshold must be a finite number in (0, 1], got 0"]),
    (("analyze", "hygiene", "--threshold", "nan"), ["--threshold must be a finite number in (0, 1], got nan"]),
    (("analyze", "hygiene", "--margin", "-1"), ["--margin must be a finite number in [0, 1], got -1"]),
    (("analyze", "hygiene", "--margin", "inf"), ["--margin must be a finite number in [0, 1], got inf"]),
    (("analyze", "hygiene", "--n", "0", "--margin", "nan"),
     ["--n must be an integer >= 1, got 0", "--margin must be a finite number in [0, 1], got nan"]),
    (("corpus", "check", "corpus", "--drift-tolerance", "nan"),
     ["--drift-tolerance must be a finite number >= 0, got nan"]),
    (("corpus", "check", "corpus", "--drift-tolerance", "-1"),
     ["--drift-tolerance must be a finite number >= 0, got -1"]),
    (("corpus", "check", "corpus", "--drift-tolerance", "inf"),
     ["--drift-tolerance must be a finite number >= 0, got inf"]),
    (("parse", "corpus", "--threshold", "0"), ["--threshold must be a finite number in (0, 1], got 0"]),
    (("parse", "corpus", "--threshold", "1.5"), ["--threshold must be a finite number in (0, 1], got 1.5"]),
    (("doctor", "--sigma-d", "0"), ["--sigma-d must be a finite number > 0, got 0"]),
    (("doctor", "--sigma-d", "nan"), ["--sigma-d must be a finite number > 0, got nan"]),
    (("doctor", "--sigma-d", "inf"), ["--sigma-d must be a finite number > 0, got inf"]),
]


@pytest.mark.parametrize("args, fragments", FLAG_CASES, ids=[" ".join(a) for a, _ in FLAG_CASES])
def test_an_out_of_range_number_is_refused_before_anything_is_read(cli, at, args, fragments):
    _refused(cli, at, args, fragments)


@pytest.mark.parametrize("args, fragment", [
    (("analyze", "ablation", "none.yaml", "--store", "new.duckdb"),
     "none.yaml: no such file; pass the ablation spec file"),
    (("analyze", "slices", "a", "b", "--store", "r.duckdb", "--declared", "none.yaml"),
     "none.yaml: no such file; pass the slices declaration file"),
], ids=["ablation", "slices --declared"])
def test_a_missing_analysis_file_is_named_once(cli, at, args, fragment):
    _refused(cli, at, args, [fragment])
    assert "file file" not in cli(*args).err


def test_every_bad_flag_gets_its_own_error_line(cli, at):
    res = cli("analyze", "attribution", "--k", "0", "--limit", "0", "--seed", "-1", "--resamples", "5")
    res.assert_clean_error()
    assert res.err.splitlines() == [
        "error: --k must be an integer >= 1, got 0", "error: --limit must be an integer >= 1, got 0",
        "error: --seed must be an integer >= 0, got -1", f"error: {R}, got 5"]


RULE = "the threshold must be a number in (0, 1]"
NOT_SCORE = "context_tokens is not a score in [0, 1] (stored values from 400 to 400)"
CORRECT_CASES = [
    (("decomposition", "a"), "answer_f1>=2", [f"correctness rule 'answer_f1>=2': {RULE}", "e.g. answer_f1>=0.5"]),
    (("decomposition", "a"), "answer_f1>=0", [f"correctness rule 'answer_f1>=0': {RULE}"]),
    (("decomposition", "a"), "answer_f1>=-0.5", [f"'answer_f1>=-0.5': {RULE}"]),
    (("decomposition", "a"), "answer_f1>=1e999", [f"'answer_f1>=1e999': {RULE}"]),
    (("decomposition", "a", "b"), "answer_f1>=1.01", [f"'answer_f1>=1.01': {RULE}"]),
    (("ladder", "a", "b"), "answer_f1>=2", [f"'answer_f1>=2': {RULE}"]),
    (("consistency", "a"), "answer_f1>=2", [f"'answer_f1>=2': {RULE}"]),
    (("decomposition", "a"), "context_tokens>=0.5", [NOT_SCORE, "name a [0, 1] metric such as answer_f1>=0.5"]),
    (("decomposition", "a", "b"), "context_tokens>=0.5", [NOT_SCORE]),
    (("ladder", "a", "b"), "context_tokens>=0.5", [NOT_SCORE]),
    (("decomposition", "a"), "bogus>=0.5", ["run 'a' has no 'bogus' rows", "--correct METRIC>=THRESHOLD"]),
    (("decomposition", "a", "b"), "bogus>=0.5", ["run 'a' has no 'bogus' rows"]),
    (("ladder", "a", "b"), "bogus>=0.5",
     ["run 'a' has no 'bogus' rows; name a correctness metric every rung has with --correct METRIC>=THRESHOLD"]),
    (("consistency", "a"), "bogus>=0.5", ["run 'a' has no 'bogus' rows"]),
]


@pytest.mark.parametrize("kind, rule, fragments", CORRECT_CASES,
                         ids=[f"{' '.join(k)} {r}" for k, r, _ in CORRECT_CASES])
def test_a_correctness_rule_off_the_unit_interval_is_refused(cli, at, kind, rule, fragments):
    extra = [] if kind[0] == "consistency" else ["--resamples", "100"]
    _refused(cli, at, ["analyze", *kind, "--store", "r.duckdb", "--correct", rule, *extra], fragments)


# ------------------------------------------------------------------------------------------------ sweep files
SWEEPS = {
    "size zero": ("grid: {kind: [fixed], size: [0, 64]}\n", "grid.size holds 0; each entry must be a token count >= 1"),
    "size negative": ("grid: {kind: [fixed], size: [-1, 64, 128]}\n", "grid.size holds -1"),
    "size fractional": ("grid: {size: [64, 128.5]}\n", "grid.size holds 128.5"),
    "size text": ("grid: {size: ['64', 128]}\n", "grid.size holds '64'"),
    "size boolean": ("grid: {size: [true, 128]}\n", "grid.size holds True"),
    "size missing": ("grid: {kind: [fixed]}\n", "grid.size must be a non-empty list"),
    "size empty": ("grid: {size: []}\n", "grid.size must be a non-empty list, each entry a token count >= 1; got []"),
    "grid empty": ("grid: {}\nconfigs:\n  - {name: a}\n  - {name: b}\n",
                   "grid must be a mapping with a non-empty size list (and kind and overlap lists)"),
    "grid null": ("grid:\nconfigs:\n  - {name: a}\n  - {name: b}\n", "grid must be a mapping", "got None"),
    "grid a list": ("grid: [64, 128]\n", "grid must be a mapping", "got [64, 128]; or leave grid out"),
    "kinds empty": ("grid: {kind: [], size: [64, 128]}\n", "grid.kind must be a non-empty list"),
    "overlap negative": ("grid: {kind: [fixed], size: [64, 128], overlap: [-8]}\n", "grid.overlap holds -8"),
    "overlap not below size": ("grid: {kind: [fixed], size: [64, 128], overlap: [0, 64]}\n",
                               "grid entry fixed-64-o64: the overlap (64) must be smaller than the size (64)"),
    "unknown grid key": ("grid: {size: [64, 128], sizes: [1]}\n", "unknown grid key(s) sizes"),
    "config size zero": ("configs:\n  - {name: a, chunker: {kind: fixed, size: 0}}\n  - {name: b}\n",
                         "config a: chunker.size: Input should be greater than or equal to 1, got 0"),
    "name climbs out": ("configs:\n  - {name: ../notes, chunker: {kind: fixed, size: 64}}\n  - {name: b}\n",
                        "configs[0] name '../notes' must be a plain file name"),
    "name with a folder": ("configs:\n  - {name: a/b}\n  - {name: b}\n", "configs[0] name 'a/b' must be a plain"),
    "name dot-dot": ("configs:\n  - {name: a}\n  - {name: '..'}\n", "configs[1] name '..' must be a plain"),
    "configs not a list": ("configs: 5\n", "configs must be a list"),
    "overlap without 0 beside a windowless kind": (
        "grid: {kind: [fixed, recursive], size: [64, 128], overlap: [16]}\n",
        "grid.overlap [16] has no 0, the only overlap kind(s) recursive take", "add 0 to grid.overlap"),
    "fusion a list": ("configs:\n  - {name: a}\n  - {name: b, fusion: [1, 2]}\n",
                      "config b: fusion must be a mapping of settings, got [1, 2]"),
    "reranker a word": ("configs:\n  - {name: a, reranker: none}\n  - {name: b}\n",
                        "config a: reranker must be a mapping of settings, got 'none'"),
}


@pytest.mark.parametrize("case", list(SWEEPS), ids=list(SWEEPS))
def test_a_bad_sweep_file_creates_no_workdir_and_no_store(cli, tmp_path, monkeypatch, case):
    text, first, *more = SWEEPS[case]
    (tmp_path / "s.yaml").write_text(text)
    (tmp_path / "notes.yaml").write_text("mine\n")
    monkeypatch.chdir(tmp_path)
    _refused(cli, tmp_path, ["sweep", "s.yaml", "--store", "db.duckdb", "--workdir", "w"], [f"s.yaml: {first}", *more])


def test_a_sweep_into_a_used_workdir_is_refused_before_the_store_exists(cli, tmp_path, monkeypatch):
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "mine.txt").write_text("keep\n")
    monkeypatch.chdir(tmp_path)
    _refused(cli, tmp_path, ["sweep", "--store", "db.duckdb", "--workdir", "w"],
             ["w: folder is not empty", "mine.txt", "choose an empty or new folder"])


def test_a_sweep_workdir_that_is_a_file_is_refused(cli, tmp_path, monkeypatch):
    (tmp_path / "w").write_text("a file\n")
    monkeypatch.chdir(tmp_path)
    _refused(cli, tmp_path, ["sweep", "--store", "db.duckdb", "--workdir", "w"],
             ["w: is an existing file, not a folder; refusing to replace it"])


def test_run_sweep_checks_its_settings_before_the_workdir_exists(tmp_path):
    from ragassay.analysis.sweep import bundled_sweep, load_sweep, run_sweep

    spec = load_sweep(bundled_sweep())
    for kw, fragment in (({"n_resamples": 0}, "n_resamples=0: give an integer between 100 and 1,000,000"),
                         ({"seed": -1}, "seed=-1: give an integer >= 0"),
                         ({"confidence": 1.0}, "confidence=1.0: give a number strictly between 0 and 1")):
        with pytest.raises(InputError, match=re.escape(fragment)):
            run_sweep(None, spec, None, None, tmp_path / "w", **kw)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------- run: no empty store
def test_run_resume_without_a_store_is_refused_before_one_is_created(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused(cli, tmp_path, ["run", "cfg.yaml", "--resume", "nope", "--store", "new.duckdb"],
             ["--resume nope: there is no results store at new.duckdb to resume a run from"])


def test_run_with_missing_traces_is_refused_before_the_store_is_created(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused(cli, tmp_path, ["run", "cfg.yaml", "--traces", "gone.jsonl", "--store", "new.duckdb"],
             ["gone.jsonl: trace file not found"])


def test_run_resume_of_a_run_the_store_lacks_is_refused_before_the_pipeline_starts(cli, world, tmp_path, monkeypatch):
    from ragassay.analysis.sweep import bundled_sweep

    (tmp_path / "s.duckdb").write_bytes((world / "r.duckdb").read_bytes())
    monkeypatch.chdir(tmp_path)
    cfg = bundled_sweep().parents[1] / "configs" / "bm25.yaml"
    res = cli("run", cfg, "--resume", "nope", "--store", "s.duckdb")
    res.assert_clean_error("no run matches 'nope' in s.duckdb")
    assert res.out == ""
    with Store.open(tmp_path / "s.duckdb", read_only=True) as st:
        assert sorted(r.name for r in st.list_runs()) == ["a", "b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.duckdb"]


PIN_MISMATCH = ('{"type": "header", "run_name": "x", "corpus_digest": "sha256:zzz"}\n'
                '{"type": "trace", "trace_id": "t", "query_id": "q1"}\n')
LATE_REFUSALS = [
    (("run", "cfg.yaml", "--traces", "tr"), "tr: is a directory, not a trace file"),
    (("run", "cfg.yaml", "--traces", "pin.jsonl"), "pin.jsonl:1: the trace header's corpus_digest 'sha256:zzz' differs"),
    (("score", "tr", "--golden", "{golden}"), "tr: is a directory, not a trace file"),
    (("score", "pin.jsonl", "--golden", "{golden}"), "pin.jsonl:1: the trace header's corpus_digest 'sha256:zzz'"),
]


@pytest.mark.parametrize("args, fragment", LATE_REFUSALS, ids=[" ".join(a) for a, _ in LATE_REFUSALS])
def test_a_refusal_after_a_new_store_was_opened_removes_it(cli, tmp_path, monkeypatch, args, fragment):
    """The trace reader and the pin check run after the store is opened (and so created): the refusal must
    still leave no store file behind."""
    from ragassay.golden import bundled_golden_source

    (tmp_path / "tr").mkdir()
    (tmp_path / "pin.jsonl").write_text(PIN_MISMATCH)
    monkeypatch.chdir(tmp_path)
    args = [a.replace("{golden}", str(bundled_golden_source())) for a in args]
    _refused(cli, tmp_path, [*args, "--store", "new.duckdb"], [fragment])


def test_an_ablation_refused_after_opening_a_new_store_removes_it(cli, tmp_path, monkeypatch):
    (tmp_path / "base.yaml").write_text("- not a mapping\n")
    (tmp_path / "abl.yaml").write_text("baseline: base.yaml\nintervention: {reranker: {kind: lexical}}\n"
                                       "expectations: [{stratum: all, expect: help}]\n")
    monkeypatch.chdir(tmp_path)
    _refused(cli, tmp_path, ["analyze", "ablation", "abl.yaml", "--store", "new.duckdb"],
             ["base.yaml: the baseline pipeline config must be a mapping"])


def test_a_failed_block_keeps_a_store_that_holds_a_run_or_existed_before(tmp_path):
    from ragassay.cli.run import kept_only_with_runs

    kept = tmp_path / "kept.duckdb"
    with pytest.raises(KeyboardInterrupt), kept_only_with_runs(kept), Store.open(kept) as st:
        st.create_run(RunRecord(name="interrupted", config={"name": "x"}, trials=1, n_queries=1))
        raise KeyboardInterrupt  # a run cut short stays resumable
    old = tmp_path / "old.duckdb"
    Store.open(old).close()
    with pytest.raises(InputError), kept_only_with_runs(old), Store.open(old):
        raise InputError("refused")
    empty = tmp_path / "empty.duckdb"
    with pytest.raises(InputError), kept_only_with_runs(empty), Store.open(empty):
        raise InputError("refused")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.duckdb", "old.duckdb"]


# ---------------------------------------------------------------------------------------------------- convert
CONVERTS = {
    "empty": (b"", "is empty (no trace lines)"),
    "blank lines": (b"\n  \n\n", "is empty (no trace lines)"),
    "header only": (b'{"type": "header", "run_name": "x"}\n', "holds only the run header (line 1) and no trace"),
    "header, no newline": (b'{"type": "header", "run_name": "x"}', "holds only the run header"),
    "header and blanks": (b'{"type": "header", "run_name": "x"}\r\n\r\n   \n', "holds only the run header"),
    "bom and header": (b'\xef\xbb\xbf{"type": "header", "run_name": "x"}\n', "holds only the run header"),
}


@pytest.mark.parametrize("case", list(CONVERTS), ids=list(CONVERTS))
@pytest.mark.parametrize("out", ["out.parquet", "out"])
def test_convert_of_a_file_without_traces_is_refused(cli, tmp_path, monkeypatch, case, out):
    data, fragment = CONVERTS[case]
    (tmp_path / "t.jsonl").write_bytes(data)
    monkeypatch.chdir(tmp_path)
    _refused(cli, tmp_path, ["convert", "t.jsonl", out], [f"t.jsonl: {fragment}", "nothing to convert"])


# ---------------------------------------------------------------------------------------------------- doctor
DOCTOR_YAML = {
    "alias bomb": BOMB.encode(),
    "recursive alias": b"dataset: &d [1, *d]\nqueries: []\n",
    "duplicate key": b"dataset: a\ndataset: b\nqueries: []\n",
    "not utf-8": b"dataset: caf\xe9\nqueries: []\n",
}


@pytest.mark.parametrize("case", list(DOCTOR_YAML), ids=list(DOCTOR_YAML))
def test_doctor_refuses_a_golden_file_as_golden_build_refuses_it(cli, tmp_path, monkeypatch, world, case):
    (tmp_path / "g.yaml").write_bytes(DOCTOR_YAML[case])
    monkeypatch.chdir(tmp_path)
    before = tree_digest(tmp_path)
    built = cli("golden", "build", "g.yaml", "--corpus", world / "corpus", "-o", "gout")
    built.assert_clean_error("g.yaml")
    doctor = cli("doctor", "--golden", "g.yaml", "--store", "none.duckdb")
    doctor.assert_clean_error()
    assert doctor.err == built.err and doctor.out == ""
    assert tree_digest(tmp_path) == before


def test_doctor_names_the_alias_bomb_and_the_fix(cli, at):
    _refused(cli, at, ["doctor", "--golden", "bomb.yaml", "--store", "none.duckdb"],
             ["bomb.yaml: YAML aliases expand", "write the golden set out without nested aliases"])


# ------------------------------------------------------------------------------------------ slices --cases
CASE_PATHS = {
    "someone's markdown": ("notes.md", "notes.md: file exists and is not an earlier ragassay slices --cases output; "
                                       "refusing to overwrite it; choose a new file name"),
    "someone's jsonl": ("mine.jsonl", "mine.jsonl: file exists and is not an earlier ragassay slices --cases output"),
    "a folder": ("folder.md", "folder.md: is a folder; pass a file name for the slices --cases output"),
    "wrong suffix": ("cases.txt", "cases.txt: case export must end in .jsonl or .md"),
    "under a file": ("notes.md/c.md", "notes.md is a file, not a folder"),
    "the store": ("r.duckdb", "r.duckdb: case export must end in .jsonl or .md"),
}


@pytest.mark.parametrize("case", list(CASE_PATHS), ids=list(CASE_PATHS))
def test_a_case_export_never_replaces_a_file_ragassay_did_not_write(cli, at, case):
    path, fragment = CASE_PATHS[case]
    _refused(cli, at, ["analyze", "slices", "a", "b", "--store", "r.duckdb", "--resamples", "100", "--cases", path],
             [fragment])


def _hostile_world(tmp_path: Path) -> Path:
    """Two runs named with markup whose traces carry hostile answers and doc ids."""
    db = tmp_path / "h.duckdb"
    with Store.open(db) as st:
        for name, values in ((f"A{HOSTILE}", np.linspace(0, 1, 6)), (f"B{HOSTILE}", np.linspace(1, 0, 6))):
            tdir = tmp_path / f"traces-{name[0]}"
            tdir.mkdir()
            run_id = make_run(st, name, {"answer_f1": values}, extra={"traces_dir": str(tdir)})
            traces = [Trace(trace_id=f"{name[0]}{i}", query_id=f"q{i:03d}", question=f"Q{i} {HOSTILE}",
                            answer=f"{HOSTILE} {i}", outcome="answered") for i in range(6)]
            write_traces(tdir / f"{run_id}.jsonl", RunHeader(run_name=name[0]), traces)
    return db


def test_a_case_export_escapes_hostile_text_as_compare_markdown_does(cli, tmp_path):
    from ragassay.report.markdown import md_escape

    db = _hostile_world(tmp_path)
    with Store.open(db, read_only=True) as st:
        a, b = (r.run_id for r in st.list_runs())
    res = cli("analyze", "slices", a, b, "--store", db, "--resamples", "100", "--cases", tmp_path / "c.md")
    assert res.code == 0, res.err
    md = (tmp_path / "c.md").read_text()
    assert md.splitlines()[0] == "<!-- generator: ragassay case export -->"
    assert "<script>" not in md and "](javascript" not in md
    assert md_escape(f"A{HOSTILE}") in md and md_escape(f"{HOSTILE} 0") in md
    rows = [line for line in md.splitlines() if line.startswith("|")]
    assert rows and all(len(re.findall(r"(?<!\\)\|", line)) == 4 for line in rows)  # three cells, no more
    # the old export is ragassay's own: a second export may replace it, the JSONL one too
    res = cli("analyze", "slices", a, b, "--store", db, "--resamples", "100", "--cases", tmp_path / "c.md",
              "--top", "1", "--random", "0")
    assert res.code == 0, res.err
    assert md.count("## ") > (tmp_path / "c.md").read_text().count("## ")
    for _ in range(2):
        res = cli("analyze", "slices", a, b, "--store", db, "--resamples", "100", "--cases", tmp_path / "c.jsonl")
        assert res.code == 0, res.err
    assert json.loads((tmp_path / "c.jsonl").read_text().splitlines()[0])["kind"] in ("gain", "loss", "random",
                                                                                      "severe")


def test_an_empty_file_may_take_a_case_export(cli, at, tmp_path):
    (tmp_path / "c.md").write_text("")
    res = cli("analyze", "slices", "a", "b", "--store", "r.duckdb", "--resamples", "100", "--cases", tmp_path / "c.md")
    assert res.code == 0, res.err
    assert (tmp_path / "c.md").read_text().startswith("<!-- generator: ragassay case export -->\n# Cases: a → b")


# --------------------------------------------------------------------------------------- the analyses' API
def test_the_analysis_functions_refuse_bad_arguments(world):
    from ragassay.analysis import hygiene, latency
    from ragassay.analysis.decomposition import CorrectRule
    from ragassay.analysis.slicing import export_cases, write_cases

    with Store.open(world / "r.duckdb", read_only=True) as st:
        with pytest.raises(InputError, match=r"n_top=-1: give a number of cases >= 0"):
            export_cases(st, "a", "b", n_top=-1)
        with pytest.raises(InputError, match=r"n_random=2.5: give a number of cases >= 0"):
            export_cases(st, "a", "b", n_random=2.5)
    with pytest.raises(InputError, match=r"notes.md: file exists and is not an earlier ragassay slices --cases"):
        write_cases({"cases": []}, world / "notes.md")
    with pytest.raises(InputError, match=r"concurrency=0 \(--concurrency on the command line\): give an integer"):
        latency.load_run(lambda q, i: None, ["q"], concurrency=0, n_requests=5)
    with pytest.raises(InputError, match=r"n_requests=0 \(--requests on the command line\)"):
        latency.load_run(lambda q, i: None, ["q"], concurrency=2, n_requests=0)
    with pytest.raises(InputError, match=r"threshold_pct=0: give a percentile in \(0, 100\]"):
        latency.latency_analysis(totals=[1.0, 2.0], threshold_pct=0)
    with pytest.raises(InputError, match=r"stage thresholds \{'bm25': nan\}"):
        latency.latency_analysis(totals=[1.0], thresholds={"bm25": float("nan")})
    with pytest.raises(InputError, match=r"threshold=2 \(--threshold on the command line\) must be a number in"):
        hygiene.retrieval_bypass([1.0], [0.0], threshold=2)
    with pytest.raises(InputError, match=r"margin=nan \(--margin on the command line\)"):
        hygiene.shortcut_audit([0.5], [0.5], ["s"], margin=float("nan"))
    with pytest.raises(InputError, match=r"threshold=0 \(--threshold"):
        hygiene.audit_runs(None, ["a"], None, None, threshold=0)
    with pytest.raises(InputError, match=re.escape("'answer_em>=1.5': the threshold must be a number in (0, 1]")):
        CorrectRule.parse("answer_em>=1.5")
    with pytest.raises(InputError, match=r"answer_f1 is not a score in \[0, 1\] \(stored values from -1 to 2\)"):
        CorrectRule.parse("answer_f1>=0.5").apply(np.array([-1.0, np.nan, 2.0]))
    np.testing.assert_array_equal(CorrectRule.parse("answer_f1>=0.5").apply(np.array([0.5, np.nan, 0.2])),
                                  [1.0, np.nan, 0.0])


# ----------------------------------------------------------------------------------------- ragassay.evaluate
EVALUATE_ARGS = [
    ({"options": "doc"}, "options='doc' (str): give a ragassay.analysis.scoring.ScoringOptions"),
    ({"options": {"hit_rule": "doc"}}, "options={'hit_rule': 'doc'} (dict): give a ragassay.analysis.scoring"),
    ({"concurrency": 0}, "concurrency=0 (int): give a positive integer"),
    ({"concurrency": -4}, "concurrency=-4 (int): give a positive integer"),
    ({"concurrency": 2.5}, "concurrency=2.5 (float): give a positive integer"),
    ({"concurrency": True}, "concurrency=True (bool): give a positive integer"),
    ({"trials": 0}, "trials=0 (int): give a positive integer"),
    ({"trials": "3"}, "trials='3' (str): give a positive integer"),
    ({"trials": None}, "trials=None (NoneType): give a positive integer"),
    ({"golden": 5}, "golden=5 (int): give a built golden-set folder, an authoring file, a GoldenSet"),
    ({"golden": ""}, "golden='' (str): give a built golden-set folder"),
    ({"corpus": ["a.txt"]}, "corpus=['a.txt'] (list): give a corpus folder, a JSONL file, a Corpus"),
    ({"store": None}, "store=None (NoneType): give a DuckDB file path or an open Store"),
    ({"store": 3}, "store=3 (int): give a DuckDB file path or an open Store"),
    ({"name": ""}, "name='' (str): give a non-empty run name"),
    ({"name": 7}, "name=7 (int): give a non-empty run name"),
    ({"allow_pin_mismatch": "yes"}, "allow_pin_mismatch='yes' (str): give True or False"),
    ({"progress": 1}, "progress=1 (int): give True or False"),
]


@pytest.mark.parametrize("kwargs, fragment", EVALUATE_ARGS, ids=[repr(k) for k, _ in EVALUATE_ARGS])
def test_evaluate_refuses_a_wrong_keyword_argument_before_anything_runs(tmp_path, kwargs, fragment):
    calls = []
    kwargs = {"store": tmp_path / "r.duckdb", **kwargs}
    with pytest.raises(InputError) as e:
        ragassay.evaluate(lambda q: calls.append(q) or "x", **kwargs)
    assert fragment in str(e.value)
    assert calls == [] and list(tmp_path.iterdir()) == []


def test_evaluate_lists_every_wrong_argument_one_per_line(tmp_path):
    with pytest.raises(InputError) as e:
        ragassay.evaluate("missing.jsonl", store=tmp_path / "r.duckdb", trials=0, concurrency=0, options="doc")
    assert str(e.value).splitlines() == [
        "trials=0 (int): give a positive integer (runs of each query)",
        "concurrency=0 (int): give a positive integer (calls at once)",
        "options='doc' (str): give a ragassay.analysis.scoring.ScoringOptions (hit rule, relevance threshold, "
        "gain, ties), or None for the golden set's manifest"]
    assert list(tmp_path.iterdir()) == []


def test_score_of_several_files_checks_every_file_before_scoring_the_first(tmp_path, cli, monkeypatch):
    """A missing second file used to leave the first scored into a new store; now nothing is created."""
    monkeypatch.chdir(tmp_path)
    write_traces(tmp_path / "a.jsonl", RunHeader(run_name="a"), [Trace(trace_id="t1", query_id="q1")])
    _refused(cli, tmp_path, ["score", "a.jsonl", "gone.jsonl", "--golden", "g.yaml", "--store", "s.duckdb"],
             ["gone.jsonl: trace file not found; pass the path of a .jsonl trace file"])
    assert not (tmp_path / "s.duckdb").exists()
