import pytest

from ragassay.pipeline import pack, rrf, weighted


def test_rrf_by_hand():
    got = dict(rrf({"bm25": ["a", "b", "c"], "dense": ["b", "d"]}, k=60))
    assert got["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert got["a"] == pytest.approx(1 / 61)
    assert got["c"] == pytest.approx(1 / 63)
    assert got["d"] == pytest.approx(1 / 62)
    order = [u for u, _ in rrf({"bm25": ["a", "b", "c"], "dense": ["b", "d"]}, k=60)]
    assert order == ["b", "a", "d", "c"]


def test_rrf_ties_break_by_best_rank_then_id_and_depth_cuts():
    # x and y: both 1/61 + 1/62; tie -> best rank equal (1) -> id order
    order = rrf({"p": ["y", "x"], "q": ["x", "y"]}, k=60)
    assert [u for u, _ in order] == ["x", "y"]
    assert len(rrf({"p": list("abcdef")}, depth=3)) == 3


def test_weighted_fusion_min_max_by_hand():
    got = dict(weighted({"bm25": [("a", 10.0), ("b", 5.0), ("c", 0.0)], "dense": [("b", 0.9), ("c", 0.5)]},
                        weights={"bm25": 0.5, "dense": 2.0}))
    assert got["a"] == pytest.approx(0.5 * 1.0)
    assert got["b"] == pytest.approx(0.5 * 0.5 + 2.0 * 1.0)
    assert got["c"] == pytest.approx(0.0 + 2.0 * 0.0)
    with pytest.raises(ValueError, match="not enabled"):
        weighted({"bm25": [("a", 1.0)]}, weights={"dense": 1.0})


def test_pack_stop_policy_by_hand():
    sizes = {"a": 40, "b": 50, "c": 5, "d": 5}
    packed, cut, used = pack(list("abcd"), 60, sizes.get)
    assert packed == ["a"] and cut == ["b", "c", "d"] and used == 40
    packed, cut, used = pack(list("abcd"), 60, sizes.get, policy="skip")
    assert packed == ["a", "c", "d"] and cut == ["b"] and used == 50
    packed, cut, used = pack(list("abcd"), 100, sizes.get)
    assert packed == list("abcd") and cut == [] and used == 100
    assert pack(list("abcd"), 0, sizes.get) == ([], list("abcd"), 0)
