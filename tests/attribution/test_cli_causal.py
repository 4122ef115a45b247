"""`ragassay analyze attribution | attacks | hygiene`: JSON output carries the same numbers as the library,
summaries print, and bad input is one error line with exit 2."""

import json

import numpy as np
import pytest
from tests.analysis.conftest import make_run

from ragassay.cli.app import main


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_attribution_json_matches_the_library(capsys, bundled):
    from ragassay.analysis.attribution import attribute, contexts_from_traces

    code, out, _ = run_cli(["analyze", "attribution", "--limit", "3", "--stage", "final", "--k", "4", "--json"],
                           capsys)
    assert code == 0
    got = json.loads(out)
    pipe, golden, traces, corpus = bundled
    contexts, reserves = contexts_from_traces(traces[:3], corpus, stage="final", k=4)
    ref = attribute(golden.queries[:3], contexts, pipe._generator, reserves=reserves)
    assert got["calls"] == ref.calls
    for q, r in zip(got["queries"], ref.queries, strict=True):
        assert [i["shapley"] for i in q["items"]] == pytest.approx([i.shapley for i in r.items])
    code, out, _ = run_cli(["analyze", "attribution", "--limit", "2", "--shapley", "none"], capsys)
    assert code == 0 and "generator calls" in out and "shapley" not in out.split("calls")[1].split("\n", 2)[2]


def test_attacks_summary_and_bad_class(capsys):
    code, out, _ = run_cli(["analyze", "attacks", "--attack", "citation_spoof", "--limit", "3", "--json"], capsys)
    assert code == 0
    rates = {(r["attack"], r["access"]): r for r in json.loads(out)["rates"]}
    assert rates[("citation_spoof", "untargeted")]["zero_upper"] == pytest.approx(1 - 0.05 ** (1 / 3))
    code, _, err = run_cli(["analyze", "attacks", "--attack", "jailbreak"], capsys)
    assert code == 2 and err.startswith("error: unknown attack class 'jailbreak'")


def test_hygiene_with_two_runs_rescored_on_retained(capsys, tmp_path, bundled):
    from ragassay.store import Store

    _, golden, _, corpus = bundled
    ids = golden.query_ids
    n = len(ids)
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0, 1, n), rng.uniform(0, 1, n)
    recall = np.where(np.arange(n) % 3 == 0, 0.0, 1.0)
    db = tmp_path / "s.duckdb"
    with Store.open(db) as st:
        for name, v in (("sys", a), ("cand", b)):
            rid = make_run(st, name, {"answer_f1": v, "recall@context": recall},
                           dataset_version=golden.dataset_version, corpus_digest=corpus.digest)
            st.connection.execute("UPDATE results SET query_id = 'x' || query_id WHERE run_id = ?", [rid])
    # make_run names queries q000...; map them to golden ids through a rewritten table
    with Store.open(db) as st:
        for i, q in enumerate(ids):
            st.connection.execute("UPDATE results SET query_id = ? WHERE query_id = ?", [q, f"xq{i:03d}"])
    excl = tmp_path / "synthetic.txt"
    excl.write_text("\n".join(ids[:10]) + "\n")
    code, out, err = run_cli(["analyze", "hygiene", "sys", "cand", "--store", str(db), "--exclude",
                              f"synthetic={excl}", "--resamples", "200", "--json"], capsys)
    assert code == 0, err
    got = json.loads(out)
    # both runs are audited: bypass flags and the shortcut audit per run
    flagged = {ids[i] for i in range(n) if a[i] >= 0.5 and recall[i] == 0}
    flagged_b = {ids[i] for i in range(n) if b[i] >= 0.5 and recall[i] == 0}
    assert [x["run"] for x in got["bypass"]] == ["sys", "cand"]
    assert set(got["bypass"][0]["flagged_ids"]) == flagged and set(got["bypass"][1]["flagged_ids"]) == flagged_b
    assert {r["run"] for r in got["shortcut"]} == {"sys", "cand"}
    ex = got["exclusions"]
    assert ex["marginals"] == {"overlap": ex["marginals"]["overlap"], "synthetic": 10, "bypass:sys": len(flagged),
                               "bypass:cand": len(flagged_b)}
    union = flagged | flagged_b | set(ids[:10]) | set(got["overlap"]["question_vs_corpus"]["flagged_ids"])
    assert ex["union"] == len(union) and ex["retained"] == n - len(union)
    keep = np.array([q not in union for q in ids])
    retained = next(r for r in got["rescored"] if r["population"] == "retained")
    assert retained["delta"] == pytest.approx(float((b - a)[keep].mean()))
    assert {r["stratum"] for r in got["shortcut"]} >= {"all", "lexical"}
    assert got["rebaselined"] is False and got["pin_differences"] == []
    code, _, err = run_cli(["analyze", "hygiene", "--exclude", "nofile"], capsys)
    assert code == 2 and "NAME=FILE" in err
