"""What makes the report scale without changing a number: the shared pivot equals the store's own, the
decomposition's shared draw equals the separate bootstraps, compressed page data decodes to the same JSON,
the comparisons' capped resamples are stated on the page, and the trace reader keeps its semantics on the
fast path."""

from __future__ import annotations

import base64
import json
import re
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from report_fixtures import make_data

from ragassay.analysis import decomposition as dec
from ragassay.analysis.report_data import (
    COMPARE_DRAW_BUDGET,
    MIN_COMPARE_RESAMPLES,
    ReadCache,
    comparison_resamples,
    read_report_traces,
)
from ragassay.cli.app import main
from ragassay.errors import InputError
from ragassay.report import html as html_module
from ragassay.report import render_report
from ragassay.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from report_scale import METRICS, build_inputs  # noqa: E402


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return build_inputs(tmp_path_factory.mktemp("scale"), 90)


def test_shared_pivot_slices_equal_the_stores_own_results_wide(inputs):
    with Store.open(inputs["store"], read_only=True) as st:
        cached = ReadCache(st)
        for subset in (["answer_f1"], ["recall@final_k", "answer_f1", "ndcg@final_k"], list(reversed(METRICS))):
            got, want = cached.results_wide("candidate", subset), st.results_wide("candidate", subset)
            assert list(got.query_ids) == list(want.query_ids) and list(got.strata) == list(want.strata)
            np.testing.assert_array_equal(got.trials, want.trials)
            np.testing.assert_array_equal(got.values, want.values)  # NaN where undefined, in the same cells
        with pytest.raises(InputError, match="no rows for metric"):
            cached.results_wide("candidate", ["answer_f1", "no_such_metric"])


def test_read_only_store_memo_returns_the_same_run_and_a_private_metric_list(inputs):
    with Store.open(inputs["store"], read_only=True) as st:
        rec = st.get_run("baseline")
        assert st.get_run(rec.run_id) == rec and st.get_run("baseline") is rec
        names = st.metrics(rec.run_id)
        names.append("mutated by a caller")
        assert st.metrics(rec.run_id) == sorted(METRICS)


def test_one_draw_for_both_runs_and_the_change_equals_three_separate_bootstraps():
    rng = np.random.default_rng(11)
    n = 9_000  # enough units that the draws come in several chunks
    qids = np.asarray([f"q{i % 3_000}" for i in range(n)], dtype=object)  # three trials a query
    ya, ha, yb, hb = ((rng.random(n) < p).astype(float) for p in (0.5, 0.7, 0.6, 0.8))
    ya[rng.random(n) < 0.05] = np.nan
    kw = {"n_resamples": 300, "confidence": 0.9, "seed": 4}
    a, b, change = dec._paired_split(ya, ha, yb, hb, qids, **kw)
    ok = ~(np.isnan(ya) | np.isnan(ha) | np.isnan(yb) | np.isnan(hb))
    assert a == dec.decompose(ya[ok], ha[ok], qids[ok], **kw)
    assert b == dec.decompose(yb[ok], hb[ok], qids[ok], **kw)
    assert change == dec.split_change(ya, ha, yb, hb, qids, **kw)
    assert change["n_excluded"] == int((~ok).sum()) > 0


def test_decomposition_without_stage_columns_keeps_the_decomposition(inputs):
    with Store.open(inputs["store"], read_only=True) as st:
        full = dec.decomposition_of_run(st, "baseline", by_stratum=False, n_resamples=200)
        lean = dec.decomposition_of_run(st, "baseline", by_stratum=False, n_resamples=200, stages=False)
    assert "stages" in full["rows"][0] and "stages" not in lean["rows"][0]
    assert {k: lean["rows"][0][k] for k in ("A", "h", "c1", "c0")} == \
        {k: full["rows"][0][k] for k in ("A", "h", "c1", "c0")}


def test_comparison_resamples_shrink_with_the_set_but_never_below_the_floor():
    assert comparison_resamples(10_000, 10_000) == 10_000
    assert comparison_resamples(10_000, 100_000) == COMPARE_DRAW_BUDGET // 100_000 == 2_000
    assert comparison_resamples(10_000, 1_000_000) == MIN_COMPARE_RESAMPLES
    assert comparison_resamples(500, 1_000_000) == 500  # never more than asked


def test_capped_comparison_resamples_are_stated_on_the_page(inputs, tmp_path, monkeypatch, capsys):
    import ragassay.analysis.report_data as rd

    # at 90 queries nothing is capped; a budget this small caps it as 100,000 queries would
    monkeypatch.setattr(rd, "COMPARE_DRAW_BUDGET", 90 * 300)
    monkeypatch.setattr(rd, "MIN_COMPARE_RESAMPLES", 200)
    out = tmp_path / "rep"
    with pytest.raises(SystemExit) as done:
        main(["report", *inputs["runs"], "-o", str(out), "--store", str(inputs["store"]), "--corpus",
              str(inputs["corpus"]), "--golden", str(inputs["golden"]), "--resamples", "1000",
              "--no-analyses", "--json"])
    assert done.value.code in (0, None)
    capsys.readouterr()
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "Intervals and p-values from 300 resamples, capped from 1,000 at 90 queries" in page
    assert "no p-value is below 1/301" in page


def test_compressed_query_data_decodes_to_the_same_json(tmp_path, monkeypatch):
    data = make_data(hostile=True)
    plain = render_report(data, tmp_path / "plain").read_text(encoding="utf-8")
    monkeypatch.setattr(html_module, "COMPRESS_ABOVE", -1)
    packed = render_report(data, tmp_path / "packed").read_text(encoding="utf-8")
    want = re.search(r'<script type="application/json" id="q-data">(.*?)</script>', plain, re.S).group(1)
    m = re.search(r'<script type="application/octet-stream" id="q-data" data-encoding="deflate-base64" '
                  r'data-length="(\d+)">([A-Za-z0-9+/=]*)</script>', packed)
    raw = zlib.decompress(base64.b64decode(m.group(2)), -15)
    assert int(m.group(1)) == len(raw) and raw.decode("utf-8") == want
    assert json.loads(raw)["id"] == [q["query_id"] for q in data["queries"]]


def test_trace_reader_fast_path_keeps_nan_lines_a_bom_and_interned_doc_ids(tmp_path):
    lines = [
        '\ufeff{"type":"trace","query_id":"q1","outcome":"answered","answer":"a","durations_ms":{"total":NaN},'
        '"reranked":[{"doc_id":"d","start":0,"end":5},{"doc_id":"d","start":5,"end":9}]}',
        '{"type":"trace","query_id":"q2","reranked":[{"doc_id":"d","start":true,"end":5}]}',
        '{"type":"trace","query_id":"q3","reranked":[{"doc_id":"d","start":1,"end":2,"text":7}]}',
        '{"type":"trace","query_id":"q4","fused":[{"doc_id":"d","start":1,"end":2}]}',
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    t = read_report_traces(path)
    # NaN is not JSON but Python's json reads it, as the reader did before orjson
    assert sorted(t.shown) == ["q1", "q4"] and t.ranked["q1"] == [("d", 0, 5), ("d", 5, 9)]
    assert t.problems == [(2, "reranked[0] needs integer start and end offsets"), (3, "reranked[0].text must be a string")]
    assert t.ranked["q1"][0][0] is t.ranked["q4"][0][0]  # one string object per document id
    assert len(t.durations) == 1 and np.isnan(t.durations[0]["total"])


@pytest.mark.parametrize("durations, columnar", [
    (['{"retrieve":1,"generate":2.5}', '{}', '{"retrieve":3e2}'], True),  # no total anywhere: none kept
    (['{"retrieve":1,"total":2.5}', '{}', '{"total":7}'], True),
    (['{"total":NaN}', '{"total":1}'], True),  # Python's json reads NaN
    (['{"retrieve":1}', '{"retrieve":true}'], False),  # a bool is no number
    (['{"retrieve":1}', '{"retrieve":"3"}'], False),
    (['{"total":1}', '{"retrieve":null}'], False),
])
def test_trace_reader_durations_as_columns_equal_the_line_reader(tmp_path, durations, columnar):
    from ragassay.analysis.report_data import _read_columns, _read_lines

    path = tmp_path / "t.jsonl"
    path.write_text("".join(f'{{"type":"trace","query_id":"q{i}","durations_ms":{d}}}\n'
                            for i, d in enumerate(durations)), encoding="utf-8")
    fast, plain = _read_columns(path), _read_lines(path)
    assert (fast is not None) == columnar
    if fast is not None:
        assert fast.problems == plain.problems == [] and fast.shown == plain.shown
        assert json.dumps(fast.durations) == json.dumps(plain.durations)  # NaN == NaN as text


def test_prefetched_traces_equal_the_ones_read_in_place_and_reraise_what_a_read_raised(inputs, tmp_path):
    from types import SimpleNamespace

    from ragassay.analysis.report_data import PrefetchedTraces, load_run_traces

    with Store.open(inputs["store"], read_only=True) as st:
        recs = [st.get_run(n) for n in inputs["runs"]]
    missing = SimpleNamespace(run_id="gone", name="gone", extra={"traces_dir": str(tmp_path / "nowhere")})
    pre = PrefetchedTraces([*recs, missing])
    for r in recs:
        (got, why), (want, want_why) = pre.get(r), load_run_traces(r)
        assert why is want_why is None and got.problems == want.problems and got.durations == want.durations
        assert got.shown == want.shown and got.ranked == want.ranked and len(got.shown) == 90
    got, why = pre.get(missing)
    assert got is None and why == load_run_traces(missing)[1] and "does not exist" in why
    # a read that raises: that run and every later one raise the same error where they are collected
    broken = SimpleNamespace(run_id="broken", name="broken", extra=5)
    pre = PrefetchedTraces([broken, recs[0]])
    for r in (broken, recs[0]):
        with pytest.raises(AttributeError, match="'int' object has no attribute 'get'"):
            pre.get(r)


def test_the_null_test_finds_exactly_what_the_pattern_finds(tmp_path):
    from ragassay.analysis.report_data import _null_matters, _read_columns

    forward = re.compile(rb'"(?:trial|fused|packed)"\s*:\s*null')
    rng = np.random.default_rng(7)
    pieces = [b'"trial"', b'"fused"', b'"packed"', b'"trials"', b'null', b'nul', b':', b' ', b'\n', b'\t', b'\x0b',
              b'\x0c', b'\r', b'"', b'0', b'\\"', b'x"trial"', b'"packed', b'll', b'nu']
    found = 0
    for _ in range(40_000):
        data = b"".join(pieces[i] for i in rng.integers(0, len(pieces), rng.integers(1, 9)))
        want = forward.search(data) is not None
        assert _null_matters(data) == want, data
        found += want
    assert found > 100  # the random blocks hit the pattern often enough to test both answers
    # and in the reader: an explicit null trial (even split over lines) sends the file line by line
    path = tmp_path / "t.jsonl"
    for text, columnar in (('{"type":"trace","query_id":"q1","trial":0}', True),
                           ('{"type":"trace","query_id":"q1","trial" :\t null}', False),
                           ('{"type":"trace","query_id":"q1","answer":null,"outcome":"abstained"}', True)):
        path.write_text(text + "\n", encoding="utf-8")
        assert (_read_columns(path) is not None) == columnar, text


def test_queries_parquet_from_the_pages_rows_equals_the_sorted_store_export(inputs, tmp_path, monkeypatch):
    """The Parquet file encoded from the rows the page reads equals, byte for byte, DuckDB's own sorted export
    of the same columns written batch by batch (how it was written before)."""
    import io

    import pyarrow.parquet as pq

    from ragassay.analysis import report_data as rd

    monkeypatch.setattr(rd, "PARQUET_BATCH", 100)  # several row groups per run, as at scale
    with Store.open(inputs["store"], read_only=True) as st:
        got = rd.write_queries_parquet(st, inputs["runs"], tmp_path / "q.parquet").read_bytes()
        buf, writer = io.BytesIO(), None
        for name in inputs["runs"]:
            rec = st.get_run(name)
            reader = st.connection.sql(
                "SELECT $run_id AS run_id, $run_name AS run_name, query_id, trial, metric, value, stratum, "
                "latency_ms FROM results WHERE run_id = $run_id ORDER BY query_id, trial, metric",
                params={"run_id": rec.run_id, "run_name": name}).to_arrow_reader(100)
            for batch in reader:
                writer = writer or pq.ParquetWriter(buf, batch.schema, compression="zstd")
                writer.write_batch(batch.cast(writer.schema))
        writer.close()
    table = pq.read_table(io.BytesIO(got))
    assert table.num_rows == 2 * 90 * len(METRICS) and pq.ParquetFile(io.BytesIO(got)).num_row_groups > 2
    assert table.column_names[:2] == ["run_id", "run_name"] and "judged_fraction" not in table.column_names
    assert table.equals(pq.read_table(io.BytesIO(buf.getvalue())))
    assert got == buf.getvalue()
