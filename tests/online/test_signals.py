"""`ragassay online signals` and `online simulate`: rates counted against a plain-Python count of the source
records, Wilson intervals against statsmodels, undefined rates with n = 0, alarms and exit codes, and the
simulated month (its incident found, its rephrases recovered)."""

from __future__ import annotations

import datetime as dt
import json
import math
import random

import pytest
from statsmodels.stats.proportion import proportion_confint

from ragassay.cli.app import COMMANDS, main
from ragassay.errors import InputError
from ragassay.online.ingest import ingest
from ragassay.online.signals import SIGNALS, parse_alarms, signals
from ragassay.online.simulate import simulate

DAY0 = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


def cli(args, capsys, monkeypatch):
    monkeypatch.setitem(COMMANDS, "online", ("online", "Production traffic."))
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def random_records(n=600, seed=3):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        day = rng.randrange(4)
        out.append({
            "request_id": f"q{i}", "ts": (DAY0 + dt.timedelta(days=day, seconds=rng.randrange(86400))).isoformat(),
            "question": f"question {i}", "stratum": rng.choice(["billing", "shipping", None]),
            "release": "r1" if day < 2 else "r2",
            "thumbs": rng.choice([None, None, None, 1, -1]),
            "outcome": rng.choice(["answered"] * 6 + ["refused", "abstained", "error", None]),
            "n_retrieved": rng.choice([None, 0, 3, 5, 5, 5]),
            "escalated": rng.choice([None, False, False, True]),
            "abandoned": rng.choice([False, False, True]) if day != 3 else None,  # day 3: never recorded
        })
    return out


def expected(records, key):
    """(day, group) -> signal -> (k, n), counted in plain Python from the source records."""
    preds = {
        "thumbs_down": (lambda r: r["thumbs"] is not None, lambda r: r["thumbs"] == -1),
        "rephrased": (lambda r: False, lambda r: False),  # no session: unknown
        "escalated": (lambda r: r["escalated"] is not None, lambda r: r["escalated"]),
        "abandoned": (lambda r: r["abandoned"] is not None, lambda r: r["abandoned"]),
        "empty_retrieval": (lambda r: r["n_retrieved"] is not None, lambda r: r["n_retrieved"] == 0),
        "refusal": (lambda r: r["outcome"] is not None, lambda r: r["outcome"] in ("refused", "abstained")),
    }
    out: dict = {}
    for r in records:
        cell = out.setdefault((r["ts"][:10], key(r)), {s: [0, 0] for s in preds})
        for s, (known, hit) in preds.items():
            if known(r):
                cell[s][1] += 1
                cell[s][0] += bool(hit(r))
    return {k: {s: tuple(v) for s, v in c.items()} for k, c in out.items()}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("signals")
    recs = random_records()
    src = root / "traffic.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in recs))
    store = root / "s.duckdb"
    ingest([src], store)
    return store, recs


@pytest.mark.parametrize("by", [None, "stratum", "release"])
def test_rates_count_the_records_and_intervals_match_statsmodels_wilson(world, by):
    store, recs = world
    rep = signals(store, by=by, confidence=0.9)
    want = expected(recs, (lambda r: r[by]) if by else (lambda r: None))
    got = {(r.date, r.group): r for r in rep.days}
    assert set(got) == set(want)
    for key, row in got.items():
        assert {s: (row.rates[s].k, row.rates[s].n) for s in SIGNALS} == want[key]
        for s in SIGNALS:
            rate = row.rates[s]
            if rate.n == 0:
                assert math.isnan(rate.rate) and math.isnan(rate.lo) and math.isnan(rate.hi)
                continue
            lo, hi = proportion_confint(rate.k, rate.n, alpha=0.1, method="wilson")
            assert rate.rate == rate.k / rate.n
            assert (rate.lo, rate.hi) == (pytest.approx(lo, abs=1e-12), pytest.approx(hi, abs=1e-12))
    # one total row per group over the whole range: the days summed
    for total in rep.totals:
        days = [r for r in rep.days if r.group == total.group]
        assert total.requests == sum(r.requests for r in days)
        for s in SIGNALS:
            assert (total.rates[s].k, total.rates[s].n) == (sum(r.rates[s].k for r in days),
                                                            sum(r.rates[s].n for r in days))


def test_a_signal_nobody_recorded_is_undefined_with_n_zero_in_json_and_in_the_table(world, capsys, monkeypatch):
    store, recs = world
    code, out, _ = cli(["online", "signals", "--store", store, "--json", "--alarm", ""], capsys, monkeypatch)
    res = json.loads(out)
    day3 = next(r for r in res["days"] if r["date"] == "2026-03-04")
    assert code == 0 and day3["signals"]["abandoned"] == {"k": 0, "n": 0, "rate": None, "lo": None, "hi": None}
    assert all(r["signals"]["rephrased"]["n"] == 0 for r in res["days"])
    code, out, _ = cli(["online", "signals", "--store", store, "--alarm", ""], capsys, monkeypatch)
    line = next(x for x in out.splitlines() if x.lstrip("│ ").startswith("2026-03-04"))
    assert line.count("undefined (n=0)") == 2  # rephrased and abandoned


def test_alarms_fire_above_the_threshold_and_fail_only_when_asked(tmp_path, capsys, monkeypatch):
    store = tmp_path / "s.duckdb"
    recs = []
    # day 1: 1 empty retrieval of 10, 2 refusals of 10; day 2: 0 of 10 and exactly 2 of 10 refusals
    for d, empties, refusals in ((0, 1, 2), (1, 0, 2)):
        for i in range(10):
            recs.append({"request_id": f"d{d}-{i}", "ts": (DAY0 + dt.timedelta(days=d, hours=i)).isoformat(),
                         "question": "q", "n_retrieved": 0 if i < empties else 4,
                         "outcome": "refused" if i >= 10 - refusals else "answered"})
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ingest([src], store)
    # the default alarm: empty retrieval above 1% -> day 1 only (10%); shown, exit 0 without --fail-on-alarm
    code, out, _ = cli(["online", "signals", "--store", store], capsys, monkeypatch)
    assert code == 0 and "ALARM 2026-03-01: empty_retrieval 10.00% (1 of 10) > 0.01" in out
    assert "alarms (empty_retrieval > 0.01): 1 fired" in out
    code, out, _ = cli(["online", "signals", "--store", store, "--fail-on-alarm", "--json"], capsys, monkeypatch)
    res = json.loads(out)
    assert code == 1 and res["exit_code"] == 1
    assert res["alarms"] == [{"date": "2026-03-01", "group": None, "signal": "empty_retrieval", "rate": 0.1,
                              "threshold": 0.01, "k": 1, "n": 10}]
    # refusal 2/10 = 0.2 is not above 0.2: no alarm; above 0.15 on both days
    code, out, _ = cli(["online", "signals", "--store", store, "--alarm", "refusal=0.2", "--fail-on-alarm"], capsys,
                       monkeypatch)
    assert code == 0 and "0 fired" in out
    code, out, _ = cli(["online", "signals", "--store", store, "--alarm", "refusal=0.15", "--fail-on-alarm",
                        "--json"], capsys, monkeypatch)
    assert code == 1 and [a["date"] for a in json.loads(out)["alarms"]] == ["2026-03-01", "2026-03-02"]
    # the window: day 2 alone has no empty retrieval
    code, out, _ = cli(["online", "signals", "--store", store, "--from", "2026-03-02", "--to", "2026-03-02",
                        "--fail-on-alarm", "--json"], capsys, monkeypatch)
    res = json.loads(out)
    assert code == 0 and [r["date"] for r in res["days"]] == ["2026-03-02"] and res["alarms"] == []
    # bad input: exit 2 with a reason
    for args, msg in [(["--alarm", "thumbs_down=0.1"], "noisy or biased"), (["--alarm", "refusal=2"], "in [0, 1]"),
                      (["--alarm", "refusal"], "SIGNAL=THRESHOLD"), (["--by", "day"], "--by 'day'"),
                      (["--from", "March"], "YYYY-MM-DD"), (["--from", "2026-03-02", "--to", "2026-03-01"], "after"),
                      (["--from", "2027-01-01"], "no records from 2027-01-01")]:
        code, _, err = cli(["online", "signals", "--store", store, *args], capsys, monkeypatch)
        assert code == 2 and msg in err, (args, err)
    code, _, err = cli(["online", "signals", "--store", tmp_path / "empty.duckdb"], capsys, monkeypatch)
    assert code == 2 and "no production records" in err


def test_parse_alarms():
    assert parse_alarms(None) == {"empty_retrieval": 0.01}
    assert parse_alarms("") == {}
    assert parse_alarms("empty_retrieval=0.05, refusal=0.2") == {"empty_retrieval": 0.05, "refusal": 0.2}
    with pytest.raises(InputError, match="not a signal"):
        parse_alarms("latency=0.1")


def test_a_simulated_month_shows_its_incident_and_its_rephrases(tmp_path, capsys, monkeypatch):
    out = tmp_path / "traffic.jsonl"
    code, text, _ = cli(["online", "simulate", "--out", out, "--records", "6000", "--days", "6", "--seed", "1",
                         "--json"], capsys, monkeypatch)
    sim = json.loads(text)
    assert code == 0 and sim["records"] == 6000 and sim["incident_day"] == "2026-03-04"
    # same seed, same bytes; an earlier simulate output may be replaced, another file may not
    first = out.read_bytes()
    assert simulate(out, records=6000, days=6, seed=1).records == 6000 and out.read_bytes() == first
    other = tmp_path / "notes.jsonl"
    other.write_text('{"request_id": "mine"}\n')
    with pytest.raises(InputError, match="not an earlier ragassay simulated traffic output"):
        simulate(other, records=10, days=1)
    store = tmp_path / "s.duckdb"
    truth = simulate(tmp_path / "t2.jsonl", records=6000, days=6, seed=1, keep_truth=True).truth_rephrased
    ingest([out], store)
    rep = signals(store)
    assert [r.date for r in rep.days if r.alarms] == ["2026-03-04"]  # the incident, and only it
    assert {r.date for r in rep.days} == {f"2026-03-0{d}" for d in range(1, 7)}
    assert {r.requests for r in rep.days} == {1000}
    import duckdb

    from ragassay.online.store import open_records

    con = duckdb.connect()
    flagged = {r[0] for r in con.execute(f"SELECT request_id FROM {open_records(con, store)} WHERE rephrased")
               .fetchall()}
    con.close()
    hit = len(flagged & truth)
    assert hit / len(truth) > 0.95 and hit / len(flagged) > 0.9  # recall and precision of the rephrase rule
