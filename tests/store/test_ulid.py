import string
import time
from datetime import UTC, datetime

import pytest

from ragassay.store.ulid import CROCKFORD, is_ulid, new_ulid, ulid_time, ulid_to_int

# Python's int(x, 32) reads digits 0-9a-v; mapping Crockford digits onto them gives an independent decoder.
_TO_BASE32 = str.maketrans(CROCKFORD, string.digits + "abcdefghijklmnopqrstuv")


def test_ulids_made_in_a_tight_loop_sort_in_creation_order_and_are_unique():
    ids = [new_ulid() for _ in range(5000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(is_ulid(i) for i in ids)


def test_ulid_time_is_the_clock_at_creation():
    before = datetime.now(UTC)
    u = new_ulid()
    after = datetime.now(UTC)
    t = ulid_time(u)
    assert before.replace(microsecond=before.microsecond // 1000 * 1000) <= t <= after


def test_same_millisecond_increments_the_random_part(monkeypatch):
    frozen = time.time() + 10.0  # ahead of every id made so far
    monkeypatch.setattr("ragassay.store.ulid.time.time", lambda: frozen)
    a, b = new_ulid(), new_ulid()
    assert ulid_to_int(b) == ulid_to_int(a) + 1
    assert ulid_to_int(a) >> 80 == int(frozen * 1000)


def test_clock_going_backwards_keeps_order(monkeypatch):
    now = [time.time() + 20.0]
    monkeypatch.setattr("ragassay.store.ulid.time.time", lambda: now[0])
    a = new_ulid()
    now[0] -= 5.0
    b = new_ulid()
    assert b > a and ulid_to_int(b) >> 80 == ulid_to_int(a) >> 80


def test_explicit_time_is_encoded_and_first_ten_digits_are_the_timestamp():
    a, b = new_ulid(now_ms=1_700_000_000_000), new_ulid(now_ms=1_700_000_000_000)
    assert a[:10] == b[:10] and a != b
    assert ulid_to_int(a) >> 80 == 1_700_000_000_000
    assert new_ulid(now_ms=1_700_000_000_001)[:10] != a[:10]


def test_encoding_matches_an_independent_base32_decoder():
    for _ in range(200):
        u = new_ulid()
        assert int(u.translate(_TO_BASE32), 32) == ulid_to_int(u)
        assert len(u) == 26 and set(u) <= set(CROCKFORD)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "01ARZ3NDEKTSV4RRFFQ69G5FA",
        "01ARZ3NDEKTSV4RRFFQ69G5FAVX",
        "81ARZ3NDEKTSV4RRFFQ69G5FAV",
        "01ARZ3NDEKTSV4RRFFQ69G5FAI",
        "01arz3ndektsv4rrffq69g5fav",
    ],
)
def test_is_ulid_rejects_wrong_length_alphabet_overflow_and_lower_case(bad):
    assert not is_ulid(bad)
    with pytest.raises(ValueError):
        ulid_to_int(bad)


def test_known_ulid_from_the_spec_decodes_to_its_timestamp():
    # ulid/spec README example: 01ARZ3NDEKTSV4RRFFQ69G5FAV was made at 1469922850259 ms.
    assert ulid_to_int("01ARZ3NDEKTSV4RRFFQ69G5FAV") >> 80 == 1469922850259
