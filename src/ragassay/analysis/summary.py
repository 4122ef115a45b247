"""Aggregates of a stored run, always recomputed from its rows: per-stage and per-stratum means with
defined/undefined counts, the judged fraction, and latency percentiles over the measured requests."""

from __future__ import annotations

import collections
import math

import numpy as np

from ragassay.metrics.agent import AGENT_METRICS
from ragassay.metrics.claims import CLAIM_METRICS

STAGES = ("retrieve", "rerank", "ranking", "context", "generate", "agent")
# RAGChecker's retriever diagnostics grade the context the generator was handed; the other claim metrics grade
# the answer
_CONTEXT_CLAIMS = frozenset({"claim_recall", "context_precision_claims"})
_GENERATE = {"answer_f1", "answer_em", "abstention_recall", "over_refusal", "refused", "error",
             "citation_validity",
             # judge metrics grade the answer, so they belong to the generate stage
             "faithfulness", "citation_precision", "citation_recall", "numeric_consistency",
             "answer_relevance", "correctness", "nugget_v_strict", "nugget_v", "nugget_a_strict", "nugget_a"}


def stage_of(metric: str) -> str:
    if metric in _GENERATE or (metric in CLAIM_METRICS and metric not in _CONTEXT_CLAIMS):
        return "generate"
    if metric in AGENT_METRICS or metric.startswith("hop_sufficiency@"):
        return "agent"
    if metric.startswith("rerank_") or metric.endswith("@final_k"):
        return "rerank"
    if metric.endswith("_depth"):
        return "retrieve"
    if metric in ("recall@context", "context_tokens") or metric in _CONTEXT_CLAIMS:
        return "context"
    return "ranking"


def _column(table, name: str) -> np.ndarray:
    """A float column as numpy with nulls as NaN (undefined and unrecorded are both "no value")."""
    import pyarrow as pa

    col = table.column(name).cast(pa.float64())
    return col.to_numpy() if col.null_count == 0 else col.fill_null(np.nan).to_numpy()


def _codes(table, name: str) -> tuple[np.ndarray, list[str]]:
    """Integer codes and labels of a string column, labels in order of first appearance."""
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(table.column(name)).combine_chunks()
    idx = enc.indices if enc.null_count == 0 else pc.fill_null(enc.indices, -1)  # a null has code -1
    return idx.to_numpy(zero_copy_only=False).astype(np.int64), enc.dictionary.to_pylist()


def _group_means(codes: np.ndarray, values: np.ndarray, n_groups: int):
    """Per group: NaN-skipping mean, defined count, undefined count."""
    ok = ~np.isnan(values)
    n_def = np.bincount(codes[ok], minlength=n_groups)
    n_all = np.bincount(codes, minlength=n_groups)
    sums = np.bincount(codes[ok], weights=values[ok], minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(n_def > 0, sums / np.maximum(n_def, 1), np.nan)
    return means, n_def, n_all - n_def, n_all


def _nanmean(values: np.ndarray) -> tuple[float, int, int]:
    ok = ~np.isnan(values)
    return (float(values[ok].mean()) if ok.any() else math.nan), int(ok.sum()), int((~ok).sum())


def run_summary(results) -> dict:
    """``results``: the run's result table (pyarrow), sorted by (query_id, trial, metric) as
    :meth:`Store.results` returns it. Returns metrics by stage and by stratum.

    Columnar throughout (group codes and ``bincount``), so a 100,000-query run summarizes in well under a
    second; a mean skips undefined (NaN/NULL) values and reports how many there were.
    """
    n_rows = results.num_rows
    m_codes, metric_names = _codes(results, "metric")
    s_codes, stratum_names = _codes(results, "stratum")
    values = _column(results, "value")
    means, n_def, n_undef, _ = _group_means(m_codes, values, len(metric_names))
    metrics = [{"metric": m, "stage": stage_of(m), "mean": float(means[j]), "n_defined": int(n_def[j]),
                "n_undefined": int(n_undef[j])} for j, m in enumerate(metric_names)]
    metrics.sort(key=lambda r: (STAGES.index(r["stage"]), r["metric"]))
    strata = sorted(stratum_names)
    rank = np.argsort(np.argsort(np.asarray(stratum_names, dtype=object)))  # label -> sorted position
    n_s = len(stratum_names)
    # a row without a stratum counts in its metric's mean and in no stratum's
    has = s_codes >= 0
    if not has.all():
        m_cell, s_cell, v_cell = m_codes[has], s_codes[has], values[has]
    else:
        m_cell, s_cell, v_cell = m_codes, s_codes, values
    cell = m_cell * n_s + (rank[s_cell] if n_s else s_cell)
    c_means, c_def, c_undef, c_all = _group_means(cell, v_cell, len(metric_names) * n_s)
    per_stratum = [{"metric": m, "stratum": s, "mean": float(c_means[j * n_s + k]),
                    "n_defined": int(c_def[j * n_s + k]), "n_undefined": int(c_undef[j * n_s + k])}
                   for j, m in enumerate(metric_names) for k, s in enumerate(strata) if c_all[j * n_s + k]]
    # the first row of each (query, trial) carries that item's latency and judged fraction
    q_codes, _ = _codes(results, "query_id")
    trial = results.column("trial").to_numpy().astype(np.int64)
    key = q_codes * (int(trial.max(initial=0)) + 1) + trial
    _, first = np.unique(key, return_index=True)
    first.sort()
    lat = _column(results, "latency_ms")[first]
    lat = lat[~np.isnan(lat)]
    latency = ({"p50": float(np.percentile(lat, 50)), "p95": float(np.percentile(lat, 95)),
                "p99": float(np.percentile(lat, 99)), "n": int(len(lat))} if len(lat) else None)
    # judged fraction: share of a row's top final_k units touching a labelled span (NULL for an empty list)
    jf_mean, jf_n, jf_undef = _nanmean(_column(results, "judged_fraction")[first])
    return {"metrics": metrics, "strata": strata, "per_stratum": per_stratum, "latency_ms": latency,
            "judged_fraction": {"mean": jf_mean if jf_n else None, "n": jf_n, "n_undefined": jf_undef},
            "n_rows": n_rows, "n_items": int(len(first))}


def _distinct_sorted(t) -> bool:
    """True when no two adjacent rows of ``t`` (sorted by query_id, trial) share both."""
    import pyarrow.compute as pc

    if t.num_rows < 2:
        return True
    q, tr = t.column("query_id"), t.column("trial")
    same = pc.and_(pc.equal(q[1:], q[:-1]), pc.equal(tr[1:], tr[:-1]))
    return not pc.any(same).as_py()


def _sorted_metric_rows(con, run_id: str, names: list[str]):
    """Each metric's rows (query_id, trial, value, stratum; the first metric's with latency_ms and
    judged_fraction), sorted by (query_id, trial), in the order of ``names``. Two are fetched at a time,
    each on a cursor of its own (DuckDB runs the two sorts side by side, outside the GIL); at most two
    metrics' rows wait beside the one being summed."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    local, cursors = threading.local(), []
    lock = threading.Lock()

    def fetch(i: int):
        cur = getattr(local, "cursor", None)
        if cur is None:
            cur = local.cursor = con.cursor()
            with lock:
                cursors.append(cur)
        extra = ", latency_ms, judged_fraction" if i == 0 else ""
        return cur.sql(f"SELECT query_id, trial, value, stratum{extra} FROM results WHERE run_id = $r AND "
                       "metric = $m ORDER BY query_id, trial", params={"r": run_id, "m": names[i]}).to_arrow_table()

    try:
        with ThreadPoolExecutor(2, thread_name_prefix="ragassay-summary") as pool:
            ahead: collections.deque = collections.deque()
            for i in range(len(names)):
                while len(ahead) < 2 and i + len(ahead) < len(names):
                    ahead.append(pool.submit(fetch, i + len(ahead)))
                yield ahead.popleft().result()
    finally:
        for cur in cursors:
            cur.close()


def stored_run_summary(store, run_id: str) -> dict:
    """:func:`run_summary` of a stored run (full ``run_id``), equal to ``run_summary(store.results(run_id))``
    bit for bit but read one metric at a time, so memory holds one metric's rows and not the whole run
    (at 100,000 queries x 23 metrics the sorted table and the arrays beside it cost ~1 GB).

    The equality is by construction: ``bincount`` sums each group's values in row order, and a metric's
    rows sorted by (query_id, trial) are that metric's rows of the whole sorted table in the same order;
    a metric's position among the labels is where it first appears in that table, i.e. the order of
    (first query_id, first trial, metric); an item's latency and judged fraction come from its first row,
    the one with the smallest metric name. When every metric has rows for the same items (as a scored run
    does), that is the row of the first metric name, read with that metric's values; otherwise one more
    query picks each item's first row.
    """
    import pyarrow as pa

    con = store.connection
    names = [m for (m,) in con.execute("SELECT DISTINCT metric FROM results WHERE run_id = ? ORDER BY metric",
                                       [run_id]).fetchall()]
    first_seen, per_metric, per_cell = [], {}, {}
    n_rows = 0
    firsts = items = None  # the first metric's rows, and its (query_id, trial) columns while all metrics match
    for m, t in zip(names, _sorted_metric_rows(con, run_id, names), strict=True):
        if firsts is None:
            firsts = t.select(["latency_ms", "judged_fraction"])
            items = (t.column("query_id"), t.column("trial")) if _distinct_sorted(t) else None
        elif items is not None and not (t.column("query_id").equals(items[0]) and t.column("trial").equals(items[1])):
            items = None
        n_rows += t.num_rows
        first_seen.append((t.column("query_id")[0].as_py(), t.column("trial")[0].as_py(), m))
        values = _column(t, "value")
        means, n_def, n_undef, _ = _group_means(np.zeros(len(values), dtype=np.int64), values, 1)
        per_metric[m] = (float(means[0]), int(n_def[0]), int(n_undef[0]))
        s_codes, s_names = _codes(t, "stratum")
        has = s_codes >= 0
        c_means, c_def, c_undef, c_all = _group_means(s_codes[has], values[has], len(s_names))
        per_cell[m] = {s: (float(c_means[k]), int(c_def[k]), int(c_undef[k]))
                       for k, s in enumerate(s_names) if c_all[k]}
        del t, values
    order = [m for _, _, m in sorted(first_seen)]
    metrics = [{"metric": m, "stage": stage_of(m), "mean": per_metric[m][0], "n_defined": per_metric[m][1],
                "n_undefined": per_metric[m][2]} for m in order]
    metrics.sort(key=lambda r: (STAGES.index(r["stage"]), r["metric"]))
    strata = sorted({s for cells in per_cell.values() for s in cells})
    per_stratum = [{"metric": m, "stratum": s, "mean": per_cell[m][s][0], "n_defined": per_cell[m][s][1],
                    "n_undefined": per_cell[m][s][2]} for m in order for s in strata if s in per_cell[m]]
    if items is None:  # the metrics' items differ (or there are no rows): each item's first row, by query
        # a struct is never NULL, so arg_min keeps the first row's NULL latency or judged fraction as NULL
        f = con.sql("SELECT arg_min({'l': latency_ms, 'j': judged_fraction}, metric) AS f FROM results "
                    "WHERE run_id = $r GROUP BY query_id, trial ORDER BY query_id, trial",
                    params={"r": run_id}).to_arrow_table().column("f").combine_chunks()
        firsts = pa.table({"latency_ms": f.field("l"), "judged_fraction": f.field("j")})
    lat = _column(firsts, "latency_ms")
    lat = lat[~np.isnan(lat)]
    latency = ({"p50": float(np.percentile(lat, 50)), "p95": float(np.percentile(lat, 95)),
                "p99": float(np.percentile(lat, 99)), "n": int(len(lat))} if len(lat) else None)
    jf_mean, jf_n, jf_undef = _nanmean(_column(firsts, "judged_fraction"))
    return {"metrics": metrics, "strata": strata, "per_stratum": per_stratum, "latency_ms": latency,
            "judged_fraction": {"mean": jf_mean if jf_n else None, "n": jf_n, "n_undefined": jf_undef},
            "n_rows": n_rows, "n_items": firsts.num_rows}
