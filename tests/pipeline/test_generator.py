"""The extractive generator's support score, absent-name rule and the abstain-floor procedure."""

import math
import re

import numpy as np
import pytest
from bm25s.stopwords import STOPWORDS_EN_PLUS

from ragassay.pipeline.analyzer import TermStats
from ragassay.pipeline.config import GeneratorConfig
from ragassay.pipeline.generator import (
    DEFAULT_ABSTAIN_FLOOR,
    ExtractiveGenerator,
    abstention_rates,
    choose_abstain_floor,
    support_analyzer,
)
from ragassay.trace import Unit


def _unit(text, start=0, uid="u1", doc="d"):
    return Unit(unit_id=uid, doc_id=doc, start=start, end=start + len(text), text=text, tokens=len(text.split()))


def test_support_analyzer_drops_the_nltk_stopwords_and_stems():
    an = support_analyzer()
    assert an("What does the licence say about copying the works?") == ["licenc", "say", "copi", "work"]
    assert not set(an(" ".join(STOPWORDS_EN_PLUS)))  # every listed word is dropped


def test_support_score_by_hand():
    an = support_analyzer()
    stats = TermStats([["licenc", "copi"], ["licenc"], ["patent"], ["licenc", "patent"]])
    gen = ExtractiveGenerator(an, stats, abstain_floor=0.0, max_sentences=1)
    idf = {t: math.log(1 + (4 - d + 0.5) / (d + 0.5)) for t, d in (("licenc", 3), ("copi", 1), ("say", 0))}
    # "What", "does", "the", "about" are stopwords: the content terms are {licenc, say, copi}; "say" is
    # unseen in the collection, so it carries the largest idf
    assert gen.support("What does the licence say about copying?", {"copi"}) == pytest.approx(
        idf["copi"] / (idf["copi"] + idf["licenc"] + idf["say"]), abs=1e-15)
    assert gen.support("licence copying", {"copi"}) == pytest.approx(
        idf["copi"] / (idf["copi"] + idf["licenc"]), abs=1e-15)
    assert gen.support("licence copying", {"copi", "licenc"}) == 1.0
    assert gen.support("the of and", {"copi"}) == 0.0  # no content terms


def test_answer_cites_the_best_sentences_and_ties_keep_packed_order():
    an = support_analyzer()
    stats = TermStats([["dough", "rise"], ["bake"], ["flour"]])
    units = [_unit("Mix the flour. Let the dough rise.", 100, "u1"), _unit("The dough must rise.", 500, "u2")]
    gen = ExtractiveGenerator(an, stats, abstain_floor=0.5, max_sentences=2)
    g = gen.generate("When does the dough rise?", units)
    assert g.outcome == "answered" and g.answer == "Let the dough rise. The dough must rise."
    assert [(c.unit_id, c.start, c.end) for c in g.citations] == [("u1", 115, 134), ("u2", 500, 520)]
    assert g.details["best_support"] == 1.0


def test_question_naming_an_unseen_term_abstains():
    an = support_analyzer()
    stats = TermStats([["gpl", "licens", "say", "patent"], ["mit", "licens"]])
    unit = _unit("The license says patents are granted.")
    gen = ExtractiveGenerator(an, stats, abstain_floor=0.0)
    g = gen.generate("What does the Eclipse license say about patents?", [unit])
    assert g.outcome == "abstained" and g.details["absent_names"] == ["Eclipse"] and g.answer is None
    # a known name, and a capitalized first word, are not absent names
    assert gen.generate("What does the MIT license say about patents?", [unit]).outcome == "answered"
    assert gen.generate("Eclipse: what does the license say about patents?", [unit]).outcome == "answered"
    assert gen.generate("What do patents say?", []).outcome == "abstained"  # nothing packed, even at floor 0
    off = ExtractiveGenerator(an, stats, abstain_floor=0.0, absent_names=False)
    assert off.generate("What does the Eclipse license say about patents?", [unit]).outcome == "answered"


def test_abstention_rates_and_floor_choice_by_hand():
    best = [0.10, 0.50, 0.30, 0.20, 0.60, 0.05]
    forced = [False, False, False, False, False, True]
    answerable = [True, True, True, False, False, False]
    # floor 0.25: answerable abstained {0.10} -> 1/3; unanswerable abstained {0.20, forced} -> 2/3
    assert abstention_rates(best, forced, answerable, 0.25) == pytest.approx((1 / 3, 2 / 3))
    assert abstention_rates(best, forced, answerable, 0.0) == pytest.approx((0.0, 1 / 3))
    c = choose_abstain_floor(best, forced, answerable, [0.0, 0.15, 0.25, 0.35, 0.7], max_over_refusal=0.34)
    assert (c.floor, c.over_refusal, c.abstention_recall) == pytest.approx((0.25, 1 / 3, 2 / 3))
    strict = choose_abstain_floor(best, forced, answerable, [0.0, 0.15, 0.25], max_over_refusal=0.0)
    assert strict.floor == 0.0  # ties on recall go to the lower floor
    loose = choose_abstain_floor(best, forced, answerable, [0.0, 0.7], max_over_refusal=1.0)
    assert (loose.floor, loose.abstention_recall) == (0.7, 1.0)
    orf, rec = abstention_rates([0.1], [False], [True], 0.5)
    assert orf == 1.0 and math.isnan(rec)  # no unanswerable question: recall undefined


def test_default_floor_is_what_the_documented_procedure_chooses_on_the_odd_half(tmp_path):
    from ragassay.corpus import bundled_corpus_dir, load_corpus
    from ragassay.golden import build_golden, bundled_golden_source
    from ragassay.pipeline import Pipeline, load_config

    root = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "configs"
    corpus = load_corpus(bundled_corpus_dir())
    golden = build_golden(bundled_golden_source(), corpus)
    cfg = load_config(root / "hybrid.yaml").model_copy(update={"cache_dir": str(tmp_path)})
    assert cfg.generator.abstain_floor == DEFAULT_ABSTAIN_FLOOR == GeneratorConfig().abstain_floor
    cfg.generator.abstain_floor = 0.0
    _, traces = Pipeline(cfg, corpus).run(golden.queries, progress=False)
    ans = {q.query_id: q.answerable for q in golden.queries}
    odd = [t for t in traces if int(re.search(r"(\d+)$", t.query_id).group(1)) % 2 == 1]
    assert 70 <= len(odd) <= 100
    choice = choose_abstain_floor([t.meta["best_support"] for t in odd], [bool(t.meta.get("absent_names")) for t in odd],
                                  [ans[t.query_id] for t in odd], np.round(np.arange(0.0, 0.801, 0.05), 2), 0.25)
    assert choice.floor == pytest.approx(DEFAULT_ABSTAIN_FLOOR)
    for p in root.glob("*.yaml"):
        assert load_config(p).generator.abstain_floor == DEFAULT_ABSTAIN_FLOOR
