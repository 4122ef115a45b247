"""The batch kernels of the scorers against the per-item definitions they replaced.

Each oracle below is the per-trace (or per-unit) code as it was before the scorers were vectorized:
answer normalization one text at a time, token F1 with ``Counter``, the generation rows as one loop per
row over trace objects, the judged matrix filled row by row, and unit repeats found with a five-key
lexsort. The vectorized functions must give the same values bit for bit on random and hostile inputs
(Unicode case rules, punctuation, articles, empty answers, duplicate ids, offsets near 2**53, NaN).
"""

from __future__ import annotations

import math
import pickle
import random
import string
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragassay.analysis.scoring import GenerationColumns, _generation_rows, _judged_matrix, _References
from ragassay.metrics.generation import answer_tokens, normalize_answer, token_f1_codes
from ragassay.trace import Citation, Trace, Unit
from ragassay.trace.schema import (
    CodedStrings,
    UnitColumns,
    dense_codes,
    first_index_codes,
    take_strs,
    validate_unit_columns,
)

# pieces that stress the normalization: Greek sigma (final form depends on its neighbours), dotted
# capital I (lowercases to two code points), articles at every boundary, ASCII punctuation, Unicode
# whitespace that str.split splits on (\x1c-\x1f, \x85, \u2028), NUL and U+0001 (the batch separator)
HOSTILE = ["Σ", "ΟΔΟΣ", "ς", "İ", "ß", "ǅ", "\u0345", "a", "an", "the", "The", "A", "AN", " ", "  ", "\t", "\n",
           "\x1c", "\x1f", "\x85", "\u2028", "\u3000", "\x00", "\x01", "'", "-", ".", ",", "!", "_", "é",
           "e\u0301", "日本", "x", "Paris", "42", "·", "\u200b", "ǈ"]


def _f1_oracle(pred: list[str], gold: list[str]) -> float:
    if not pred or not gold:
        return float(pred == gold)
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    p, r = same / len(pred), same / len(gold)
    return 2 * p * r / (p + r)


def _hostile_text(rng: random.Random) -> str:
    return "".join(rng.choice(HOSTILE + list(string.punctuation)) for _ in range(rng.randint(0, 12)))


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-for-bit equal float arrays (NaN where NaN)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(HOSTILE) | st.text(max_size=3), max_size=10).map("".join), max_size=8))
def test_answer_tokens_equal_per_text_normalization_on_any_text(texts):
    words, counts = answer_tokens(texts)
    want = [normalize_answer(t).split() for t in texts]
    assert counts.tolist() == [len(w) for w in want]
    assert words.tolist() == [w for ws in want for w in ws]


def test_answer_tokens_keep_final_sigma_and_articles_at_text_boundaries():
    texts = ["ΟΔΟΣ", "Σ the", "an", "ΑΣ\x01the", "", "the cat", "İ"]
    words, counts = answer_tokens(texts)  # the \x01 in one text sends the batch down the per-text path
    assert words.tolist() == ["οδος", "σ", "ας\x01", "cat", "i̇"]
    assert counts.tolist() == [1, 1, 0, 1, 0, 1, 1]
    words, counts = answer_tokens([t for t in texts if "\x01" not in t])
    assert words.tolist() == ["οδος", "σ", "cat", "i̇"] and counts.tolist() == [1, 1, 0, 0, 1, 1]


def test_token_f1_codes_equal_counter_f1_and_list_equality_on_hostile_pairs():
    rng = random.Random(3)
    for _ in range(40):
        pairs = [(_hostile_text(rng), _hostile_text(rng)) for _ in range(rng.randint(0, 30))]
        if pairs and rng.random() < 0.3:
            pairs[0] = (pairs[0][1], pairs[0][1])  # equal texts
        gw, gc = answer_tokens([g for _, g in pairs])
        gold, vocab = first_index_codes(gw)
        pw, pc = answer_tokens([p for p, _ in pairs])
        pred = np.fromiter((vocab.get(w, -1) for w in pw), dtype=np.int64, count=len(pw))
        f1, em = token_f1_codes(pred, pc, gold, gc)
        want_f1, want_em = [], []
        for p, g in pairs:
            pt, gt = normalize_answer(p).split(), normalize_answer(g).split()
            want_f1.append(_f1_oracle(pt, gt))
            want_em.append(float(pt == gt))
        assert _same(f1, want_f1) and _same(em, want_em)


def test_token_f1_codes_on_worked_pairs():
    # "New York City" vs "York New": same = 2, p = 2/3, r = 1, F1 = 0.8; repeated tokens count by multiplicity
    gold, vocab = first_index_codes(["york", "new", "a", "a", "b"])
    pred = np.asarray([vocab["new"], vocab["york"], -1, vocab["a"], vocab["a"], vocab["a"]])
    f1, em = token_f1_codes(pred, np.asarray([3, 3, 0]), np.asarray(gold), np.asarray([2, 3, 0]))
    assert f1[0] == 2 * (2 / 3) * 1.0 / (2 / 3 + 1.0)
    assert f1[1] == 2 * (2 / 3) * (2 / 3) / (2 / 3 + 2 / 3)
    assert f1[2] == 1.0 and em.tolist() == [0.0, 0.0, 1.0]


def _generation_oracle(golden, rows, row_traces, doc_lengths):
    """The generation rows as they were: one loop per row over trace objects."""
    n = len(rows)
    f1, em, abst, over, cite = (np.full(n, np.nan) for _ in range(5))
    refused, error = np.zeros(n), np.zeros(n)
    for i, ((qid, _), rt) in enumerate(zip(rows, row_traces, strict=True)):
        q = golden[qid]
        outcome = rt.outcome if rt is not None else "error"
        if outcome == "refused":
            refused[i] = 1
            continue
        if outcome == "error" or outcome is None:
            error[i] = 1
            continue
        abstained = outcome == "abstained"
        if q.answerable:
            over[i] = float(abstained)
            if q.reference_answer and abstained:
                f1[i] = em[i] = 0.0
            elif q.reference_answer:
                pred, ref = normalize_answer(rt.answer or "").split(), normalize_answer(q.reference_answer).split()
                f1[i], em[i] = _f1_oracle(pred, ref), float(pred == ref)
        else:
            abst[i] = float(abstained)
        if rt.citations and not abstained:
            packed = {u.unit_id: u for u in rt.packed}
            ok = 0
            for c in rt.citations:
                u = packed.get(c.unit_id)
                if u is None:
                    continue
                doc = c.doc_id or u.doc_id
                s = c.start if c.start is not None else u.start
                e = c.end if c.end is not None else u.end
                length = doc_lengths.get(doc) if doc_lengths is not None else None
                if doc_lengths is None or (length is not None and 0 <= s <= e <= length):
                    ok += 1
            cite[i] = ok / len(rt.citations)
    return [("answer_f1", f1), ("answer_em", em), ("abstention_recall", abst), ("over_refusal", over),
            ("refused", refused), ("error", error), ("citation_validity", cite)]


def _random_generation_case(rng: random.Random, n_queries: int):
    queries = [SimpleNamespace(query_id=f"q{i}", answerable=rng.random() < 0.7,
                               reference_answer=rng.choice([None, "", _hostile_text(rng), "The Eiffel Tower"]))
               for i in range(n_queries)]
    golden = SimpleNamespace(queries=queries)
    by_id = {q.query_id: q for q in queries}
    docs = {"d1": 10, "d2": 0, "d3": 2**40}
    rows, row_traces = [], []
    for q in queries:
        for trial in range(rng.randint(1, 2)):
            rows.append((q.query_id, trial))
            if rng.random() < 0.15:
                row_traces.append(None)
                continue
            outcome = rng.choice([None, "answered", "answered", "abstained", "refused", "error"])
            ids = [rng.choice(["u1", "u2", "u3", "u4"]) for _ in range(rng.randint(0, 4))]  # repeats on purpose
            packed = [Unit(unit_id=u, doc_id=rng.choice(["d1", "d2", "d3", "dx"]), start=rng.randint(-3, 12),
                           end=rng.randint(-3, 14)) for u in ids]
            cites = []
            for _ in range(rng.randint(0, 4)):
                s = rng.choice([None, 0, 3, 11, 2**40, 10**30, 10**400])
                cites.append(Citation(unit_id=rng.choice(["u1", "u2", "u5"]),
                                      doc_id=rng.choice([None, "", "d1", "d2", "dx"]),
                                      start=s, end=None if s is None else s + rng.choice([0, 1, 7])))
            answer = rng.choice([None, "", _hostile_text(rng), q.reference_answer or "x"])
            if outcome == "answered" and answer is None:
                answer = ""
            row_traces.append(Trace(trace_id=f"t{len(rows)}", query_id=q.query_id, trial=trial, outcome=outcome,
                                    answer=answer, error="boom" if outcome == "error" else None, packed=packed,
                                    citations=cites))
    return golden, by_id, rows, row_traces, docs


@pytest.mark.parametrize("seed", range(12))
def test_generation_rows_equal_the_per_row_loop_on_random_traces(seed):
    rng = random.Random(seed)
    golden, by_id, rows, row_traces, docs = _random_generation_case(rng, rng.randint(0, 40))
    codes = {q.query_id: i for i, q in enumerate(golden.queries)}
    query_codes = np.asarray([codes[q] for q, _ in rows], dtype=np.int64)
    refs = _References(golden)
    for doc_lengths in (docs, None):
        got = _generation_rows(refs, query_codes, GenerationColumns.from_traces(row_traces), doc_lengths)
        want = _generation_oracle(by_id, rows, row_traces, doc_lengths)
        assert [name for name, _ in got] == [name for name, _ in want]
        for (name, g), (_, w) in zip(got, want, strict=True):
            assert _same(g, w), (seed, name, g, w)


def test_citation_validity_resolves_to_the_last_packed_unit_with_the_id():
    golden = SimpleNamespace(queries=[SimpleNamespace(query_id="q", answerable=True, reference_answer="x")])
    packed = [Unit(unit_id="u", doc_id="d", start=0, end=99), Unit(unit_id="u", doc_id="d", start=0, end=5)]
    cites = [Citation(unit_id="u"), Citation(unit_id="u", doc_id="", start=4, end=6), Citation(unit_id="v")]
    t = Trace(trace_id="t", query_id="q", outcome="answered", answer="x", packed=packed, citations=cites)
    got = dict(_generation_rows(_References(golden), np.zeros(1, dtype=np.int64),
                                GenerationColumns.from_traces([t]), {"d": 5}))
    # the second unit (end 5) fits; the narrowed span [4, 6) runs past the document; v is not packed
    assert got["citation_validity"].tolist() == [1 / 3]
    assert got["answer_f1"].tolist() == [1.0] and got["answer_em"].tolist() == [1.0]


def test_judged_matrix_equals_the_row_by_row_fill():
    rng = random.Random(5)
    for _ in range(20):
        lists = [sorted((rng.randint(0, 3) for _ in range(rng.randint(0, 6))), reverse=True)
                 for _ in range(rng.randint(0, 30))]
        width = max((len(j) for j in lists), default=0) or 1
        want = np.full((len(lists), width), np.nan)
        for i, j in enumerate(lists):
            if j:
                want[i, :len(j)] = j
        assert _same(_judged_matrix(lists), want)


def test_dense_codes_number_values_in_order_of_first_use():
    codes, distinct = dense_codes(["b", "a", "b", "c", "a", ""])
    assert codes.tolist() == [0, 1, 0, 2, 1, 3] and distinct == ["b", "a", "c", ""]
    # a lone surrogate (the json module reads "\ud800") cannot enter Arrow: the dict pass numbers it
    codes, distinct = dense_codes(["\ud800", "a", "\ud800"])
    assert codes.tolist() == [0, 1, 0] and distinct == ["\ud800", "a"]


@given(st.lists(st.sampled_from(["a", "b", "doc7#1", "", "\u00e9"]), max_size=30), st.data())
@settings(max_examples=200, deadline=None)
def test_coded_strings_behave_as_the_list_they_stand_for(values, data):
    codes, distinct = dense_codes(values)
    col = CodedStrings(codes, distinct)
    assert len(col) == len(values) and list(col) == values and col == values and col == CodedStrings(codes, distinct)
    assert col != [*values, "x"] and col != "".join(values)
    assert [col[i] for i in range(len(values))] == values and col[1:4] == values[1:4]
    if values:
        assert col[-1] == values[-1]
    idx = data.draw(st.lists(st.integers(0, max(len(values) - 1, 0)), max_size=10)) if values else []
    assert take_strs(col, np.asarray(idx, dtype=np.int64)) == [values[i] for i in idx]
    assert take_strs(values, np.asarray(idx, dtype=np.int64)) == [values[i] for i in idx]
    assert all((v in col) for v in values) and ("zz" in col) is False
    assert pickle.loads(pickle.dumps(col)) == values
    assert pa.array(col, pa.string()).to_pylist() == values
    assert dense_codes(col)[0] is codes  # the codes are carried, not computed again
    with pytest.raises(ValueError):
        codes[:1] = 0  # read-only


def _reasons_oracle(cols: UnitColumns, texts: dict[str, str]) -> list[tuple[int, int, str]]:
    """(list, position, reason) of every failing unit, with the repeats found by the old five-key lexsort."""
    n, lengths = len(cols.start), cols.lengths
    owner = np.repeat(np.arange(len(lengths)), lengths)
    pos = np.arange(n) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    doc_code, _ = first_index_codes(cols.doc_id)
    uid_code, _ = first_index_codes(cols.unit_id)
    first_of = np.full(n, -1, dtype=np.int64)
    for keys in ((owner, uid_code), (owner, doc_code, cols.start, cols.end)):
        order = np.lexsort((pos, *reversed(keys)))
        new = np.ones(n, dtype=bool)
        new[1:] = np.any([k[order][1:] != k[order][:-1] for k in keys], axis=0)
        head = np.maximum.accumulate(np.where(new, np.arange(n), 0))
        repeat = order[~new]
        first_of[repeat] = np.where(first_of[repeat] >= 0, first_of[repeat], pos[order[head[~new]]])
    out = []
    for i in range(n):
        doc, s, e = cols.doc_id[i], int(cols.start[i]), int(cols.end[i])
        if doc not in texts:
            why = "is not in the corpus"
        elif s < 0:
            why = "is negative"
        elif e < s:
            why = f"end {e} < start"
        elif e > len(texts[doc]):
            why = "runs past the end"
        elif cols.has_score[i] and not math.isfinite(cols.score[i]):
            why = "is not a finite number"
        elif first_of[i] >= 0:
            why = f"repeats fused[{first_of[i]}]"
        else:
            continue
        out.append((int(owner[i]), int(pos[i]), why))
    return out


@pytest.mark.parametrize("huge", [False, True])
def test_unit_validation_equals_the_lexsort_checks_on_random_lists(huge):
    """Small offsets take the one-key sort; offsets near 2**53 overflow it and take the lexsort."""
    rng = random.Random(11 + huge)
    texts = {"a": "x" * 40, "b": "y" * 7}
    big = 2**53 if huge else 12
    n_repeats = 0
    for _ in range(40):
        lengths = [rng.randint(1, 8) for _ in range(rng.randint(1, 12))]
        n = sum(lengths)
        cols = UnitColumns(
            keys=[(f"q{i}", 0) for i in range(len(lengths))], fields=["fused"] * len(lengths),
            lengths=np.asarray(lengths, dtype=np.int64),
            unit_id=[rng.choice(["u1", "u2", "u3", "é", "u1 ", "u4", "u5", "u6"]) for _ in range(n)],
            doc_id=[rng.choice(["a", "b", "c"]) for _ in range(n)],
            start=np.asarray([rng.choice([0, 1, 5, -big, big]) for _ in range(n)], dtype=np.int64),
            end=np.asarray([rng.choice([1, 5, 7, big, -big]) for _ in range(n)], dtype=np.int64),
            score=np.asarray([rng.choice([0.5, math.nan, math.inf]) for _ in range(n)]),
            has_score=np.asarray([rng.random() < 0.5 for _ in range(n)]), text=None)
        check = validate_unit_columns(cols, texts)
        want = _reasons_oracle(cols, texts)
        assert len(check.failures) == len(want) == int(check.bad_mask.sum())
        for f, (lst, p, why) in zip(check.failures, want, strict=True):
            assert (f.query_id, f.position) == (f"q{lst}", p) and why in f.message, (f, why)
        n_repeats += sum("repeats" in w for _, _, w in want)
        assert check.doc_ids == list(dict.fromkeys(cols.doc_id))
        assert [check.doc_ids[c] for c in check.doc_code] == cols.doc_id
    assert n_repeats >= 10


@pytest.mark.slow
def test_score_known_reuses_the_validation_codes_and_gives_the_rows_of_a_bare_mask(tmp_path):
    """The partitioned scorer passes only the failing-unit mask; the streaming scorer passes the whole check
    (whose doc codes it reuses). Both give the same table, with units from a missing doc not credited."""
    from ragassay.analysis.demo import demo_config_dir
    from ragassay.analysis.runner import load_inputs
    from ragassay.analysis.scoring import Labels, ScoringOptions, _doc_lengths
    from ragassay.analysis.stream import KnownBatch, Structure, score_known
    from ragassay.pipeline import Pipeline
    from ragassay.trace import write_traces
    from ragassay.trace.sources import open_trace_batches

    corpus, golden = load_inputs(None, None)
    pipe = Pipeline.from_config(demo_config_dir() / "hybrid_rerank.yaml", corpus)
    header, traces = pipe.run(golden.queries[:25], trials=1, progress=False, dataset_version=golden.dataset_version)
    traces[0].fused[0].doc_id = "no-such-doc"
    path = write_traces(tmp_path / "t.jsonl", header, traces)
    reader = open_trace_batches(path, 4096)
    part = KnownBatch.of(next(iter(reader)), golden)
    check = validate_unit_columns(part.units, corpus, reader.lines)
    assert check.count >= 1 and "no-such-doc" in check.doc_ids
    assert [check.doc_ids[c] for c in check.doc_code] == list(part.units.doc_id)
    structure = Structure()
    structure.grow(part)
    labels, keys = Labels(golden, ScoringOptions()), [m.key for m in part.traces]
    args = (golden, labels, part, keys, np.arange(len(keys)), structure, 10)
    with_check, ctx_a = score_known(*args, check, _doc_lengths(corpus))
    with_mask, ctx_b = score_known(*args, check.bad_mask, _doc_lengths(corpus))
    assert with_check.column_names == with_mask.column_names and _same(ctx_a, ctx_b)
    for name in with_check.column_names:  # values hold NaN, which Arrow's equality does not equate
        a, b = with_check[name], with_mask[name]
        assert _same(a.to_numpy(), b.to_numpy()) if name == "value" else a.equals(b), name
    assert {"answer_f1", "citation_validity", "rerank_kept", "context_tokens"} <= set(with_check["metric"].to_pylist())
