"""Slice identity (34.2 worked example and random partitions) and repeat-run agreement (34.5)."""

import itertools

import numpy as np
import pytest

from ragassay.errors import InputError
from ragassay.stats import modal_fraction, pair_agreement, slice_decomposition


def test_spec_multi_hop_single_hop_example():
    a = np.r_[np.full(240, 0.68), np.full(960, 0.80)]
    b = np.r_[np.full(240, 0.83), np.full(960, 0.78)]
    res = slice_decomposition(a, b, ["multi-hop"] * 240 + ["single-hop"] * 960)
    assert res.mean_a == pytest.approx(0.776) and res.mean_b == pytest.approx(0.79)
    assert res.delta == pytest.approx(0.014)
    rows = {r.name: r for r in res.slices}
    assert rows["multi-hop"].weight == pytest.approx(0.2) and rows["single-hop"].weight == pytest.approx(0.8)
    assert rows["multi-hop"].contribution == pytest.approx(0.03)
    assert rows["single-hop"].contribution == pytest.approx(-0.016)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_weighted_identity_holds_on_random_partitions(seed):
    rng = np.random.default_rng(seed)
    n = 500
    a, b = rng.random(n), rng.random(n)
    a[rng.random(n) < 0.05] = np.nan
    labels = rng.choice(["x", "y", "z", "w"], size=n, p=[0.5, 0.3, 0.15, 0.05])
    res = slice_decomposition(a, b, labels)
    ok = ~np.isnan(a)
    assert res.delta == pytest.approx(np.mean(b[ok] - a[ok]), abs=1e-12)
    assert sum(r.contribution for r in res.slices) == pytest.approx(res.delta, abs=1e-12)
    assert sum(r.weight * r.mean_a for r in res.slices) == pytest.approx(np.mean(a[ok]), abs=1e-12)
    assert sum(r.n for r in res.slices) == res.n == ok.sum() and res.n_excluded == (~ok).sum()
    for r in res.slices:
        sel = (labels == r.name) & ok
        assert r.mean_b == pytest.approx(b[sel].mean()) and r.n_excluded == ((labels == r.name) & ~ok).sum()


def test_mapping_partition_equals_label_partition():
    rng = np.random.default_rng(4)
    a, b = rng.random(30), rng.random(30)
    labels = np.where(np.arange(30) < 10, "s1", "s2")
    by_label = slice_decomposition(a, b, labels)
    by_index = slice_decomposition(a, b, {"s1": list(range(10)), "s2": list(range(10, 30))})
    by_mask = slice_decomposition(a, b, {"s1": labels == "s1", "s2": labels == "s2"})
    assert by_label.to_dict() == by_index.to_dict() == by_mask.to_dict()


def test_overlapping_slices_are_refused_with_the_item_named():
    with pytest.raises(InputError, match=r"overlap: item 3 is in both 'a' and 'b'"):
        slice_decomposition(np.zeros(6), np.ones(6), {"a": [0, 1, 2, 3], "b": [3, 4, 5]})


def test_gaps_and_bad_labels_are_refused():
    with pytest.raises(InputError, match="cover every item"):
        slice_decomposition(np.zeros(4), np.ones(4), {"a": [0, 1], "b": [2]})
    with pytest.raises(InputError, match="missing"):
        slice_decomposition(np.zeros(3), np.ones(3), ["a", None, "b"])
    with pytest.raises(InputError, match="one label per item"):
        slice_decomposition(np.zeros(3), np.ones(3), ["a", "b"])
    with pytest.raises(InputError, match="out of range"):
        slice_decomposition(np.zeros(3), np.ones(3), {"a": [0, 1, 2, 3]})
    with pytest.raises(InputError, match="nothing to decompose"):
        slice_decomposition([np.nan], [1.0], ["a"])


def test_slice_with_only_nan_items_has_zero_weight():
    res = slice_decomposition([0.1, 0.2, np.nan], [0.3, 0.1, 0.5], ["a", "a", "b"])
    b = next(r for r in res.slices if r.name == "b")
    assert b.n == 0 and b.weight == 0.0 and np.isnan(b.mean_a) and b.contribution == 0.0 and b.n_excluded == 1


def test_spec_counts_4_1_give_modal_08_and_pair_06():
    assert modal_fraction([4, 1]) == pytest.approx(0.8)
    assert pair_agreement([4, 1]) == pytest.approx(0.6)


@pytest.mark.parametrize("counts", [[3, 2, 2], [5], [1, 1, 1, 1], [6, 0, 3]])
def test_pair_agreement_equals_enumeration_of_distinct_pairs(counts):
    answers = [c for c, k in enumerate(counts) for _ in range(k)]
    pairs = list(itertools.combinations(answers, 2))
    assert pair_agreement(counts) == pytest.approx(np.mean([x == y for x, y in pairs]))
    assert modal_fraction(counts) == pytest.approx(max(counts) / sum(counts))


def test_single_repeat_and_bad_counts():
    assert modal_fraction([1]) == 1.0
    with pytest.raises(InputError, match="at least 2"):
        pair_agreement([1])
    with pytest.raises(InputError):
        modal_fraction([])
    with pytest.raises(InputError):
        modal_fraction([2, -1])
