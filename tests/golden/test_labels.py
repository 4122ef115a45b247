import numpy as np
import pytest

from ragassay.errors import InputError
from ragassay.golden import EvidenceIndex, GoldenSet, HitRule
from ragassay.golden.schema import Evidence, GoldenQuery


def _gs(spec):
    qs = []
    for qid, evs in spec.items():
        qs.append(GoldenQuery(query_id=qid, question=qid, stratum="lexical", answerable=bool(evs),
                              evidence=[Evidence(doc_id=d, start=s, end=e, grade=g, quote="x")
                                        for d, s, e, g in evs]))
    return GoldenSet(qs)


GS = _gs({
    "q1": [("d1", 100, 200, 3), ("d1", 150, 160, 1), ("d2", 0, 50, 2)],
    "q2": [("d1", 100, 200, 0)],
    "q3": [],
})


@pytest.mark.parametrize(
    "rule, unit, expected",
    [
        # (query, doc, start, end) -> (grade, judged), checked by hand
        ("any_overlap", ("q1", "d1", 0, 100), (0, False)),      # touches at 100 but shares no character
        ("any_overlap", ("q1", "d1", 0, 101), (3, True)),
        ("any_overlap", ("q1", "d1", 155, 158), (3, True)),     # inside both; the highest grade wins
        ("any_overlap", ("q1", "d1", 200, 300), (0, False)),
        ("any_overlap", ("q1", "d2", 40, 60), (2, True)),
        ("any_overlap", ("q1", "d3", 0, 1000), (0, False)),     # a doc without evidence
        ("any_overlap", ("q2", "d1", 120, 130), (0, True)),     # judged non-relevant
        ("any_overlap", ("q3", "d1", 120, 130), (0, False)),
        ("any_overlap", ("qX", "d1", 120, 130), (0, False)),    # a query the set does not know
        ("min_fraction:0.5", ("q1", "d1", 100, 149), (0, False)),  # 49% of [100,200) and none of [150,160)
        ("min_fraction:0.5", ("q1", "d1", 100, 150), (3, True)),
        ("min_fraction:0.5", ("q1", "d1", 152, 190), (1, True)),   # 80% of the grade-1 span, 38% of grade 3
        ("min_fraction:1", ("q1", "d1", 150, 160), (1, True)),
        ("min_fraction:1", ("q1", "d2", 1, 50), (0, False)),
        ("doc", ("q1", "d1", 0, 1), (3, True)),
        ("doc", ("q1", "d2", 900, 950), (2, True)),
        ("doc", ("q2", "d1", 0, 1), (0, True)),
        ("doc", ("q1", "d3", 0, 1), (0, False)),
    ],
)
def test_hand_checked_grades_under_each_hit_rule(rule, unit, expected):
    grade, judged = EvidenceIndex(GS).grades([unit[0]], [unit[1]], [unit[2]], [unit[3]], rule)
    assert (grade[0], bool(judged[0])) == expected


def _brute(gs, q, d, s, e, rule):
    best, judged = 0.0, False
    for ev in gs[q].evidence if q in gs else []:
        if ev.doc_id != d:
            continue
        ov = min(ev.end, e) - max(ev.start, s)
        if rule.kind == "doc":
            hit = True
        elif rule.kind == "any_overlap":
            hit = ov > 0
        else:
            hit = ov > 0 and ov >= rule.fraction * (ev.end - ev.start)
        if hit:
            judged = True
            best = max(best, ev.grade)
    return best, judged


@pytest.mark.parametrize("rule", ["any_overlap", "min_fraction:0.3", "min_fraction:1", "doc"])
def test_vectorized_grades_match_a_pairwise_loop(rule):
    rng = np.random.default_rng(7)
    spec = {}
    for qi in range(30):
        evs = []
        for _ in range(rng.integers(0, 6)):
            s = int(rng.integers(0, 900))
            evs.append((f"d{rng.integers(0, 4)}", s, s + int(rng.integers(1, 120)), int(rng.integers(0, 4))))
        spec[f"q{qi}"] = evs
    gs = _gs(spec)
    n = 3000
    qs = [f"q{i}" for i in rng.integers(0, 32, n)]  # q30, q31 are unknown
    ds = [f"d{i}" for i in rng.integers(0, 5, n)]
    st = rng.integers(0, 1000, n)
    en = st + rng.integers(0, 200, n)
    grade, judged = EvidenceIndex(gs).grades(qs, ds, st, en, rule)
    r = HitRule.parse(rule)
    expected = [_brute(gs, q, d, s, e, r) for q, d, s, e in zip(qs, ds, st, en, strict=True)]
    assert grade.tolist() == [g for g, _ in expected]
    assert judged.tolist() == [j for _, j in expected]


def test_hit_rule_parsing():
    assert str(HitRule.parse("min_fraction:0.5")) == "min_fraction:0.5"
    assert HitRule.parse("doc").kind == "doc"
    with pytest.raises(InputError, match=r"fraction must be in \(0, 1\]"):
        HitRule.parse("min_fraction:1.5")
    with pytest.raises(InputError, match="unknown hit rule 'overlap'"):
        HitRule.parse("overlap")
