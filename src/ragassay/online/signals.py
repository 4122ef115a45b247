"""Daily production signal rates with Wilson intervals, and alarms on the deterministic ones.

For each UTC day (and, with ``by``, each stratum or release) and each signal, ``k`` of ``n`` requests, the
rate ``k / n`` and its Wilson score interval (:func:`ragassay.stats.proportions.wilson_interval`). The
denominator of each signal is the requests where the signal is known (not null):

==================  ======================================  =====================================
signal              k (numerator)                           n (denominator)
==================  ======================================  =====================================
thumbs_down         ``thumbs = -1``                         rated requests (``thumbs`` not null)
rephrased           ``rephrased``                           requests with a session
escalated           ``escalated``                           ``escalated`` not null
abandoned           ``abandoned``                           ``abandoned`` not null
empty_retrieval     ``n_retrieved = 0``                     ``n_retrieved`` not null
refusal             ``outcome`` in refused, abstained       ``outcome`` not null
==================  ======================================  =====================================

With ``n = 0`` the rate and its interval are undefined (NaN, reported as undefined with n = 0), never 0.
Alarms watch only the deterministic signals (empty retrieval, refusal): one fires for a day (and group) whose
rate is above the threshold. Thumbs, rephrases, escalations and abandonment are noisy or biased proxies, so
they are shown, never alarmed on.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from pathlib import Path

from ragassay.errors import InputError
from ragassay.online.store import open_records, record_files, records_dir

# signal -> (numerator SQL, denominator SQL: the column that must be known)
SIGNALS: dict[str, tuple[str, str]] = {
    "thumbs_down": ("thumbs = -1", "thumbs"),
    # named as the record's own flags, the names online gap, judge and promote take
    "rephrased": ("rephrased", "rephrased"),
    "escalated": ("escalated", "escalated"),
    "abandoned": ("abandoned", "abandoned"),
    "empty_retrieval": ("empty_retrieval", "empty_retrieval"),
    "refusal": ("refusal", "refusal"),
}
ALARMABLE = ("empty_retrieval", "refusal")
DEFAULT_ALARMS = {"empty_retrieval": 0.01}
BY = ("stratum", "release")


def parse_alarms(spec: str | None) -> dict[str, float]:
    """``"empty_retrieval=0.01,refusal=0.2"`` -> {signal: threshold}; None gives :data:`DEFAULT_ALARMS`, an empty
    string no alarm. Only :data:`ALARMABLE` signals, thresholds in [0, 1]."""
    if spec is None:
        return dict(DEFAULT_ALARMS)
    out: dict[str, float] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, eq, value = part.partition("=")
        name = name.strip()
        if not eq:
            raise InputError(f"--alarm {part!r}: write SIGNAL=THRESHOLD, e.g. empty_retrieval=0.01")
        if name not in ALARMABLE:
            why = ("noisy or biased, so it is shown but not alarmed on" if name in SIGNALS else "not a signal")
            raise InputError(f"--alarm {name!r}: {why}; alarms watch {', '.join(ALARMABLE)}")
        try:
            t = float(value)
        except ValueError:
            t = float("nan")
        if not 0 <= t <= 1:
            raise InputError(f"--alarm {name}={value}: the threshold is a rate in [0, 1], e.g. 0.01 for 1%")
        out[name] = t
    return out


def _date(value: str | dt.date | None, flag: str) -> dt.date | None:
    if value is None or isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise InputError(f"{flag} {value!r}: give a day as YYYY-MM-DD") from None


@dataclass(frozen=True)
class Rate:
    """k of n with the rate and its Wilson interval; NaN rate and bounds when n = 0."""

    k: int
    n: int
    rate: float
    lo: float
    hi: float

    @classmethod
    def of(cls, k: int, n: int, confidence: float = 0.95) -> Rate:
        if n == 0:
            return cls(0, 0, math.nan, math.nan, math.nan)
        from ragassay.stats.proportions import wilson_interval

        lo, hi = wilson_interval(k, n, confidence)
        return cls(int(k), int(n), k / n, lo, hi)

    def to_dict(self) -> dict:
        return {"k": self.k, "n": self.n, "rate": self.rate, "lo": self.lo, "hi": self.hi}


@dataclass(frozen=True)
class Row:
    """One day (or the whole range, ``date`` None) of one group (None without ``by``, or a null value)."""

    date: str | None
    group: str | None
    requests: int
    rates: dict[str, Rate]
    alarms: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"date": self.date, "group": self.group, "requests": self.requests,
                "signals": {k: v.to_dict() for k, v in self.rates.items()}, "alarms": list(self.alarms)}


@dataclass
class SignalsReport:
    by: str | None
    date_from: str
    date_to: str
    confidence: float
    thresholds: dict[str, float]
    days: list[Row] = field(default_factory=list)
    totals: list[Row] = field(default_factory=list)

    @property
    def fired(self) -> list[dict]:
        return [{"date": r.date, "group": r.group, "signal": s, "rate": r.rates[s].rate,
                 "threshold": self.thresholds[s], "k": r.rates[s].k, "n": r.rates[s].n}
                for r in self.days for s in r.alarms]

    def to_dict(self) -> dict:
        return {"by": self.by, "from": self.date_from, "to": self.date_to, "confidence": self.confidence,
                "alarm_thresholds": self.thresholds, "alarms": self.fired,
                "days": [r.to_dict() for r in self.days], "totals": [r.to_dict() for r in self.totals]}


def signals(store: str | Path, *, by: str | None = None, date_from: str | dt.date | None = None,
            date_to: str | dt.date | None = None, alarms: dict[str, float] | None = None,
            confidence: float = 0.95) -> SignalsReport:
    """Per-day (and per-``by`` group) signal rates over the store's records from ``date_from`` to ``date_to``
    (inclusive, UTC days; default: every stored day), plus one total row per group over the range.
    ``alarms``: {signal: threshold} (:func:`parse_alarms`; None gives the default)."""
    import duckdb

    if by is not None and by not in BY:
        raise InputError(f"--by {by!r}: use one of {', '.join(BY)}")
    lo, hi = _date(date_from, "--from"), _date(date_to, "--to")
    if lo is not None and hi is not None and lo > hi:
        raise InputError(f"--from {lo} is after --to {hi}; give the earlier day first")
    thresholds = dict(DEFAULT_ALARMS) if alarms is None else dict(alarms)
    bad = [f"{k}={v}" for k, v in thresholds.items() if k not in ALARMABLE or not 0 <= v <= 1]
    if bad:
        raise InputError(f"alarm(s) {', '.join(bad)}: alarms watch {', '.join(ALARMABLE)} with a threshold in [0, 1]")
    if not record_files(store):
        raise InputError(f"{records_dir(store)}: no production records; run `ragassay online ingest FILE --store "
                         f"{store}` first")
    con = duckdb.connect()
    try:
        view = open_records(con, store)
        where, params = [], []
        if lo is not None:
            where.append("date >= ?")
            params.append(lo)
        if hi is not None:
            where.append("date <= ?")
            params.append(hi)
        cond = f"WHERE {' AND '.join(where)}" if where else ""
        group = by if by is not None else "NULL::VARCHAR"
        aggs = ", ".join(f"count(*) FILTER (WHERE {num}), count({den})" for num, den in SIGNALS.values())
        day_rows = con.execute(f"SELECT date, {group} AS g, count(*), {aggs} FROM {view} {cond} "
                               "GROUP BY ALL ORDER BY date, g NULLS LAST", params).fetchall()
        total_rows = con.execute(f"SELECT min(date), max(date), {group} AS g, count(*), {aggs} FROM {view} {cond} "
                                 "GROUP BY ALL ORDER BY g NULLS LAST", params).fetchall()
        if not day_rows:
            span = con.execute(f"SELECT min(date), max(date) FROM {view}").fetchall()[0]
            raise InputError(f"no records from {lo or span[0]} to {hi or span[1]}; the store holds days "
                             f"{span[0]} to {span[1]}")
    finally:
        con.close()
    first = min(r[0] for r in day_rows)
    last = max(r[0] for r in day_rows)
    rep = SignalsReport(by, (lo or first).isoformat(), (hi or last).isoformat(), confidence, thresholds)

    def rates(counts: tuple) -> dict[str, Rate]:
        return {name: Rate.of(int(counts[2 * i]), int(counts[2 * i + 1]), confidence)
                for i, name in enumerate(SIGNALS)}

    for day, g, n, *counts in day_rows:
        rs = rates(tuple(counts))
        fired = tuple(s for s, t in thresholds.items() if rs[s].n and rs[s].rate > t)
        rep.days.append(Row(day.isoformat(), g, int(n), rs, fired))
    for _, _, g, n, *counts in total_rows:
        rep.totals.append(Row(None, g, int(n), rates(tuple(counts))))
    return rep
