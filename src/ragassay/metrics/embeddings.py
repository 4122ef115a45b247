"""Intrinsic embedding diagnostics: they localize a fault fast but never replace retrieval metrics.

* **similarity gap**: per query, cos(q, positive) - mean cos(q, random passages); a model with no signal on
  the domain, or a broken query/passage prefix, shows a gap near zero. Mean with a paired bootstrap CI.
* **top-1 similarity distribution**: histogram of each query's best cosine over the passages; everything
  crowded at one value (anisotropy, score compression) means no fixed threshold can work.
* **near-duplicate collapse**: share of passages with another passage above a cosine threshold (0.99),
  and the share a dedup pass would remove (one kept per connected group).
* **truncation rate**: share of passages longer than the model's sequence limit (the silent comparison
  killer: a 512-token model fed 1,000-token chunks is measured on cut text).
* **drift probe**: one probe set embedded by two model versions; per probe item, the ranking of all other
  items by similarity under each version is compared (Spearman rho, Kendall tau-b), plus neighbour
  overlap@k and, when both versions share a space, the mean cosine between an item's two embeddings.

All inputs are rows of embeddings; cosine is computed on L2-normalized copies, so un-normalized input is fine.
"""

from __future__ import annotations

import math

import numpy as np

from ragassay.errors import InputError
from ragassay.stats.bootstrap import bootstrap_deltas

_BLOCK_BYTES = 64 * 1024 * 1024


def _unit_rows(x, name: str, dim: int | None = None) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
        raise InputError(f"{name}: need a non-empty 2-D array (rows x dims), got shape {a.shape}")
    if a.dtype.kind not in "fiu":
        raise InputError(f"{name}: need numeric vectors, got dtype {a.dtype}")
    a = a.astype(np.float64)
    if not np.isfinite(a).all():
        raise InputError(f"{name}: contains NaN or infinite values; re-embed those rows")
    if dim is not None and a.shape[1] != dim:
        raise InputError(f"{name}: {a.shape[1]} dims, expected {dim} like the other vectors")
    norms = np.linalg.norm(a, axis=1, keepdims=True)
    if (norms == 0).any():
        raise InputError(f"{name}: row {int(np.flatnonzero(norms[:, 0] == 0)[0])} is all zeros; a zero vector "
                         "has no direction (was the text empty?)")
    return a / norms


def similarity_gap(queries, positives, passages, *, n_random: int = 32, seed: int = 0,
                   n_resamples: int = 10_000, confidence: float = 0.95) -> dict:
    """Mean of d_i = cos(q_i, p_i) - mean_j cos(q_i, r_ij) over queries, with a bootstrap CI.

    ``positives[i]`` is query i's relevant passage; r_ij are ``n_random`` passages drawn with replacement
    from ``passages`` (seeded), so a random draw may occasionally be relevant, which only shrinks the gap.
    The interval resamples queries (:func:`ragassay.stats.bootstrap_deltas`, percentile).
    """
    q = _unit_rows(queries, "queries")
    p = _unit_rows(positives, "positives", q.shape[1])
    pool = _unit_rows(passages, "passages", q.shape[1])
    if p.shape[0] != q.shape[0]:
        raise InputError(f"positives: need one per query ({q.shape[0]}), got {p.shape[0]}")
    if n_random < 1:
        raise InputError(f"n_random must be at least 1, got {n_random}")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, pool.shape[0], size=(q.shape[0], n_random))
    pos = np.einsum("ij,ij->i", q, p)
    rand = np.einsum("ij,irj->ir", q, pool[draws]).mean(axis=1)
    d = pos - rand
    boot = bootstrap_deltas(d, metrics=["gap"], n_resamples=n_resamples, confidence=confidence, seed=seed)["gap"]
    return {"n": int(q.shape[0]), "n_random": n_random, "mean_positive": float(pos.mean()),
            "mean_random": float(rand.mean()), "gap": boot.delta, "ci_low": boot.ci_low, "ci_high": boot.ci_high,
            "confidence": confidence, "share_positive_below_random": float((d <= 0).mean())}


def _blocks(n_rows: int, n_cols: int):
    step = max(1, _BLOCK_BYTES // (8 * max(n_cols, 1)))
    for s in range(0, n_rows, step):
        yield s, min(n_rows, s + step)


def top1_similarity(queries, passages, *, bins: int = 20) -> dict:
    """Each query's highest cosine to any passage, as a histogram over [-1, 1] with its percentiles.

    ``spread`` = p95 - p5: a small spread around a high median is score compression.
    """
    q = _unit_rows(queries, "queries")
    pool = _unit_rows(passages, "passages", q.shape[1])
    if bins < 1:
        raise InputError(f"bins must be at least 1, got {bins}")
    top = np.concatenate([(q[a:b] @ pool.T).max(axis=1) for a, b in _blocks(q.shape[0], pool.shape[0])])
    counts, edges = np.histogram(np.clip(top, -1.0, 1.0), bins=bins, range=(-1.0, 1.0))
    p5, p50, p95 = np.percentile(top, [5, 50, 95])
    return {"n": int(top.size), "mean": float(top.mean()), "p5": float(p5), "p50": float(p50), "p95": float(p95),
            "spread": float(p95 - p5), "counts": counts.tolist(), "edges": edges.tolist()}


def duplicate_collapse(passages, *, threshold: float = 0.99) -> dict:
    """Near-duplicates among passages: pairs with cosine > ``threshold``.

    ``collapse_rate`` = share of passages with at least one near-duplicate; ``removable_rate`` = share a
    dedup pass would drop, keeping one passage per connected group of near-duplicates; ``n_groups`` counts
    the groups with two or more members.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    x = _unit_rows(passages, "passages")
    if not -1.0 <= threshold < 1.0:
        raise InputError(f"threshold must be in [-1, 1), got {threshold}")
    n = x.shape[0]
    rows, cols = [], []
    for a, b in _blocks(n, n):
        sim = x[a:b] @ x.T
        r, c = np.nonzero(sim > threshold)
        keep = c != r + a
        rows.append(r[keep] + a)
        cols.append(c[keep])
    r, c = np.concatenate(rows), np.concatenate(cols)
    has_dup = np.zeros(n, dtype=bool)
    has_dup[r] = True
    graph = coo_matrix((np.ones(r.size), (r, c)), shape=(n, n))
    n_comp, labels = connected_components(graph, directed=False)
    sizes = np.bincount(labels)
    return {"n": n, "threshold": threshold, "collapse_rate": float(has_dup.mean()),
            "removable_rate": float((n - n_comp) / n), "n_groups": int((sizes > 1).sum())}


def truncation_rate(token_lengths, max_tokens: int) -> dict:
    """Share of passages whose token count exceeds ``max_tokens`` (the model would cut them)."""
    lens = np.asarray(token_lengths)
    if lens.ndim != 1 or lens.size == 0 or lens.dtype.kind not in "iu" or (lens < 0).any():
        raise InputError("token_lengths: need a non-empty 1-D array of non-negative integer token counts")
    if max_tokens < 1:
        raise InputError(f"max_tokens must be at least 1, got {max_tokens}")
    over = lens > max_tokens
    return {"n": int(lens.size), "max_tokens": int(max_tokens), "truncated": int(over.sum()),
            "rate": float(over.mean()), "p95_tokens": float(np.percentile(lens, 95)), "max_seen": int(lens.max())}


def _rank_rows(s: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(s, axis=1)  # average ranks for ties, as scipy.stats.spearmanr


def _row_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    den = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (a * b).sum(axis=1) / den, np.nan)


def _row_kendall_b(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Kendall tau-b of each row pair, by the O(m^2) pair signs (m is a probe set, a few hundred at most):
    tau_b = (C - D) / sqrt((P - T_a)(P - T_b)), P all pairs, T_x the pairs tied in x (scipy's definition)."""
    n, m = a.shape
    out = np.empty(n)
    iu = np.triu_indices(m, 1)
    step = max(1, _BLOCK_BYTES // (8 * max(iu[0].size, 1)))
    for s in range(0, n, step):
        sa = np.sign(a[s : s + step, iu[1]] - a[s : s + step, iu[0]])
        sb = np.sign(b[s : s + step, iu[1]] - b[s : s + step, iu[0]])
        num = (sa * sb).sum(axis=1)
        den = np.sqrt(np.count_nonzero(sa, axis=1).astype(np.float64) * np.count_nonzero(sb, axis=1))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[s : s + step] = np.where(den > 0, num / den, np.nan)
    return out


def drift_probe(before, after, *, k: int = 10) -> dict:
    """Compare one probe set embedded by two model versions (row i of both is the same text).

    For each probe item i, its cosine to every other item under each version gives two rankings; the
    per-item Spearman rho and Kendall tau-b between them (scipy's definitions, average ranks for ties) and
    the neighbour overlap@k = |top-k before ∩ top-k after| / k are averaged over items (ties at the k-th
    place broken by row number). ``self_cosine`` = mean cos(before_i, after_i) when the two versions have the
    same dimension (a re-embed check of a hosted model), else None: spaces of different models are not
    comparable vector by vector, only through the rankings.
    """
    a = _unit_rows(before, "before")
    b = _unit_rows(after, "after")
    n = a.shape[0]
    if b.shape[0] != n:
        raise InputError(f"after: need the same probe items as before ({n} rows), got {b.shape[0]}")
    if n < 3:
        raise InputError(f"drift probe needs at least 3 probe items to rank neighbours, got {n}")
    k = int(min(k, n - 1))
    if k < 1:
        raise InputError(f"k must be at least 1, got {k}")
    sa, sb = a @ a.T, b @ b.T
    off = ~np.eye(n, dtype=bool)
    sa_o, sb_o = sa[off].reshape(n, n - 1), sb[off].reshape(n, n - 1)
    rho = _row_pearson(_rank_rows(sa_o), _rank_rows(sb_o))
    tau = _row_kendall_b(sa_o, sb_o)
    cols = np.broadcast_to(np.arange(n - 1), sa_o.shape)
    top_a = np.lexsort((cols, -sa_o), axis=1)[:, :k]
    top_b = np.lexsort((cols, -sb_o), axis=1)[:, :k]
    member = np.zeros((n, n - 1), dtype=bool)
    np.put_along_axis(member, top_a, True, axis=1)
    overlap = np.take_along_axis(member, top_b, axis=1).sum(axis=1) / k
    self_cos = float(np.einsum("ij,ij->i", a, b).mean()) if a.shape[1] == b.shape[1] else None
    return {"n": n, "k": k, "spearman": _nanmean(rho), "kendall": _nanmean(tau), "overlap_at_k": float(overlap.mean()),
            "overlap_min": float(overlap.min()), "self_cosine": self_cos,
            "n_undefined": int(np.isnan(rho).sum())}


def _nanmean(x: np.ndarray) -> float:
    ok = x[~np.isnan(x)]
    return float(ok.mean()) if ok.size else math.nan
