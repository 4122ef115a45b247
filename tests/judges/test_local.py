"""Local judges: sentence claims, lexical/embedding/numeric support, and the metrics they feed."""

import math

import numpy as np
import pytest

from ragassay.judges.local import (
    EmbeddingSupport,
    LexicalSupport,
    NumericSupport,
    local_judge_items,
    numbers_of,
    split_claims,
)
from ragassay.judges.metrics import CitationRef, ContextUnit, JudgeItem

CTX = (ContextUnit("u1", "GPL-3", 500, "You may convey verbatim copies. The license was published in 2007 by the FSF."),
       ContextUnit("u2", "MIT", 0, "Permission is granted free of charge to 1,000 people."))


def test_split_claims_is_sentence_level():
    assert split_claims("One claim here. Another one!  And a third?") == ["One claim here.", "Another one!",
                                                                           "And a third?"]
    assert split_claims("") == [] and split_claims(None) == []


def test_lexical_support_uses_the_best_sentence_and_quotes_it_verbatim():
    judge = LexicalSupport(threshold=0.7)
    a, b, c = judge.judge_many(["The license was published in 2007.", "Cats like fish.", "the of a"], CTX)
    # claim terms {license, published, 2007} all in sentence 2 of u1
    assert (a.verdict.label, a.score, a.verdict.quote) == ("supported", 1.0,
                                                         "The license was published in 2007 by the FSF.")
    assert b.verdict.label == "insufficient_context" and b.score == 0.0 and b.verdict.quote is None
    assert c.verdict.cannot_judge and math.isnan(c.score)


def test_numeric_support_normalizes_thousands_and_names_missing_numbers():
    assert numbers_of("1,000 people in 2007 paid 3.50") == ["1000", "2007", "3.50"]
    ok, bad, none = NumericSupport().judge_many(["1000 people since 2007", "published in 2009", "no digits"], CTX)
    assert ok.verdict.label == "supported" and ok.score == 1.0
    assert bad.verdict.label == "unsupported" and bad.score == 0.0 and "2009" in bad.verdict.justification
    assert none.verdict.cannot_judge


def test_embedding_support_matches_wordllama_cosine():
    from pathlib import Path

    import wordllama
    from wordllama import WordLlama

    judge = EmbeddingSupport(threshold=0.5)
    claims = ["The license was published in 2007.", "Bananas are yellow fruit."]
    got = judge.judge_many(claims, CTX)
    wl = WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)
    sents = ["You may convey verbatim copies.", "The license was published in 2007 by the FSF.",
             "Permission is granted free of charge to 1,000 people."]
    ref = [[wl.similarity(c, s) for s in sents] for c in claims]
    assert [v.score for v in got] == pytest.approx([max(r) for r in ref], abs=1e-5)
    assert got[0].verdict.quote == sents[int(np.argmax(ref[0]))]
    assert [v.verdict.label == "supported" for v in got] == [max(r) >= 0.5 for r in ref]


def test_local_metrics_share_the_quote_check_and_undefined_rules():
    items = [
        JudgeItem("q1", 0, "When?", "The license was published in 2007. Cats like fish.", "answered", CTX,
                  (CitationRef("u1"), CitationRef("u2"))),
        JudgeItem("q2", 0, "When?", None, "abstained", CTX),
        JudgeItem("q3", 0, "When?", "the of a", "answered", CTX),
    ]
    judged = local_judge_items(items, LexicalSupport(0.7))
    c = judged.columns
    got = {(q, m): v for q, m, v in zip(c["query_id"], c["metric"], c["value"], strict=True)}
    assert got[("q1", "faithfulness")] == 0.5
    assert got[("q1", "citation_precision")] == 0.5 and got[("q1", "citation_recall")] == 0.5
    assert got[("q1", "numeric_consistency")] == 1.0
    assert math.isnan(got[("q2", "faithfulness")]) and math.isnan(got[("q3", "faithfulness")])
    assert judged.undefined[("faithfulness", "not_answered")] == 1
    assert judged.undefined[("faithfulness", "no_checkable_claims")] == 1
    assert judged.quote_not_found == 0
