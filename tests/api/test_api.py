"""ragassay.evaluate and Run: the same numbers as the CLI, every kind of system, notebook views, errors."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ragassay
from ragassay.cli.app import main as cli_main
from ragassay.corpus import bundled_corpus_dir, load_corpus
from ragassay.errors import InputError
from ragassay.golden import build_golden, bundled_golden_source
from ragassay.store import Store

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(bundled_corpus_dir())


@pytest.fixture(scope="module")
def golden(corpus):
    return build_golden(bundled_golden_source(), corpus)


def _evidence_system(golden, corpus, *, drop_every: int = 0):
    """A system returning the gold documents (whole) first, then two others; every drop_every-th query
    gets only the others, so recall is known exactly."""
    others = sorted(corpus.docs)

    def fn(question: str) -> dict:
        q = next(q for q in golden.queries if q.question == question)
        gold = list(dict.fromkeys(e.doc_id for e in q.evidence))
        if drop_every and golden.queries.index(q) % drop_every == 0:
            gold = []
        docs = gold + [d for d in others if d not in {e.doc_id for e in q.evidence}][:2]
        units = [{"unit_id": d, "doc_id": d, "start": 0, "end": len(corpus.docs[d].text), "score": 10.0 - i}
                 for i, d in enumerate(docs)]
        return {"fused": units, "packed": units, "answer": "see " + docs[0], "outcome": "answered"}

    return fn


def _trace_file(path: Path, golden, corpus, *, drop_every: int) -> Path:
    """The traces of ``_evidence_system`` written as a trace JSONL pinned to this golden set and corpus."""
    from ragassay.trace import TraceWriter
    from ragassay.trace.adapters import traces_from_callable

    header, traces, _ = traces_from_callable(_evidence_system(golden, corpus, drop_every=drop_every),
                                             golden.queries, progress=False, run_name="gold")
    with TraceWriter(path, header.model_copy(update={"dataset_version": golden.dataset_version,
                                                     "corpus_digest": corpus.digest})) as w:
        w.write_all(traces)
    return path


def _mean(run, metric: str) -> float:
    return next(m["mean"] for m in run.summary()["metrics"] if m["metric"] == metric)


def test_callable_run_scores_like_ragassay_score_on_the_same_traces(tmp_path, corpus, golden, capsys):
    db = tmp_path / "r.duckdb"
    run = ragassay.evaluate(_evidence_system(golden, corpus, drop_every=4), golden=golden, corpus=corpus,
                            store=db, name="gold")
    # recall@fusion_depth by hand: 1 where the gold docs were returned, 0 where dropped, undefined if negative
    want = [0.0 if i % 4 == 0 else 1.0 for i, q in enumerate(golden.queries) if q.relevant(2)]
    assert _mean(run, "recall@fusion_depth") == pytest.approx(np.mean(want))
    assert run.metric("R@fusion_depth") == pytest.approx(np.mean(want))

    # the CLI path: the same traces through `ragassay score` give the same rows
    path = _trace_file(tmp_path / "gold.jsonl", golden, corpus, drop_every=4)
    golden_dir = tmp_path / "g"
    build_golden(bundled_golden_source(), corpus, golden_dir)
    with pytest.raises(SystemExit) as e:
        cli_main(["score", str(path), "--golden", str(golden_dir), "--corpus", str(bundled_corpus_dir()),
                  "--store", str(tmp_path / "cli.duckdb"), "--name", "cli", "--json"])
    assert e.value.code in (0, None)
    capsys.readouterr()
    with Store.open(tmp_path / "cli.duckdb", read_only=True) as st:
        cli_rows = st.results("cli").to_pandas()
    api_rows = run.to_pandas()
    cols = ["query_id", "trial", "metric", "value"]
    a = api_rows[cols].sort_values(cols[:3]).reset_index(drop=True)
    b = cli_rows[cols].sort_values(cols[:3]).reset_index(drop=True)
    assert a[cols[:3]].equals(b[cols[:3]])
    np.testing.assert_array_equal(a["value"].to_numpy(float), b["value"].to_numpy(float))


def test_async_callable_trials_and_arrow_views(tmp_path, corpus, golden):
    sync_fn = _evidence_system(golden, corpus)

    async def fn(question: str) -> dict:
        await asyncio.sleep(0)
        return sync_fn(question)

    run = ragassay.evaluate(fn, golden=golden, corpus=corpus, store=tmp_path / "r.duckdb", trials=2)
    table = run.to_arrow()
    assert sorted(set(table.column("trial").to_pylist())) == [0, 1]
    assert run.record.trials == 2 and _mean(run, "recall@fusion_depth") == 1.0
    df = run.to_pandas()
    assert len(df) == table.num_rows
    # the summary's mean is the mean of the defined rows of the table
    vals = df.loc[df.metric == "ndcg@final_k", "value"].dropna()
    assert _mean(run, "ndcg@final_k") == pytest.approx(vals.mean())


def test_trec_run_file_and_ragas_rows(tmp_path, corpus, golden):
    answerable = [q for q in golden.queries if q.relevant(2)][:20]
    lines = []
    for q in answerable:
        gold = list(dict.fromkeys(e.doc_id for e in q.relevant(2)))
        lines += [f"{q.query_id} Q0 {d} {r + 1} {10 - r} sys" for r, d in enumerate(gold)]
    run_file = tmp_path / "sys.run"
    run_file.write_text("\n".join(lines) + "\n")
    run = ragassay.evaluate(run_file, golden=golden, corpus=corpus, store=tmp_path / "r.duckdb")
    recall = run.to_pandas().query("metric == 'recall@fusion_depth'").set_index("query_id")["value"]
    assert (recall[[q.query_id for q in answerable]] == 1.0).all()

    rows = [{"query_id": q.query_id, "question": q.question, "contexts": [q.relevant(2)[0].quote],
             "answer": q.reference_answer or "x"} for q in answerable[:5]]
    ragas = ragassay.evaluate(rows, golden=golden, corpus=corpus, store=tmp_path / "r.duckdb", name="ragas")
    rec = ragas.to_pandas().query("metric == 'recall@fusion_depth'").set_index("query_id")["value"]
    assert (rec[[r["query_id"] for r in rows]] > 0).all()  # each placed context overlaps its evidence
    assert (rec.drop([r["query_id"] for r in rows]).dropna() == 0).all()  # queries without a row: nothing found


def test_compare_gate_markdown_and_notebook_views(tmp_path, corpus, golden):
    db = tmp_path / "r.duckdb"
    good = ragassay.evaluate(_evidence_system(golden, corpus), golden=golden, corpus=corpus, store=db,
                             name="good")
    bad = ragassay.evaluate(_evidence_system(golden, corpus, drop_every=2), golden=golden, corpus=corpus,
                            store=db, name="<b>bad</b>")
    comp = good.compare(bad, metrics=["recall@fusion_depth"], n_resamples=500)
    row = comp.overall("R@fusion_depth")
    assert row.verdict == "regressed" and row.delta < 0
    assert comp.claims and "recall@fusion_depth" in comp.claims[0]
    gate = good.gate(bad, {"n_resamples": 500, "metrics": {"recall@fusion_depth": {"min_effect": 0.05}}})
    assert gate.verdict == "FAIL" and gate.exit_code == 1
    assert good.gate(good, {"n_resamples": 500}).verdict != "FAIL"

    md = comp.to_markdown()
    assert "| recall@fusion\\_depth | all |" in md and "🔴 regressed" in md
    assert "<b>" not in md and "\\<b\\>bad\\<\\/b\\>" not in md and "\\<b\\>bad\\</b\\>" in md
    page = comp._repr_html_() + bad._repr_html_()
    assert "<b>bad</b>" not in page and "&lt;b&gt;bad&lt;/b&gt;" in page
    assert "recall@fusion_depth" in bad._repr_html_()
    again = ragassay.load_run("<b>bad</b>", store=db)
    assert again.run_id == bad.run_id and math.isclose(again.metric("recall@fusion_depth"),
                                                        bad.metric("recall@fusion_depth"))


def test_report_writes_the_html_page(tmp_path, corpus, golden):
    db = tmp_path / "r.duckdb"
    a = ragassay.evaluate(_evidence_system(golden, corpus), golden=golden, corpus=corpus, store=db, name="a")
    b = ragassay.evaluate(_evidence_system(golden, corpus, drop_every=3), golden=golden, corpus=corpus,
                          store=db, name="b")
    page = a.report(tmp_path / "report", b, golden=golden, corpus=corpus, n_resamples=200)
    assert page.name == "index.html" and page.is_file()
    assert b.run_id in page.read_text(encoding="utf-8")


def test_errors_name_the_problem(tmp_path, corpus, golden, monkeypatch):
    with pytest.raises(InputError, match="trials=0"):
        ragassay.evaluate(lambda q: "x", golden=golden, corpus=corpus, store=tmp_path / "r.duckdb", trials=0)
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_text("some other text\n")
    with pytest.raises(InputError, match="built against corpus"):
        ragassay.evaluate(lambda q: "x", golden=golden, corpus=other, store=tmp_path / "r.duckdb")
    with pytest.raises(InputError, match="file not found"):
        ragassay.evaluate(tmp_path / "missing.jsonl", golden=golden, corpus=corpus, store=tmp_path / "r.duckdb")
    run = ragassay.evaluate(lambda q: "x", golden=golden, corpus=corpus, store=tmp_path / "r.duckdb")
    monkeypatch.setitem(sys.modules, "polars", None)  # as if polars were not installed
    with pytest.raises(InputError, match="pip install polars"):
        run.to_polars()


def test_import_ragassay_stays_light():
    code = ("import sys, ragassay; assert ragassay.__version__; "
            "print(sorted(m for m in ('numpy', 'duckdb', 'pyarrow', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.replace("'", '"')) == []


@pytest.mark.slow  # two runs of the whole bundled set, a 10,000-resample comparison and a gate: about 8 s
def test_readme_quickstart_runs(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("recall@fusion_depth went from") and "ndcg@final_k went from" in lines[1]
    assert lines[-1] == "gate: FAIL"  # top-1 instead of top-5 loses recall credibly
    assert (tmp_path / "quickstart.duckdb").is_file()


def test_a_trace_file_is_read_while_the_inputs_load_and_scores_as_without(tmp_path, corpus, golden, monkeypatch):
    """evaluate(trace JSONL) starts reading the file before the corpus and golden set load (as `ragassay
    score` does) and stores exactly the rows scoring without the read-ahead stores."""
    from ragassay import api
    from ragassay.analysis import stream
    from ragassay.analysis.runner import score_traces_into_store

    path = _trace_file(tmp_path / "gold.jsonl", golden, corpus, drop_every=3)
    events: list[str] = []
    real_ahead, real_golden = stream.TraceReadAhead.__init__, api._golden

    def ahead_init(self, *a, **k):
        events.append("read-ahead")
        real_ahead(self, *a, **k)

    def golden_load(*a, **k):
        events.append("golden")
        return real_golden(*a, **k)

    monkeypatch.setattr(stream.TraceReadAhead, "__init__", ahead_init)
    monkeypatch.setattr(api, "_golden", golden_load)
    run = ragassay.evaluate(path, golden=golden, corpus=corpus, store=tmp_path / "api.duckdb", name="api")
    assert events == ["read-ahead", "golden"]
    with Store.open(tmp_path / "plain.duckdb") as st:
        plain_id, _ = score_traces_into_store(st, path, corpus, golden, name="plain")
        plain = st.results(plain_id).to_pandas()
    got = run.to_pandas()
    cols = ["query_id", "trial", "metric", "value"]
    a = got[cols].sort_values(cols[:3]).reset_index(drop=True)
    b = plain[cols].sort_values(cols[:3]).reset_index(drop=True)
    assert len(a) > 100 and a[cols[:3]].equals(b[cols[:3]])
    np.testing.assert_array_equal(a["value"].to_numpy(float), b["value"].to_numpy(float))
