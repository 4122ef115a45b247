"""Verdict parsing into outcomes, request shas, strict schemas, prices and retry bounds."""

import hashlib
import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from ragassay.errors import InputError
from ragassay.judges.protocol import (
    ClaimsVerdict,
    CriterionVerdict,
    ItemKey,
    JudgeRequest,
    NuggetVerdict,
    RelevanceVerdict,
    Sampling,
    SupportVerdict,
    parse_verdict,
    request_sha,
)
from ragassay.judges.providers.base import Price, RetryPolicy, price_table, retry_after_seconds

GOOD = {"justification": "stated in line 2", "cannot_judge": False, "label": "supported", "quote": "x"}


@pytest.mark.parametrize(
    ("text", "outcome", "reason"),
    [
        (json.dumps(GOOD), "ok", None),
        (json.dumps({**GOOD, "cannot_judge": True, "justification": "not a claim"}), "cannot_judge", "not a claim"),
        ("", "malformed", "empty response"),
        (None, "malformed", "empty response"),
        ("verdict: supported", "malformed", "not JSON (Expecting value at char 0)"),
        ("[1, 2]", "malformed", "expected a JSON object, got list"),
        (json.dumps({**GOOD, "label": "maybe"}), "malformed", "does not match SupportVerdict: label:"),
        (json.dumps({**GOOD, "extra": 1}), "malformed", "does not match SupportVerdict: extra:"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "quote"}), "malformed",
         "does not match SupportVerdict: quote: Field required"),
    ],
)
def test_parse_verdict_outcomes(text, outcome, reason):
    got, verdict, why = parse_verdict(SupportVerdict, text)
    assert got == outcome
    assert (verdict is not None) == (outcome in ("ok", "cannot_judge"))
    assert (why or "").startswith(reason or "") and (why is None) == (reason is None)


def _req(**kw):
    base = {"key": ItemKey("R", "q1", 0, "support:0"), "judge": "support", "verdict_type": SupportVerdict,
            "system": "RUBRIC", "user": "claim"}
    return JudgeRequest(**{**base, **kw})


def test_request_sha_ignores_the_item_key_and_follows_everything_that_shapes_the_answer():
    s = Sampling("m", max_tokens=100)
    ref = request_sha("openai", s, _req())
    assert request_sha("openai", s, _req(key=ItemKey("R2", "q9", 3, "x"))) == ref
    assert request_sha("openai", s, _req(rubric_sha="pinned-elsewhere")) == ref
    variants = [
        request_sha("anthropic", s, _req()),
        request_sha("openai", Sampling("m2", max_tokens=100), _req()),
        request_sha("openai", Sampling("m", max_tokens=101), _req()),
        request_sha("openai", Sampling("m", max_tokens=100, temperature=0.0), _req()),
        request_sha("openai", Sampling("m", max_tokens=100, effort="low"), _req()),
        request_sha("openai", s, _req(system="RUBRIC v2")),
        request_sha("openai", s, _req(user="claim.")),
        request_sha("openai", s, _req(verdict_type=RelevanceVerdict)),
    ]
    assert len({ref, *variants}) == 9


def test_rubric_and_prompt_shas_default_to_the_sha256_of_their_bytes():
    r = _req(system="Rubric: é", user="claim")
    assert r.rubric_sha == hashlib.sha256("Rubric: é".encode()).hexdigest()
    assert r.prompt_sha == hashlib.sha256(b"claim").hexdigest()


def _objects(node):
    if isinstance(node, dict):
        if node.get("type") == "object":
            yield node
        for v in node.values():
            yield from _objects(v)
    elif isinstance(node, list):
        for v in node:
            yield from _objects(v)


@pytest.mark.parametrize("cls", [ClaimsVerdict, SupportVerdict, RelevanceVerdict, CriterionVerdict, NuggetVerdict])
def test_verdict_schemas_are_strict(cls):
    schema = cls.json_schema()
    objects = list(_objects(schema))
    assert objects
    for obj in objects:
        assert obj["additionalProperties"] is False
        assert sorted(obj["required"]) == sorted(obj["properties"])
    assert list(schema["properties"])[:2] == ["justification", "cannot_judge"]


def test_price_matches_the_spec_cost_model():
    # Spec §11.7: 5,000 claims x (1,800 in, 150 out) on Opus 5 at $5/$25 per MTok, sync, no caching = $63.75.
    assert 5000 * Price(5.0, 25.0).cost(1800, 150) == pytest.approx(63.75)
    p = Price(5.0, 25.0, cached_input=0.5, cache_write=6.25)
    assert p.cost(400, 150, cached_tokens=1400) == pytest.approx((400 * 5 + 1400 * 0.5 + 150 * 25) / 1e6)
    assert p.cost(400, 150, cache_write_tokens=1400) == pytest.approx((400 * 5 + 1400 * 6.25 + 150 * 25) / 1e6)
    assert p.worst_case(1000, 100) == pytest.approx((1000 * 6.25 + 100 * 25) / 1e6)


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ([], "expected a mapping"),
        ({"m": 3}, "prices.m: expected {input: ..., output: ...}"),
        ({"m": {"input": 1}}, "prices.m: 'output' price missing"),
        ({"m": {"input": 1, "output": -2}}, "prices.m.output: -2 must be a number >= 0"),
        ({"m": {"input": "1", "output": 2}}, "prices.m.input: '1' must be a number"),
        ({"m": {"input": float("inf"), "output": 2}}, "prices.m.input: inf"),
        ({"m": {"input": 1, "output": 2, "cache": 1}}, "unknown key(s) ['cache']"),
        ({"": {"input": 1, "output": 2}}, "model ids must be non-empty strings"),
    ],
)
def test_price_table_rejects_bad_entries(config, fragment):
    with pytest.raises(InputError) as err:
        price_table(config)
    assert fragment in str(err.value)


def test_price_table_reads_optional_cache_prices():
    table = price_table({"m": {"input": 1, "output": 2, "cached_input": 0.1}})
    assert table == {"m": Price(1.0, 2.0, 0.1, None)}


@pytest.mark.parametrize("kw", [{"max_attempts": 0}, {"max_attempts": 1.5}, {"timeout_s": 0},
                                {"item_deadline_s": float("inf")}, {"backoff_base_s": -1}])
def test_retry_policy_is_always_bounded(kw):
    with pytest.raises(InputError):
        RetryPolicy(**kw)


def test_backoff_is_full_jitter_and_capped():
    import random

    policy = RetryPolicy(backoff_base_s=0.5, backoff_max_s=3.0)
    rng = random.Random(1)
    waits = [policy.backoff(a, rng) for a in (1, 2, 3, 10) for _ in range(200)]
    assert all(0 <= w <= 3.0 for w in waits)
    assert max(waits[:200]) <= 0.5 and max(waits[600:]) > 2.0


def test_retry_after_header_forms():
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after-ms": "150", "retry-after": "9"}) == 0.15
    later = datetime.now(UTC) + timedelta(seconds=30)
    assert 25 <= retry_after_seconds({"retry-after": format_datetime(later, usegmt=True)}) <= 30
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({"retry-after": "-3"}) is None
    assert retry_after_seconds({}) is None
