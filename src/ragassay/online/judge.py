"""Judge-on-sample (spec §15.2, last row): a validated judge scores a stratified sample of production traffic,
and the sample's weights turn its verdicts into unbiased quality rates per day and stratum.

**Design.** The sampling frame is every production record in the date window. Cells are day × stratum ×
failure, where *failure* means the request carries a failure signal (thumbs-down, rephrased, escalated or
empty retrieval). In each cell of N_h requests, n_h = min(N_h, ceil(r_h · N_h)) are drawn without replacement
(the n_h smallest of a seeded hash of the request id: the same seed draws the same requests on every run, and
a request keeps its draw when other days are added), with r_h = rate for ordinary cells and
min(1, rate · factor) for failure cells — failures are oversampled on purpose (spec §15.4). A sampled request's
inclusion probability is pi = n_h / N_h and its design weight N_h / n_h.

**Estimate.** Hájek's weighted mean over the requests whose verdict is defined (a refused answer has no
faithfulness): R = sum(w_i y_i) / sum(w_i), with w_i = N_h / j_h where j_h counts the cell's sampled requests
that were judged (a spend cap can stop before all are; the judged ones stand for their cell). With every
sampled request judged and defined, sum(w_i) over a cell is exactly N_h, so R is the Horvitz–Thompson
estimator of the domain mean and unbiased. The interval is the Taylor-linearized variance of the ratio under
stratified sampling without replacement, Var(R) = sum_h N_h^2 (1 - j_h/N_h) s_h^2 / j_h / W^2 with s_h^2 the
cell's sample variance of e_i = (y_i - R)·defined_i (Cochran 1977, §6.11; Särndal, Swensson & Wretman 1992,
§5.6), normal interval clipped to [0, 1]. A cell judged once has no s_h^2 of its own: it borrows the pooled
variance of the domain's other cells, else the bound 1/4 for a value in [0, 1]. Cells with no judged request
are outside the estimate; ``covered`` says which share of the domain's requests they left out.

**Verdicts** are Parquet files under ``<store>.online/judged/<judge key>/``, one row per (request, metric), with
the request's cell, pi and weight; a re-run skips requests already judged under the same judge pins, so it is
resumable and idempotent. Calls of an LLM judge go through the store's judge-call cache as ``ragassay judge``'s
do (paid calls are never paid twice).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ragassay import fsio
from ragassay.errors import InputError
from ragassay.online.store import online_dir

FAILURE_SIGNALS = ("thumbs_down", "rephrased", "escalated", "empty_retrieval")
# every signal promote can select on: the failure signals and the other per-request signals of a record
SIGNALS = (*FAILURE_SIGNALS, "abandoned", "refusal", "error")
# the judge metrics that need nothing a production record lacks (no reference answer, no nuggets, no citations)
ONLINE_METRICS = ("faithfulness", "answer_relevance")
JUDGED_DIR = "judged"
# requests judged per round: a local judge takes many; an LLM judge two per concurrent call, so a spend cap
# that stops a round wastes little (its paid calls are stored, and a re-run takes them from the store)
LOCAL_CHUNK = 256
# requests whose texts one scan of the record files fetches (a scan reads every record file; a chunk each
# would scan them once per 256 requests)
FETCH_BATCH = 4096


# ---------------------------------------------------------------------------------------------- records
def _date(text: str | None, flag: str) -> date | None:
    if text is None:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError as e:
        raise InputError(f"{flag} {text!r}: not a date; write it as YYYY-MM-DD") from e


def date_window(date_from: str | None, date_to: str | None) -> tuple[date | None, date | None]:
    """The checked --from/--to pair (inclusive days)."""
    lo, hi = _date(date_from, "--from"), _date(date_to, "--to")
    if lo is not None and hi is not None and lo > hi:
        raise InputError(f"--from {lo} is after --to {hi}; give the earlier day first")
    return lo, hi


# the columns the design, the signals and the release order need; the texts are fetched for the few requests
# judged or promoted (:func:`fetch_texts`), so a month of traffic is never held as Python strings
DESIGN_COLUMNS = ("request_id", "ts", "release", "stratum", "outcome", "thumbs", "escalated", "abandoned",
                  "rephrased", "empty_retrieval", "refusal")


def _no_records(store: str | Path) -> InputError:
    from ragassay.online.store import records_dir

    return InputError(f"{records_dir(store)}: no production records here; ingest them first (`ragassay online "
                      f"ingest --store {store} FILE`)")


def read_records(store: str | Path, date_from: date | None = None, date_to: date | None = None,
                 columns: Sequence[str] = DESIGN_COLUMNS) -> dict[str, list]:
    """``columns`` of the production records of ``store`` in the window (inclusive UTC days), as lists, with
    ``day`` ('YYYY-MM-DD', the ``date`` partition) added, ordered by request id; read through
    :func:`ragassay.online.store.open_records`."""
    cols = ", ".join(f'"{c}"' for c in columns)
    table = _window(store, f"{cols}, strftime(date, '%Y-%m-%d') AS day", date_from, date_to)
    return {name: table.column(name).to_pylist() for name in table.column_names}


def _window(store: str | Path, select: str, date_from: date | None, date_to: date | None):
    """``SELECT {select}`` over the production records of ``store`` in the window (inclusive UTC days),
    ordered by request id, as an Arrow table."""
    import duckdb

    from ragassay.online.store import open_records, record_files

    if not record_files(store):
        raise _no_records(store)
    con = duckdb.connect()
    try:
        view = open_records(con, store)
        where, args = [], []
        if date_from is not None:
            where.append("date >= CAST(? AS DATE)")
            args.append(date_from.isoformat())
        if date_to is not None:
            where.append("date <= CAST(? AS DATE)")
            args.append(date_to.isoformat())
        sql = (f"SELECT {select} FROM {view}" + (f" WHERE {' AND '.join(where)}" if where else "")
               + " ORDER BY request_id")
        return con.sql(sql, params=args).to_arrow_table()
    finally:
        con.close()


def fetch_texts(store: str | Path, request_ids: Sequence[str],
                columns: Sequence[str] = ("question", "answer", "outcome", "context", "unit_ids")
                ) -> dict[str, dict[str, Any]]:
    """request_id -> {column: value} for the records named (a semi-join on the record files)."""
    import duckdb
    import pyarrow as pa

    from ragassay.online.store import open_records

    if not request_ids:
        return {}
    con = duckdb.connect()
    try:
        view = open_records(con, store)
        con.register("_wanted", pa.table({"request_id": pa.array(list(request_ids), pa.string())}))
        cols = ", ".join(f'r."{c}"' for c in columns)
        table = con.sql(f"SELECT r.request_id, {cols} FROM {view} r SEMI JOIN _wanted w USING (request_id)"
                        ).to_arrow_table()
    finally:
        con.close()
    rows = table.to_pylist()
    return {r["request_id"]: r for r in rows}


def signals_of(rec: dict[str, list], k: int) -> list[str]:
    """The signals record ``k`` carries, in :data:`SIGNALS` order (a null flag is not a signal)."""
    out = []
    if rec["thumbs"][k] is not None and rec["thumbs"][k] < 0:
        out.append("thumbs_down")
    for name in ("rephrased", "escalated", "empty_retrieval", "abandoned", "refusal"):
        if rec[name][k]:
            out.append(name)
    if rec["outcome"][k] == "error":
        out.append("error")
    return out


# ---------------------------------------------------------------------------------------------- the design
def parse_rate(text: str) -> float:
    """``2%`` or ``0.02`` -> 0.02; a rate must lie in (0, 1]."""
    s = str(text).strip()
    try:
        v = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError as e:
        raise InputError(f"--sample {text!r}: give a share such as 2% or 0.02") from e
    if not (0 < v <= 1) or not math.isfinite(v):
        raise InputError(f"--sample {text!r}: the share must be above 0 and at most 100%")
    return v


def parse_oversample(text: str | None) -> float:
    """``failures=5`` -> 5.0 (the factor failure cells are sampled at); None -> 1 (no oversampling)."""
    if text is None:
        return 1.0
    key, sep, val = str(text).partition("=")
    try:
        factor = float(val)
    except ValueError:
        factor = math.nan
    if key.strip() != "failures" or not sep or not math.isfinite(factor) or factor < 1:
        raise InputError(f"--oversample {text!r}: write failures=FACTOR with FACTOR >= 1 (requests with a failure "
                         "signal are sampled at rate x FACTOR)")
    return factor


def uniforms(request_ids: Sequence[str], seed: int) -> np.ndarray:
    """A uniform in [0, 1) per request id from blake2b(seed, id): the draw depends on nothing else."""
    key = f"{seed}\x1f".encode()
    out = np.empty(len(request_ids), dtype=np.float64)
    for i, rid in enumerate(request_ids):
        h = hashlib.blake2b(key + str(rid).encode("utf-8"), digest_size=8).digest()
        out[i] = (int.from_bytes(h, "big") >> 11) / float(1 << 53)
    return out


def uniforms_arrow(request_ids, seed: int) -> np.ndarray:
    """:func:`uniforms` of an Arrow string array, hashed straight from its UTF-8 data buffer: no Python str per
    id (a null id hashes as ``None``, as :func:`uniforms` hashes ``str(None)``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = request_ids.combine_chunks() if isinstance(request_ids, pa.ChunkedArray) else request_ids
    if arr.null_count:
        arr = pc.fill_null(arr, "None")
    if not pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.large_string())
    n = len(arr)
    if n == 0:
        return np.empty(0, dtype=np.float64)
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64, count=n + 1, offset=arr.offset * 8)
    data = memoryview(data_buf)
    key = f"{seed}\x1f".encode()
    blake = hashlib.blake2b
    digests = bytearray(8 * n)
    bounds = offsets.tolist()
    for i in range(n):
        digests[8 * i:8 * i + 8] = blake(key + data[bounds[i]:bounds[i + 1]], digest_size=8).digest()
    h = np.frombuffer(bytes(digests), dtype=">u8").astype(np.uint64)
    # the same float as uniforms: a 53-bit integer divided by 2**53 is exact either way
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)


@dataclass(frozen=True)
class Sample:
    """A stratified draw: per record its cell, whether it was drawn, and (for every record) the inclusion
    probability of its cell; per cell its key (day, stratum, failure), N_h and n_h."""

    cell: np.ndarray            # record -> cell index
    selected: np.ndarray        # record -> drawn
    pi: np.ndarray              # record -> n_h / N_h of its cell
    keys: list[tuple[str, str, bool]]
    population: np.ndarray      # cell -> N_h
    drawn: np.ndarray           # cell -> n_h


def draw_sample(request_ids: Sequence[str], days: Sequence[str], strata: Sequence[str | None],
                failure: Sequence[bool], rate: float, factor: float = 1.0, seed: int = 0) -> Sample:
    """The stratified sample of the module docstring: n_h = min(N_h, ceil(r_h N_h)) smallest hashes per cell."""
    n = len(request_ids)
    keys_all = [(str(d), "unstratified" if s is None else str(s), bool(f))
                for d, s, f in zip(days, strata, failure, strict=True)]
    keys = sorted(set(keys_all))
    index = {k: i for i, k in enumerate(keys)}
    cell = np.fromiter((index[k] for k in keys_all), dtype=np.int64, count=n)
    return _draw(cell, keys, uniforms(request_ids, seed), rate, factor)


def _draw(cell: np.ndarray, keys: list[tuple[str, str, bool]], u: np.ndarray, rate: float, factor: float
          ) -> Sample:
    """The draw given each record's cell (index into the sorted ``keys``) and its uniform ``u``."""
    n = len(cell)
    population = np.bincount(cell, minlength=len(keys)).astype(np.int64)
    rates = np.array([min(1.0, rate * factor) if k[2] else rate for k in keys], dtype=np.float64)
    # the small epsilon keeps 0.02 * 100 from rounding up to 3 in binary
    drawn = np.minimum(population, np.ceil(rates * population - 1e-9)).astype(np.int64)
    order = np.lexsort((u, cell))
    starts = np.concatenate([[0], np.cumsum(population)[:-1]])
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - starts[cell[order]]
    selected = rank < drawn[cell]
    pi = (drawn / np.maximum(population, 1))[cell]
    return Sample(cell, selected, pi, keys, population, drawn)


# the columns a sampled request's signals are read from (:func:`signals_of`), kept columnar for every record
_SIGNAL_COLUMNS = ("thumbs", "rephrased", "escalated", "empty_retrieval", "abandoned", "refusal", "outcome")


def read_frame(store: str | Path, date_from: date | None = None, date_to: date | None = None):
    """The sampling frame of ``store`` in the window as one Arrow table, ordered by request id as
    :func:`read_records` orders it: ``request_id`` (string), ``day`` (date), ``stratum`` and ``outcome``
    (dictionary-encoded), ``failure`` (computed in DuckDB: the request carries a failure signal, a null flag
    being none) and the signal columns. No Python object per record."""
    import pyarrow.compute as pc

    fail = " OR ".join(["coalesce(thumbs < 0, false)", *(f"coalesce({c}, false)" for c in (
        "rephrased", "escalated", "empty_retrieval"))])
    cols = ", ".join(f'"{c}"' for c in _SIGNAL_COLUMNS)
    table = _window(store, f"request_id, CAST(date AS DATE) AS day, stratum, ({fail}) AS failure, {cols}",
                    date_from, date_to)
    for name in ("day", "stratum", "outcome"):
        i = table.column_names.index(name)
        table = table.set_column(i, name, pc.dictionary_encode(table.column(name)))
    return table


def _codes(column) -> tuple[np.ndarray, list]:
    """(per-record index, dictionary values as Python objects) of a dictionary-encoded Arrow column; a null is
    its own value (None) at index ``len(values)``."""
    import pyarrow as pa

    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    where: dict = {}
    parts = []
    for ch in chunks:
        local = ch.dictionary.to_pylist() + [None]
        remap = np.array([where.setdefault(v, len(where)) for v in local], dtype=np.int64)
        idx = ch.indices.fill_null(len(local) - 1).to_numpy(zero_copy_only=False).astype(np.int64)
        parts.append(remap[idx])
    values = list(where)
    return (np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)), values


def draw_frame(frame, rate: float, factor: float = 1.0, seed: int = 0) -> tuple[Sample, np.ndarray]:
    """:func:`draw_sample` of a :func:`read_frame` table (the same draw: same cells, same hashes), computed on
    arrays: the (day, stratum, failure) cell of each record from the dictionary codes. Returns the sample and
    the per-record failure flags."""
    day_code, days = _codes(frame.column("day"))
    strat_code, strata = _codes(frame.column("stratum"))
    failure = frame.column("failure").to_numpy(zero_copy_only=False).astype(bool)
    day_names = [str(d) for d in days]
    strat_names = ["unstratified" if s is None else str(s) for s in strata]
    # a stratum named "unstratified" and a null share a cell, as in draw_sample: codes go through the names
    names = sorted(set(strat_names))
    strat_code = np.array([names.index(x) for x in strat_names], dtype=np.int64)[strat_code] if len(
        strat_code) else strat_code
    combined = (day_code * len(names) + strat_code) * 2 + failure
    present = np.flatnonzero(np.bincount(combined, minlength=2 * len(names) * max(len(days), 1)))
    found = [(day_names[c // 2 // len(names)], names[c // 2 % len(names)], bool(c % 2)) for c in present.tolist()]
    keys = sorted(found)
    index = {k: i for i, k in enumerate(keys)}
    remap = np.zeros(2 * len(names) * max(len(days), 1), dtype=np.int64)
    remap[present] = [index[k] for k in found]
    cell = remap[combined]
    return _draw(cell, keys, uniforms_arrow(frame.column("request_id"), seed), rate, factor), failure


# ---------------------------------------------------------------------------------------------- the estimate
@dataclass(frozen=True)
class Estimate:
    """One weighted rate: Hájek estimate, its linearized standard error and interval, the counts behind it
    and the plain (unweighted) mean of the same verdicts."""

    value: float
    se: float
    ci_low: float
    ci_high: float
    n_defined: int
    n_judged: int
    population: int
    covered: float
    unweighted: float

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in self.__dict__.items()}


def _z(confidence: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2))


def weighted_rate(y: np.ndarray, defined: np.ndarray, cell: np.ndarray, population: np.ndarray, *,
                  confidence: float = 0.95) -> Estimate:
    """Hájek weighted mean of the judged requests ``y`` (``defined`` marks a defined verdict) over the cells
    they fall in, with cell sizes ``population`` (indexed by cell); see the module docstring. Undefined (NaN)
    when no judged request has a defined value."""
    y = np.asarray(y, dtype=np.float64)
    defined = np.asarray(defined, dtype=bool)
    cell = np.asarray(cell, dtype=np.int64)
    population = np.asarray(population, dtype=np.float64)
    k = len(population)
    judged = np.bincount(cell, minlength=k).astype(np.float64)
    n_def = int(defined.sum())
    nan = math.nan
    if n_def == 0:
        return Estimate(nan, nan, nan, nan, 0, int(len(y)), int(population.sum()),
                        float(population[judged > 0].sum() / population.sum()) if population.sum() else nan, nan)
    w = population[cell] / judged[cell]
    yd = np.where(defined, y, 0.0)
    total_w = float((w * defined).sum())
    r = float((w * yd).sum() / total_w)
    e = np.where(defined, y - r, 0.0)
    sums = np.bincount(cell, weights=e, minlength=k)
    sq = np.bincount(cell, weights=e * e, minlength=k)
    with np.errstate(invalid="ignore", divide="ignore"):
        s2 = (sq - sums ** 2 / judged) / (judged - 1)
    own = judged >= 2
    if own.any():
        pooled = float(((sq - sums ** 2 / np.where(judged > 0, judged, 1))[own]).sum() / (judged[own] - 1).sum())
    else:
        pooled = 0.25
    lone = judged == 1
    s2 = np.where(own, s2, np.where(lone, pooled, 0.0))
    fpc = np.where(judged > 0, 1 - judged / np.where(population > 0, population, 1), 0.0)
    var = float(np.sum(np.where(judged > 0, population ** 2 * fpc * s2 / np.where(judged > 0, judged, 1), 0.0))
                / total_w ** 2)
    se = math.sqrt(max(var, 0.0))
    z = _z(confidence)
    covered = float(population[judged > 0].sum() / population.sum())
    return Estimate(r, se, max(0.0, r - z * se), min(1.0, r + z * se), n_def, int(len(y)), int(population.sum()),
                    covered, float(y[defined].mean()))


# ---------------------------------------------------------------------------------------------- the judge
def judge_key(pins: dict[str, Any]) -> str:
    """16 hex digits naming a judge's full pins (model, rubric sha, prompt sha, settings): one verdict series."""
    from ragassay.judges.config import judge_settings

    blob = json.dumps([pins.get("judge_model"), pins.get("rubric_sha"), pins.get("prompt_sha"),
                       judge_settings(pins)], ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def unpinned_reason(cfg) -> str | None:
    """Why the judge config does not pin its judge, or None. A model id that moves (an alias such as
    ``...-latest``) makes a time series of verdicts from different judges (spec §11.6)."""
    if cfg.provider == "local":
        return None
    model = cfg.model.lower()
    if "latest" in model.replace("_", "-").split("-") or model.endswith("latest"):
        return (f"model {cfg.model!r} is an alias that moves to new snapshots; name a dated model id so every "
                "verdict in the series comes from one judge")
    return None


def online_metrics(cfg) -> list[str]:
    """The judge metrics an online sample can take from this config (faithfulness, answer_relevance)."""
    return [m for m in ONLINE_METRICS if m in cfg.metrics]


def check_judge(store_obj, cfg, where: str, floor=None) -> list[str]:
    """Refuse (InputError) a judge config that is not pinned, names no online metric, or is not validated for
    each metric it would score (the record the gate uses, :func:`ragassay.judges.validate.matching_validation`,
    must meet the floor). Returns the metrics to score."""
    from ragassay.judges.validate import METRIC_KIND, METRIC_SCALE, Floor, matching_validation

    why = unpinned_reason(cfg)
    if why:
        raise InputError(f"{where}: the judge is not pinned: {why}")
    metrics = online_metrics(cfg)
    if not metrics:
        raise InputError(f"{where}: metrics {list(cfg.metrics)} has none a production record can be judged on "
                         f"({', '.join(ONLINE_METRICS)}: they need no reference answer); add one and validate it")
    floor = floor or Floor()
    pins = cfg.pins()
    problems = []
    for m in metrics:
        record, _ = matching_validation(store_obj, pins, m)
        ok, detail = floor.check(record)
        if not ok:
            problems.append(f"{m} ({METRIC_KIND[m]} judgement, {METRIC_SCALE[m]} scale): {detail}")
    if problems:
        raise InputError(f"{where}: judge {pins['judge_model']} is not validated for what it would score on "
                         "production traffic, and an unvalidated judge's rates measure nothing:\n"
                         + "\n".join(problems) + f"\nvalidate it first: `ragassay judge validate --judge {where} "
                         "--store STORE --kind support|relevance --labels LABELS.jsonl`")
    return metrics


def judge_items_of(texts: dict[str, dict[str, Any]], request_ids: Sequence[str], strata: Sequence[str | None]):
    """JudgeItems for the requests named, from their fetched texts: the packed context as one unit; a null
    outcome with an answer counts as answered."""
    from ragassay.judges.metrics import ContextUnit, JudgeItem

    out = []
    for rid, stratum in zip(request_ids, strata, strict=True):
        t = texts[rid]
        ctx = t["context"]
        outcome = t["outcome"] or ("answered" if (t["answer"] or "").strip() else None)
        out.append(JudgeItem(query_id=str(rid), trial=0, question=t["question"] or "", answer=t["answer"],
                             outcome=outcome, context=(ContextUnit("context", "production", 0, ctx),) if ctx else (),
                             stratum=stratum, trace_id=str(rid)))
    return out


ONLINE_SOURCE = "judge:online"


def _calls_run(store_obj, pins: dict) -> str:
    """The store run that owns an online judge's calls (one per judge model, reused on every rerun)."""
    from ragassay.judges.validate import calls_owner_run

    return calls_owner_run(store_obj, pins, source=ONLINE_SOURCE, label="online-judge",
                           purpose="judge-on-sample calls on production traffic")


@dataclass
class JudgeOutcome:
    judged_now: int = 0
    reused: int = 0
    skipped: int = 0
    errors: int = 0
    spend: float = 0.0
    paid_calls: int = 0
    stopped: str | None = None
    calls: dict[str, int] = field(default_factory=dict)


def judged_rows(store: str | Path, key: str) -> dict[str, dict[str, tuple[float | None, str | None]]]:
    """request_id -> metric -> (value or None, reason) of the verdicts stored under judge ``key``."""
    import pyarrow.parquet as pq

    folder = online_dir(store) / JUDGED_DIR / key
    out: dict[str, dict[str, tuple[float | None, str | None]]] = {}
    if not folder.is_dir():
        return out
    for path in sorted(folder.glob("*.parquet")):
        t = pq.read_table(path, columns=["request_id", "metric", "value", "reason"])
        for rid, m, v, why in zip(*(t.column(c).to_pylist() for c in ("request_id", "metric", "value", "reason")),
                                  strict=True):
            out.setdefault(rid, {}).setdefault(m, (v, why))
    return out


def stored_designs(store: str | Path, key: str) -> list[tuple[float, float, int]]:
    """The distinct (rate, oversampling factor, seed) designs the verdicts of judge ``key`` were sampled under."""
    import pyarrow.parquet as pq

    folder = online_dir(store) / JUDGED_DIR / key
    found: set[tuple[float, float, int]] = set()
    for path in sorted(folder.glob("*.parquet")) if folder.is_dir() else []:
        t = pq.read_table(path, columns=["rate", "factor", "seed"])
        found.update(zip(*(t.column(c).to_pylist() for c in ("rate", "factor", "seed")), strict=True))
    return sorted(found)


def _write_verdicts(store: str | Path, key: str, rows: dict[str, list]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows["request_id"]:
        return
    schema = pa.schema([("request_id", pa.string()), ("judge_key", pa.string()), ("judge_model", pa.string()),
                        ("metric", pa.string()), ("value", pa.float64()), ("reason", pa.string()),
                        ("day", pa.string()), ("stratum", pa.string()), ("failure", pa.bool_()),
                        ("signals", pa.list_(pa.string())), ("pi", pa.float64()), ("weight", pa.float64()),
                        ("rate", pa.float64()), ("factor", pa.float64()), ("seed", pa.int64()),
                        ("judged_at", pa.timestamp("us", tz="UTC"))])
    buf = io.BytesIO()
    pq.write_table(pa.table(rows, schema=schema), buf)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    fsio.atomic_write_bytes(online_dir(store) / JUDGED_DIR / key / f"part-{stamp}-{secrets.token_hex(4)}.parquet",
                            buf.getvalue())


def _judge_chunk(cfg, judge, items, run_id: str, budget: float | None):
    """JudgedMetrics of ``items`` (LLM: through ``judge`` under the remaining ``budget``), a cascade routed as
    ``ragassay judge`` routes it. The config's own metric list is asked for, so every call carries the
    config's rubric and prompt pins; metrics a production record cannot feed (correctness, nuggets) come back
    undefined without a call."""
    from ragassay.judges.config import build_tier1

    tier1 = build_tier1(cfg)
    if cfg.provider == "local":
        if tier1 is not None:
            from ragassay.judges.routing import route_local

            return route_local(run_id, items, tier1, judge, lo=cfg.cascade.band.lo, hi=cfg.cascade.band.hi,
                               numeric=False)[0]
        from ragassay.judges.local import local_judge_items

        return local_judge_items(items, judge, numeric=False)
    if budget is not None:
        judge.spend_cap = max(budget, 0.0)
    if tier1 is not None:
        from ragassay.judges.routing import route_llm

        return route_llm(judge, run_id, items, tier1, tier2=cfg.pins()["judge_model"], lo=cfg.cascade.band.lo,
                         hi=cfg.cascade.band.hi, metrics=cfg.metrics, criteria=cfg.rubric_criteria())[0]
    from ragassay.judges.metrics import judge_items

    return judge_items(judge, run_id, items, metrics=cfg.metrics, criteria=cfg.rubric_criteria())


def run_online_judge(store: str | Path, cfg, judge_path: str, *, rate: float, factor: float = 1.0, seed: int = 0,
                     date_from: date | None = None, date_to: date | None = None, max_spend: float | None = None,
                     confidence: float = 0.95, progress: Callable[[int, int], None] | None = None
                     ) -> dict[str, Any]:
    """Sample, judge what is not judged yet, store the verdicts and return the quality table (the ``--json``
    document of ``ragassay online judge``). The store is opened for writing only for an LLM judge, whose calls
    it caches."""
    from ragassay.judges.config import build_judge
    from ragassay.store import Store

    store = Path(store)
    if not store.is_file():
        raise InputError(f"{store}: no such store; the judge's validation records live there (pass --store)")
    if max_spend is not None and (not math.isfinite(max_spend) or max_spend < 0):
        raise InputError(f"--max-spend {max_spend}: give a number of USD >= 0")
    pins = cfg.pins()
    key = judge_key(pins)
    llm = cfg.provider != "local"
    with Store.open(store, read_only=not llm) as st:
        metrics = check_judge(st, cfg, judge_path)  # refused before any record is read
        frame = read_frame(store, date_from, date_to)
        n = frame.num_rows
        if n == 0:
            raise InputError(f"{online_dir(store) / 'records'}: no production records between "
                             f"{date_from or 'the first'} and {date_to or 'the last'} day; widen --from/--to")
        full, failure = draw_frame(frame, rate, factor, seed)
        chosen = np.flatnonzero(full.selected)
        # Python objects only for the sampled requests: from here on a record index k counts the sampled ones
        picked = frame.select(["request_id", "stratum", *_SIGNAL_COLUMNS]).take(chosen)
        del frame
        rec = {name: picked.column(name).to_pylist() for name in picked.column_names}
        sample = Sample(full.cell[chosen], np.ones(len(chosen), dtype=bool), full.pi[chosen], full.keys,
                        full.population, full.drawn)
        sigs = [signals_of(rec, k) for k in range(len(chosen))]
        done = judged_rows(store, key)
        todo = [k for k in range(len(chosen)) if rec["request_id"][k] not in done
                or any(m not in done[rec["request_id"][k]] for m in metrics)]
        # judge in hash order: a spend cap that stops early leaves a random part of each cell unjudged
        u = uniforms([rec["request_id"][k] for k in todo], seed)
        todo = [todo[i] for i in np.argsort(u, kind="stable")]
        outcome = JudgeOutcome(reused=len(chosen) - len(todo))
        cap = max_spend
        if llm and cfg.spend_cap is not None:
            cap = cfg.spend_cap if cap is None else min(cap, cfg.spend_cap)
        judge = build_judge(cfg, st if llm else None)
        run_id = _calls_run(st, pins) if llm else "online"
        calls: dict[str, int] = {}
        texts: dict[str, dict[str, Any]] = {}
        if progress is not None:
            progress(0, len(todo))
        chunk = 2 * cfg.concurrency if llm else LOCAL_CHUNK
        for at in range(0, len(todo), chunk):
            rows = todo[at:at + chunk]
            if outcome.stopped is not None:
                outcome.skipped += len(rows)
                continue
            budget = None if cap is None else cap - outcome.spend
            ids = [rec["request_id"][k] for k in rows]
            if any(i not in texts for i in ids):
                texts = fetch_texts(store, [rec["request_id"][k] for k in todo[at:at + max(chunk, FETCH_BATCH)]])
            items = judge_items_of(texts, ids, [rec["stratum"][k] for k in rows])
            got = _judge_chunk(cfg, judge, items, run_id, budget)
            outcome.spend += got.spend
            outcome.paid_calls += sum(1 for j in got.judgements if not j.record.cache_hit
                                      and j.record.outcome != "error")
            for name, c in got.calls.items():
                calls[name] = calls.get(name, 0) + c
            if got.stopped is not None:
                outcome.stopped = got.stopped
            _store_chunk(store, key, pins, rec, rows, items, got, metrics, sample, sigs, (rate, factor, seed), outcome,
                         done)
            if progress is not None:
                progress(min(at + chunk, len(todo)), len(todo))
        outcome.calls = dict(sorted(calls.items()))
    table = quality_table(rec, sample, done, metrics, confidence)
    return {
        "kind": "online-judge", "store": str(store), "judge": {**{k: pins.get(k) for k in (
            "judge_model", "rubric_sha", "prompt_sha", "settings")}, "key": key, "config": judge_path},
        "metrics": metrics,
        "design": {"rate": rate, "oversample_failures": factor, "seed": seed, "failure_signals": list(FAILURE_SIGNALS),
                   "from": None if date_from is None else date_from.isoformat(),
                   "to": None if date_to is None else date_to.isoformat(),
                   "estimator": "hajek", "interval": "linearized (stratified, without replacement)",
                   "confidence": confidence},
        "counts": {"records": n, "cells": len(sample.keys), "sampled": int(full.selected.sum()),
                   "sampled_failures": int((full.selected & failure).sum()),
                   "judged_now": outcome.judged_now, "already_judged": outcome.reused, "skipped": outcome.skipped,
                   "errors": outcome.errors},
        "spend": {"usd": outcome.spend, "cap": cap, "paid_calls": outcome.paid_calls, "stopped": outcome.stopped,
                  "calls": outcome.calls},
        "cells": [{"day": d, "stratum": s, "failure": f, "population": int(sample.population[i]),
                   "sampled": int(sample.drawn[i]),
                   "pi": float(sample.drawn[i] / sample.population[i]) if sample.population[i] else None}
                  for i, (d, s, f) in enumerate(sample.keys)],
        "quality": table,
    }


def _settle(item, values: dict[str, float], judgements: list, metrics: Sequence[str], stopped: bool
            ) -> dict[str, tuple[float, str | None]] | None:
    """metric -> (value, why undefined) of one judged item, or None when a later run must judge it again: a call
    ended in ``error`` (not billed, so retried), or the spend cap stopped the run before the item's calls were
    all made (its paid calls come back from the store's cache)."""
    if any(j.outcome == "error" for j in judgements):
        return None
    nan = math.nan
    got = {m: values.get(m, nan) for m in metrics}
    if not item.answered:
        why = "not_answered" if item.outcome != "error" else "generation_error"
        return {m: (nan, why) for m in metrics}
    if stopped and any(math.isnan(v) for v in got.values()):
        return None
    bad = next((j.outcome for j in judgements if j.outcome != "ok"), None)
    why = f"judge_{bad}" if bad else None
    return {m: (v, None if not math.isnan(v) else (why or ("no_claims" if m == "faithfulness" else "undefined")))
            for m, v in got.items()}


def _store_chunk(store, key, pins, rec, rows, items, got, metrics, sample, sigs, design, outcome, done) -> None:
    """Write the settled verdicts of one chunk; count the requests left for a later run."""
    rate, factor, seed = design
    cols = got.columns
    values: dict[str, dict[str, float]] = {}
    for qid, m, v in zip(cols["query_id"], cols["metric"], cols["value"], strict=True):
        values.setdefault(qid, {})[m] = v
    calls: dict[str, list] = {}
    for j in got.judgements:
        calls.setdefault(j.record.query_id, []).append(j)
    out: dict[str, list] = {c: [] for c in ("request_id", "judge_key", "judge_model", "metric", "value", "reason",
                                            "day", "stratum", "failure", "signals", "pi", "weight", "rate", "factor",
                                            "seed", "judged_at")}
    now = datetime.now(UTC)
    for k, item in zip(rows, items, strict=True):
        rid = item.query_id
        settled = _settle(item, values.get(rid, {}), calls.get(rid, []), metrics, got.stopped is not None)
        if settled is None:
            if any(j.outcome == "error" for j in calls.get(rid, [])):
                outcome.errors += 1
            else:
                outcome.skipped += 1
            continue
        outcome.judged_now += 1
        day, stratum, fail = sample.keys[sample.cell[k]]
        for m in metrics:
            v, why = settled[m]
            for name, val in (("request_id", rid), ("judge_key", key), ("judge_model", pins["judge_model"]),
                              ("metric", m), ("value", None if math.isnan(v) else float(v)), ("reason", why),
                              ("day", day), ("stratum", stratum), ("failure", fail), ("signals", sigs[k]),
                              ("pi", float(sample.pi[k])), ("weight", float(1 / sample.pi[k])), ("rate", rate),
                              ("factor", factor), ("seed", seed), ("judged_at", now)):
                out[name].append(val)
            done.setdefault(rid, {})[m] = (None if math.isnan(v) else float(v), why)
    _write_verdicts(store, key, out)


def quality_table(rec: dict[str, list], sample: Sample, done, metrics: Sequence[str], confidence: float = 0.95
                  ) -> list[dict[str, Any]]:
    """Per metric: one row per (day, stratum), per day over strata, and overall, each with the weighted
    estimate and the unweighted mean of the same verdicts."""
    ids = rec["request_id"]
    chosen = np.flatnonzero(sample.selected)
    out = []
    for m in metrics:
        judged = [k for k in chosen if ids[k] in done and m in done[ids[k]]]
        vals = np.array([done[ids[k]][m][0] if done[ids[k]][m][0] is not None else np.nan for k in judged],
                        dtype=np.float64)
        cells = sample.cell[judged] if judged else np.zeros(0, dtype=np.int64)
        groups: dict[tuple[str, str], list[int]] = {}
        for i, (d, s, _) in enumerate(sample.keys):
            groups.setdefault((d, s), []).append(i)
            groups.setdefault((d, "all"), []).append(i)
            groups.setdefault(("all", "all"), []).append(i)
        for (d, s), members in sorted(groups.items(), key=lambda kv: (kv[0][0] == "all", kv[0][0], kv[0][1] == "all",
                                                                       kv[0][1])):
            remap = np.full(len(sample.keys), -1, dtype=np.int64)
            remap[members] = np.arange(len(members))
            inside = remap[cells] >= 0 if len(cells) else np.zeros(0, dtype=bool)
            est = weighted_rate(vals[inside], ~np.isnan(vals[inside]), remap[cells[inside]],
                                sample.population[members], confidence=confidence)
            sampled = int(sample.drawn[members].sum())
            out.append({"metric": m, "day": d, "stratum": s, **est.to_dict(), "n_sampled": sampled})
    return out


__all__ = ["FAILURE_SIGNALS", "ONLINE_METRICS", "SIGNALS", "Estimate", "Sample", "check_judge", "date_window",
           "draw_frame", "draw_sample", "fetch_texts", "judge_key", "judged_rows", "parse_oversample", "stored_designs", "parse_rate", "quality_table",
           "read_frame", "read_records", "run_online_judge", "signals_of", "uniforms", "uniforms_arrow", "unpinned_reason", "weighted_rate"]
