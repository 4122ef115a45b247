"""Token-level chunk metrics against a brute-force per-token reference on random intervals."""

from __future__ import annotations

import numpy as np
import pytest

from ragassay.metrics.tokens import (
    TokenSpace,
    pack_prefix,
    precision_omega,
    report_card,
    token_metrics,
    units_holding,
)
from ragassay.pipeline.chunkers import chunk_text
from ragassay.pipeline.packer import pack


def _brute(ev, ret):
    """Per-token sets, exactly as the Chroma formulation states them."""
    te = {t for lo, hi in ev for t in range(lo, hi)}
    tr_multi = [t for lo, hi in ret for t in range(lo, hi)]
    tr = set(tr_multi)
    inter = len(te & tr)
    nan = float("nan")
    return (inter / len(te) if te else nan, inter / len(tr_multi) if tr_multi else nan,
            inter / (len(te) + len(tr_multi) - inter) if te or tr_multi else nan)


def _random_run(rng, n_q, line=400):
    ev, ret = [], []
    for q in range(n_q):
        for _ in range(rng.integers(0, 4)):
            a = int(rng.integers(0, line))
            ev.append((q, a, a + int(rng.integers(0, 30))))
        for _ in range(rng.integers(0, 8)):
            a = int(rng.integers(0, line))
            ret.append((q, a, a + int(rng.integers(0, 60))))
    return ev, ret


@pytest.mark.parametrize("seed", range(5))
def test_token_metrics_match_per_token_sets_on_random_intervals(seed):
    rng = np.random.default_rng(seed)
    n_q = 60
    ev, ret = _random_run(rng, n_q)
    e = np.array(ev, dtype=np.int64).reshape(-1, 3)
    r = np.array(ret, dtype=np.int64).reshape(-1, 3)
    m = token_metrics(n_q, e[:, 0], e[:, 1], e[:, 2], r[:, 0], r[:, 1], r[:, 2])
    for q in range(n_q):
        want = _brute([(a, b) for qq, a, b in ev if qq == q], [(a, b) for qq, a, b in ret if qq == q])
        np.testing.assert_allclose([m.recall[q], m.precision[q], m.iou[q]], want, equal_nan=True)


def test_overlapping_units_pay_for_redundant_tokens():
    # evidence [10, 20); two units both covering it: recall 1, precision 10 / 40, IoU 10 / (10 + 40 - 10)
    m = token_metrics(1, [0], [10], [20], [0, 0], [5, 5], [25, 25])
    assert (m.recall[0], m.precision[0], m.iou[0]) == (1.0, 0.25, 0.25)


def test_undefined_is_nan_not_zero():
    m = token_metrics(2, [0], [0], [5], [0], [0], [0])
    assert np.isnan(m.precision[0]) and m.recall[0] == 0.0  # a zero-length unit retrieves nothing
    assert np.isnan(m.recall[1]) and np.isnan(m.precision[1]) and np.isnan(m.iou[1])


def test_precision_omega_and_units_holding_match_brute_force():
    rng = np.random.default_rng(7)
    # fixed windows of 20 tokens advancing by 15 (overlap 5) over a 600-token line
    lo = np.arange(0, 600, 15)
    hi = np.minimum(lo + 20, 600)
    ev, _ = _random_run(rng, 40, line=560)
    e = np.array(ev, dtype=np.int64).reshape(-1, 3)
    q, c = units_holding(lo, hi, e[:, 0], e[:, 1], e[:, 2])
    got = set(zip(q.tolist(), c.tolist(), strict=True))
    want = {(qq, j) for qq, a, b in ev for j in range(len(lo)) if b > a and lo[j] < b and hi[j] > a}
    assert got == want
    om = precision_omega(40, lo, hi, e[:, 0], e[:, 1], e[:, 2])
    for qq in range(40):
        mine = [(a, b) for x, a, b in ev if x == qq]
        held = [(int(lo[j]), int(hi[j])) for x, j in want if x == qq]
        ref = _brute(mine, held)[1] if mine else float("nan")
        np.testing.assert_allclose(om[qq], ref, equal_nan=True)


def test_token_space_maps_character_spans_to_overlapping_tokens():
    ts = TokenSpace({"b": "x y", "a": "Hello, world again"})
    # doc a tokens: Hello , world again (0..4); doc b: x y (4..6)
    lo, hi = ts.intervals(["a", "a", "b"], [0, 8, 0], [5, 10, 3])
    assert lo.tolist() == [0, 2, 4] and hi.tolist() == [1, 3, 6]
    with pytest.raises(KeyError):
        ts.intervals(["zz"], [0], [1])


def test_pack_prefix_equals_the_pipeline_packer():
    rng = np.random.default_rng(3)
    q = np.repeat(np.arange(30), 12)
    rank = np.tile(np.arange(12), 30)
    toks = rng.integers(0, 300, size=len(q))
    keep, used = pack_prefix(q, rank, toks, 1000)
    for qq in range(30):
        idx = np.flatnonzero(q == qq)
        packed, _, u = pack(list(idx), 1000, lambda i: int(toks[i]), "stop")
        assert sorted(packed) == idx[keep[idx]].tolist()
        assert used[qq] == u


def test_report_card_counts_split_spans_and_chunks_per_span():
    text = " ".join(f"w{i}" for i in range(100))
    chunks = chunk_text("d", text, "fixed", 10, 0)
    ts = TokenSpace({"d": text})
    clo, chi = ts.intervals(["d"] * len(chunks), [c.start for c in chunks], [c.end for c in chunks])
    # spans: tokens 2..5 (inside chunk 0), 8..13 (split over chunks 0, 1), 15..45 (chunks 1..4)
    card = report_card(clo, chi, [2, 8, 15], [5, 13, 45], build_ms=1.5)
    assert card.n_chunks == 10 and card.size_mean == 10.0
    assert card.spans_split == 2
    assert card.chunks_per_span_mean == pytest.approx((1 + 2 + 4) / 3)
    assert card.tokens_per_span_mean == pytest.approx((10 + 20 + 40) / 3)


def test_compiled_and_numpy_engines_give_identical_counts():
    rng = np.random.default_rng(11)
    ev, ret = _random_run(rng, 300, line=2000)
    e = np.array(ev, dtype=np.int64).reshape(-1, 3)
    r = np.array(ret, dtype=np.int64).reshape(-1, 3)
    # shuffled input order: neither engine may rely on queries arriving grouped
    pe, pr = rng.permutation(len(e)), rng.permutation(len(r))
    args = (300, e[pe, 0], e[pe, 1], e[pe, 2], r[pr, 0], r[pr, 1], r[pr, 2])
    a, b = token_metrics(*args, engine="jit"), token_metrics(*args, engine="numpy")
    for name in ("recall", "precision", "iou", "evidence_tokens", "retrieved_tokens", "hit_tokens"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
