"""A Parquet trace dataset scores exactly as the equivalent JSONL trace file: the same rows, query status,
counts and problems (row numbers in place of line numbers), on the bundled demo and on random, partly broken
traces written to one file and to a directory of files."""

from __future__ import annotations

import json
import math
import random
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.analysis.test_stream_score import _record_line

from ragassay.analysis.demo import demo_config_dir
from ragassay.analysis.runner import load_inputs, score_traces_into_store
from ragassay.errors import SchemaError
from ragassay.pipeline import Pipeline
from ragassay.store import Store
from ragassay.trace import write_traces
from ragassay.trace.parquet import HEADER_KEY, TRACE_SCHEMA, ParquetTraceReader, write_parquet_traces
from ragassay.trace.schema import RunHeader, Trace


@pytest.fixture(scope="module")
def bundled():
    return load_inputs(None, None)


def _stored(store, run_id):
    res = store.results(run_id).drop_columns(["run_id"]).to_pylist()
    status = sorted((r["query_id"], r["trial"], r["status"], r["error"])
                    for r in store.query_status(run_id).to_pylist())
    return res, status, store.get_run(run_id).extra


def _same_value(a, b):
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _where(message: str, source: str, shift: int) -> tuple[int, str]:
    """(line, message) of a stored problem line, the line moved by ``shift`` (JSONL counts its header)."""
    rest = message.removeprefix(f"{source}:")
    line, msg = rest.split(": ", 1)
    msg = re.sub(r"first at line (\d+)", lambda m: f"first at line {int(m.group(1)) + shift}", msg)
    return int(line) + shift, msg


def assert_same_scoring(jsonl, dataset, corpus, golden, tmp_path, batch_size=64):
    with Store.open(tmp_path / "j.duckdb") as st:
        jid, jinfo = score_traces_into_store(st, jsonl, corpus, golden, batch_size=batch_size)
        want = _stored(st, jid)
    with Store.open(tmp_path / "p.duckdb") as st:
        pid, pinfo = score_traces_into_store(st, dataset, corpus, golden, batch_size=batch_size)
        got = _stored(st, pid)
    assert want[0], "nothing stored"
    assert len(got[0]) == len(want[0])
    for g, w in zip(got[0], want[0], strict=True):
        assert g.keys() == w.keys() and all(_same_value(g[k], w[k]) for k in w), (g, w)
    assert got[1] == want[1]
    for k in ("schema_failures", "unit_failures", "unknown_queries", "context_tokens_mean", "warnings"):
        assert got[2][k] == want[2][k], k
    assert ([_where(p, str(dataset), 0) for p in got[2]["problems"]]
            == [_where(p, str(jsonl), -1) for p in want[2]["problems"]])
    assert ([_where(p, str(dataset), 0) for p in got[2]["unit_failure_examples"]]
            == [_where(p, str(jsonl), -1) for p in want[2]["unit_failure_examples"]])
    assert pinfo["n_traces"] == jinfo["n_traces"] and pinfo["missing"] == jinfo["missing"]
    return jinfo


@pytest.mark.slow
@pytest.mark.parametrize("config", ["hybrid_rerank", "oracle"])
def test_demo_traces_as_a_parquet_file_store_the_jsonl_rows(bundled, config, tmp_path):
    corpus, golden = bundled
    pipe = Pipeline.from_config(demo_config_dir() / f"{config}.yaml", corpus)
    header, traces = pipe.run(golden.queries, trials=2, progress=False, dataset_version=golden.dataset_version)
    jsonl = write_traces(tmp_path / "t.jsonl", header, traces)
    dataset = write_parquet_traces(tmp_path / "t.parquet", header, traces, row_group_size=100)
    info = assert_same_scoring(jsonl, dataset, corpus, golden, tmp_path)
    assert info["schema_failures"] == 0 and info["n_traces"] == 2 * len(golden)
    assert pq.ParquetFile(dataset).num_row_groups == 4


def _broken(rng, rec):
    """A record made invalid in one of the ways a typed column still allows."""
    rec = json.loads(json.dumps(rec))
    units = rec.get("fused") or [{"unit_id": "x", "doc_id": "MIT", "start": 0, "end": 1}]
    rec["fused"] = units
    kind = rng.randrange(20)
    if kind == 0:
        rec.pop("query_id")
    elif kind == 1:
        units[0]["unit_id"] = ""
    elif kind == 2:
        units[0]["rank"] = 0
    elif kind == 3:
        units[0]["tokens"] = -1
    elif kind == 4:
        units[0]["start"] = 2**60
    elif kind == 5:
        rec["outcome"], rec["error"] = "error", None
    elif kind == 6:
        rec["packed"] = [dict(units[0], tokens=3)]
        rec["packed_tokens"] = 99
    elif kind == 7:
        rec["citations"] = [{"unit_id": "u", "start": 3}]
    elif kind == 8:
        rec["outcome"] = "maybe"
    elif kind == 9:
        rec["durations_ms"] = {"total": -1.0}
    elif kind == 10:
        rec["branches"] = {"bm25": [units[0], None]}
    elif kind == 12:
        rec["cost"] = -0.5
    elif kind == 13:
        rec["trace_id"] = ""
    elif kind == 14:
        rec["tokens_in"] = -3
    elif kind == 15:
        rec["citations"] = [{"unit_id": "u", "start": 5, "end": 2}]
    elif kind == 16:
        rec["outcome"] = "answered"
        rec.pop("answer", None)
    elif kind == 17:
        rec["durations_ms"] = {"total": 3.0, "generate": -2.0}
    elif kind == 18:
        rec["outcome"], rec["error"] = "error", ""
    elif kind == 19:
        rec["citations"] = [{"unit_id": ""}]
    else:
        rec["trial"] = -1
    return rec


def random_records(corpus, golden, seed, n=300):
    rng = random.Random(seed)
    keys = [(q, t) for t in (0, 1) for q in golden.query_ids]
    rng.shuffle(keys)
    out = []
    for i in range(n):
        r = rng.random()
        qid, trial = ("not-a-query", 0) if r < 0.03 else keys[rng.randrange(i + 1)] if r < 0.08 else keys[i]
        rec = _record_line(rng, corpus, golden, qid, trial, 3 * i // n)
        if rng.random() < 0.1:
            rec["meta"] = {"shard": i % 3, "tags": ["a", None]}
        out.append(_broken(rng, rec) if rng.random() < 0.1 else rec)
    return out


def _jsonl(path, header, records):
    lines = [json.dumps({"type": "header", **header.model_dump(mode="json")})] if header else []
    lines += [json.dumps({"type": "trace", **rec}) for rec in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_random_broken_traces_in_a_directory_of_files_store_the_jsonl_rows(bundled, seed, tmp_path):
    corpus, golden = bundled
    header = RunHeader(run_name="rand", config={"reranker": {"final_k": 5}}, corpus_digest=corpus.digest,
                       dataset_version=golden.dataset_version)
    records = random_records(corpus, golden, seed)
    jsonl = _jsonl(tmp_path / "r.jsonl", header, records)
    ds = tmp_path / "ds"
    for i, start in enumerate(range(0, len(records), 70)):  # files of 70 rows, row groups of 32
        write_parquet_traces(ds / f"part-{i:03d}.parquet", header, records[start:start + 70], row_group_size=32)
    info = assert_same_scoring(jsonl, ds, corpus, golden, tmp_path, batch_size=25)
    assert info["schema_failures"] >= 20 and info["unit_failures"] > 20 and info["missing"] > 50
    assert info["unknown_queries"] == ["not-a-query"]
    assert any("duplicate trace" in p for p in info["problems"])


@pytest.mark.parametrize("seed", [3, 4])
def test_dataset_batches_give_the_jsonl_readers_facts_and_traces_without_a_model_per_valid_row(bundled, seed,
                                                                                              tmp_path, monkeypatch):
    """The record fields scoring reads (TraceFacts) come from the columns for the rows the column checks
    pass, and equal the JSONL reader's, column by column; so do the Trace objects made from them."""
    from ragassay.trace.io import TraceBatchReader
    from ragassay.trace.schema import _FACT_COLUMNS

    corpus, golden = bundled
    header = RunHeader(run_name="rand", corpus_digest=corpus.digest, dataset_version=golden.dataset_version)
    records = random_records(corpus, golden, seed)
    for i, rec in enumerate(records[:40]):  # a repeated duration key: the map keeps its last value
        if i % 4 == 0 and isinstance(rec.get("durations_ms"), dict):
            rec["durations_ms"] = {**rec["durations_ms"], "total": 7.0 + i}
    jsonl = _jsonl(tmp_path / "r.jsonl", header, records)
    ds = write_parquet_traces(tmp_path / "r.parquet", header, records, row_group_size=40)
    # the repeated key, written as map entries
    table = pq.read_table(ds)
    dur = table.column("durations_ms").to_pylist()
    dur = [None if d is None else ([("total", 1.0)] + list(d) if i < 40 and i % 4 == 0 else d)
           for i, d in enumerate(dur)]
    pq.write_table(table.set_column(table.schema.get_field_index("durations_ms"), "durations_ms",
                                    pa.array(dur, TRACE_SCHEMA.field("durations_ms").type)), ds)
    plain = TraceBatchReader(jsonl, 25)
    want = list(plain)
    validated = []
    real = Trace.model_validate
    monkeypatch.setattr(Trace, "model_validate", classmethod(lambda cls, rec: validated.append(1) or real(rec)))
    fast = ParquetTraceReader(ds, 25)
    got = list(fast)
    n_models = len(validated)
    assert ([_where(f"d:{p.line}: {p.message}", "d", 0) for p in fast.problems]
            == [_where(f"j:{p.line}: {p.message}", "j", -1) for p in plain.problems])
    assert sum(map(len, (b.facts for b in got))) == plain.n_traces > 200
    for name in _FACT_COLUMNS:
        assert ([x for b in got for x in getattr(b.facts, name)]
                == [x for b in want for x in getattr(b.facts, name)]), name
    assert n_models < plain.n_traces // 2  # the rows with meta or a problem (some twice), not every row
    assert [t for b in got for t in b.traces] == [t for b in want for t in b.traces]


def test_a_dataset_without_a_header_reports_it_and_a_sidecar_header_is_read(bundled, tmp_path):
    corpus, golden = bundled
    records = random_records(corpus, golden, 7, n=40)
    ds = tmp_path / "ds"
    write_parquet_traces(ds / "a.parquet", None, records[:20])
    write_parquet_traces(ds / "b.parquet", None, records[20:])
    reader = ParquetTraceReader(ds)
    list(reader)
    assert reader.header is None
    assert reader.problems[0].line == 0 and "no run header" in reader.problems[0].message
    header = RunHeader(run_name="side", config={"k": 1})
    (ds / "_header.json").write_text(header.model_dump_json(), encoding="utf-8")
    reader = ParquetTraceReader(ds)
    assert reader.header == header and reader.files == [ds / "a.parquet", ds / "b.parquet"]
    assert reader.n_rows == 40


def test_bad_datasets_are_refused_naming_the_file(tmp_path):
    bad = tmp_path / "x.parquet"
    pq.write_table(pa.table({"query_id": ["q"], "colour": ["red"]}), bad)
    with pytest.raises(SchemaError, match=r"x.parquet: column 'colour' is not a trace field"):
        ParquetTraceReader(bad)
    pq.write_table(pa.table({"query_id": ["q"], "fused": ["not units"]}), bad)
    with pytest.raises(SchemaError, match=r"column 'fused' is string, which does not cast"):
        ParquetTraceReader(bad)
    ds = tmp_path / "ds"
    write_parquet_traces(ds / "a.parquet", RunHeader(run_name="a"), [])
    write_parquet_traces(ds / "b.parquet", RunHeader(run_name="b"), [])
    with pytest.raises(SchemaError, match=r"b.parquet: its run header differs"):
        ParquetTraceReader(ds)
    (ds / "_nothing_here").mkdir()
    with pytest.raises(SchemaError, match="no .parquet files"):
        ParquetTraceReader(ds / "_nothing_here")


def test_the_pyarrow_recipe_of_docs_writes_a_dataset_the_reader_takes(bundled, tmp_path):
    """The recipe in docs/traces.md: rows of JSONL records, the trace schema, the header as file metadata."""
    corpus, golden = bundled
    header = RunHeader(run_name="recipe", dataset_version=golden.dataset_version)
    records = [{"trace_id": "t1", "query_id": golden.query_ids[0], "fused": [
        {"unit_id": "u1", "doc_id": corpus.doc_ids[0], "start": 0, "end": 5, "score": 1.0}],
        "branches": [("bm25", [])], "durations_ms": [("total", 3.5)], "meta": json.dumps({"shard": 1})}]
    schema = TRACE_SCHEMA.with_metadata({HEADER_KEY: header.model_dump_json()})
    pq.write_table(pa.Table.from_pylist(records, schema=schema), tmp_path / "t.parquet")
    reader = ParquetTraceReader(tmp_path / "t.parquet")
    batch = next(iter(reader))
    assert reader.header == header and reader.problems == []
    assert batch.traces[0].meta == {"shard": 1} and batch.traces[0].branches == {"bm25": []}
    assert batch.units.fields == ["fused"] and batch.units.unit_id == ["u1"] and batch.lines == [1]


def test_cli_score_takes_a_dataset_directory_as_one_run(bundled, tmp_path, capsys):
    from ragassay.cli.app import main
    from ragassay.golden import build_golden, bundled_golden_source

    corpus, golden = bundled
    gdir = tmp_path / "golden"
    build_golden(bundled_golden_source(), corpus, gdir)
    header = RunHeader(run_name="cli", corpus_digest=corpus.digest, dataset_version=golden.dataset_version)
    records = random_records(corpus, golden, 3, n=60)
    write_parquet_traces(tmp_path / "ds" / "a.parquet", header, records[:30])
    write_parquet_traces(tmp_path / "ds" / "b.parquet", header, records[30:])
    with pytest.raises(SystemExit) as e:
        main(["score", str(tmp_path / "ds"), "--golden", str(gdir), "--store", str(tmp_path / "s.duckdb"),
              "--json"])
    assert (e.value.code or 0) == 0
    out = json.loads(capsys.readouterr().out)
    with Store.open(tmp_path / "j.duckdb") as st:
        _, want = score_traces_into_store(st, _jsonl(tmp_path / "r.jsonl", header, records), corpus, golden)
    assert out["run"]["name"] == "cli" and out["import"]["n_traces"] == want["n_traces"] > 40
    assert out["import"]["schema_failures"] == want["schema_failures"]
    with pytest.raises(SystemExit) as e:
        main(["score", str(tmp_path / "ds"), str(tmp_path / "r.jsonl"), "--golden", str(gdir), "--store",
              str(tmp_path / "s.duckdb")])
    assert e.value.code == 2 and "is one run" in capsys.readouterr().err
