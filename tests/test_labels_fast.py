"""The evidence index and the scoring labels, built from arrays, equal what the per-object loops built.

Oracles: the former ``EvidenceIndex.__init__`` and the former judged-grades part of ``Labels.__init__``,
copied here as they were. Compared array by array (values, NaN positions, dtypes and shapes) and dict by
dict, on the bundled golden set and on random sets with repeated query ids, queries without evidence,
one document, many documents and none.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from ragassay.analysis.scoring import Labels, ScoringOptions, _judged_matrix
from ragassay.corpus import bundled_corpus_dir, load_corpus
from ragassay.golden import EvidenceIndex, GoldenSet
from ragassay.golden.schema import Evidence, GoldenQuery


def _old_index(golden: GoldenSet) -> dict:
    query_codes = {q.query_id: i for i, q in enumerate(golden.queries)}
    doc_ids = sorted({e.doc_id for q in golden.queries for e in q.evidence})
    doc_codes = {d: i for i, d in enumerate(doc_ids)}
    n_docs = max(len(doc_ids), 1)
    rows = [(query_codes[q.query_id], doc_codes[e.doc_id], e.start, e.end, e.grade)
            for q in golden.queries for e in q.evidence]
    arr = np.asarray(rows, dtype=np.int64).reshape(-1, 5)
    key = arr[:, 0] * n_docs + arr[:, 1]
    order = np.lexsort((arr[:, 2], key))
    key = key[order]
    grade = arr[order, 4].astype(np.float64)
    uniq, first = np.unique(key, return_index=True)
    return {"query_codes": query_codes, "doc_codes": doc_codes, "n_docs": n_docs, "key": key,
            "start": arr[order, 2], "end": arr[order, 3], "grade": grade, "_doc_key": uniq,
            "_doc_max": np.maximum.reduceat(grade, first) if len(first) else np.zeros(0)}


def _old_labels(golden: GoldenSet) -> dict:
    judged_by_query = {q.query_id: sorted((e.grade for e in q.evidence), reverse=True) for q in golden.queries}
    judged = [judged_by_query[q.query_id] for q in golden.queries]
    return {"judged_by_query": judged_by_query,
            "_judged_counts": np.fromiter(map(len, judged), dtype=np.int64, count=len(judged)),
            "_judged": _judged_matrix(judged),
            "stratum": pa.array([q.stratum for q in golden.queries], pa.string())}


def _same(a, b) -> None:
    if isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, (a, b)
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    elif isinstance(b, pa.Array):
        assert a.equals(b) and a.type == b.type
    else:
        assert type(a) is type(b) and a == b


def assert_same_labels(golden: GoldenSet) -> None:
    idx = EvidenceIndex(golden)
    for name, want in _old_index(golden).items():
        _same(getattr(idx, name), want)
    for threshold in (1, 2, 3):
        lab = Labels(golden, ScoringOptions(relevance_threshold=threshold))
        for name, want in _old_labels(golden).items():
            _same(getattr(lab, name), want)
        # what the run reads from them: per-row judged grades, relevant-evidence counts
        codes = np.arange(len(golden.queries))[::-1]
        _same(lab.judged_matrix(codes), _old_labels(golden)["_judged"][codes][:, :max(
            int(_old_labels(golden)["_judged_counts"][codes].max(initial=0)), 1)])
        rel = _old_index(golden)["grade"] >= threshold
        _same(lab.relevant_ev, rel)


def _golden(rng: random.Random, n: int, n_docs: int, dup: float) -> GoldenSet:
    queries = []
    for i in range(n):
        qid = f"q{rng.randrange(max(1, n // 3))}" if rng.random() < dup else f"u{i}"
        ev = [Evidence(doc_id=f"d{rng.randrange(n_docs)}", start=(s := rng.randrange(0, 500)),
                       end=s + rng.randrange(0, 80), grade=rng.randint(0, 3), quote="q")
              for _ in range(rng.choice([0, 0, 1, 1, 2, 3, 7]))]
        queries.append(GoldenQuery(query_id=qid, question="?", stratum=rng.choice(["a", "b", "negative"]),
                                   answerable=bool(ev), evidence=ev))
    return GoldenSet(queries, {})


@pytest.mark.parametrize("seed", range(8))
def test_random_sets(seed):
    rng = random.Random(seed)
    assert_same_labels(_golden(rng, rng.randint(1, 300), rng.choice([1, 3, 50]), rng.choice([0.0, 0.3, 0.9])))


def test_edge_sets():
    rng = random.Random(1)
    assert_same_labels(GoldenSet([GoldenQuery(query_id="q", question="?", stratum="s", answerable=False)], {}))
    assert_same_labels(GoldenSet([], {}))
    # a repeated id whose earlier query has more evidence than its last one (the judged width follows the last)
    big = [Evidence(doc_id="d", start=i, end=i + 1, grade=i % 4, quote="q") for i in range(5)]
    qs = [GoldenQuery(query_id="x", question="?", stratum="s", answerable=True, evidence=big),
          GoldenQuery(query_id="x", question="?", stratum="s", answerable=True, evidence=big[:1]),
          GoldenQuery(query_id="y", question="?", stratum="s", answerable=True, evidence=big[2:4])]
    assert_same_labels(GoldenSet(qs, {}))
    assert_same_labels(_golden(rng, 50, 2, 1.0))


def test_the_bundled_set(tmp_path):
    from ragassay.golden import build_golden, bundled_golden_source

    golden = build_golden(bundled_golden_source(), load_corpus(bundled_corpus_dir()))
    assert sum(len(q.evidence) for q in golden) > 10
    assert_same_labels(golden)


def test_contains_each_is_in_for_every_id():
    """GoldenSet.contains_each (the streaming scorer's per-batch test of which traces' queries the set
    holds) against ``in``, on ids the set holds, ids it does not, repeats and the empty list."""
    golden = _golden(random.Random(5), 60, 20, 0.3)
    ids = [q.query_id for q in golden.queries][::3] + ["nope", "q1", "u0", "", "u0"]
    got = golden.contains_each(ids)
    assert got.dtype == bool and got.tolist() == [i in golden for i in ids]
    assert got.any() and not got.all()
    assert golden.contains_each([]).tolist() == []
