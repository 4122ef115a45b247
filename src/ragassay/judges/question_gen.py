"""The LLM question generator of ``ragassay golden synth --generator llm``: questions with verbatim excerpts,
asked of a model through the judge clients (the real SDKs), cached in the store, costed, then filtered exactly
as the offline generator's (:func:`ragassay.golden.synth.apply_filters`).

**Passages.** Every document's canonical text is cut into passages (:func:`ragassay.golden.synth.passages`:
consecutive sentences of one paragraph, up to 150 words) and the seed samples them without replacement. For
``n`` answerable questions it asks ⌈(n + max(⌊n/2⌋, 4)) / 2⌉ passages (two questions each, a third more than
needed, since the filters remove some); fewer when the corpus has fewer passages.

**One call per passage**, structured output (:class:`QuestionsVerdict`, a strict JSON schema). The frozen
:data:`PROMPT` asks for up to two questions, each with one to three excerpts copied verbatim from the passage
(more are taken as given: the filters and the surplus count see them): single questions (no ``and``
outside a proper noun), worded as a user would, answerable without the passage, with the fewest excerpts
that answer them. An excerpt that differs from the passage only in whitespace (a line break quoted as a
space) is replaced by the passage's own text; anything else must be verbatim, and a question with a quote
that is not in its document is dropped by the excerpt filter (``out_of_corpus``), like any generator's. Questions are stratum ``paraphrase`` with the tag ``form:llm``; negatives still come from
documents outside the corpus, as in the offline generator.

**Calls** go through :class:`~ragassay.judges.providers.base.JudgeClient` and so share its concurrency,
retries, spend cap, batch mode and cache: each is a ``judge_calls`` row (judge ``golden-synth``, query id
``<doc_id>@<offset>``, item ``questions``) of the store run that owns the generator's calls (source
``judge:golden-synth``, one per model, like a judge validation's), and a request already answered in the store
(same provider, model, settings, prompt and passage) is never paid again. Every call ends in one outcome (``ok``,
``cannot_judge`` — nothing to ask about —, ``refused``, ``truncated``, ``malformed``, ``error``), counted; only
``ok`` gives questions. A run the spend cap (or an error every call would hit) stops raises ``JudgeStopped``
after the finished calls are stored, so a rerun pays only for the rest.

**Pins** in the manifest's ``generator``: ``kind: llm``, ``model`` (``provider:model``), ``prompt_sha``
(sha256 of the prompt and the template), ``settings`` (the judge settings pin: sampling, structured output)
and the outcome counts (``calls``), beside the offline generator's seed, embedder, filters and date.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from ragassay.errors import InputError
from ragassay.golden.synth import (
    Candidate,
    Excerpt,
    SynthResult,
    apply_filters,
    offline_candidates,
    passages,
)
from ragassay.judges.config import SETTINGS, STRUCTURED_OUTPUT, JudgeConfig, judge_settings
from ragassay.judges.cost import CostLine, cost_line
from ragassay.judges.protocol import OUTCOMES, ItemKey, JudgeRequest, Verdict, sha256_text
from ragassay.judges.providers import JudgeClient, JudgeStopped

KIND = "llm"
STRATUM = "paraphrase"
FORM = "llm"
JUDGE = "golden-synth"  # the judge column of its judge_calls rows
SOURCE = "judge:golden-synth"  # the source of the store run that owns them
ITEM = "questions"
QUESTIONS_PER_PASSAGE = 2

PROMPT = (
    "You write questions for testing a search system over a document collection. You are given one passage "
    f"of one document. Write up to {QUESTIONS_PER_PASSAGE} questions that a user of the collection could ask "
    "and that this passage answers, each with the excerpts of the passage that answer it.\n"
    "- One question asks one thing: never join two questions with 'and' ('and' inside a name, such as "
    "'Terms and Conditions', is fine).\n"
    "- Word each question as a user would, in your own words: do not copy the passage's phrasing and do not "
    "put the answer in the question.\n"
    "- A question must make sense without the passage: name what it is about, never 'the passage', 'this "
    "section' or 'the text'.\n"
    "- Copy each excerpt verbatim from the passage, character for character (whole sentences or a "
    "contiguous part of one); give one to three excerpts per question, the fewest that hold the answer.\n"
    "- The questions ask different things.\n"
    "Reason briefly in 'justification' first. If the passage holds nothing a user would ask about (a "
    "heading, a list of names, boilerplate), set 'cannot_judge' to true and give no questions."
)
TEMPLATE = '<document id="{doc_id}">\n{passage}\n</document>'
PROMPT_SHA = sha256_text(PROMPT + "\n\x1e" + TEMPLATE)


class SynthQuestion(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    question: str
    excerpts: list[str]


class QuestionsVerdict(Verdict):
    """The structured output of one passage's call: its questions, each with verbatim excerpts."""

    questions: list[SynthQuestion]


@dataclass(frozen=True)
class Passage:
    doc_id: str
    start: int
    text: str

    @property
    def key(self) -> str:
        return f"{self.doc_id}@{self.start}"


@dataclass
class LLMSynthResult:
    """The filtered questions, the outcome of every call (``not_started`` too), the cost line and the pins."""

    result: SynthResult
    calls: dict[str, int]
    cost: CostLine
    pins: dict


def check_config(cfg: JudgeConfig, where: str) -> None:
    """An LLM generator needs a provider that makes calls; a local judge has no model to ask."""
    if cfg.provider == "local":
        raise InputError(f"{where}: provider local is a judge without a model; golden synth --generator llm "
                         "needs provider openai or anthropic (with model and prices)")


def generator_pins(cfg: JudgeConfig) -> dict:
    """``kind``, ``model``, ``prompt_sha`` and ``settings`` (the judges' settings pin) of the generator."""
    model = f"{cfg.provider}:{cfg.model}"
    settings = judge_settings({"provider": cfg.provider, "judge_model": model, "structured_output": STRUCTURED_OUTPUT,
                               **{k: getattr(cfg, k) for k in SETTINGS}})
    return {"kind": KIND, "model": model, "prompt_sha": PROMPT_SHA, "settings": settings}


def n_passages(n: int) -> int:
    """Passages to ask for ``n`` answerable questions: ⌈(n + max(⌊n/2⌋, 4)) / 2⌉, none for n = 0."""
    return math.ceil((n + max(n // 2, 4)) / QUESTIONS_PER_PASSAGE) if n else 0


def sample_passages(corpus, n: int, seed: int) -> tuple[list[Passage], int]:
    """The passages to ask about (seeded sample without replacement) and how many the corpus has."""
    pool = [Passage(doc.doc_id, start, text) for doc in corpus for start, text in passages(doc.text)]
    order = np.random.default_rng(seed).permutation(len(pool))[:n_passages(n)]
    return [pool[int(i)] for i in order], len(pool)


def request_for(p: Passage, run_id: str) -> JudgeRequest:
    return JudgeRequest(ItemKey(run_id, p.key, 0, ITEM), JUDGE, QuestionsVerdict, PROMPT,
                        TEMPLATE.format(doc_id=p.doc_id, passage=p.text), prompt_sha=PROMPT_SHA)


def synth_run(store, model: str) -> str:
    """The store run that owns the generator's calls with ``model`` (created once, reused by every rerun)."""
    from ragassay.store import RunRecord

    name = f"golden-synth {model}"
    for rec in store.list_runs():
        if rec.name == name and rec.source == SOURCE:
            return rec.run_id
    run_id = store.create_run(RunRecord(name=name, source=SOURCE, judge_model=model,
                                        extra={"purpose": "golden synth --generator llm calls"}))
    store.finish_run(run_id, "complete")
    return run_id


def in_passage(passage: Passage, quote: str) -> tuple[str, int]:
    """(excerpt, document offset or -1): the quote itself where the passage holds it verbatim; the passage's
    own text where they differ in whitespace only; else the quote unchanged at -1 (the excerpt filter then
    looks for it in the whole document)."""
    at = passage.text.find(quote) if quote.strip() else -1
    if at >= 0:
        return quote, passage.start + at
    words = quote.split()
    m = re.search(r"\s+".join(map(re.escape, words)), passage.text) if words else None
    if m is None:
        return quote, -1
    return m.group(), passage.start + m.start()


def candidates_from(verdict: QuestionsVerdict, passage: Passage) -> tuple[list[Candidate], int]:
    """One candidate per non-blank question (excerpts in the model's order, repeats removed; none: a blank
    first excerpt, which the excerpt filter drops) and the number of blank questions."""
    out, blank = [], 0
    for q in verdict.questions:
        question = " ".join(q.question.split())
        if not question:
            blank += 1
            continue
        located = list(dict.fromkeys(in_passage(passage, e) for e in q.excerpts))
        (quote, start), *more = located or [("", -1)]
        out.append(Candidate(question, FORM, STRATUM, passage.doc_id, quote, start,
                             more=[Excerpt(x, s) for x, s in more]))
    return out, blank


def synthesize_llm(corpus, client: JudgeClient, cfg: JudgeConfig, *, n: int, embed, seed: int = 0,
                   negatives_from=None, n_negative: int = 0, threshold: float | None = None,
                   show_pairs: int = 0) -> LLMSynthResult:
    """Ask ``client`` about the sampled passages, then apply the offline path's filters; see the module doc.
    Raises ``JudgeStopped`` (finished calls stored) when the spend cap or a fatal provider error stopped it."""
    chosen, pool = sample_passages(corpus, n, seed)
    run_id = synth_run(client.store, f"{cfg.provider}:{cfg.model}") if client.store is not None else JUDGE
    requests = [request_for(p, run_id) for p in chosen]
    run = client.run(requests)
    calls = {o: run.counts.get(o, 0) for o in OUTCOMES} | {"not_started": len(run.not_started)}
    if run.stopped is not None:
        raise JudgeStopped(
            f"golden synth stopped: {run.stopped}; {len(run.judgements)} of {len(requests)} passage(s) asked, "
            f"{len(run.not_started)} not started, ${run.spend:.4f} spent, nothing written. Every finished call is "
            f"stored in {getattr(client.store, 'path', 'the store')}, so rerunning (with a higher spend_cap) pays "
            "only for the rest")
    by_key = {p.key: p for p in chosen}
    raw: list[Candidate] = []
    blank = 0
    for j in run.judgements:
        if j.outcome == "ok" and isinstance(j.verdict, QuestionsVerdict):
            found, b = candidates_from(j.verdict, by_key[j.record.query_id])
            raw += found
            blank += b
    negatives, neg_counts = offline_candidates(corpus, 0, seed=seed, negatives_from=negatives_from,
                                               n_negative=n_negative)
    counts = {"passages": pool, "asked": len(requests), "blank_questions": blank,
              "negatives_in_corpus": neg_counts["negatives_in_corpus"]}
    result = apply_filters(raw + negatives, counts, corpus, n=n, n_negative=n_negative, embed=embed,
                           threshold=threshold, show_pairs=show_pairs, seed=seed)
    cost = cost_line([j.record for j in run.judgements], len(result.items), client.store)
    return LLMSynthResult(result, calls, cost, {**generator_pins(cfg), "calls": dict(calls)})


__all__ = ["KIND", "PROMPT", "PROMPT_SHA", "STRATUM", "LLMSynthResult", "QuestionsVerdict", "SynthQuestion",
           "candidates_from", "check_config", "generator_pins", "in_passage", "n_passages", "sample_passages",
           "synthesize_llm"]
