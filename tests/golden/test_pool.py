"""`golden pool` and `golden merge-labels`: the pool equals a hand-worked union of the runs' unjudged top-k
units (and an independent overlap computation), labels merge back as span evidence that `golden build` turns
into a new version whose judged fraction — as `ragassay score` stores it — rises; bad input is refused with
one `error:` line per problem."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from pool_world import (
    ALPHA_ONE,
    ALPHA_TWO,
    DOCS,
    GAMMA_ONE,
    GAMMA_ONE_AGAIN,
    GAMMA_TWO,
    RUN_A,
    RUN_B,
    K,
    cli,
    make_world,
)
from tests.analyses._runs import make_run

from ragassay.errors import InputError
from ragassay.golden import load_golden
from ragassay.golden.pool import judged_fraction, pool_units, render_page
from ragassay.store import Store

# (query, unit, best rank per run), in queue order: golden order, then best rank, doc, start
HAND_WORKED = [
    ("q1", GAMMA_ONE_AGAIN, {"B": 1}),
    ("q1", ALPHA_TWO, {"B": 2}),
    ("q1", GAMMA_ONE, {"A": 2}),
    ("q2", GAMMA_TWO, {"B": 1}),
    ("q2", ALPHA_TWO, {"A": 2, "B": 2}),
    ("q2", GAMMA_ONE, {"A": 3}),
]


@pytest.fixture
def world(tmp_path, capsys):
    return make_world(tmp_path, capsys)


def _pool(world, capsys, *extra, runs=("A", "B"), out=None):
    out = out or world["tmp"] / "queue"
    code, stdout, err = cli(["golden", "pool", *runs, "--store", world["store"], "--golden", world["golden_dir"],
                             "--corpus", world["corpus_dir"], "--k", K, "--out", out, *extra], capsys)
    return code, stdout, err, out


def _queue(out):
    return [json.loads(line) for line in (out / "queue.jsonl").read_text(encoding="utf-8").splitlines()]


def _independent_pool(golden) -> dict:
    """Plain Python: a unit is judged when it shares a character with any evidence span of its query."""
    evidence = {q.query_id: [(e.doc_id, e.start, e.end) for e in q.evidence] for q in golden.queries}
    pool: dict = {}
    for run, lists in (("A", RUN_A), ("B", RUN_B)):
        for qid, spans in lists.items():
            if not golden[qid].answerable:
                continue
            for rank, (d, s, e) in enumerate(spans[:K], 1):
                if any(d == ed and max(s, es) < min(e, ee) for ed, es, ee in evidence[qid]):
                    continue
                ranks = pool.setdefault((qid, d, s, e), {})
                ranks[run] = min(rank, ranks.get(run, rank))
    return pool


def test_pool_is_the_hand_worked_union_of_unjudged_top_k_units(world, capsys):
    code, out_text, err, out = _pool(world, capsys, "--json")
    assert code == 0, err
    meta = json.loads(out_text)
    queue = _queue(out)
    got = [(r["query_id"], (r["doc_id"], r["start"], r["end"]), {x["run"]: x["rank"] for x in r["retrieved_by"]})
           for r in queue]
    assert got == HAND_WORKED
    assert {(q, *u): ranks for q, u, ranks in got} == _independent_pool(world["golden"])
    assert [r["quote"] for r in queue] == [DOCS[d][s:e] for _, (d, s, e), _ in HAND_WORKED]
    assert [r["question"] for r in queue[:1]] == ["Which alpha comes first?"]
    # 2 runs x 2 answerable queries x 3 slots; q3's two lists are negative; ALPHA_FOUR (rank 4) and B's fused
    # lists (not its final ones) never enter
    assert meta["counts"] == {"lists": 6, "slots": 12, "distinct": 10, "judged": 4, "queued": 6, "invalid": 0,
                              "blank": 0, "negative_lists": 2, "unknown_lists": 0}
    assert meta["k"] == K and [r["name"] for r in meta["runs"]] == ["A", "B"]
    assert sorted(p.name for p in out.iterdir()) == [".ragassay-golden-pool", "label.html", "pool.json",
                                                    "queue.jsonl"]
    code, summary, _, _ = _pool(world, capsys)  # its own earlier queue is replaced
    assert code == 0
    assert "12 top-3 units, 10 distinct, 4 already judged, 6 to label in 2 queries" in summary
    assert "2 lists of negative queries (not pooled)" in summary


def test_pool_units_counts_what_it_cannot_queue(world):
    golden = world["golden"]
    texts = {**DOCS, "w": "     "}
    lists = [("R", "q1", [None, ("w", 0, 3), ALPHA_ONE, GAMMA_TWO]), ("R", "zz", [ALPHA_TWO]),
             ("R", "q3", [ALPHA_TWO])]
    pool = pool_units(golden, texts, lists, 3)
    assert pool.items == []  # GAMMA_TWO is ranked 4th
    assert pool.counts == {"lists": 3, "slots": 3, "distinct": 2, "judged": 1, "queued": 0, "invalid": 1, "blank": 1,
                           "negative_lists": 1, "unknown_lists": 1}
    with pytest.raises(InputError, match="--k must be a positive integer"):
        pool_units(golden, texts, lists, 0)


def test_judged_fraction_counts_empty_lists_as_undefined_and_failed_units_as_unjudged(world):
    golden = world["golden"]
    lists = [("q1", RUN_A["q1"]), ("q2", []), ("zz", [ALPHA_ONE]), ("q2", [None, ("b", 11, 20)])]
    # q1: ALPHA_ONE and BETA_ZERO of the top 3 are judged (2/3); q2's second list 1/2; the empty list and the
    # unknown query's are not averaged in
    mean, n_def, n_undef = judged_fraction(golden, lists, 3)
    assert (n_def, n_undef) == (2, 1)
    assert mean == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert judged_fraction(golden, [("q1", [])], 3) == (None, 0, 1)


def _write_labels(path, queue, grades):
    path.write_text("".join(json.dumps({k: r[k] for k in ("query_id", "doc_id", "start", "end", "quote")}
                                       | {"grade": g}) + "\n" for r, g in zip(queue, grades, strict=True)))
    return path


def _stored_judged(store, name) -> float:
    with Store.open(store, read_only=True) as st:
        rows = st.results(name).to_pylist()
    per_row = {(r["query_id"], r["trial"]): r["judged_fraction"] for r in rows}
    return float(np.mean([v for v in per_row.values() if v is not None]))


def test_round_trip_pool_labels_merge_build_raises_stored_judged_fraction(world, capsys):
    _, _, _, queue_dir = _pool(world, capsys)
    queue = _queue(queue_dir)
    labels = _write_labels(world["tmp"] / "labels.jsonl", queue, [2, 0, 3, 1, 0, 2])
    new = world["tmp"] / "merged.jsonl"
    code, out, err = cli(["golden", "merge-labels", world["authoring"], labels, "--queue", queue_dir, "--corpus",
                          world["corpus_dir"], "--out", new, "--store", world["store"], "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    old_version = world["golden"].dataset_version
    assert rep["old_version"] == old_version and rep["new_version"] != old_version
    assert rep["judgements"] == {"n": 6, "per_query": {"q1": 3, "q2": 3},
                                 "per_stratum": {"lexical": 3, "paraphrase": 3},
                                 "per_grade": {"0": 2, "1": 1, "2": 2, "3": 1}}
    # the repeated "Gamma one." names its occurrence; the dataset name survives the new file name
    lines = [json.loads(line) for line in new.read_text().splitlines()]
    assert lines[0]["type"] == "meta" and lines[0]["dataset"] == "poolset"
    assert lines[0]["generator"]["merged_labels"][0]["n"] == 6
    q1 = next(x for x in lines[1:] if x["query_id"] == "q1")
    assert q1["evidence"][2:] == [{"doc_id": "c", "quote": "Gamma one.", "grade": 2, "occurrence": 2},
                                  {"doc_id": "a", "quote": "Alpha two.", "grade": 0},
                                  {"doc_id": "c", "quote": "Gamma one.", "grade": 3, "occurrence": 1}]

    code, _, err = cli(["golden", "build", new, "--corpus", world["corpus_dir"], "--out", world["tmp"] / "g2"],
                       capsys)
    assert code == 0, err
    g2 = load_golden(world["tmp"] / "g2")
    assert g2.dataset_version == rep["new_version"]
    assert [(e.doc_id, e.start, e.end, e.grade) for e in g2["q1"].evidence][2:] == [
        (*GAMMA_ONE_AGAIN, 2), (*ALPHA_TWO, 0), (*GAMMA_ONE, 3)]

    # oracle: the judged fraction scoring stores, before (the pooled runs) and after (the same traces rescored
    # on the new set; their header names the old version, hence the explicit pin override)
    for name in ("A", "B"):
        code, _, err = cli(["score", world["tmp"] / f"{name}.jsonl", "--golden", world["tmp"] / "g2", "--corpus",
                            world["corpus_dir"], "--store", world["store"], "--name", f"{name}-new",
                            "--allow-pin-mismatch", "--json"], capsys)
        assert code == 0, err
    by_name = {r["name"]: r for r in rep["judged_fraction"]["runs"]}
    assert rep["judged_fraction"]["k"] == K
    for name in ("A", "B"):
        r = by_name[name]
        assert r["before"] == pytest.approx(_stored_judged(world["store"], name))
        assert r["after"] == pytest.approx(_stored_judged(world["store"], f"{name}-new"))
        assert r["after"] > r["before"]
        # every top-3 unit of the answerable queries is judged now; the negative query's list never is
        assert r["after"] == pytest.approx(2 / 3)


def test_merge_writes_yaml_replaces_its_own_output_and_refuses_any_other_file(world, capsys):
    _, _, _, queue_dir = _pool(world, capsys)
    labels = _write_labels(world["tmp"] / "labels.jsonl", _queue(queue_dir)[:2], [3, 1])
    args = ["golden", "merge-labels", world["authoring"], labels, "--queue", queue_dir, "--corpus",
            world["corpus_dir"]]
    new = world["tmp"] / "merged.yaml"
    for _ in range(2):  # the second run replaces the file the first wrote
        code, out, err = cli([*args, "--out", new], capsys)
        assert code == 0, err
    assert "merged 2 label(s)" in out and "per stratum: lexical 2" in out
    code, _, err = cli(["golden", "build", new, "--corpus", world["corpus_dir"], "--out", world["tmp"] / "g2"],
                       capsys)
    assert code == 0, err
    assert len(load_golden(world["tmp"] / "g2")["q1"].evidence) == 4
    foreign = world["tmp"] / "mine.jsonl"
    foreign.write_text('{"query_id": "x"}\n')
    code, _, err = cli([*args, "--out", foreign], capsys)
    assert code == 2 and "is not an earlier ragassay golden merge-labels output; refusing to overwrite" in err
    assert foreign.read_text() == '{"query_id": "x"}\n'
    code, _, err = cli([*args, "--out", world["authoring"]], capsys)
    assert code == 2 and "is the authoring file being merged into" in err
    code, _, err = cli([*args, "--out", world["tmp"] / "x.txt"], capsys)
    assert code == 2 and "--out must end in .jsonl, .yaml or .yml" in err


def _errors(err: str) -> list[str]:
    lines = err.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), err
    return lines


def test_pool_refuses_mixed_versions_runs_without_traces_and_foreign_folders(world, capsys):
    with Store.open(world["store"]) as st:
        old = make_run(st, "old", {"recall@10": np.ones(3)}, qids=["q1", "q2", "q3"], dataset_version="poolset@0",
                       corpus_digest=world["corpus"].digest)
        bare = make_run(st, "bare", {"recall@10": np.ones(3)}, qids=["q1", "q2", "q3"],
                        dataset_version=world["golden"].dataset_version, corpus_digest=world["corpus"].digest)
    code, out, err, queue_dir = _pool(world, capsys, runs=("A", "old", "bare"))
    assert code == 2 and out == ""
    lines = _errors(err)
    version = world["golden"].dataset_version
    assert lines[0] == f"error: the runs are of mixed golden versions (poolset@0, {version}); pool runs scored on " \
                       "one golden set"
    assert f"error: run old ({old}) is of golden version 'poolset@0', not {version!r} (the set passed with " \
           "--golden); pass the set it was scored on, or drop it" in lines
    assert f"error: run bare ({bare}) recorded no traces; run it again with --keep-traces (or --traces-dir " \
           "DIR), or score its trace file with `ragassay score TRACES --golden G`" in lines
    assert not queue_dir.exists()

    foreign = world["tmp"] / "notes"
    foreign.mkdir()
    (foreign / "todo.txt").write_text("mine")
    code, _, err, _ = _pool(world, capsys, out=foreign)
    assert code == 2 and "is not an earlier ragassay golden-pool output" in err
    assert sorted(p.name for p in foreign.iterdir()) == ["todo.txt"]

    code, _, err, _ = _pool(world, capsys, "--k", "0")
    assert _errors(err) == ["error: --k must be an integer >= 1, got 0"] and code == 2

    changed = world["tmp"] / "changed"
    changed.mkdir()
    for doc, text in DOCS.items():
        (changed / f"{doc}.txt").write_text(text.upper())
    code, _, err = cli(["golden", "pool", "A", "--store", world["store"], "--golden", world["golden_dir"],
                        "--corpus", changed, "--out", world["tmp"] / "q2"], capsys)
    assert code == 2 and "is not the one the golden set was built on" in err
    code, _, err = cli(["golden", "pool", "A", "--store", world["tmp"] / "none.duckdb", "--golden",
                        world["golden_dir"], "--corpus", world["corpus_dir"], "--out", world["tmp"] / "q3"], capsys)
    assert _errors(err) == [f"error: {world['tmp'] / 'none.duckdb'}: no results store here; pass --store with the "
                            "runs' DuckDB file"] and code == 2


def test_pool_refuses_a_run_whose_trace_file_is_gone(world, capsys):
    (world["tmp"] / "B.jsonl").unlink()
    code, _, err, _ = _pool(world, capsys)
    assert code == 2
    assert re.search(r"error: run B \(\w+\): its traces .*B\.jsonl are not there", err)


def test_merge_labels_reports_every_bad_label_with_file_and_line(world, capsys):
    _, _, _, queue_dir = _pool(world, capsys)
    queue = _queue(queue_dir)
    first = {k: queue[0][k] for k in ("query_id", "doc_id", "start", "end")}
    judged_unit = {"query_id": "q1", "doc_id": ALPHA_ONE[0], "start": ALPHA_ONE[1], "end": ALPHA_ONE[2]}
    bad = [
        first | {"grade": 2},
        "{oops",
        [1, 2],
        first | {"query_id": "q9", "grade": 1},
        {k: queue[1][k] for k in ("query_id", "doc_id", "start", "end")} | {"grade": 4},
        {k: queue[2][k] for k in ("query_id", "doc_id", "start", "end")} | {"grade": "2"},
        first | {"grade": 3},
        judged_unit | {"grade": 1},
        {k: queue[3][k] for k in ("query_id", "doc_id", "start", "end")} | {"quote": "not it", "grade": 1},
        first | {"note": "x"},
    ]
    labels = world["tmp"] / "labels.jsonl"
    labels.write_text("".join((b if isinstance(b, str) else json.dumps(b)) + "\n" for b in bad))
    new = world["tmp"] / "merged.jsonl"
    code, out, err = cli(["golden", "merge-labels", world["authoring"], labels, "--queue", queue_dir, "--corpus",
                          world["corpus_dir"], "--out", new], capsys)
    assert code == 2 and out == "" and not new.exists()
    lines = _errors(err)
    g = GAMMA_ONE_AGAIN
    assert lines == [
        f"error: {labels}:2: not a JSON object (Expecting property name enclosed in double quotes: line 1 column 2 "
        "(char 1))",
        f"error: {labels}:3: expected a JSON object with query_id, doc_id, start, end, grade",
        f"error: {labels}:4: query 'q9' is not in the authoring file",
        f"error: {labels}:4: q9 {g[0]}[{g[1]}:{g[2]}] is not in the queue; label only the queued units",
        f"error: {labels}:5: grade 4 is not an integer 0–3",
        f"error: {labels}:6: grade \"2\" is not an integer 0–3",
        f"error: {labels}:7: q1 {g[0]}[{g[1]}:{g[2]}] is labelled twice (first at line 1); keep one",
        f"error: {labels}:8: q1 a[0:10] is not in the queue; label only the queued units",
        f"error: {labels}:9: q2 {GAMMA_TWO[0]}[{GAMMA_TWO[1]}:{GAMMA_TWO[2]}]: the quote is not the queued unit's "
        "text",
        f"error: {labels}:10: unknown key(s) note; missing grade; a label has query_id, doc_id, start, end, quote, "
        "grade",
    ]


def test_merge_labels_refuses_a_queue_of_another_version_and_other_bad_options(world, capsys):
    _, _, _, queue_dir = _pool(world, capsys)
    labels = _write_labels(world["tmp"] / "labels.jsonl", _queue(queue_dir)[:1], [2])
    edited = world["tmp"] / "edited.yaml"
    edited.write_text(world["authoring"].read_text().replace("Which alpha comes first?", "Which alpha is first?"))
    base = [labels, "--queue", queue_dir, "--corpus", world["corpus_dir"], "--out", world["tmp"] / "m.jsonl"]
    code, _, err = cli(["golden", "merge-labels", edited, *base], capsys)
    assert code == 2
    assert f"but the queue {queue_dir} was pooled on {world['golden'].dataset_version}; merge into the authoring " \
           "file that set was built from, or pool again" in err
    code, _, err = cli(["golden", "merge-labels", world["authoring"], *base, "--runs", "A"], capsys)
    assert _errors(err) == ["error: --runs needs --store: the judged fraction is read from the runs' traces"]
    code, _, err = cli(["golden", "merge-labels", world["authoring"], labels, "--queue", world["tmp"], "--corpus",
                        world["corpus_dir"], "--out", world["tmp"] / "m.jsonl"], capsys)
    assert code == 2 and "not a labelling queue" in err
    empty = world["tmp"] / "empty.jsonl"
    empty.write_text("\n")
    code, _, err = cli(["golden", "merge-labels", world["authoring"], empty, *base[1:]], capsys)
    assert code == 2 and "holds no label" in err


HOSTILE = "</script><script>document.title='PWNED'</script><img src=x onerror=\"document.title='PWNED'\"> {{TITLE}}"


def test_page_embeds_the_queue_as_inert_json():
    rec = {"query_id": "q1", "question": HOSTILE, "stratum": "s", "doc_id": "d", "start": 0, "end": len(HOSTILE),
           "quote": HOSTILE + "\u2028<!--", "retrieved_by": [{"run": "<b>", "run_id": "r", "rank": 1}]}
    meta = {"dataset_version": "x@<i>", "k": 10, "runs": [{"name": "<b>"}], "queue_sha256": "0" * 64}
    page = render_page([rec], meta)
    # the template's two script elements are the only ones: no text closed or opened one
    assert page.count("</script") == 2 and page.count("<script") == 2
    assert "<img" not in page
    assert page.count("{{TITLE}}") == 2  # the question's and the quote's own text, never filled in
    blob = re.search(r'<script type="application/json" id="queue-data">(.*?)</script>', page, flags=re.S).group(1)
    assert json.loads(blob) == {"meta": meta, "items": [rec]}
    assert "<title>label 1 passages · x@&lt;i&gt;</title>" in page
    assert re.search(r"script-src 'sha256-[A-Za-z0-9+/=]{44}'", page)
