"""docs/online.md's gap and promote examples work as written: the ```bash blocks of "The offline–online gap" and
"Promote failures" are run (after the page's own setup block: the demo store, simulated traffic ingested beside
it), and the JSON they print is checked against oracles that do not go through ragassay.online (the record
Parquet files read with pyarrow, statsmodels' interval, the per-query rows of the two stored runs), as are the
figures the page quotes from them."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from collections import Counter
from pathlib import Path

import click
import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from statsmodels.stats.proportion import confint_proportions_2indep

from ragassay.cli.app import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "online.md"
TEXT = DOC.read_text(encoding="utf-8")

pytestmark = pytest.mark.slow  # the demo store (about 10 s), then a few commands


def section(heading: str) -> str:
    return re.search(r"^## " + re.escape(heading) + r"\n(.*?)(?=^## )", TEXT, re.S | re.M).group(1)


def bash_lines(heading: str) -> list[str]:
    """The command lines of the ```bash blocks of one section, in order."""
    blocks = re.findall(r"```bash\n(.*?)```", section(heading), re.S)
    return [line.strip() for b in blocks for line in b.splitlines() if line.strip()]


def minus(x: float, digits: int = 3) -> str:
    """A number as the prose of the page writes it (a true minus sign)."""
    return f"{x:.{digits}f}".replace("-", "\u2212")


@click.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def _ragassay(args) -> None:
    main(list(args))


def run(line: str, extra: tuple[str, ...] = ()):
    """One documented line in the current folder: ``ragassay ...`` (with ``> FILE``) through the real entry
    point, or ``cp A B``. Returns (exit code, stdout, stderr)."""
    words = shlex.split(line)
    if words[0] == "cp":
        shutil.copy(words[1], words[2])
        return 0, "", ""
    assert words[0] == "ragassay", line
    target = None
    if ">" in words:
        at = words.index(">")
        words, target = words[:at], words[at + 1]
    res = CliRunner().invoke(_ragassay, [*words[1:], *extra])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    if target is not None:
        Path(target).write_text(res.stdout, encoding="utf-8")
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The page's setup block, run in a fresh folder (the demo with fewer resamples: they only feed the demo's
    own comparisons and report, not the stored runs)."""
    where = tmp_path_factory.mktemp("online-docs")
    before = os.getcwd()
    os.chdir(where)
    try:
        setup = bash_lines("Judge on a sample")[:4]
        assert [s.split()[:3] for s in setup] == [["ragassay", "demo", "--out"], ["cp", "demo/ragassay.duckdb",
                                                  "store.duckdb"], ["ragassay", "online", "simulate"],
                                                 ["ragassay", "online", "ingest"]]
        for line in setup:
            code, _, err = run(line, ("--resamples", "200") if line.startswith("ragassay demo") else ())
            assert code == 0, (line, err)
        yield where
    finally:
        os.chdir(before)


def records(folder: Path) -> dict[str, list]:
    """The stored production records, read straight from their Parquet files."""
    t = pq.read_table(folder / "store.duckdb.online" / "records")
    return {c: t.column(c).to_pylist() for c in ("request_id", "release", "stratum", "question", "thumbs",
                                                 "rephrased", "escalated", "empty_retrieval")}


def test_the_gap_examples_record_one_row_whose_deltas_match_independent_computations(folder, monkeypatch):
    monkeypatch.chdir(folder)
    lines = bash_lines("The offline–online gap")
    assert len(lines) == 2 and all(" online gap " in f" {x} " for x in lines)
    code, out, err = run(lines[0])
    assert code == 0, err
    # the figures the page quotes from the first command's table
    assert "recorded release 2026.03-b (vs 2026.03-a)" in out
    for shown in ("+0.020", "-0.021", "[-0.036, -0.005]", "calibration: undefined (1 release(s) with both deltas"):
        assert shown in out and shown in section("The offline–online gap"), shown
    code, _, err = run(lines[1])
    assert code == 0, err
    d = json.loads(Path("gap.json").read_text(encoding="utf-8"))
    assert d["kind"] == "online-gap"
    row = d["row"]
    assert (row["release"], row["previous"], row["metric"], row["online_measure"]) == (
        "2026.03-b", "2026.03-a", "ndcg@5", "signal:thumbs_down")

    # online: the thumbs-down share of every record of each release, and the Wald interval of the difference
    rec = records(folder)
    rel = np.array(rec["release"], dtype=object)
    down = np.array([t == -1 for t in rec["thumbs"]])
    k_b, n_b = int(down[rel == "2026.03-b"].sum()), int((rel == "2026.03-b").sum())
    k_a, n_a = int(down[rel == "2026.03-a"].sum()), int((rel == "2026.03-a").sum())
    on = row["online"]
    assert on["release"] == {"name": "2026.03-b", "value": pytest.approx(k_b / n_b), "n": n_b}
    assert on["previous"] == {"name": "2026.03-a", "value": pytest.approx(k_a / n_a), "n": n_a}
    assert on["delta"] == pytest.approx(k_b / n_b - k_a / n_a)
    lo, hi = confint_proportions_2indep(k_b, n_b, k_a, n_a, method="wald", compare="diff")
    assert (on["ci_low"], on["ci_high"]) == pytest.approx((lo, hi))
    prose = section("The offline–online gap")
    assert f"{k_b / n_b:.1%} of the {n_b:,} requests of `2026.03-b`" in prose
    assert f"{k_a / n_a:.1%} of the {n_a:,} of `2026.03-a`" in prose

    # offline: hybrid - bm25 on ndcg@5, the mean over the queries both runs scored, from the stored rows
    from ragassay.store import Store

    with Store.open("store.duckdb", read_only=True) as st:
        per = {}
        for name in ("bm25", "hybrid"):
            t = st.results(st.get_run(name).run_id, metrics=["ndcg@5"]).to_pydict()
            vals: dict[str, list[float]] = {}
            for q, v in zip(t["query_id"], t["value"], strict=True):
                if v is not None:
                    vals.setdefault(q, []).append(v)
            per[name] = {q: float(np.mean(v)) for q, v in vals.items()}
    both = sorted(set(per["bm25"]) & set(per["hybrid"]))
    off = row["offline"]
    assert (off["source"], off["baseline"], off["candidate"], off["n"]) == ("runs", "bm25", "hybrid", len(both))
    assert off["delta"] == pytest.approx(np.mean([per["hybrid"][q] - per["bm25"][q] for q in both]))
    assert off["ci_low"] < off["delta"] < off["ci_high"]
    assert (f"offline Δ {minus(off['delta'])} [{minus(off['ci_low'])}, {minus(off['ci_high'])}] over "
            f"{off['n']}") in prose

    # idempotent: the second command replaced the first one's row; one release is too few to calibrate
    lines_in_file = (folder / "store.duckdb.online" / "gap.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines_in_file) == 1 and json.loads(lines_in_file[0])["offline"]["source"] == "runs"
    assert len(d["rows"]) == 1
    cal = d["calibration"]
    assert (cal["n"], cal["slope"], cal["intercept"], cal["r"]) == (1, None, None, None)
    assert "needs at least 3" in cal["undefined"]
    assert d["svg"] == "gap.svg" and Path("gap.svg").read_text(encoding="utf-8").startswith("<svg")


def test_the_promote_examples_write_the_queue_the_page_describes(folder, monkeypatch):
    monkeypatch.chdir(folder)
    # the section's promote examples (its "Labels back" block merges labels: tests/online/test_promote_merge.py)
    lines = [x for x in bash_lines("Promote failures") if " golden " not in f" {x} "]
    assert len(lines) == 2 and all(" online promote " in f" {x} " for x in lines)
    for line in lines:  # the second replaces the queue the first wrote
        code, _, err = run(line)
        assert code == 0, (line, err)
    d = json.loads(Path("promote.json").read_text(encoding="utf-8"))
    assert (d["kind"], d["cohort"], d["dataset_version"], d["k"]) == (
        "ragassay online promote", "production-2026-03", "production-2026-03", 5)
    assert d["signals"] == ["thumbs_down", "rephrased", "escalated", "empty_retrieval"]

    # candidates per stratum: records with any default failure signal, counted from the Parquet files
    rec = records(folder)
    n = len(rec["request_id"])
    carried = [[s for s, on in (("thumbs_down", rec["thumbs"][k] == -1), ("rephrased", rec["rephrased"][k]),
                                ("escalated", rec["escalated"][k]), ("empty_retrieval", rec["empty_retrieval"][k]))
                if on] for k in range(n)]
    cand = Counter(rec["stratum"][k] for k in range(n) if carried[k])
    assert {s: v["candidates"] for s, v in d["per_stratum"].items()} == dict(cand)
    assert all(v["promoted"] == 5 for v in d["per_stratum"].values())
    for s, v in d["per_stratum"].items():  # the lines the page quotes
        assert f"  {s}: {v['promoted']} of {v['candidates']} candidates ({v['repeats']} repeating" in TEXT

    # no --corpus: every request is one question-only item; the files agree with the counts
    c = d["counts"]
    assert (c["requests"], c["items"], c["unit_items"], c["question_only"]) == (20, 20, 0, 20)
    queue = [json.loads(x) for x in Path("queue/queue.jsonl").read_text(encoding="utf-8").splitlines()]
    stubs = [json.loads(x) for x in Path("queue/queries.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(queue) == c["items"] and len(stubs) == c["requests"] and Path("queue/label.html").is_file()
    assert all((it["doc_id"], it["start"], it["end"], it["quote"]) == ("", 0, 0, "") for it in queue)
    by_id = {r: k for k, r in enumerate(rec["request_id"])}
    folded = set()
    for it, stub in zip(queue, stubs, strict=True):
        k = by_id[it["request_id"]]
        assert it["query_id"] == stub["query_id"] == f"prod-{it['request_id']}"
        assert it["signals"] == carried[k] and it["stratum"] == rec["stratum"][k]
        assert stub["tags"] == ["source:production", f"date:{stub['created']}",
                                *(f"signal:{s}" for s in carried[k]), "cohort:production-2026-03"]
        assert (stub["source"], stub["answerable"]) == ("production", True)
        q = " ".join(rec["question"][k].casefold().split())
        assert q not in folded  # a question is promoted once
        folded.add(q)

    # a folder ragassay did not write is refused, with the line the page quotes
    Path("mine").mkdir()
    Path("mine/notes.txt").write_text("x", encoding="utf-8")
    code, _, err = run("ragassay online promote --store store.duckdb --out mine")
    assert code == 2
    assert err.strip() in section("Promote failures")
