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
  is 0.3%), and an empty retrieval makes the answer an abstention;
- texts a judge can judge: a small invented knowledge base (:data:`KB`, eight one-sentence units per topic,
  filled in from templates with fixed figures); a request that retrieves ``n`` units of topic ``t`` carries
  ``unit_ids`` ``kb-<stratum>-<t>#0..n-1`` and, as ``context``, the text of those units joined by blank lines
  (an empty retrieval: an empty context). A successful answer is one or two of the retrieved sentences,
  verbatim (supported); a failed answer is a sentence the context does not support: a wrong figure about the
  topic or another topic's fact (:func:`unsupported_answers`).

Deterministic for a given seed. Request ids are ``sim-<n>``. The texts are drawn from a random stream of
their own, so every other field is what it would be without them.
"""

from __future__ import annotations

import datetime as dt
import os
import re
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


# ---------------------------------------------------------------------------------------------- knowledge base
# Per stratum, per topic (in TOPICS order): (subject, plural noun, the user's action, where it is done, team,
# unit of time). The templates below turn each into eight one-sentence units.
_TOPIC_FACTS: dict[str, list[tuple[str, str, str, str, str]]] = {
    "billing": [
        ("card updates", "update the card on file", "Billing > Payment methods", "payments", "minutes"),
        ("duplicate charge disputes", "dispute a duplicate charge", "Billing > Charges", "billing", "days"),
        ("invoice downloads", "download an invoice", "Billing > Invoices", "finance", "seconds"),
        ("annual plan refunds", "ask for an annual plan refund", "Billing > Plan", "refunds", "days"),
    ],
    "account": [
        ("password resets", "reset a password", "the sign-in page", "identity", "minutes"),
        ("two-factor setups", "turn on two-factor authentication", "Settings > Security", "security", "minutes"),
        ("account deletions", "delete an account", "Settings > Privacy", "privacy", "days"),
        ("login email changes", "change the login email", "Settings > Profile", "identity", "hours"),
    ],
    "technical": [
        ("photo uploads", "upload a photo", "the gallery screen", "mobile", "seconds"),
        ("device syncs", "sync a phone with a laptop", "Settings > Devices", "sync", "minutes"),
        ("error code lookups", "look up an error code such as E42", "the status page", "platform", "seconds"),
        ("CSV exports", "export data as CSV", "Settings > Data", "data", "minutes"),
    ],
    "shipping": [
        ("tracking updates", "track an order", "Orders > Tracking", "logistics", "hours"),
        ("Canadian deliveries", "ship an order to Canada", "Checkout > Destination", "customs", "days"),
        ("express deliveries", "choose express delivery", "Checkout > Delivery", "courier", "days"),
        ("damaged item returns", "return a damaged item", "Orders > Returns", "returns", "days"),
    ],
}
_UNITS_PER_TOPIC = 8  # the most a request retrieves
_PLANS = ("Basic", "Plus", "Pro", "Team")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_KB_SEED = 20260301  # the knowledge base is the same for every --seed
_WORD = re.compile(r"(?u)\w+")
_FUNCTION_WORDS = frozenset("a an and are as at be by for from has have in is it its of on or that the this to "
                            "was were which with not no".split())
MAX_SHARED = 0.5  # a failed answer shares at most this share of its words with any sentence of its context


def _kb_units(rng: np.random.Generator, noun: str, action: str, where: str, team: str, unit: str
              ) -> tuple[list[str], list[str]]:
    """The eight unit texts of a topic, and the wrong-figure claims about it (each figure of a unit, changed)."""
    n, h, k = int(rng.integers(2, 10)), int(rng.integers(2, 49)), int(rng.integers(2, 10))
    major, minor, day = int(rng.integers(2, 9)), int(rng.integers(0, 10)), int(rng.integers(1, 29))
    plan, month = _PLANS[int(rng.integers(len(_PLANS)))], _MONTHS[int(rng.integers(12))]
    cap = noun[0].upper() + noun[1:]
    units = [f"To {action}, open {where} and follow the steps on that page.",
             f"{cap} normally take {n} {unit} to complete.",
             f"Customers on the {plan} plan can {action} without contacting support.",
             f"When {noun} fail, the {team} team replies within {h} hours.",
             f"{cap} are limited to {k} per account each day.",
             f"A confirmation email goes to the account owner for all {noun}.",
             f"{cap} have been available in the mobile app since version {major}.{minor}.",
             f"The help article on {noun} was last revised on {month} {day}."]

    def other(x: int, lo: int, hi: int) -> int:
        return lo + (x - lo + int(rng.integers(1, hi - lo))) % (hi - lo)

    wrong = [f"Expect {noun} to need {other(n, 2, 10) * 3} {unit} or more.",
             f"The {team} team usually needs {other(h, 2, 49) + 48} hours to reply.",
             f"You may do up to {other(k, 2, 10) * 5} of those daily.",
             f"That only works in version {other(major, 2, 9) + 10} or later."]
    return units, wrong


def _words(text: str) -> set[str]:
    return {w for w in (m.group().lower() for m in _WORD.finditer(text)) if w not in _FUNCTION_WORDS}


def _unsupported(claim: str, sentences: list[set[str]]) -> bool:
    words = _words(claim)
    return bool(words) and all(len(words & s) <= MAX_SHARED * len(words) for s in sentences)


def _build_kb() -> tuple[dict[tuple[str, int], list[str]], dict[tuple[str, int], tuple[list[str], list[str]]]]:
    rng = np.random.default_rng(_KB_SEED)
    units: dict[tuple[str, int], list[str]] = {}
    wrong: dict[tuple[str, int], list[str]] = {}
    for stratum in STRATA:
        for t, facts in enumerate(_TOPIC_FACTS[stratum]):
            units[stratum, t], wrong[stratum, t] = _kb_units(rng, *facts)
    bad: dict[tuple[str, int], tuple[list[str], list[str]]] = {}
    for key, texts in units.items():
        sentences = [_words(u) for u in texts]
        # a wrong figure about this topic, or any sentence of another topic, that no unit of this topic
        # supports (checked against all eight units, so against every retrieved prefix of them)
        mine = [c for c in wrong[key] if _unsupported(c, sentences)]
        others = [u for k2, t2 in units.items() if k2 != key for u in t2 if _unsupported(u, sentences)]
        bad[key] = (mine, others)
        if len(mine) < 2 or len(others) < 20:
            raise AssertionError(f"knowledge base: too few unsupported claims for {key}")  # a template bug
    return units, bad


KB, _UNSUPPORTED = _build_kb()
# the packed context of the first n units of a topic, n = 0..8
_CONTEXTS = {key: ["\n\n".join(texts[:n]) for n in range(_UNITS_PER_TOPIC + 1)] for key, texts in KB.items()}


def unsupported_answers(stratum: str, topic: int) -> list[str]:
    """The claims a failed answer about ``topic`` of ``stratum`` is drawn from: wrong figures about the topic
    first, then other topics' facts; none shares more than :data:`MAX_SHARED` of its words with any sentence
    of the topic's units."""
    mine, others = _UNSUPPORTED[stratum, topic]
    return mine + others


def _answer(rng: np.random.Generator, stratum: str, topic: int, n_ret: int, failed: bool) -> str:
    if failed:
        # half of them a wrong figure about the topic, half another topic's fact
        pool = _UNSUPPORTED[stratum, topic][0 if rng.random() < 0.5 else 1]
        return pool[int(rng.integers(len(pool)))]
    units = KB[stratum, topic]
    first = int(rng.integers(n_ret))
    if n_ret > 1 and rng.random() < 0.5:
        second = int(rng.integers(n_ret - 1))
        second += second >= first
        return f"{units[min(first, second)]} {units[max(first, second)]}"
    return units[first]


@dataclass
class SimSummary:
    """What was written and its ground truth: counts, and the ids of the requests whose next request is a
    rephrase (``truth_rephrased``) and of the failed requests (``truth_failed``), both filled only when asked.
    ``answered`` counts the requests with an answer and ``supported_answers`` those whose answer is one or two
    sentences of its context: their ratio is the true faithfulness of the answered traffic."""

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
    answered: int = 0
    supported_answers: int = 0
    truth_rephrased: set[str] = field(default_factory=set, repr=False)
    truth_failed: set[str] = field(default_factory=set, repr=False)

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("truth_rephrased", "truth_failed")}


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
    text_rng = np.random.default_rng([seed, 1])  # the answers' own stream: the rest is as without them
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
                for rec in _day(rng, text_rng, d, int(per_day[d]), day0, d == incident, d >= switch, summary,
                                keep_truth):
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
        summary.truth_failed = set()
    return summary


def _session_starts(rng: np.random.Generator, n: int) -> np.ndarray:
    """n seconds into a day, busier 08:00-20:00 (three quarters of the traffic), in random order (the file is
    not sorted by time; the ingest does not need it to be)."""
    busy = rng.random(n) < 0.75
    return np.where(busy, rng.uniform(8 * 3600, 20 * 3600, n), rng.uniform(0, 86400 - 1, n))


def _day(rng, text_rng, d: int, quota: int, day0: dt.datetime, incident: bool, second: bool, s: SimSummary,
         keep_truth: bool):
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
            answer = None if outcome != "answered" else _answer(text_rng, stratum, topic, n_ret, failed)
            rec = {"request_id": rid, "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                   "session_id": sid, "release": release, "stratum": stratum, "question": question,
                   "answer": answer,
                   "outcome": outcome, "n_retrieved": n_ret,
                   "context": _CONTEXTS[stratum, topic][n_ret],
                   "unit_ids": [f"kb-{stratum}-{topic}#{i}" for i in range(n_ret)],
                   "latency_ms": round(float(rng.lognormal(7.0, 0.4)), 1),
                   "thumbs": None, "escalated": False, "abandoned": False, "copied": False}
            s.failures += failed
            if failed and keep_truth:
                s.truth_failed.add(rid)
            if answer is not None:
                s.answered += 1
                s.supported_answers += not failed
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
