"""Sections from the analyses that need their own runs (``ragassay report --include FILE.json``).

Each FILE is the saved ``--json`` output of one command. Its kind is read from its top-level keys, first
match wins (docs/report.md):

- ``index-eval``: has ``curve`` and ``operating_knob``;
- ``embed-check``: has any of ``gap``, ``top1``, ``duplicates``, ``truncation``, ``drift`` (and no ``curve``);
- ``corpus check``: has ``n_spans_checked`` and ``token_drift_by_class``.

Every kind becomes the generic ``{"title", "tables": [{"title", "columns", "rows"}], "notes"}`` section (through
the owning module's ``*_report_section`` function, with an adapter where that function has another shape), and
:func:`section_view` turns it into display text for the one generic table the template renders.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

from ragassay.errors import InputError
from ragassay.report import fmt

_EMBED_KEYS = ("gap", "top1", "duplicates", "truncation", "drift")


def _index_eval(d: Mapping) -> dict:
    from ragassay.metrics.ann import index_report_section

    sec = index_report_section(index_eval=dict(d))
    sec["title"] = f"Index evaluation: {d.get('source', '')}".rstrip(": ")
    return sec


def _embed_check(d: Mapping) -> dict:
    from ragassay.metrics.ann import index_report_section

    sec = index_report_section(embed_check=dict(d))
    sec["title"] = "Embedding check"
    return sec


def _corpus_check(d: Mapping) -> dict:
    from ragassay.analysis.sweep import stages_report_section

    # stages_report_section carries the check as-is; the tables are laid out here
    cc = stages_report_section(corpus_check=dict(d))["corpus_check"]
    drift = cc.get("token_drift_by_class") or {}
    failures = cc.get("failures") or {}
    tables = [
        {"title": "Corpus check", "columns": ["ok", "documents", "spans checked", "failures"],
         "rows": [[bool(cc.get("ok")), cc.get("n_docs"), cc.get("n_spans_checked"),
                   sum(len(v) if isinstance(v, list | dict) else 1 for v in failures.values())]]},
        {"title": "Token-count ratio by document class",
         "columns": ["class", "documents", "median", "min", "max", "outliers"],
         "rows": [[cls, r.get("n_docs"), r.get("median"), r.get("min"), r.get("max"),
                   ", ".join(str(o) for o in (r.get("outliers") or [])) or "none"]
                  for cls, r in sorted(drift.items()) if isinstance(r, Mapping)]},
    ]
    if failures:
        tables.append({"title": "Failures", "columns": ["check", "detail"],
                       "rows": [[str(k), fmt.value_text(v)] for k, v in sorted(failures.items())]})
    return {"title": "Corpus check", "tables": tables, "notes": []}


KINDS: tuple[tuple[str, Callable[[Mapping], bool], Callable[[Mapping], dict]], ...] = (
    ("index-eval", lambda d: "curve" in d and "operating_knob" in d, _index_eval),
    ("embed-check", lambda d: "curve" not in d and any(k in d for k in _EMBED_KEYS), _embed_check),
    ("corpus check", lambda d: "n_spans_checked" in d and "token_drift_by_class" in d, _corpus_check),
)


def load_include(path: str | Path) -> dict:
    """The generic section of one saved ``--json`` output, with ``kind`` set; a clean error names the file."""
    path = Path(path)
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror or e})\npass the file a command's --json wrote") from e
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not JSON ({e})\npass the saved --json output of index-eval, embed-check or "
                         f"corpus check") from e
    if not isinstance(d, dict):
        raise InputError(f"{path}: the top level is a {type(d).__name__}, not an object\npass the saved --json "
                         f"output of index-eval, embed-check or corpus check")
    for kind, matches, convert in KINDS:
        if matches(d):
            try:
                sec = convert(d)
            except (KeyError, TypeError, AttributeError, ValueError) as e:
                raise InputError(f"{path}: looks like {kind} output but is malformed ({type(e).__name__}: {e})\n"
                                 f"re-run `ragassay {kind} --json` and save its output unchanged") from e
            sec["kind"] = kind
            return sec
    raise InputError(f"{path}: not a recognized --json output (keys: {', '.join(sorted(d)[:8])})\n"
                     f"--include takes the saved --json of index-eval, embed-check or corpus check")


def _fail(path: str, problem: str) -> InputError:
    return InputError(f"include {path}: {problem}")


def section_view(sec: object, i: int) -> dict:
    """Display text of one generic section (still raw: the template escapes it). Numbers get three decimals,
    None/NaN read "undefined", anything else is shown as compact text."""
    p = f"includes[{i}]"
    if not isinstance(sec, Mapping):
        raise _fail(p, "must be an object with title, tables and notes")
    tables = sec.get("tables") or []
    if not isinstance(tables, list):
        raise _fail(f"{p}.tables", "must be a list")
    out = []
    for j, t in enumerate(tables):
        if not isinstance(t, Mapping) or not isinstance(t.get("columns"), list) or not isinstance(t.get("rows"), list):
            raise _fail(f"{p}.tables[{j}]", "must have a columns list and a rows list")
        cols = [str(c) for c in t["columns"]]
        rows = []
        for r in t["rows"]:
            if not isinstance(r, list) or len(r) != len(cols):
                raise _fail(f"{p}.tables[{j}].rows", f"each row must be a list of {len(cols)} values")
            rows.append([{"text": fmt.num(v) if v is None or fmt.is_number(v) or isinstance(v, bool)
                          else fmt.value_text(v),
                          "num": fmt.is_number(v), "undefined": not fmt.is_defined(v) and (v is None or
                                                                                        fmt.is_number(v))}
                         for v in r])
        out.append({"title": str(t.get("title", "")), "columns": cols, "rows": rows})
    return {"title": str(sec.get("title", "")), "kind": str(sec.get("kind", "")), "anchor": f"include-{i + 1}",
            "tables": out, "notes": [str(n) for n in sec.get("notes") or []]}
