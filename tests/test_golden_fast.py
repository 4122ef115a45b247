"""The column reader of built golden sets gives exactly what per-line pydantic validation gives.

Oracle: ``_load_golden_reference`` (every line through ``GoldenQuery.model_validate_json``, the loader as it
was). Compared field by field, with the type of every value and each model's ``model_fields_set``; for a
set that is refused, the message must be the same string. Sets are written with their manifest pinned by
an independent per-line pydantic parse, so a record that pydantic accepts gets as far as the counts check.
"""

# ruff: noqa: UP031  (JSON lines written with %-formatting: str.format would need every brace doubled)

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from ragassay.corpus import bundled_corpus_dir, load_corpus
from ragassay.errors import InputError
from ragassay.golden import _fast
from ragassay.golden import set as gset
from ragassay.golden.schema import GoldenQuery


def _old_counts(queries: list[GoldenQuery]) -> dict:
    """derived_counts as it was written before (generator expressions over the objects)."""
    positive = {e.grade for q in queries for e in q.evidence if e.grade > 0}
    return {
        "n_queries": len(queries),
        "n_answerable": sum(q.answerable for q in queries),
        "n_negative": sum(not q.answerable for q in queries),
        "strata": dict(sorted(Counter(q.stratum for q in queries).items())),
        "label_type": "graded_0_3" if len(positive) > 1 else "binary",
        "source_mix": dict(sorted(Counter(q.source for q in queries).items())),
        "n_evidence": sum(len(q.evidence) for q in queries),
        "match_kinds": dict(sorted(Counter(e.match for q in queries for e in q.evidence).items())),
        "n_with_nuggets": sum(bool(q.nuggets) for q in queries),
    }


def write_set(out: Path, body: bytes) -> Path:
    """A built-set folder holding ``body`` as golden.jsonl, its manifest pinned to the lines pydantic accepts."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "golden.jsonl").write_bytes(body)
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = ""
    queries = []
    for line in text.split("\n"):
        if line.strip():
            try:
                queries.append(GoldenQuery.model_validate_json(line))
            except ValidationError:
                pass
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    manifest = {"dataset": "t", "golden_sha256": sha, "corpus_digest": "sha256:x", "hit_rule": "any_overlap",
                "relevance_threshold": 2, "annotators": [], "built_at": "1970-01-01T00:00:00Z", **_old_counts(queries)}
    manifest["dataset_version"] = gset.content_version("t", sha, "any_overlap", 2)
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def assert_same(a, b, where="") -> None:
    """Equal values of the same types, models with the same fields, fields-sets, extras and private state."""
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, BaseModel):
        assert a.__dict__.keys() == b.__dict__.keys(), where
        assert a.model_fields_set == b.model_fields_set, (where, a.model_fields_set, b.model_fields_set)
        assert type(a.__pydantic_fields_set__) is type(b.__pydantic_fields_set__), where
        assert a.__pydantic_extra__ == b.__pydantic_extra__ and a.__pydantic_private__ == b.__pydantic_private__
        for k in a.__dict__:
            assert_same(a.__dict__[k], b.__dict__[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def outcome(fn, path):
    try:
        return "ok", fn(path)
    except InputError as e:
        return "error", str(e)


def assert_lines_alike(body: bytes) -> None:
    """Line by line: every record the column reader keeps equals pydantic's parse of its line (even where
    another line makes the set fail), and every other non-empty line is handed back."""
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError:
        return
    lines = text.split("\n")
    linenos, queries, rest = _fast.read_lines(text.encode(), {})
    assert linenos == sorted(linenos) and [n for n, _ in rest] == sorted(n for n, _ in rest)
    assert sorted(linenos + [n for n, _ in rest]) == [i for i, x in enumerate(lines, 1) if x]
    for n, q in zip(linenos, queries, strict=True):
        assert_same(q, GoldenQuery.model_validate_json(lines[n - 1]), f"line {n}")
    assert [b.decode() for _, b in rest] == [lines[n - 1] for n, _ in rest]


def assert_loads_alike(path: Path) -> str:
    assert_lines_alike((path / "golden.jsonl").read_bytes())
    fast_kind, fast = outcome(lambda p: gset._load_golden(p, columns=True), path)
    ref_kind, ref = outcome(gset._load_golden_reference, path)
    assert fast_kind == ref_kind, (fast, ref)
    if fast_kind == "error":
        assert fast == ref
    else:
        assert fast.manifest == ref.manifest
        assert_same(fast.queries, ref.queries, "queries")
        # the shared fields-sets: one object per distinct set, as the reference shares them
        assert len({id(q.__pydantic_fields_set__) for q in fast}) == len({frozenset(q.model_fields_set) for q in fast})
    return fast_kind


@pytest.fixture(params=[1 << 21, 300], ids=["one-piece", "small-pieces"])
def piece_bytes(request, monkeypatch):
    """Run each comparison with the default piece size and with pieces of a few lines (more splits, more
    pieces whose rows are partly handed back)."""
    monkeypatch.setattr(_fast, "_PIECE_BYTES", request.param)
    monkeypatch.setattr(_fast, "_MIN_PIECE", 2 if request.param < 1000 else _fast._MIN_PIECE)
    return request.param


def test_the_bundled_golden_set_loads_alike(tmp_path, piece_bytes):
    from ragassay.golden import build_golden, bundled_golden_source

    build_golden(bundled_golden_source(), load_corpus(bundled_corpus_dir()), tmp_path / "g")
    assert assert_loads_alike(tmp_path / "g") == "ok"
    assert len(gset._load_golden(tmp_path / "g", columns=True)) > 10


# --- random sets ---------------------------------------------------------------------------------------

_WORDS = ["a", "licence", "créé", "naïve", "日本語", "emoji 😀", 'quote "x"', "back\\slash", "tab\tnew\nline",
          "created", "\"created\": 1", "tags", "\u2028", "", " ", "null", "\u0000", "x" * 300]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 4)))


def _ident(rng: random.Random) -> str:
    return rng.choice(["n1", "fact-2", "é", "N_3", "x" * 70])


def _record(rng: random.Random, i: int) -> dict:
    r: dict = {"query_id": f"q{i}" if rng.random() < 0.9 else _text(rng), "question": _text(rng),
               "stratum": rng.choice(["lexical", "negative", "multi_hop", ""]),
               "answerable": rng.random() < 0.7}
    if rng.random() < 0.7:
        r["tags"] = [rng.choice(_WORDS) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.8:
        r["evidence"] = []
        for _ in range(rng.randint(0, 4)):
            e = {"doc_id": rng.choice(["gpl", "mit", "doc 7", "d\u00e9"]), "start": rng.randint(-5, 10**6),
                 "end": rng.choice([rng.randint(0, 10**6), 2**62, -(2**63)]), "grade": rng.randint(-1, 5),
                 "quote": _text(rng)}
            if rng.random() < 0.6:
                e["match"] = rng.choice(["exact", "whitespace", "punctuation"])
            r["evidence"].append(e)
    if rng.random() < 0.5:
        r["reference_answer"] = _text(rng) if rng.random() < 0.7 else None
    if rng.random() < 0.4:
        r["nuggets"] = []
        for _ in range(rng.randint(0, 3)):
            n = {"id": _ident(rng), "text": rng.choice(["a fact", "été", "x" * 100])}
            if rng.random() < 0.5:
                n["vital"] = rng.random() < 0.5
            r["nuggets"].append(n)
    if rng.random() < 0.5:
        r["source"] = rng.choice(["human", "llm", "other"])
    if rng.random() < 0.6:
        r["created"] = rng.choice([None, "2024-01-02", "yesterday"])
    keys = list(r)
    rng.shuffle(keys)
    return {k: r[k] for k in keys}


def _dumps(rng: random.Random, rec: dict) -> str:
    seps = rng.choice([(", ", ": "), (",", ":"), (" ,", " : ")])
    return json.dumps(rec, ensure_ascii=rng.random() < 0.3, separators=seps)


@pytest.mark.parametrize("seed", range(6))
def test_random_golden_sets_load_alike(tmp_path, seed, piece_bytes):
    rng = random.Random(seed)
    lines = [_dumps(rng, _record(rng, i)) for i in range(rng.randint(1, 400))]
    body = "\n".join(lines) + rng.choice(["\n", "", "\n\n"])
    assert assert_loads_alike(write_set(tmp_path / "g", body.encode())) == "ok"


def test_a_built_set_at_scale_takes_the_column_path_for_every_line(tmp_path):
    """No line of a builder-written set is handed back to pydantic (the speed of the loader depends on it)."""
    rng = random.Random(7)
    recs = []
    for i in range(3000):
        rec = GoldenQuery.model_validate_json(json.dumps(_record(rng, i)))
        recs.append(json.dumps(rec.model_dump(mode="json"), ensure_ascii=False, sort_keys=True))
    body = ("\n".join(recs) + "\n").encode()
    linenos, queries, rest = _fast.read_lines(body, {})
    assert rest == [] and linenos == list(range(1, 3001))
    assert_same(queries, [GoldenQuery.model_validate_json(x) for x in recs], "q")
    path = write_set(tmp_path / "g", body)
    assert path.joinpath("golden.jsonl").stat().st_size > gset._COLUMNS_MIN_BYTES
    assert_same(gset.load_golden(path).queries, gset._load_golden_reference(path).queries, "q")


def test_derived_counts_equal_the_former_expressions():
    rng = random.Random(3)
    queries = [GoldenQuery.model_validate_json(json.dumps(_record(rng, i))) for i in range(500)]
    for qs in (queries, queries[:1], [], [q for q in queries if not q.evidence]):
        assert gset.derived_counts(qs) == _old_counts(qs)
        assert all(type(v) is type(w) for v, w in zip(gset.derived_counts(qs).values(), _old_counts(qs).values(),
                                                     strict=True))


# --- hostile lines -------------------------------------------------------------------------------------

BASE = '"query_id": "q9", "question": "What?", "stratum": "lexical", "answerable": true'
EV = '{"doc_id": "gpl", "start": 1, "end": 5, "grade": 2, "quote": "abcd", "match": "exact"}'


def _ev(**kw) -> str:
    e = json.loads(EV)
    for k, v in kw.items():
        if v is ...:
            e.pop(k)
        else:
            e[k] = v
    return json.dumps(e)


HOSTILE = [
    # null vs missing
    '{%s, "tags": null}' % BASE, '{%s}' % BASE, '{%s, "evidence": null}' % BASE, '{%s, "nuggets": null}' % BASE,
    '{%s, "source": null}' % BASE, '{%s, "created": null}' % BASE, '{%s, "reference_answer": null}' % BASE,
    '{%s, "created" : null}' % BASE, '{%s, "created"\t:null, "tags": []}' % BASE,
    '{"query_id": null, "question": "q", "stratum": "s", "answerable": true}',
    '{"question": "q", "stratum": "s", "answerable": true}', '{%s, "answerable": null}' % BASE,
    '{%s, "evidence": [%s]}' % (BASE, _ev(match=None)), '{%s, "evidence": [%s]}' % (BASE, _ev(match=...)),
    '{%s, "evidence": [%s, %s]}' % (BASE, _ev(match=...), _ev(match="whitespace")),
    '{%s, "evidence": [%s, %s]}' % (BASE, _ev(match=None), _ev(match="whitespace")),
    '{%s, "evidence": [%s]}' % (BASE, _ev(start=None)), '{%s, "evidence": [%s]}' % (BASE, _ev(quote=...)),
    '{%s, "nuggets": [{"id": "n1", "text": "t", "vital": null}]}' % BASE,
    '{%s, "nuggets": [{"id": "n1", "text": "t"}, {"id": "n2", "text": "u", "vital": false}]}' % BASE,
    # a key's name elsewhere in the line, as a value or inside a string
    '{%s, "tags": ["created"]}' % BASE, '{"query_id": "q", "question": "say \\"created\\": now", "stratum": "s", '
    '"answerable": true}', '{%s, "tags": ["created", "source"], "source": "llm"}' % BASE,
    '{%s, "reference_answer": "\\"created\\":null"}' % BASE,
    # types pydantic's lax mode coerces, or refuses
    '{%s, "evidence": [%s]}' % (BASE, _ev(start=3.0)), '{%s, "evidence": [%s]}' % (BASE, _ev(start=3.5)),
    '{%s, "evidence": [%s]}' % (BASE.replace('"q9"', '"q10"'), _ev(start="3")),
    '{%s, "evidence": [%s]}' % (BASE, _ev(grade=True)), '{%s, "evidence": [%s]}' % (BASE, _ev(grade=[1])),
    '{"query_id": "q", "question": "q", "stratum": "s", "answerable": "true"}',
    '{"query_id": "q", "question": "q", "stratum": "s", "answerable": 1}',
    '{"query_id": "q", "question": "q", "stratum": "s", "answerable": 2}',
    '{"query_id": 5, "question": "q", "stratum": "s", "answerable": true}',
    '{%s, "tags": "x"}' % BASE, '{%s, "tags": [1]}' % BASE, '{%s, "tags": ["a", null]}' % BASE,
    '{%s, "tags": [["a"]]}' % BASE, '{%s, "tags": [{"a": 1}]}' % BASE, '{%s, "evidence": {}}' % BASE,
    '{%s, "evidence": [null]}' % BASE, '{%s, "evidence": [1]}' % BASE, '{%s, "evidence": [{}]}' % BASE,
    '{%s, "created": "2024-01-01", "source": 3}' % BASE, '{%s, "created": 20240101}' % BASE,
    '{%s, "evidence": [%s]}' % (BASE, '{"doc_id": "d", "start": 1, "end": 2, "grade": 1, "quote": "q", "match": 1}'),
    '{%s, "nuggets": [{"id": "n1", "text": "t", "vital": "yes"}]}' % BASE,
    '{%s, "nuggets": [{"id": "n1", "text": "t", "vital": 1}]}' % BASE,
    '{%s, "nuggets": [null]}' % BASE, '{%s, "nuggets": [{"id": "n1"}]}' % BASE,
    # huge ints, NaN, exponents, negative zero
    '{%s, "evidence": [%s]}' % (BASE, _ev(start=10**30)), '{%s, "evidence": [%s]}' % (BASE, _ev(end=-(2**63) - 1)),
    '{%s, "evidence": [%s]}' % (BASE, _ev(end=2**63 - 1)),
    '{%s, "evidence": [%s]}' % (BASE, EV.replace('"start": 1', '"start": NaN')),
    '{%s, "evidence": [%s]}' % (BASE, EV.replace('"grade": 2', '"grade": Infinity')),
    '{%s, "evidence": [%s]}' % (BASE, EV.replace('"start": 1', '"start": 1e2')),
    '{%s, "evidence": [%s]}' % (BASE, EV.replace('"start": 1', '"start": -0')),
    '{%s, "evidence": [%s]}' % (BASE, EV.replace('"start": 1', '"start": 01')),
    # duplicate keys
    '{%s, "query_id": "again"}' % BASE, '{%s, "evidence": [%s]}' % (BASE, EV.replace('"quote"', '"doc_id": "x", "quote"')),
    '{%s, "created": null, "created": "2024"}' % BASE,
    # unknown keys, escaped keys
    '{%s, "zz": 1}' % BASE, '{%s, "zz": null}' % BASE, '{%s, "Tags": []}' % BASE,
    '{%s, "evidence": [%s]}' % (BASE, _ev(extra=1)), '{%s, "nuggets": [{"id": "n1", "text": "t", "x": null}]}' % BASE,
    '{%s, "cr\\u0065ated": null}' % BASE, '{%s, "cr\\u0065ated": "2024"}' % BASE,
    '{"qu\\u0065ry_id": "q", "question": "q", "stratum": "s", "answerable": true}',
    '{%s, "a\\"b": 1}' % BASE, '{%s, "\\u00e9": 1}' % BASE, '{%s, "é": 1}' % BASE, '{%s, "\u2028": 1}' % BASE,
    '{%s, "evidence": [%s]}' % (BASE, EV.replace('"match"', '"m\\u0061tch"')),
    # as many "created" keys as the piece has lines, all in one line (nested in unknown places): the other
    # lines still have none
    '{%s, "evidence": [%s, %s, %s]}' % (BASE, _ev(created=None), _ev(created=1), _ev(created="x")),
    '{%s, "zz": {"created": 1, "y": {"created": 2}}, "created": null}' % BASE,
    # empty and blank strings, nugget id and text rules
    '{"query_id": "", "question": "", "stratum": "", "answerable": false}',
    '{%s, "evidence": [%s]}' % (BASE, _ev(doc_id="", quote="")),
    '{%s, "nuggets": [{"id": "", "text": "t"}]}' % BASE, '{%s, "nuggets": [{"id": "a b", "text": "t"}]}' % BASE,
    '{%s, "nuggets": [{"id": "a\\u0007", "text": "t"}]}' % BASE, '{%s, "nuggets": [{"id": "n", "text": " "}]}' % BASE,
    '{%s, "nuggets": [{"id": "n", "text": ""}]}' % BASE, '{%s, "nuggets": [{"id": "n", "text": "\\u2028"}]}' % BASE,
    '{%s, "nuggets": [{"id": "é\u00a0", "text": "t"}]}' % BASE,
    # bad evidence (a built set's offsets are not re-checked here; both readers take them as they are)
    '{%s, "evidence": [%s]}' % (BASE, _ev(start=9, end=2)), '{%s, "evidence": [%s]}' % (BASE, _ev(grade=-7)),
    '{%s, "evidence": [%s]}' % (BASE, _ev(match="fuzzy")), '{%s, "evidence": [%s]}' % (BASE, _ev(match="")),
    # escapes and unicode
    '{%s, "tags": ["\\ud800"]}' % BASE, '{%s, "tags": ["\\udc00x"]}' % BASE,
    '{%s, "tags": ["\\ud83d\\ude00", "\\u0000", "\\/", "\\b\\f"]}' % BASE, '{%s, "tags": ["\\x41"]}' % BASE,
    '{%s, "tags": ["a\x01b"]}' % BASE, '{%s, "tags": ["a\tb"]}' % BASE, '{%s, "tags": ["a\x7fb"]}' % BASE,
    # not one object per line
    '  {%s}' % BASE, '{%s}  ' % BASE, '{%s}\r' % BASE, '[]', '"x"', '{}', '{%s}{%s}' % (BASE, BASE),
    '{%s,}' % BASE, '{%s /* c */}' % BASE, '\ufeff{%s}' % BASE, '{%s' % BASE, 'null', '\u2028', '\u00a0\u3000',
    '\x1c', '\x0b', '\r', '  ',
    # nesting
    '{%s, "zz": %s}' % (BASE, "[" * 100 + "]" * 100), '{%s, "zz": %s}' % (BASE, "[" * 3000 + "]" * 3000),
    '{%s, "tags": %s}' % (BASE, "[" * 80 + "]" * 80),
    '{%s, "evidence": [%s]}' % (BASE, ", ".join([EV] * 150)),
]


@pytest.mark.parametrize("i", range(len(HOSTILE)))
def test_a_hostile_line_reads_alike(tmp_path, i, piece_bytes):
    good = json.dumps(json.loads('{%s, "evidence": [%s]}' % (BASE, EV)))
    body = "\n".join([good.replace("q9", "q1"), HOSTILE[i], good.replace("q9", "q2"), ""]).encode()
    assert_loads_alike(write_set(tmp_path / "g", body))


def test_all_hostile_lines_together_give_the_same_message(tmp_path, piece_bytes):
    """Every line at once (blank ones skipped, messages in line order, one per bad line)."""
    good = '{%s, "evidence": [%s]}' % (BASE, EV)
    body = "\n".join(x for h in HOSTILE for x in (h, good)).encode()
    assert assert_loads_alike(write_set(tmp_path / "g", body)) == "error"
    # and the lines pydantic accepts, alone, load alike
    ok = []
    for h in HOSTILE:
        try:
            GoldenQuery.model_validate_json(h)
            ok.append(h)
        except ValidationError:
            pass
    assert len(ok) > 20
    assert assert_loads_alike(write_set(tmp_path / "h", "\n".join(ok).encode())) == "ok"


@pytest.mark.parametrize("body", [b"\xef\xbb\xbf" + ('{%s}\n' % BASE).encode(), ('{%s}\n' % BASE).encode() + b"\xff\n",
                                  b"", b"\n\n", ('{%s}' % BASE).encode(), ('{%s}\r\n{%s}\r\n' % (BASE, BASE)).encode()])
def test_file_level_oddities_read_alike(tmp_path, body):
    """A byte-order mark (hashed without it), bytes that are not UTF-8, an empty file, no final newline, CRLF."""
    assert_loads_alike(write_set(tmp_path / "g", body))


def test_a_changed_file_and_wrong_counts_give_the_same_messages(tmp_path):
    good = '{%s, "evidence": [%s]}' % (BASE, EV)
    path = write_set(tmp_path / "g", (good + "\n").encode())
    (path / "golden.jsonl").write_bytes((good + "\n\n").encode())  # changed since the manifest was written
    assert assert_loads_alike(path) == "error"
    path = write_set(tmp_path / "h", (good + "\n").encode())
    m = json.loads((path / "manifest.json").read_text())
    m["n_evidence"] = 2
    (path / "manifest.json").write_text(json.dumps(m))
    assert assert_loads_alike(path) == "error"
    assert "n_evidence do(es) not match" in outcome(gset.load_golden, path)[1]
