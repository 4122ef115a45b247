"""The streaming scorer (`score_traces_into_store`) against the whole-file scorer it replaced.

``_reference_import`` is the import path as it was before streaming: read every trace through pydantic
(:class:`TraceReader`), score the whole run at once with :func:`score_traces`, write it in one batch. The
streaming path must store the same rows, the same query status and the same run record extras (every
problem line, every unit failure, every count), on the bundled demo and on random, partly broken traces.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import numpy as np
import pytest

from ragassay.analysis.demo import demo_config_dir
from ragassay.analysis.run_record import _done_markers, _pin_mismatch, _record, config_warnings
from ragassay.analysis.runner import MAX_EXAMPLES, load_inputs, score_traces_into_store
from ragassay.analysis.scoring import ScoringOptions, score_traces
from ragassay.errors import InputError
from ragassay.golden import bundled_golden_source
from ragassay.pipeline import Pipeline
from ragassay.store import Store
from ragassay.trace import TraceReader, write_traces


def _reference_import(store, traces_path, corpus, golden, options=None, name=None, allow_pin_mismatch=False):
    """The whole-file import as it was: every trace a pydantic object, scored and written at once."""
    opt = options or ScoringOptions()
    reader = TraceReader(traces_path)
    traces = list(reader)
    header, problems = reader.header, reader.problems
    mismatch = _pin_mismatch(header, golden, corpus)
    if mismatch and not allow_pin_mismatch:
        raise InputError("pin mismatch")
    config = header.config if header else {}
    sha = header.config_sha if header else ""
    unknown = sorted({t.query_id for t in traces if t.query_id not in golden})
    trials = sorted({t.trial for t in traces}) or [0]
    known = [t for t in traces if t.query_id in golden]
    scored = score_traces(golden, known, header, opt, trials=trials, corpus=corpus, lines=reader.lines)
    unit_messages = scored.unit_check.messages(traces_path)
    ctx = [v for m, v in zip(scored.columns["metric"], scored.columns["value"], strict=True)
           if m == "context_tokens" and not math.isnan(v)]
    extra = {"schema_failures": len(problems),
             "problems": [f"{traces_path}:{p.line}: {p.message}" for p in problems[:MAX_EXAMPLES]],
             "unknown_queries": unknown,
             "unit_failures": scored.unit_check.count,
             "unit_failure_examples": unit_messages[:MAX_EXAMPLES],
             "context_tokens_mean": float(np.mean(ctx)) if ctx else None,
             "warnings": config_warnings(config)}
    if mismatch:
        extra["pin_mismatch"] = mismatch
    rec = _record(name or (header.run_name if header else traces_path.stem), golden, corpus, config, sha, opt,
                  len(trials), f"traces:{traces_path}", extra)
    run_id = store.create_run(rec)
    keys = [(q.query_id, tr) for tr in trials for q in golden.queries]
    store.write_batch(run_id, scored.columns, done=_done_markers(keys, {t.key: t for t in known}))
    store.finish_run(run_id, "complete")
    return run_id, {"n_traces": len(traces), "schema_failures": len(problems), "unknown_queries": unknown,
                    "missing": len(scored.missing), "problems": extra["problems"],
                    "unit_failures": scored.unit_check.count, "unit_failure_examples": extra["unit_failure_examples"],
                    "warnings": extra["warnings"], "pin_mismatch": mismatch}


def _stored(store, run_id):
    res = store.results(run_id).drop_columns(["run_id"]).to_pylist()
    res.sort(key=lambda r: (r["query_id"], r["trial"], r["metric"]))
    status = store.query_status(run_id).to_pylist()
    status = sorted((r["query_id"], r["trial"], r["status"], r["error"]) for r in status)
    rec = store.get_run(run_id)
    return res, status, rec.extra, rec.trials, rec.config_sha, rec.name


def _assert_same(path, corpus, golden, tmp_path, batch_sizes=(7, 4096), **kw):
    with Store.open(tmp_path / "ref.duckdb") as st:
        ref_id, ref_info = _reference_import(st, path, corpus, golden, **kw)
        want = _stored(st, ref_id)
    assert want[0], "the reference stored no rows"
    for bs in batch_sizes:
        with Store.open(tmp_path / f"stream{bs}.duckdb") as st:
            run_id, info = score_traces_into_store(st, path, corpus, golden, batch_size=bs, **kw)
            got = _stored(st, run_id)
        assert info == ref_info
        assert got[1:] == want[1:]
        assert len(got[0]) == len(want[0])
        for g, w in zip(got[0], want[0], strict=True):
            assert g.keys() == w.keys()
            for k in w:
                same = g[k] == w[k] or (isinstance(w[k], float) and isinstance(g[k], float)
                                        and math.isnan(w[k]) and math.isnan(g[k]))
                assert same, (k, g, w)
    return want, ref_info


@pytest.fixture(scope="module")
def bundled():
    return load_inputs(None, None)


@pytest.mark.parametrize("config", ["bm25", "hybrid_rerank", "oracle"])
def test_streaming_rows_equal_whole_file_scoring_on_the_bundled_demo(bundled, config, tmp_path):
    corpus, golden = bundled
    pipe = Pipeline.from_config(demo_config_dir() / f"{config}.yaml", corpus)
    header, traces = pipe.run(golden.queries, trials=2, progress=False, dataset_version=golden.dataset_version)
    path = write_traces(tmp_path / "t.jsonl", header, traces)
    want, info = _assert_same(path, corpus, golden, tmp_path, batch_sizes=(50, 4096))
    assert info["schema_failures"] == 0 and info["missing"] == 0 and len(want[1]) == 2 * len(golden)


# ---- random traces, partly broken ------------------------------------------------------------------------

def _unit(rng, corpus, ev_docs, i):
    doc = rng.choice(ev_docs) if ev_docs and rng.random() < 0.7 else rng.choice(corpus.doc_ids)
    text = corpus[doc].text
    s = rng.randrange(0, max(len(text) - 50, 1))
    e = min(s + rng.randrange(0, 400), len(text))
    u = {"unit_id": f"{doc}#{s}", "doc_id": doc, "start": s, "end": e, "score": rng.random(), "rank": i + 1}
    r = rng.random()
    if r < 0.03:
        u["doc_id"] = doc + ".txt"  # an extension: "did you mean"
    elif r < 0.05:
        u["start"] = -3
    elif r < 0.07:
        u["end"] = s - 1
    elif r < 0.09:
        u["end"] = len(text) + 5
    elif r < 0.12:
        u["text"] = text[s:e]
    elif r < 0.13:
        u["text"] = "not the text"
    elif r < 0.14:
        u["score"] = float("nan")  # json.dumps writes the non-standard NaN literal
    elif r < 0.15:
        u["score"] = None
    elif r < 0.17:
        u["tokens"] = rng.randrange(1, 90)
    return u


def _record_line(rng, corpus, golden, qid, trial, phase):
    q = golden[qid] if qid in golden else None
    ev_docs = [e.doc_id for e in q.evidence] if q else []

    def units(n):
        out = [_unit(rng, corpus, ev_docs, i) for i in range(n)]
        if out and rng.random() < 0.1:
            out.append(dict(out[0]))  # a repeat
        return out

    branches = {"bm25": units(rng.randrange(0, 12))}
    if phase > 0 and rng.random() < 0.6:
        branches["dense"] = units(rng.randrange(0, 8))  # a branch that appears only later in the file
    fused = units(rng.randrange(0, 15))
    rec = {"type": "trace", "trace_id": f"{qid}/{trial}", "query_id": qid, "trial": trial, "question": "q?",
           "branches": branches, "fused": fused}
    if phase > 1 and rng.random() < 0.7:
        rec["reranked"] = list(reversed(fused))[: rng.randrange(0, 8)]
    packed = [dict(u, tokens=rng.randrange(1, 50)) if rng.random() < 0.8 else dict(u)
              for u in fused[: rng.randrange(0, 4)]]
    for u in packed:
        u.pop("text", None)
    rec["packed"] = packed
    if packed and all("tokens" in u for u in packed):
        rec["packed_tokens"] = sum(u["tokens"] for u in packed)
    elif rng.random() < 0.3:
        rec["packed_tokens"] = rng.randrange(0, 200)
    if rng.random() < 0.1:
        rec = {k: v for k, v in rec.items() if k not in ("branches", "fused", "packed")}  # answer only
    outcome = rng.choice(["answered", "answered", "abstained", "refused", "error", None])
    if outcome is not None:
        rec["outcome"] = outcome
    if outcome == "error":
        rec["error"] = "boom"
    if outcome == "answered":
        ref = (q.reference_answer if q else None) or "something"
        rec["answer"] = rng.choice([ref, ref.split()[0], "no idea"])
        cites = []
        for u in rec.get("packed", [])[:2]:
            cites.append(rng.choice([u["unit_id"], {"unit_id": u["unit_id"]},
                                     {"unit_id": u["unit_id"], "doc_id": u["doc_id"], "start": 0, "end": 10**7}]))
        if rng.random() < 0.2:
            cites.append("nowhere")
        rec["citations"] = cites
    if rng.random() < 0.5:
        rec["durations_ms"] = {"bm25": rng.random() * 10, "total": rng.random() * 100}
    if rng.random() < 0.5:
        rec.update(tokens_in=rng.randrange(0, 900), tokens_out=rng.randrange(0, 90), cost=rng.random() / 100)
    return rec


def _broken(rng, rec):
    """A record made invalid (or merely odd) in one of the ways real files are."""
    kind = rng.randrange(14)
    rec = json.loads(json.dumps(rec))
    units = rec.get("fused") or [{"unit_id": "x", "doc_id": "MIT", "start": 0, "end": 1}]
    rec["fused"] = units
    if kind == 0:
        return '{"type": "trace", "query_id": '  # truncated JSON
    if kind == 1:
        return json.dumps([rec])  # not an object
    if kind == 2:
        rec["type"] = "span"
    elif kind == 3:
        rec.pop("query_id")
    elif kind == 4:
        units[0]["start"] = str(units[0]["start"])  # pydantic accepts a numeric string
    elif kind == 5:
        units[0]["end"] = float(units[0]["end"])  # and a whole float
    elif kind == 6:
        units[0]["end"] = units[0]["end"] + 0.5
    elif kind == 7:
        units[0]["colour"] = "red"
    elif kind == 8:
        rec["extra_field"] = 1
    elif kind == 9:
        units[0]["start"] = 2**70
    elif kind == 10:
        rec["outcome"], rec["error"] = "error", None
    elif kind == 11:
        rec["packed"] = [dict(units[0], tokens=3)]
        rec["packed_tokens"] = 99
    elif kind == 12:
        rec["citations"] = [{"unit_id": "u", "start": 3}]
    else:
        units[0]["start"] = True
    return json.dumps(rec)


def _random_file(path, corpus, golden, seed, *, header=True, n=260):
    rng = random.Random(seed)
    qids = golden.query_ids
    lines = []
    if header:
        lines.append(json.dumps({"type": "header", "run_name": "rand", "config": {"reranker": {"final_k": 5}},
                                 "corpus_digest": corpus.digest, "dataset_version": golden.dataset_version}))
    keys = [(q, t) for t in (0, 1) for q in qids]
    rng.shuffle(keys)
    for i in range(n):
        phase = 3 * i // n
        r = rng.random()
        qid, trial = ("not-a-query", 0) if r < 0.03 else keys[rng.randrange(i + 1)] if r < 0.07 else keys[i]
        rec = _record_line(rng, corpus, golden, qid, trial, phase)
        r = rng.random()
        if r < 0.08:
            lines.append(_broken(rng, rec))
        elif r < 0.10:
            lines.append("")
        elif r < 0.11:
            lines.append(json.dumps({"type": "header", "run_name": "late"}))
        else:
            lines.append(json.dumps(rec))
    data = "\n".join(lines).encode("utf-8") + b"\n"
    if seed % 2:
        data = b"\xef\xbb\xbf" + data  # a byte-order mark
    data += b'{"type": "trace", "query_id": "\xff"}\n'  # a line that is not UTF-8
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_streaming_rows_equal_whole_file_scoring_on_random_broken_traces(bundled, seed, tmp_path):
    corpus, golden = bundled
    path = _random_file(tmp_path / "r.jsonl", corpus, golden, seed, header=seed != 3)
    want, info = _assert_same(path, corpus, golden, tmp_path)
    assert info["schema_failures"] > 10 and info["unit_failures"] > 20 and info["missing"] > 100
    assert info["unknown_queries"] == ["not-a-query"]


def test_streaming_respects_scoring_options(bundled, tmp_path):
    corpus, golden = bundled
    path = _random_file(tmp_path / "r.jsonl", corpus, golden, 5, n=120)
    opts = ScoringOptions(hit_rule="min_fraction:0.5", relevance_threshold=1, gain="linear")
    _assert_same(path, corpus, golden, tmp_path, batch_sizes=(16,), options=opts, name="named")


def test_a_pin_mismatch_is_refused_before_anything_is_stored(bundled, tmp_path):
    corpus, golden = bundled
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"type": "header", "run_name": "x", "corpus_digest": "sha256:other"}) + "\n")
    with Store.open(tmp_path / "s.duckdb") as st:
        with pytest.raises(InputError, match="corpus_digest"):
            score_traces_into_store(st, path, corpus, golden)
        assert st.list_runs() == []


_KILL_AFTER = """
import os, sys
from ragassay.store import Store
calls = 0
write = Store.write_batch

def dying_write(self, *a, **k):
    global calls
    calls += 1
    if calls > {n}:
        os._exit(9)  # killed between two batches: no cleanup, no finish_run
    return write(self, *a, **k)

Store.write_batch = dying_write
from ragassay.cli.app import main
main(sys.argv[1:])
"""


def test_a_killed_score_resumes_or_restarts_without_duplicated_rows(bundled, tmp_path):
    corpus, golden = bundled
    path = _random_file(tmp_path / "r.jsonl", corpus, golden, 4)
    db = tmp_path / "s.duckdb"
    args = ["score", str(path), "--golden", str(bundled_golden_source()), "--store", str(db), "--batch-size", "16"]
    proc = subprocess.run([sys.executable, "-c", _KILL_AFTER.format(n=5), *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 9, proc.stderr
    with Store.open(db) as st:
        (killed,) = st.list_runs()
        assert killed.status == "running"
        partial = st.results(killed.run_id).num_rows
        # restart: a new run, complete, equal to the reference
        fresh_id, fresh_info = score_traces_into_store(st, path, corpus, golden, batch_size=16)
        # resume: the killed run is finished in place
        resumed_id, resumed_info = score_traces_into_store(st, path, corpus, golden, batch_size=16,
                                                           resume=killed.run_id)
        assert resumed_id == killed.run_id and st.get_run(resumed_id).status == "complete"
        fresh, resumed = _stored(st, fresh_id), _stored(st, resumed_id)
    with Store.open(tmp_path / "ref.duckdb") as st:
        ref_id, ref_info = _reference_import(st, path, corpus, golden)
        want = _stored(st, ref_id)
    assert 0 < partial < len(want[0])
    assert fresh_info == resumed_info == ref_info
    for got in (fresh, resumed):
        assert got[1:3] == want[1:3] and len(got[0]) == len(want[0])
        assert [(r["query_id"], r["trial"], r["metric"]) for r in got[0]] == \
            [(r["query_id"], r["trial"], r["metric"]) for r in want[0]]


def test_resuming_with_other_scoring_options_is_refused(bundled, tmp_path):
    corpus, golden = bundled
    path = _random_file(tmp_path / "r.jsonl", corpus, golden, 6, n=30)
    with Store.open(tmp_path / "s.duckdb") as st:
        run_id, _ = score_traces_into_store(st, path, corpus, golden)
        with pytest.raises(InputError, match="same traces, golden set, corpus and options"):
            score_traces_into_store(st, path, corpus, golden, resume=run_id,
                                    options=ScoringOptions(relevance_threshold=1))
