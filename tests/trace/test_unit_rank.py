"""Each unit's ``rank`` is carried in :class:`UnitColumns` beside its unit, by every reader and every operation
that subsets or joins unit columns; the plain pydantic reader (``TraceReader``) is the oracle."""

from __future__ import annotations

import json
import math
import random

import numpy as np

from ragassay.analysis.stream import KnownBatch
from ragassay.trace._arrow_batch import concat_parts, read_lines, select
from ragassay.trace.io import TraceBatchReader, TraceReader
from ragassay.trace.parquet import ParquetTraceReader, write_parquet_traces
from ragassay.trace.schema import RunHeader, UnitColumns

LISTS = ("fused", "reranked", "packed", "cut")


def _unit(rng: random.Random, i: int, form=int) -> dict:
    u = {"unit_id": f"u{i}", "doc_id": rng.choice(["d1", "d2"]), "start": i, "end": i + 2}
    if rng.random() < 0.6:
        u["rank"] = form(rng.choice([i + 1, 3, 2**53]))
    return u


def _record(rng: random.Random, q: int, form=int) -> dict:
    rec = {"type": "trace", "trace_id": f"t{q}", "query_id": f"q{q % 40}", "trial": q // 40}
    if rng.random() < 0.5:
        rec["branches"] = {b: [_unit(rng, i, form) for i in range(rng.randrange(0, 4))] for b in rng.sample("xyz", 2)}
    for name in LISTS:
        if rng.random() < 0.7:
            rec[name] = [_unit(rng, i, form) for i in range(rng.randrange(0, 5))]
    return rec


def _file(tmp_path, seed: int, n: int = 200):
    """Trace lines with ranks present and absent, plus what sends lines down the other paths: a quoted rank
    (coerced by the model), an escaped key, a duplicate (query, trial), a line that is not JSON."""
    rng = random.Random(seed)
    lines = [json.dumps({"type": "header", "run_name": "r"})]
    for q in range(n):
        kind = rng.choices(["plain", "quoted", "escaped", "dup", "bad"], [0.8, 0.05, 0.05, 0.05, 0.05])[0]
        line = json.dumps(_record(rng, q if kind != "dup" else rng.randrange(max(q, 1)), str if kind == "quoted"
                                  else int))
        lines.append({"escaped": line.replace('"trace_id"', '"trace\\u005fid"'), "bad": line[:-3]}.get(kind, line))
    path = tmp_path / f"r{seed}.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _ranks(traces) -> np.ndarray:
    return np.asarray([math.nan if u.rank is None else u.rank for t in traces for _, us in t.unit_lists()
                       for u in us], dtype=np.float64)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype == np.float64 and np.array_equal(a, b, equal_nan=True)


def test_the_batch_reader_keeps_each_units_rank_beside_it(tmp_path):
    for seed in range(3):
        path = _file(tmp_path, seed)
        plain = TraceReader(path)
        traces = list(plain)
        assert any("duplicate" in p.message for p in plain.problems)
        assert any("not valid JSON" in p.message for p in plain.problems)
        reader = TraceBatchReader(path, batch_size=37)
        batches = list(reader)
        assert reader.problems == plain.problems
        got = np.concatenate([b.units.rank for b in batches])
        assert _same(got, _ranks(traces)) and _same(got, UnitColumns.from_traces(traces).rank)
        assert np.isnan(got).any() and (got == 2**53).any() and (got == 3).any()
        # aligned with its unit, not merely in the same multiset
        ids = [x for b in batches for x in b.units.unit_id]
        assert ids == [u.unit_id for t in traces for _, us in t.unit_lists() for u in us]
        for b in batches:
            assert _same(reader.replay(b.span).units.rank, b.units.rank)


def test_known_batch_of_keeps_rank_aligned_with_the_kept_units(tmp_path):
    path = _file(tmp_path, 7)
    plain = {t.key: t for t in TraceReader(path)}
    golden = {f"q{i}" for i in range(0, 40, 3)}
    n_kept = 0
    for b in TraceBatchReader(path, batch_size=30):
        kb = KnownBatch.of(b, golden)
        want = [plain[m.key] for m in b.traces if m.query_id in golden]
        assert [m.key for m in kb.traces] == [t.key for t in want]
        assert _same(kb.units.rank, _ranks(want))
        assert list(kb.units.unit_id) == [u.unit_id for t in want for _, us in t.unit_lists() for u in us]
        n_kept += len(want)
        # columns whose producer recorded no ranks stay without them
        b.units.rank = None
        assert KnownBatch.of(b, golden).units.rank is None
    assert 0 < n_kept < len(plain)
    empty = KnownBatch.empty().units
    assert len(empty.rank) == 0 and empty.rank.dtype == np.float64


def test_concat_and_select_move_rank_with_its_units():
    rng = random.Random(3)
    recs = [_record(rng, q) for q in range(30)]
    lines = [(i + 1, (json.dumps(r) + "\n").encode()) for i, r in enumerate(recs)]
    a, rest_a = read_lines(lines[:15])
    b, rest_b = read_lines(lines[15:])
    assert rest_a == rest_b == [] and len(a.units.start) and len(b.units.start)
    want_a, want_b = a.units.rank.copy(), b.units.rank.copy()
    both = concat_parts([a, b])
    assert _same(both.units.rank, np.concatenate([want_a, want_b]))
    # a part without ranks joins as all-absent; two without stay without
    a.units.rank = None
    assert _same(concat_parts([a, b]).units.rank, np.concatenate([np.full(len(want_a), math.nan), want_b]))
    b.units.rank = None
    assert concat_parts([a, b]).units.rank is None
    # select: traces in another order (some dropped); each unit's rank follows it
    idx = np.asarray([20, 3, 17, 0, 29, 8], dtype=np.int64)
    part = select(both, idx)
    kept = [recs[i] for i in idx]
    want = [u.get("rank", math.nan) for r in kept
            for us in [*(r.get("branches") or {}).values(), *(r.get(n) or [] for n in LISTS)] for u in us]
    assert _same(part.units.rank, np.asarray(want, dtype=np.float64))
    assert list(part.units.unit_id) == [u["unit_id"] for r in kept
                                        for us in [*(r.get("branches") or {}).values(), *(r.get(n) or [] for n in LISTS)]
                                        for u in us]


def test_a_parquet_dataset_reads_back_each_units_rank(tmp_path):
    path = _file(tmp_path, 11)
    traces = list(TraceReader(path))
    dataset = write_parquet_traces(tmp_path / "r.parquet", RunHeader(run_name="r"), traces, row_group_size=25)
    reader = ParquetTraceReader(dataset, batch_size=33)
    batches = list(reader)
    assert reader.problems == [] and sum(len(b.traces) for b in batches) == len(traces)
    got = np.concatenate([b.units.rank for b in batches])
    assert _same(got, _ranks(traces)) and np.isnan(got).any() and (got == 2**53).any()
    assert _same(reader.replay(batches[1].span).units.rank, batches[1].units.rank)
