"""End-to-end on the bundled example: resume after kill -9, and the gate's own validation (spec Lab 7)."""

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from ragassay.analysis.demo import demo_config_dir
from ragassay.analysis.gate import GatePolicy, HardPolicy, MetricPolicy, run_gate
from ragassay.analysis.runner import load_inputs, run_pipeline_into_store
from ragassay.store import Store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def inputs():
    return load_inputs(None, None)


def _config(tmp_path, name, **changes):
    cfg = yaml.safe_load((demo_config_dir() / f"{name}.yaml").read_text())
    for dotted, value in changes.items():
        section, key = dotted.split(".")
        cfg[section][key] = value
    cfg["name"] = name + "".join(f"_{k.split('.')[1]}" for k in changes)
    path = tmp_path / f"{cfg['name']}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_resume_after_kill_9_loses_and_duplicates_nothing(tmp_path, inputs):
    corpus, golden = inputs
    cfg = _config(tmp_path, "bm25")
    db, traces = tmp_path / "r.duckdb", tmp_path / "traces"
    trials = 12
    cmd = [sys.executable, "-c", "from ragassay.cli.app import main; main()", "run", str(cfg), "--store", str(db),
           "--trials", str(trials), "--traces-dir", str(traces), "--name", "killed", "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path)
    deadline = time.time() + 120
    while time.time() < deadline:
        files = list(traces.glob("*.jsonl")) if traces.exists() else []
        if files and sum(1 for _ in files[0].open()) > 200:
            break
        if proc.poll() is not None:
            pytest.fail(f"the run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with Store.open(db) as st:
        (rec,) = st.list_runs()
        assert rec.status == "running"
        partial = len(st.done_keys(rec.run_id))
        assert 0 < partial < trials * len(golden)
    r = subprocess.run([sys.executable, "-c", "from ragassay.cli.app import main; main()", "run", str(cfg),
                        "--store", str(db), "--traces-dir", str(traces), "--resume", "killed", "--json"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    with Store.open(db, read_only=True) as st:
        (rec,) = st.list_runs()
        assert rec.status == "complete"
        metrics = st.metrics(rec.run_id)
        res = st.results(rec.run_id).to_pydict()
        keys = list(zip(res["query_id"], res["trial"], res["metric"], strict=True))
        assert len(keys) == len(set(keys)) == trials * len(golden) * len(metrics)
        assert len(st.done_keys(rec.run_id)) == trials * len(golden)
    lines = (traces / f"{rec.run_id}.jsonl").read_text().splitlines()
    assert len(lines) - 1 >= trials * len(golden)


def test_lab7_injected_regression_fails_and_identical_runs_never_fail(tmp_path, inputs):
    corpus, golden = inputs
    policy = GatePolicy(n_resamples=5000, metrics={"recall@fusion_depth": MetricPolicy(min_effect=0.03),
                                                   "ndcg@5": MetricPolicy(min_effect=0.03)},
                        hard=HardPolicy(min_citation_validity=None))
    with Store.open(tmp_path / "lab7.duckdb") as st:
        base, _ = run_pipeline_into_store(st, _config(tmp_path, "hybrid"), corpus, golden,
                                          cache_dir=tmp_path / "cache")
        # The injected regression: fusion_depth halved (50 -> 25). (Dropping the dense branch is the other
        # injection the lab suggests; with the static WordLlama embedder it is not a regression on this
        # corpus, because BM25 alone ranks better - a finding, not a gate failure.)
        halved, _ = run_pipeline_into_store(st, _config(tmp_path, "hybrid", **{"fusion.depth": 25}), corpus,
                                            golden, cache_dir=tmp_path / "cache")
        res = run_gate(st, base, halved, policy)
        assert res.verdict == "FAIL", [c.detail for c in res.checks]
        failed = next(c for c in res.checks if c.verdict == "FAIL")
        assert failed.name == "recall@fusion_depth" and failed.value < -0.03
        repeats = [run_pipeline_into_store(st, _config(tmp_path, "hybrid"), corpus, golden,
                                           cache_dir=tmp_path / "cache")[0] for _ in range(10)]
        verdicts = [run_gate(st, base, r, policy).verdict for r in repeats]
        assert verdicts.count("FAIL") == 0 and verdicts.count("WARN") == 0
