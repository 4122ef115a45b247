"""`ragassay convert`: a JSONL trace file as a Parquet trace dataset.

The decisive property: `ragassay score` of the converted dataset stores exactly the rows, query status, run
pins and extras (problems and unit-failure lines moved from JSONL lines to dataset rows) that `score` of the
JSONL file stores, on the bundled demo's traces and on random traces. The dataset's content is checked
against an independent oracle, the plain pydantic reader (`read_traces`), and so is the list of bad lines.
"""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from tests.analysis.test_stream_score import _random_file, _record_line

from ragassay.analysis.demo import demo_config_dir
from ragassay.analysis.runner import load_inputs
from ragassay.golden import build_golden, bundled_golden_source
from ragassay.pipeline import Pipeline
from ragassay.store import Store
from ragassay.trace import convert as conv
from ragassay.trace import read_traces, write_traces
from ragassay.trace.convert import convert_jsonl_to_parquet
from ragassay.trace.io import TraceReader
from ragassay.trace.parquet import HEADER_KEY, TRACE_SCHEMA, ParquetTraceReader, _data_files
from ragassay.trace.schema import RunHeader, Trace

PINS = ("name", "status", "dataset_version", "corpus_digest", "golden_sha256", "config", "config_sha",
        "metric_version", "gain", "relevance_threshold", "hit_rule", "ties", "trials")


@pytest.fixture(scope="module")
def bundled():
    return load_inputs(None, None)


@pytest.fixture(scope="module")
def golden_dir(bundled, tmp_path_factory):
    corpus, _ = bundled
    gdir = tmp_path_factory.mktemp("golden") / "golden"
    build_golden(bundled_golden_source(), corpus, gdir)
    return gdir


def cli(capsys, *args):
    from ragassay.cli.app import main

    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return (e.value.code or 0), out.out, out.err


# ---- an independent oracle for the dataset's content -----------------------------------------------------


def _no_nulls(v):
    if isinstance(v, dict):
        return {k: _no_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_no_nulls(x) for x in v]
    return v


def dataset_traces(path) -> list[Trace]:
    """Every row of a dataset as a full Trace (units included), read with pyarrow and the model only."""
    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    out = []
    for f in files:
        for row in pq.read_table(f).to_pylist():
            rec = _no_nulls({k: v for k, v in row.items() if k not in ("branches", "durations_ms", "meta")})
            rec["branches"] = {k: _no_nulls(v) for k, v in row["branches"] or []}
            rec["durations_ms"] = dict(row["durations_ms"] or [])
            if row["meta"] is not None:
                rec["meta"] = json.loads(row["meta"])
            if row["reranked"] is None:
                rec.pop("reranked", None)
            out.append(Trace.model_validate(rec))
    return out


def _same(a, b) -> bool:
    """Equal, NaN equal to NaN, dict key order ignored."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def assert_dataset_holds(path, jsonl):
    """The dataset's rows are the JSONL's valid traces (by the plain reader), in file order, once each."""
    _, want, _ = read_traces(jsonl)
    got = dataset_traces(path)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        gd, wd = g.model_dump(), w.model_dump()  # every field, each unit's rank included
        assert _same(gd, wd), (gd, wd)
        assert list(gd["branches"]) == list(wd["branches"])  # a trace's branch order is kept
    return got


# ---- scoring equality ------------------------------------------------------------------------------------


def _where(message: str, source: str, line_of_row: dict[int, int] | None) -> tuple[int, str]:
    rest = message.removeprefix(f"{source}:")
    line, msg = rest.split(": ", 1)
    if line_of_row is None:
        return int(line), msg
    msg = re.sub(r"first at line (\d+)", lambda m: f"first at line {line_of_row[int(m.group(1))]}", msg)
    return line_of_row[int(line)], msg


def stored(db, source):
    with Store.open(db) as st:
        (run,) = st.list_runs()
        rows = st.results(run.run_id).drop_columns(["run_id"]).to_pylist()
        status = sorted((r["query_id"], r["trial"], r["status"], r["error"])
                        for r in st.query_status(run.run_id).to_pylist())
        rec = st.get_run(run.run_id)
        return rows, status, {k: getattr(rec, k) for k in PINS}, dict(rec.extra), rec.source


def assert_score_equal(capsys, golden_dir, jsonl, dataset, tmp_path, line_of_row, batch_size=2048, dropped=()):
    """`ragassay score` of both sources stores the same rows, status, pins and extras; the lines convert
    dropped (``dropped``) are the JSONL score's schema failures and problems, and the dataset has none."""
    got = {}
    for key, src in (("j", jsonl), ("p", dataset)):
        db = tmp_path / f"{key}.duckdb"
        code, out, err = cli(capsys, "score", src, "--golden", golden_dir, "--store", db, "--batch-size",
                             batch_size, "--json")
        assert code == 0, err
        got[key] = stored(db, src)
    (jr, js, jp, je, _), (pr, ps, pp, pe, _) = got["j"], got["p"]
    assert jr and len(pr) == len(jr)
    for a, b in zip(pr, jr, strict=True):
        assert a.keys() == b.keys() and all(_same(a[k], b[k]) for k in b), (a, b)
    assert ps == js and pp == jp
    assert pe.keys() == je.keys()
    for k in je:
        if k == "unit_failure_examples":
            assert [_where(p, str(dataset), line_of_row) for p in pe[k]] == [_where(p, str(jsonl), None) for p in je[k]]
        elif k == "problems" and dropped:
            assert pe[k] == [] and je[k] == [f"{jsonl}:{p.line}: {p.message}" for p in dropped[:len(je[k])]]
            assert len(je[k]) == min(len(dropped), 50)
        elif k == "problems":
            assert [_where(p, str(dataset), line_of_row) for p in pe[k]] == [_where(p, str(jsonl), None) for p in je[k]]
        elif k == "schema_failures":
            assert je[k] == pe[k] + len(dropped)
        else:
            assert _same(pe[k], je[k]), k
    return je


def line_of_row(jsonl) -> dict[int, int]:
    """Dataset row number -> JSONL line of the trace, by the plain reader (row 0, the header, is line 1)."""
    reader = TraceReader(jsonl)
    lines = [reader.lines[t.key] for t in reader]
    return {0: 1, **{i + 1: line for i, line in enumerate(lines)}}


# ---- the tests -------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("config", ["hybrid_rerank", "oracle"])
def test_demo_traces_converted_score_exactly_as_the_jsonl(bundled, golden_dir, config, tmp_path, capsys):
    corpus, golden = bundled
    pipe = Pipeline.from_config(demo_config_dir() / f"{config}.yaml", corpus)
    header, traces = pipe.run(golden.queries, trials=2, progress=False, dataset_version=golden.dataset_version)
    jsonl = write_traces(tmp_path / "t.jsonl", header, traces)
    code, _, err = cli(capsys, "convert", jsonl, tmp_path / "ds", "--rows-per-file", 50, "--row-group-size", 16)
    assert code == 0, err
    assert len(list((tmp_path / "ds").glob("*.parquet"))) == math.ceil(len(traces) / 50)
    assert assert_dataset_holds(tmp_path / "ds", jsonl)
    info = assert_score_equal(capsys, golden_dir, jsonl, tmp_path / "ds", tmp_path, line_of_row(jsonl))
    assert info["schema_failures"] == 0
    # the header travels in every file
    for f in (tmp_path / "ds").glob("*.parquet"):
        meta = pq.read_schema(f).metadata
        assert RunHeader.model_validate_json(meta[HEADER_KEY]) == header


def _valid_records(corpus, golden, seed, n=240):
    """Valid trace records (no schema failure, no duplicate) with branches in varying order and empty
    ones, reranked absent / empty / given, packed with tokens, citations, durations and odd meta; many
    units still fail the corpus checks, which are scoring's, not the schema's."""
    rng = random.Random(seed)
    keys = [(q, t) for t in (0, 1, 2) for q in golden.query_ids]
    rng.shuffle(keys)
    out = []
    for i in range(n):
        qid, trial = ("not-a-query", i) if rng.random() < 0.03 else keys[i]
        rec = _record_line(rng, corpus, golden, qid, trial, 3 * i // n)
        br = rec.get("branches")
        if br is not None:
            if rng.random() < 0.3:
                br["sparse"] = []
            if rng.random() < 0.4:
                rec["branches"] = dict(reversed(list(br.items())))
        if rng.random() < 0.15:
            rec["reranked"] = []
        if rng.random() < 0.3:
            rec["meta"] = rng.choice([{"shard": i % 3, "tags": ["a", None]}, {"ü": {"deep": [1.5, "✓"]}},
                                      {"big": 2**62, "z": 1, "a": 2}, {"nan": float("nan")}])
        if rng.random() < 0.2:
            rec["question"] = "¿qué? \u2028 \"quoted\""
        out.append(rec)
    return out


def _jsonl(path, header, records, extra_lines=()):
    lines = [json.dumps({"type": "header", **header.model_dump(mode="json")})] if header else []
    lines += [json.dumps({"type": "trace", **rec}) for rec in records]
    lines += list(extra_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("seed", [11, 12])
def test_random_traces_converted_score_exactly_as_the_jsonl(bundled, golden_dir, seed, tmp_path, capsys):
    corpus, golden = bundled
    header = RunHeader(run_name="rand", config={"reranker": {"final_k": 5}}, corpus_digest=corpus.digest,
                       dataset_version=golden.dataset_version)
    jsonl = _jsonl(tmp_path / "r.jsonl", header, _valid_records(corpus, golden, seed))
    s = convert_jsonl_to_parquet(jsonl, tmp_path / "r.parquet", row_group_size=37, batch_size=29)
    assert s.bad_lines == 0 and s.traces == 240 and s.files == [tmp_path / "r.parquet"]
    got = assert_dataset_holds(tmp_path / "r.parquet", jsonl)
    assert any(t.reranked == [] for t in got) and any(t.reranked is None for t in got)
    assert any(list(t.branches) == ["dense", "bm25"] for t in got) and any(t.meta for t in got)
    assert pq.ParquetFile(tmp_path / "r.parquet").metadata.num_row_groups == math.ceil(240 / 37)
    info = assert_score_equal(capsys, golden_dir, jsonl, tmp_path / "r.parquet", tmp_path, line_of_row(jsonl),
                              batch_size=50)
    assert info["unit_failures"] > 20 and info["unknown_queries"] == ["not-a-query"]


def test_bad_lines_are_counted_with_their_lines_and_fail_unless_allowed(bundled, golden_dir, tmp_path, capsys):
    corpus, golden = bundled
    jsonl = _random_file(tmp_path / "b.jsonl", corpus, golden, 1)  # bad JSON, schema failures, duplicates,
    plain = TraceReader(jsonl)                                     # late headers, a non-UTF-8 line, a BOM
    list(plain)
    assert len(plain.problems) > 15
    code, out, err = cli(capsys, "convert", jsonl, tmp_path / "b.parquet", "--json")
    assert code == 1, err
    summary = json.loads(out)
    assert summary["bad_lines"] == len(plain.problems) and summary["exit_code"] == 1
    assert summary["bad_line_examples"] == [{"line": p.line, "message": p.message} for p in plain.problems[:10]]
    assert summary["traces"] == len(plain.lines) and summary["records"] == plain.n_records
    assert summary["header"] is True and summary["warnings"] == []
    assert assert_dataset_holds(tmp_path / "b.parquet", jsonl)
    # the text report names file:line for the first ten and counts the rest
    code, out, err = cli(capsys, "convert", jsonl, tmp_path / "b2.parquet")
    assert code == 1 and out.startswith(f"wrote {len(plain.lines)} traces to {tmp_path / 'b2.parquet'} (1 file, ")
    for p in plain.problems[:10]:
        assert f"{jsonl}:{p.line}: {p.message}" in err
    assert f"... and {len(plain.problems) - 10} more" in err and "--allow-bad" in err
    assert f"{len(plain.problems)} bad lines skipped" in err
    code, _, err = cli(capsys, "convert", jsonl, tmp_path / "b3.parquet", "--allow-bad")
    assert code == 0 and f"{len(plain.problems)} bad lines skipped" in err
    # scoring the dataset stores the rows and query status of scoring the file with its bad lines
    info = assert_score_equal(capsys, golden_dir, jsonl, tmp_path / "b3.parquet", tmp_path, line_of_row(jsonl),
                              dropped=plain.problems)
    assert info["schema_failures"] == len(plain.problems) and info["unit_failures"] > 10


def test_a_file_without_header_converts_with_a_warning(bundled, tmp_path, capsys):
    corpus, golden = bundled
    jsonl = _jsonl(tmp_path / "n.jsonl", None, _valid_records(corpus, golden, 3, n=20))
    code, out, err = cli(capsys, "convert", jsonl, tmp_path / "n.parquet", "--json")
    summary = json.loads(out)
    assert code == 0 and summary["bad_lines"] == 0 and summary["header"] is False
    assert summary["warnings"] == [{"line": 1, "message": "no header record on line 1; run pins are unknown"}]
    assert HEADER_KEY not in (pq.read_schema(tmp_path / "n.parquet").metadata or {})
    reader = ParquetTraceReader(tmp_path / "n.parquet")
    assert sum(len(b.traces) for b in reader) == 20 and "no run header" in reader.problems[0].message


def test_rows_per_file_splits_into_partitions_holding_every_trace_once(bundled, tmp_path, capsys):
    corpus, golden = bundled
    header = RunHeader(run_name="split", dataset_version=golden.dataset_version)
    records = _valid_records(corpus, golden, 5, n=230)
    jsonl = _jsonl(tmp_path / "s.jsonl", header, records)
    out = tmp_path / "ds"
    code, stdout, err = cli(capsys, "convert", jsonl, out, "--rows-per-file", 100, "--row-group-size", 40,
                            "--json")
    assert code == 0, err
    summary = json.loads(stdout)
    files = [out / f"part-{i:05d}.parquet" for i in range(3)]
    assert sorted(out.iterdir()) == files and summary["files"] == [str(f) for f in files]
    assert summary["n_files"] == 3 and summary["traces"] == 230 and summary["bad_lines"] == 0
    assert summary["bytes_written"] == sum(f.stat().st_size for f in files)
    assert isinstance(summary["seconds"], float) and summary["seconds"] >= 0
    assert [pq.ParquetFile(f).metadata.num_rows for f in files] == [100, 100, 30]
    assert [[pq.ParquetFile(f).metadata.row_group(g).num_rows for g in range(pq.ParquetFile(f).num_row_groups)]
            for f in files] == [[40, 40, 20], [40, 40, 20], [30]]
    got = assert_dataset_holds(out, jsonl)
    assert [t.key for t in got] == [(r["query_id"], r.get("trial", 0)) for r in records]
    assert len({t.key for t in got}) == 230
    # each file is a partition with the run header; together they are the run, rows numbered across files
    whole = ParquetTraceReader(out)
    assert whole.header == header and whole.files == files
    for i in range(3):
        part = ParquetTraceReader(out, only=i)
        lines = [ln for b in part for ln in b.lines]
        assert lines == list(range(100 * i + 1, min(100 * (i + 1), 230) + 1))
        assert pq.read_schema(files[i]).metadata[HEADER_KEY] == pq.read_schema(files[0]).metadata[HEADER_KEY]
    assert TRACE_SCHEMA.equals(pq.read_schema(files[0]), check_metadata=False)


def test_an_existing_out_is_refused_unless_force(bundled, tmp_path, capsys):
    corpus, golden = bundled
    jsonl = _jsonl(tmp_path / "f.jsonl", RunHeader(run_name="f"), _valid_records(corpus, golden, 8, n=30))
    (tmp_path / "old.parquet").write_bytes(b"old")
    (tmp_path / "olddir").mkdir()
    (tmp_path / "olddir" / "part-00000.parquet").write_bytes(b"old")
    (tmp_path / "olddir" / "part-00007.parquet").write_bytes(b"old")
    for target in ("old.parquet", "olddir"):
        code, out, err = cli(capsys, "convert", jsonl, tmp_path / target)
        assert code == 2 and err.startswith("error: ") and "already exists; pass --force" in err
    assert (tmp_path / "old.parquet").read_bytes() == b"old"
    assert sorted(p.name for p in (tmp_path / "olddir").iterdir()) == ["part-00000.parquet", "part-00007.parquet"]
    for target in ("old.parquet", "olddir"):
        code, _, err = cli(capsys, "convert", jsonl, tmp_path / target, "--force")
        assert code == 0, err
        assert_dataset_holds(tmp_path / target, jsonl)
    assert sorted(p.name for p in (tmp_path / "olddir").iterdir()) == ["part-00000.parquet"]
    # --force replaces only a dataset, and never the input or a directory holding it
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    code, _, err = cli(capsys, "convert", jsonl, tmp_path / "mine", "--force")
    assert code == 2 and "notes.txt, which is not part of a Parquet dataset" in err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    for target in (jsonl, tmp_path):
        code, _, err = cli(capsys, "convert", jsonl, target, "--force")
        assert code == 2 and "is the input file or a directory holding it" in err
    assert jsonl.is_file()
    code, _, err = cli(capsys, "convert", jsonl, tmp_path / "x.parquet", "--rows-per-file", 5)
    assert code == 2 and "--rows-per-file splits a directory dataset" in err
    code, _, err = cli(capsys, "convert", tmp_path / "missing.jsonl", tmp_path / "y.parquet")
    assert code == 2 and "trace file not found" in err and not (tmp_path / "y.parquet").exists()
    code, _, err = cli(capsys, "convert", tmp_path / "olddir", tmp_path / "y.parquet")
    assert code == 2 and "is a directory, not a trace file" in err and not (tmp_path / "y.parquet").exists()
    code, _, err = cli(capsys, "convert", tmp_path / "old.parquet", tmp_path / "y.parquet")
    assert code == 2 and "is already a Parquet trace dataset" in err and not (tmp_path / "y.parquet").exists()
    # nothing left behind by any of it
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_failed_convert_leaves_no_out(bundled, tmp_path, monkeypatch):
    corpus, golden = bundled
    jsonl = _jsonl(tmp_path / "f.jsonl", RunHeader(run_name="f"), _valid_records(corpus, golden, 9, n=100))
    real, calls = conv.batch_table, []

    def failing(batch):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(batch)

    monkeypatch.setattr(conv, "batch_table", failing)
    for out in (tmp_path / "one.parquet", tmp_path / "dir"):
        calls.clear()
        with pytest.raises(OSError, match="No space left"):
            convert_jsonl_to_parquet(jsonl, out, rows_per_file=None if out.suffix else 20, batch_size=10)
        assert len(calls) == 3 and not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.jsonl"]


_KILLED = """
import os, signal, sys
from ragassay.cli.convert import _sigterm_unwinds
from ragassay.trace.convert import convert_jsonl_to_parquet
src, out, sig = sys.argv[1], sys.argv[2], int(sys.argv[3])

def tick(done, n):
    if n >= 40:  # two files written, the third open
        os.kill(os.getpid(), sig)

with _sigterm_unwinds():
    convert_jsonl_to_parquet(src, out, rows_per_file=20, batch_size=10, force=True, progress=tick)
"""


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_a_killed_convert_leaves_no_partial_out(bundled, tmp_path, sig):
    import signal

    corpus, golden = bundled
    jsonl = _jsonl(tmp_path / "k.jsonl", RunHeader(run_name="k"), _valid_records(corpus, golden, 10, n=100))
    out = tmp_path / "ds"
    out.mkdir()
    (out / "part-00000.parquet").write_bytes(b"previous dataset")
    signum = getattr(signal, sig)
    proc = subprocess.run([sys.executable, "-c", _KILLED, str(jsonl), str(out), str(signum)],
                          capture_output=True, text=True, timeout=120)
    if sig == "SIGKILL":
        assert proc.returncode == -signum, proc.stderr
    else:
        assert proc.returncode == 128 + signum, proc.stderr
    # the previous OUT is untouched, and what was written is under a hidden name readers skip
    assert [p.name for p in out.iterdir()] == ["part-00000.parquet"]
    assert (out / "part-00000.parquet").read_bytes() == b"previous dataset"
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    if sig == "SIGTERM":
        assert leftovers == []  # unwound: the temporary output is removed
    else:
        (tmp,) = leftovers
        assert tmp.name.startswith(".ds.") and tmp.name.endswith(".converting")
        assert sorted(p.name for p in tmp.iterdir())[:2] == ["part-00000.parquet", "part-00001.parquet"]
        assert _data_files(tmp_path) == [out / "part-00000.parquet"]  # a reader of the parent skips it


def test_an_empty_file_is_refused_and_an_all_bad_one_gives_an_empty_readable_dataset(tmp_path, capsys):
    empty = tmp_path / "e.jsonl"
    empty.write_text("")
    code, out, err = cli(capsys, "convert", empty, tmp_path / "e", "--json")
    assert code == 2 and out == "" and "is empty (no trace lines)" in err
    assert not (tmp_path / "e").exists()
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"type": "header", "run_name": "b"}\nnot json\n{"type": "trace"}\n')
    code, out, _ = cli(capsys, "convert", bad, tmp_path / "b.parquet", "--json")
    summary = json.loads(out)
    assert code == 1 and summary["traces"] == 0 and summary["bad_lines"] == 2
    assert [e["line"] for e in summary["bad_line_examples"]] == [2, 3]
    assert "trace_id: Field required" in summary["bad_line_examples"][1]["message"]
    reader = ParquetTraceReader(tmp_path / "b.parquet")
    assert reader.n_rows == 0 and reader.header == RunHeader.model_validate({"run_name": "b",
                                                                             "created": reader.header.created})


def _ranks_of_rows(path) -> list[list[int | None]]:
    """Per dataset row, every unit's rank in ``Trace.unit_lists`` order, read with pyarrow only."""
    out = []
    for row in pq.read_table(path).to_pylist():
        lists = [us for _, us in row["branches"] or []] + [row[n] or [] for n in ("fused", "reranked", "packed", "cut")]
        out.append([u["rank"] for us in lists for u in us])
    return out


def test_each_units_rank_is_written_as_the_jsonl_line_has_it(tmp_path):
    rng = random.Random(5)
    lists_of = ("fused", "reranked", "packed", "cut")

    def unit(i, form):
        u = {"unit_id": f"u{i}", "doc_id": rng.choice(["d1", "d2"]), "start": i, "end": i + 3}
        if rng.random() < 0.6:
            u["rank"] = form(rng.choice([i + 1, 1, 17, 2**53]))
        return u

    lines = [json.dumps({"type": "header", "run_name": "ranks"})]
    for q in range(300):
        # most lines take the Arrow path; a quoted or float rank (which the model coerces) or an escaped key
        # sends a line down the slow paths
        kind = rng.choices(["plain", "str", "float", "escaped"], [0.85, 0.05, 0.05, 0.05])[0]
        form = {"str": str, "float": lambda r: float(r) if r < 2**20 else r}.get(kind, int)
        rec = {"trace_id": f"t{q}", "query_id": f"q{q}", "trial": 0}
        if rng.random() < 0.5:
            rec["branches"] = {b: [unit(i, form) for i in range(rng.randrange(0, 4))] for b in rng.sample("xy", 2)}
        for name in lists_of:
            if rng.random() < 0.7:
                rec[name] = [unit(i, form) for i in range(rng.randrange(0, 6))]
        line = json.dumps({"type": "trace", **rec})
        lines.append(line.replace('"trial": 0', '"tri\\u0061l": 0') if kind == "escaped" else line)
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_text("\n".join(lines) + "\n", encoding="utf-8")
    s = convert_jsonl_to_parquet(jsonl, tmp_path / "r.parquet", row_group_size=64, batch_size=50)
    assert s.bad_lines == 0 and s.traces == 300
    # oracle 1: the json module (a quoted or float rank is the integer the model makes of it)
    want = []
    for line in lines[1:]:
        rec = json.loads(line)
        lists = [*(rec.get("branches") or {}).values(), *(rec.get(n) or [] for n in lists_of)]
        want.append([int(u["rank"]) if "rank" in u else None for us in lists for u in us])
    # oracle 2: the plain pydantic reader
    _, traces, problems = read_traces(jsonl)
    assert problems == []
    assert want == [[u.rank for _, us in t.unit_lists() for u in us] for t in traces]
    assert _ranks_of_rows(tmp_path / "r.parquet") == want
    flat = [r for rs in want for r in rs]
    assert None in flat and 2**53 in flat and 17 in flat and len(flat) > 1000
    assert sum('"rank": "' in ln for ln in lines) > 3 and sum('"rank": 17.0' in ln for ln in lines) > 3
    assert sum("tri\\u0061l" in ln for ln in lines) > 3
    # and the dataset reads back with the same ranks (NaN where absent), unit for unit
    back = [r for b in ParquetTraceReader(tmp_path / "r.parquet", batch_size=40) for r in b.units.rank.tolist()]
    assert np.array_equal(np.asarray(back), np.asarray([math.nan if r is None else r for r in flat]),
                          equal_nan=True)
