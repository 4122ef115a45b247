"""Agreement between annotators on the golden labels themselves (spec §3.7): pairwise Cohen's kappa,
Krippendorff's alpha over all annotators, per-stratum figures, percentile bootstrap CIs over items, and the
disagreements to adjudicate.

A label file is one annotator's JSONL, one line per (query, passage) item::

    {"query_id": "q017", "doc_id": "gpl-3", "quote": "convey the machine-readable", "grade": 2}
    {"query_id": "q018", "unit_id": "gpl-3#12", "grade": 0, "annotator": "a2"}

    {"query_id": "q019", "doc_id": "gpl-3", "start": 410, "end": 467, "quote": "...", "grade": 3}

The passage is ``doc_id`` + ``quote`` (an evidence entry of the authoring format, verbatim), a ``unit_id``, or
``doc_id`` + ``start`` + ``end`` (canonical offsets, as the pooled labelling page saves them; a ``quote`` beside
them is the span's text and not part of the item's identity). Two lines name the same item when the query id
and the passage fields are equal. ``grade`` is an
integer on the golden scale 0..MAX_GRADE; relevant means ``grade >= threshold`` (the golden set's
``relevance_threshold``, default 2). ``annotator`` is optional and defaults to the file's stem.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import numpy as np

from ragassay.errors import InputError
from ragassay.golden.schema import MAX_GRADE
from ragassay.stats.agreement import cohen_kappa, krippendorff_alpha
from ragassay.yamlio import read_utf8

DISAGREEMENT_KIND = "label_disagreement"
DEFAULT_THRESHOLD = 2
_FIELDS = {"query_id", "doc_id", "quote", "unit_id", "start", "end", "grade", "annotator"}


@dataclass(frozen=True)
class LabelSet:
    """Every annotator's grades: ``grades`` is (annotators x items), NaN where an annotator did not label
    the item; ``where[a][i]`` is the ``file:line`` of annotator ``a``'s label of item ``i`` ("" if none)."""

    annotators: tuple[str, ...]
    items: tuple[tuple[tuple[str, str], ...], ...]
    grades: np.ndarray
    where: tuple[tuple[str, ...], ...]

    def item_dict(self, i: int) -> dict:
        return dict(self.items[i])


def _item_key(rec: dict, at: str, problems: list[str]) -> tuple[tuple[str, str], ...] | None:
    unknown = sorted(set(rec) - _FIELDS)
    if unknown:
        problems.append(f"{at}: unknown field(s) {', '.join(unknown)}; a label line has query_id, doc_id + quote, "
                        "doc_id + start + end, or unit_id, grade and optionally annotator")
        return None
    bad = [k for k in ("query_id", "doc_id", "quote", "unit_id", "annotator")
           if k in rec and not (isinstance(rec[k], str) and rec[k].strip())]
    if bad:
        problems.append(f"{at}: {', '.join(bad)} must be non-empty text")
        return None
    if "query_id" not in rec:
        problems.append(f"{at}: missing query_id")
        return None
    by_span = "start" in rec or "end" in rec
    if by_span:
        if "unit_id" in rec or not all(k in rec for k in ("doc_id", "start", "end")):
            problems.append(f"{at}: a span names its passage by doc_id + start + end (and no unit_id)")
            return None
        a, b = rec["start"], rec["end"]
        if any(isinstance(x, bool) or not isinstance(x, int) for x in (a, b)) or not 0 <= a < b:
            problems.append(f"{at}: start {json.dumps(a)} and end {json.dumps(b)} must be integers with "
                            "0 <= start < end (canonical offsets)")
            return None
        return (("query_id", rec["query_id"]), ("doc_id", rec["doc_id"]), ("start", a), ("end", b))
    by_unit, by_quote = "unit_id" in rec, ("doc_id" in rec or "quote" in rec)
    if by_unit == by_quote or (by_quote and not ("doc_id" in rec and "quote" in rec)):
        problems.append(f"{at}: name the passage by doc_id + quote, by doc_id + start + end, or by unit_id "
                        "(exactly one of them)")
        return None
    passage = ("unit_id",) if by_unit else ("doc_id", "quote")
    return (("query_id", rec["query_id"]), *((k, rec[k]) for k in passage))


def _grade(rec: dict, at: str, max_grade: int, problems: list[str]) -> int | None:
    g = rec.get("grade")
    if g is None:
        problems.append(f"{at}: missing grade (an integer 0-{max_grade})")
    elif isinstance(g, bool) or not isinstance(g, int):
        problems.append(f"{at}: grade {json.dumps(g)} is not an integer; write a grade 0-{max_grade}")
    elif not 0 <= g <= max_grade:
        problems.append(f"{at}: grade {g} is outside the scale 0-{max_grade}")
    else:
        return g
    return None


class _RepeatedKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    # json keeps the last of a repeated key without a word; a label line that says grade twice is a mistake
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise _RepeatedKey(k)
        out[k] = v
    return out


def _read_one(path: Path, max_grade: int, problems: list[str]) -> tuple[str, dict] | None:
    """One file's annotator and its labels ``{item key: (grade, "file:line")}``; problems appended."""
    try:
        text = read_utf8(path, "label")
    except InputError as e:
        problems.append(str(e))
        return None
    labels: dict = {}
    names: dict[str, int] = {}
    n_before = len(problems)
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        at = f"{path}:{lineno}"
        try:
            rec = json.loads(line, object_pairs_hook=_unique_keys)
        except json.JSONDecodeError as e:
            problems.append(f"{at}: invalid JSON ({e.msg} at column {e.colno})")
            continue
        except _RepeatedKey as e:
            problems.append(f"{at}: key {e.args[0]!r} given twice; keep one")
            continue
        if not isinstance(rec, dict):
            problems.append(f"{at}: expected a JSON object, got {type(rec).__name__}")
            continue
        key, grade = _item_key(rec, at, problems), _grade(rec, at, max_grade, problems)
        if "annotator" in rec and isinstance(rec["annotator"], str):
            names.setdefault(rec["annotator"], lineno)
        if key is None or grade is None:
            continue
        if key in labels:
            problems.append(f"{at}: duplicate label of {_describe(dict(key))} (first at {labels[key][1]}); keep one "
                            "line per item and annotator")
            continue
        labels[key] = (grade, at)
    if len(names) > 1:
        shown = ", ".join(f"{n} (line {ln})" for n, ln in names.items())
        problems.append(f"{path}: holds labels of several annotators ({shown}); give each annotator their own file")
    if not labels and len(problems) == n_before:
        problems.append(f"{path}: no labels (the file is empty); pass one JSONL label file per annotator")
    if len(problems) > n_before:
        return None
    return (next(iter(names)) if names else path.stem), labels


def _describe(item: Mapping[str, str]) -> str:
    if "unit_id" in item:
        return f"query {item['query_id']} unit {item['unit_id']}"
    if "start" in item:
        return f"query {item['query_id']} doc {item['doc_id']} span [{item['start']}, {item['end']})"
    quote = item["quote"] if len(item["quote"]) <= 40 else item["quote"][:37] + "..."
    return f"query {item['query_id']} doc {item['doc_id']} quote {json.dumps(quote, ensure_ascii=False)}"


def read_labels(paths: Sequence[str | Path], *, max_grade: int = MAX_GRADE,
                query_ids: Callable[[str], bool] | None = None) -> LabelSet:
    """Read two or more annotators' label files into a :class:`LabelSet`.

    Raises one :class:`InputError` listing every problem, one line each: a missing, unreadable or empty file,
    a line that is not a JSON object (``file:line``), a missing or unknown field, a grade outside
    0..``max_grade``, a duplicate (item, annotator) label, an annotator named twice, fewer than two
    annotators, and (with ``query_ids``, a membership test) a query the golden set does not hold.
    """
    problems: list[str] = []
    read = [(Path(p), _read_one(Path(p), max_grade, problems)) for p in paths]
    owners: dict[str, Path] = {}
    for path, got in read:
        if got is None:
            continue
        if got[0] in owners:
            problems.append(f"{path}: annotator {got[0]} also labelled {owners[got[0]]}; one file per annotator "
                            "(name them by file stem or an \"annotator\" field)")
        owners.setdefault(got[0], path)
        if query_ids is not None:
            problems.extend(f"{at}: query {dict(key)['query_id']} is not in the golden set"
                            for key, (_, at) in got[1].items() if not query_ids(dict(key)["query_id"]))
    if len(paths) < 2:
        problems.append(f"agreement needs two or more annotators' label files, got {len(paths)}")
    if problems:
        raise InputError(f"{len(problems)} problem(s) in the label files; fix them and run again\n"
                         + "\n".join(problems))
    files = [got for _, got in read if got is not None]
    keys = sorted({k for _, labels in files for k in labels})
    col = {k: i for i, k in enumerate(keys)}
    grades = np.full((len(files), len(keys)), np.nan)
    where = []
    for r, (_, labels) in enumerate(files):
        row = [""] * len(keys)
        for k, (g, at) in labels.items():
            grades[r, col[k]] = g
            row[col[k]] = at
        where.append(tuple(row))
    return LabelSet(tuple(a for a, _ in files), tuple(keys), grades, tuple(where))


def _ci(point: float, boots: np.ndarray, confidence: float, reason: str | None) -> dict:
    """A figure with its percentile bootstrap interval; undefined (value None) with a reason, never 0."""
    ok = boots[np.isfinite(boots)]
    defined = math.isfinite(point)
    a = (1.0 - confidence) / 2.0
    lo, hi = (float(np.quantile(ok, a)), float(np.quantile(ok, 1 - a))) if defined and ok.size else (None, None)
    return {"value": float(point) if defined else None, "ci_low": lo, "ci_high": hi,
            "undefined_reason": None if defined else reason, "undefined_resamples": int(boots.size - ok.size)}


def _or_nan(fn: Callable[[], float]) -> tuple[float, str | None]:
    try:
        return fn(), None
    except InputError as e:
        return math.nan, str(e)


_NO_COMMON = "the two annotators labelled no item in common"
_PAIR_FIGURES = ("agreement", "kappa_binary", "kappa", "kappa_linear", "kappa_quadratic")


def _pair_values(a: np.ndarray, b: np.ndarray, threshold: int, scale: list[int]
                 ) -> dict[str, tuple[float, str | None]]:
    if a.size == 0:
        none = (math.nan, _NO_COMMON)
        return dict.fromkeys(_PAIR_FIGURES, none)
    ra, rb = (a >= threshold).astype(np.int64), (b >= threshold).astype(np.int64)
    return {
        "agreement": (float(np.mean(a == b)), None),
        "kappa_binary": _or_nan(lambda: cohen_kappa(ra, rb, labels=[0, 1])),
        "kappa": _or_nan(lambda: cohen_kappa(a, b, labels=scale)),
        "kappa_linear": _or_nan(lambda: cohen_kappa(a, b, labels=scale, weights="linear")),
        "kappa_quadratic": _or_nan(lambda: cohen_kappa(a, b, labels=scale, weights="quadratic")),
    }


def _values(grades: np.ndarray, threshold: int, scale: list[int]) -> dict[str, tuple[float, str | None]]:
    """Every figure of one (annotators x items) matrix: per pair, then the set-level ones."""
    out: dict[str, tuple[float, str | None]] = {}
    pairs = list(combinations(range(grades.shape[0]), 2))
    for i, j in pairs:
        both = ~np.isnan(grades[i]) & ~np.isnan(grades[j])
        a, b = grades[i, both].astype(np.int64), grades[j, both].astype(np.int64)
        for name, v in _pair_values(a, b, threshold, scale).items():
            out[f"{i},{j}:{name}"] = v
    for name, pair_name in (("kappa_binary", "kappa_binary"), ("kappa_graded", "kappa_linear")):
        got = [out[f"{i},{j}:{pair_name}"] for i, j in pairs]
        # Light's kappa: the mean over the pairs that share items; one undefined pair leaves it undefined
        shared = [v for v in got if v[1] != _NO_COMMON]
        bad = next((v for v in shared if not math.isfinite(v[0])), None)
        if not shared:
            out[name] = (math.nan, "no two annotators labelled an item in common")
        elif bad is not None:
            out[name] = bad
        else:
            out[name] = (float(np.mean([v[0] for v in shared])), None)
    out["alpha_nominal"] = _or_nan(lambda: krippendorff_alpha(grades, "nominal"))
    out["alpha_ordinal"] = _or_nan(lambda: krippendorff_alpha(grades, "ordinal"))
    return out


def agreement_figures(grades: np.ndarray, annotators: Sequence[str], *, threshold: int = DEFAULT_THRESHOLD,
                      max_grade: int = MAX_GRADE, n_resamples: int = 1000, seed: int = 0,
                      confidence: float = 0.95) -> dict:
    """Agreement of a (annotators x items) grade matrix (NaN = not labelled; items with < 2 labels ignored).

    Per pair over the items both labelled: exact agreement; Cohen's kappa on relevance (grade >= threshold);
    kappa on the graded scale unweighted, linear- and quadratic-weighted (weights over 0..max_grade, as
    ``sklearn.metrics.cohen_kappa_score`` with those labels). Over all: Krippendorff's alpha, nominal and
    ordinal; ``kappa_binary`` / ``kappa_graded`` (linear) are the pair's Cohen kappa for two annotators and
    Light's kappa (mean over pairs that share items; Light 1971) for more. Every figure has a percentile
    bootstrap CI over items (``n_resamples`` draws of the items with replacement); a figure is undefined
    (``value`` None, with the reason) where kappa or alpha is 0/0, and resamples where it is undefined are
    counted and left out of the interval.
    """
    grades = np.asarray(grades, dtype=np.float64)
    grades = grades[:, (~np.isnan(grades)).sum(axis=0) >= 2]
    scale = list(range(max_grade + 1))
    n = grades.shape[1]
    point = _values(grades, threshold, scale)
    boots = {k: np.full(n_resamples, np.nan) for k in point}
    if n:
        idx = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
        for r in range(n_resamples):
            for k, (v, _) in _values(grades[:, idx[r]], threshold, scale).items():
                boots[k][r] = v
    fig = {k: _ci(v, boots[k], confidence, why) for k, (v, why) in point.items()}
    pairs = []
    for i, j in combinations(range(len(annotators)), 2):
        both = int((~np.isnan(grades[i]) & ~np.isnan(grades[j])).sum())
        pairs.append({"a": annotators[i], "b": annotators[j], "n_items": both,
                      **{name: fig[f"{i},{j}:{name}"] for name in _PAIR_FIGURES}})
    overall = {k: fig[k] for k in ("kappa_binary", "kappa_graded", "alpha_nominal", "alpha_ordinal")}
    n_undefined = sum(f["value"] is None for f in overall.values()) + sum(
        p[name]["value"] is None for p in pairs for name in _PAIR_FIGURES)
    return {"n_items": n, "n_labels": int((~np.isnan(grades)).sum()),
            "kappa_method": "cohen" if len(annotators) == 2 else "light", **overall, "pairs": pairs,
            "n_undefined": n_undefined}


def disagreements(labels: LabelSet, threshold: int, strata: Mapping[str, str] | None = None) -> list[dict]:
    """The items two or more annotators labelled with different grades, for adjudication: each with every
    annotator's grade and ``file:line``, the grade ``spread`` (max - min) and ``relevance_split`` (some call
    it relevant, some not). Relevance splits first, then the widest spread, then item order."""
    g = labels.grades
    seen = ~np.isnan(g)
    hi, lo = np.where(seen, g, -np.inf).max(axis=0), np.where(seen, g, np.inf).min(axis=0)
    rows = []
    for i in np.flatnonzero((seen.sum(axis=0) >= 2) & (hi > lo)):
        item = labels.item_dict(int(i))
        who = [r for r in range(len(labels.annotators)) if seen[r, i]]
        rows.append({
            "kind": DISAGREEMENT_KIND, **item,
            **({"stratum": strata[item["query_id"]]} if strata is not None else {}),
            "grades": {labels.annotators[r]: int(g[r, i]) for r in who},
            "spread": int(hi[i] - lo[i]),
            "relevance_split": bool(lo[i] < threshold <= hi[i]),
            "sources": {labels.annotators[r]: labels.where[r][i] for r in who},
        })
    rows.sort(key=lambda d: (not d["relevance_split"], -d["spread"]))
    return rows


def single_items(labels: LabelSet) -> list[dict]:
    """Items only one annotator labelled: they carry no agreement information and are listed, never dropped
    unmentioned."""
    seen = ~np.isnan(labels.grades)
    out = []
    for i in np.flatnonzero(seen.sum(axis=0) == 1):
        r = int(np.flatnonzero(seen[:, i])[0])
        out.append({**labels.item_dict(int(i)), "annotator": labels.annotators[r], "source": labels.where[r][i]})
    return out


def agree(labels: LabelSet, *, strata: Mapping[str, str] | None = None, threshold: int = DEFAULT_THRESHOLD,
          max_grade: int = MAX_GRADE, skip_single: bool = False, n_resamples: int = 1000, seed: int = 0,
          confidence: float = 0.95) -> dict:
    """The full agreement report of a :class:`LabelSet`: figures over all items and per stratum (``strata``
    maps query id -> stratum), the disagreements, the single-annotator items, and ``manifest_fields``: the
    golden manifest's ``annotators`` / ``kappa_binary`` / ``kappa_graded`` as computed here (None where
    undefined), ready for an authoring file's meta.

    Items only one annotator labelled raise :class:`InputError` (one line each) unless ``skip_single``, which
    leaves them out of every figure and lists them under ``single_items``.
    """
    if not 1 <= threshold <= max_grade:
        raise InputError(f"--threshold {threshold} is outside 1-{max_grade}; relevant means grade >= threshold")
    if n_resamples < 1:
        raise InputError(f"--resamples {n_resamples}: need at least 1 bootstrap resample")
    if not 0.0 < confidence < 1.0:
        raise InputError(f"--confidence {confidence}: must be strictly between 0 and 1, e.g. 0.95")
    single = single_items(labels)
    if single and not skip_single:
        raise InputError("\n".join(
            [f"{len(single)} item(s) labelled by only one annotator carry no agreement information; have "
             "another annotator label them, or pass --skip-single to leave them out (they are then counted and "
             "listed)"]
            + [f"{s['source']}: {_describe(s)} labelled only by {s['annotator']}" for s in single]))
    shared = (~np.isnan(labels.grades)).sum(axis=0) >= 2
    if not shared.any():
        raise InputError("no item was labelled by two or more annotators; agreement needs overlapping labels")
    opts = {"threshold": threshold, "max_grade": max_grade, "n_resamples": n_resamples, "seed": seed,
            "confidence": confidence}
    overall = agreement_figures(labels.grades, labels.annotators, **opts)
    by_stratum = None
    if strata is not None:
        of_item = np.array([strata[dict(k)["query_id"]] for k in labels.items], dtype=object)
        by_stratum = {s: agreement_figures(labels.grades[:, of_item == s], labels.annotators, **opts)
                      for s in sorted(set(of_item[shared]))}
    return {
        "annotators": list(labels.annotators), "threshold": threshold, "scale": [0, max_grade],
        "n_resamples": n_resamples, "seed": seed, "confidence": confidence,
        "overall": overall, "strata": by_stratum,
        "disagreements": disagreements(labels, threshold, strata),
        "n_single": len(single), "single_items": single,
        "manifest_fields": {"annotators": list(labels.annotators),
                            "kappa_binary": overall["kappa_binary"]["value"],
                            "kappa_graded": overall["kappa_graded"]["value"]},
    }


def _is_disagreement_file(path: Path) -> bool:
    """True for a file an earlier :func:`write_disagreements` wrote (its first line is a disagreement record),
    or an empty one (nothing is lost by replacing it)."""
    try:
        with path.open(encoding="utf-8") as fh:
            first = fh.readline()
    except (OSError, UnicodeDecodeError):
        return False
    if not first:
        return True
    try:
        rec = json.loads(first)
    except ValueError:
        return False
    return isinstance(rec, dict) and rec.get("kind") == DISAGREEMENT_KIND


def check_disagreements_path(out: str | Path) -> Path:
    """Refuse ``out`` before any work unless it is new, empty or an earlier disagreement list."""
    from ragassay.fsio import check_output_file

    out = Path(out)
    check_output_file(out, "disagreement list", overwrite_ok=_is_disagreement_file)
    return out


def write_disagreements(rows: Sequence[dict], out: str | Path) -> Path:
    """Write the disagreements as JSONL, one per line, atomically (the reader sees the old file or the new)."""
    from ragassay.fsio import atomic_write_text

    out = check_disagreements_path(out)
    atomic_write_text(out, "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows))
    return out
