"""Differential tests: ragassay in trec_eval mode against pytrec_eval (the trec_eval C code) on random cases."""

import numpy as np
import pytest
import pytrec_eval

from ragassay.metrics import Qrels, Run, Semantics, build_grade_matrix, evaluate

CUTS = (1, 3, 5, 10, 20)
# pytrec_eval name -> ragassay name; "rel-dependent" metrics are undefined (NaN) in ragassay when R = 0
PAIRS = {
    **{f"ndcg_cut_{k}": f"ndcg@{k}" for k in CUTS},
    **{f"recall_{k}": f"recall@{k}" for k in CUTS},
    **{f"P_{k}": f"precision@{k}" for k in CUTS},
    **{f"map_cut_{k}": f"ap@{k}" for k in CUTS},
    **{f"success_{k}": f"success@{k}" for k in CUTS},
    "ndcg": "ndcg",
    "recip_rank": "rr",
    "map": "ap",
    "Rprec": "rprec",
    "bpref": "bpref",
}
DEFINED_WITHOUT_REL = {"precision"}
cut_str = ",".join(map(str, CUTS))
MEASURES = {
    f"ndcg_cut.{cut_str}",
    f"recall.{cut_str}",
    f"P.{cut_str}",
    f"map_cut.{cut_str}",
    f"success.{cut_str}",
    "ndcg",
    "recip_rank",
    "map",
    "Rprec",
    "bpref",
}


# doc id shapes: short ids are keyed exactly by their bytes, long ones by hash and then compared as strings;
# "middle" ids share long prefixes and suffixes, so only a full-length hash tells them apart
ID_STYLES = {
    "short": lambda i: f"d{i}",
    "long": lambda i: f"clueweb12-{i % 7:04d}tw-{i:05d}-{'x' * (i % 13)}",
    "middle": lambda i: f"msmarco_doc_{i:02d}_00000000000000000000_{'é' * (i % 3)}",
}


def random_case(rng, style="short"):
    nq = int(rng.integers(1, 8))
    name = ID_STYLES[style]
    pool = [name(i) for i in rng.permutation(60)[: int(rng.integers(5, 60))]]
    qrels, run = {}, {}
    for qi in range(nq):
        qid = f"q{qi}"
        judged = rng.choice(pool, size=int(rng.integers(1, min(15, len(pool)) + 1)), replace=False)
        levels = (
            rng.choice([-2, -1, 0, 0, 1, 2, 3], size=len(judged))
            if rng.random() < 0.8
            else np.zeros(len(judged))
        )
        if levels.max() < 0:
            levels[0] = (
                0  # trec_eval (as wrapped by pytrec_eval) crashes on a query whose labels are all negative
            )
        qrels[qid] = {str(d): int(g) for d, g in zip(judged, levels, strict=True)}
        if rng.random() < 0.15:
            continue  # query missing from the run
        ret = rng.choice(pool, size=int(rng.integers(1, len(pool) + 1)), replace=False)
        # coarse scores create many ties; a few differ only below float32 precision
        scores = np.round(rng.random(len(ret)) * rng.choice([3, 10, 1000]), 0) / 10
        scores = scores + (rng.random(len(ret)) < 0.1) * 1e-9
        run[qid] = {str(d): float(s) for d, s in zip(ret, scores, strict=True)}
    if rng.random() < 0.3:
        run["q_extra"] = {"d1": 1.0, "d2": 0.5}
    if not set(run) & set(qrels):
        run["q0"] = {pool[0]: 1.0}
    return qrels, run


def columns(run):
    q, d, s = [], [], []
    for qid, docs in run.items():
        for doc, score in docs.items():
            q.append(qid)
            d.append(doc)
            s.append(score)
    return q, d, s


def arrange(rng, rq, rd, rs, layout):
    """Run rows shuffled (the rank order is rebuilt by sorting) or ranked query by query with equal scores
    in random order (only the ties are re-ordered)."""
    if layout == "shuffled":
        perm = rng.permutation(len(rq))
    else:
        perm = np.lexsort((rng.random(len(rq)), -np.asarray(rs, dtype=np.float32), np.asarray(rq)))
    return [rq[i] for i in perm], [rd[i] for i in perm], [rs[i] for i in perm]


@pytest.mark.parametrize(
    ("seed", "style", "layout"),
    [(0, "short", "shuffled"), (1, "short", "ranked"), (2, "long", "shuffled"), (3, "long", "ranked")]
    + [(4, "middle", "shuffled"), (5, "middle", "ranked")],
)
def test_every_metric_matches_pytrec_eval_on_random_runs(seed, style, layout, join_path):
    rng = np.random.default_rng(seed)
    checked = 0
    for _ in range(50):
        qrels, run = random_case(rng, style)
        level = int(rng.choice([1, 2]))
        sem = Semantics.trec_eval(relevance_level=level)
        ref = pytrec_eval.RelevanceEvaluator(qrels, MEASURES, relevance_level=level).evaluate(run)
        qq, qd, qg = columns(qrels)
        r = Run.from_arrays(*arrange(rng, *columns(run), layout))
        gm = build_grade_matrix(Qrels.from_arrays(qq, qd, qg), r, ties="trec_eval")
        ours = evaluate(gm, list(PAIRS.values()), sem)
        row = {q: i for i, q in enumerate(gm.query_ids)}
        for qid in qrels:
            n_rel = sum(g >= level for g in qrels[qid].values())
            has_gain = any(g > 0 for g in qrels[qid].values())
            if qid not in ref:  # pytrec_eval skips queries absent from the run; ragassay scores them empty
                assert gm.missing[row[qid]] and gm.lengths[row[qid]] == 0
                continue
            for pname, name in PAIRS.items():
                value = ours[next(m for m in ours if str(m) == name)].values[row[qid]]
                base = name.split("@")[0]
                undefined = (
                    (not has_gain) if base == "ndcg" else (n_rel == 0 and base not in DEFINED_WITHOUT_REL)
                )
                if undefined:
                    assert np.isnan(value), (qid, name)
                    assert ref[qid][pname] == 0.0
                else:
                    assert value == pytest.approx(ref[qid][pname], abs=1e-9), (seed, qid, name, qrels, run)
                checked += 1
    assert checked > 1000


def test_float32_tie_rule_matches_pytrec_eval(join_path):
    qrels = {"q": {"c": 1}}
    run = {"q": {"a": 1.0, "b": 1.0 + 1e-8, "c": 1.0}}
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run)["q"]["recip_rank"]
    q, d, s = columns(run)
    gm = build_grade_matrix(Qrels.from_arrays(["q"], ["c"], [1]), Run.from_arrays(q, d, s), ties="trec_eval")
    ours = evaluate(gm, ["rr"], Semantics.trec_eval())
    assert ref == 1.0
    assert list(ours.values())[0].values[0] == ref
    given = build_grade_matrix(Qrels.from_arrays(["q"], ["c"], [1]), Run.from_arrays(q, d, s), ties="given")
    # stable order by float64 score: b (highest), then a, c in file order -> c at rank 3
    assert list(evaluate(given, ["rr"], Semantics(relevance_level=1)).values())[0].values[0] == pytest.approx(
        1 / 3
    )
