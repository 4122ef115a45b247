"""Benchmark hygiene: n-gram screen vs a brute-force set reference and a planted leak, exclusion unions with
the spec's 4,700 example and marginal bounds, re-scoring on retained items, shortcut audit, bypass flags."""

import itertools
import json

import numpy as np
import pytest
from tests.analysis.conftest import make_run

from ragassay.analysis.hygiene import (
    RunAudit,
    exclusion_bounds,
    exclusion_union,
    golden_overlap,
    hygiene_report_section,
    ngram_overlap,
    rescore_retained,
    retrieval_bypass,
    retrieval_bypass_from_store,
    shortcut_audit,
    words,
)
from ragassay.errors import InputError


def brute_overlap(items, sources, n):
    grams = set()
    for s in sources:
        w = words(s)
        grams |= {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}
    out = []
    for t in items:
        w = words(t)
        out.append(sum(tuple(w[i:i + n]) in grams for i in range(len(w) - n + 1)))
    return out


def test_planted_leak_is_flagged_and_clean_items_are_not(bundled):
    _, golden, _, corpus = bundled
    sources = [d.text for d in corpus]
    leaked = "Everyone is permitted to copy and distribute verbatim copies of this license document, but " \
             "changing it is not allowed."
    items = ["Which licence lets me relicense under any later version of the GNU GPL without asking anyone?",
             "Please tell me: " + leaked + " What does that mean?",
             "completely invented words that no license ever contains in this order at all whatsoever ok"]
    res = ngram_overlap(items, sources, n=13, item_ids=["clean", "leak", "invented"])
    assert res.flagged.tolist() == [False, True, False]
    assert res.n_found.tolist() == brute_overlap(items, sources, 13)
    assert res.n_found[1] == len(words(leaked)) - 13 + 1  # every 13-gram of the copied sentence
    assert res.to_dict()["flagged_ids"] == ["leak"]
    # golden questions: the screen runs on questions and answers separately with query ids
    out = golden_overlap(golden, sources)
    assert len(out["question"].item_ids) == len(golden)
    assert out["answer"].n_grams.sum() >= 0 and out["answer"].flagged.dtype == bool


@pytest.mark.parametrize("seed", [0, 1])
def test_ngram_counts_match_brute_force_and_respect_document_boundaries(seed):
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(6)]
    sources = [" ".join(rng.choice(vocab, size=rng.integers(0, 40))) for _ in range(8)]
    items = [" ".join(rng.choice(vocab, size=rng.integers(0, 12))) for _ in range(30)]
    for n in (2, 3, 4):
        res = ngram_overlap(items, sources, n=n, short="skip")
        assert res.n_found.tolist() == brute_overlap(items, sources, n)
    # an n-gram spanning the end of one source and the start of the next is not in the corpus
    res = ngram_overlap(["a b c d"], ["x a b", "c d y"], n=4)
    assert not res.flagged[0]


def test_short_items_are_checked_whole_or_skipped():
    sources = ["the quick brown fox jumps over the lazy dog"]
    res = ngram_overlap(["Quick, brown fox!", "brown quick"], sources, n=13)
    assert res.flagged.tolist() == [True, False] and res.n_grams.tolist() == [1, 1]
    skipped = ngram_overlap(["Quick, brown fox!"], sources, n=13, short="skip")
    assert skipped.n_grams.tolist() == [0] and not skipped.flagged[0]
    empty = ngram_overlap(["", "!!"], sources, n=13)
    assert empty.n_empty == 2 and empty.n_flagged == 0
    with pytest.raises(InputError, match="positive number of words"):
        ngram_overlap(["x"], sources, n=0)


def spec_exclusion_sets():
    """Spec 34.6: 10,000 items; A overlap 1,800, B synthetic 3,000, D bypass 2,500; |A&B| = 1,000,
    |A&D| = 500, |B&D| = 500, no triple overlap."""
    ids = [f"i{k:05d}" for k in range(10_000)]
    ab, ad, bd = ids[0:1000], ids[1000:1500], ids[1500:2000]
    a_only, b_only, d_only = ids[2000:2300], ids[2300:3800], ids[3800:5300]
    return ids, {"A": ab + ad + a_only, "B": ab + bd + b_only, "D": ad + bd + d_only}


def test_spec_4700_retained_items_and_marginal_bounds():
    ids, sets = spec_exclusion_sets()
    rep = exclusion_union(sets, ids)
    assert rep.marginals == {"A": 1800, "B": 3000, "D": 2500}
    assert rep.intersections == {"A&B": 1000, "A&D": 500, "B&D": 500}
    assert rep.union == 5300 and rep.retained == 4700 and len(rep.retained_ids) == 4700
    # from the marginals alone the retained count is only known to lie in [2,700, 7,000]
    assert rep.retained_bounds == (2700, 7000) and rep.union_bounds == (3000, 7300)
    assert exclusion_bounds([1800, 3000, 2500], 10_000) == ((3000, 7300), (2700, 7000))
    json.dumps(rep.to_dict())


@pytest.mark.parametrize("seed", range(5))
def test_union_lies_within_marginal_bounds_and_matches_inclusion_exclusion(seed):
    rng = np.random.default_rng(seed)
    ids = [str(i) for i in range(200)]
    sets = {k: set(rng.choice(ids, size=rng.integers(0, 120), replace=False).tolist()) for k in "abc"}
    rep = exclusion_union(sets, ids)
    lo, hi = rep.union_bounds
    assert lo <= rep.union <= hi
    assert rep.union == len(set().union(*sets.values()))
    for r in (2, 3):
        for combo in itertools.combinations("abc", r):
            assert rep.intersections.get("&".join(combo), 0) == len(set.intersection(*(sets[c] for c in combo)))
    with pytest.raises(InputError, match="not in the item list"):
        exclusion_union({"a": ["nope"]}, ids)


def test_rescore_reproduces_the_spec_closed_book_example():
    # 1,800 flagged items: closed-book 1,638 correct, RAG 1,476; 8,200 clean: 5,822 and 6,724
    closed = np.r_[np.ones(1638), np.zeros(162), np.ones(5822), np.zeros(8200 - 5822)]
    rag = np.r_[np.ones(1476), np.zeros(324), np.ones(6724), np.zeros(8200 - 6724)]
    ids = [f"i{k}" for k in range(10_000)]
    full, clean, flagged = rescore_retained(closed, rag, ids, ids[1800:], n_resamples=500)
    assert full.mean_a == pytest.approx(0.746) and full.mean_b == pytest.approx(0.82)
    assert full.delta == pytest.approx(0.074) and clean.delta == pytest.approx(0.11)
    assert clean.n == 8200 and flagged.n == 1800 and flagged.mean_a == pytest.approx(0.91)
    assert clean.delta / full.delta == pytest.approx(1.486486, rel=1e-6)
    assert clean.ci_low < 0.11 < clean.ci_high


def test_shortcut_audit_flags_the_stratum_a_keyword_baseline_nearly_matches():
    rng = np.random.default_rng(0)
    n = 300
    strata = np.array(["synthetic"] * n + ["human"] * n)
    system = np.r_[rng.uniform(0.7, 0.9, n), rng.uniform(0.6, 0.9, n)]
    baseline = np.r_[system[:n] - 0.01, system[n:] - 0.2]
    rows = {r.stratum: r for r in shortcut_audit(system, baseline, strata, margin=0.05, n_resamples=500)}
    assert rows["synthetic"].verdict == "baseline_close" and rows["synthetic"].gap == pytest.approx(0.01)
    assert rows["human"].verdict == "system_ahead" and rows["human"].gap == pytest.approx(0.2)
    assert rows["all"].n == 2 * n and rows["all"].gap == pytest.approx(0.105)
    assert rows["human"].system == pytest.approx(system[n:].mean())


def test_retrieval_bypass_flags_correct_answers_without_delivered_evidence(store):
    flags = retrieval_bypass([1.0, 0.9, 0.2, np.nan, 1.0], [0.0, 0.5, 0.0, 0.0, np.nan], threshold=0.5)
    assert np.array_equal(flags.flags, [1.0, 0.0, 0.0, np.nan, np.nan], equal_nan=True)
    assert flags.counts()["total"] == {"flagged": 1, "defined": 3, "undefined": 2}
    run = make_run(store, "r", {"answer_f1": np.array([1.0, 0.8, 0.1, np.nan]),
                                "recall@context": np.array([0.0, 1.0, 0.0, np.nan])})
    got = retrieval_bypass_from_store(store, run)
    assert got.query_ids == ("q000", "q001", "q002", "q003")
    assert np.array_equal(got.flags, [1.0, 0.0, 0.0, np.nan], equal_nan=True)
    assert got.to_dict()["flagged_ids"] == ["q000"]
    assert got.counts()["s2"] == {"flagged": 1, "defined": 2, "undefined": 0}
    audit = RunAudit(run, "r", "ds@1", np.array([1.0, 0.8, 0.1, np.nan]), got, None, 0)
    section = hygiene_report_section(runs=[audit], exclusions=exclusion_union(*spec_exclusion_sets()[::-1]))
    json.dumps(section, allow_nan=False)
    assert section["exclusions"]["retained"] == 4700 and section["overlap"] is None
    assert section["bypass"][0]["run"] == "r" and section["bypass"][0]["flagged_ids"] == ["q000"]
    assert section["shortcut"] is None and section["rebaselined"] is False


def test_keyword_baseline_runs_bm25_only(bundled):
    from ragassay.analysis.hygiene import keyword_baseline_scores

    _, golden, traces, corpus = bundled
    got = keyword_baseline_scores(corpus, golden)
    assert got.shape == (len(golden),)
    assert np.isnan(got[[not q.answerable for q in golden.queries]]).all()
    assert np.nanmean(got) > 0

