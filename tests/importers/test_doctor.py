"""`ragassay doctor` finds each anti-pattern it knows on a constructed bad project, and on the demo only
what the demo really has."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ragassay.cli.app import main as _main
from ragassay.corpus import bundled_corpus_dir
from ragassay.store import RunRecord, Store

DOCS = Path(__file__).resolve().parents[2] / "docs"


def cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        _main(args)
    cap = capsys.readouterr()
    return (e.value.code or 0), cap.out, cap.err


def by_area(out: str) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for c in json.loads(out)["checks"]:
        found.setdefault(c["area"], []).append(c)
    return found


BAD_GOLDEN = """dataset: bad
queries:
  - query_id: q1
    question: "What does section 6 cover?"
    stratum: lexical
    answerable: true
    evidence:
      - {doc_id: GPL-3, chunk_id: "GPL-3#12", grade: 3}
  - query_id: q2
    question: "Who wrote it?"
    stratum: lexical
    answerable: true
    evidence:
      - {doc_id: GPL-3, quote: "Free Software Foundation", grade: 2}
"""
LLM_CONFIG = """name: llm
chunker: {kind: recursive, size: 128}
bm25: {enabled: true, depth: 50}
reranker: {kind: none, final_k: 5}
packer: {budget_tokens: 1000, policy: stop}
generator: {kind: llm, provider: openai, model: m, base_url: "http://127.0.0.1:9", price_input: 0, price_output: 0}
"""


def _bad_store(path) -> None:
    with Store.open(path) as st:
        st.create_run(RunRecord(name="llm-once", config={"generator": {"kind": "llm"}}, trials=1,
                                hit_rule="any_overlap", status="complete"))
        st.create_run(RunRecord(name="no-rule", config={"generator": {"kind": "extractive"}}, trials=1,
                                hit_rule=None, status="complete"))


def test_doctor_finds_every_anti_pattern_on_a_bad_project(tmp_path, capsys):
    golden = tmp_path / "golden.yaml"
    golden.write_text(BAD_GOLDEN)
    raw = tmp_path / "raw.yaml"
    raw.write_text("metrics:\n  nDCG@10: {threshold: 0.7}\n")
    small = tmp_path / "small.yaml"
    small.write_text("metrics:\n  nDCG@final_k: {min_effect: 0.02}\n")
    config = tmp_path / "llm.yaml"
    config.write_text(LLM_CONFIG)
    store = tmp_path / "s.duckdb"
    _bad_store(store)
    code, out, _ = cli(["doctor", "--store", str(store), "--golden", str(golden), "--policy", str(raw),
                        "--config", str(config), "--json"], capsys)
    found = by_area(out)
    assert code == 1 and json.loads(out)["verdict"] == "FAIL"
    assert found["labels"][0]["verdict"] == "FAIL" and "q1" in found["labels"][0]["detail"]
    assert "docs/corpus-and-golden.md" in found["labels"][0]["detail"]
    assert "resolved to character spans by ragassay golden build" in found["labels"][0]["fix"]
    assert found["negative queries"][0]["verdict"] == "WARN" and "0 of 2" in found["negative queries"][0]["detail"]
    assert found["gate policy"][0]["verdict"] == "FAIL" and "nDCG@10.threshold" in found["gate policy"][0]["detail"]
    assert "docs/runs.md" in found["gate policy"][0]["detail"]
    assert found["gate policy"][0]["fix"].startswith("gate on the paired change")
    trials = {c["detail"].split(":")[0]: c for c in found["trials"]}
    assert any("llm-once" in c["detail"] for c in found["trials"])  # the stored single-trial llm run
    assert any(str(config) in d for d in trials)  # the config never run with several trials
    assert all(c["verdict"] == "WARN" for c in found["trials"])
    assert "no-rule" in found["hit rule"][0]["detail"] and found["hit rule"][0]["verdict"] == "FAIL"
    # n too small for the declared minimum effect: 2 queries, sigma_d 0.25 -> MDE 0.495 at 80% power
    code, out, _ = cli(["doctor", "--store", str(tmp_path / "none.duckdb"), "--golden", str(golden), "--policy",
                        str(small), "--json"], capsys)
    size = by_area(out)["sample size"][0]
    assert size["verdict"] == "WARN" and "0.495" in size["detail"] and "ndcg@final_k" in size["detail"]
    assert size["fix"].startswith("1227 queries")  # n_for_mde(0.02, 0.25): ceil((2.8016 * 0.25 / 0.02)^2)


def test_doctor_prints_each_finding_with_its_fix_and_exits_like_gate(tmp_path, capsys):
    golden = tmp_path / "golden.yaml"
    golden.write_text(BAD_GOLDEN.replace("chunk_id: \"GPL-3#12\"", "quote: \"Conveying Non-Source Forms\""))
    code, out, _ = cli(["doctor", "--store", str(tmp_path / "none.duckdb"), "--golden", str(golden)], capsys)
    assert code == 0  # a WARN (no negative queries) passes, as gate's WARN does
    assert "WARN negative queries: 0 of 2 unanswerable" in out and "fix: add unanswerable questions" in out
    assert "PASS labels" in out


@pytest.mark.slow  # builds the demo store (about 15 s)
def test_doctor_on_the_demo_finds_only_its_unvalidated_judge(tmp_path_factory, capsys):
    from ragassay.analysis.demo import DEMO_CONFIGS, demo_config_dir, run_demo

    out_dir = tmp_path_factory.mktemp("demo")
    run_demo(out_dir, n_resamples=200, report=False)
    args = ["doctor", "--store", str(out_dir / "ragassay.duckdb"), "--golden", str(out_dir / "golden"),
            "--corpus", str(bundled_corpus_dir()), "--json"]
    for c in DEMO_CONFIGS:
        args += ["--config", str(demo_config_dir() / f"{c}.yaml")]
    code, out, _ = cli(args, capsys)
    project = {a: cs for a, cs in by_area(out).items() if not a.startswith(("extra", "chromium"))}
    flagged = {a: [c["detail"] for c in cs if c["verdict"] != "PASS"] for a, cs in project.items()}
    flagged = {a: d for a, d in flagged.items() if d}
    # the demo judges with the local lexical judge, whose kappa on the bundled calibration set is under the floor
    assert set(flagged) == {"judges", "agreement"}, flagged
    assert code == 0
    # every run's four judge metrics got a verdict on each answer it could judge; no self-preference (local judge)
    assert project["judged fraction"][0]["detail"].startswith("16 stored judge metric(s)")
    assert "self-preference" not in project
    # the terminal lines cite the docs pages that ship, never a section of a spec that does not
    code, text, _ = cli([a for a in args if a != "--json"], capsys)
    assert code == 0 and "§" not in text
    pages = set(re.findall(r"docs/([\w-]+\.md)", text))
    assert "judge-validation.md" in pages and pages <= {p.name for p in DOCS.glob("*.md")}
