"""Depth taps and rerank movement against per-query set arithmetic."""

import numpy as np
import pytest

from ragassay.errors import InputError
from ragassay.metrics import GradeMatrix, Semantics
from ragassay.metrics.stages import depth_taps, rerank_movement

NAN = float("nan")
LABELS = [[2], [2], [2], [2], [0]]


def test_rerank_movement_four_way_counts():
    # final_k = 2; per query: relevant doc in top 2 before / after
    pre = GradeMatrix.from_lists(list("abcde"), [[0, 0, 2], [2, 0, 0], [2, 0], [0, 0, 0], [0, 0]], LABELS)
    post = GradeMatrix.from_lists(list("abcde"), [[2, 0, 0], [0, 0, 2], [0, 2], [0, 0, 0], [0, 0]], LABELS)
    mv = rerank_movement(pre, post, final_k=2)
    assert list(mv.labels) == ["rescued", "broke", "kept", "missed_both", ""]
    assert mv.counts == {"rescued": 1, "broke": 1, "kept": 1, "missed_both": 1} and mv.n_undefined == 1
    assert mv.fractions()["kept"] == 0.25


def test_rerank_movement_requires_same_queries():
    a = GradeMatrix.from_lists(["a"], [[2]], [[2]])
    b = GradeMatrix.from_lists(["b"], [[2]], [[2]])
    with pytest.raises(InputError, match="same queries"):
        rerank_movement(a, b, final_k=1)


def test_depth_taps_recall_at_each_depth_matches_set_counts():
    rng = np.random.default_rng(1)
    ids = [f"q{i}" for i in range(30)]
    labels = [list(rng.integers(0, 4, size=6)) for _ in ids]

    def stage(depth):
        return [list(rng.choice([0, 1, 2, 3, NAN], size=depth)) for _ in ids]

    bm25, dense, fused, final = stage(20), stage(20), stage(10), stage(5)
    gm = lambda r: GradeMatrix.from_lists(ids, r, labels)  # noqa: E731
    taps = depth_taps({"bm25": gm(bm25), "dense": gm(dense)}, gm(fused), gm(final), 20, 10, 3, Semantics())

    def recall(rank, k):
        out = []
        for r, lab in zip(rank, labels, strict=True):
            n_rel = sum(g >= 2 for g in lab)
            out.append(np.nan if n_rel == 0 else sum(g >= 2 for g in r[:k] if g == g) / n_rel)
        return np.nanmean(out)

    s = taps.summary()
    assert s["recall@branch_depth[bm25]"] == pytest.approx(recall(bm25, 20))
    assert s["recall@branch_depth[dense]"] == pytest.approx(recall(dense, 20))
    assert s["recall@fusion_depth"] == pytest.approx(recall(fused, 10))
    assert s["recall@final_k"] == pytest.approx(recall(final, 3))
    assert taps.depths == {
        "branch_depth[bm25]": 20,
        "branch_depth[dense]": 20,
        "fusion_depth": 10,
        "final_k": 3,
    }
