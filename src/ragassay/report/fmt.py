"""Number and identifier formatting shared by the HTML tables and the SVG plots.

Every function returns plain ``str``; escaping is the caller's job (Jinja autoescape in the template,
``markupsafe.escape`` in ``svg.py``). Undefined values (None, NaN) print as "undefined", never as 0.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Iterable, Mapping

UNDEFINED = "undefined"

_ANCHOR_BAD = re.compile(r"[^A-Za-z0-9_-]")


def is_number(x: object) -> bool:
    """True for real numbers (ints, floats, numpy scalars), False for bool and everything else."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def is_defined(x: object) -> bool:
    """True for a finite-or-infinite real number; None, NaN and non-numbers are undefined."""
    return is_number(x) and not math.isnan(float(x))


def num(x: object, digits: int = 3) -> str:
    """A value with ``digits`` decimals; ints stay ints; None/NaN -> "undefined"; ±inf -> "∞"/"−∞"."""
    if x is None:
        return UNDEFINED
    if isinstance(x, bool):
        return "yes" if x else "no"
    if not is_number(x):
        return str(x)
    if isinstance(x, numbers.Integral):
        return str(int(x))
    v = float(x)
    if math.isnan(v):
        return UNDEFINED
    if math.isinf(v):
        return "∞" if v > 0 else "−∞"
    out = f"{v:.{digits}f}"
    # "-0.000" reads as a signed effect that is not there
    return out[1:] if out.startswith("-") and float(out) == 0 else out


def signed(x: object, digits: int = 3) -> str:
    """A difference with an explicit sign (+0.070, −0.012, 0.000); undefined as in ``num``."""
    if not is_defined(x):
        return num(x, digits)
    s = num(x, digits)
    if s.startswith("-"):
        return "−" + s[1:]
    if s == "−∞" or float(x) == 0 or set(s) <= {"0", "."}:
        return s
    return "+" + s


def ci(lo: object, hi: object, digits: int = 3) -> str:
    """An interval as "[lo, hi]"; "undefined" when either end is undefined."""
    if not (is_defined(lo) and is_defined(hi)):
        return UNDEFINED
    return f"[{num(lo, digits)}, {num(hi, digits)}]"


def pvalue(p: object) -> str:
    """A p-value: three decimals, "<0.001" below that; undefined as in ``num``."""
    if not is_defined(p):
        return num(p)
    v = float(p)
    return "<0.001" if 0 < v < 0.001 else num(v, 3)


def ms(x: object) -> str:
    """A latency in milliseconds with a precision that suits its size."""
    if not is_defined(x):
        return num(x)
    v = float(x)
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def value_text(x: object) -> str:
    """Any config or pin value as one line: strings verbatim, numbers via ``num`` (6 significant digits
    for floats, since config values are settings, not estimates), the rest as compact JSON."""
    if x is None:
        return "—"
    if isinstance(x, str):
        return x
    if isinstance(x, bool):
        return "true" if x else "false"
    if is_number(x):
        if isinstance(x, numbers.Integral):
            return str(int(x))
        return UNDEFINED if math.isnan(float(x)) else f"{float(x):.6g}"
    try:
        return json.dumps(x, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(x)


def sort_key(x: object) -> str:
    """The ``data-v`` attribute the table sorter reads: a number as text, empty for undefined."""
    if is_defined(x):
        return repr(float(x))
    return ""


def flatten(d: Mapping, prefix: str = "") -> dict[str, object]:
    """Nested mappings to dotted keys (``{"fusion": {"depth": 50}}`` -> ``{"fusion.depth": 50}``);
    lists and scalars are leaves. An empty mapping is kept as a leaf so it stays visible."""
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


def anchor_ids(query_ids: Iterable[str]) -> dict[str, str]:
    """Map each query id to a unique HTML id ``q-<sanitized>``: characters outside [A-Za-z0-9_-] become
    "_", and a collision after sanitizing gets a numeric suffix so every link has one target."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for qid in query_ids:
        if qid in out:
            continue
        base = "q-" + (_ANCHOR_BAD.sub("_", str(qid)) or "_")
        cand, i = base, 2
        while cand in used:
            cand, i = f"{base}-{i}", i + 1
        used.add(cand)
        out[qid] = cand
    return out


def truncate(s: str, width: int) -> str:
    """``s`` cut to ``width`` characters with an ellipsis; plots keep the full text in a tooltip."""
    s = str(s)
    return s if len(s) <= width else s[: max(width - 1, 1)] + "…"
