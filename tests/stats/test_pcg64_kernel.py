"""The compiled bootstrap draws PCG64 itself: it must consume numpy's stream exactly as
``Generator.integers(0, k, dtype=np.int32)`` does (same values, same rejections, same buffered half word, the
generator left in the same state), and its totals must equal counting numpy's own draws, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from ragassay.stats import bootstrap as boot
from ragassay.stats import bootstrap_deltas, resample_counts
from ragassay.stats.bootstrap import _pcg64_state, _set_pcg64_state, resampled_sums

kernel = pytest.importorskip("ragassay.stats._resample_kernel")

# 3 * 2**29 rejects a quarter of all words, 2**31 - 1 (the largest int32 bound) and 2 are the extremes
BOUNDS = (2, 3, 17, 1_000, 100_000, 3 * 2**29, 2**31 - 1)


def _generators(seed: int, warm: int):
    """Two generators in one state; ``warm`` odd leaves a buffered 32-bit half word in it."""
    a, b = np.random.default_rng(seed), np.random.default_rng(seed)
    for g in (a, b):
        g.integers(0, 5, warm, dtype=np.int32)
    return a, b


def _same_state(a: np.random.Generator, b: np.random.Generator) -> bool:
    return a.bit_generator.state == b.bit_generator.state


@pytest.mark.parametrize("k", BOUNDS)
@pytest.mark.parametrize("warm", [0, 1])
def test_draws_are_numpys_integers(k, warm):
    ref, gen = _generators(7 + k % 5, warm)
    want = ref.integers(0, k, size=(3, 1_001), dtype=np.int32)
    state = _pcg64_state(gen)
    got = np.empty((3, 1_001), dtype=np.int32)
    kernel.pcg64_draws(state, k, got)
    _set_pcg64_state(gen, state)
    assert np.array_equal(got, want)
    assert _same_state(gen, ref)
    # the stream continues where numpy's does
    assert np.array_equal(gen.integers(0, 1_000, 99), ref.integers(0, 1_000, 99))


def test_rejections_really_happen_at_a_quarter():
    # at k = 3 * 2**29 a quarter of the words are rejected, so numpy consumes about 4/3 words a draw: the
    # kernel must have taken the same number of extra words to leave the same state
    ref, gen = _generators(1, 0)
    before = ref.bit_generator.state["state"]["state"]
    ref.integers(0, 3 * 2**29, 30_000, dtype=np.int32)
    state = _pcg64_state(gen)
    kernel.pcg64_draws(state, 3 * 2**29, np.empty(30_000, dtype=np.int32))
    _set_pcg64_state(gen, state)
    assert _same_state(gen, ref) and ref.bit_generator.state["state"]["state"] != before


@pytest.mark.parametrize("k,m,rows", [(2, 1, 5), (17, 3, 9), (1_000, 8, 13), (20_011, 7, 6), (3 * 2**12, 2, 4)])
@pytest.mark.parametrize("warm", [0, 1])
def test_fused_totals_equal_counts_of_numpys_draws(k, m, rows, warm):
    ref, gen = _generators(k, warm)
    cols = np.rint(np.random.default_rng(m).normal(size=(m, k)) * 2.0**20)
    want = resample_counts(ref, k, rows) @ cols.T
    state = _pcg64_state(gen)
    got = np.empty((rows, m))
    # in two calls, to show the state carries over a chunk boundary that is not a multiple of four
    kernel.pcg64_resampled_totals(state, cols, got[: rows // 2])
    kernel.pcg64_resampled_totals(state, cols, got[rows // 2 :])
    _set_pcg64_state(gen, state)
    assert np.array_equal(got, want)
    assert _same_state(gen, ref)
    # and equal to summing the drawn columns one by one in integers
    draws = np.random.default_rng(k)
    draws.integers(0, 5, warm, dtype=np.int32)
    idx = draws.integers(0, k, size=(rows, k), dtype=np.int32)
    assert np.array_equal(got, cols.astype(np.int64).T[idx].sum(axis=1))


def test_resampled_sums_leave_the_generator_where_numpy_would(monkeypatch):
    monkeypatch.setenv("RAGASSAY_JIT", "1")
    s = np.random.default_rng(2).integers(-9, 9, size=(5_000, 3)).astype(float)
    ref, gen = np.random.default_rng(5), np.random.default_rng(5)
    want = resample_counts(ref, 5_000, 21) @ s
    assert np.array_equal(resampled_sums(gen, s, 21), want)
    assert _same_state(gen, ref)


def test_other_bit_generators_take_numpys_draws(monkeypatch):
    monkeypatch.setenv("RAGASSAY_JIT", "1")
    s = np.random.default_rng(2).integers(-9, 9, size=(500, 2)).astype(float)
    want = resample_counts(np.random.Generator(np.random.Philox(3)), 500, 10) @ s
    assert _pcg64_state(np.random.Generator(np.random.Philox(3))) is None
    assert np.array_equal(resampled_sums(np.random.Generator(np.random.Philox(3)), s, 10), want)


@pytest.mark.parametrize("clustered", [False, True])
def test_groups_resampled_side_by_side_equal_the_numpy_path(monkeypatch, clustered):
    # three validity groups, so the compiled path runs them on a pool; the numpy path runs them in turn
    rng = np.random.default_rng(9)
    d = rng.normal(size=(3_001, 5))
    d[rng.random(3_001) < 0.2, 1] = np.nan
    d[rng.random(3_001) < 0.3, 3:] = np.nan
    cl = rng.integers(0, 900, 3_001) if clustered else None
    monkeypatch.setattr(boot.os, "cpu_count", lambda: 3)
    got = {}
    for setting in ("0", "1"):
        monkeypatch.setenv("RAGASSAY_JIT", setting)
        got[setting] = bootstrap_deltas(d, clusters=cl, seed=3, n_resamples=403, method="bca",
                                        return_distribution=True)
    assert np.array_equal(got["0"].distribution, got["1"].distribution, equal_nan=True)
    assert got["0"].to_dict() == got["1"].to_dict()
    assert not np.isnan(got["1"].distribution).any()


def test_preload_loads_the_kernel_in_the_background_only_when_it_would_be_used(monkeypatch):
    import threading

    monkeypatch.setattr(boot, "_KERNEL", None)
    monkeypatch.setenv("RAGASSAY_JIT", "0")
    boot.preload_kernel(10**12)
    assert not any(t.name == "ragassay-jit" for t in threading.enumerate())
    monkeypatch.setenv("RAGASSAY_JIT", "auto")
    boot.preload_kernel(boot._JIT_DRAWS - 1)  # below the threshold the numpy path is cheaper: nothing loads
    assert not any(t.name == "ragassay-jit" for t in threading.enumerate()) and boot._KERNEL is None
    boot.preload_kernel(boot._JIT_DRAWS)
    for t in threading.enumerate():
        if t.name == "ragassay-jit":
            t.join(60)
    assert boot._KERNEL is kernel
