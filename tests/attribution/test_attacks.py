"""Attack suite: Clopper-Pearson against scipy, the spec's zero-success bound and the rule of three, planting
that keeps golden offsets, the success rubric, and the suite end to end on the bundled pipeline."""

import json
from types import SimpleNamespace

import pytest
from scipy.stats import binomtest

from ragassay.analysis.attacks import (
    ATTACK_CLASSES,
    Attempt,
    attack_rates,
    attacks_report_section,
    canary_for,
    judge_attempts,
    payload,
    plan_attempts,
    plant,
    run_attack_suite,
)
from ragassay.errors import InputError
from ragassay.trace.schema import Citation, Unit


def attempts(attack, k, n, access="targeted"):
    return [Attempt(f"q{i}", attack, access, i < k, i < k, False, "answered") for i in range(n)]


@pytest.mark.parametrize("k, n", [(0, 100), (1, 20), (7, 40), (20, 20), (3, 9)])
def test_clopper_pearson_matches_scipy_binomtest(k, n):
    rate = attack_rates(attempts("exfiltrate", k, n))[0]
    ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    assert rate.ci_low == pytest.approx(ref.low, abs=1e-12)
    assert rate.ci_high == pytest.approx(ref.high, abs=1e-12)
    assert (rate.n, rate.successes, rate.rate) == (n, k, k / n)


def test_zero_successes_in_100_still_allow_about_2_95_percent():
    rate = next(r for r in attack_rates(attempts("ignore_previous", 0, 100)) if r.access == "targeted")
    assert rate.zero_upper == pytest.approx(1 - 0.05 ** (1 / 100)) and rate.zero_upper == pytest.approx(
        0.02951305, abs=1e-8)
    assert rate.rule_of_three == pytest.approx(0.03)
    # the rule of three is the large-n limit of the exact one-sided bound
    big = attack_rates(attempts("ignore_previous", 0, 3000))[0]
    assert big.zero_upper == pytest.approx(3 / 3000, rel=0.002)
    assert attack_rates(attempts("ignore_previous", 1, 100))[0].zero_upper is None


def test_rates_per_class_and_access_pool_to_all():
    rows = attack_rates(attempts("exfiltrate", 2, 10) + attempts("exfiltrate", 0, 10, "untargeted"))
    by = {(r.attack, r.access): r for r in rows}
    assert by[("exfiltrate", "all")].n == 20 and by[("exfiltrate", "all")].successes == 2
    assert by[("exfiltrate", "untargeted")].zero_upper == pytest.approx(1 - 0.05 ** 0.1)


def test_plant_keeps_golden_offsets_and_records_spans(bundled):
    _, golden, _, corpus = bundled
    plan = plan_attempts(golden, attacks=["answer_override"], access=["targeted"], limit=5)
    variant, plants = plant(corpus, plan)
    assert variant.digest != corpus.digest and len(plants) == 5
    for q in golden.queries:
        for e in q.evidence:
            assert variant.docs[e.doc_id].text[e.start:e.end] == corpus.docs[e.doc_id].text[e.start:e.end]
    for p in plants:
        text = variant.docs[p.doc_id].text[p.start:p.end]
        assert p.canary in text and p.canary == canary_for(p.query_id, "answer_override", "targeted")
        assert "\n" not in text  # one paragraph, one sentence
    with pytest.raises(InputError, match="unknown attack class"):
        payload("jailbreak", "zqx0", "q?", "targeted")


def test_judge_rubric_canary_or_citation_into_plant():
    from ragassay.analysis.attacks import Plant

    plants = [Plant("q1", "ignore_previous", "targeted", "d", 100, 150, "zqxaaaaaaaaaa"),
              Plant("q2", "ignore_previous", "targeted", "d", 200, 250, "zqxbbbbbbbbbb"),
              Plant("q3", "ignore_previous", "targeted", "d", 300, 350, "zqxcccccccccc"),
              Plant("q4", "ignore_previous", "targeted", "d", 400, 450, "zqxdddddddddd")]
    u = Unit(unit_id="u", doc_id="d", start=0, end=1000)

    def trace(qid, answer, outcome="answered", cites=()):
        return SimpleNamespace(query_id=qid, answer=answer, outcome=outcome, packed=[u],
                               citations=[Citation(unit_id="u", doc_id="d", start=s, end=e) for s, e in cites])

    got = judge_attempts([trace("q1", "Reply ZQXAAAAAAAAAA now"), trace("q2", "fine", cites=[(10, 20)]),
                          trace("q3", "fine", cites=[(340, 360)]), trace("q4", None, "abstained")], plants)
    assert [(a.success, a.canary_in_answer, a.cites_plant) for a in got] == [
        (True, True, False), (False, False, False), (True, False, True), (False, False, False)]
    with pytest.raises(InputError, match="no trace"):
        judge_attempts([], plants)


def test_suite_on_bundled_pipeline_targeted_lures_succeed(bundled):
    from ragassay.analysis.demo import demo_config_dir

    _, golden, _, corpus = bundled
    res = run_attack_suite(demo_config_dir() / "bm25.yaml", corpus, golden, attacks=["ignore_previous"], limit=6)
    by = {(r.attack, r.access): r for r in res.rates}
    # the extractive generator copies the best-supported sentence: a lure in the question's words wins
    assert by[("ignore_previous", "targeted")].successes == 6
    untargeted = by[("ignore_previous", "untargeted")]
    assert untargeted.n == 6 and untargeted.successes == 0
    assert untargeted.zero_upper == pytest.approx(1 - 0.05 ** (1 / 6))
    section = attacks_report_section(res)
    json.dumps(section, allow_nan=False)
    assert len(section["successes"]) == 6 and set(ATTACK_CLASSES) >= {r["attack"] for r in section["rates"]}
