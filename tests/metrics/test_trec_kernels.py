"""The compiled join kernels against their numpy reference: same hashes, same blocks, exact under collisions."""

import numpy as np
import pyarrow as pa
import pytest
import pytrec_eval
from test_trec_differential import MEASURES, PAIRS, arrange, columns, random_case

from ragassay.metrics import Qrels, Run, Semantics, build_grade_matrix, evaluate, trec
from ragassay.metrics import _kernels as kernels
from ragassay.metrics.strkeys import StringKeys, string_keys


def buffers(values):
    return trec._string_buffers(values)


def unaligned(values: pa.Array) -> pa.Array:
    """The same strings with their bytes at an odd address (the kernels then read from an aligned copy)."""
    offsets, data = buffers(values)
    raw = pa.py_buffer(b"\x01" + data.tobytes())
    shifted = pa.Array.from_buffers(
        values.type, len(values), [None, pa.py_buffer(offsets.tobytes()), raw.slice(1)]
    )
    assert np.frombuffer(shifted.buffers()[2], dtype=np.uint8).ctypes.data % 8 != 0
    return shifted


def random_strings(rng, n):
    alphabet = list("ab\x00é-_0123456789")
    return ["".join(rng.choice(alphabet, size=int(rng.integers(0, 40)))) for _ in range(n)]


@pytest.mark.parametrize("layout", ["plain", "large", "sliced", "unaligned"])
def test_kernel_hashes_equal_the_numpy_keys(layout):
    rng = np.random.default_rng(3)
    words = random_strings(rng, 500) + ["", "a", "abcdefgh", "abcdefghi", "x" * 23]
    values = pa.array(words, type=pa.large_string() if layout == "large" else pa.string())
    if layout == "sliced":
        values = values.slice(7, 300)
    if layout == "unaligned":
        values = unaligned(values)
    ref = string_keys(values)
    length, head, hashed = kernels.string_hashes(*buffers(values))
    np.testing.assert_array_equal(length, ref.length)
    np.testing.assert_array_equal(head, ref.head)
    np.testing.assert_array_equal(hashed, ref.hash)


@pytest.mark.parametrize("last", ["", "a", "abcdefg", "abcdefgh", "abcdefghi", "abc\x00", "x" * 23, "é" * 11])
def test_kernel_hash_of_the_buffers_last_string_matches_the_same_id_mid_buffer(last):
    for before in ([], ["k"], ["key-0001", "key-0002-long-enough"]):
        at_end = kernels.string_hashes(*buffers(pa.array([*before, last])))[2]
        mid = kernels.string_hashes(*buffers(pa.array([last, "padding-after-it-" * 2])))[2]
        assert at_end[-1] == mid[0] == string_keys(pa.array([last])).hash[0]


@pytest.mark.parametrize("style", ["short", "long", "middle"])
def test_compiled_join_matches_pytrec_eval_when_label_slots_are_shared(monkeypatch, style):
    monkeypatch.setenv("RAGASSAY_JIT", "1")
    # a 4-slot label table: nearly every probe walks through labels of other docs and queries
    monkeypatch.setattr(trec, "_MAX_TABLE_BITS", 2)
    rng = np.random.default_rng(17)
    for _ in range(30):
        qrels, run = random_case(rng, style)
        q = Qrels.from_arrays(*columns(qrels))
        assert q.table_bits == 2
        r = Run.from_arrays(*arrange(rng, *columns(run), "shuffled"))
        gm = build_grade_matrix(q, r, ties="trec_eval")
        ref = pytrec_eval.RelevanceEvaluator(qrels, MEASURES).evaluate(run)
        ours = {
            str(m): x.values for m, x in evaluate(gm, list(PAIRS.values()), Semantics.trec_eval()).items()
        }
        row = {qid: i for i, qid in enumerate(gm.query_ids)}
        for qid in ref:
            if not any(g >= 1 for g in qrels[qid].values()):
                continue
            for pname, name in PAIRS.items():
                assert ours[name][row[qid]] == pytest.approx(ref[qid][pname], abs=1e-12), (qid, name)


@pytest.mark.parametrize(
    ("doc", "forged_label"),
    [("gamma", "gammb"), ("gamma", "gamma-but-longer"), ("gamma-is-longer-than-8", "gamma-is-longer-than-9")],
)
def test_compiled_join_never_takes_a_label_whose_key_matches_another_doc(monkeypatch, doc, forged_label):
    def forging_keys(values):
        # the label's key becomes that of `doc` in the same query: only the byte comparison tells them apart
        k = string_keys(values)
        h = k.hash.copy()
        h[np.array(values.to_pylist()) == forged_label] = string_keys(pa.array([doc])).hash[0]
        return StringKeys(k.values, k.length, k.head, h)

    monkeypatch.setattr(trec, "string_keys", forging_keys)
    q = Qrels.from_arrays(["q1", "q1", "q2"], ["alpha", forged_label, "alpha"], [2, 1, 3])
    monkeypatch.undo()
    monkeypatch.setenv("RAGASSAY_JIT", "1")
    assert trec._compiled(0) is not None
    gm = build_grade_matrix(q, Run.from_arrays(["q1", "q1"], [doc, "alpha"], [2.0, 1.0]))
    np.testing.assert_array_equal(gm.grades, [[np.nan, 2.0], [np.nan, np.nan]])


def test_auto_takes_the_compiled_join_from_the_second_long_run_or_once_it_is_loaded(monkeypatch):
    monkeypatch.delenv("RAGASSAY_JIT", raising=False)
    monkeypatch.setattr(trec, "_JIT_ROWS", 10)
    monkeypatch.setattr(trec, "_LARGE_JOINS", 0)
    monkeypatch.setattr(trec, "_KERNELS", None)  # as in a fresh process
    assert trec._compiled(5) is None  # short runs: numpy
    assert trec._compiled(10) is None  # the first long run does not pay for loading numba
    assert trec._compiled(10) is not None  # the second does
    assert trec._compiled(9) is None
    monkeypatch.setattr(trec, "_LARGE_JOINS", 0)
    assert trec._compiled(10) is not None  # already loaded: no reason to wait
    assert trec._compiled(10, jit=False) is None
    assert trec._compiled(1, jit=True) is not None
    monkeypatch.setenv("RAGASSAY_JIT", "0")
    assert trec._compiled(10**9) is None
    monkeypatch.setenv("RAGASSAY_JIT", "1")
    assert trec._compiled(1) is not None
