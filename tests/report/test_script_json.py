"""script_json writes orjson's text where orjson and json agree byte for byte, and json's elsewhere: on random
nested data (hostile strings, every kind of number, types json refuses) it equals the json-only definition."""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
import pytest

from ragassay.report.html import script_json


def _reference(obj: object) -> str:
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


@dataclasses.dataclass
class _Point:
    x: int


def _random(rng: np.random.Generator, depth: int = 0):
    kind = int(rng.integers(0, 12 if depth < 3 else 8))
    if kind == 0:
        return "".join(chr(int(c)) for c in rng.integers(0, 0x110000, int(rng.integers(0, 6)))
                       if not 0xD800 <= c <= 0xDFFF)
    if kind == 1:
        return "".join(chr(int(c)) for c in rng.integers(0, 0x80, int(rng.integers(0, 8))))  # controls, <, &
    if kind == 2:
        return int(rng.choice([0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**63) - 1, 10**30]))
    if kind == 3:
        return float(rng.choice([0.1, 1e-05, 1.5e-07, 1e16, 1e22, -0.0, 3.0, 5e-324, 123456.789]))
    if kind == 4:
        return [None, True, False][int(rng.integers(0, 3))]
    if kind == 5:
        return "a\ud800b" if rng.random() < 0.5 else "\u2028<\u2029>&"
    if kind == 6:
        return int(rng.integers(-1000, 1000))
    if kind == 7:
        return "q" + str(int(rng.integers(0, 100)))
    if kind == 8:
        return [_random(rng, depth + 1) for _ in range(int(rng.integers(0, 5)))]
    if kind == 9:
        return {("k" + str(i)) if rng.random() < 0.9 else i: _random(rng, depth + 1)
                for i in range(int(rng.integers(0, 4)))}
    if kind == 10:
        return tuple(_random(rng, depth + 1) for _ in range(int(rng.integers(0, 3))))
    return [_Point(1), np.int64(3), float("nan"), float("inf")][int(rng.integers(0, 4))]


def _outcome(fn, obj):
    try:
        return "ok", fn(obj)
    except (TypeError, ValueError, UnicodeError) as e:
        return "error", type(e)


def test_script_json_equals_the_json_definition_on_random_nested_data():
    rng = np.random.default_rng(11)
    kinds = set()
    for _ in range(20_000):
        obj = _random(rng)
        got, want = _outcome(script_json, obj), _outcome(_reference, obj)
        assert got == want, obj
        kinds.add(got[0])
    assert kinds == {"ok", "error"}  # both answers were exercised


@pytest.mark.parametrize("obj", [list(range(10_000)), ["x"] * 5 + [1e-05], [[1, 2], [3, "<"]], {"a": [None, True]},
                                 [2**64], ["\ud800"], [[[]]] * 3])
def test_script_json_equals_the_json_definition_on_columns(obj):
    assert script_json(obj) == _reference(obj)


def test_script_json_deep_nesting_falls_back_to_json():
    obj: list = []
    for _ in range(300):  # past orjson's 255 levels, within json's recursion limit
        obj = [obj]
    assert sys.getrecursionlimit() > 400 and script_json(obj) == _reference(obj)
