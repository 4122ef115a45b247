"""Judge metrics for generation (spec §10.2–§10.4, §10.9): claims, faithfulness, relevance, rubric
correctness, citation precision/recall and nugget assignment, from typed verdicts combined in code.

Per answered (query, trial):

- **claims**: the answer is decomposed into atomic claims (one ``ClaimsVerdict`` call).
- **faithfulness** = supported claims / claims. Each claim is judged against the packed context (one
  ``SupportVerdict`` call per claim); a ``supported`` label counts only when its quote is found in the
  context (whitespace-folded, NFC) — a quote not found is unsupported and counted as ``quote_not_found``.
  An answer with no claims is undefined, never 1.
- **answer_relevance**: relevant = 1, partially_relevant = 0.5, irrelevant = 0 (one call).
- **correctness**: one ``CriterionVerdict`` per rubric criterion against the reference answer, combined as
  sum(weight · credit) / sum(weight) with pass = 1, partial = 0.5, fail = 0 — never one holistic number.
- **citation_precision** = citations that support at least one claim / citations; **citation_recall** =
  claims supported by at least one citation / claims. A citation supports a claim when the claim's verified
  quote lies in the cited unit (inside the citation's span when it has one). No citations: precision
  undefined; no claims: recall undefined.
- **nuggets**: one ``NuggetVerdict`` per answer (support / partial_support / not_support per golden nugget),
  scored by ``metrics.nuggets`` as ``nugget_v_strict``, ``nugget_v``, ``nugget_a_strict``, ``nugget_a``.
  An abstained or refused answer supports no nugget (scored without a call).

A metric whose inputs did not all come back ``ok`` (an error, refusal, truncation, malformed output or
``cannot_judge``) is undefined (NaN, stored as NULL) and counted with its reason: no partial call set is
ever turned into a number.
"""

from __future__ import annotations

import math
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ragassay.errors import InputError
from ragassay.judges.protocol import (
    ClaimsVerdict,
    CriterionVerdict,
    ItemKey,
    Judgement,
    JudgeRequest,
    NuggetVerdict,
    RelevanceVerdict,
    SupportVerdict,
    Verdict,
    sha256_text,
)
from ragassay.metrics.nuggets import Nugget, nugget_scores

METRICS = ("faithfulness", "answer_relevance", "correctness", "citations", "nuggets")
NUGGET_METRICS = ("nugget_v_strict", "nugget_v", "nugget_a_strict", "nugget_a")
RELEVANCE_CREDIT = {"relevant": 1.0, "partially_relevant": 0.5, "irrelevant": 0.0}
CRITERION_CREDIT = {"pass": 1.0, "partial": 0.5, "fail": 0.0}
_NUGGET_LABEL = {"support": "support", "partial_support": "partial", "not_support": "none"}

# The frozen rubrics (system prompts, the cacheable prefix) and the user-message templates. Their shas are
# the judge's rubric and prompt pins: editing one word makes a new pin.
RUBRICS = {
    "claims": (
        "You decompose an answer into atomic claims. A claim is one self-contained factual statement that "
        "can be checked on its own: resolve pronouns, keep numbers and qualifiers, drop hedges and "
        "filler. Do not add facts the answer does not state. An answer that states no fact (a refusal, a "
        "question, a greeting) has no claims: return an empty list. Reason briefly in 'justification' "
        "first. Set 'cannot_judge' only when the input is not an answer at all."
    ),
    "support": (
        "You check one claim against a context made of numbered units. Label 'supported' only if the "
        "context states the claim (or it follows directly), and then copy into 'quote' the shortest "
        "verbatim span of ONE unit that supports it, character for character. Label 'unsupported' if the "
        "context contradicts the claim or states something else, 'insufficient_context' if the context "
        "does not address it; 'quote' is null for both. Use no outside knowledge. Reason briefly in "
        "'justification' first. Set 'cannot_judge' only when the claim is not a checkable statement."
    ),
    "relevance": (
        "You judge whether an answer addresses the question that was asked, not whether it is correct. "
        "'relevant': it answers the question; 'partially_relevant': it addresses part of it or drifts; "
        "'irrelevant': it answers something else. A justified refusal to answer is 'partially_relevant'. "
        "Reason briefly in 'justification' first. Set 'cannot_judge' only when the question is unreadable."
    ),
    "criterion": (
        "You grade an answer against a reference answer on exactly one criterion, named in the message. "
        "'pass': the criterion is fully met; 'partial': partly met; 'fail': not met. Copy the criterion "
        "name into 'criterion'. Judge only this criterion; ignore style and length. Reason briefly in "
        "'justification' first. Set 'cannot_judge' only when the reference does not allow a judgement."
    ),
    "nuggets": (
        "You check which information nuggets an answer contains. For every nugget listed, return its id "
        "with 'support' (the answer states it), 'partial_support' (the answer states part of it or a "
        "vaguer form) or 'not_support'. Return exactly one assignment per listed nugget id and no other "
        "ids. Use only the answer text. Reason briefly in 'justification' first."
    ),
}
TEMPLATES = {
    "claims": "<question>{question}</question>\n<answer>{answer}</answer>",
    "support": "<context>\n{context}\n</context>\n<claim>{claim}</claim>",
    "relevance": "<question>{question}</question>\n<answer>{answer}</answer>",
    "criterion": ("<criterion name=\"{name}\">{description}</criterion>\n<question>{question}</question>\n"
                  "<reference>{reference}</reference>\n<answer>{answer}</answer>"),
    "nuggets": "<question>{question}</question>\n<nuggets>\n{nuggets}\n</nuggets>\n<answer>{answer}</answer>",
}
VERDICTS: dict[str, type[Verdict]] = {"claims": ClaimsVerdict, "support": SupportVerdict,
                                      "relevance": RelevanceVerdict, "criterion": CriterionVerdict,
                                      "nuggets": NuggetVerdict}


@dataclass(frozen=True)
class Criterion:
    """One rubric criterion for correctness against the reference; ``weight`` > 0."""

    name: str
    description: str
    weight: float = 1.0


DEFAULT_CRITERIA = (
    Criterion("central_fact", "The answer states the central fact of the reference answer.", 2.0),
    Criterion("no_contradiction", "Nothing in the answer contradicts the reference answer.", 2.0),
    Criterion("complete", "The answer covers every part of the reference answer.", 1.0),
)


@dataclass(frozen=True)
class ContextUnit:
    """A packed unit as the judge sees it: its id, document, canonical start offset and text."""

    unit_id: str
    doc_id: str
    start: int
    text: str


@dataclass(frozen=True)
class CitationRef:
    unit_id: str
    start: int | None = None
    end: int | None = None


@dataclass(frozen=True)
class JudgeItem:
    """One (query, trial) to judge: the question, what the generator saw and said, and the golden labels."""

    query_id: str
    trial: int
    question: str
    answer: str | None
    outcome: str | None
    context: tuple[ContextUnit, ...] = ()
    citations: tuple[CitationRef, ...] = ()
    reference: str | None = None
    nuggets: tuple[tuple[str, str, bool], ...] = ()  # (id, text, vital)
    stratum: str | None = None
    trace_id: str | None = None

    @property
    def answered(self) -> bool:
        return self.outcome == "answered" and bool(self.answer and self.answer.strip())


def suite_pins(criteria: Sequence[Criterion] = DEFAULT_CRITERIA, metrics: Sequence[str] = METRICS
               ) -> tuple[str, str]:
    """(rubric_sha, prompt_sha) of a judge suite: sha256 over the rubrics (and the criteria) it uses, and
    over the templates it renders. These are the pins recorded on a judged run."""
    kinds = _kinds(metrics)
    rubric = "\n\x1e".join(RUBRICS[k] for k in kinds)
    if "criterion" in kinds:
        rubric += "\n\x1e" + "\n".join(f"{c.name}\t{c.weight!r}\t{c.description}" for c in criteria)
    prompt = "\n\x1e".join(TEMPLATES[k] for k in kinds)
    return sha256_text(rubric), sha256_text(prompt)


def _kinds(metrics: Sequence[str]) -> list[str]:
    unknown = sorted(set(metrics) - set(METRICS))
    if unknown:
        raise InputError(f"unknown judge metric(s) {unknown}; choose from {list(METRICS)}")
    kinds = []
    if {"faithfulness", "citations"} & set(metrics):
        kinds += ["claims", "support"]
    if "answer_relevance" in metrics:
        kinds.append("relevance")
    if "correctness" in metrics:
        kinds.append("criterion")
    if "nuggets" in metrics:
        kinds.append("nuggets")
    return kinds


# ---------------------------------------------------------------------------------------------- quotes
def _fold(text: str) -> tuple[str, list[int]]:
    """NFC text with every whitespace run folded to one space, and for each folded character its index in
    the original (so a quote found in the folded text maps back to canonical offsets)."""
    out: list[str] = []
    pos: list[int] = []
    space = False
    for i, ch in enumerate(text):
        if ch.isspace():
            if not space and out:
                out.append(" ")
                pos.append(i)
            space = True
            continue
        space = False
        out.append(ch)
        pos.append(i)
    while out and out[-1] == " ":
        out.pop()
        pos.pop()
    return unicodedata.normalize("NFC", "".join(out)), pos


def locate_quote(quote: str | None, context: Sequence[ContextUnit]) -> tuple[int, int, int] | None:
    """(unit index, canonical start, canonical end) of the first unit containing ``quote`` after
    whitespace folding and NFC, or None (an empty quote is never found)."""
    if not quote:
        return None
    q, _ = _fold(quote)
    if not q:
        return None
    for k, unit in enumerate(context):
        folded, pos = _fold(unit.text)
        at = folded.find(q)
        if at >= 0 and len(folded) == len(pos):
            return k, unit.start + pos[at], unit.start + pos[at + len(q) - 1] + 1
        if at >= 0:  # NFC changed the length: the unit is found, the span is the whole unit
            return k, unit.start, unit.start + len(unit.text)
    return None


def _context_text(context: Sequence[ContextUnit]) -> str:
    return "\n".join(f"<unit id=\"{i + 1}\">{u.text}</unit>" for i, u in enumerate(context))


# ---------------------------------------------------------------------------------------------- results
@dataclass
class JudgedMetrics:
    """What judging a set of items produced: result-row columns, the calls and the undefined counts.

    ``undefined`` counts (metric, reason) for every NaN value; ``calls`` counts every request's outcome, with
    ``not_started`` for requests a stopped run never sent; ``quote_not_found`` counts supported labels whose
    quote was not in the context."""

    columns: dict[str, list] = field(default_factory=lambda: {k: [] for k in (
        "query_id", "trial", "metric", "value", "stratum", "trace_id")})
    undefined: Counter = field(default_factory=Counter)
    calls: Counter = field(default_factory=Counter)
    quote_not_found: int = 0
    judgements: list[Judgement] = field(default_factory=list)
    stopped: str | None = None
    spend: float = 0.0

    def add(self, item: JudgeItem, metric: str, value: float, reason: str | None = None) -> None:
        c = self.columns
        c["query_id"].append(item.query_id)
        c["trial"].append(item.trial)
        c["metric"].append(metric)
        c["value"].append(float(value))
        c["stratum"].append(item.stratum)
        c["trace_id"].append(item.trace_id)
        if math.isnan(value):
            self.undefined[(metric, reason or "undefined")] += 1

    def means(self) -> dict[str, tuple[float, int, int]]:
        """metric -> (mean over defined values, defined count, undefined count)."""
        out = {}
        metric = np.asarray(self.columns["metric"], dtype=object)
        value = np.asarray(self.columns["value"], dtype=float)
        for m in dict.fromkeys(self.columns["metric"]):
            v = value[metric == m]
            ok = ~np.isnan(v)
            out[m] = (float(v[ok].mean()) if ok.any() else math.nan, int(ok.sum()), int((~ok).sum()))
        return out


def _verdict_or_reason(j: Judgement | None) -> tuple[Verdict | None, str | None]:
    if j is None:
        return None, "not_started"
    if j.outcome != "ok" or j.verdict is None:
        return None, f"judge_{j.outcome}"
    return j.verdict, None


# ---------------------------------------------------------------------------------------------- requests
def _request(run_id: str, item: JudgeItem, name: str, kind: str, user: str, rubric_sha: str,
             prompt_sha: str) -> JudgeRequest:
    return JudgeRequest(ItemKey(run_id, item.query_id, item.trial, name), kind, VERDICTS[kind], RUBRICS[kind], user,
                        rubric_sha=rubric_sha, prompt_sha=prompt_sha)


def first_stage(run_id: str, items: Sequence[JudgeItem], *, metrics: Sequence[str] = METRICS,
                criteria: Sequence[Criterion] = DEFAULT_CRITERIA) -> list[JudgeRequest]:
    """The requests that need nothing but the items: claims, relevance, one per criterion, nuggets."""
    kinds = _kinds(metrics)
    rubric_sha, prompt_sha = suite_pins(criteria, metrics)
    out = []
    for it in items:
        if not it.answered:
            continue
        if "claims" in kinds:
            out.append(_request(run_id, it, "claims", "claims",
                                TEMPLATES["claims"].format(question=it.question, answer=it.answer),
                                rubric_sha, prompt_sha))
        if "relevance" in kinds:
            out.append(_request(run_id, it, "relevance", "relevance",
                                TEMPLATES["relevance"].format(question=it.question, answer=it.answer),
                                rubric_sha, prompt_sha))
        if "criterion" in kinds and it.reference:
            for c in criteria:
                out.append(_request(run_id, it, f"criterion:{c.name}", "criterion",
                                    TEMPLATES["criterion"].format(name=c.name, description=c.description,
                                                                  question=it.question, reference=it.reference,
                                                                  answer=it.answer),
                                    rubric_sha, prompt_sha))
        if "nuggets" in kinds and it.nuggets:
            listing = "\n".join(f"<nugget id=\"{nid}\">{text}</nugget>" for nid, text, _ in it.nuggets)
            out.append(_request(run_id, it, "nuggets", "nuggets",
                                TEMPLATES["nuggets"].format(question=it.question, nuggets=listing,
                                                            answer=it.answer),
                                rubric_sha, prompt_sha))
    return out


def support_requests(run_id: str, item: JudgeItem, claims: Sequence[str], *, metrics: Sequence[str] = METRICS,
                     criteria: Sequence[Criterion] = DEFAULT_CRITERIA) -> list[JudgeRequest]:
    """One support request per claim against the item's packed context."""
    rubric_sha, prompt_sha = suite_pins(criteria, metrics)
    ctx = _context_text(item.context)
    return [_request(run_id, item, f"support:{i}", "support",
                     TEMPLATES["support"].format(context=ctx, claim=claim), rubric_sha, prompt_sha)
            for i, claim in enumerate(claims)]


# ---------------------------------------------------------------------------------------------- scoring
def judge_items(client, run_id: str, items: Sequence[JudgeItem], *, metrics: Sequence[str] = METRICS,
                criteria: Sequence[Criterion] = DEFAULT_CRITERIA) -> JudgedMetrics:
    """Judge every item with ``client`` (a ``JudgeClient``) and combine the verdicts into metric values.

    Two rounds of calls: claims/relevance/criteria/nuggets, then one support call per claim. If the client
    stops (spend cap, fatal error), ``stopped`` says why and the metrics that missed a call are undefined
    with reason ``not_started``; every finished call is already in the client's store."""
    _check_criteria(criteria)
    kinds = _kinds(metrics)
    out = JudgedMetrics()
    stage1 = first_stage(run_id, items, metrics=metrics, criteria=criteria)
    got = run_requests(client, stage1, out)
    stage2: list[JudgeRequest] = []
    claims_of: dict[tuple[str, int], list[str] | None] = {}
    for it in items:
        if it.answered and "claims" in kinds:
            verdict, _ = _verdict_or_reason(got.get((it.query_id, it.trial, "claims")))
            claims = None if verdict is None else [c for c in verdict.claims if c.strip()]
            claims_of[(it.query_id, it.trial)] = claims
            if claims:
                stage2 += support_requests(run_id, it, claims, metrics=metrics, criteria=criteria)
    if stage2 and out.stopped is None:
        got.update(run_requests(client, stage2, out))
    elif stage2:
        out.calls["not_started"] += len(stage2)
    for it in items:
        _score_item(it, kinds, metrics, criteria, got, claims_of.get((it.query_id, it.trial)), out)
    return out


def run_requests(client, requests: list[JudgeRequest], out) -> dict[tuple[str, int, str], Judgement]:
    """Send ``requests`` through ``client``; count their outcomes, spend and stop reason into ``out`` (a
    :class:`JudgedMetrics`, or anything with its ``judgements``, ``calls``, ``spend`` and ``stopped``)."""
    if not requests:
        return {}
    run = client.run(requests)
    out.judgements += run.judgements
    out.calls.update(j.outcome for j in run.judgements)
    if run.not_started:
        out.calls["not_started"] += len(run.not_started)
    out.spend += run.spend
    out.stopped = out.stopped or run.stopped
    return {(j.record.query_id, j.record.trial, j.record.item): j for j in run.judgements}


def _check_criteria(criteria: Sequence[Criterion]) -> None:
    names = [c.name for c in criteria]
    if not criteria:
        raise InputError("correctness needs at least one rubric criterion")
    if len(set(names)) != len(names):
        raise InputError(f"rubric criteria names repeat: {sorted({n for n in names if names.count(n) > 1})}")
    bad = [c.name for c in criteria if not (c.weight > 0 and math.isfinite(c.weight))]
    if bad:
        raise InputError(f"rubric criteria {bad}: weight must be a finite number > 0")


def _score_item(it: JudgeItem, kinds: list[str], metrics: Sequence[str], criteria: Sequence[Criterion],
                got: dict, claims: list[str] | None, out: JudgedMetrics) -> None:
    nan = math.nan
    key = (it.query_id, it.trial)
    if not it.answered:
        why = "not_answered" if it.outcome != "error" else "generation_error"
        for m in _metric_names(metrics):
            if m in NUGGET_METRICS and it.nuggets and it.outcome in ("abstained", "refused"):
                continue
            out.add(it, m, nan, why if m not in NUGGET_METRICS else ("no_nuggets" if not it.nuggets else why))
        if "nuggets" in kinds and it.nuggets and it.outcome in ("abstained", "refused"):
            _add_nuggets(it, {}, out)
        return
    if "claims" in kinds:
        _score_claims(it, metrics, got, claims, out)
    if "relevance" in kinds:
        v, why = _verdict_or_reason(got.get((*key, "relevance")))
        out.add(it, "answer_relevance", nan if v is None else RELEVANCE_CREDIT[v.label], why)
    if "criterion" in kinds:
        if not it.reference:
            out.add(it, "correctness", nan, "no_reference")
        else:
            total, weights, why = 0.0, 0.0, None
            for c in criteria:
                v, why = _verdict_or_reason(got.get((*key, f"criterion:{c.name}")))
                if v is None:
                    break
                if v.criterion != c.name:
                    why = "criterion_mismatch"
                    break
                total += c.weight * CRITERION_CREDIT[v.label]
                weights += c.weight
            out.add(it, "correctness", nan if why else total / weights, why)
    if "nuggets" in kinds:
        if not it.nuggets:
            for m in NUGGET_METRICS:
                out.add(it, m, nan, "no_nuggets")
            return
        v, why = _verdict_or_reason(got.get((*key, "nuggets")))
        if v is not None:
            ids = [a.nugget_id for a in v.assignments]
            want = {nid for nid, _, _ in it.nuggets}
            if len(set(ids)) != len(ids) or set(ids) != want:
                v, why = None, "nugget_mismatch"
        if v is None:
            for m in NUGGET_METRICS:
                out.add(it, m, nan, why)
            return
        _add_nuggets(it, {a.nugget_id: _NUGGET_LABEL[a.label] for a in v.assignments}, out)


def _add_nuggets(it: JudgeItem, labels: dict[str, str], out: JudgedMetrics) -> None:
    scores = nugget_scores([[Nugget(nid, vital) for nid, _, vital in it.nuggets]], [labels])
    for m, arr in zip(NUGGET_METRICS, (scores.v_strict, scores.v, scores.a_strict, scores.a), strict=True):
        value = float(arr[0])
        out.add(it, m, value, "no_vital_nuggets" if math.isnan(value) else None)


def _metric_names(metrics: Sequence[str]) -> list[str]:
    names = []
    for m in metrics:
        if m == "citations":
            names += ["citation_precision", "citation_recall"]
        elif m == "nuggets":
            names += list(NUGGET_METRICS)
        else:
            names.append(m)
    return names


def _score_claims(it: JudgeItem, metrics: Sequence[str], got: dict, claims: list[str] | None,
                  out: JudgedMetrics) -> None:
    nan = math.nan
    key = (it.query_id, it.trial)
    wanted = [m for m in ("faithfulness", "citation_precision", "citation_recall")
              if m in _metric_names(metrics)]
    why = None
    if claims is None:
        _, why = _verdict_or_reason(got.get((*key, "claims")))
    elif not claims:
        why = "no_claims"
    located: list[tuple[int, int, int] | None] = []
    if why is None:
        for i in range(len(claims)):
            v, why = _verdict_or_reason(got.get((*key, f"support:{i}")))
            if v is None:
                break
            where = None
            if v.label == "supported":
                where = locate_quote(v.quote, it.context)
                if where is None:
                    out.quote_not_found += 1
            located.append(where)
    if why is not None:
        for m in wanted:
            reason = why
            if m == "citation_precision" and not it.citations:
                reason = "no_citations"
            out.add(it, m, nan, reason)
        return
    n = len(claims)
    if "faithfulness" in wanted:
        out.add(it, "faithfulness", sum(w is not None for w in located) / n)
    if "citation_precision" in wanted or "citation_recall" in wanted:
        support = np.zeros((len(it.citations), n), dtype=bool)
        for ci, cite in enumerate(it.citations):
            for k, where in enumerate(located):
                if where is None or it.context[where[0]].unit_id != cite.unit_id:
                    continue
                if cite.start is None or (where[1] < cite.end and cite.start < where[2]):
                    support[ci, k] = True
        if "citation_precision" in wanted:
            if it.citations:
                out.add(it, "citation_precision", float(support.any(axis=1).mean()))
            else:
                out.add(it, "citation_precision", nan, "no_citations")
        if "citation_recall" in wanted:
            out.add(it, "citation_recall", float(support.any(axis=0).mean()) if it.citations else 0.0)


def items_from(traces: Iterable, golden, unit_text) -> list[JudgeItem]:
    """Judge items from traces and the golden set. ``unit_text(unit)`` returns a packed unit's canonical
    text (``unit.text`` when the trace carries it, else the corpus span)."""
    out = []
    for t in traces:
        q = golden[t.query_id] if t.query_id in golden else None
        out.append(JudgeItem(
            query_id=t.query_id, trial=t.trial,
            question=t.question or (q.question if q is not None else ""),
            answer=t.answer, outcome=t.outcome,
            context=tuple(ContextUnit(u.unit_id, u.doc_id, u.start, unit_text(u)) for u in t.packed),
            citations=tuple(CitationRef(c.unit_id, c.start, c.end) for c in t.citations),
            reference=q.reference_answer if q is not None else None,
            nuggets=tuple((n.id, n.text, n.vital) for n in q.nuggets) if q is not None else (),
            stratum=q.stratum if q is not None else None, trace_id=t.trace_id,
        ))
    return out


__all__ = [
    "DEFAULT_CRITERIA",
    "METRICS",
    "NUGGET_METRICS",
    "RUBRICS",
    "TEMPLATES",
    "CitationRef",
    "ContextUnit",
    "Criterion",
    "JudgeItem",
    "JudgedMetrics",
    "first_stage",
    "items_from",
    "judge_items",
    "locate_quote",
    "suite_pins",
    "support_requests",
]
