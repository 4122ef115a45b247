"""Pairwise judging with a position swap (spec §11.2–§11.3): which of two answers to one question is better?

Every pair is asked twice, once with answer A in slot 1 and once with answer B in slot 1, through the judge
client (the store is the cache: a pair judged twice is paid once). Each order's verdict (``first``,
``second``, ``tie``) is mapped back to A / B / tie; per pair:

- **preference** over both orders: A, B or tie when the two orders agree, ``inconsistent`` when they do not
  (a tie in one order and a preference in the other disagree too);
- **score** of B = 1 for a B win, 0.5 for a tie or an inconsistent pair, 0 for an A win: the mean over both
  orders, since an inconsistent pair is one vote each way;
- **position bias**: the share of non-tie verdicts that went to slot 1 (0.5 = none) and the share of pairs
  whose two orders disagree — the judge's noise floor: a preference score within it of 0.5 says nothing.

A pair an order did not answer with a verdict (escape hatch, refusal, truncation, malformed, error, or a
call a stopped run never made) has no preference and is counted by reason. Intervals are percentile
bootstrap intervals over clusters (queries, or label items), so several trials of one query count once.

The same verdicts validate a pairwise judge against labelled pairs (:func:`validate_pairwise`): the judge's
label of an item is its preference over both orders (``inconsistent`` counts as ``tie``), compared on the
ordered scale a < tie < b with a linear-weighted kappa.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ragassay.errors import InputError
from ragassay.judges.labels import KIND_LABELS, LabelSet, PairwiseItem, load_labels
from ragassay.judges.protocol import ItemKey, Judgement, JudgeRequest, Verdict, sha256_text
from ragassay.judges.validate import (
    DEFAULT_RESAMPLES,
    Floor,
    _ci,
    agreement_figures,
    compared_items,
    label_counts,
    worst_case_figures,
)

KIND = "pairwise"
SCALE = "preference"
LABELS = KIND_LABELS[KIND]
CLASSES = LABELS[:-1]  # a < tie < b: the linear kappa weights count a vs b as twice a vs tie
ITEM_AB = "pairwise:ab"  # answer A in slot 1
ITEM_BA = "pairwise:ba"  # answer B in slot 1
SCORE = {"b": 1.0, "tie": 0.5, "inconsistent": 0.5, "a": 0.0}


class PairwiseVerdict(Verdict):
    """Which of two answers to the same question is better: the one in slot 1 (``first``), in slot 2
    (``second``), or neither (``tie``)."""

    preferred: Literal["first", "second", "tie"]


# The frozen rubric (system prompt) and template; their shas are the judge pins of the pairwise kind.
RUBRIC = (
    "You compare two answers to the same question and say which one answers it better. Judge content only: "
    "is the answer correct, does it address what was asked, and, when a context is given, does the context "
    "support it. Length, style, confidence and the order in which the two answers are shown are not "
    "criteria. 'first': the answer in <answer_1> is better; 'second': the answer in <answer_2> is better; "
    "'tie': they are equally good or equally bad, or state the same thing in other words. Reason briefly in "
    "'justification' first. Set 'cannot_judge' only when the question is unreadable or neither text is an "
    "answer."
)
TEMPLATE = "<question>{question}</question>\n{context}<answer_1>{first}</answer_1>\n<answer_2>{second}</answer_2>"
CONTEXT_BLOCK = "<context>\n{context}\n</context>\n"
RUBRIC_SHA = sha256_text(RUBRIC)
PROMPT_SHA = sha256_text(TEMPLATE + "\n\x1e" + CONTEXT_BLOCK)


def pairwise_pins(cfg) -> dict[str, Any]:
    """The judge pins of the pairwise kind: the config's model and settings with the pairwise rubric and
    prompt shas (a cascade is left out: it routes support judgements, never pairs). A local judge has no
    pairwise verdict and is refused."""
    from ragassay.judges.config import judge_settings

    if cfg.provider == "local":
        raise InputError(f"a pairwise judge is an LLM judge (provider anthropic or openai); the local "
                         f"{cfg.model} judge scores support only")
    pins = {k: v for k, v in cfg.pins().items()
            if k not in ("cascade", "settings", "metrics", "rubric_sha", "prompt_sha")}
    pins.update(rubric_sha=RUBRIC_SHA, prompt_sha=PROMPT_SHA, kind=KIND)
    pins["settings"] = judge_settings(pins)
    return pins


# ---------------------------------------------------------------------------------------------- requests
@dataclass(frozen=True)
class Pair:
    """Two answers to one question; ``key``/``trial`` name it (a query and trial, or a label item)."""

    key: str
    trial: int
    question: str
    answer_a: str
    answer_b: str
    context: str | None = None


def golden_context(query) -> str | None:
    """The context a pairwise judge sees for a golden query: its evidence quotes of grade 2 or more (the
    passages that answer it), one per line, the same for both answers; None without such evidence."""
    quotes = [ev.quote for ev in query.evidence if ev.grade >= 2 and ev.quote]
    return "\n".join(quotes) or None


def render(pair: Pair, first: str, second: str) -> str:
    ctx = CONTEXT_BLOCK.format(context=pair.context) if pair.context else ""
    return TEMPLATE.format(question=pair.question, context=ctx, first=first, second=second)


def pair_requests(run_id: str, pair: Pair) -> tuple[JudgeRequest, JudgeRequest]:
    """The two requests of a pair: A in slot 1 (item ``pairwise:ab``), then B in slot 1 (``pairwise:ba``).
    Identical answers make identical requests, which the client pays once."""
    def request(item: str, first: str, second: str) -> JudgeRequest:
        return JudgeRequest(ItemKey(run_id, pair.key, pair.trial, item), KIND, PairwiseVerdict, RUBRIC,
                            render(pair, first, second), rubric_sha=RUBRIC_SHA, prompt_sha=PROMPT_SHA)

    return request(ITEM_AB, pair.answer_a, pair.answer_b), request(ITEM_BA, pair.answer_b, pair.answer_a)


# ---------------------------------------------------------------------------------------------- verdicts
_BACK = {ITEM_AB: {"first": "a", "second": "b", "tie": "tie"},
         ITEM_BA: {"first": "b", "second": "a", "tie": "tie"}}


@dataclass(frozen=True)
class PairJudgement:
    """Both orders' verdicts on one pair: ``slot_ab``/``slot_ba`` as the judge gave them (first, second,
    tie), ``order_ab``/``order_ba`` mapped back to a, b or tie; None for an order without a verdict, and then
    ``reason`` says why (``judge_<outcome>`` or ``not_started``; the A-first order's reason first)."""

    key: str
    trial: int
    slot_ab: str | None
    slot_ba: str | None
    reason: str | None = None

    @property
    def order_ab(self) -> str | None:
        return None if self.slot_ab is None else _BACK[ITEM_AB][self.slot_ab]

    @property
    def order_ba(self) -> str | None:
        return None if self.slot_ba is None else _BACK[ITEM_BA][self.slot_ba]

    @property
    def judged(self) -> bool:
        return self.slot_ab is not None and self.slot_ba is not None

    @property
    def agreed(self) -> bool | None:
        return self.order_ab == self.order_ba if self.judged else None

    @property
    def preference(self) -> str | None:
        """a, b or tie when both orders agree, inconsistent when they do not, None when not judged."""
        if not self.judged:
            return None
        return self.order_ab if self.agreed else "inconsistent"

    @property
    def label(self) -> str | None:
        """The judge's label for validation: the preference, an inconsistent pair as tie."""
        p = self.preference
        return "tie" if p == "inconsistent" else p

    @property
    def score(self) -> float:
        """B's score: 1 B win, 0.5 tie or inconsistent, 0 A win; NaN when not judged."""
        return math.nan if self.preference is None else SCORE[self.preference]


def _slot(j: Judgement | None) -> tuple[str | None, str | None]:
    if j is None:
        return None, "not_started"
    if j.outcome != "ok" or j.verdict is None:
        return None, f"judge_{j.outcome}"
    return j.verdict.preferred, None


def judge_pairs(client, run_id: str, pairs: Sequence[Pair]):
    """Both orders of every pair through ``client`` (a ``JudgeClient``: cache, retries, spend cap) under
    ``run_id``; returns one :class:`PairJudgement` per pair (in order) and the client's ``JudgeRun``."""
    from ragassay.judges.providers import JudgeRun

    requests = [r for p in pairs for r in pair_requests(run_id, p)]
    run = client.run(requests) if requests else JudgeRun([], [], None, 0.0)
    got = {(j.record.query_id, j.record.trial, j.record.item): j for j in run.judgements}
    out = []
    for p in pairs:
        ab, why_ab = _slot(got.get((p.key, p.trial, ITEM_AB)))
        ba, why_ba = _slot(got.get((p.key, p.trial, ITEM_BA)))
        out.append(PairJudgement(p.key, p.trial, ab, ba, why_ab or why_ba))
    return out, run


def call_counts(run) -> dict[str, Any]:
    """The call accounting of a judge run, as validation records keep it."""
    calls = Counter(j.outcome for j in run.judgements)
    if run.not_started:
        calls["not_started"] += len(run.not_started)
    return {"calls": dict(sorted(calls.items())), "spend": run.spend, "paid_calls": run.paid_calls,
            "cache_hits": run.cache_hits, "stopped": run.stopped}


# ---------------------------------------------------------------------------------------------- figures
def cluster_mean(values: Sequence[float], clusters: Sequence[str], *, center: float = 0.0,
                 n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, confidence: float = 0.95) -> dict:
    """Mean of ``values`` with a percentile bootstrap interval that resamples whole clusters (each resample's
    mean = drawn cluster sums / drawn cluster sizes). ``p_value`` tests mean = ``center`` (null-shifted,
    never 0). No values: undefined; one cluster: a value without an interval."""
    from ragassay.stats.bootstrap import bootstrap_deltas

    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {**_ci(math.nan, np.array([]), confidence), "n": 0, "n_clusters": 0, "p_value": None}
    res = bootstrap_deltas(v - center, clusters=np.asarray(clusters), n_resamples=n_resamples,
                           confidence=confidence, seed=seed, return_distribution=True)
    m = res.metrics[0]
    out = _ci(m.delta + center, res.distribution[:, 0] + center, confidence)
    return {**out, "n": int(v.size), "n_clusters": m.n_clusters,
            "p_value": m.p_value if m.defined else None}


def position_bias(judged: Sequence[PairJudgement], clusters: Sequence[str], *,
                  n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, confidence: float = 0.95) -> dict:
    """Over pairs judged in both orders: ``first_slot_rate`` = non-tie verdicts that went to slot 1 / non-tie
    verdicts (0.5 = no position bias; undefined when every verdict is a tie) and ``disagreement`` = pairs
    whose two orders disagree / pairs (the noise floor), each with a cluster bootstrap interval."""
    first, first_cl = [], []
    for p, c in zip(judged, clusters, strict=True):
        for slot in (p.slot_ab, p.slot_ba):
            if slot != "tie":
                first.append(float(slot == "first"))
                first_cl.append(c)
    opts = {"n_resamples": n_resamples, "confidence": confidence}
    rate = cluster_mean(first, first_cl, center=0.5, seed=seed + 1, **opts)
    dis = cluster_mean([float(not p.agreed) for p in judged], clusters, seed=seed + 2, **opts)
    return {"first_slot_rate": {**rate, "non_tie_verdicts": len(first), "tie_verdicts": 2 * len(judged) - len(first)},
            "disagreement": dis}


def preference_figures(results: Sequence[PairJudgement], clusters: Sequence[str], *,
                       n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, confidence: float = 0.95) -> dict:
    """Rates (B wins, A wins, ties, inconsistent) over the pairs judged in both orders, B's preference score
    mean(1 B, 0.5 tie or inconsistent, 0 A) with a cluster bootstrap interval and a p-value for 0.5 (no
    preference), the position bias, and the pairs without a preference by reason."""
    keep = [k for k, r in enumerate(results) if r.judged]
    judged = [results[k] for k in keep]
    cl = [clusters[k] for k in keep]
    n = len(judged)
    counts = Counter(r.preference for r in judged)
    names = {"b": "b_win", "a": "a_win", "tie": "tie", "inconsistent": "inconsistent"}
    return {
        "n": n,
        "counts": {names[k]: counts.get(k, 0) for k in names},
        "rates": {names[k]: (counts.get(k, 0) / n if n else None) for k in names},
        "preference": cluster_mean([r.score for r in judged], cl, center=0.5, n_resamples=n_resamples, seed=seed,
                                   confidence=confidence),
        "position_bias": position_bias(judged, cl, n_resamples=n_resamples, seed=seed, confidence=confidence),
        "undefined": dict(sorted(Counter(r.reason for r in results if not r.judged).items())),
    }


# ---------------------------------------------------------------------------------------------- labels
def item_pair(it: PairwiseItem) -> Pair:
    """The pair a labelled item asks about (trial 0, keyed by its item_id)."""
    return Pair(it.item_id, 0, it.question, it.answer_a, it.answer_b, it.context)


def preference_counts(items) -> dict[str, int]:
    """Labels per class of the preference scale a < tie < b (cannot_tell left out)."""
    return label_counts(items, SCALE, KIND)


def load_pairwise_labels(path: str | Path) -> LabelSet:
    """A pairwise labels file read by the one label loader (:func:`ragassay.judges.labels.load_labels`, kind
    ``pairwise``): one JSON object per line with item_id, question, optional context, answer_a, answer_b and
    label a | b | tie | cannot_tell, plus the fields every kind takes (labelled_by, kind, ...)."""
    return load_labels(path, KIND)


def bundled_pairwise_labels() -> Path:
    """The bundled example pairwise label file (automated labels over the license golden set)."""
    from importlib.resources import files

    return Path(str(files("ragassay") / "data" / "judge_examples" / "pairwise.jsonl"))


# ---------------------------------------------------------------------------------------------- validation
def pairwise_validation_figures(items: Sequence[PairwiseItem], judged: Sequence[PairJudgement], *,
                                n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                                confidence: float = 0.95) -> dict:
    """The figures of a pairwise validation, with the keys every validation kind has (so the common record
    and :class:`~ragassay.judges.validate.Floor` apply): agreement on the ordered scale a < tie < b
    (linear-weighted kappa), per class, confusion and distributions over the items both the label and the
    judge decide, and the ``position_bias`` block over every item judged in both orders."""
    if len(items) != len(judged):
        raise InputError(f"{len(items)} items but {len(judged)} judgements; judge every item once")
    code = {c: i for i, c in enumerate(CLASSES)}
    used, excluded = compared_items(items, judged, lambda jd: jd.judged, lambda jd: jd.reason, "pairs")
    h = np.array([code[it.label] for it, _ in used], dtype=np.int64)
    j = np.array([code[jd.label] for _, jd in used], dtype=np.int64)
    out: dict[str, Any] = {"scale": SCALE, "n_items": len(items), "n_used": len(used),
                           "excluded": dict(sorted(excluded.items())), "n_resamples": n_resamples,
                           "confidence": confidence, "seed": seed}
    # an ordered scale: linear-weighted kappa (validate.ORDERED_SCALES)
    out.update(agreement_figures(h, j, CLASSES, scale=SCALE, n_resamples=n_resamples, seed=seed,
                                 confidence=confidence))
    out["n"] = len(used)
    unanswered = np.array([code[it.label] for it, jd in zip(items, judged, strict=True)
                           if it.label != "cannot_tell" and not jd.judged], dtype=np.int64)
    out["worst_case"] = worst_case_figures(h, j, unanswered, CLASSES, scale=SCALE, n_resamples=n_resamples,
                                           seed=seed, confidence=confidence)
    recalls = [c["recall"]["value"] for c in out["per_class"] if c["recall"]["defined"]]
    out["min_class_recall"] = min(recalls) if recalls else None
    both = [jd for jd in judged if jd.judged]
    out["position_bias"] = position_bias(both, [jd.key for jd in both], n_resamples=n_resamples, seed=seed,
                                         confidence=confidence)
    out["judge_preferences"] = dict(sorted(Counter(jd.preference for jd in both).items()))
    # the support kind's probes have no pairwise meaning; present and undefined so common readers of a
    # record (the validate table, the report section) show them as such
    out["verbosity"] = {"undefined": "not measured for pairwise judgements"}
    out["self_preference"] = {"undefined": "not measured for pairwise judgements"}
    out["calibration"] = {"undefined": "a pairwise judge emits no score"}
    cases = sorted({it.case for it, _ in used if it.case})
    out["by_case"] = {c: {"n": len(pairs), "agreement": sum(it.label == jd.label for it, jd in pairs) / len(pairs)}
                      for c in cases for pairs in ([(it, jd) for it, jd in used if it.case == c],)}
    return out


def validate_pairwise(cfg, labels_path: str | Path, store, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                      confidence: float = 0.95, floor: Floor | None = None,
                      progress: Callable[[int, int], None] | None = None) -> tuple[dict, dict, LabelSet]:
    """Validate a pairwise judge against labelled pairs: (figures, call accounting, label set).

    ``progress(done, total)`` counts the labelled pairs judged (both orders of a pair): the calls run
    concurrently inside the judge's client, so it is called with 0 before them and the total after.

    Refused before any call (``InputError``): a local judge, bad labels, and a label set that cannot earn
    ``floor`` (default :class:`Floor`: 100 comparable items, 10 per class a / tie / b, more than one class).
    The calls belong to the judge's validation run in ``store`` (the cache: a rerun pays nothing); a spend-cap
    stop raises ``JudgeStopped`` before any figure. Record it with ``validation_record(pairwise_pins(cfg),
    label_set, figures, calls=calls, kind="pairwise")``."""
    from ragassay.judges.config import build_judge
    from ragassay.judges.providers import JudgeStopped
    from ragassay.judges.validate import validation_run

    pins = pairwise_pins(cfg)
    label_set = load_pairwise_labels(labels_path)
    floor = floor or Floor()
    counts = preference_counts(label_set.items)
    problem = floor.label_set_problem(counts)
    if problem:
        shown = ", ".join(f"{c} {n}" for c, n in counts.items())
        raise InputError(f"{label_set.path}: {problem} on the preference scale ({shown}); a validation on it "
                         "could not earn the gate's floor. Label more pairs; nothing was judged or recorded")
    run_id = validation_run(store, pins) if store is not None else "validation"
    total = len(label_set.items)
    if progress is not None:
        progress(0, total)
    judged, run = judge_pairs(build_judge(cfg, store), run_id, [item_pair(it) for it in label_set.items])
    calls = call_counts(run)
    if run.stopped:
        raise JudgeStopped(f"judge run stopped: {run.stopped}; finished calls are stored: rerun (with a higher "
                           "spend_cap) to pay only for the rest. No validation was recorded")
    if progress is not None:
        progress(total, total)
    figures = pairwise_validation_figures(label_set.items, judged, n_resamples=n_resamples, seed=seed,
                                          confidence=confidence)
    return figures, calls, label_set


def matching_pairwise_validation(store, pins: dict, floor: Floor | None = None, *,
                                 label_set_version: str | None = None) -> dict:
    """Whether the judge with ``pins`` (:func:`pairwise_pins`) is validated for the pairwise kind: the record
    :func:`~ragassay.judges.validate.best_validation` picks on the preference scale (full pins; people's labels
    first, then the largest, then the latest; on ``label_set_version`` when given), as for every other kind,
    checked against ``floor``."""
    from ragassay.judges.validate import best_validation

    record, n_found = best_validation(store, pins, KIND, SCALE, label_set_version=label_set_version)
    ok, why = (floor or Floor()).check(record)
    if n_found > 1:
        why += f"; the largest of {n_found} matching records"
    return {"status": "validated" if ok else "unvalidated", "detail": why,
            "validation_id": None if record is None else record.get("validation_id")}


__all__ = ["CLASSES", "ITEM_AB", "ITEM_BA", "KIND", "PROMPT_SHA", "RUBRIC", "RUBRIC_SHA", "SCALE", "TEMPLATE",
           "Pair", "PairJudgement", "PairwiseItem", "PairwiseVerdict", "preference_counts", "bundled_pairwise_labels",
           "call_counts", "cluster_mean", "golden_context", "item_pair", "judge_pairs", "load_pairwise_labels",
           "matching_pairwise_validation", "pair_requests", "pairwise_pins", "pairwise_validation_figures",
           "position_bias", "preference_figures", "validate_pairwise"]
