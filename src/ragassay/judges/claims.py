"""Judges for claim-level diagnosis (RAGChecker, Ru et al. 2024): a claim extractor and a three-way claim
checker, local (deterministic, offline) or LLM (cached and pinned like every LLM judge), and the writer that
stores a run's claim tables and its eleven claim metrics (:mod:`ragassay.metrics.claims`).

- **Extraction.** Ground-truth claims come from the reference answer, response claims from the answer. The
  local extractor ``local:clauses-v1`` cuts sentences (the reference pipeline's sentence rules) and then
  clauses (at ``;`` and at ``, and`` / ``, but`` / ``, while`` / ``, whereas``); a clause without a content
  word stays with its neighbour, and a sentence without one states no claim. The LLM extractor sends faithfulness's own ``claims`` request (same rubric,
  template and verdict), so an answer already decomposed for faithfulness is answered from the cache.
- **Checking.** One claim against one passage (a retrieved unit, the reference answer or the response):
  ``entailed``, ``neutral`` or ``contradicted``. The local checker ``local:claimcheck-v1@T`` says
  ``entailed`` when the passage holds the claim verbatim (whitespace-folded, NFC; the quote is that span);
  otherwise it takes the passage sentence holding the largest share of the claim's content terms; at share
  >= T it says
  ``contradicted`` when exactly one of the two carries a negation cue (not, no, never, none, nor, cannot,
  without, n't) or when the claim has a number the sentence lacks while the sentence has numbers of its own,
  else ``entailed`` with that sentence as the quote; below T ``neutral``. The LLM checker returns the label
  and a verbatim quote. Either way an ``entailed`` whose quote is not found in the passage (whitespace-folded,
  NFC) is downgraded to ``neutral`` and counted as ``quote_not_found``: every supported claim points to a
  verified span ``(doc_id, start, end)`` of its unit.
- **Storage.** One result row per (query, trial, metric) for the eleven metrics, under the names of
  ``CLAIM_METRICS``, so compare, slices and the report read them like any metric; one ``judge_calls`` record
  per (query, trial) with item ``claim_table`` whose verdict is the whole claim table (what ``analyze claims``
  reads); the pins in the run's ``extra["claims_judge"]`` (apart from ``extra["judge"]``: a run may hold a
  faithfulness judge and a claims judge).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ragassay.errors import InputError, PinMismatchError
from ragassay.judges.metrics import RUBRICS, TEMPLATES, ContextUnit, JudgeItem, locate_quote, run_requests
from ragassay.judges.protocol import (
    CallRecord,
    ClaimsVerdict,
    ItemKey,
    Judgement,
    JudgeRequest,
    Verdict,
    sha256_text,
)
from ragassay.metrics.claims import (
    CLAIM_METRICS,
    CONTRADICTED,
    ENTAILED,
    NEUTRAL,
    ClaimScores,
    ClaimTable,
    claim_metrics,
    claim_table,
    table_from_dict,
    table_to_dict,
)

LOCAL_EXTRACTOR = "local:clauses-v1"
TABLE_ITEM = "claim_table"
CHECK_RUBRIC = (
    "You check one claim against one passage. Label 'entailed' if the passage states the claim or it follows "
    "directly, and copy into 'quote' the shortest verbatim span of the passage that states it, character for "
    "character. Label 'contradicted' if the passage states the opposite or an incompatible fact (quote that "
    "span too, or null). Label 'neutral' if the passage does not settle the claim; 'quote' is null. Use no "
    "outside knowledge. Reason briefly in 'justification' first. Set 'cannot_judge' only when the claim is "
    "not a checkable statement."
)
CHECK_TEMPLATE = "<passage>\n{passage}\n</passage>\n<claim>{claim}</claim>"
_NEGATION = re.compile(r"(?i)\b(?:not|no|never|none|nor|cannot|without)\b|n't\b")
_CLAUSE = re.compile(r";\s+|,\s+(?:and|but|while|whereas)\s+")
_WORD = re.compile(r"(?u)\w+")
_STOP = frozenset("a an and are as at be by for from has have in is it its of on or that the this to was were "
                  "which with not no but while whereas".split())


class ClaimCheckVerdict(Verdict):
    """One claim against one passage, three-way; ``quote`` is verbatim passage text when entailed."""

    label: Literal["entailed", "neutral", "contradicted"]
    quote: str | None


# ---------------------------------------------------------------------------------------------- local
def _terms(text: str) -> set[str]:
    return {w for w in (m.group().lower() for m in _WORD.finditer(text)) if w not in _STOP}


def split_clauses(text: str | None) -> list[str]:
    """Claims of ``text`` by the local extractor: its sentences, each cut into clauses; a clause without a
    content word is merged into its neighbour, and a sentence without one gives no claim."""
    from ragassay.pipeline.chunkers import sentence_spans

    if not text or not text.strip():
        return []
    out = []
    for a, b in sentence_spans(text):
        parts: list[str] = []
        for piece in _CLAUSE.split(text[a:b]):
            piece = piece.strip().rstrip(".;,").strip()
            if not piece:
                continue
            if parts and not _terms(piece):
                parts[-1] = f"{parts[-1]}, {piece}"
            elif parts and not _terms(parts[-1]):
                parts[-1] = f"{parts[-1]}, {piece}"
            else:
                parts.append(piece)
        out += [p for p in parts if _terms(p)]
    return out


class LocalClaimChecker:
    """The deterministic three-way checker (module docstring): term share with the best passage sentence,
    negation and number cues for ``contradicted``."""

    def __init__(self, threshold: float = 0.7):
        if not 0 < threshold <= 1:
            raise InputError(f"threshold {threshold!r} must be in (0, 1]")
        self.threshold = threshold
        self.name = f"local:claimcheck-v1@{threshold:g}"

    def check(self, claim: str, passage: str) -> tuple[str, tuple[int, int] | None]:
        """(label, the quote's ``[start, end)`` in ``passage`` for entailed and contradicted, else None)."""
        from ragassay.judges.local import numbers_of
        from ragassay.pipeline.chunkers import sentence_spans

        terms = _terms(claim)
        if not terms or not passage:
            return NEUTRAL, None
        verbatim = locate_quote(claim, [ContextUnit("", "", 0, passage)])
        if verbatim is not None:  # the passage states the claim word for word
            return ENTAILED, (verbatim[1], verbatim[2])
        best, span = 0.0, None
        for a, b in sentence_spans(passage):
            share = len(terms & _terms(passage[a:b])) / len(terms)
            if share > best:
                best, span = share, (a, b)
        if span is None or best < self.threshold:
            return NEUTRAL, None
        sent = passage[span[0]:span[1]]
        if bool(_NEGATION.search(claim)) != bool(_NEGATION.search(sent)):
            return CONTRADICTED, span
        nums, have = set(numbers_of(claim)), set(numbers_of(sent))
        if nums - have and have:
            return CONTRADICTED, span
        return ENTAILED, span


# ---------------------------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class ClaimInput:
    """One (query, trial) to judge for claims: the judge item and which packed units overlap evidence."""

    item: JudgeItem
    span_relevant: tuple[bool, ...]


def span_relevance(context: Sequence[ContextUnit], evidence: Sequence[tuple[str, int, int]]) -> tuple[bool, ...]:
    """Per unit: does it overlap an evidence span ``(doc_id, start, end)`` (the ``any_overlap`` hit rule)?"""
    return tuple(any(d == u.doc_id and s < u.start + len(u.text) and u.start < e for d, s, e in evidence)
                 for u in context)


def claim_inputs(items: Sequence[JudgeItem], golden) -> list[ClaimInput]:
    out = []
    for it in items:
        q = golden[it.query_id] if it.query_id in golden else None
        ev = [(e.doc_id, e.start, e.end) for e in q.evidence] if q is not None else []
        out.append(ClaimInput(it, span_relevance(it.context, ev)))
    return out


def _units(it: JudgeItem) -> list[tuple[str, str, int, int]]:
    return [(u.unit_id, u.doc_id, u.start, u.start + len(u.text)) for u in it.context]


def _no_response(it: JudgeItem) -> str | None:
    if it.answered:
        return None
    return "generation_error" if it.outcome == "error" else "not_answered"


@dataclass
class ClaimJudged:
    """What claim judging produced: one table per item, the call outcomes, the downgraded quotes and, for an
    LLM judge, its judgements and spend (``stopped`` says why a client stopped early)."""

    tables: list[ClaimTable] = field(default_factory=list)
    calls: Counter = field(default_factory=Counter)
    quote_not_found: int = 0
    judgements: list[Judgement] = field(default_factory=list)
    stopped: str | None = None
    spend: float = 0.0


def judge_claims_local(inputs: Sequence[ClaimInput], checker: LocalClaimChecker, *,
                       progress: Callable[[int, int], None] | None = None) -> ClaimJudged:
    """Claim tables of every input by the local extractor and checker (no calls; each check counts as ``ok``)."""
    out = ClaimJudged()

    def check(claim: str, passage: str) -> tuple[str, tuple[int, int] | None]:
        out.calls["ok"] += 1
        return checker.check(claim, passage)

    for k, inp in enumerate(inputs):
        it = inp.item
        resp = split_clauses(it.answer) if it.answered else []
        gt = split_clauses(it.reference) if it.reference else []

        def against_units(claims, it=it):
            labels, quotes = [], []
            for c in claims:
                cells = [(u, *check(c, u.text)) for u in it.context]
                labels.append([lab for _, lab, _ in cells])
                quotes.append([(u.start + sp[0], u.start + sp[1]) if lab == ENTAILED else None
                               for u, lab, sp in cells])
            return labels, quotes

        gu, gq = against_units(gt)
        ru, rq = against_units(resp)
        vs_ref = [check(c, it.reference or "")[0] for c in resp]
        vs_resp = [check(c, it.answer or "")[0] if it.answered else NEUTRAL for c in gt]
        out.tables.append(claim_table(
            it.query_id, it.trial, units=_units(it), span_relevant=inp.span_relevant, gt_claims=gt,
            response_claims=resp, gt_units=gu, response_units=ru, response_vs_reference=vs_ref,
            gt_vs_response=vs_resp, gt_quotes=gq, response_quotes=rq, has_reference=bool(it.reference),
            no_response=_no_response(it), unit_texts=[u.text for u in it.context], stratum=it.stratum,
            trace_id=it.trace_id))
        if progress is not None:
            progress(k + 1, len(inputs))
    return out


# ---------------------------------------------------------------------------------------------- LLM
def _pins_shas() -> tuple[str, str]:
    rubric = sha256_text(RUBRICS["claims"] + "\n\x1e" + CHECK_RUBRIC)
    prompt = sha256_text(TEMPLATES["claims"] + "\n\x1e" + CHECK_TEMPLATE)
    return rubric, prompt


def _extract_request(run_id: str, it: JudgeItem, side: str, text: str) -> JudgeRequest:
    rubric, prompt = _pins_shas()
    return JudgeRequest(ItemKey(run_id, it.query_id, it.trial, f"claims:{side}"), "claims", ClaimsVerdict,
                        RUBRICS["claims"], TEMPLATES["claims"].format(question=it.question, answer=text),
                        rubric_sha=rubric, prompt_sha=prompt)


def _check_request(run_id: str, it: JudgeItem, name: str, claim: str, passage: str) -> JudgeRequest:
    rubric, prompt = _pins_shas()
    return JudgeRequest(ItemKey(run_id, it.query_id, it.trial, f"check:{name}"), "claim_check", ClaimCheckVerdict,
                        CHECK_RUBRIC, CHECK_TEMPLATE.format(passage=passage, claim=claim),
                        rubric_sha=rubric, prompt_sha=prompt)


def _run_calls(client, requests: list[JudgeRequest], out: ClaimJudged) -> dict[tuple[str, int, str], Judgement]:
    if not requests:
        return {}
    if out.stopped is not None:
        out.calls["not_started"] += len(requests)
        return {}
    return run_requests(client, requests, out)


def _verdict(got: dict, key: tuple[str, int, str]) -> tuple[Verdict | None, str | None]:
    j = got.get(key)
    if j is None:
        return None, "not_started"
    if j.outcome != "ok" or j.verdict is None:
        return None, f"judge_{j.outcome}"
    return j.verdict, None


def judge_claims_llm(client, run_id: str, inputs: Sequence[ClaimInput]) -> ClaimJudged:
    """Claim tables by an LLM judge (``client``: a ``JudgeClient``) in two rounds: extraction of the response
    and reference claims, then one check per (claim, unit), (response claim, reference) and (reference claim,
    response). An item with any failed call is kept with ``failed`` set (every metric undefined, reason
    ``judge_<outcome>`` or ``not_started``)."""
    out = ClaimJudged()
    stage1 = []
    for inp in inputs:
        it = inp.item
        if it.answered:
            stage1.append(_extract_request(run_id, it, "response", it.answer))
        if it.reference:
            stage1.append(_extract_request(run_id, it, "reference", it.reference))
    got = _run_calls(client, stage1, out)
    plans = []
    stage2: list[JudgeRequest] = []
    for inp in inputs:
        it = inp.item
        failed, claims = None, {}
        for side, present in (("response", it.answered), ("reference", bool(it.reference))):
            if not present:
                claims[side] = []
                continue
            v, why = _verdict(got, (it.query_id, it.trial, f"claims:{side}"))
            failed = failed or why
            claims[side] = [] if v is None else [c.strip() for c in v.claims if c.strip()]
        plans.append((inp, failed, claims["reference"], claims["response"]))
        if failed:
            continue
        for i, c in enumerate(claims["reference"]):
            stage2 += [_check_request(run_id, it, f"g{i}:u{j}", c, u.text) for j, u in enumerate(it.context)]
            if it.answered:
                stage2.append(_check_request(run_id, it, f"g{i}:response", c, it.answer))
        for i, c in enumerate(claims["response"]):
            stage2 += [_check_request(run_id, it, f"r{i}:u{j}", c, u.text) for j, u in enumerate(it.context)]
            stage2.append(_check_request(run_id, it, f"r{i}:reference", c, it.reference or ""))
    got.update(_run_calls(client, stage2, out))
    for inp, failed, gt, resp in plans:
        out.tables.append(_assemble(inp, failed, gt, resp, got, out))
    return out


def _assemble(inp: ClaimInput, failed: str | None, gt: list[str], resp: list[str], got: dict,
              out: ClaimJudged) -> ClaimTable:
    it = inp.item
    key = (it.query_id, it.trial)

    def check(name: str, passage: ContextUnit) -> tuple[str, tuple[int, int] | None]:
        nonlocal failed
        v, why = _verdict(got, (*key, f"check:{name}"))
        if v is None:
            failed = failed or why
            return NEUTRAL, None
        if v.label != ENTAILED:
            return v.label, None
        where = locate_quote(v.quote, [passage])
        if where is None:
            out.quote_not_found += 1
            return NEUTRAL, None
        return ENTAILED, (where[1], where[2])

    def grid(prefix: str, claims: list[str]):
        labels, quotes = [], []
        for i in range(len(claims)):
            cells = [check(f"{prefix}{i}:u{j}", u) for j, u in enumerate(it.context)]
            labels.append([c[0] for c in cells])
            quotes.append([c[1] for c in cells])
        return labels, quotes

    if failed:
        gt, resp = [], []
    ref_unit = ContextUnit("reference", "", 0, it.reference or "")
    resp_unit = ContextUnit("response", "", 0, it.answer or "")
    gu, gq = grid("g", gt)
    ru, rq = grid("r", resp)
    vs_ref = [check(f"r{i}:reference", ref_unit)[0] for i in range(len(resp))]
    vs_resp = [check(f"g{i}:response", resp_unit)[0] if it.answered else NEUTRAL for i in range(len(gt))]
    if failed:  # a check failed after the claims were known: the claims are kept, every metric undefined
        gu, gq = [[NEUTRAL] * len(it.context) for _ in gt], None
        ru, rq = [[NEUTRAL] * len(it.context) for _ in resp], None
        vs_ref, vs_resp = [NEUTRAL] * len(resp), [NEUTRAL] * len(gt)
    return claim_table(
        it.query_id, it.trial, units=_units(it), span_relevant=inp.span_relevant, gt_claims=gt,
        response_claims=resp, gt_units=gu, response_units=ru, response_vs_reference=vs_ref, gt_vs_response=vs_resp,
        gt_quotes=gq, response_quotes=rq, has_reference=bool(it.reference), no_response=_no_response(it),
        failed=failed, unit_texts=[u.text for u in it.context], stratum=it.stratum, trace_id=it.trace_id)


# ---------------------------------------------------------------------------------------------- pins
def claim_relevance(cfg) -> str:
    return cfg.claims.relevance if getattr(cfg, "claims", None) is not None else "claims"


def claim_pins(cfg) -> dict[str, Any]:
    """The pins of a claims judge: model, rubric and prompt shas (of the extractor and the checker), the
    settings pin, and the relevance rule (which also enters the rubric sha)."""
    relevance = claim_relevance(cfg)
    if cfg.provider == "local":
        if cfg.model != "lexical":
            raise InputError(f"model: the local claims judge is 'lexical' (clause extractor and term-share checker), "
                             f"got {cfg.model!r}; use an LLM judge for anything else")
        thr = cfg.threshold if cfg.threshold is not None else 0.7
        rubric = sha256_text(f"{LOCAL_EXTRACTOR};local:claimcheck-v1@{thr!r};relevance={relevance}")
        return {"judge_model": "local:lexical", "rubric_sha": rubric, "prompt_sha": rubric, "provider": "local",
                "threshold": thr, "relevance": relevance, "settings": "none", "metrics": list(CLAIM_METRICS)}
    base = cfg.pins()
    rubric, prompt = _pins_shas()
    return {"judge_model": base["judge_model"], "rubric_sha": sha256_text(f"{rubric};relevance={relevance}"),
            "prompt_sha": prompt, "provider": cfg.provider, "settings": base["settings"], "relevance": relevance,
            "metrics": list(CLAIM_METRICS)}


PIN_KEYS = ("judge_model", "rubric_sha", "prompt_sha", "settings", "relevance")


# ---------------------------------------------------------------------------------------------- the run
@dataclass
class ClaimSummary:
    run_id: str
    run_name: str
    pins: dict
    scores: ClaimScores
    judged: ClaimJudged
    items: int

    def to_dict(self) -> dict[str, Any]:
        metrics = {}
        for m in CLAIM_METRICS:
            mean, ok, undef = self.scores.mean(m)
            metrics[m] = {"mean": None if math.isnan(mean) else mean, "defined": ok, "undefined": undef}
        shares, n = self.scores.pooled_breakdown()
        from ragassay.metrics.claims import BREAKDOWN

        return {"run_id": self.run_id, "run_name": self.run_name, "items": self.items,
                "judge": {k: self.pins.get(k) for k in PIN_KEYS},
                "metrics": metrics,
                "undefined": [{"metric": m, "reason": r, "count": c}
                              for (m, r), c in sorted(self.scores.undefined.items())],
                "breakdown": {"claims": n, "shares": {b: (None if math.isnan(s) else float(s))
                                                      for b, s in zip(BREAKDOWN, shares, strict=True)}},
                "calls": dict(sorted(self.judged.calls.items())), "quote_not_found": self.judged.quote_not_found,
                "spend": self.judged.spend}


def judge_claims_run(store, run_ref: str, traces: Sequence, golden, corpus, cfg, *, resume: bool = False,
                     header=None, traces_label: str = "the traces", client=None,
                     progress: Callable[[int, int], None] | None = None) -> ClaimSummary:
    """Judge stored run ``run_ref`` for claims from its ``traces`` and store the eleven metrics, the claim
    tables and the pins (``extra["claims_judge"]``). ``client`` overrides the LLM client (default: the one the
    config builds over ``store``, so its calls are cached there).

    Refuses a run still running, a golden set of another version, traces that are not the run's, and a run
    judged for claims before (without ``resume``, or under other pins)."""
    from ragassay.judges.config import build_judge
    from ragassay.judges.metrics import items_from
    from ragassay.judges.score import judged_inputs

    rec = store.get_run(run_ref)
    pins = claim_pins(cfg)
    before = (rec.extra or {}).get("claims_judge")
    if before and not resume:
        raise InputError(f"run {rec.name} ({rec.run_id}) was already judged for claims by "
                         f"{before.get('judge_model')}; pass --resume to re-score it under the same judge")
    if before:
        differ = [k for k in PIN_KEYS if before.get(k) != pins.get(k)]
        if differ:
            raise PinMismatchError(f"run {rec.name} was judged for claims under other pins ("
                                   + "; ".join(f"{k} {before.get(k)} -> {pins.get(k)}" for k in differ)
                                   + "); --resume continues the same judge only")
    inputs = claim_inputs(items_from(traces, golden, judged_inputs(store, rec, traces, header, traces_label, golden,
                                                                   corpus)), golden)
    if progress is not None:
        progress(0, len(inputs))
    if cfg.provider == "local":
        thr = cfg.threshold if cfg.threshold is not None else 0.7
        judged = judge_claims_local(inputs, LocalClaimChecker(thr), progress=progress)
    else:
        from ragassay.judges.providers import JudgeStopped

        judged = judge_claims_llm(client if client is not None else build_judge(cfg, store), rec.run_id, inputs)
        if judged.stopped is not None:
            raise JudgeStopped(f"claim judging stopped: {judged.stopped}; {judged.calls.get('not_started', 0)} call(s) "
                               f"not started, ${judged.spend:.4f} spent. Finished calls are stored: rerun with "
                               "--resume (and a higher spend_cap) to pay only for the rest")
        if progress is not None:
            progress(len(inputs), len(inputs))
    scores = claim_metrics(judged.tables, pins["relevance"])
    summary = ClaimSummary(rec.run_id, rec.name, pins, scores, judged, len(inputs))
    _store(store, rec, pins, judged.tables, scores, summary)
    return summary


def _store(store, rec, pins: dict, tables: Sequence[ClaimTable], scores: ClaimScores, summary: ClaimSummary) -> None:
    cols: dict[str, list] = {k: [] for k in ("query_id", "trial", "metric", "value", "stratum", "trace_id")}
    for i, t in enumerate(tables):
        for k, m in enumerate(CLAIM_METRICS):
            cols["query_id"].append(t.query_id)
            cols["trial"].append(t.trial)
            cols["metric"].append(m)
            cols["value"].append(float(scores.values[i, k]))
            cols["stratum"].append(t.stratum)
            cols["trace_id"].append(t.trace_id)
    records = []
    for t in tables:
        d = table_to_dict(t)
        blob = json.dumps(d, sort_keys=True, ensure_ascii=False)
        records.append(CallRecord(
            run_id=rec.run_id, query_id=t.query_id, trial=t.trial, item=TABLE_ITEM, judge="claims",
            request_sha=sha256_text(pins["rubric_sha"] + "\x1e" + blob), provider=pins["provider"],
            model=pins["judge_model"], rubric_sha=pins["rubric_sha"], prompt_sha=pins["prompt_sha"], temperature=None,
            effort=None, max_tokens=None, outcome="ok", verdict=d).to_row())
    status = rec.status
    store.resume_run(rec.run_id)
    try:
        store.write_batch(rec.run_id, cols)
        store.record_judge_calls(records)
        store.update_run_extra(rec.run_id, {"claims_judge": dict(pins),
                                            "claims_summary": _clean(summary.to_dict())})
    finally:
        store.finish_run(rec.run_id, status if status in ("complete", "failed") else "complete")


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def stored_tables(store, run_ref: str) -> dict[tuple[str, int], ClaimTable]:
    """The claim tables stored for a run, by (query_id, trial): the latest ``claim_table`` record of each."""
    latest: dict[tuple[str, int], dict] = {}
    for r in store.judge_calls(run_ref):
        if r["item"] == TABLE_ITEM and r.get("verdict"):
            latest[(r["query_id"], r["trial"])] = r  # sorted by created_at within a key: the last one wins
    return {k: table_from_dict(r["verdict"]) for k, r in latest.items()}


# ---------------------------------------------------------------------------------------------- validation
CHECK_CLASSES = (CONTRADICTED, NEUTRAL, ENTAILED)  # the kappa's (unordered) classes; cannot_tell is left out
VALIDATION_KINDS = ("claim_check", "claim_extract")
_CHECK_FIELDS = ("claim", "passage")
_EXTRACT_FIELDS = ("text", "claims")
_OPTIONAL = ("item_id", "label", "question", "labelled_by", "case", "kind", "note")
# The extraction floor, on the lower ends of the 95% intervals: a claim extractor that misses or invents more
# than about a third of the claims moves every claim metric by itself.
EXTRACT_FLOOR = {"min_recall": 0.7, "min_precision": 0.7, "min_items": 30}
MATCH_JACCARD = 0.5


@dataclass(frozen=True)
class ClaimLabels:
    """A claim label set: ``items`` (dicts with ``item_id`` and the kind's fields), its path, version (sha256
    over the items sorted by id) and who labelled it (``human``, ``automated`` or ``mixed``)."""

    kind: str
    path: str
    items: tuple[dict, ...]
    version: str

    def __len__(self) -> int:
        return len(self.items)

    def labelled_by(self) -> str:
        who = {it.get("labelled_by") or "human" for it in self.items}
        return who.pop() if len(who) == 1 else "mixed"


def bundled_claim_labels(kind: str) -> Path:
    from importlib import resources

    name = {"claim_check": "claims_check.jsonl", "claim_extract": "claims_extract.jsonl"}[kind]
    return Path(str(resources.files("ragassay") / "data" / "judge_examples" / name))


def load_claim_labels(path: str | Path, kind: str) -> ClaimLabels:
    """Read a claim label file (JSONL; docs/claims.md): ``claim_check`` lines have ``claim``, ``passage`` and
    ``label`` (entailed, neutral, contradicted, cannot_tell); ``claim_extract`` lines have ``text`` and
    ``claims`` (the claims a person found in it, a list of strings, possibly empty). Both take ``item_id``
    (default: the line number), ``question``, ``labelled_by`` (human or automated), ``case``, ``note`` and
    ``kind``. Every problem is reported at once with its line."""
    if kind not in VALIDATION_KINDS:
        raise InputError(f"claim validation kind {kind!r}: choose one of {list(VALIDATION_KINDS)}")
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such label file")
    problems, items, seen = [], [], {}
    fields = _CHECK_FIELDS if kind == "claim_check" else _EXTRACT_FIELDS
    from ragassay.judges.labels import _read_jsonl  # every label loader's one JSONL reader

    for n, obj in _read_jsonl(p, problems):
        unknown = sorted(set(obj) - set(fields) - set(_OPTIONAL))
        missing = [f for f in fields if f not in obj]
        if unknown or missing:
            problems.append(f"{p}:{n}: " + "; ".join(
                ([f"unknown field(s) {unknown}"] if unknown else []) + ([f"missing {missing}"] if missing else [])))
            continue
        if obj.get("kind") not in (None, kind):
            problems.append(f"{p}:{n}: kind {obj['kind']!r} but the file is read as {kind}")
            continue
        if obj.get("labelled_by") not in (None, "human", "automated"):
            problems.append(f"{p}:{n}: labelled_by must be human or automated, got {obj['labelled_by']!r}")
            continue
        iid = str(obj.get("item_id", n))
        if iid in seen:
            problems.append(f"{p}:{n}: item_id {iid!r} repeats line {seen[iid]}")
            continue
        seen[iid] = n
        if kind == "claim_check":
            label = str(obj.get("label", "")).strip().lower().replace(" ", "_")
            if label not in (*CHECK_CLASSES, "cannot_tell"):
                problems.append(f"{p}:{n}: label {obj.get('label')!r} must be entailed, neutral, contradicted or "
                                "cannot_tell")
                continue
            if not (isinstance(obj["claim"], str) and obj["claim"].strip() and isinstance(obj["passage"], str)):
                problems.append(f"{p}:{n}: claim must be non-empty text and passage text")
                continue
            obj = {**obj, "label": label}
        else:
            cl = obj["claims"]
            if not (isinstance(obj["text"], str) and isinstance(cl, list) and all(isinstance(c, str) for c in cl)):
                problems.append(f"{p}:{n}: text must be text and claims a list of strings")
                continue
        items.append({**obj, "item_id": iid, "line": n})
    if problems:
        raise InputError(f"{p}: {len(problems)} problem(s) in the {kind} labels; nothing was judged:\n"
                         + "\n".join(problems[:20]))
    if not items:
        raise InputError(f"{p}: no labelled items")
    body = json.dumps(sorted(({k: v for k, v in it.items() if k != "line"} for it in items),
                             key=lambda it: it["item_id"]), sort_keys=True, ensure_ascii=False)
    return ClaimLabels(kind, str(p), tuple(items), sha256_text(body))


def _validation_client(cfg, store, pins):
    from ragassay.judges.config import build_judge
    from ragassay.judges.validate import validation_run

    return build_judge(cfg, store), (validation_run(store, pins) if store is not None else "validation")


def judge_check_labels(cfg, labels: ClaimLabels, store=None, client=None) -> tuple[list[str | None], list[str], Counter]:
    """The claims judge's label for every ``claim_check`` item (None with its outcome when it gave none): the
    very check ``judge claims`` makes, quote verification included."""
    outcomes: Counter = Counter()
    if cfg.provider == "local":
        checker = LocalClaimChecker(cfg.threshold if cfg.threshold is not None else 0.7)
        out = [checker.check(it["claim"], it["passage"])[0] for it in labels.items]
        outcomes["ok"] += len(out)
        return out, ["ok"] * len(out), outcomes
    pins = claim_pins(cfg)
    built, run_id = _validation_client(cfg, store, pins)
    client = client or built
    reqs = [_check_request(run_id, JudgeItem(it["item_id"], 0, it.get("question") or "", None, None), "label",
                           it["claim"], it["passage"]) for it in labels.items]
    tmp = ClaimJudged()
    got = _run_calls(client, reqs, tmp)
    labs, why = [], []
    for it in labels.items:
        v, reason = _verdict(got, (it["item_id"], 0, "check:label"))
        if v is None:
            labs.append(None)
            why.append(reason.removeprefix("judge_"))
            continue
        lab = v.label
        if lab == ENTAILED and locate_quote(v.quote, [ContextUnit("", "", 0, it["passage"])]) is None:
            lab = NEUTRAL  # as in judge claims: an unverified entailment is neutral
        labs.append(lab)
        why.append("ok")
    outcomes.update(why)
    return labs, why, outcomes


def check_figures(labels: ClaimLabels, judged: Sequence[str | None], outcomes: Sequence[str], *,
                  n_resamples: int = 2_000, seed: int = 0, confidence: float = 0.95) -> dict:
    """Agreement of the three-way check with the human labels: unweighted kappa, per-class precision/recall
    with bootstrap CIs (``judges.validate.agreement_figures``), and the worst case counting every item the
    judge left unanswered as wrong. ``cannot_tell`` items are left out and counted."""
    from ragassay.judges.validate import agreement_figures, worst_case_figures

    code = {c: i for i, c in enumerate(CHECK_CLASSES)}
    used = [(code[it["label"]], code[j]) for it, j in zip(labels.items, judged, strict=True)
            if it["label"] != "cannot_tell" and j is not None]
    unanswered = np.array([code[it["label"]] for it, j in zip(labels.items, judged, strict=True)
                           if it["label"] != "cannot_tell" and j is None], dtype=np.int64)
    h = np.array([a for a, _ in used], dtype=np.int64)
    jj = np.array([b for _, b in used], dtype=np.int64)
    opts = {"n_resamples": n_resamples, "seed": seed, "confidence": confidence}
    out = {"kind": "claim_check", "scale": "three_way", "n_items": len(labels), **opts,
           "excluded": dict(sorted(Counter(
               "cannot_tell" if it["label"] == "cannot_tell" else f"judge_{o}"
               for it, j, o in zip(labels.items, judged, outcomes, strict=True)
               if it["label"] == "cannot_tell" or j is None).items()))}
    out.update(agreement_figures(h, jj, CHECK_CLASSES, scale="three_way", **opts))
    out["n"] = int(h.size)
    out["worst_case"] = worst_case_figures(h, jj, unanswered, CHECK_CLASSES, scale="three_way", **opts)
    recalls = [c["recall"]["value"] for c in out.get("per_class", []) if c["recall"]["value"] is not None]
    out["min_class_recall"] = min(recalls) if recalls else None
    return out


def _match(human: Sequence[str], judge: Sequence[str]) -> tuple[int, int]:
    """(human claims matched, judge claims matched): greedy one-to-one on content-term Jaccard >= 0.5."""
    pairs = []
    for i, a in enumerate(human):
        ta = _terms(a)
        for j, b in enumerate(judge):
            tb = _terms(b)
            jac = len(ta & tb) / len(ta | tb) if ta | tb else 0.0
            if jac >= MATCH_JACCARD:
                pairs.append((jac, i, j))
    used_h, used_j = set(), set()
    for _, i, j in sorted(pairs, reverse=True):
        if i not in used_h and j not in used_j:
            used_h.add(i)
            used_j.add(j)
    return len(used_h), len(used_j)


def judge_extract_labels(cfg, labels: ClaimLabels, store=None, client=None) -> tuple[list[list[str] | None], Counter]:
    """The claims judge's claims for every ``claim_extract`` text (None where its call failed)."""
    outcomes: Counter = Counter()
    if cfg.provider == "local":
        out = [split_clauses(it["text"]) for it in labels.items]
        outcomes["ok"] += len(out)
        return out, outcomes
    pins = claim_pins(cfg)
    built, run_id = _validation_client(cfg, store, pins)
    client = client or built
    reqs = [_extract_request(run_id, JudgeItem(it["item_id"], 0, it.get("question") or "", it["text"], "answered"),
                             "label", it["text"]) for it in labels.items]
    tmp = ClaimJudged()
    got = _run_calls(client, reqs, tmp)
    res: list[list[str] | None] = []
    for it in labels.items:
        v, reason = _verdict(got, (it["item_id"], 0, "claims:label"))
        outcomes["ok" if v is not None else reason.removeprefix("judge_")] += 1
        res.append(None if v is None else [c.strip() for c in v.claims if c.strip()])
    return res, outcomes


def extract_figures(labels: ClaimLabels, judged: Sequence[list[str] | None], *, n_resamples: int = 2_000,
                    seed: int = 0, confidence: float = 0.95) -> dict:
    """Extraction recall (human claims a judge claim matches) and precision (judge claims matching a human
    claim), pooled over texts, with percentile bootstrap CIs over texts; a text the judge did not answer counts
    as extracting nothing. The floor (``EXTRACT_FLOOR``) reads the lower ends."""
    from ragassay.judges.validate import _ci

    counts = np.array([(*_match(it["claims"], j or []), len(it["claims"]), len(j or []))
                       for it, j in zip(labels.items, judged, strict=True)], dtype=np.float64).reshape(-1, 4)
    n = counts.shape[0]
    idx = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
    boot = counts[idx].sum(axis=1)
    tot = counts.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        rec, prec = tot[0] / tot[2], tot[1] / tot[3]
        brec, bprec = boot[:, 0] / boot[:, 2], boot[:, 1] / boot[:, 3]
        f1 = 2 * rec * prec / (rec + prec) if rec + prec > 0 else (0.0 if np.isfinite(rec + prec) else math.nan)
        bf1 = np.where(brec + bprec > 0, 2 * brec * bprec / (brec + bprec), 0.0)
    bf1[~np.isfinite(brec + bprec)] = np.nan
    return {"kind": "claim_extract", "scale": "claims", "n_items": len(labels), "n": n,
            "unanswered": sum(j is None for j in judged), "human_claims": int(tot[2]), "judge_claims": int(tot[3]),
            "recall": _ci(rec, brec, confidence), "precision": _ci(prec, bprec, confidence),
            "f1": _ci(f1, bf1, confidence), "match": f"content-term Jaccard >= {MATCH_JACCARD}, one to one",
            "n_resamples": n_resamples, "seed": seed, "confidence": confidence}


def extract_floor_check(record: dict, floor: Mapping[str, float] = EXTRACT_FLOOR) -> tuple[bool, str]:
    """(meets, why) for a ``claim_extract`` record: at least ``min_items`` texts, and the lower ends of the
    recall and precision intervals at least their minimums; automated labels never earn it."""
    f = record.get("figures") or {}
    n = record.get("n") or 0
    if n < floor["min_items"]:
        return False, f"only {n} texts compared, below the minimum of {floor['min_items']}"
    for name in ("recall", "precision"):
        lo = (f.get(name) or {}).get("ci_low")
        if lo is None or lo < floor[f"min_{name}"]:
            return False, f"extraction {name} lower bound {lo} < {floor[f'min_{name}']}"
    if record.get("labelled_by") == "automated":
        return False, "the labels are automated (a model or a script), not people's"
    return True, "extraction recall and precision at or above the floor at the lower bound"


def claim_validation_record(cfg, labels: ClaimLabels, figures: dict, calls: Mapping[str, int]) -> dict:
    """The ``judge_validations`` row of a claim validation, under the claims judge's pins (so ``judge claims``
    runs with those pins find it)."""
    from datetime import UTC, datetime

    from ragassay.judges.validate import clean

    pins = claim_pins(cfg)
    figures = clean(figures)
    kappa = figures.get("kappa") or {}
    return {"judge_model": pins["judge_model"], "rubric_sha": pins["rubric_sha"], "prompt_sha": pins["prompt_sha"],
            "judge_settings": pins["settings"], "kind": labels.kind, "scale": figures["scale"],
            "metrics": list(CLAIM_METRICS), "label_set": labels.path, "label_set_version": labels.version,
            "labelled_by": labels.labelled_by(), "n_items": len(labels), "n": int(figures["n"]),
            "kappa": kappa.get("value"), "kappa_low": kappa.get("ci_low"), "kappa_high": kappa.get("ci_high"),
            "agreement": (figures.get("agreement") or {}).get("value"),
            "min_class_recall": figures.get("min_class_recall"), "passes_kappa": None, "figures": figures,
            "calls": {"calls": dict(sorted(calls.items()))}, "cascade": None,
            "created_at": datetime.now(UTC).replace(tzinfo=None)}


def validate_claims(cfg, kind: str, path: str | Path, store=None, *, client=None, n_resamples: int = 2_000,
                    seed: int = 0) -> dict:
    """Validate the claims judge of ``cfg`` on a label file of ``kind``; store the record when ``store`` is
    given and return it with ``meets_floor`` and ``floor_detail`` (kind ``claim_check``: the judge floor,
    ``judges.validate.Floor``; ``claim_extract``: ``EXTRACT_FLOOR``)."""
    from ragassay.judges.validate import Floor

    labels = load_claim_labels(path, kind)
    if kind == "claim_check":
        judged, outcomes, calls = judge_check_labels(cfg, labels, store, client)
        figures = check_figures(labels, judged, outcomes, n_resamples=n_resamples, seed=seed)
    else:
        got, calls = judge_extract_labels(cfg, labels, store, client)
        figures = extract_figures(labels, got, n_resamples=n_resamples, seed=seed)
    record = claim_validation_record(cfg, labels, figures, calls)
    if store is not None:
        record["validation_id"] = store.record_judge_validation(record)
    ok, why = Floor().check(record) if kind == "claim_check" else extract_floor_check(record)
    record["meets_floor"], record["floor_detail"] = ok, why
    return record


__all__ = ["CHECK_RUBRIC", "CHECK_TEMPLATE", "LOCAL_EXTRACTOR", "PIN_KEYS", "TABLE_ITEM", "ClaimCheckVerdict",
           "ClaimInput", "ClaimJudged", "ClaimSummary", "LocalClaimChecker", "claim_inputs", "claim_pins",
           "claim_relevance", "judge_claims_llm", "judge_claims_local", "judge_claims_run", "span_relevance",
           "split_clauses", "stored_tables", "CHECK_CLASSES", "EXTRACT_FLOOR", "VALIDATION_KINDS", "ClaimLabels",
           "bundled_claim_labels", "check_figures", "claim_validation_record", "extract_figures",
           "extract_floor_check", "judge_check_labels", "judge_extract_labels", "load_claim_labels",
           "validate_claims"]
