"""A month of synthetic production traffic as the JSONL that ``ragassay online ingest`` reads.

The traffic has the shape the signals are meant to catch, with its ground truth known:

- sessions of one or more requests across four strata (billing, account, technical, shipping), spread over
  ``days`` UTC days, busier in working hours;
- a hidden success/failure per request (failure more likely in the ``technical`` stratum and under the first
  release); a failed answer is followed, often within 5-50 s, by a rephrase of the same question (other
  wording of the same topic), or by an escalation or an abandoned session;
- unrelated follow-up questions, some of them inside the 60 s window (what the rephrase rule must not count);
- thumbs given mostly after failures (rated 30% of failures, 80% of them down; 5% of successes, 90% up);
- two releases: the second from two thirds of the way through the month, with fewer failures;
- an incident: on ``incident_day`` from 10:00 to 16:00 UTC, 40% of requests retrieve nothing (the base rate
  is 0.3%), and an empty retrieval makes the answer an abstention.

Deterministic for a given seed. Request ids are ``sim-<n>``.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from ragassay.errors import InputError
from ragassay.fsio import check_output_file

STRATA = ("billing", "account", "technical", "shipping")
# Per stratum: topics, each a list of wordings of one question (the first is the usual one; the others are
# what a user types when the first answer missed).
TOPICS: dict[str, list[list[str]]] = {
    "billing": [
        ["How do I update the credit card on my account?", "update credit card details on my account",
         "change my credit card for billing"],
        ["Why was I charged twice this month?", "charged twice this month why", "double charge on my bill this month"],
        ["Where can I download my invoices?", "download invoices where", "how to get a copy of my invoices"],
        ["Can I get a refund for an annual plan?", "refund annual plan possible", "annual plan refund policy"],
    ],
    "account": [
        ["How do I reset my password?", "password reset not working", "reset password link never arrives"],
        ["How can I enable two-factor authentication?", "turn on two-factor authentication",
         "two factor authentication setup steps"],
        ["How do I delete my account permanently?", "permanently delete account", "close and delete my account"],
        ["Can I change the email address I log in with?", "change login email address",
         "update the email I use to log in"],
    ],
    "technical": [
        ["The app crashes when I upload a photo", "app crash on photo upload", "photo upload makes the app crash"],
        ["Sync between my phone and laptop stopped working", "phone laptop sync not working",
         "sync stopped between laptop and phone"],
        ["What does error code E42 mean?", "error E42 meaning", "what is error code E42"],
        ["How do I export my data to CSV?", "export data CSV", "export all my data as a CSV file"],
    ],
    "shipping": [
        ["Where is my order?", "track my order", "order tracking status where is it"],
        ["Do you ship to Canada?", "shipping to Canada available", "can you deliver to Canada"],
        ["How long does express delivery take?", "express delivery time", "how many days for express delivery"],
        ["How do I return a damaged item?", "return damaged item", "damaged item return process"],
    ],
}
STRATUM_SHARE = (0.3, 0.25, 0.25, 0.2)
FAIL_RATE = {"billing": 0.12, "account": 0.10, "technical": 0.25, "shipping": 0.08}
RELEASES = ("2026.03-a", "2026.03-b")
SECOND_RELEASE_FAILURE = 0.7  # the second release fails 70% as often
BASE_EMPTY = 0.003
INCIDENT_EMPTY = 0.40
INCIDENT_HOURS = (10, 16)
REFUSE_RATE = 0.03
# after a failure: rephrase, else escalate, else abandon (the session ends), else move on
P_REPHRASE, P_ESCALATE, P_ABANDON = 0.45, 0.12, 0.35
P_FOLLOW_UP = 0.35  # after a success: another question of the session


@dataclass
class SimSummary:
    """What was written and its ground truth: counts, and the ids of the requests whose next request is a
    rephrase (``truth_rephrased``, filled only when asked)."""

    out: str
    records: int
    sessions: int
    days: int
    start: str
    incident_day: str
    release_switch_day: str
    seed: int
    true_rephrases: int = 0
    quick_unrelated_follow_ups: int = 0
    failures: int = 0
    thumbs_down: int = 0
    escalations: int = 0
    empty_retrievals: int = 0
    truth_rephrased: set[str] = field(default_factory=set, repr=False)

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "truth_rephrased"}


def _own_output(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            first = orjson.loads(fh.readline())
    except (OSError, orjson.JSONDecodeError):
        return False
    return isinstance(first, dict) and str(first.get("request_id", "")).startswith("sim-")


def simulate(out: str | Path, records: int = 100_000, days: int = 30, seed: int = 0, start: str = "2026-03-01",
             incident_day: int | None = None, keep_truth: bool = False) -> SimSummary:
    """Write ``records`` simulated requests over ``days`` days from ``start`` to ``out`` (JSONL), atomically
    (a temporary file renamed at the end). ``out`` may be new or an earlier output of this function.
    ``incident_day``: 0-based day of the empty-retrieval incident (default: ``days // 2``)."""
    if records < 1 or days < 1:
        raise InputError(f"--records {records} / --days {days}: give whole numbers >= 1")
    try:
        day0 = dt.datetime.fromisoformat(start).replace(tzinfo=dt.UTC)
    except ValueError:
        raise InputError(f"--start {start!r}: give a day as YYYY-MM-DD") from None
    incident = days // 2 if incident_day is None else incident_day
    if not 0 <= incident < days:
        raise InputError(f"incident day {incident}: give a day in 0..{days - 1}")
    out = Path(out)
    check_output_file(out, "simulated traffic", overwrite_ok=_own_output)
    switch = (2 * days) // 3
    rng = np.random.default_rng(seed)
    summary = SimSummary(str(out), 0, 0, days, day0.date().isoformat(),
                         (day0 + dt.timedelta(days=incident)).date().isoformat(),
                         (day0 + dt.timedelta(days=switch)).date().isoformat(), seed)
    per_day = np.full(days, records // days)
    per_day[: records % days] += 1
    tmp = out.parent / f".{out.name}.{secrets.token_hex(6)}.tmp"
    try:
        with open(tmp, "wb") as fh:
            buf: list[bytes] = []
            for d in range(days):
                for rec in _day(rng, d, int(per_day[d]), day0, d == incident, d >= switch, summary):
                    buf.append(orjson.dumps(rec))
                    if len(buf) >= 8192:
                        fh.write(b"\n".join(buf) + b"\n")
                        buf = []
            if buf:
                fh.write(b"\n".join(buf) + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if not keep_truth:
        summary.truth_rephrased = set()
    return summary


def _session_starts(rng: np.random.Generator, n: int) -> np.ndarray:
    """n seconds into a day, busier 08:00-20:00 (three quarters of the traffic), in random order (the file is
    not sorted by time; the ingest does not need it to be)."""
    busy = rng.random(n) < 0.75
    return np.where(busy, rng.uniform(8 * 3600, 20 * 3600, n), rng.uniform(0, 86400 - 1, n))


def _day(rng, d: int, quota: int, day0: dt.datetime, incident: bool, second: bool, s: SimSummary):
    base = day0 + dt.timedelta(days=d)
    release = RELEASES[1 if second else 0]
    written = 0
    starts = _session_starts(rng, max(1, quota))  # at most one session per record
    for t0 in starts:
        if written >= quota:
            break
        s.sessions += 1
        sid = f"sess-{s.sessions}"
        stratum = STRATA[int(rng.choice(len(STRATA), p=STRATUM_SHARE))]
        topic = int(rng.integers(len(TOPICS[stratum])))
        wording = 0
        t = float(t0)
        while written < quota and t < 86400:
            ts = base + dt.timedelta(seconds=t)
            hour = t / 3600
            p_empty = INCIDENT_EMPTY if incident and INCIDENT_HOURS[0] <= hour < INCIDENT_HOURS[1] else BASE_EMPTY
            empty = rng.random() < p_empty
            n_ret = 0 if empty else int(rng.integers(3, 9))
            fail_p = FAIL_RATE[stratum] * (SECOND_RELEASE_FAILURE if second else 1.0)
            failed = empty or rng.random() < fail_p
            refused = not empty and rng.random() < REFUSE_RATE
            outcome = "abstained" if empty else "refused" if refused else "answered"
            failed = failed or refused
            question = TOPICS[stratum][topic][wording]
            rid = f"sim-{s.records + 1}"
            rec = {"request_id": rid, "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                   "session_id": sid, "release": release, "stratum": stratum, "question": question,
                   "answer": None if outcome != "answered" else f"Answer to: {question}",
                   "outcome": outcome, "n_retrieved": n_ret,
                   "context": None if empty else f"[{stratum} knowledge base, topic {topic}]",
                   "unit_ids": [f"kb-{stratum}-{topic}#{i}" for i in range(n_ret)],
                   "latency_ms": round(float(rng.lognormal(7.0, 0.4)), 1),
                   "thumbs": None, "escalated": False, "abandoned": False, "copied": False}
            s.failures += failed
            s.empty_retrievals += empty
            if failed and rng.random() < 0.30:
                rec["thumbs"] = -1 if rng.random() < 0.8 else 1
            elif not failed and rng.random() < 0.05:
                rec["thumbs"] = 1 if rng.random() < 0.9 else -1
            rec["copied"] = bool(not failed and rng.random() < 0.2)
            s.thumbs_down += rec["thumbs"] == -1
            s.records += 1
            written += 1
            # what the user does next
            if failed:
                u = rng.random()
                if u < P_REPHRASE and wording + 1 < len(TOPICS[stratum][topic]):
                    wording += 1
                    t += float(rng.uniform(5, 50))
                    s.true_rephrases += 1
                    s.truth_rephrased.add(rid)
                    yield rec
                    continue
                if u < P_REPHRASE + P_ESCALATE:
                    rec["escalated"] = True
                    s.escalations += 1
                    yield rec
                    break
                if u < P_REPHRASE + P_ESCALATE + P_ABANDON:
                    rec["abandoned"] = True
                    yield rec
                    break
            if rng.random() >= P_FOLLOW_UP:
                yield rec
                break
            # an unrelated question next: a quarter of them inside the 60 s window
            others = [(k, i) for k in STRATA for i in range(len(TOPICS[k])) if (k, i) != (stratum, topic)]
            stratum, topic = others[int(rng.integers(len(others)))]
            wording = 0
            gap = float(rng.uniform(10, 55)) if rng.random() < 0.25 else float(rng.uniform(61, 900))
            s.quick_unrelated_follow_ups += gap < 60
            t += gap
            yield rec
