"""The data behind the HTML report, assembled from the store (rows), the traces and the golden set.

Everything here is plain JSON-able data; :func:`ragassay.report.render_report` only renders it.
"""

from __future__ import annotations

import datetime as dt
import io
import itertools
import json
import math
import re
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from ragassay import __version__
from ragassay._arrow_json import null_keys
from ragassay.analysis.compare import coverage_lines
from ragassay.analysis.compare import stage_key as _stage_key
from ragassay.analysis.gate import GatePolicy
from ragassay.analysis.summary import run_summary
from ragassay.errors import InputError
from ragassay.fsio import atomic_write_bytes
from ragassay.golden import EvidenceIndex, GoldenSet, HitRule

if TYPE_CHECKING:
    from ragassay.analysis.compare import Comparison

FOREST_METRIC = "recall@final_k"
# The provenance section's saturation metric: `golden status`'s default, else what the strata table shows.
SATURATION_METRICS = ("recall@10", FOREST_METRIC, "answer_f1")
STRATUM_ROWS_METRICS = ("recall@fusion_depth", "recall@final_k", "ndcg@final_k", "answer_f1")
MAX_RETRIEVED_SHOWN = 5
MAX_TEXT = 400
# The page embeds every query, so its size grows with the set; these bound what the text can add. Span texts
# (evidence and retrieved units, each stored once) share TEXT_BUDGET characters and answers ANSWER_BUDGET,
# so a large set clips each text shorter (never below MIN_TEXT); the page says how many were clipped.
TEXT_BUDGET = 8_000_000
ANSWER_BUDGET = 6_000_000
MIN_TEXT = 120
# Above this many per-query values the page embeds only the table's metric columns; every metric of every
# query is in queries.parquet beside the page.
MAX_EMBEDDED_VALUES = 1_000_000
QUERY_COLUMNS = ("recall@final_k", "answer_f1", "ndcg@final_k", "recall@fusion_depth")
OUTCOMES = ("answered", "abstained", "refused", "error")
PARQUET_NAME = "queries.parquet"
PARQUET_BATCH = 200_000
# Report sections of the system analyses (docs/analyses.md). Their intervals use REPORT_RESAMPLES bootstrap
# resamples (the page says so), fewer than `compare`'s default, to keep `ragassay report` quick; each analysis
# at full precision is `ragassay analyze <kind>`.
REPORT_RESAMPLES = 2_000
# Resampling costs resamples x queries per bootstrap, and the decomposition runs about ten bootstraps; above
# ANALYSIS_DRAW_BUDGET / REPORT_RESAMPLES queries the report's analysis resamples shrink to fit the budget
# (never below MIN_ANALYSIS_RESAMPLES), and the page states the number used and the cap.
ANALYSIS_DRAW_BUDGET = 50_000_000
MIN_ANALYSIS_RESAMPLES = 500


# The comparisons' paired bootstraps cost resamples x queries per stratum and validity group; above
# COMPARE_DRAW_BUDGET / resamples queries the report's comparisons use fewer resamples (never below
# MIN_COMPARE_RESAMPLES, whose p-value floor 1/2,001 still lets one credible row in a hundred survive the BH
# adjustment), and the page says so. `ragassay compare` at full precision is one command away.
COMPARE_DRAW_BUDGET = 200_000_000
MIN_COMPARE_RESAMPLES = 2_000


def comparison_resamples(requested: int, n_queries: int) -> int:
    """The report's comparison resamples at this many queries: ``requested``, capped by the draw budget."""
    return max(min(requested, COMPARE_DRAW_BUDGET // max(n_queries, 1)), min(requested, MIN_COMPARE_RESAMPLES))


class ReadCache:
    """A store whose ``results_wide`` is read once per run (every metric) and sliced per call.

    The report's sections (comparisons, decomposition, slices, the query table) each pivot the same runs;
    at 100,000 queries each pivot is a second of DuckDB work. Slicing the full pivot gives exactly what the
    store returns for a subset: its rows are every (query, trial) with any row, whatever the metrics."""

    def __init__(self, store):
        self._store = store
        self._wide: dict = {}

    def __getattr__(self, name):
        return getattr(self._store, name)

    def results_wide(self, run_ref: str, metrics):
        from ragassay.store.db import WideResults

        run_id = self._store.get_run(run_ref).run_id
        have = self._store.metrics(run_id)
        names = list(metrics)
        if len(set(names)) != len(names) or not set(names) <= set(have):
            return self._store.results_wide(run_id, names)  # its own error for unknown or repeated names
        full = self._wide.get(run_id)
        if full is None:
            full = self._wide[run_id] = self._store.results_wide(run_id, have)
        cols = [have.index(m) for m in names]
        return WideResults(query_ids=full.query_ids, trials=full.trials, strata=full.strata,
                           values=full.values[:, cols])


    def prime(self, run_id: str, rows: pa.Table) -> None:
        """Take a run's full pivot from its rows as :func:`_run_rows` gives them (every metric, sorted by
        query, trial and metric) rather than pivoting in DuckDB again; left to the store whenever
        :func:`wide_from_rows` cannot be sure of giving what the store gives."""
        if run_id not in self._wide:
            wide = wide_from_rows(rows, self._store.metrics(run_id))
            if wide is not None:
                self._wide[run_id] = wide


def read_cached(store):
    """``store`` behind a :class:`ReadCache` (unchanged when it already is one)."""
    return store if isinstance(store, ReadCache) else ReadCache(store)


def wide_from_rows(rows: pa.Table, metrics: list[str]):
    """``Store.results_wide(run, metrics)`` for ``metrics`` = every metric of the run (``Store.metrics``), from
    the run's rows sorted by (query_id, trial, metric) (:func:`_run_rows`): one row per (query_id, trial) in
    that order, its stratum, and each metric's value (NaN when null or absent). None when the rows hold
    what the store's pivot refuses or leaves to chance — a query whose rows disagree on its stratum (the
    store raises), a (query, trial, metric) twice (the store keeps an arbitrary one) — or a metric not in
    ``metrics``; the caller then asks the store."""
    from ragassay.store.db import WideResults

    n = rows.num_rows
    if not n:
        return None
    qid = rows.column("query_id").combine_chunks()
    trial = rows.column("trial").to_numpy().astype(np.int64)
    new = np.empty(n, dtype=bool)
    new[0] = True
    new[1:] = pc.not_equal(qid[1:], qid[:-1]).to_numpy(zero_copy_only=False) | (trial[1:] != trial[:-1])
    starts = np.flatnonzero(new)
    group = np.cumsum(new) - 1
    enc = pc.dictionary_encode(rows.column("metric")).combine_chunks()
    at = {m: j for j, m in enumerate(metrics)}
    names = enc.dictionary.to_pylist()
    if any(m not in at for m in names):
        return None
    col = np.asarray([at[m] for m in names], dtype=np.int64)[enc.indices.to_numpy(zero_copy_only=False)]
    if ((group[1:] == group[:-1]) & (col[1:] == col[:-1])).any():
        return None  # sorted by metric within an item: a repeated cell is two adjacent rows
    values = np.full((len(starts), len(metrics)), np.nan)
    values[group, col] = rows.column("value").to_numpy()
    # the store's stratum is min(stratum) over the item's rows and it refuses an item whose min and max differ
    senc = pc.dictionary_encode(rows.column("stratum")).combine_chunks()
    code = pc.fill_null(senc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    lo = np.minimum.reduceat(np.where(code < 0, np.iinfo(np.int64).max, code), starts)
    hi = np.maximum.reduceat(code, starts)
    if ((hi >= 0) & (lo != hi)).any():
        return None
    labels = np.asarray(senc.dictionary.to_pylist() + [None], dtype=object)
    return WideResults(query_ids=np.asarray(qid.take(pa.array(starts)).to_pylist(), dtype=object),
                       trials=trial[starts], strata=labels[np.where(hi >= 0, hi, len(labels) - 1)],
                       values=values)


def capped_resamples(requested: int, n_queries: int) -> int:
    """The analysis sections' resamples at this many queries: ``requested``, capped by the draw budget."""
    return max(min(requested, ANALYSIS_DRAW_BUDGET // max(n_queries, 1)), min(requested, MIN_ANALYSIS_RESAMPLES))


def _num(x) -> float | None:
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


def _budget(total: int, n: int, high: int) -> int:
    return max(MIN_TEXT, min(high, total // max(n, 1)))


def pins_of(rec, metrics=()) -> dict:
    """A run's pins for the report; ``metrics`` (its metric names) adds the derived cutoffs and final_k."""
    # compare (and scipy through ragassay.stats) loads here, not with this module: the CLI starts reading
    # traces before that import, so the two overlap
    from ragassay.analysis.compare import run_pins

    derived = run_pins(rec, metrics)
    return {"dataset_version": rec.dataset_version, "corpus_digest": rec.corpus_digest,
            "config_sha": rec.config_sha, "metric_version": rec.metric_version, "hit_rule": rec.hit_rule,
            "gain": rec.gain, "relevance_threshold": rec.relevance_threshold, "ties": rec.ties,
            "cutoffs": list(derived["cutoffs"]) if derived["cutoffs"] else None, "final_k": derived["final_k"],
            "git_sha": rec.git_sha, "trials": rec.trials, "source": rec.source}


@dataclass
class TraceColumns:
    """Trial 0 of each query, in file order, as columns: outcome and answer, the ranked list (reranked, else
    fused) of the queries that have one, and the units shown (the first of the ranked list, else of packed).
    Units name their document by a code into ``doc_names``; ``*_offsets`` delimit each query's units."""

    query_id: list
    outcome: list
    answer: list
    doc_names: list
    has_ranked: np.ndarray
    ranked_offsets: np.ndarray
    ranked_doc: np.ndarray
    ranked_start: np.ndarray
    ranked_end: np.ndarray
    shown_offsets: np.ndarray
    shown_doc: np.ndarray
    shown_start: np.ndarray
    shown_end: np.ndarray
    shown_text: list

    @classmethod
    def from_dicts(cls, shown: dict, ranked: dict) -> TraceColumns:
        qids = list(shown)
        names: dict = {}
        code = names.setdefault

        def flat(lists):
            lens = np.fromiter((len(u) for u in lists), dtype=np.int64, count=len(lists))
            units = list(itertools.chain.from_iterable(lists))
            offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
            doc = np.fromiter((code(u[0], len(names)) for u in units), dtype=np.int64, count=len(units))
            start = np.fromiter((u[1] for u in units), dtype=np.int64, count=len(units))
            end = np.fromiter((u[2] for u in units), dtype=np.int64, count=len(units))
            return offsets, doc, start, end, units

        r_off, r_doc, r_start, r_end, _ = flat([ranked.get(q, []) for q in qids])
        s_off, s_doc, s_start, s_end, units = flat([shown[q][2] for q in qids])
        return cls(qids, [shown[q][0] for q in qids], [shown[q][1] for q in qids], list(names),
                   np.asarray([q in ranked for q in qids], dtype=bool), r_off, r_doc, r_start, r_end,
                   s_off, s_doc, s_start, s_end, [u[3] for u in units])

    def shown_dict(self) -> dict:
        names, out = self.doc_names, {}
        for i, q in enumerate(self.query_id):
            a, b = int(self.shown_offsets[i]), int(self.shown_offsets[i + 1])
            out[q] = (self.outcome[i], self.answer[i],
                      [(names[d], s, e, t) for d, s, e, t in zip(self.shown_doc[a:b].tolist(),
                                                                  self.shown_start[a:b].tolist(),
                                                                  self.shown_end[a:b].tolist(),
                                                                  self.shown_text[a:b], strict=True)])
        return out

    def ranked_dict(self) -> dict:
        names, out = self.doc_names, {}
        for i in np.flatnonzero(self.has_ranked).tolist():
            a, b = int(self.ranked_offsets[i]), int(self.ranked_offsets[i + 1])
            out[self.query_id[i]] = [(names[d], s, e) for d, s, e in zip(
                self.ranked_doc[a:b].tolist(), self.ranked_start[a:b].tolist(), self.ranked_end[a:b].tolist(),
                strict=True)]
        return out


class RunTraces:
    """What the report shows of a run's traces (trial 0): outcome, answer and the first units per query,
    and the ranked list of every query for the recall curves — held as :class:`TraceColumns` when read by
    the columnar reader, as dicts when given (``shown``: query_id -> (outcome, answer, [(doc_id, start,
    end, text)]), ``ranked``: query_id -> [(doc_id, start, end)]); each form is built from the other on
    first use. ``problems`` are (line, message); ``durations`` every trial's durations_ms, for the
    stage-latency section; ``later_trials`` (query_id, trial >= 1) -> (outcome, answer)."""

    def __init__(self, shown: dict | None = None, ranked: dict | None = None, problems: list | None = None,
                 durations: list | None = None, later_trials: dict | None = None,
                 columns: TraceColumns | None = None):
        self._shown = shown if shown is not None or columns is not None else {}
        self._ranked = ranked if ranked is not None or columns is not None else {}
        self._columns = columns
        self.problems = problems if problems is not None else []
        self.durations = durations if durations is not None else []
        self.later_trials = later_trials if later_trials is not None else {}

    @property
    def shown(self) -> dict:
        if self._shown is None:
            self._shown = self._columns.shown_dict()
        return self._shown

    @property
    def ranked(self) -> dict:
        if self._ranked is None:
            self._ranked = self._columns.ranked_dict()
        return self._ranked

    @property
    def columns(self) -> TraceColumns:
        if self._columns is None:
            self._columns = TraceColumns.from_dicts(self.shown, self.ranked)
        return self._columns

    def drop_ranked(self) -> None:
        """Forget the ranked lists (they serve only the recall curve), keeping what the table shows."""
        cols = self.columns
        empty = np.zeros(0, dtype=np.int64)
        self._columns = TraceColumns(
            cols.query_id, cols.outcome, cols.answer, cols.doc_names, np.zeros(len(cols.query_id), dtype=bool),
            np.zeros(len(cols.query_id) + 1, dtype=np.int64), empty, empty, empty, cols.shown_offsets,
            cols.shown_doc, cols.shown_start, cols.shown_end, cols.shown_text)
        self._ranked = {}


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _units_ok(units: list) -> bool:
    """The common case, checked in one tight pass; a failure is explained by :func:`_unit_problem`'s loop."""
    try:
        for u in units:
            doc, text = u["doc_id"], u.get("text")
            # type() is, not isinstance: JSON gives exact types, and bool must not pass as an offset
            if type(doc) is not str or not doc or type(u["start"]) is not int or type(u["end"]) is not int \
                    or (text is not None and type(text) is not str):
                return False
    except (KeyError, TypeError, AttributeError):
        return False
    return True


def _unit_problem(units, name: str) -> str | None:
    if not isinstance(units, list):
        return f"{name} must be a list of units"
    if _units_ok(units):
        return None
    for i, u in enumerate(units):
        if not isinstance(u, dict) or not isinstance(u.get("doc_id"), str) or not u["doc_id"]:
            return f"{name}[{i}] needs a doc_id"
        if not (_is_int(u.get("start")) and _is_int(u.get("end"))):
            return f"{name}[{i}] needs integer start and end offsets"
        if u.get("text") is not None and not isinstance(u["text"], str):
            return f"{name}[{i}].text must be a string"
    return None


def _trace_problem(rec: dict) -> str | None:
    """Why a trace record cannot be shown, checking the fields the report reads (the full schema was
    checked when the run was scored; re-validating every field costs more than the whole page)."""
    qid, trial = rec.get("query_id"), rec.get("trial", 0)
    if not isinstance(qid, str) or not qid:
        return "query_id must be a non-empty string"
    if not _is_int(trial) or trial < 0:
        return "trial must be a non-negative integer"
    outcome, answer = rec.get("outcome"), rec.get("answer")
    if outcome is not None and outcome not in OUTCOMES:
        return f"outcome {outcome!r} is not one of {', '.join(OUTCOMES)}"
    if answer is not None and not isinstance(answer, str):
        return "answer must be a string or null"
    if outcome == "answered" and answer is None:
        return "outcome 'answered' needs an 'answer'"
    durations = rec.get("durations_ms")
    if durations is not None and not (isinstance(durations, dict) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in durations.values())):
        return "durations_ms must map stage names to numbers of milliseconds"
    # only the lists the report reads: the ranked one (reranked, else fused), and packed when that is empty
    reranked = rec.get("reranked")
    name, ranked = ("reranked", reranked) if reranked is not None else ("fused", rec.get("fused", []))
    why = _unit_problem(ranked, name)
    if why or ranked:
        return why
    return _unit_problem(rec.get("packed", []), "packed")


def _parse_line(blob: bytes):
    """(record, None) or (None, why) for one JSONL line; orjson first (several times faster), the standard
    parser only for what orjson refuses but JSON-in-Python allows (NaN, Infinity) and for the error text."""
    try:
        return orjson.loads(blob), None
    except orjson.JSONDecodeError:
        pass
    try:
        raw = blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 (byte 0x{blob[exc.start]:02x}); re-encode the file"
    try:
        return json.loads(raw), None
    except (ValueError, RecursionError) as exc:
        return None, f"not valid JSON ({getattr(exc, 'msg', exc)})"


def read_report_traces(path: str | Path) -> RunTraces:
    """Read a trace file for the report: each record's shown fields, with problems counted per line.

    Arrow's JSON reader parses the fields the report reads straight into columns and every check runs over
    whole columns (:func:`_read_columns`); a file it cannot take as a whole — any problem, or anything its
    parser and Python's JSON read differently — is read line by line instead, which reports each problem."""
    fast = _read_columns(Path(path))
    return fast if fast is not None else _read_lines(Path(path))


_UNIT_TYPE = pa.struct([("doc_id", pa.string()), ("start", pa.int64()), ("end", pa.int64()),
                        ("text", pa.string())])
# durations_ms as an empty struct: Arrow says per record whether it is an object, without its keys
_TRACE_SCHEMA = pa.schema([("type", pa.string()), ("query_id", pa.string()), ("trial", pa.int64()),
                           ("outcome", pa.string()), ("answer", pa.string()), ("durations_ms", pa.struct([])),
                           ("fused", pa.list_(_UNIT_TYPE)), ("reranked", pa.list_(_UNIT_TYPE)),
                           ("packed", pa.list_(_UNIT_TYPE))])
# An explicit null differs from an absent key for these (absent trial is 0 and an absent list empty; null is
# a problem), and Arrow reads both as null: a file holding one goes line by line.
# The test is the pattern `"(?:trial|fused|packed)"\s*:\s*null` (:func:`_null_matters`).
_NULL_MATTERS = frozenset((b"trial", b"fused", b"packed"))


def _null_matters(data: bytes) -> bool:
    """Whether ``data`` writes ``trial``, ``fused`` or ``packed`` with a literal null. The nulls are found by
    numpy compares (:func:`~ragassay._arrow_json.null_keys`), which leave the GIL to the threads beside
    this one (a regex over the block held it for ~0.6 s of a 100,000-trace report)."""
    return not _NULL_MATTERS.isdisjoint(null_keys(data))


# durations_ms maps stage names to numbers: a flat object, taken from the bytes in record order
_DURATIONS = re.compile(rb'"durations_ms"\s*:\s*(\{[^{}]*\})')
_BLANK_LINE = re.compile(rb'\n[ \t\r]*(?=\n)')


def _read_columns(path: Path) -> RunTraces | None:
    """The columnar reader, or None when the file needs the line-by-line one (see :func:`read_report_traces`).

    None whenever a record would be a problem (or might be read differently): Arrow fails to parse or
    convert (bad JSON, a non-object line, a duplicate key, wrong types, booleans as numbers), a record has
    an unknown type, an invalid query id, trial, outcome or answer, a unit without doc_id or offsets in a
    list the report reads, a (query, trial) twice, durations that are not a flat map to numbers, or lines
    and records do not pair one to one."""
    tables, duration_objs, n_duration_keys = [], [], 0
    try:
        for data in _line_blocks(path):
            if _null_matters(data):
                return None
            keys = data.count(b'"durations_ms"')
            objs = _DURATIONS.findall(data) if keys else []
            end_first = data.find(b"\n")
            n_blank = len(_BLANK_LINE.findall(data)) + (not data[: end_first if end_first >= 0 else len(data)].strip())
            table = pj.read_json(pa.py_buffer(data), read_options=pj.ReadOptions(block_size=len(data) + 1),
                                 parse_options=pj.ParseOptions(explicit_schema=_TRACE_SCHEMA,
                                                               unexpected_field_behavior="ignore"))
            # a line holding two objects is two records to Arrow and not JSON to Python
            if table.num_rows != data.count(b"\n") + (not data.endswith(b"\n")) - n_blank or len(objs) != keys:
                return None
            tables.append(table)
            duration_objs += objs
            n_duration_keys += keys
    except (OSError, ValueError, pa.ArrowException):
        return None
    if not tables:
        return None
    table = pa.concat_tables(tables)
    del tables
    table = table.combine_chunks()
    kind = pc.fill_null(table["type"], "")
    if not pc.all(pc.is_in(kind, value_set=pa.array(["trace", "header"]))).as_py():
        return None
    has_durations = table["durations_ms"].is_valid().to_numpy(zero_copy_only=False)
    if int(has_durations.sum()) != n_duration_keys:
        return None  # a durations_ms key nested elsewhere, or one that is null
    is_trace = pc.equal(kind, "trace")
    # duration_objs holds one map per record that has one, in file order: keep the trace records'
    durations = _durations([duration_objs[i] for i in np.flatnonzero(
        is_trace.to_numpy(zero_copy_only=False)[has_durations]).tolist()])
    if durations is None:
        return None
    tr = table.filter(is_trace).combine_chunks()
    n = tr.num_rows
    qid = tr["query_id"]
    trial = pc.fill_null(tr["trial"], 0).to_numpy(zero_copy_only=False)
    outcome, answer = tr["outcome"], tr["answer"]
    if qid.null_count or pc.any(pc.equal(qid, "")).as_py() or (trial < 0).any():
        return None
    if not pc.all(pc.is_in(pc.fill_null(outcome, "answered"), value_set=pa.array(OUTCOMES))).as_py() or \
            pc.any(pc.and_(pc.equal(pc.fill_null(outcome, ""), "answered"), answer.is_null())).as_py():
        return None
    codes = pc.dictionary_encode(qid).combine_chunks().indices.to_numpy(zero_copy_only=False).astype(np.int64)
    if n and len(np.unique(codes * (int(trial.max()) + 1) + trial)) != n:
        return None
    lists = {name: _unit_list(tr[name], n) for name in ("fused", "reranked", "packed")}
    use_rr = tr["reranked"].is_valid().to_numpy(zero_copy_only=False)
    ranked_len = np.where(use_rr, lists["reranked"]["len"], lists["fused"]["len"])
    if (np.where(use_rr, lists["reranked"]["bad"], lists["fused"]["bad"]).any()
            or (lists["packed"]["bad"] & (ranked_len == 0)).any()):
        return None
    t0 = np.flatnonzero(trial == 0)
    later = np.flatnonzero(trial != 0)
    outcomes, answers = outcome.to_pylist(), answer.to_pylist()
    qids = qid.to_pylist()
    later_trials = {(qids[i], int(trial[i])): (outcomes[i], answers[i]) for i in later.tolist()}
    return RunTraces(problems=[], durations=durations, later_trials=later_trials,
                     columns=_trial0_columns(t0, qids, outcomes, answers, lists, use_rr))


def _line_blocks(path: Path, size: int = 8 << 20):
    """The file in blocks of whole lines of about ``size`` bytes, so Arrow's parse buffers stay small."""
    with path.open("rb") as fh:
        rest = b""
        while block := fh.read(size):
            block = rest + block
            cut = block.rfind(b"\n") + 1
            rest = block[cut:]
            if cut:
                yield block[:cut]
        if rest:
            yield rest


def _unit_list(col, n: int) -> dict:
    """One list column of units: per record its length and whether a unit lacks doc_id or offsets, and
    the units as flat arrays (document ids dictionary-encoded)."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    lens = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    units = pc.list_flatten(col)
    parent = pc.list_parent_indices(col).to_numpy(zero_copy_only=False)
    doc = pc.struct_field(units, "doc_id")
    start, end = pc.struct_field(units, "start"), pc.struct_field(units, "end")
    bad_unit = pc.or_kleene(pc.or_kleene(units.is_null(), pc.or_kleene(doc.is_null(), pc.equal(doc, ""))),
                            pc.or_kleene(start.is_null(), end.is_null()))
    bad_unit = pc.fill_null(bad_unit, True).to_numpy(zero_copy_only=False)
    bad = np.bincount(parent[bad_unit], minlength=n).astype(bool) if bad_unit.any() else np.zeros(n, dtype=bool)
    return {"len": lens, "bad": bad, "doc": pc.fill_null(doc, ""), "start": start, "end": end,
            "text": pc.struct_field(units, "text"), "first": np.concatenate([[0], np.cumsum(lens)])}


def _durations(objs: list) -> list | None:
    """The non-empty durations_ms maps of ``objs`` (JSON objects, in file order), none at all when no map
    has a total (the stage-latency section needs it); None when one is not a map of numbers."""
    try:
        maps = orjson.loads(b"[" + b",".join(objs) + b"]")
    except orjson.JSONDecodeError:  # NaN or Infinity: Python's parser reads them, as the line reader does
        try:
            maps = [json.loads(o) for o in objs]
        except ValueError:
            return None
    # every value a number (a bool is no number here), checked at C speed: the types seen, not each value
    if not set(map(type, itertools.chain.from_iterable(map(dict.values, maps)))) <= {int, float}:
        return None
    return [m for m in maps if m] if any("total" in m for m in maps) else []


def _trial0_columns(rows: np.ndarray, qids: list, outcomes: list, answers: list, lists: dict,
                    use_rr: np.ndarray) -> TraceColumns:
    """Trial 0's records as :class:`TraceColumns`: the ranked list is reranked when given, else fused; the
    shown units the first :data:`MAX_RETRIEVED_SHOWN` of it, else of packed."""
    fu, rr, pk = lists["fused"], lists["reranked"], lists["packed"]
    names: dict = {}

    def gather(source_of_row: np.ndarray, limit: int | None):
        """Units of each row from the list ``source_of_row`` names (0 fused, 1 reranked, 2 packed)."""
        srcs = (fu, rr, pk)
        lens = np.choose(source_of_row, [s["len"][rows] for s in srcs])
        if limit is not None:
            lens = np.minimum(lens, limit)
        first = np.choose(source_of_row, [s["first"][:-1][rows] for s in srcs])
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        within = np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], lens)
        at = np.repeat(first, lens) + within
        which = np.repeat(source_of_row, lens)
        doc = np.zeros(len(at), dtype=np.int64)
        start = np.zeros(len(at), dtype=np.int64)
        end = np.zeros(len(at), dtype=np.int64)
        text: list = [None] * len(at)
        for k, s in enumerate(srcs):
            sel = np.flatnonzero(which == k)
            if not len(sel):
                continue
            idx = pa.array(at[sel])
            enc = pc.dictionary_encode(s["doc"].take(idx))
            local = np.fromiter((names.setdefault(d, len(names)) for d in enc.dictionary.to_pylist()),
                                dtype=np.int64, count=len(enc.dictionary))
            doc[sel] = local[enc.indices.to_numpy(zero_copy_only=False)]
            start[sel] = s["start"].take(idx).to_numpy(zero_copy_only=False)
            end[sel] = s["end"].take(idx).to_numpy(zero_copy_only=False)
            texts = s["text"].take(idx)
            if texts.null_count < len(texts):
                for j, t in zip(sel.tolist(), texts.to_pylist(), strict=True):
                    text[j] = t
        return offsets, doc, start, end, text

    use = use_rr[rows]
    ranked_src = np.where(use, 1, 0)
    has_ranked = (fu["len"][rows] > 0) | (rr["len"][rows] > 0)
    r_off, r_doc, r_start, r_end, _ = gather(ranked_src, None)  # no units where has_ranked is False
    ranked_len = np.where(use, rr["len"][rows], fu["len"][rows])
    shown_src = np.where(ranked_len > 0, ranked_src, 2)
    s_off, s_doc, s_start, s_end, s_text = gather(shown_src, MAX_RETRIEVED_SHOWN)
    pick = rows.tolist()
    return TraceColumns([qids[i] for i in pick], [outcomes[i] for i in pick], [answers[i] for i in pick],
                        list(names), has_ranked, r_off, r_doc, r_start, r_end, s_off, s_doc, s_start, s_end,
                        s_text)


def _read_lines(path: Path) -> RunTraces:
    """The line-by-line reader: every record parsed and checked on its own, each problem kept with its line.
    Only the shown fields are kept, so memory is what the page needs."""
    out, seen = RunTraces(), {}
    docs: dict = {}  # one string object per document id, not one per unit that names it
    with Path(path).open("rb") as fh:
        for lineno, blob in enumerate(fh, start=1):
            if lineno == 1:
                blob = blob.removeprefix(b"\xef\xbb\xbf")
            if not blob.strip():
                continue
            rec, why = _parse_line(blob)
            if why:
                out.problems.append((lineno, why))
                continue
            if not isinstance(rec, dict):
                out.problems.append((lineno, f"expected a JSON object, got {type(rec).__name__}"))
                continue
            kind = rec.get("type")
            if kind == "header":
                continue  # the run's pins come from the store
            why = _trace_problem(rec) if kind == "trace" else f"unknown record type {kind!r}"
            if why:
                out.problems.append((lineno, why))
                continue
            key = (rec["query_id"], rec.get("trial", 0))
            if key in seen:
                out.problems.append((lineno, f"duplicate trace for query {key[0]!r} trial {key[1]} "
                                             f"(first at line {seen[key]}); skipped"))
                continue
            seen[key] = lineno
            durations = rec.get("durations_ms")
            if isinstance(durations, dict) and durations:
                out.durations.append(durations)
            if key[1] != 0:
                out.later_trials[key] = (rec.get("outcome"), rec.get("answer"))
                continue
            fused, reranked = rec.get("fused") or [], rec.get("reranked")
            ranked = reranked if reranked is not None else fused
            if fused or reranked:
                out.ranked[key[0]] = [(docs.setdefault(u["doc_id"], u["doc_id"]), u["start"], u["end"])
                                      for u in ranked]
            out.shown[key[0]] = (rec.get("outcome"), rec.get("answer"),
                                 [(docs.setdefault(u["doc_id"], u["doc_id"]), u["start"], u["end"], u.get("text"))
                                  for u in (ranked or rec.get("packed") or [])[:MAX_RETRIEVED_SHOWN]])
    if not any("total" in d for d in out.durations):
        out.durations = []  # the stage-latency section needs each request's total; without one, drop them
    return out


def load_run_traces(rec, traces_dir: str | Path | None = None) -> tuple[RunTraces | None, str | None]:
    """Trial 0 of a run's traces, as shown in the report, and why they are unavailable (None when they loaded).

    The traces are ``<folder>/<run_id>.jsonl`` in ``traces_dir``, else in the folder recorded with the run."""
    folder = traces_dir or (rec.extra or {}).get("traces_dir")
    if not folder:
        return None, (f"run {rec.name}: no traces folder was recorded with the run and none was given; "
                      f"pass --traces-dir (the folder `ragassay run --traces-dir` wrote)")
    folder = Path(folder)
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        return None, f"run {rec.name}: traces folder {folder} {what}; pass --traces-dir"
    path = folder / f"{rec.run_id}.jsonl"
    if not path.is_file():
        return None, f"run {rec.name}: no {path.name} in {folder}; pass the --traces-dir that holds it"
    traces = read_report_traces(path)
    # Arrow's allocator keeps the parse buffers for reuse; the report parses nothing else this size
    pa.default_memory_pool().release_unused()
    if traces.problems:
        line, msg = traces.problems[0]
        return traces, (f"run {rec.name}: {len(traces.problems)} malformed record(s) in {path} were skipped "
                        f"(first: line {line}: {msg})")
    return traces, None


class PrefetchedTraces:
    """The runs' traces read in order on a background thread, as :func:`load_run_traces` reads them, while
    the caller does other work (loads the golden set, runs the comparisons). Most of a read is Arrow's JSON
    parse, which releases the GIL, so on two cores it costs little wall time. :meth:`get` waits for a run's
    traces and hands them over once (raising what its read raised); a thread nobody waits for is a daemon
    and does not hold the process open when the caller fails first."""

    def __init__(self, recs, traces_dir: str | Path | None = None):
        self.traces_dir = traces_dir
        self._done = {r.run_id: threading.Event() for r in recs}
        self._got: dict = {}
        threading.Thread(target=self._read, args=(list(recs),), daemon=True, name="ragassay-traces").start()

    def _read(self, recs) -> None:
        for i, r in enumerate(recs):
            try:
                self._got[r.run_id] = (load_run_traces(r, self.traces_dir), None)
            except BaseException as e:  # re-raised in the caller's thread by get()
                for later in recs[i:]:
                    self._got[later.run_id] = (None, e)
                    self._done[later.run_id].set()
                return
            self._done[r.run_id].set()

    def get(self, rec) -> tuple[RunTraces | None, str | None]:
        self._done[rec.run_id].wait()
        got, err = self._got.pop(rec.run_id)
        if err is not None:
            raise err
        return got


def build_report_data(store, run_ids: list[str], golden: GoldenSet, corpus, *,
                      comparisons: list[Comparison] = (), gate=None, oracle_ladder: dict | None = None,
                      traces_dir: str | Path | None = None, title: str = "ragassay report",
                      analyses: bool = True, analysis_resamples: int = REPORT_RESAMPLES,
                      sections: dict | None = None, requested_resamples: int | None = None,
                      prefetched: PrefetchedTraces | None = None, parquet: QueriesParquet | None = None,
                      runs_read: dict | None = None) -> dict:
    """The report's data (docs/report.md). ``analyses`` adds the analysis sections (:func:`analysis_sections`,
    with ``analysis_resamples`` bootstrap resamples); ``sections`` are analysis sections the caller already
    computed (``decomposition``, ``attribution``, ...), used as given. ``requested_resamples``: what the
    user asked the comparisons for, when :func:`comparison_resamples` gave them fewer (the page says so).
    ``prefetched``: the runs' traces already being read (with this ``traces_dir``), taken from there.
    ``parquet``: given each run's rows as they are read, for the per-query Parquet file. ``runs_read``: what
    :func:`read_runs` took from the runs' rows, when the caller read them already (``parquet`` is then
    not used: read_runs fed it)."""
    store = read_cached(store)
    recs = [store.get_run(r) for r in run_ids]
    names = [r.name for r in recs]
    runs_read = runs_read if runs_read is not None else read_runs(store, recs, parquet)
    summaries = {r.run_id: runs_read[r.run_id][0] for r in recs}
    from_rows = {r.run_id: runs_read[r.run_id][1] for r in recs}
    data: dict = {
        "title": title,
        "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "ragassay_version": __version__,
        "runs": [{"run_id": r.run_id, "name": r.name, "pins": pins_of(r, store.metrics(r.run_id)),
                  "config": r.config} for r in recs],
        "manifest": golden.manifest,
    }
    # stage table
    by_run = {r.run_id: {m["metric"]: m for m in summaries[r.run_id]["metrics"]} for r in recs}
    present = {m for r in recs for m in by_run[r.run_id]}
    all_metrics = sorted(present, key=_stage_key)
    rows = []
    for m in all_metrics:
        cells = [by_run[r.run_id].get(m) for r in recs]
        stage = next(c["stage"] for c in cells if c)
        rows.append({"stage": stage, "metric": m, "values": [_num(c["mean"]) if c else None for c in cells],
                     "n_defined": [c["n_defined"] if c else 0 for c in cells],
                     "n_undefined": [c["n_undefined"] if c else 0 for c in cells]})
    data["stage_table"] = {"runs": names, "rows": rows}
    # per-stratum table on the forest metric (fall back to answer_f1 for runs without retrieval)
    strata_metric = FOREST_METRIC if any(FOREST_METRIC in by_run[r.run_id] for r in recs) else "answer_f1"
    strata = golden.manifest.get("strata", {})
    cell = {(r.run_id, p["stratum"]): p for r in recs for p in summaries[r.run_id]["per_stratum"]
            if p["metric"] == strata_metric}
    data["strata_table"] = {"runs": names, "metric": strata_metric, "rows": [
        {"stratum": s, "n": n, "values": [_num(cell[(r.run_id, s)]["mean"]) if (r.run_id, s) in cell else None
                                          for r in recs]} for s, n in strata.items()]}
    data["golden_provenance"] = golden_provenance(store, recs, golden, summaries)
    # the claim-level breakdown of the runs judged for claims (judge claims)
    claim_runs = [r.run_id for r in recs if (r.extra or {}).get("claims_judge")]
    if claim_runs:
        from ragassay.analysis.claims_diff import claim_breakdowns

        data["claims"] = claim_breakdowns(store, claim_runs)
    # comparisons, forest
    if comparisons:
        # the gate's policy lists the metrics that decide; without a gate, the built-in policy's
        policy_metrics = ([c.name for c in gate.checks if c.kind == "statistical"] if gate is not None
                          else list(GatePolicy().metrics))
        # every metric overall, and per stratum only the headline metrics (the full table is `compare --json`)
        data["comparisons"] = [{"baseline": c.run_a.name, "candidate": c.run_b.name,
                                "rows": [r.to_dict() for r in c.rows
                                         if r.stratum == "all" or r.metric in STRATUM_ROWS_METRICS],
                                "claims": claims_in_policy_order(c, policy_metrics),
                                "coverage": coverage_lines(c),
                                "ppi": c.ppi,
                                "pin_differences": [{"pin": k, "a": a, "b": b} for k, a, b in c.pin_differences],
                                "excluded": [{"metric": m, "reason": why} for m, why in c.excluded],
                                "config_diff": [{"key": k, "a": a, "b": b} for k, a, b in c.config_diff],
                                "n_resamples": c.settings.get("n_resamples"),
                                **_resamples_note(c.settings.get("n_resamples"), requested_resamples,
                                                  len(golden.queries))}
                               for c in comparisons]
        forest = []
        for c in comparisons:
            frows = [{"stratum": r.stratum, "delta": _num(r.delta), "ci_low": _num(r.ci_low),
                      "ci_high": _num(r.ci_high), "n": r.n} for r in c.rows if r.metric == FOREST_METRIC]
            if frows:
                forest.append({"label": f"{c.run_b.name} vs {c.run_a.name}", "rows": frows})
        if forest:
            data["forest"] = {"metric": FOREST_METRIC, "comparisons": forest}
    traces, unavailable, curves = {}, [], []
    idx = EvidenceIndex(golden)
    for r in recs:
        traces[r.run_id], why = prefetched.get(r) if prefetched else load_run_traces(r, traces_dir)
        if why:
            unavailable.append({"run": r.name, "reason": why})
        # the ranked lists serve only the recall curve: score them now and drop them, so one run's full
        # lists are held at a time
        if (c := _recall_curve(r, traces[r.run_id], golden, idx)) is not None:
            curves.append(c)
        if traces[r.run_id] is not None:
            traces[r.run_id].drop_ranked()
    # a run without traces still has its rows; what its traces would show is marked unavailable, with why
    data["warnings"] = [u["reason"] for u in unavailable]
    data["traces_unavailable"] = unavailable
    data["recall_curves"] = curves
    data["rerank_movement"] = [m for r in recs if (m := from_rows[r.run_id]["movement"]) is not None]
    data["abstention"] = [a for r in recs if (a := from_rows[r.run_id]["abstention"]) is not None]
    data["latency"] = [from_rows[r.run_id]["latency"] for r in recs]
    given = dict(sections or {})
    if oracle_ladder:
        given["oracle_ladder"] = oracle_ladder
    if analyses:
        used = capped_resamples(analysis_resamples, len(golden.queries))
        data.update(analysis_sections(store, recs, golden, traces, comparisons, n_resamples=used,
                                      skip=given.keys()))
        if used < analysis_resamples:
            data["analysis_resamples_note"] = (f"capped from {analysis_resamples:,} at {len(golden.queries):,} "
                                               f"queries to bound the report's build time")
    data.update(given)
    if gate is not None:
        data["gate"] = {"verdict": gate.verdict, "baseline": gate.comparison.run_a.name,
                        "candidate": gate.comparison.run_b.name,
                        "checks": [{"name": c.name, "kind": c.kind, "verdict": c.verdict, "detail": c.detail}
                                   for c in gate.checks]}
    data["query_columns"] = [m for m in QUERY_COLUMNS if m in present][:2] or sorted(present)[:2]
    data["queries"], data["worst_regressions"] = _queries(store, recs, traces, golden, corpus, idx, comparisons,
                                                          data["query_columns"])
    return data


def golden_provenance(store, recs, golden: GoldenSet, summaries: dict) -> dict:
    """Where the golden set's labels came from and how much they still tell (the report's provenance section).

    ``sources``: the manifest's ``source_mix`` (counted from the queries for a manifest without one), the
    synthetic share k/n and, when any item is synthetic, :func:`~ragassay.analysis.compare.synthetic_note`.
    ``agreement``: the manifest's annotators and kappas with where they came from (``kappa_source``):
    ``computed`` (``golden build --agreement``; its ``agreement`` block as ``computed``) or ``declared`` (typed into the authoring file; a
    manifest from before ``kappa_source`` that carries a kappa copied it from there), None without a kappa.
    ``judged``: per run, the mean over (query, trial) of judged_fraction@final_k (the share of the final
    list's top final_k units that touch a labelled span), None when no trial has a list, with the count.
    ``saturation``: :func:`saturation_section` over these runs."""
    from ragassay.analysis.compare import synthetic_note

    m = golden.manifest
    mix = dict(m.get("source_mix") or Counter(q.source for q in golden.queries))
    n = sum(mix.values())
    has_kappa = any(m.get(k) is not None for k in ("kappa_binary", "kappa_graded"))
    source = m.get("kappa_source", "declared" if has_kappa else None)
    judged = []
    for r in recs:
        jf = summaries[r.run_id]["judged_fraction"]
        judged.append({"run": r.name, "k": pins_of(r, store.metrics(r.run_id))["final_k"], "mean": jf["mean"],
                       "n": jf["n"], "n_undefined": jf["n_undefined"]})
    return {
        "sources": {"n": n, "source_mix": mix, "synthetic_share": mix.get("synthetic", 0) / n if n else None,
                    "note": synthetic_note({"a": mix})},
        "agreement": {"annotators": list(m.get("annotators") or []), "kappa_binary": m.get("kappa_binary"),
                      "kappa_graded": m.get("kappa_graded"), "kappa_source": source,
                      "computed": m.get("agreement")},
        "judged": judged,
        "saturation": saturation_section(store, recs, golden),
    }


def saturation_section(store, recs, golden: GoldenSet) -> dict:
    """Per stratum, ``golden status``'s saturation over the report's runs (docs/labels.md, "Golden status"):
    :func:`ragassay.analysis.golden_status.run_scores` and :func:`ragassay.golden.status.golden_status` with
    their defaults, on the first of :data:`SATURATION_METRICS` a run holds. Runs of another dataset version,
    unfinished or without that metric are left out and listed with why; with none left, ``strata`` is empty
    and ``reason`` says why. An undefined figure (a stratum with no defined value) stays None."""
    from ragassay.analysis.golden_status import run_scores
    from ragassay.golden.status import golden_status

    have = {r.run_id: set(store.metrics(r.run_id)) for r in recs}
    metric = next((x for x in SATURATION_METRICS if any(x in h for h in have.values())), None)
    out: dict = {"metric": metric, "rule": None, "configs": [], "latest_run": None, "excluded": [], "strata": [],
                 "reason": None}
    if metric is None:
        out["reason"] = f"no run holds {' or '.join(SATURATION_METRICS)}"
        return out
    keep = []
    for r in recs:
        if r.dataset_version != golden.dataset_version:
            out["excluded"].append({"run": r.name, "reason": f"scored on golden version {r.dataset_version}"})
        elif r.status != "complete":
            out["excluded"].append({"run": r.name, "reason": f"{r.status}, not complete"})
        elif metric not in have[r.run_id]:
            out["excluded"].append({"run": r.name, "reason": f"has no {metric} rows"})
        else:
            keep.append(r)
    if not keep:
        out["reason"] = "no complete run of this golden version holds " + metric
        return out
    keep.sort(key=lambda r: r.run_id)  # oldest first, as golden status reads them (run ids are ULIDs)
    try:
        rep = golden_status(golden, [run_scores(store, r, golden, [metric]) for r in keep], [metric])
    except InputError as e:
        out["reason"] = str(e)
        return out
    out.update(rule=rep["rule"], configs=rep["configs"], latest_run=rep["latest_run"])
    for s in rep["strata"]:
        f = s["metrics"][metric]
        out["strata"].append({"stratum": s["stratum"], "n_items": s["n_items"], "best": f["best"],
                              "best_run": f["best_run"], "latest": f["latest"], "headroom": f["headroom_best"],
                              "saturated": f["saturated"], "n_passed_by_all": len(s["passed_by_all"]),
                              "n_undefined_items": s["n_undefined_items"]})
    return out


def claims_in_policy_order(comp: Comparison, policy_metrics: list[str]) -> list[str]:
    """``comp.claims`` reordered for the page: the claims on the policy's metrics first, in the order the
    policy lists them, then the other metrics' claims in pipeline order (:func:`_stage_key`), then the
    claims that are not about one metric (the coverage claims) as compare wrote them. compare writes its
    metric claims in pipeline order. Every claim is kept, none is added."""
    metric_of = {comp.claim(r): r.metric for r in comp.rows if r.stratum == "all" and r.defined}
    rank = {m: i for i, m in enumerate(policy_metrics)}

    def key(item: tuple[int, str]) -> tuple:
        i, text = item
        m = metric_of.get(text)
        if m is None:
            return 2, (i,)
        return (0, (rank[m],)) if m in rank else (1, _stage_key(m))

    return [text for _, text in sorted(enumerate(comp.claims), key=key)]


def read_runs(store, recs, parquet: QueriesParquet | None = None) -> dict:
    """run_id -> (:func:`run_summary`, the rerank movement, abstention and latency the page shows) of each
    run, from its rows read once (:func:`_run_rows`, one sort in DuckDB), which also feed ``parquet`` and,
    when ``store`` is a :class:`ReadCache`, its pivot of the run (so the comparisons and sections do not
    pivot in DuckDB again). One run's rows at a time: all the page needs from them is taken before the
    next run is read."""
    out = {}
    for r in recs:
        if parquet is not None:
            parquet.wait()  # the previous run's rows are encoded (and freed) before the next run's are read
        res = _run_rows(store, r.run_id)
        if parquet is not None:
            parquet.add(r, res)
        if isinstance(store, ReadCache):
            store.prime(r.run_id, res)
        summary = run_summary(res)
        have = {m["metric"]: m for m in summary["metrics"]}
        out[r.run_id] = (summary, {
            "movement": _movement(res, r) if "rerank_rescued" in have else None,
            "abstention": _abstention(r, have, res) if "abstention_recall" in have else None,
            "latency": {"run": r.name, "values_ms": _latencies(res)}})
        del res
    return out


def _resamples_note(used, requested: int | None, n_queries: int) -> dict:
    if requested is None or used is None or used >= requested:
        return {}
    return {"resamples_note": (f"{used:,} resamples, capped from {requested:,} at {n_queries:,} queries to bound "
                               f"the report's build time, so no p-value is below 1/{used + 1:,}; `ragassay "
                               f"compare` gives the full count")}


def _units_of(offsets: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(units per row, flat unit index) of ``rows`` in that order, for units delimited by ``offsets``."""
    lens = offsets[rows + 1] - offsets[rows]
    ends = np.cumsum(lens)
    return lens, np.repeat(offsets[rows] - (ends - lens), lens) + np.arange(int(ends[-1]) if len(ends) else 0)


def _golden_rows(cols: TraceColumns, pos: dict) -> np.ndarray:
    """Each trace query's position in the golden set, -1 for a query the set does not hold."""
    return np.fromiter((pos.get(q, -1) for q in cols.query_id), dtype=np.int64, count=len(cols.query_id))


def _unit_keys(idx: EvidenceIndex, cols: TraceColumns, gpos: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """:meth:`EvidenceIndex.encode` of units given their query's golden position and their document code:
    the index's query code is the query's position in the set, so only the few document names are looked up."""
    doc_code = np.fromiter((idx.doc_codes.get(d, -1) for d in cols.doc_names), dtype=np.int64,
                           count=len(cols.doc_names))[docs] if len(docs) else np.zeros(0, dtype=np.int64)
    return np.where((gpos >= 0) & (doc_code >= 0), gpos * idx.n_docs + doc_code, -1)


def _recall_curve(rec, tr: RunTraces | None, golden: GoldenSet, idx: EvidenceIndex,
                  pos: dict | None = None) -> dict | None:
    """Mean recall@k of the ranked (reranked, else fused) list over the queries with relevant evidence,
    every unit of every query scored in one vectorised pass."""
    if tr is None:
        return None
    cols = tr.columns
    pos = pos if pos is not None else {q.query_id: i for i, q in enumerate(golden.queries)}
    gpos = _golden_rows(cols, pos)
    rows = np.flatnonzero(cols.has_ranked & (gpos >= 0))
    if not len(rows):
        return None
    rows = rows[np.argsort(gpos[rows], kind="stable")]  # golden order, so the mean sums in the same order
    lens, unit = _units_of(cols.ranked_offsets, rows)
    depth = int(lens.max())
    thr = rec.relevance_threshold or 2
    # relevant spans per query, counted from the index (its query code is the query's position in the set)
    per_query = np.bincount(idx.key[idx.grade >= thr] // idx.n_docs, minlength=len(golden.queries))
    n_rel = per_query[gpos[rows]].astype(float)
    row = np.repeat(np.arange(len(rows)), lens)
    # rank within each list: position in the flat array minus where the list starts
    rank = np.arange(len(row)) - np.repeat(np.cumsum(lens) - lens, lens)
    keys = _unit_keys(idx, cols, np.repeat(gpos[rows], lens), cols.ranked_doc[unit])
    unit_i, ev_i = idx.hit_pairs(keys, cols.ranked_start[unit], cols.ranked_end[unit], HitRule.parse(rec.hit_rule))
    keep = idx.grade[ev_i] >= thr
    unit_i, ev_i = unit_i[keep], ev_i[keep]
    hits = np.zeros((len(rows), depth))
    if len(unit_i):
        # each relevant span counts once, at the first rank that hits it
        first = np.full(len(idx.grade), depth, dtype=np.int64)
        np.minimum.at(first, ev_i, rank[unit_i])
        ev_row = np.full(len(idx.grade), -1, dtype=np.int64)
        ev_row[ev_i] = row[unit_i]
        found = np.flatnonzero(first < depth)
        np.add.at(hits, (ev_row[found], first[found]), 1)
    ok = n_rel > 0
    if not ok.any():
        return None
    cum = np.cumsum(hits[ok], axis=1) / n_rel[ok, None]
    ks = [k for k in (1, 2, 3, 5, 10, 20, 30, 50, 100) if k <= depth]
    return {"run": rec.name, "k": ks, "recall": [float(cum[:, k - 1].mean()) for k in ks]}


def _run_rows(store, run_id: str) -> pa.Table:
    """A run's result rows as ``Store.results`` sorts them, with only the columns the page reads: the run id,
    trace ids, token and cost columns of 1.5 million rows are a few hundred MB the page never shows."""
    return store.connection.sql(
        "SELECT query_id, trial, metric, value, stratum, judged_fraction, latency_ms FROM results "
        "WHERE run_id = $run_id ORDER BY query_id, trial, metric", params={"run_id": run_id}).to_arrow_table()


def _values(res: pa.Table, metric: str) -> np.ndarray:
    """Every value of one metric in a run's rows (all trials), NaN where undefined."""
    col = pc.filter(res.column("value"), pc.equal(res.column("metric"), metric))  # one column, not the table
    return col.to_numpy(zero_copy_only=False).astype(float) if len(col) else np.zeros(0)


def _movement(res: pa.Table, rec) -> dict:
    names = ("rescued", "broke", "kept", "missed_both")
    counts = {n: int(np.nansum(_values(res, f"rerank_{n}"))) for n in names}
    final_k = ((rec.config or {}).get("reranker") or {}).get("final_k")
    return {"run": rec.name, "final_k": final_k, **counts}


def _abstention(rec, metrics: dict, res: pa.Table) -> dict:
    ab, ov = _values(res, "abstention_recall"), _values(res, "over_refusal")
    ab, ov = ab[~np.isnan(ab)], ov[~np.isnan(ov)]
    tp, fp = float(ab.sum()), float(ov.sum())
    return {"run": rec.name, "abstention_recall": _num(metrics["abstention_recall"]["mean"]),
            "over_refusal": _num(metrics.get("over_refusal", {}).get("mean")),
            "abstention_precision": (tp / (tp + fp)) if (tp + fp) else None,
            "n_negative": int(ab.size), "n_answerable": int(ov.size),
            "refused": int(np.nansum(_values(res, "refused"))), "errors": int(np.nansum(_values(res, "error")))}


def _latencies(res: pa.Table) -> list[float]:
    """One latency per (query, trial): every row of a query carries the same figure; null is not measured."""
    per = res.select(["query_id", "trial", "latency_ms"]).group_by(["query_id", "trial"]).aggregate(
        [("latency_ms", "min")])
    v = per["latency_ms_min"].to_numpy(zero_copy_only=False).astype(float)
    return v[~np.isnan(v)].tolist()


class _Spans:
    """Evidence and retrieved spans, each (doc, start, end, text) stored once and referred to by index."""

    def __init__(self, corpus=None):
        self.index: dict = {}
        self.doc, self.start, self.end, self.text = [], [], [], []
        self._corpus = corpus
        self._at: dict = {}  # (doc, start, end) -> index, for spans whose text is the corpus slice

    def add_corpus(self, doc_id: str, start: int, end: int, fallback: str | None) -> int:
        """A span whose text is the corpus slice (``fallback`` when the document is not in the corpus); the
        slice is taken once per distinct span, not once per reference."""
        i = self._at.get((doc_id, start, end))
        if i is None:
            corpus = self._corpus
            text = corpus[doc_id].text[start:end] if corpus is not None and doc_id in corpus else (fallback or "")
            i = self.add(doc_id, start, end, text)
            if corpus is not None and doc_id in corpus:
                self._at[(doc_id, start, end)] = i
        return i

    def add(self, doc_id: str, start: int, end: int, text: str) -> int:
        key = (doc_id, start, end, text)
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.doc)
            self.doc.append(doc_id)
            self.start.append(start)
            self.end.append(end)
            self.text.append(text)
        return i

    def table(self) -> dict:
        limit = _budget(TEXT_BUDGET, len(self.text), MAX_TEXT)
        exact = [len(t) == e - s for t, s, e in zip(self.text, self.start, self.end, strict=True)]
        cut = [len(t) > limit for t in self.text]
        return {"doc_id": self.doc, "start": self.start, "end": self.end,
                "text": [t[:limit] for t in self.text], "exact": exact, "cut": cut,
                "max_chars": limit, "n_cut": sum(cut)}


def _wide_trial0(store, rec, metrics: list[str], pos: dict) -> tuple[np.ndarray, np.ndarray]:
    """(n_queries, n_metrics) values of trial 0 in golden order, NaN when undefined, and which queries
    have rows."""
    values = np.full((len(pos), len(metrics)), np.nan)
    present = np.zeros(len(pos), dtype=bool)
    if not metrics:
        return values, present
    wide = store.results_wide(rec.run_id, metrics)
    sel = np.flatnonzero(wide.trials == 0)
    rows = np.fromiter((pos.get(q, -1) for q in wide.query_ids[sel]), dtype=np.int64, count=len(sel))
    ok = rows >= 0
    values[rows[ok]] = wide.values[sel[ok]]
    present[rows[ok]] = True
    return values, present


def _queries(store, recs, traces, golden: GoldenSet, corpus, idx, comparisons, columns: list[str]):
    """The per-query table in columns (see docs/report.md, "queries"): plain lists, one entry per query in
    golden order, spans stored once, so 100,000 queries cost arrays rather than a million dicts."""
    qs = golden.queries
    pos = {q.query_id: i for i, q in enumerate(qs)}
    n = len(qs)
    spans = _Spans(corpus)
    ev_n, ev_span, ev_grade = [], [], []
    for q in qs:
        ev_n.append(len(q.evidence))
        for e in q.evidence:
            text = corpus[e.doc_id].text[e.start:e.end] if e.doc_id in corpus else e.quote
            ev_span.append(spans.add(e.doc_id, e.start, e.end, text))
            ev_grade.append(e.grade)
    metric_sets = {r.run_id: store.metrics(r.run_id) for r in recs}
    n_values = n * sum(len(m) for m in metric_sets.values())
    full = n_values <= MAX_EMBEDDED_VALUES
    wide = {}
    for r in recs:
        ms = metric_sets[r.run_id] if full else [m for m in columns if m in metric_sets[r.run_id]]
        wide[r.run_id] = (ms, *_wide_trial0(store, r, ms, pos))
    answer_limit = _budget(ANSWER_BUDGET, n * len(recs), 4_000)
    runs, n_answers_cut = [], 0
    for r in recs:
        tr = traces[r.run_id]
        ms, values, present = wide[r.run_id]
        outcome, answer, ret_n, ret_span, ret_grade = [None] * n, [None] * n, [0] * n, [], []
        if tr is not None:
            cols = tr.columns
            gpos = _golden_rows(cols, pos)
            rows = np.flatnonzero(gpos >= 0)
            for i, k in zip(gpos[rows].tolist(), rows.tolist(), strict=True):
                a = cols.answer[k]
                outcome[i] = cols.outcome[k]
                if a is not None and len(a) > answer_limit:
                    a, n_answers_cut = a[:answer_limit], n_answers_cut + 1
                answer[i] = a
            # units in query order, so each query's run of units follows the counts in ret_n
            rows = rows[np.argsort(gpos[rows], kind="stable")]
            lens, unit = _units_of(cols.shown_offsets, rows)
            for i, c in zip(gpos[rows].tolist(), lens.tolist(), strict=True):
                ret_n[i] = c
            if len(unit):
                docs, starts, ends = cols.shown_doc[unit], cols.shown_start[unit], cols.shown_end[unit]
                keys = _unit_keys(idx, cols, np.repeat(gpos[rows], lens), docs)
                ret_grade = idx.grades_for_keys(keys, starts, ends, HitRule.parse(r.hit_rule))[0].tolist()
                ret_span = _unit_spans(spans, cols, unit, docs, starts, ends)
        runs.append({"name": r.name, "present": present.tolist(), "outcome": outcome, "answer": answer,
                     "metrics": {m: _rounded(values[:, j]) for j, m in enumerate(ms)},
                     "retrieved": {"n": ret_n, "span": ret_span, "grade": ret_grade}})
    worst_delta = np.full(n, np.inf)
    worst_pair: list = [None] * n
    for c in comparisons:
        fa, fb = _metric(wide[c.run_a.run_id], FOREST_METRIC), _metric(wide[c.run_b.run_id], FOREST_METRIC)
        if fa is None or fb is None:
            continue
        d = fb - fa
        better = np.flatnonzero(~np.isnan(d) & (d < worst_delta))
        worst_delta[better] = d[better]
        for i in better.tolist():
            worst_pair[i] = (c.run_a.name, c.run_b.name)
    regressed = np.flatnonzero(worst_delta < 0)
    worst = {"metric": FOREST_METRIC,
             "delta": _rounded(np.where(worst_delta < 0, worst_delta, np.nan)),
             "baseline": [worst_pair[i][0] if worst_delta[i] < 0 else None for i in range(n)],
             "candidate": [worst_pair[i][1] if worst_delta[i] < 0 else None for i in range(n)]}
    ranked = regressed[np.argsort(worst_delta[regressed], kind="stable")][:10]
    table = {"query_id": [q.query_id for q in qs], "stratum": [q.stratum for q in qs],
             "question": [q.question for q in qs], "answerable": [q.answerable for q in qs],
             "evidence": {"n": ev_n, "span": ev_span, "grade": ev_grade}, "spans": spans.table(),
             "runs": runs, "worst": worst, "answer_max_chars": answer_limit, "n_answers_cut": n_answers_cut,
             "metrics_omitted": 0 if full else n_values - sum(len(w[0]) for w in wide.values()) * n}
    return table, [qs[i].query_id for i in ranked.tolist()]


def _unit_spans(spans: _Spans, cols: TraceColumns, unit: np.ndarray, docs: np.ndarray, starts: np.ndarray,
                ends: np.ndarray) -> list:
    """:meth:`_Spans.add_corpus` of every shown unit ``unit``, in order; a span of a corpus document is
    looked up once however many units repeat it (each distinct one in the order it first appears, so every
    span gets the index the unit-by-unit loop gives it)."""
    corpus = spans._corpus
    in_corpus = np.fromiter((corpus is not None and d in corpus for d in cols.doc_names), dtype=bool,
                            count=len(cols.doc_names))[docs]
    out = np.empty(len(docs), dtype=np.int64)
    sel = np.flatnonzero(in_corpus)
    events = np.flatnonzero(~in_corpus)  # a unit of another document: its own text, looked up unit by unit
    if len(sel):
        d, a, b = docs[sel], starts[sel], ends[sel]
        lo = min(int(a.min()), int(b.min()), 0)
        span_a, span_b = int(a.max()) - lo + 1, int(b.max()) - lo + 1
        if (int(d.max()) + 1) * span_a * span_b < 2**62:  # one int64 key per (doc, start, end)
            trip = (d * span_a + (a - lo)) * span_b + (b - lo)
            _, first, inverse = np.unique(trip, return_index=True, return_inverse=True)
        else:
            _, first, inverse = np.unique(np.stack([d, a, b], axis=1), axis=0, return_index=True,
                                          return_inverse=True)
        del d, a, b
        events = np.sort(np.concatenate([events, sel[first]]))
    names, add, texts = cols.doc_names, spans.add_corpus, cols.shown_text
    for u in events.tolist():
        out[u] = add(names[docs[u]], int(starts[u]), int(ends[u]), texts[int(unit[u])])
    if len(sel):
        out[sel] = out[sel[first]][inverse.reshape(-1)]
    return out.tolist()


def _metric(w, metric: str) -> np.ndarray | None:
    ms, values, _ = w
    return values[:, ms.index(metric)] if metric in ms else None


def _rounded(v: np.ndarray) -> list:
    """Values for the page: six decimals (the page shows three), None for undefined."""
    r = np.round(v, 6)
    return [None if x != x else x for x in r.tolist()]


def write_queries_parquet(store, run_ids: list[str], path: str | Path) -> Path:
    """Every result row of the runs, long format (one row per run x query x trial x metric, with the
    query's stratum and latency), written to ``path`` under a temporary name and moved into place.

    One run's rows at a time (:func:`_run_rows`), so the runs' rows never sit in memory at once; the report
    passes a :class:`QueriesParquet` to :func:`build_report_data` instead, which encodes the rows it reads
    anyway rather than sorting each run a second time."""
    sink = QueriesParquet()
    for ref in run_ids:
        rec = store.get_run(ref)
        sink.add(rec, _run_rows(store, rec.run_id))
    atomic_write_bytes(Path(path), sink.finish())
    return Path(path)


class QueriesParquet:
    """The per-query Parquet file in memory, fed each run's rows as :func:`_run_rows` gives them (sorted by
    query, trial and metric): the run id and name, then every column but ``judged_fraction``, in row groups
    of at most :data:`PARQUET_BATCH` rows (the sorted result's own chunks, as DuckDB's batch reader gives
    them), zstd-compressed. The runs are encoded in the order added on a thread of its own (Arrow's encoder
    and zstd release the GIL), so the caller goes on while a run is compressed; :meth:`finish` waits."""

    COLUMNS = ("query_id", "trial", "metric", "value", "stratum", "latency_ms")

    def __init__(self):
        self._buf = io.BytesIO()
        self._writer = None
        self._pool = None
        self._pending: list = []

    def add(self, rec, rows: pa.Table) -> None:
        import pyarrow.parquet  # noqa: F401  (loaded here, not first on the worker thread)

        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragassay-parquet")
        self._pending.append(self._pool.submit(self._write, rec.run_id, rec.name, rows))

    def _write(self, run_id: str, name: str, rows: pa.Table) -> None:
        import pyarrow.parquet as pq

        const = pa.array([run_id, name], type=pa.string())
        for batch in rows.select(list(self.COLUMNS)).to_batches(max_chunksize=PARQUET_BATCH):
            zeros = np.zeros(batch.num_rows, dtype=np.int32)
            full = pa.RecordBatch.from_arrays(
                [const.take(zeros), const.take(zeros + 1), *batch.columns], names=["run_id", "run_name",
                                                                                   *self.COLUMNS])
            if self._writer is None:
                self._writer = pq.ParquetWriter(self._buf, full.schema, compression="zstd")
            self._writer.write_batch(full.cast(self._writer.schema))

    def wait(self) -> None:
        """Wait until every run added so far is encoded (raising what the encoding raised)."""
        while self._pending:
            self._pending.pop(0).result()

    def finish(self) -> bytes:
        try:
            self.wait()
        finally:
            self._pending = []
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
        if self._writer is not None:
            self._writer.close()
        return self._buf.getvalue()


# ---------------------------------------------------------------------------------------------- analyses


def analysis_sections(store, recs, golden: GoldenSet, traces: dict, comparisons=(), *,
                      n_resamples: int = REPORT_RESAMPLES, seed: int = 0, skip=()) -> dict:
    """The data of the analysis sections for runs ``recs`` (JSON-serializable; a key is absent when its
    analysis does not apply): ``decomposition`` (each run's A = h*c1 + (1-h)*c0 and each run's change from the
    first, split into delivery and use), ``oracle_ladder`` (only when a run is an oracle-context run),
    ``slices`` (one per comparison), ``latency_stages`` (runs whose traces carry stage durations) and
    ``consistency`` (runs with several trials). ``traces`` maps run_id to :class:`RunTraces` or None;
    ``skip`` names sections the caller already has (the demo computes the decomposition for the terminal)."""
    out: dict = {"analysis_resamples": n_resamples}
    if not {"decomposition", "oracle_ladder"} <= set(skip):
        # the report compares runs with differing pins only when rebaselined (its comparisons list them)
        dec = _decomposition(store, recs, n_resamples, seed, ladder="oracle_ladder" not in skip,
                             rebaseline=any(c.pin_differences for c in comparisons))
        if dec is not None:
            ladder = dec.pop("ladder", None)
            if "decomposition" not in skip:
                out["decomposition"] = dec
            if ladder is not None:
                out["oracle_ladder"] = ladder
    builders = {"slices": lambda: _slices(store, comparisons, golden, n_resamples, seed),
                "latency_stages": lambda: _stage_latency(recs, traces),
                "consistency": lambda: _consistency(store, recs, traces)}
    for key, build in builders.items():
        if key not in skip and (value := build()):
            out[key] = value
    return out


def _decomposition(store, recs, n_resamples: int, seed: int, *, ladder: bool = True,
                   rebaseline: bool = False) -> dict | None:
    from ragassay.analysis.decomposition import (
        DEFAULT_CORRECT,
        DELIVERY_METRIC,
        CorrectRule,
        decomposition_between,
        decomposition_of_run,
        oracle_ladder,
    )

    need = {CorrectRule.parse(DEFAULT_CORRECT).metric, DELIVERY_METRIC}
    have = {r.run_id: set(store.metrics(r.run_id)) for r in recs}
    ok = [r for r in recs if need <= have[r.run_id]]
    if not ok:
        return None
    kw = {"n_resamples": n_resamples, "seed": seed}
    base = ok[0]
    out = {"kind": "decomposition", "n_resamples": n_resamples,
           "skipped": [{"run": r.name, "reason": f"no {' or '.join(sorted(need - have[r.run_id]))} rows"}
                       for r in recs if not need <= have[r.run_id]],
           # per run overall only and without the stage columns (`ragassay analyze decomposition RUN` has
           # both): each costs a bootstrap, and the page shows neither
           "runs": [decomposition_of_run(store, r.run_id, by_stratum=False, stages=False, **kw) for r in ok],
           "changes": [decomposition_between(store, base.run_id, r.run_id, rebaseline=rebaseline, **kw)
                       for r in ok[1:]]}
    # The ladder's verdict needs an oracle-context rung; without one it could only say "undetermined".
    if ladder and any((r.config or {}).get("oracle") for r in ok) and len(ok) > 1:
        out["ladder"] = oracle_ladder(store, [r.run_id for r in ok], rebaseline=rebaseline, **kw)
    return out


def _slices(store, comparisons, golden: GoldenSet, n_resamples: int, seed: int) -> list[dict]:
    from ragassay.analysis.slicing import paired_scores, slice_analysis

    def paired(c, m) -> bool:
        # a metric undefined on every pair (answer_f1 of a set without reference answers) has nothing to split
        _, _, a, b = paired_scores(store, c.run_a.run_id, c.run_b.run_id, m)
        return bool(np.any(~(np.isnan(a) | np.isnan(b))))

    out = []
    for c in comparisons:
        shared = set(store.metrics(c.run_a.run_id)) & set(store.metrics(c.run_b.run_id))
        metric = next((m for m in ("answer_f1", FOREST_METRIC) if m in shared and paired(c, m)), None)
        if metric is not None:
            out.append(slice_analysis(store, c.run_a.run_id, c.run_b.run_id, metric=metric, by=("stratum",),
                                      golden=golden, n_resamples=n_resamples, seed=seed,
                                      rebaseline=bool(c.pin_differences)))
    return out


def _stage_latency(recs, traces: dict) -> list[dict]:
    from types import SimpleNamespace

    from ragassay.analysis.latency import latency_report_section

    out = []
    for r in recs:
        tr = traces.get(r.run_id)
        if tr is None or not any("total" in d for d in tr.durations) \
                or not any(len(d) > ("total" in d) for d in tr.durations):
            continue  # a per-stage split needs both the stages and each request's own total
        section = latency_report_section([SimpleNamespace(durations_ms=d) for d in tr.durations],
                                         latency_source="traces")
        out.append({"run": r.name, **section})
    return out


def _consistency(store, recs, traces: dict) -> list[dict]:
    from types import SimpleNamespace

    from ragassay.analysis.consistency import consistency_report_section
    from ragassay.analysis.decomposition import DEFAULT_CORRECT, CorrectRule

    metric = CorrectRule.parse(DEFAULT_CORRECT).metric
    out = []
    for r in recs:
        if (r.trials or 1) < 2 or metric not in store.metrics(r.run_id):
            continue
        tr = traces.get(r.run_id)
        answers = None
        if tr is not None:
            # the answers the report already read (trial 0 shown, later trials kept aside), not a second read
            answers = {(q, 0): SimpleNamespace(outcome=o, answer=a) for q, (o, a, _) in tr.shown.items()}
            answers.update({k: SimpleNamespace(outcome=o, answer=a) for k, (o, a) in tr.later_trials.items()})
        out.append(consistency_report_section(store, r.run_id, traces=answers))
    return out
