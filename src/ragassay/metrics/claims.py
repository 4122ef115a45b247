"""Claim-level diagnostics of a RAG answer (RAGChecker's eleven metrics and a five-way claim breakdown).

Reference: Ru et al. 2024, "RAGChecker: A Fine-grained Framework for Diagnosing Retrieval-Augmented
Generation" (NeurIPS 2024 Datasets and Benchmarks), and its reference implementation ``ragchecker/computation.py``
(version 0.1.9), which these functions match wherever its result is defined.

The input of one (query, trial) is a :class:`ClaimTable`: the ground-truth claims (from the reference answer)
and the response claims, each with a three-way verdict — ``entailed``, ``neutral`` or ``contradicted``, kept
apart, never merged — against every retrieved unit; the verdict of each response claim against the reference
answer (its *correctness*) and of each ground-truth claim against the response; and which units are relevant
by the golden spans. Like RAGChecker, only ``entailed`` counts as support or correctness; ``contradicted`` is
kept for diagnosis (``analyze claims`` shows it) and does not move the eleven numbers.

With ``E_gu`` (ground-truth claim g entailed by unit u), ``E_ru`` (response claim r entailed by unit u),
``C_r`` (r entailed by the reference), ``H_g`` (g entailed by the response), ``rel_u`` (unit u relevant):

=============================  ======================================================================
``claims_precision``           mean_r C_r                                      (RAGChecker precision)
``claims_recall``              mean_g H_g                                      (RAGChecker recall)
``claims_f1``                  2PR / (P + R); 0 when P + R = 0
``claim_recall``               mean_g max_u E_gu                               (retriever)
``context_precision_claims``   mean_u rel_u                                    (retriever)
``context_utilization``        sum_g (max_u E_gu and H_g) / sum_g max_u E_gu
``noise_sensitivity_relevant``   mean_r (not C_r and max_u (rel_u and E_ru))
``noise_sensitivity_irrelevant`` mean_r (not C_r and max_u (not rel_u and E_ru) and not max_u (rel_u and E_ru))
``hallucination``              mean_r (not C_r and not max_u E_ru)
``self_knowledge``             mean_r (C_r and not max_u E_ru)
``faithfulness_claims``        mean_r max_u E_ru
=============================  ======================================================================

``rel_u`` follows the relevance rule: ``claims`` (RAGChecker's: a unit is relevant when it entails at least one
ground-truth claim, ``max_g E_gu``) or ``spans`` (ragassay's labels: the unit overlaps a golden evidence span).
The rule is a pin of the judged run.

Where RAGChecker writes 0, ragassay writes undefined (NaN, counted with its reason):

=============================  ==============================================  ===================
metric                         condition                                       reason
=============================  ==============================================  ===================
every metric                   a judge call for the item failed                ``judge_<outcome>``
claims_precision               no reference answer / no response claims        ``no_reference`` /
                                                                               ``no_response_claims``
claims_recall                  no ground-truth claims / not answered           ``no_gt_claims`` /
                                                                               ``not_answered``
claims_f1                      precision or recall undefined                   their reason
claim_recall                   no ground-truth claims / no retrieved units     ``no_gt_claims`` /
                                                                               ``no_retrieved_units``
context_precision_claims       no retrieved units / rule ``claims`` and no     ``no_retrieved_units`` /
                               ground-truth claims                             ``no_gt_claims``
context_utilization            as claim_recall, or no claim recalled           ``no_recalled_claims``
noise_sensitivity_*            no response claims / units / reference, or      as named
                               rule ``claims`` and no ground-truth claims
hallucination, self_knowledge  no response claims / units / reference          as named
faithfulness_claims            no response claims / no retrieved units         as named
=============================  ==============================================  ===================

No retrieved units makes every retriever and generator metric undefined (RAGChecker's guards give 0): they
diagnose how context was retrieved and used, and a closed-book answer has none to diagnose. An unanswered
query (abstained, refused, error) has no response claims, so every response-side metric is undefined with the
reason ``not_answered``, while the retriever metrics stay defined.

The five-way breakdown puts every response claim in exactly one class (so the shares sum to 1 over the
response claims of a defined item): ``correct_relevant`` (C_r and supported by a relevant unit),
``correct_irrelevant`` (C_r, supported only by irrelevant units), ``self_knowledge`` (C_r, supported by no
unit), ``noise`` (not C_r, supported by some unit: the two noise sensitivities) and ``hallucination`` (not C_r,
supported by no unit). It is undefined for an item without a reference, without response claims, or whose
relevance is unknown (rule ``claims`` and no ground-truth claims).

Every ``entailed`` cell carries the verified character span ``[start, end)`` of its quote in the unit's
document; :func:`support_of` returns it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragassay.errors import InputError

ENTAILED, NEUTRAL, CONTRADICTED = "entailed", "neutral", "contradicted"
VERDICTS = (NEUTRAL, ENTAILED, CONTRADICTED)  # the int8 code of a verdict is its index here
_CODE = {v: i for i, v in enumerate(VERDICTS)}
CLAIM_METRICS = ("claims_precision", "claims_recall", "claims_f1", "claim_recall", "context_precision_claims",
                 "context_utilization", "noise_sensitivity_relevant", "noise_sensitivity_irrelevant",
                 "hallucination", "self_knowledge", "faithfulness_claims")
# RAGChecker's key for each metric (ragchecker.metrics)
RAGCHECKER_NAMES = dict(zip(CLAIM_METRICS, (
    "precision", "recall", "f1", "claim_recall", "context_precision", "context_utilization",
    "noise_sensitivity_in_relevant", "noise_sensitivity_in_irrelevant", "hallucination", "self_knowledge",
    "faithfulness"), strict=True))
BREAKDOWN = ("correct_relevant", "correct_irrelevant", "self_knowledge", "noise", "hallucination")
RELEVANCE_RULES = ("claims", "spans")
# The claim metrics where lower is better (for compare and gate directions): the wrong-claim shares, and the
# share of correct claims the retrieved context did not support (RAGChecker reports all four as lower-better
# diagnostics of a context-grounded generator).
LOWER_IS_BETTER = frozenset({"noise_sensitivity_relevant", "noise_sensitivity_irrelevant", "hallucination",
                             "self_knowledge"})


@dataclass(frozen=True)
class ClaimTable:
    """The claim verdicts of one (query, trial). Build it with :func:`claim_table`, which validates it.

    Verdict matrices hold int8 codes (index into ``VERDICTS``); quote arrays hold the ``[start, end)`` of the
    verified quote of every entailed cell in the unit's document, -1 elsewhere."""

    query_id: str
    trial: int
    unit_ids: tuple[str, ...]
    unit_docs: tuple[str, ...]
    unit_spans: np.ndarray        # (u, 2) int64
    span_relevant: np.ndarray     # (u,) bool
    gt_claims: tuple[str, ...]
    response_claims: tuple[str, ...]
    gt_units: np.ndarray          # (g, u) int8
    response_units: np.ndarray    # (r, u) int8
    response_vs_reference: np.ndarray  # (r,) int8
    gt_vs_response: np.ndarray    # (g,) int8
    gt_quotes: np.ndarray         # (g, u, 2) int64
    response_quotes: np.ndarray   # (r, u, 2) int64
    has_reference: bool = True
    no_response: str | None = None  # "not_answered" (or "generation_error") when there is no answer
    failed: str | None = None       # a judge call failed: every metric undefined with this reason
    unit_texts: tuple[str, ...] = ()
    stratum: str | None = None
    trace_id: str | None = None


def _codes(labels: Any, shape: tuple[int, ...], what: str, where: str) -> np.ndarray:
    arr = np.asarray(labels, dtype=object).reshape(-1) if shape and np.prod(shape) else np.zeros(0, dtype=object)
    if arr.size != int(np.prod(shape)):
        raise InputError(f"{where}: {what} has {arr.size} verdicts, expected {int(np.prod(shape))} (shape {shape})")
    bad = sorted({str(v) for v in arr if v not in _CODE})
    if bad:
        raise InputError(f"{where}: {what} holds {bad}; a claim verdict is one of {list(VERDICTS)}")
    return np.fromiter((_CODE[v] for v in arr), dtype=np.int8, count=arr.size).reshape(shape)


def _quotes(quotes: Any, codes: np.ndarray, spans: np.ndarray, what: str, where: str) -> np.ndarray:
    g, u = codes.shape
    out = np.full((g, u, 2), -1, dtype=np.int64)
    if quotes is not None:
        q = np.asarray(quotes, dtype=np.int64)
        if q.size:
            out = q.reshape(g, u, 2)
    ent = codes == _CODE[ENTAILED]
    missing = ent & (out[..., 0] < 0)
    if missing.any():
        i, j = map(int, np.argwhere(missing)[0])
        raise InputError(f"{where}: {what}[{i}][{j}] is entailed but has no verified quote span; every supported "
                         "claim must point to a span of the unit (downgrade unverified support to neutral)")
    stray = ~ent & (out[..., 0] >= 0)
    if stray.any():
        i, j = map(int, np.argwhere(stray)[0])
        raise InputError(f"{where}: {what}[{i}][{j}] has a quote span but is not entailed")
    inside = (out[..., 0] >= spans[None, :, 0]) & (out[..., 1] <= spans[None, :, 1]) & (out[..., 0] < out[..., 1])
    outside = ent & ~inside
    if outside.any():
        i, j = map(int, np.argwhere(outside)[0])
        raise InputError(f"{where}: {what}[{i}][{j}] quote span {out[i, j].tolist()} is not inside unit {j}'s "
                         f"span {spans[j].tolist()}")
    return out


def claim_table(query_id: str, trial: int, *, units: Sequence[tuple[str, str, int, int]],
                span_relevant: Sequence[bool], gt_claims: Sequence[str], response_claims: Sequence[str],
                gt_units: Any, response_units: Any, response_vs_reference: Sequence[str],
                gt_vs_response: Sequence[str], gt_quotes: Any = None, response_quotes: Any = None,
                has_reference: bool = True, no_response: str | None = None, failed: str | None = None,
                unit_texts: Sequence[str] = (), stratum: str | None = None,
                trace_id: str | None = None) -> ClaimTable:
    """A validated :class:`ClaimTable`. ``units`` are ``(unit_id, doc_id, start, end)``; verdicts are label
    strings (``gt_units[g][u]``, ``response_units[r][u]``); quotes ``[g][u] = (start, end)`` or None for
    a cell that is not entailed. Raises ``InputError`` naming the item and the cell for any inconsistency."""
    where = f"claim table {query_id} trial {trial}"
    g, r, u = len(gt_claims), len(response_claims), len(units)
    spans = np.asarray([[s, e] for _, _, s, e in units], dtype=np.int64).reshape(u, 2)
    rel = np.asarray(span_relevant, dtype=bool).reshape(-1)
    if rel.size != u:
        raise InputError(f"{where}: span_relevant has {rel.size} entries for {u} units")
    if no_response is not None and r:
        raise InputError(f"{where}: an item with no response ({no_response}) cannot have response claims")
    if not has_reference and g:
        raise InputError(f"{where}: ground-truth claims without a reference answer")
    gu = _codes(gt_units, (g, u), "gt_units", where)
    ru = _codes(response_units, (r, u), "response_units", where)

    def cells(q):
        if q is None:
            return None
        return [[(-1, -1) if c is None else tuple(c) for c in row] for row in q]

    return ClaimTable(
        query_id=query_id, trial=int(trial), unit_ids=tuple(x[0] for x in units), unit_docs=tuple(x[1] for x in units),
        unit_spans=spans, span_relevant=rel, gt_claims=tuple(gt_claims), response_claims=tuple(response_claims),
        gt_units=gu, response_units=ru,
        response_vs_reference=_codes(response_vs_reference, (r,), "response_vs_reference", where),
        gt_vs_response=_codes(gt_vs_response, (g,), "gt_vs_response", where),
        gt_quotes=_quotes(cells(gt_quotes), gu, spans, "gt_quotes", where),
        response_quotes=_quotes(cells(response_quotes), ru, spans, "response_quotes", where),
        has_reference=has_reference, no_response=no_response, failed=failed, unit_texts=tuple(unit_texts),
        stratum=stratum, trace_id=trace_id)


# ---------------------------------------------------------------------------------------------- scoring
@dataclass
class ClaimScores:
    """Per item, the eleven metrics (``values[i, k]`` for ``CLAIM_METRICS[k]``, NaN where undefined, with
    ``reasons[i][k]``) and the five-way breakdown counts (``breakdown[i]``, -1 where undefined)."""

    query_ids: list[str]
    trials: list[int]
    values: np.ndarray
    reasons: list[list[str | None]]
    breakdown: np.ndarray
    breakdown_reasons: list[str | None]
    undefined: Counter = field(default_factory=Counter)

    def mean(self, metric: str) -> tuple[float, int, int]:
        """(mean over defined values, defined count, undefined count) of one metric."""
        v = self.values[:, CLAIM_METRICS.index(metric)]
        ok = ~np.isnan(v)
        return (float(v[ok].mean()) if ok.any() else math.nan, int(ok.sum()), int((~ok).sum()))

    def pooled_breakdown(self) -> tuple[np.ndarray, int]:
        """(share of each class over every response claim of the defined items, claims counted)."""
        ok = self.breakdown[:, 0] >= 0
        total = self.breakdown[ok].sum(axis=0)
        n = int(total.sum())
        return (total / n if n else np.full(len(BREAKDOWN), np.nan)), n


def relevant_units(t: ClaimTable, relevance: str) -> np.ndarray | None:
    """The relevant units under the rule, or None when the rule cannot say (``claims`` without gt claims)."""
    if relevance == "spans":
        return t.span_relevant
    if not t.gt_claims:
        return None
    return (t.gt_units == _CODE[ENTAILED]).any(axis=0)


def claim_classes(t: ClaimTable, relevance: str = "claims") -> tuple[np.ndarray | None, str | None]:
    """The five-way class of each response claim (index into ``BREAKDOWN``), or None with the reason."""
    why = _breakdown_reason(t, relevance)
    if why is not None:
        return None, why
    rel = relevant_units(t, relevance)
    ent = t.response_units == _CODE[ENTAILED]
    sup_rel = (ent & rel[None, :]).any(axis=1)
    sup_any = ent.any(axis=1)
    correct = t.response_vs_reference == _CODE[ENTAILED]
    cls = np.where(correct, np.where(sup_rel, 0, np.where(sup_any, 1, 2)), np.where(sup_any, 3, 4))
    return cls.astype(np.int8), None


def _breakdown_reason(t: ClaimTable, relevance: str) -> str | None:
    if t.failed:
        return t.failed
    if t.no_response:
        return t.no_response
    if not t.has_reference:
        return "no_reference"
    if not t.response_claims:
        return "no_response_claims"
    if relevance == "claims" and not t.gt_claims:
        return "no_gt_claims"
    return None


def _item_metrics(t: ClaimTable, relevance: str) -> tuple[list[float], list[str | None]]:
    nan = math.nan
    vals = dict.fromkeys(CLAIM_METRICS, nan)
    why: dict[str, str | None] = dict.fromkeys(CLAIM_METRICS)
    if t.failed:
        return [nan] * len(CLAIM_METRICS), [t.failed] * len(CLAIM_METRICS)
    g, r, u = len(t.gt_claims), len(t.response_claims), len(t.unit_ids)
    E = _CODE[ENTAILED]
    no_resp = t.no_response or "no_response_claims"
    gt_ent = t.gt_units == E
    resp_ent = t.response_units == E
    correct = t.response_vs_reference == E
    held = t.gt_vs_response == E

    def need(metric: str, *checks: tuple[bool, str]) -> bool:
        for ok, reason in checks:
            if not ok:
                why[metric] = reason
                return False
        return True

    ref = (t.has_reference, "no_reference")
    has_gt = (g > 0, "no_reference" if not t.has_reference else "no_gt_claims")
    has_r = (r > 0, no_resp)
    answered = (t.no_response is None, t.no_response or "")
    has_u = (u > 0, "no_retrieved_units")
    rel = relevant_units(t, relevance)
    rel_known = (rel is not None, "no_reference" if not t.has_reference else "no_gt_claims")
    if need("claims_precision", ref, has_r):
        vals["claims_precision"] = float(correct.mean())
    if need("claims_recall", has_gt, answered):
        vals["claims_recall"] = float(held.mean())
    p, rc = vals["claims_precision"], vals["claims_recall"]
    if math.isnan(p) or math.isnan(rc):
        why["claims_f1"] = why["claims_precision"] or why["claims_recall"]
    else:
        vals["claims_f1"] = 2 * p * rc / (p + rc) if p + rc > 0 else 0.0
    recalled = gt_ent.any(axis=1) if u else np.zeros(g, dtype=bool)
    if need("claim_recall", has_gt, has_u):
        vals["claim_recall"] = float(recalled.mean())
    if need("context_precision_claims", has_u, rel_known):
        vals["context_precision_claims"] = float(rel.mean())
    if need("context_utilization", has_gt, has_u, answered, (recalled.any(), "no_recalled_claims")):
        vals["context_utilization"] = float((recalled & held).sum() / recalled.sum())
    if need("noise_sensitivity_relevant", has_r, has_u, ref, rel_known):
        sup_rel = (resp_ent & rel[None, :]).any(axis=1)
        sup_irr = (resp_ent & ~rel[None, :]).any(axis=1) & ~sup_rel
        vals["noise_sensitivity_relevant"] = float((~correct & sup_rel).mean())
        vals["noise_sensitivity_irrelevant"] = float((~correct & sup_irr).mean())
    else:
        why["noise_sensitivity_irrelevant"] = why["noise_sensitivity_relevant"]
    if need("hallucination", has_r, has_u, ref):
        unsup = ~resp_ent.any(axis=1)
        vals["hallucination"] = float((unsup & ~correct).mean())
        vals["self_knowledge"] = float((unsup & correct).mean())
    else:
        why["self_knowledge"] = why["hallucination"]
    if need("faithfulness_claims", has_r, has_u):
        vals["faithfulness_claims"] = float(resp_ent.any(axis=1).mean())
    return [vals[m] for m in CLAIM_METRICS], [why[m] if math.isnan(vals[m]) else None for m in CLAIM_METRICS]


def claim_metrics(tables: Sequence[ClaimTable], relevance: str = "claims") -> ClaimScores:
    """The eleven claim metrics and the five-way breakdown of every item (see the module docstring for the
    formulas, the relevance rule and where the result is undefined). Ru et al. 2024 (RAGChecker)."""
    if relevance not in RELEVANCE_RULES:
        raise InputError(f"relevance rule {relevance!r}: choose one of {list(RELEVANCE_RULES)}")
    n = len(tables)
    values = np.full((n, len(CLAIM_METRICS)), np.nan)
    reasons: list[list[str | None]] = []
    breakdown = np.full((n, len(BREAKDOWN)), -1, dtype=np.int64)
    b_reasons: list[str | None] = []
    undefined: Counter = Counter()
    for i, t in enumerate(tables):
        v, why = _item_metrics(t, relevance)
        values[i] = v
        reasons.append(why)
        undefined.update((m, w) for m, w in zip(CLAIM_METRICS, why, strict=True) if w is not None)
        cls, bwhy = claim_classes(t, relevance)
        if cls is not None:
            breakdown[i] = np.bincount(cls, minlength=len(BREAKDOWN))
        b_reasons.append(bwhy)
    return ClaimScores([t.query_id for t in tables], [t.trial for t in tables], values, reasons, breakdown,
                       b_reasons, undefined)


def support_of(t: ClaimTable, side: str, i: int, relevance: str = "claims") -> tuple[int, str, int, int] | None:
    """(unit index, doc_id, start, end) of the verified quote supporting claim ``i`` of ``side``
    (``response`` or ``gt``): the first entailing relevant unit, else the first entailing unit; None if no
    unit entails it."""
    codes, quotes = (t.response_units, t.response_quotes) if side == "response" else (t.gt_units, t.gt_quotes)
    ent = np.flatnonzero(codes[i] == _CODE[ENTAILED])
    if not ent.size:
        return None
    rel = relevant_units(t, relevance)
    pick = int(ent[0])
    if rel is not None and rel[ent].any():
        pick = int(ent[rel[ent]][0])
    s, e = quotes[i, pick]
    return pick, t.unit_docs[pick], int(s), int(e)


# ---------------------------------------------------------------------------------------------- storage
def table_to_dict(t: ClaimTable) -> dict[str, Any]:
    """A JSON-ready dict of ``t`` (verdicts as labels, quotes as ``[start, end]`` or null)."""

    def labels(a):
        return [VERDICTS[c] for c in a.reshape(-1)] if a.ndim == 1 else [[VERDICTS[c] for c in row] for row in a]

    def quotes(q, codes):
        return [[None if c != _CODE[ENTAILED] else [int(q[i, j, 0]), int(q[i, j, 1])]
                 for j, c in enumerate(row)] for i, row in enumerate(codes)]

    return {"query_id": t.query_id, "trial": t.trial,
            "units": [[uid, d, int(s), int(e)] for uid, d, (s, e) in zip(t.unit_ids, t.unit_docs, t.unit_spans,
                                                                       strict=True)],
            "span_relevant": [bool(x) for x in t.span_relevant], "gt_claims": list(t.gt_claims),
            "response_claims": list(t.response_claims), "gt_units": labels(t.gt_units),
            "response_units": labels(t.response_units),
            "response_vs_reference": labels(t.response_vs_reference), "gt_vs_response": labels(t.gt_vs_response),
            "gt_quotes": quotes(t.gt_quotes, t.gt_units), "response_quotes": quotes(t.response_quotes,
                                                                                   t.response_units),
            "has_reference": t.has_reference, "no_response": t.no_response, "failed": t.failed,
            "unit_texts": list(t.unit_texts), "stratum": t.stratum, "trace_id": t.trace_id}


def table_from_dict(d: Mapping[str, Any]) -> ClaimTable:
    """The :class:`ClaimTable` stored by :func:`table_to_dict` (validated again)."""
    return claim_table(
        d["query_id"], d["trial"], units=[tuple(x) for x in d["units"]], span_relevant=d["span_relevant"],
        gt_claims=d["gt_claims"], response_claims=d["response_claims"], gt_units=d["gt_units"],
        response_units=d["response_units"], response_vs_reference=d["response_vs_reference"],
        gt_vs_response=d["gt_vs_response"], gt_quotes=d["gt_quotes"], response_quotes=d["response_quotes"],
        has_reference=d["has_reference"], no_response=d["no_response"], failed=d["failed"],
        unit_texts=d.get("unit_texts") or (), stratum=d.get("stratum"), trace_id=d.get("trace_id"))


__all__ = ["BREAKDOWN", "CLAIM_METRICS", "CONTRADICTED", "ENTAILED", "LOWER_IS_BETTER", "NEUTRAL",
           "RAGCHECKER_NAMES",
           "RELEVANCE_RULES", "VERDICTS", "ClaimScores", "ClaimTable", "claim_classes", "claim_metrics",
           "claim_table", "relevant_units", "support_of", "table_from_dict", "table_to_dict"]
