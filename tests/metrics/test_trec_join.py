"""The hashed join behind build_grade_matrix: exact under hash collisions, duplicate checks in every layout."""

import numpy as np
import pyarrow as pa
import pytest
import pytrec_eval
from test_trec_differential import MEASURES, PAIRS, arrange, columns, random_case

from ragassay.errors import SchemaError
from ragassay.metrics import GradeMatrix, Qrels, Run, Semantics, build_grade_matrix, evaluate, strkeys, trec
from ragassay.metrics.strkeys import StringKeys, equal_pairs, string_keys


def random_strings(rng, n):
    alphabet = list("ab\x00é-_0123456789")
    return ["".join(rng.choice(alphabet, size=int(rng.integers(0, 30)))) for _ in range(n)]


@pytest.mark.parametrize("large", [False, True])
def test_string_keys_agree_with_python_string_equality(large):
    rng = np.random.default_rng(7)
    words = random_strings(rng, 300)
    a = pa.array(words, type=pa.large_string() if large else pa.string()).slice(3)  # a sliced array too
    b = pa.array(list(rng.permutation(words)) + ["", "a", "a\x00", "ab" * 20])
    ka, kb = string_keys(a), string_keys(b)
    ia = rng.integers(0, len(a), size=4000)
    ib = rng.integers(0, len(b), size=4000)
    same = np.array([a[i].as_py() == b[j].as_py() for i, j in zip(ia, ib, strict=True)])
    assert same.any() and not same.all()
    np.testing.assert_array_equal(equal_pairs(ka, ia, kb, ib), same)
    # equal strings always get equal hashes; here no two different strings share one
    assert np.array_equal(ka.hash[ia] == kb.hash[ib], same)
    assert np.array_equal(ka.length, [len(w.encode()) for w in words[3:]])


def weak_string_keys(values):
    """Real lengths and heads, but only three distinct hashes: nearly every key collides."""
    k = string_keys(values)
    return StringKeys(
        k.values, k.length, k.head, (k.length.astype(np.uint64) % np.uint64(3)) << np.uint64(62)
    )


@pytest.mark.parametrize("style", ["short", "long"])
def test_join_stays_exact_when_every_hash_collides(monkeypatch, style):
    monkeypatch.setenv("RAGASSAY_JIT", "0")  # the numpy path; the compiled one is tested with forged keys
    monkeypatch.setattr(trec, "string_keys", weak_string_keys)
    rng = np.random.default_rng(11)
    for _ in range(25):
        qrels, run = random_case(rng, style)
        ref = pytrec_eval.RelevanceEvaluator(qrels, MEASURES).evaluate(run)
        q = Qrels.from_arrays(*columns(qrels))
        gm = build_grade_matrix(q, Run.from_arrays(*arrange(rng, *columns(run), "ranked")), ties="trec_eval")
        ours = {
            str(m): r.values for m, r in evaluate(gm, list(PAIRS.values()), Semantics.trec_eval()).items()
        }
        row = {qid: i for i, qid in enumerate(gm.query_ids)}
        for qid in ref:
            if not any(g >= 1 for g in qrels[qid].values()):
                continue  # undefined in ragassay, 0 in pytrec_eval: covered by the differential test
            for pname, name in PAIRS.items():
                assert ours[name][row[qid]] == pytest.approx(ref[qid][pname], abs=1e-12), (qid, name)


@pytest.mark.parametrize("doc", ["gamma", "gamma-is-longer-than-8"])
def test_a_doc_whose_hash_matches_a_label_of_another_doc_is_not_that_label(doc):
    q = Qrels.from_arrays(["q1", "q1", "q2"], ["alpha", "beta-is-longer-than-8", "alpha"], [2, 1, 3])
    assert q.unique_keys
    labels = q.docs.values.to_pylist()
    real = string_keys(pa.array([doc, "alpha"]))
    forged_hash = real.hash.copy()
    forged_hash[0] = q.docs.hash[labels.index("beta-is-longer-than-8")]  # same query row, same hash
    forged = StringKeys(real.values, real.length, real.head, forged_hash)
    pos, label = q.lookup(q.row_keys(np.array([0, 0])), forged)
    assert pos.tolist() == [1] and q.docs.values[int(label[0])].as_py() == "alpha"
    assert q.grades[label].tolist() == [2.0]


def ragged_run(sizes, dup_at=None):
    qid, docid, score = [], [], []
    for qi, size in enumerate(sizes):
        for r in range(size):
            qid.append(f"q{qi}")
            docid.append(f"doc-{qi}-{r}")
            score.append(float(size - r))
    if dup_at is not None:
        docid[dup_at] = docid[dup_at - 1]
    return qid, docid, score


@pytest.mark.parametrize(
    "sizes",
    [[5] * 40, [5, 3, 1, 7] * 10, [2000] + [2] * 50],  # rectangular, ragged (padded), one huge query
    ids=["rectangular", "ragged", "skewed"],
)
def test_a_doc_ranked_twice_is_found_in_every_layout(sizes, join_path):
    qid, docid, score = ragged_run(sizes)
    labels = Qrels.from_arrays(qid[:50], docid[:50], [1] * 50)
    build_grade_matrix(labels, Run.from_arrays(qid, docid, score))  # no duplicate, no error
    dup_row = len(qid) - 1
    qid, docid, score = ragged_run(sizes, dup_at=dup_row)
    with pytest.raises(
        SchemaError, match=rf"row {dup_row + 1}: doc .* appears twice .*\(also at <run>: row {dup_row}\)"
    ):
        build_grade_matrix(labels, Run.from_arrays(qid, docid, score))


def test_hash_collisions_alone_never_report_a_duplicate(monkeypatch):
    monkeypatch.setenv("RAGASSAY_JIT", "0")
    monkeypatch.setattr(trec, "string_keys", weak_string_keys)
    qid, docid, score = ragged_run([5, 3, 7, 1] * 10)
    labels = Qrels.from_arrays(qid[:30], docid[:30], [1] * 30)
    gm = build_grade_matrix(labels, Run.from_arrays(qid, docid, score))
    assert int(np.count_nonzero(~np.isnan(gm.grades))) == 30


def test_entries_derived_from_grades_give_the_same_values_as_the_joins(join_path):
    rng = np.random.default_rng(5)
    qrels, run = random_case(rng, "short")
    gm = build_grade_matrix(
        Qrels.from_arrays(*columns(qrels)), Run.from_arrays(*columns(run)), ties="trec_eval"
    )
    plain = GradeMatrix(
        query_ids=gm.query_ids, grades=gm.grades, lengths=gm.lengths, judged=gm.judged, missing=gm.missing
    )
    for a, b in zip(plain.entries, gm.entries, strict=True):
        np.testing.assert_array_equal(a, b)
    metrics = list(PAIRS.values()) + ["judged@5"]
    sem = Semantics.trec_eval()
    for (m, x), y in zip(
        evaluate(gm, metrics, sem).items(), evaluate(plain, metrics, sem).values(), strict=True
    ):
        np.testing.assert_array_equal(x.values, y.values, err_msg=str(m))


def test_string_keys_hash_every_byte_of_long_ids():
    ids = pa.array([f"prefix-{'x' * 40}-{i}-{'y' * 40}-suffix" for i in range(1000)])
    assert len(np.unique(strkeys.string_keys(ids).hash)) == 1000


@pytest.mark.parametrize("last", ["", "a", "abcdefg", "abcdefgh", "abcdefghi", "abc\x00", "x" * 23, "é" * 11])
@pytest.mark.parametrize("before", [[], ["k"], ["key-0001", "key-0002-long-enough"]])
def test_string_keys_at_the_end_of_the_buffer_match_the_same_id_mid_buffer(before, last):
    # 8-byte reads near the end of the data buffer take another path than those in the middle
    at_end = string_keys(pa.array([*before, last]))
    mid = string_keys(pa.array([last, "padding-after-it-" * 2]))
    assert at_end.length[-1] == len(last.encode()) == mid.length[0]
    assert at_end.head[-1] == mid.head[0] == int.from_bytes(last.encode()[:8].ljust(8, b"\0"), "little")
    assert at_end.hash[-1] == mid.hash[0]
    for i, word in enumerate(before):
        alone = string_keys(pa.array([word, "z" * 30]))
        assert (at_end.head[i], at_end.hash[i]) == (alone.head[0], alone.hash[0])


def test_single_threaded_join_gives_the_same_matrix_and_errors(monkeypatch, join_path):
    rng = np.random.default_rng(9)
    qrels, run = random_case(rng, "long")
    q = Qrels.from_arrays(*columns(qrels))
    r = Run.from_arrays(*arrange(rng, *columns(run), "ranked"))
    threaded = build_grade_matrix(q, r, ties="trec_eval")
    monkeypatch.setenv("RAGASSAY_THREADS", "1")
    inline = build_grade_matrix(q, r, ties="trec_eval")
    np.testing.assert_array_equal(threaded.grades, inline.grades)
    np.testing.assert_array_equal(threaded.lengths, inline.lengths)
    labels = Qrels.from_arrays(*ragged_run([4, 4])[:2], [1] * 8)
    qid, docid, score = ragged_run([4, 4], dup_at=7)
    with pytest.raises(SchemaError, match="row 8: doc 'doc-1-2' appears twice"):
        build_grade_matrix(labels, Run.from_arrays(qid, docid, score))


def test_large_string_and_dictionary_run_columns_join_like_plain_strings(join_path):
    labels = Qrels.from_arrays(
        ["q1", "q1", "q2"], ["doc-long-identifier-1", "short", "doc-long-identifier-1"], [1, 2, 3]
    )
    docs = ["doc-long-identifier-1", "x", "short", "doc-long-identifier-2"]
    qids = ["q1", "q1", "q1", "q2"]
    plain = build_grade_matrix(labels, Run.from_arrays(qids, docs, [3.0, 2.0, 1.0, 1.0]))
    large = Run.from_arrays(
        pa.array(qids, pa.large_string()), pa.array(docs, pa.large_string()), [3.0, 2.0, 1.0, 1.0]
    )
    coded = Run.from_arrays(
        pa.chunked_array([qids[:2], qids[2:]]), pa.array(docs).dictionary_encode(), [3, 2, 1, 1]
    )
    for run in (large, coded):
        np.testing.assert_array_equal(build_grade_matrix(labels, run).grades, plain.grades)
    np.testing.assert_array_equal(plain.grades, [[1.0, np.nan, 2.0], [np.nan, np.nan, np.nan]])


def test_label_terms_are_cached_per_qrels_and_match_a_fresh_computation():
    rng = np.random.default_rng(21)
    qrels, run = random_case(rng, "short")
    q = Qrels.from_arrays(*columns(qrels))
    r = Run.from_arrays(*arrange(rng, *columns(run), "ranked"))
    metrics = ["ndcg@5", "ndcg", "recall@10", "bpref", "rprec"]
    sem = Semantics.trec_eval()
    first = evaluate(build_grade_matrix(q, r, ties="trec_eval"), metrics, sem)
    assert {key[0] for key in q.label_cache} == {"n_rel", "n_nonrel", "idcg"}
    cached = evaluate(build_grade_matrix(q, r, ties="trec_eval"), metrics, sem)
    gm = build_grade_matrix(q, r, ties="trec_eval")
    fresh = GradeMatrix(
        query_ids=gm.query_ids,
        grades=gm.grades,
        lengths=gm.lengths,
        judged=gm.judged.copy(),
        missing=gm.missing,
    )
    assert not gm.judged.flags.writeable
    for m in first:
        np.testing.assert_array_equal(first[m].values, cached[m].values)
        np.testing.assert_array_equal(first[m].values, evaluate(fresh, [m], sem)[m].values)
    # another relevance level is another cache entry, not a stale hit
    level2 = evaluate(gm, ["recall@10"], Semantics.trec_eval(relevance_level=2))
    plain2 = evaluate(fresh, ["recall@10"], Semantics.trec_eval(relevance_level=2))
    np.testing.assert_array_equal(next(iter(level2.values())).values, next(iter(plain2.values())).values)
    with pytest.raises(Exception, match="read-only judged"):
        GradeMatrix(
            query_ids=gm.query_ids,
            grades=gm.grades,
            lengths=gm.lengths,
            judged=gm.judged.copy(),
            missing=gm.missing,
            label_cache={},
        )


@pytest.mark.parametrize("where", ["first block", "last block"])
@pytest.mark.parametrize("layout", ["ranked", "shuffled"])
def test_a_doc_ranked_twice_is_found_in_either_half_and_in_any_row_order(where, layout, join_path):
    rng = np.random.default_rng(2)
    sizes = [6, 3, 40, 1, 9] * 8
    qid, docid, score = ragged_run(sizes)
    labels = Qrels.from_arrays(qid[:50], docid[:50], [1] * 50)
    at = 1 if where == "first block" else len(qid) - 1
    docid[at] = docid[at - 1]
    score[at] = score[at - 1] - 0.5  # keeps the ranked layout in rank order
    perm = rng.permutation(len(qid)) if layout == "shuffled" else np.arange(len(qid))
    run = Run.from_arrays([qid[i] for i in perm], [docid[i] for i in perm], [score[i] for i in perm])
    with pytest.raises(SchemaError, match=rf"doc '{docid[at]}' appears twice in the ranking of query"):
        build_grade_matrix(labels, run)
