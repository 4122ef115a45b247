"""ANN index metrics against independent references: numpy brute force, hand examples, the golden labels."""

import math

import numpy as np
import pytest

from ragassay.errors import InputError
from ragassay.golden.labels import span_recall_at_k
from ragassay.metrics import ann


@pytest.fixture(scope="module")
def data():
    return ann.clustered_vectors(3000, 32, n_queries=200, seed=3)


def brute_topk(base, queries, k):
    """Reference: full float64 argsort per query (no ties in continuous random data)."""
    s = queries.astype(np.float64) @ base.astype(np.float64).T
    return np.argsort(-s, axis=1, kind="stable")[:, :k]


def brute_recall(found, exact, k):
    return np.array([len(set(f[:k].tolist()) & set(e[:k].tolist())) / k for f, e in zip(found, exact, strict=True)])


def test_exact_topk_matches_numpy_brute_force(data):
    base, q = data
    truth = ann.exact_topk(base, q, 10)
    assert np.array_equal(truth.ids, brute_topk(base, q, 10))
    assert np.all(truth.n_true == 10)
    assert np.allclose(truth.kth, np.sort(q.astype(np.float64) @ base.astype(np.float64).T, axis=1)[:, -10])


def test_hnsw_recall_curve_equals_set_intersection_with_exact_search(data):
    base, q = data
    idx = ann.AnnIndex("hnsw", base, m=8, ef_construction=16)
    exact = brute_topk(base, q, 10)
    truth = ann.exact_topk(base, q, 10)
    curve = ann.ann_curve(idx, base, q, 10, [10, 20, 200], truth=truth)
    for point in curve["points"]:
        ref = brute_recall(idx.search(q, 10, knob=point["value"]), exact, 10)
        assert point["recall"] == pytest.approx(ref.mean(), abs=1e-12)
        assert point["recall_min"] == pytest.approx(ref.min(), abs=1e-12)
        assert point["share_below_0.9"] == pytest.approx((ref < 0.9).mean(), abs=1e-12)
    # the low-ef point is genuinely approximate, the high one is not: the curve carries information
    assert curve["points"][0]["recall"] < 0.99 <= curve["points"][-1]["recall"]
    assert ann.knob_for_target(curve, 0.99) == 200
    assert curve["knob"] == "efSearch"


def test_ties_at_the_kth_place_count_as_correct():
    base = np.array([[1, 0], [0.6, 0.8], [0.6, 0.8], [0, 1]], dtype=np.float32)  # rows 1 and 2 are identical
    q = np.array([[0.6, 0.8]], dtype=np.float32)
    truth = ann.exact_topk(base, q, 1)
    assert truth.ids[0, 0] == 1  # exact search breaks the tie by the lower row
    assert ann.ann_recall(np.array([[2]]), base, q, truth)[0] == 1.0  # the twin is an equally right answer
    assert ann.ann_recall(np.array([[0]]), base, q, truth)[0] == 0.0
    # a repeated id is one neighbour, not two
    truth2 = ann.exact_topk(base, q, 2)
    assert ann.ann_recall(np.array([[1, 1]]), base, q, truth2)[0] == 0.5


def _fan():
    # unit vectors at 0, 10, ..., 50 degrees: for a query at 0 degrees the score falls with the row number
    ang = np.deg2rad(np.arange(6) * 10.0)
    base = np.stack([np.cos(ang), np.sin(ang)], axis=1).astype(np.float32)
    return base, np.array([[1.0, 0.0]], dtype=np.float32)


def test_filtered_recall_pre_and_post_on_a_hand_example():
    base, q = _fan()
    allowed = np.array([False, True, False, False, True, True])
    idx = ann.AnnIndex("flat", base)
    truth = ann.exact_topk(base, q, 2, allowed=allowed)
    assert truth.ids.tolist() == [[1, 4]]
    pre = ann.filtered_search(idx, q, 2, allowed, "pre")
    assert pre.tolist() == [[1, 4]]
    assert ann.ann_recall(pre, base, q, truth, allowed=allowed)[0] == 1.0
    # post-filtering fetches the unfiltered top 3 (rows 0, 1, 2); only row 1 survives the filter
    post = ann.filtered_search(idx, q, 2, allowed, "post", fetch_k=3)
    assert post.tolist() == [[1, -1]]
    assert ann.ann_recall(post, base, q, truth, allowed=allowed)[0] == 0.5
    # a returned row the filter forbids is not a hit even when it is a true unfiltered neighbour
    assert ann.ann_recall(np.array([[0, 1]]), base, q, truth, allowed=allowed)[0] == 0.5
    # a filter passing nothing leaves recall undefined, not zero
    none = np.zeros(6, dtype=bool)
    assert math.isnan(ann.ann_recall(np.array([[-1, -1]]), base, q, ann.exact_topk(base, q, 2, allowed=none),
                                     allowed=none)[0])


def test_filtered_recall_table_flat_pre_is_exact_post_collapses_at_low_selectivity(data):
    base, q = data
    idx = ann.AnnIndex("flat", base)
    rows = ann.filtered_recall(idx, base, q, 10, selectivities=(0.001, 0.1), fetch_k=50, seed=7)
    by = {(r["selectivity"], r["strategy"]): r for r in rows}
    assert by[(0.001, "pre")]["recall"] == 1.0 and by[(0.1, "pre")]["recall"] == 1.0
    assert by[(0.001, "pre")]["n_allowed"] == 3
    # independent reference for post-filtering: exact top-50, keep allowed, compare with filtered truth
    mask = ann.selectivity_mask(len(base), 0.001, seed=7)
    top50 = brute_topk(base, q, 50)
    s = q.astype(np.float64) @ base.astype(np.float64).T
    s[:, ~mask] = -np.inf
    want = np.argsort(-s, axis=1, kind="stable")[:, :3]
    ref = np.mean([len(set(t[mask[t]].tolist()) & set(w.tolist())) / 3 for t, w in zip(top50, want, strict=True)])
    assert by[(0.001, "post")]["recall"] == pytest.approx(ref, abs=1e-12)
    assert by[(0.001, "post")]["recall"] < 0.5 < by[(0.1, "post")]["recall"]


def test_churn_flat_removes_for_real_and_stays_exact(data):
    base, q = data
    out = ann.churn_recall("flat", base, q, 10, delete_frac=0.2, insert_frac=0.1, rounds=3, seed=1)
    assert out["delete_mode"] == "remove"
    assert out["n_live"] == 3000 - out["deleted"] and out["deleted"] == round(0.2 * 2700)
    assert out["recall_after_churn"] == 1.0 and out["recall_fresh_build"] == 1.0 and out["recall_delta"] == 0.0


def test_churn_hnsw_uses_tombstones_and_never_returns_a_deleted_row(data):
    base, q = data
    out = ann.churn_recall("hnsw", base, q, 10, knob=64, rounds=2, seed=2, m=8, ef_construction=32)
    assert out["delete_mode"] == "tombstone"
    assert 0.9 < out["recall_after_churn"] <= 1.0
    assert out["recall_delta"] == pytest.approx(out["recall_after_churn"] - out["recall_fresh_build"])


def test_binary_rescoring_of_every_vector_is_exact_and_bytes_reflect_codes(data):
    base, q = data
    b = ann.AnnIndex("binary", base)
    truth = ann.exact_topk(base, q, 10)
    full = b.search(q, 10, knob=len(base) / 10)  # rescoring all candidates = exact search
    assert np.nanmean(ann.ann_recall(full, base, q, truth)) == 1.0
    assert np.nanmean(ann.ann_recall(b.search(q, 10, knob=1), base, q, truth)) < 1.0
    flat = ann.AnnIndex("flat", base)
    assert flat.nbytes() / len(base) == pytest.approx(4 * 32, abs=0.1)
    assert b.nbytes() / len(base) == pytest.approx(32 / 8, abs=0.1)


def test_pareto_front_dominance_on_a_hand_table():
    rows = [
        {"n": "a", "r": 1.0, "b": 100, "p": 1.0},
        {"n": "b", "r": 0.9, "b": 10, "p": 1.0},
        {"n": "c", "r": 0.9, "b": 20, "p": 1.0},  # dominated by b (same recall and p95, more bytes)
        {"n": "d", "r": 0.8, "b": 10, "p": 0.5},
        {"n": "e", "r": 0.8, "b": 10, "p": 0.5},  # equal to d: neither dominates the other
        {"n": "f", "r": None, "b": 1, "p": 0.1},  # unmeasured recall is the worst, yet wins on cost
        {"n": "g", "r": float("nan"), "b": 2, "p": 0.2},  # dominated by f
    ]
    assert ann.pareto_front(rows, ["r"], ["b", "p"]) == [True, True, False, True, True, True, False]


def test_pareto_table_rows_and_flags(data):
    base, q = data
    tab = ann.pareto_table(base[:800], q[:50], k=10, retrieval_recall=lambda idx, cfg: {"flat": 0.7}.get(
        cfg.name, 0.6))
    names = [r["config"] for r in tab["rows"]]
    assert names == ["flat", "hnsw", "sq8", "pq", "binary+rescore"]
    flat = tab["rows"][0]
    assert flat["ann_recall@10"] == 1.0 and flat["retrieval_recall@10"] == 0.7 and flat["pareto"]
    assert tab["rows"][-1]["bytes_per_vector"] < tab["rows"][2]["bytes_per_vector"] < flat["bytes_per_vector"]
    assert [r["pareto"] for r in tab["rows"]] == ann.pareto_front(tab["rows"], tab["maximize"], tab["minimize"])


def test_latency_percentiles_are_ordered_and_count_every_request(data):
    base, q = data
    out = ann.latency_percentiles(ann.AnnIndex("flat", base), q[:40], 10, concurrency=3, repeats=2)
    assert out["n_requests"] == 80
    assert 0 < out["p50_ms"] <= out["p95_ms"] <= out["p99_ms"]


def test_span_recall_matches_a_per_query_loop_on_the_bundled_golden_set():
    from ragassay.analysis.runner import load_inputs
    from ragassay.pipeline.chunkers import chunk_corpus

    corpus, golden = load_inputs(None, None)
    chunks = chunk_corpus({d.doc_id: d.text for d in corpus.docs.values()}, "recursive", 128, 0)
    rng = np.random.default_rng(0)
    qids = golden.query_ids
    ids = rng.integers(0, len(chunks), size=(len(qids), 10))
    # put one evidence-bearing chunk in some rows so recall is not all zeros
    for r, qid in enumerate(qids[::3]):
        ev = golden[qid].evidence
        if ev:
            e = ev[0]
            hit = [i for i, c in enumerate(chunks) if c.doc_id == e.doc_id and c.start < e.end and e.start < c.end]
            ids[3 * r, 2] = hit[0]
    ids[1, 5:] = -1
    got = span_recall_at_k(ids, qids, [c.doc_id for c in chunks], [c.start for c in chunks],
                           [c.end for c in chunks], golden, k=10)
    ref = []
    for r, qid in enumerate(qids):
        rel = [e for e in golden[qid].evidence if e.grade >= 2]
        if not rel:
            ref.append(np.nan)
            continue
        units = [chunks[i] for i in ids[r] if i >= 0]
        hit = sum(any(u.doc_id == e.doc_id and u.start < e.end and e.start < u.end for u in units) for e in rel)
        ref.append(hit / len(rel))
    ref = np.array(ref)
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    assert np.allclose(got[~np.isnan(ref)], ref[~np.isnan(ref)])
    assert np.nanmax(got) == 1.0


def test_bad_inputs_raise_typed_errors(data):
    base, q = data
    with pytest.raises(InputError, match="2-D"):
        ann.exact_topk(base[0], q, 5)
    with pytest.raises(InputError, match="dims"):
        ann.exact_topk(base, q[:, :5], 5)
    with pytest.raises(InputError, match="NaN"):
        ann.AnnIndex("flat", np.full((3, 2), np.nan))
    with pytest.raises(InputError, match="unknown index kind"):
        ann.AnnIndex("lsh", base)
    with pytest.raises(InputError, match="selectivity"):
        ann.selectivity_mask(10, 0.0)
    with pytest.raises(InputError, match="cannot delete"):
        ann.AnnIndex("hnsw", base[:50]).remove(np.array([1]))


def test_churn_ivf_keeps_ids_stable_across_removals_and_inserts(data):
    base, q = data
    # probing every list makes IVF exhaustive, so any recall below 1 would be an id mix-up, not the index
    nlist = 20
    out = ann.churn_recall("ivf", base, q, 10, knob=nlist, delete_frac=0.3, insert_frac=0.2, rounds=3, seed=4,
                           nlist=nlist)
    assert out["delete_mode"] == "remove"
    assert out["recall_after_churn"] == 1.0 and out["recall_fresh_build"] == 1.0
