"""The claim diff of two hand-made tables: gained, lost, changed, reference claims, supporting spans, Markdown."""

from ragassay.analysis.claims_diff import claims_diff_markdown, diff_tables
from ragassay.metrics.claims import claim_table

E, N, C = "entailed", "neutral", "contradicted"
UNITS = [("u0", "d1", 0, 40), ("u1", "d2", 100, 140)]
TEXTS = ["The licence may be copied freely. Notice.", "Patents are licensed to every user <b>x</b>."]


def table(resp, resp_units, vs_ref, resp_quotes, gt_units, gt_quotes):
    return claim_table("q1", 0, units=UNITS, span_relevant=[True, False], gt_claims=["may be copied"],
                       response_claims=resp, gt_units=gt_units, response_units=resp_units,
                       response_vs_reference=vs_ref, gt_vs_response=[E], gt_quotes=gt_quotes,
                       response_quotes=resp_quotes, unit_texts=TEXTS)


def test_gained_lost_and_changed_claims_carry_their_supporting_unit_and_span():
    a = table(["The licence may be copied", "Cats purr"], [[E, N], [N, N]], [E, N],
              [[(0, 25), None], [None, None]], [[E, N]], [[(0, 25), None]])
    b = table(["the licence  MAY be copied", "Patents are licensed"], [[E, N], [N, E]], [C, N],
              [[(0, 25), None], [None, (100, 120)]], [[N, N]], None)
    d = diff_tables(a, b, "spans")
    assert [c["claim"] for c in d["gained"]] == ["Patents are licensed"]
    g = d["gained"][0]
    assert g["class"] == "noise" and g["support"] == {"unit_id": "u1", "doc_id": "d2", "start": 100, "end": 120,
                                                      "relevant": False, "excerpt": "Patents are licensed"}
    assert [c["claim"] for c in d["lost"]] == ["Cats purr"] and d["lost"][0]["class"] == "hallucination"
    assert d["lost"][0]["support"] is None
    (ch,) = d["changed"]  # matched across case and whitespace
    assert ch["fields"] == ["correct", "class"] and ch["a"] == {"correct": E, "class": "correct_relevant"}
    assert ch["b"] == {"correct": C, "class": "noise"} and ch["support_b"]["excerpt"] == "The licence may be copied"
    (ref,) = d["reference"]
    assert ref["fields"] == ["retrieved"] and ref["a"] == {"retrieved": True} and ref["b"] == {"retrieved": False}
    md = claims_diff_markdown({"run_a": {"name": "a"}, "run_b": {"name": "<b>"}, "judge": {"judge_model": "m"},
                               "relevance": "spans", "compared": 1, "changed_queries": 1,
                               "totals": {"gained": 1, "lost": 1, "changed": 1, "reference": 1}, "queries": [d]})
    assert "# Claims: a → \\<b\\>" in md and "<b>" not in md
    assert "- gained: Patents are licensed — noise; d2[100:120] irrelevant “Patents are licensed”" in md
