"""`run` scores each batch from unit columns (runner.score_batch); its rows must equal the whole-run
scorer's (score_traces) row for row, whether the columns come from the pipeline or from the traces."""

import gc
import math

import numpy as np
import pytest
import yaml

from ragassay._gc import gc_frozen
from ragassay.analysis.demo import demo_config_dir
from ragassay.analysis.runner import (
    BATCH_QUERIES,
    _ScoreContext,
    load_inputs,
    run_pipeline_into_store,
    score_batch,
)
from ragassay.analysis.scoring import Labels, ScoringOptions, _doc_lengths, _final_k, score_traces
from ragassay.pipeline import Pipeline
from ragassay.pipeline.config import parse_config
from ragassay.store import Store
from ragassay.trace import Unit
from ragassay.trace.io import read_traces
from ragassay.trace.schema import CodedStrings, UnitColumns, dense_codes

COLUMNS = ("query_id", "trial", "metric", "value", "stratum", "judged_fraction", "latency_ms", "tokens_in",
           "tokens_out", "cost", "trace_id")


@pytest.fixture(scope="module")
def inputs():
    return load_inputs(None, None)


@pytest.fixture(scope="module")
def pipes(inputs):
    corpus, _ = inputs
    out = {}
    for name in ("bm25", "hybrid_rerank", "oracle"):
        cfg = parse_config(yaml.safe_load((demo_config_dir() / f"{name}.yaml").read_text()))
        out[name] = Pipeline.from_config(cfg, corpus)
    return out


def _context(inputs, pipe, options=None):
    corpus, golden = inputs
    opt = options or ScoringOptions()
    header = pipe.header(golden.dataset_version, "t")
    return _ScoreContext(golden, header, opt, corpus, Labels(golden, opt), False, _doc_lengths(corpus),
                         _final_k(header))


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) is type(b) or (a is None and b is None)


def _assert_rows_equal(table, ref) -> None:
    got = table.to_pydict()
    assert table.num_rows == len(ref) > 0
    for col in COLUMNS:
        want = ref.columns[col]
        bad = [i for i, (x, y) in enumerate(zip(got[col], want, strict=True)) if not _same(x, y)]
        assert not bad, (col, bad[:3], [got[col][i] for i in bad[:3]], [want[i] for i in bad[:3]])


def _batches(golden, trials=(0,)):
    keys = [(q.query_id, tr) for tr in trials for q in golden.queries]
    return [keys[i:i + BATCH_QUERIES] for i in range(0, len(keys), BATCH_QUERIES)]


@pytest.mark.parametrize("name", ["bm25", "hybrid_rerank", "oracle"])
def test_pipeline_batch_scores_equal_score_traces(inputs, pipes, name):
    corpus, golden = inputs
    pipe = pipes[name]
    ctx = _context(inputs, pipe)
    for keys in _batches(golden, trials=(0, 1)):
        traces = pipe.run_batch([(golden[q], tr) for q, tr in keys])
        got = score_batch(ctx, keys, traces)
        ref = score_traces(golden, traces, ctx.header, ctx.options, keys=keys, corpus=corpus, labels=ctx.labels)
        _assert_rows_equal(got.table, ref)
        assert got.unit_check.count == ref.unit_check.count == 0


@pytest.mark.parametrize("name", ["bm25", "hybrid_rerank"])
def test_pipeline_unit_columns_equal_the_traces_units(inputs, pipes, name):
    _, golden = inputs
    traces = pipes[name].run_batch([(q, 0) for q in golden.queries[:BATCH_QUERIES]])
    made, ref = traces.units, UnitColumns.from_traces(traces)
    assert len(made.units.start) == len(ref.start) > 1000
    for f in ("keys", "fields", "unit_id", "doc_id", "text"):
        assert list(getattr(made.units, f)) == list(getattr(ref, f)), f
    for f in ("lengths", "start", "end", "score", "has_score"):
        assert np.array_equal(getattr(made.units, f), getattr(ref, f)), f
    for f in ("unit_id", "doc_id"):  # the codes carried with the pipeline's columns are the hashed ones
        col = getattr(made.units, f)
        assert isinstance(col, CodedStrings)
        codes, distinct = dense_codes(col)
        want_codes, want_distinct = dense_codes(list(col))
        assert np.array_equal(codes, want_codes) and distinct == want_distinct and len(distinct) > 10
    assert set(made.units.fields) >= {"fused", "packed"}
    if name == "bm25":
        assert "cut" in made.units.fields  # final_k 10 offers more than the budget packs
    else:
        assert {"reranked", "branches.bm25", "branches.dense"} <= set(made.units.fields)
    lists = [(i, us) for i, t in enumerate(traces) for _, us in t.unit_lists() if us]
    assert made.list_trace.tolist() == [i for i, _ in lists]
    assert made.tokens.tolist() == [float(u.tokens) for _, us in lists for u in us]


@pytest.mark.parametrize("name", ["bm25", "hybrid_rerank"])
def test_scoring_only_traces_score_as_full_traces(inputs, pipes, name):
    corpus, golden = inputs
    cfg = parse_config(yaml.safe_load((demo_config_dir() / f"{name}.yaml").read_text()))
    lean = Pipeline.from_config(cfg, corpus, scoring_only=True)
    ctx = _context(inputs, pipes[name])
    for keys in _batches(golden)[:2]:
        items = [(golden[q], tr) for q, tr in keys]
        full, thin = pipes[name].run_batch(items), lean.run_batch(items)
        full_table, thin_table = score_batch(ctx, keys, full).table, score_batch(ctx, keys, thin).table
        a, b = thin_table.to_pydict(), full_table.to_pydict()
        assert thin_table.num_rows == full_table.num_rows > 0 and list(a) == list(b)
        assert all(_same(x, y) for c in a for x, y in zip(a[c], b[c], strict=True))
        assert all(t.fused == [] and t.cut == [] and set(t.branches) == set(f.branches)
                   and all(v == [] for v in t.branches.values()) and (t.reranked is None) == (f.reranked is None)
                   and t.packed == f.packed and t.answer == f.answer for t, f in zip(thin, full, strict=True))
        assert any(f.fused for f in full)


def test_traces_with_bad_units_missing_and_failed_traces_score_as_score_traces(inputs, pipes):
    corpus, golden = inputs
    pipe = pipes["hybrid_rerank"]
    ctx = _context(inputs, pipe, ScoringOptions(relevance_threshold=1, gain="linear", cutoffs=(1, 3)))
    keys = _batches(golden)[1]
    traces = list(pipe.run_batch([(golden[q], tr) for q, tr in keys]))  # a plain list: columns read back
    t0, t1 = traces[0], traces[1]
    t0.fused[2] = Unit(unit_id="x", doc_id="no-such-doc.txt", start=0, end=5, score=1.0, rank=3)
    t0.packed[0] = t0.packed[0].model_copy(update={"end": 10**9})
    t1.reranked[0] = t1.reranked[1]  # a repeat within a list
    traces[2] = traces[2].model_copy(update={"outcome": "error", "error": "boom", "fused": [], "packed": []})
    del traces[5]  # its key is scored as a missing trace
    got = score_batch(ctx, keys, traces)
    ref = score_traces(golden, traces, ctx.header, ctx.options, keys=keys, corpus=corpus, labels=ctx.labels)
    _assert_rows_equal(got.table, ref)
    assert got.unit_check.count == ref.unit_check.count == 3
    assert got.unit_check.messages() == ref.unit_check.messages()
    assert ref.missing == [keys[5]]


def test_stored_run_equals_score_traces_of_its_trace_file(tmp_path, inputs):
    corpus, golden = inputs
    cfg = demo_config_dir() / "hybrid_rerank.yaml"
    with Store.open(tmp_path / "r.duckdb") as st:
        run_id, header = run_pipeline_into_store(st, cfg, corpus, golden, trials=2, batched=True,
                                                 traces_dir=tmp_path / "traces")
        stored = st.results(run_id).to_pydict()
        rec = st.get_run(run_id)
    _, traces, problems = read_traces(tmp_path / "traces" / f"{run_id}.jsonl")
    assert not problems
    ref = score_traces(golden, traces, header, ScoringOptions(), corpus=corpus)
    def stored_form(v):  # the store keeps NaN as NULL
        return None if isinstance(v, float) and math.isnan(v) else v

    want = sorted(zip(*([stored_form(v) for v in ref.columns[c]] for c in COLUMNS), strict=True),
                  key=lambda r: (r[0], r[1], r[2]))
    got = sorted(zip(*(stored[c] for c in COLUMNS), strict=True), key=lambda r: (r[0], r[1], r[2]))
    assert len(got) == len(want) == 2 * len(golden) * len(set(ref.columns["metric"]))
    for g, w in zip(got, want, strict=True):
        assert all(_same(a, b) for a, b in zip(g, w, strict=True)), (g, w)
    assert rec.status == "complete" and rec.extra["unit_failures"] == 0
    # without a trace file the pipeline builds no unit objects for the ranked lists: the same rows
    with Store.open(tmp_path / "lean.duckdb") as st:
        lean_id, _ = run_pipeline_into_store(st, cfg, corpus, golden, trials=2, batched=True)
        lean = st.results(lean_id).to_pydict()
    assert sorted(zip(*(lean[c] for c in COLUMNS), strict=True), key=lambda r: r[:3]) == got


def test_gc_frozen_hides_live_objects_and_restores_them():
    before = gc.get_freeze_count()
    keep = [[i] for i in range(1000)]
    with gc_frozen():
        assert gc.get_freeze_count() >= before + len(keep)
    assert gc.get_freeze_count() == 0
    assert gc.is_tracked(keep[0])
