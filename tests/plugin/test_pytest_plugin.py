"""The pytest plugin through pytester: a team's test suite gates a pipeline change with the ragassay fixture."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

pytest_plugins = ["pytester"]

# A toy suite: two versions of a "pipeline" over the bundled set; the candidate drops the gold documents of
# every other query, so its recall falls by about half and the gate must FAIL.
SUITE = '''
import pytest
from ragassay.corpus import bundled_corpus_dir, load_corpus
from ragassay.golden import build_golden, bundled_golden_source

corpus = load_corpus(bundled_corpus_dir())
golden = build_golden(bundled_golden_source(), corpus)
by_question = {q.question: (i, q) for i, q in enumerate(golden.queries)}

def system(drop_every):
    def fn(question):
        i, q = by_question[question]
        gold = [] if drop_every and i % drop_every == 0 else sorted({e.doc_id for e in q.evidence})
        units = [{"unit_id": d, "doc_id": d, "start": 0, "end": len(corpus.docs[d].text)} for d in gold]
        return {"fused": units, "answer": "x", "outcome": "answered"}
    return fn

@pytest.fixture(scope="module")
def baseline(ragassay):
    return ragassay.evaluate(system(0), golden=golden, corpus=corpus, name="baseline")

def test_candidate_{name}(ragassay, baseline):
    cand = ragassay.evaluate(system({drop}), golden=golden, corpus=corpus, name="cand-{name}")
    result = ragassay.gate(baseline, cand)
    assert result.verdict in ("PASS", "WARN")
'''

POLICY = """\
n_resamples: 500
metrics:
  recall@fusion_depth: {min_effect: 0.05}
"""


def test_plugin_is_registered_as_a_pytest11_entry_point():
    names = {e.name: e.value for e in entry_points(group="pytest11")}
    assert names.get("ragassay") == "ragassay.pytest_plugin"


@pytest.mark.slow  # a pytest subprocess scoring the bundled set twice: about 9 s
def test_regressed_candidate_fails_with_the_gate_checks_and_claims(pytester: pytest.Pytester):
    pytester.makepyfile(test_gate=SUITE.replace("{name}", "bad").replace("{drop}", "2"))
    policy = pytester.makefile(".yaml", gate=POLICY)
    store = pytester.path / "cache" / "ragassay.duckdb"
    store.parent.mkdir()
    result = pytester.runpytest_subprocess("--ragassay-policy", str(policy), "--ragassay-store", str(store))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ragassay gate FAIL: baseline -> cand-bad*",
                                 "*FAIL recall@fusion_depth*",
                                 "*recall@fusion_depth*went from 1.00 to 0.50*regressed*",
                                 "*ragassay gates*", "FAIL baseline -> cand-bad"])
    assert store.is_file()  # the given store holds the runs, so CI can cache it


@pytest.mark.slow  # as above
def test_unchanged_candidate_passes_and_the_ini_key_sets_the_policy(pytester: pytest.Pytester):
    pytester.makepyfile(test_gate=SUITE.replace("{name}", "same").replace("{drop}", "0"))
    pytester.makefile(".yaml", gate=POLICY)
    pytester.makeini("[pytest]\nragassay_policy = gate.yaml\n")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*ragassay gates*", "PASS baseline -> cand-same"])


def test_missing_policy_file_is_a_usage_error(pytester: pytest.Pytester):
    pytester.makepyfile(test_x="def test_x(ragassay):\n    pass\n")
    result = pytester.runpytest_subprocess("--ragassay-policy", "nope.yaml")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*--ragassay-policy nope.yaml: file not found*"])
