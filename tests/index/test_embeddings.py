"""Embedding diagnostics against scipy and brute-force references."""

import numpy as np
import pytest
from scipy import stats

from ragassay.errors import InputError
from ragassay.metrics import embeddings as emb


def unit(x):
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_drift_probe_rank_correlations_match_scipy_row_by_row():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((40, 16))
    b = a[:, :12] + 0.7 * rng.standard_normal((40, 12))  # a "new version" with another dimension
    out = emb.drift_probe(a, b, k=5)
    sa, sb = unit(a) @ unit(a).T, unit(b) @ unit(b).T
    rho, tau, ov = [], [], []
    for i in range(40):
        others = [j for j in range(40) if j != i]
        rho.append(stats.spearmanr(sa[i, others], sb[i, others]).statistic)
        tau.append(stats.kendalltau(sa[i, others], sb[i, others]).statistic)
        na = set(sorted(others, key=lambda j: -sa[i, j])[:5])
        nb = set(sorted(others, key=lambda j: -sb[i, j])[:5])
        ov.append(len(na & nb) / 5)
    assert out["spearman"] == pytest.approx(np.mean(rho), abs=1e-12)
    assert out["kendall"] == pytest.approx(np.mean(tau), abs=1e-12)
    assert out["overlap_at_k"] == pytest.approx(np.mean(ov), abs=1e-12)
    assert out["self_cosine"] is None  # different dimensions: no vector-by-vector comparison
    assert 0 < out["spearman"] < 1


def test_drift_probe_kendall_tau_b_with_ties_matches_scipy():
    # coarse (rounded) similarities create ties in both rankings, where tau-b's correction matters
    rng = np.random.default_rng(1)
    a = np.round(rng.standard_normal((12, 3)), 0) + 0.01
    b = np.round(a + rng.standard_normal((12, 3)) * 0.5, 0) + 0.01
    out = emb.drift_probe(a, b, k=3)
    sa, sb = unit(a) @ unit(a).T, unit(b) @ unit(b).T
    ref = [stats.kendalltau(np.delete(sa[i], i), np.delete(sb[i], i)).statistic for i in range(12)]
    assert out["kendall"] == pytest.approx(np.nanmean(ref), abs=1e-12)


def test_drift_probe_same_model_is_perfectly_stable():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((30, 8))
    out = emb.drift_probe(a, 3.0 * a, k=4)  # scaling changes no cosine
    assert out["spearman"] == pytest.approx(1.0) and out["kendall"] == pytest.approx(1.0)
    assert out["overlap_at_k"] == 1.0 and out["self_cosine"] == pytest.approx(1.0)


def test_similarity_gap_equals_a_direct_computation_and_its_ci_covers_it():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((60, 10))
    pos = q + 0.5 * rng.standard_normal((60, 10))
    pool = rng.standard_normal((200, 10))
    out = emb.similarity_gap(q, pos, pool, n_random=8, seed=5, n_resamples=2000)
    draws = np.random.default_rng(5).integers(0, 200, size=(60, 8))
    uq, up, upool = unit(q), unit(pos), unit(pool)
    ref_pos = np.array([uq[i] @ up[i] for i in range(60)])
    ref_rand = np.array([np.mean([uq[i] @ upool[j] for j in draws[i]]) for i in range(60)])
    assert out["mean_positive"] == pytest.approx(ref_pos.mean(), abs=1e-12)
    assert out["mean_random"] == pytest.approx(ref_rand.mean(), abs=1e-12)
    assert out["gap"] == pytest.approx((ref_pos - ref_rand).mean(), abs=1e-12)
    assert out["ci_low"] < out["gap"] < out["ci_high"]
    assert out["ci_low"] > 0.3  # a strong, credible gap on this construction


def test_top1_histogram_matches_brute_force():
    rng = np.random.default_rng(4)
    q, p = rng.standard_normal((25, 6)), rng.standard_normal((90, 6))
    out = emb.top1_similarity(q, p, bins=10)
    top = (unit(q) @ unit(p).T).max(axis=1)
    assert out["counts"] == np.histogram(top, bins=10, range=(-1, 1))[0].tolist()
    assert sum(out["counts"]) == 25
    assert out["p50"] == pytest.approx(np.median(top)) and out["spread"] == pytest.approx(
        np.percentile(top, 95) - np.percentile(top, 5))


def test_duplicate_collapse_on_hand_built_groups():
    base = np.eye(6)
    x = np.vstack([base[0], base[0] * 2, base[0] + 1e-4 * base[1],  # a group of three near-duplicates
                   base[2], base[2] + 1e-4 * base[3],             # a pair
                   base[4], base[5]])                               # two singletons
    out = emb.duplicate_collapse(x, threshold=0.99)
    assert out["n"] == 7 and out["n_groups"] == 2
    assert out["collapse_rate"] == pytest.approx(5 / 7)
    assert out["removable_rate"] == pytest.approx(3 / 7)  # keep one of three and one of two


def test_truncation_rate_counts_passages_over_the_limit():
    out = emb.truncation_rate(np.array([10, 512, 513, 1000, 40]), 512)
    assert out["truncated"] == 2 and out["rate"] == pytest.approx(0.4) and out["max_seen"] == 1000


def test_bad_inputs_raise_typed_errors():
    with pytest.raises(InputError, match="all zeros"):
        emb.top1_similarity(np.zeros((2, 3)), np.ones((2, 3)))
    with pytest.raises(InputError, match="one per query"):
        emb.similarity_gap(np.ones((3, 2)), np.ones((2, 2)), np.ones((4, 2)))
    with pytest.raises(InputError, match="same probe items"):
        emb.drift_probe(np.ones((4, 2)), np.ones((5, 2)))
    with pytest.raises(InputError, match="token counts"):
        emb.truncation_rate(np.array([1.5]), 10)
