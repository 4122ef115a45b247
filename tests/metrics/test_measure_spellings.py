"""Every accepted measure spelling against the tool that spells it, on random TREC files.

trec_eval names against pytrec_eval (trec_eval's C code), ir_measures names against ir_measures, ranx names
against ranx: per query and in the summary, to 1e-12. Where a value may differ, the test names why:

- undefined: ragassay says NaN (no relevant label; nothing returned for set precision), the tools say 0;
  the summary with ``undefined_as_zero`` equals theirs (``UNDEFINED_IS_ZERO``);
- ties: each tool orders tied scores its own way (trec_eval and gdeval: doc id descending; MS MARCO's
  script and ir_measures' Judged code, which ir_measures runs for RR@k and Judged@k: doc id ascending;
  cwl_eval: as the run lists them; ranx: as its unstable quicksort leaves them; trectools averages RBP's
  weights over them). ragassay's default rule is trec_eval's, and the other tools get the run already in that
  order (``trec_order``); where a tool reorders ties anyway, ragassay reads a file listing the rankings in that
  tool's order with ``ties="given"`` (``ascending_ids_order``, ``ranx_order``), which is how ``--ties given``
  reproduces such a tool;
- gdeval (what ir_measures runs for ERR@k and nDCG(dcg='exp-log2')@k) prints 5 decimals (``GDEVAL_DIGITS``);
- trec_eval -c gives an empty ranking NaN for low iprec_at_recall levels and 11pt_avg (``EMPTY_RANKING_NAN``);
- ir_measures fills a query missing from the run with 0, even for NumRel, which does not depend on the run
  (``test_num_counts_sum_like_trec_evals_all_line`` and the NumRel branch below);
- ``bpref`` is trec_eval's (and ragassay's), not held to ranx's, whose value for a query can depend on the other
  queries of the batch (ranx 0.3.21; ``test_ranx_bpref_is_not_an_oracle``);
- ir_measures has no provider here for RBP (cwl_eval, trectools), NumRel(rel=2) or IPrec(rel=2): those are
  held to ranx's RBP (the same sum; binary on qrels binarized at rel, as ir_measures hands qrels to ranx) and to
  pytrec_eval at that relevance level, and to ir_measures' own providers where installed.
"""

from __future__ import annotations

import math

import ir_measures
import numpy as np
import pytest
import pytrec_eval
from pydantic import ValidationError
from tests.metrics.test_trec_semantics import cli_json

from ragassay.cli.app import main
from ragassay.errors import InputError
from ragassay.metrics.measures import summary
from ragassay.metrics.names import Metric, canonical_name, parse_measure, parse_measures
from ragassay.metrics.semantics import Semantics
from ragassay.metrics.trec import evaluate_trec

TOL = 1e-12
GDEVAL_DIGITS = 1e-5  # gdeval prints values with 5 decimals
TREC = Semantics.trec_eval()  # rel >= 1, linear gain, trec_eval ties: what every tool's plain name assumes

# trec_eval spelling -> (pytrec_eval measure, its output key)
TREC_EVAL = {
    "num_ret": ("num_ret", "num_ret"), "num_rel": ("num_rel", "num_rel"), "num_rel_ret": ("num_rel_ret", "num_rel_ret"),
    "map": ("map", "map"), "gm_map": ("gm_map", "gm_map"), "Rprec": ("Rprec", "Rprec"), "bpref": ("bpref", "bpref"),
    "recip_rank": ("recip_rank", "recip_rank"), "ndcg": ("ndcg", "ndcg"), "set_P": ("set_P", "set_P"),
    "set_relative_P": ("set_relative_P", "set_relative_P"), "set_recall": ("set_recall", "set_recall"),
    "set_F": ("set_F", "set_F"), "set_F.0.5": ("set_F.0.5", "set_F"), "set_F.2": ("set_F.2", "set_F"),
    "11pt_avg": ("11pt_avg", "11pt_avg"), "infAP": ("infAP", "infAP"), "P.5": ("P.5", "P_5"), "P_10": ("P.10", "P_10"),
    "recall.100": ("recall.100", "recall_100"), "recall_10": ("recall.10", "recall_10"),
    "ndcg_cut.10": ("ndcg_cut.10", "ndcg_cut_10"), "ndcg_cut_5": ("ndcg_cut.5", "ndcg_cut_5"),
    "map_cut.10": ("map_cut.10", "map_cut_10"), "map_cut_5": ("map_cut.5", "map_cut_5"),
    "success.1": ("success.1", "success_1"), "success_5": ("success.5", "success_5"),
    "iprec_at_recall.0.2": ("iprec_at_recall.0.2", "iprec_at_recall_0.20"),
    "iprec_at_recall_0.50": ("iprec_at_recall.0.5", "iprec_at_recall_0.50"),
}

# ir_measures spelling -> how ir_measures spells it for its own parser (None: the same)
IR_MEASURES = {
    "P@5": None, "P(rel=2)@5": None, "Precision@5": None, "P(judged_only=True)@5": None, "R@10": None,
    "R(rel=2)@10": None, "Recall@10": None, "AP": None, "MAP": None, "AP@10": None, "AP(rel=2)": None,
    "AP(judged_only=True)@10": None, "RR": None, "MRR": None, "RR@10": None, "RR(rel=2)": None, "nDCG": None,
    "NDCG@10": None, "nDCG@10": None, "nDCG(dcg=log2)@10": "nDCG(dcg='log2')@10", "nDCG(dcg='exp-log2')": None,
    "nDCG(dcg='exp-log2')@10": None, "nDCG(gains={0:0,1:1,2:3,3:7})@10": None, "nDCG(judged_only=True)@10": None,
    "Rprec": None, "RPrec": None, "Rprec(rel=2)": None, "Bpref": None, "BPref": None, "Bpref(rel=2)": None,
    "Success@1": None, "Success(rel=2)@5": None, "Judged@10": None, "ERR@10": None, "ERR@5": None,
    "NumRet": None, "NumRelRet": None, "NumRet(rel=2)": None, "NumRel": None, "NumRel(rel=2)": None,
    "SetP": None, "SetP(rel=2)": None, "SetRelP": None, "SetP(relative=True)": None, "SetR": None,
    "SetR(rel=2)": None, "SetF": None, "SetF(beta=0.5)": None, "SetF(rel=2)": None, "IPrec@0.5": None,
    "IPrec(rel=2)@0.3": None, "infAP": None, "infAP(rel=2)": None,
    "RBP": None, "RBP(p=0.5)": None, "RBP(p=0.5)@10": None, "RBP(rel=1)": None, "RBP(p=0.8,rel=1)": None,
    "RBP(p=0.5,rel=2)@10": None,
}
GDEVAL = {"ERR", "nDCG"}  # measure names ir_measures sends to gdeval when they have a cutoff and exp gain / ERR
NOT_IN_IR_MEASURES_HERE = {"NumRel(rel=2)": ("num_rel", "num_rel", 2),
                           "IPrec(rel=2)@0.3": ("iprec_at_recall.0.3", "iprec_at_recall_0.30", 2)}

RANX = ["hits", "hits@10", "hits@5-l2", "hit_rate@10", "hit_rate@1-l2", "precision", "precision@5",
        "precision@5-l2", "recall@10", "recall@10-l2", "recall-l2", "f1", "f1@10", "f1@5-l2", "r-precision",
        "r-precision-l2", "mrr", "mrr@10", "mrr@3-l2", "map", "map@10", "map@10-l2", "dcg", "dcg@10",
        "dcg_burges@10", "ndcg", "ndcg@10", "ndcg_burges", "ndcg_burges@10", "ndcg@10-l1", "rbp.8", "rbp.95"]

UNDEFINED_IS_ZERO = 0.0  # what every tool reports where ragassay says undefined
# trec_eval -c scores an empty ranking's interpolated precision at a level needing floor(x R + 0.9) = 0
# relevant documents as 0/0 (NaN; precision at rank 0), so its 11pt_avg too; ragassay scores both 0
EMPTY_RANKING_NAN = {"iprec", "11pt_avg"}


def random_case(seed: int):
    """Numeric query ids (gdeval needs them), grades 0-3, coarse scores with many ties, queries with nothing
    relevant and queries missing from the run."""
    rng = np.random.default_rng(seed)
    pool = [f"d{i:02d}" for i in range(40)]
    qrels, run = {}, {}
    for q in range(1, int(rng.integers(8, 16)) + 1):
        qid = str(q)
        judged = rng.choice(pool, size=int(rng.integers(1, 16)), replace=False)
        grades = rng.integers(0, 4, size=len(judged))
        if rng.random() < 0.2:
            grades[:] = 0  # nothing relevant
        elif rng.random() < 0.15:
            grades[:] = rng.integers(1, 4, size=len(judged))  # nothing judged non-relevant
        qrels[qid] = {str(d): int(g) for d, g in zip(judged, grades, strict=True)}
        if rng.random() < 0.15 and q > 1:
            continue  # missing from the run
        ret = rng.choice(pool, size=int(rng.integers(1, 30)), replace=False)
        scores = np.round(rng.random(len(ret)) * rng.choice([3, 10, 100])) / 10  # ties; they stay ties in float32
        run[qid] = {str(d): float(s) for d, s in zip(ret, scores, strict=True)}
    return qrels, run


def test_random_cases_hold_the_edge_cases():
    for seed in (0, 1, 2):
        qrels, run = random_case(seed)
        assert set(qrels) - set(run)  # a query the run lacks
        assert any(max(docs.values()) == 0 for docs in qrels.values())  # a query with nothing relevant
        assert any(min(docs.values()) >= 1 for docs in qrels.values())  # one with nothing judged non-relevant
        assert any(len(set(docs.values())) < len(docs) for docs in run.values())  # tied scores


def trec_order(run):
    """Each query's documents by score descending, ties by doc id descending: trec_eval's order."""
    return {q: dict(sorted(sorted(docs.items(), reverse=True), key=lambda x: -x[1])) for q, docs in run.items()}


def ranx_order(run, comparable_with=None):
    """The order ranx scores ``run`` in: by score, ties as its (unstable) quicksort leaves them; after
    ``make_comparable`` (against the qrels ``comparable_with``) it sorts again, which can move ties again."""
    from ranx import Qrels, Run

    ranx_run = Run(run)
    if comparable_with is not None:
        ranx_run.make_comparable(Qrels(comparable_with))
    return {q: dict(ranx_run.run[q]) for q in run}


def ascending_ids_order(run):
    """Ties by doc id ascending: the order of MS MARCO's script and of ir_measures' own Judged code, which
    ir_measures runs for RR@k and Judged@k."""
    return {q: dict(sorted(docs.items(), key=lambda x: (-x[1], x[0]))) for q, docs in run.items()}


def write_files(tmp_path, qrels, run, shuffle_seed=None):
    q, r = tmp_path / "qrels", tmp_path / "run"
    q.write_text("".join(f"{qid} 0 {d} {g}\n" for qid, docs in qrels.items() for d, g in docs.items()))
    lines = [f"{qid} Q0 {d} {i + 1} {s} t\n" for qid, docs in run.items() for i, (d, s) in enumerate(docs.items())]
    if shuffle_seed is not None:
        lines = [lines[i] for i in np.random.default_rng(shuffle_seed).permutation(len(lines))]
    r.write_text("".join(lines))
    return q, r


def ours(tmp_path, qrels, run, names, sem=TREC):
    results, _ = evaluate_trec(*write_files(tmp_path, qrels, run), names, sem)
    return results


def ours_in_order(tmp_path, qrels, ordered_run, names):
    """ragassay on a file listing each ranking in ``ordered_run``'s order, kept among ties (``ties="given"``)."""
    return ours(tmp_path, qrels, ordered_run, names, Semantics.trec_eval(ties="given"))


def check(name, result, theirs, tool_summary, tol=TOL, skip=()):
    """Per query (NaN in ragassay only where the tool says 0) and the summary with undefined counted as 0."""
    got = result.per_query()
    assert set(got) == set(theirs), name
    for q, v in got.items():
        if q in skip:
            continue
        if math.isnan(v):
            assert theirs[q] == UNDEFINED_IS_ZERO, (name, q, theirs[q])
        else:
            assert v == pytest.approx(theirs[q], abs=tol), (name, q, v, theirs[q])
    if tool_summary is not None:
        assert summary(result, undefined_as_zero=True) == pytest.approx(tool_summary, abs=tol * 10), name


def trec_eval_c(qrels, run, name, measure, key, level=1):
    """pytrec_eval's per-query values with an empty ranking for each query the run lacks, as trec_eval -c
    scores it (ragassay does the same); its 0/0 on such a ranking (``EMPTY_RANKING_NAN``) is read as 0."""
    full = {q: run.get(q, {}) for q in qrels}
    ref = pytrec_eval.RelevanceEvaluator(qrels, {measure}, relevance_level=level).evaluate(full)
    theirs = {q: ref[q][key] for q in qrels}
    for q in set(qrels) - set(run):
        if math.isnan(theirs[q]):
            assert parse_measure(name).name in EMPTY_RANKING_NAN
            theirs[q] = 0.0
    return theirs


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("level", [1, 2])
def test_trec_eval_names_equal_pytrec_eval_per_query_and_all_line(tmp_path, seed, level):
    qrels, run = random_case(seed)
    sem = Semantics.trec_eval(relevance_level=level)  # trec_eval's -l applies to every measure
    res = ours(tmp_path, qrels, run, list(TREC_EVAL), sem)
    for name, (measure, key) in TREC_EVAL.items():
        theirs = trec_eval_c(qrels, run, name, measure, key, level)
        r = res[parse_measure(name)]
        if name == "gm_map":  # trec_eval keeps log(max(AP, 1e-5)) per query and prints exp(mean) in `all`
            for q, v in r.per_query().items():
                assert (math.isnan(v) and theirs[q] == math.log(0.00001)) or math.log(v) == pytest.approx(theirs[q])
            want = math.exp(np.mean(list(theirs.values())))
            assert summary(r, undefined_as_zero=True) == pytest.approx(want, rel=TOL)
            continue
        check(name, r, theirs, pytrec_eval.compute_aggregated_measure(key, list(theirs.values())))


def by_ranx(measure):
    """Whether ir_measures computes ``measure`` with ranx (no other provider here takes it)."""
    return measure.NAME == "R" and "rel" in measure.params or (
        measure.NAME == "nDCG" and measure["dcg"] == "exp-log2" and "cutoff" not in measure.params)


def ir_calc(measure, qrels, run):
    """ir_measures' per-query values and summary. Inputs go in as data frames of object (string) columns: its
    ranx provider refuses the string dtype pandas 3 gives query ids built from dicts."""
    import pandas as pd

    def frame(data, value):
        rows = [(q, d, v) for q, docs in data.items() for d, v in docs.items()]
        return pd.DataFrame(rows, columns=["query_id", "doc_id", value]).astype({"query_id": object,
                                                                                  "doc_id": object})

    if by_ranx(measure):
        # ir_measures sends these to ranx, which fails on a run lacking a qrels query; ir_measures' own rule
        # for such a query is its Measure.DEFAULT, 0, applied here
        q, r = frame({k: qrels[k] for k in run}, "relevance"), frame(run, "score")
        per = {m.query_id: float(m.value) for m in ir_measures.iter_calc([measure], q, r)}
        per = {k: per.get(k, measure.DEFAULT) for k in qrels}
        return per, float(np.mean(list(per.values())))
    q, r = frame(qrels, "relevance"), frame(run, "score")
    per = {m.query_id: float(m.value) for m in ir_measures.iter_calc([measure], q, r)}
    return per, ir_measures.calc_aggregate([measure], q, r)[measure]


def ranx_rbp(qrels, run, p, rel=None, k=None):
    """ranx's RBP (graded: the grade of each document >= 1) on the run cut at k; ``rel`` binarizes the qrels
    first, as ir_measures hands qrels to ranx. Returns (per query, mean, the rankings in ranx's order)."""
    from ranx import Qrels, Run, evaluate

    rq = {q: {d: (int(g >= rel) if rel else g) for d, g in docs.items()} for q, docs in qrels.items()}
    rr = {q: dict(list(docs.items())[:k] if k else docs.items()) for q, docs in run.items()}
    ranx_run = Run(rr)
    evaluate(Qrels(rq), ranx_run, f"rbp.{str(p)[2:]}", make_comparable=True)
    per = dict(ranx_run.scores[f"rbp.{str(p)[2:]}"])
    return per, float(np.mean(list(per.values()))), ranx_order(rr, comparable_with=rq)


@pytest.mark.slow  # ranx compiles its numba kernels on first use
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ir_measures_names_equal_ir_measures(tmp_path, seed):
    qrels, run = random_case(seed)
    res = ours(tmp_path, qrels, run, list(IR_MEASURES))
    sorted_run = trec_order(run)
    for name, spelled in IR_MEASURES.items():
        r = res[parse_measure(name)]
        measure = ir_measures.parse_measure(spelled or name)
        if measure.NAME == "RBP":
            per, agg, ranked = ranx_rbp(qrels, sorted_run, measure["p"], measure.params.get("rel"),
                                        measure.params.get("cutoff"))
            check(name, ours_in_order(tmp_path, qrels, ranked, [name])[r.metric], per, agg)
            continue
        if name in NOT_IN_IR_MEASURES_HERE:
            measure_str, key, level = NOT_IN_IR_MEASURES_HERE[name]
            theirs = trec_eval_c(qrels, run, name, measure_str, key, level)
            check(name, r, theirs, pytrec_eval.compute_aggregated_measure(key, list(theirs.values())))
            continue
        per, agg = ir_calc(measure, qrels, sorted_run)
        if measure.NAME == "Judged" or measure.NAME == "RR" and "cutoff" in measure.params:
            r = ours_in_order(tmp_path, qrels, ascending_ids_order(run), [name])[r.metric]
        if by_ranx(measure):  # and these through ranx, which orders ties its own way
            r = ours_in_order(tmp_path, qrels, ranx_order(sorted_run), [name])[r.metric]
        tol = GDEVAL_DIGITS if measure.NAME in GDEVAL and "cutoff" in measure.params and (
            measure.NAME == "ERR" or measure["dcg"] == "exp-log2") else TOL
        if measure.NAME == "NumRel":  # ir_measures writes 0 for a query the run lacks; its R does not change
            missing = set(qrels) - set(run)
            check(name, r, per, None, skip=missing)
            want = agg + sum(sum(g >= 1 for g in qrels[q].values()) for q in missing)
            assert summary(r) == want
            continue
        check(name, r, per, agg, tol=tol)


@pytest.mark.slow  # ranx compiles its numba kernels on first use
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ranx_names_equal_ranx(tmp_path, seed):
    from ranx import Qrels, Run, evaluate

    qrels, run = random_case(seed)
    sorted_run = trec_order(run)
    res = ours_in_order(tmp_path, qrels, ranx_order(sorted_run, comparable_with=qrels), RANX)
    ranx_qrels = Qrels(qrels)
    for name in RANX:
        ranx_run = Run(sorted_run)
        scores = evaluate(ranx_qrels, ranx_run, name, return_mean=False, make_comparable=True)
        per = dict(ranx_run.scores[name])
        r = res[parse_measure(name)]
        check(name, r, per, float(np.mean(scores)))


@pytest.mark.slow  # ranx compiles its numba kernels on first use
def test_ranx_bpref_is_not_an_oracle():
    """Why the ranx spelling ``bpref`` is held to trec_eval: ranx scores this query 0.5 alone (as trec_eval
    does: one relevant document retrieved of two, no judged non-relevant one above it) and 0 next to others."""
    from ranx import Qrels, Run, evaluate

    qrels, run = random_case(2)
    ordered = trec_order(run)
    alone = Run({"10": ordered["10"]})
    evaluate(Qrels({"10": qrels["10"]}), alone, "bpref")
    batch = Run(ordered)
    evaluate(Qrels(qrels), batch, "bpref", make_comparable=True)
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"bpref"}).evaluate(ordered)
    assert alone.scores["bpref"]["10"] == ref["10"]["bpref"] == 0.5 and batch.scores["bpref"]["10"] == 0.0


def test_num_counts_sum_like_trec_evals_all_line(tmp_path, capsys):
    qrels, run = random_case(3)
    q, r = write_files(tmp_path, qrels, run)
    assert set(qrels) - set(run)  # a query the run lacks: counted as an empty ranking, as trec_eval -c does
    full = {k: run.get(k, {}) for k in qrels}
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"num_ret", "num_rel", "num_rel_ret", "map"}).evaluate(full)
    data = cli_json(capsys, "trec", q, r, "-m", "num_ret", "-m", "NumRel", "-m", "num_rel_ret", "-m", "map", "-q")
    for key in ("num_ret", "num_rel", "num_rel_ret"):
        all_line = pytrec_eval.compute_aggregated_measure(key, [v[key] for v in ref.values()])
        got = data["metrics"][key]
        assert got["aggregate"] == "sum" and got["summary"] == all_line
        assert got["summary"] == sum(v[key] for v in ref.values())  # a sum, not a mean
        assert got["mean"] == pytest.approx(all_line / len(qrels), abs=TOL)
        assert got["per_query"] == {k: v[key] for k, v in ref.items()}  # per query stays per query
    assert data["metrics"]["ap"]["aggregate"] == "mean"
    # the human table prints the sum
    with pytest.raises(SystemExit) as e:
        main(["trec", str(q), str(r), "-m", "num_rel_ret"])
    assert e.value.code == 0
    assert f"{int(sum(v['num_rel_ret'] for v in ref.values()))} (sum)" in capsys.readouterr().out


ALL_SPELLINGS = list(TREC_EVAL) + list(IR_MEASURES) + RANX


def test_cli_accepts_every_spelling_and_reports_canonical_names(tmp_path, capsys):
    qrels, run = random_case(4)
    q, r = write_files(tmp_path, qrels, run)
    args = [a for name in ALL_SPELLINGS for a in ("-m", name)]
    data = cli_json(capsys, "trec", q, r, *args, "--undefined-as-zero")["metrics"]
    res = ours(tmp_path, qrels, run, ALL_SPELLINGS)
    assert set(data) == {str(m) for m in res}
    for m, result in res.items():
        assert data[str(m)]["summary"] == pytest.approx(summary(result, undefined_as_zero=True), abs=TOL)
        assert data[str(m)]["semantics"]["relevance_level"] == (m.rel or 1)
    # trec_eval's cutoff lists stand for one measure each
    data = cli_json(capsys, "trec", q, r, "-m", "P.5,10", "-m", "iprec_at_recall.0.2,0.8")["metrics"]
    assert list(data) == ["precision@5", "precision@10", "iprec(r=0.2)", "iprec(r=0.8)"]


REFUSED = {
    "recall": "ambiguous",  # trec_eval: nine cutoffs; ranx: the whole ranking
    "RBP@10": "ambiguous",  # ir_measures: cutoff 10; ranx: persistence 0.10
    "rbp@8": "ambiguous",
    "P": "needs a cutoff",
    "hit_rate": "needs a cutoff",
    "ndcg_cut": "ndcg_cut.10",
    "ndcg@10-l2": "zeroes the gain",  # ranx's -l on a graded measure
    "rbp.8-l2": "zeroes the gain",
    "P@5-l2": "ranx's",
    "foo@10": "unknown metric",
    "num_q": "not computed",
    "NumQ": "not computed",
    "gm_bpref": "not computed",
    "P(rel=x)@5": "integer",
    "nDCG(dcg=exp)@10": "log2",
    "nDCG(gain=exp,gains={2:3})@10": "gains",
    "RBP(p=1.5)": "strictly between",
    "bpref@10": "takes no cutoff",
    "AP(beta=2)": "takes",
    "SetR(relative=True)": "SetP only",
    "P(rel=2)@5@6": "cannot parse",
}


@pytest.mark.parametrize(("name", "needle"), sorted(REFUSED.items()))
def test_refused_names_give_one_line_errors_through_the_cli(tmp_path, capsys, name, needle):
    q, r = write_files(tmp_path, *random_case(5))
    with pytest.raises(SystemExit) as e:
        main(["trec", str(q), str(r), "-m", name])
    err = capsys.readouterr().err
    assert e.value.code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err
    with pytest.raises(InputError):
        parse_measure(name)


@pytest.mark.parametrize("name", sorted(set(ALL_SPELLINGS)))
def test_every_spelling_has_one_canonical_name_that_parses_back(name):
    m = parse_measure(name)
    assert canonical_name(name) == str(m)
    assert parse_measure(str(m)) == m and canonical_name(str(m)) == str(m)


@pytest.mark.parametrize("name", sorted(IR_MEASURES))
def test_ir_measures_spellings_write_back_what_ir_measures_parses(name):
    ours_ = parse_measure(name)
    theirs = ir_measures.parse_measure(IR_MEASURES[name] or name)
    assert ir_measures.parse_measure(ours_.ir_measures_name()) == theirs


def test_parameters_written_in_a_name_are_pinned_and_plain_names_follow_the_run():
    assert str(parse_measure("P@5")) == "precision@5"  # the run's relevance level
    assert str(parse_measure("P(rel=2)@5")) == str(parse_measure("precision@5-l2")) == "precision(rel=2)@5"
    assert str(parse_measure("nDCG(dcg=log2)@10")) == "ndcg(gain=linear)@10"
    assert str(parse_measure("nDCG(dcg='exp-log2')@10")) == str(parse_measure("ndcg_burges@10")) == "ndcg(gain=exp)@10"
    assert str(parse_measure("RBP(p=0.8)")) == str(parse_measure("rbp.8")) == "rbp(p=0.8)"  # graded
    assert str(parse_measure("RBP(rel=1)")) == str(parse_measure("RBP(p=0.8,rel=1)")) == "rbp(p=0.8,rel=1)"
    assert str(parse_measure("NumRet(rel=2)")) == "num_rel_ret(rel=2)"  # ir_measures' NumRet with rel
    assert str(parse_measure("hits@10")) == "hits@10" and parse_measure("hits@10").aggregate == "mean"
    assert parse_measure("num_rel_ret").aggregate == "sum" and parse_measure("gm_map").aggregate == "geometric"
    assert str(parse_measure("set_F.1")) == str(parse_measure("SetF(beta=1.0)")) == "set_f"  # F1 is the default
    assert str(parse_measure("nDCG(gains={0:0,1:1,2:3})@10")) == "ndcg(gains={2:3})@10"  # identity pairs dropped
    assert str(parse_measure("precision")) == "set_precision" and str(parse_measure("f1")) == "set_f"  # ranx
    # symbolic depths of stored rows keep their name; other stored names pass through
    assert canonical_name("P(rel=2)@final_k") == "precision(rel=2)@final_k"
    assert canonical_name("hit_rate@final_k") == "success@final_k"
    assert canonical_name("answer_f1") == "answer_f1" and canonical_name("latency.p95") == "latency.p95"
    with pytest.raises(InputError, match="names 2 measures"):
        canonical_name("P.5,10")
    assert [str(m) for m in parse_measures("success.1,5,10")] == ["success@1", "success@5", "success@10"]


def test_rel_and_gain_parameters_override_the_run_semantics_for_that_measure_only(tmp_path):
    qrels, run = random_case(6)
    sem = Semantics.trec_eval(relevance_level=2, gain="exp")
    res = ours(tmp_path, qrels, run, ["P@5", "P(rel=1)@5", "nDCG@10", "nDCG(dcg=log2)@10"], sem)
    base = ours(tmp_path, qrels, run, ["P@5", "nDCG@10"], Semantics.trec_eval())
    assert res[parse_measure("P@5")].semantics.relevance_level == 2
    r1 = res[parse_measure("P(rel=1)@5")]
    assert r1.semantics.relevance_level == 1 and r1.semantics.gain == "exp"
    np.testing.assert_array_equal(r1.values, base[parse_measure("P@5")].values)
    lin = res[parse_measure("nDCG(dcg=log2)@10")]
    assert lin.semantics.gain == "linear"
    np.testing.assert_array_equal(lin.values, base[parse_measure("nDCG@10")].values)
    assert not np.allclose(np.nan_to_num(res[parse_measure("nDCG@10")].values), np.nan_to_num(lin.values))


# One query, ranks: a (grade 2), c (0), x (unjudged), d (3), b (1); qrels also hold e (-1). Values computed by
# ir_measures 0.4.3 itself, RBP(p=..) through its trectools provider (graded) and RBP(rel=..) through cwl_eval.
RBP_QRELS = {"q": {"a": 2, "b": 1, "c": 0, "d": 3}}
RBP_RUN = {"q": {"a": 3.0, "c": 2.0, "x": 1.5, "d": 1.0, "b": 0.5}}
RBP_BY_IR_MEASURES = {"RBP(p=0.8)": 0.78912, "RBP(p=0.5)@3": 1.0, "RBP(rel=1)": 0.38432, "RBP(p=0.5,rel=2)": 0.5625}


def test_rbp_means_what_ir_measures_computes_graded_without_rel(tmp_path):
    res = ours(tmp_path, RBP_QRELS, RBP_RUN, list(RBP_BY_IR_MEASURES))
    for name, value in RBP_BY_IR_MEASURES.items():
        assert res[parse_measure(name)].values[0] == pytest.approx(value, abs=TOL), name
    graded = res[parse_measure("RBP(p=0.8)")]
    # the residual is the weight of the unjudged rank x and of everything past the list
    assert graded.extra["residual"][0] == pytest.approx(0.2 * 0.8**2 + 0.8**5, abs=TOL)


def test_rbp_against_ir_measures_own_providers(tmp_path):
    """ir_measures computes RBP only through cwl_eval (binary) and trectools (graded; averages the weights of
    tied scores, so the run here has none), both in the dev extra: the random runs are held to them too."""
    import warnings

    for seed in range(3):
        qrels, run = random_case(seed)
        rng = np.random.default_rng(seed)
        run = {q: {d: float(s) for d, s in zip(docs, rng.permutation(len(docs)), strict=True)}
               for q, docs in run.items()}
        res = ours(tmp_path, qrels, run, ["RBP(p=0.8)", "RBP(p=0.5)", "RBP(rel=1)", "RBP(p=0.5,rel=2)"])
        for name, provider in (("RBP(p=0.8)", ir_measures.trectools), ("RBP(p=0.5)", ir_measures.trectools),
                               ("RBP(rel=1)", ir_measures.cwl_eval), ("RBP(p=0.5,rel=2)", ir_measures.cwl_eval)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m = ir_measures.parse_measure(name)
                per = {x.query_id: float(x.value) for x in provider.iter_calc([m], qrels, run)}
            # trectools leaves out a query with nothing relevant retrieved; cwl_eval one the run lacks
            for q, v in res[parse_measure(name)].per_query().items():
                assert v == pytest.approx(per.get(q, 0.0), abs=TOL), (name, q)


def test_judged_only_drops_unjudged_and_negative_grades_like_trec_evals_minus_j(tmp_path):
    qrels = {"q": {"a": 2, "b": -1, "c": 0, "d": 1, "e": -2}, "r": {"x": 1, "y": 0}}
    run = {"q": {"z": 5.0, "b": 4.0, "a": 3.0, "w": 2.0, "c": 1.5, "e": 1.2, "d": 1.0}, "r": {"v": 2.0, "y": 1.0}}
    names = {"P(judged_only=True)@2": ("P.2", "P_2"), "AP(judged_only=True)": ("map", "map"),
             "RR(judged_only=True)": ("recip_rank", "recip_rank"), "nDCG(judged_only=True)@3": ("ndcg_cut.3",
                                                                                              "ndcg_cut_3")}
    res = ours(tmp_path, qrels, run, list(names))
    for name, (measure, key) in names.items():
        ref = pytrec_eval.RelevanceEvaluator(qrels, {measure}, judged_docs_only_flag=1).evaluate(run)
        check(name, res[parse_measure(name)], {q: ref[q][key] for q in qrels}, None)
    # q ranks a, c, d once z, w (unjudged) and b, e (negative: trec_eval's unjudged) are gone
    assert res[parse_measure("P(judged_only=True)@2")].per_query()["q"] == 0.5


def test_metric_parse_stays_what_retrieval_evaluate_computes():
    assert Metric.parse("ndcg_cut.10") == Metric("ndcg", 10)
    for name in ("P(rel=2)@5", "hits@10", "f1@10", "RBP(p=0.8)", "SetRelP", "set_F.0.5", "ndcg_burges@10"):
        with pytest.raises(InputError, match="metrics.measures.evaluate"):
            Metric.parse(name)


def test_gate_policy_accepts_every_spelling_as_its_canonical_name():
    from ragassay.analysis.gate import GatePolicy

    names = ["ndcg_cut.10", "P(rel=2)@5", "mrr@10", "hit_rate@final_k", "nDCG(dcg='exp-log2')@final_k", "rbp.8"]
    policy = GatePolicy.model_validate({"metrics": {n: {"min_effect": 0.03} for n in names}})
    assert list(policy.metrics) == ["ndcg@10", "precision(rel=2)@5", "rr@10", "success@final_k",
                                    "ndcg(gain=exp)@final_k", "rbp(p=0.8)"]
    # a refused name is a validation error of its entry, so a policy file reports it at its line
    with pytest.raises(ValidationError, match="recall.min_effect: metric 'recall' is ambiguous"):
        GatePolicy.model_validate({"metrics": {"recall": {"min_effect": 0.03}}})
