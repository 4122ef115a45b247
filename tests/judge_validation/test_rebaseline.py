"""`ragassay judge rebaseline OLD NEW --runs ...`: the offset per metric with a paired CI, recomputed
independently from the two judges' own metric values; the archived run is not modified."""

import json

import numpy as np
import pytest
from tests.judges.test_cli_judge import QUERIES, inputs  # noqa: F401  (module fixture reused)

from ragassay.cli.app import main as _main
from ragassay.golden import bundled_golden_source
from ragassay.judges.config import build_judge, load_judge_config
from ragassay.judges.local import local_judge_items
from ragassay.judges.metrics import items_from
from ragassay.store import Store
from ragassay.trace.io import read_traces, write_traces
from ragassay.trace.schema import Citation, RunHeader, Trace, Unit


def write_run_traces(path, inputs):  # noqa: F811
    """Answers that hold two thirds of their evidence's words: supported at a low lexical threshold only."""
    corpus, golden = inputs
    traces = []
    for qid in QUERIES:
        q = golden[qid]
        if not q.answerable:
            traces.append(Trace(trace_id=f"t-{qid}", query_id=qid, question=q.question, outcome="abstained"))
            continue
        ev = q.evidence[0]
        unit = Unit(unit_id=f"{ev.doc_id}#0", doc_id=ev.doc_id, start=ev.start, end=ev.end, rank=1,
                    text=corpus[ev.doc_id].text[ev.start:ev.end])
        words = ev.quote.rstrip(".").split()
        answer = " ".join("zebra" if k % 3 == 2 else w for k, w in enumerate(words)) + "."
        traces.append(Trace(trace_id=f"t-{qid}", query_id=qid, question=q.question, fused=[unit], packed=[unit],
                            answer=answer, citations=[Citation(unit_id=unit.unit_id)], outcome="answered"))
    write_traces(path, RunHeader(run_name="imported", corpus_digest=corpus.digest,
                                 dataset_version=golden.dataset_version), traces)
    return path


def cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        _main([str(a) for a in args])
    out = capsys.readouterr()
    return (e.value.code or 0), out.out, out.err


def test_rebaseline_publishes_the_offset_of_a_judge_change(tmp_path, capsys, inputs):  # noqa: F811
    traces = write_run_traces(tmp_path / "t.jsonl", inputs)
    db = tmp_path / "s.duckdb"
    code, _, err = cli(["score", traces, "--golden", bundled_golden_source(), "--store", db, "--name", "a"],
                       capsys)
    assert code == 0, err
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text("provider: local\nmodel: lexical\nmetrics: [faithfulness]\n")
    new.write_text("provider: local\nmodel: lexical\nthreshold: 0.3\nmetrics: [faithfulness]\n")
    code, _, err = cli(["judge", "a", "--judge", old, "--store", db], capsys)
    assert code == 0, err
    with Store.open(db, read_only=True) as st:
        before = st.results("a").num_rows
    code, out, err = cli(["judge", "rebaseline", old, new, "--runs", "a", "--store", db, "--json",
                          "--resamples", "500"], capsys)
    assert code == 0, err
    res = json.loads(out)
    corpus, golden = inputs
    _, recs, _ = read_traces(traces)
    items = items_from(recs, golden, lambda u: u.text)
    got = {}
    for path in (old, new):
        cfg = load_judge_config(path)
        j = local_judge_items(items, build_judge(cfg))
        c = j.columns
        got[path] = {(q, m): v for q, m, v in zip(c["query_id"], c["metric"], c["value"], strict=True)}
    for m, row in res["metrics"].items():
        keys = [k for k in got[old] if k[1] == m and not np.isnan(got[old][k]) and not np.isnan(got[new][k])]
        d = np.array([got[new][k] - got[old][k] for k in keys])
        assert row["n"] == len(keys) and row["offset"]["value"] == pytest.approx(d.mean())
    faith = res["metrics"]["faithfulness"]
    assert faith["offset"]["value"] > 0  # a lower threshold supports more claims
    with Store.open(db, read_only=True) as st:
        assert st.results("a").num_rows == before  # the archive is untouched
