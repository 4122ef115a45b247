"""Run identifiers: ULIDs (26 characters of Crockford base32, sortable by creation time).

A ULID is 128 bits: a 48-bit Unix timestamp in milliseconds followed by 80 random bits, written as 26
base32 digits (alphabet ``0-9A-Z`` without I, L, O, U) with the most significant digit first, so string order
is time order. Within one millisecond this generator is monotonic: the random part of the previous id is
incremented, so ids made by one process always sort in the order they were made. Reference:
https://github.com/ulid/spec (the "monotonicity" section).
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_DECODE = {c: i for i, c in enumerate(CROCKFORD)}
_RANDOM_BITS = 80
_RANDOM_MAX = (1 << _RANDOM_BITS) - 1
_TIME_MAX = (1 << 48) - 1

_lock = threading.Lock()
_last_ms = -1
_last_random = 0


def _encode(value: int) -> str:
    return "".join(CROCKFORD[(value >> (5 * (25 - i))) & 31] for i in range(26))


def new_ulid(now_ms: int | None = None) -> str:
    """Return a new ULID from the clock, or for the given time ``now_ms`` (imports of old runs, tests).

    Clock-derived ids are monotonic within the process: if the clock reads the same millisecond as the
    previous id (or goes backwards), the previous timestamp is kept and its random part incremented by one.
    An explicit ``now_ms`` gets fresh random bits and leaves that sequence alone.
    """
    global _last_ms, _last_random
    if now_ms is not None:
        if not 0 <= int(now_ms) <= _TIME_MAX:
            raise ValueError(f"ULID timestamp {now_ms} ms is outside 0..2^48-1")
        return _encode((int(now_ms) << _RANDOM_BITS) | int.from_bytes(os.urandom(10), "big"))
    ms = int(time.time() * 1000)
    with _lock:
        if ms <= _last_ms:
            ms = _last_ms
            rand = _last_random + 1
            if rand > _RANDOM_MAX:  # 2^80 ids in one millisecond: move to the next one
                ms, rand = ms + 1, int.from_bytes(os.urandom(10), "big")
        else:
            rand = int.from_bytes(os.urandom(10), "big")
        _last_ms, _last_random = ms, rand
    return _encode((ms << _RANDOM_BITS) | rand)


def is_ulid(text: str) -> bool:
    """True when ``text`` is 26 Crockford base32 digits (upper case) whose value fits 128 bits."""
    return (
        isinstance(text, str)
        and len(text) == 26
        and all(c in _DECODE for c in text)
        and _DECODE[text[0]] <= 7  # 26 digits carry 130 bits; the top two must be zero
    )


def ulid_to_int(text: str) -> int:
    """The 128-bit integer a ULID encodes."""
    if not is_ulid(text):
        raise ValueError(f"{text!r} is not a ULID (26 upper-case Crockford base32 characters)")
    value = 0
    for c in text:
        value = (value << 5) | _DECODE[c]
    return value


def ulid_time(text: str) -> datetime:
    """The creation time (UTC, millisecond precision) embedded in a ULID."""
    ms = ulid_to_int(text) >> _RANDOM_BITS
    return datetime.fromtimestamp(ms / 1000, tz=UTC)
