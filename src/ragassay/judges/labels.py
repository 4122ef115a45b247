"""Human-labelled items for judge validation (``labels.jsonl``), validated at the boundary.

One JSON object per line::

    {"item_id": "cal-001", "question": "...", "context": "<the evidence the claim is judged against>",
     "claim": "<an answer or one claim>", "label": "supported",
     "case": "numbers_dates", "doc_id": "GPL-3", "generator_family": "anthropic",
     "label_a": "supported", "label_b": "partially_supported", "adjudicated": true}

``label`` (the final, adjudicated human label) is one of ``supported``, ``partially_supported``,
``unsupported``, ``cannot_tell`` (spaces or hyphens for underscores are accepted). ``answer`` may stand for
``claim``. ``label_a``/``label_b`` (or ``label_a1``/``label_a2``) are the two independent annotation passes,
``adjudicated`` says the final label was settled after they disagreed and ``adjudication`` is the
adjudicator's note; ``labelled_by`` says who gave the label, ``human`` or ``automated`` (a model or a
script); all are optional. When a line carries only ``item_id`` and the
labels, its question, context and claim are taken from ``items.jsonl`` in the same directory (the bundled
calibration set keeps items and labels apart).

The label-set version is sha256 over the resolved items (every field, sorted by item_id): editing one label or
one context makes a new version, which a validation record pins.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from ragassay.errors import InputError

HUMAN_LABELS = ("supported", "partially_supported", "unsupported", "cannot_tell")
_TEXT_FIELDS = ("question", "context", "claim")
_OPTIONAL = ("case", "doc_id", "generator_family", "label_a", "label_b", "adjudicated", "adjudication", "answer",
             "labelled_by")
LABELLERS = ("human", "automated")
# The bundled set names its passes after its annotators.
_PASS_ALIASES = {"label_a1": "label_a", "label_a2": "label_b"}
_KNOWN = frozenset(("item_id", "label", *_TEXT_FIELDS, *_OPTIONAL, *_PASS_ALIASES))
MAX_PROBLEMS = 20


@dataclass(frozen=True)
class LabelledItem:
    item_id: str
    question: str
    context: str
    claim: str
    label: str
    case: str | None = None
    doc_id: str | None = None
    generator_family: str | None = None
    label_a: str | None = None
    label_b: str | None = None
    adjudicated: bool | None = None
    labelled_by: str | None = None
    line: int = 0


@dataclass(frozen=True)
class LabelSet:
    path: str
    version: str
    items: tuple[LabelledItem, ...]

    def __len__(self) -> int:
        return len(self.items)

    def labelled_by(self) -> str:
        """Who labelled the set, from its items: ``human``, ``automated``, ``mixed`` or ``unstated``."""
        kinds = {it.labelled_by for it in self.items}
        if kinds == {"human"} or kinds == {"automated"}:
            return kinds.pop()
        return "unstated" if kinds == {None} else "mixed"

    def passes_kappa(self) -> float | None:
        """Cohen's kappa between the two annotation passes over items that carry both (None without them)."""
        pairs = [(it.label_a, it.label_b) for it in self.items if it.label_a and it.label_b]
        if len(pairs) < 2:
            return None
        from ragassay.stats.agreement import cohen_kappa

        try:
            return cohen_kappa([a for a, _ in pairs], [b for _, b in pairs], labels=list(HUMAN_LABELS))
        except InputError:
            return math.nan


def _norm_label(v) -> str | None:
    if not isinstance(v, str):
        return None
    s = v.strip().lower().replace("-", "_").replace(" ", "_")
    return s if s in HUMAN_LABELS else None


def _read_jsonl(path: Path, problems: list[str]) -> list[tuple[int, dict]]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as e:
                problems.append(f"{path}:{n}: not JSON ({e.msg} at column {e.colno})")
                continue
            if not isinstance(obj, dict):
                problems.append(f"{path}:{n}: expected a JSON object, got {type(obj).__name__}")
                continue
            rows.append((n, obj))
    return rows


def _side_items(path: Path, problems: list[str]) -> dict[str, dict]:
    items = path.parent / "items.jsonl"
    if items.resolve() == path.resolve() or not items.is_file():
        return {}
    out = {}
    for n, obj in _read_jsonl(items, problems):
        iid = obj.get("item_id")
        if isinstance(iid, str) and iid:
            out[iid] = obj
        else:
            problems.append(f"{items}:{n}: item_id must be a non-empty string")
    return out


def load_labels(path: str | Path) -> LabelSet:
    """Read and check a labels file; every problem is one ``file:line: message`` (up to 20), nothing partial."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such labels file; give a labels.jsonl (see docs/judge-validation.md)")
    problems: list[str] = []
    rows = _read_jsonl(p, problems)
    side = _side_items(p, problems)
    items: list[LabelledItem] = []
    seen: dict[str, int] = {}
    for n, obj in rows:
        where = f"{p}:{n}"
        unknown = sorted(set(obj) - _KNOWN)
        for alias, name in _PASS_ALIASES.items():
            if alias in obj:
                if name in obj:
                    unknown.append(f"{alias} (with {name})")
                obj = {**{k: v for k, v in obj.items() if k != alias}, name: obj[alias]}
        if unknown:
            problems.append(f"{where}: unknown field(s) {unknown}; allowed: {sorted(_KNOWN)}")
            continue
        iid = obj.get("item_id")
        if not isinstance(iid, str) or not iid.strip():
            problems.append(f"{where}: item_id must be a non-empty string")
            continue
        if iid in seen:
            problems.append(f"{where}: item_id {iid!r} repeats line {seen[iid]}; give each item once")
            continue
        seen[iid] = n
        if "claim" in obj and "answer" in obj:
            problems.append(f"{where}: give 'claim' or 'answer', not both")
            continue
        merged = {**side.get(iid, {}), **obj}
        if "answer" in merged and "claim" not in merged:
            merged["claim"] = merged.pop("answer")
        bad = [f for f in _TEXT_FIELDS if not isinstance(merged.get(f), str) or not merged[f].strip()]
        if bad:
            hint = "" if side else " (or put the items in items.jsonl beside the labels)"
            problems.append(f"{where}: item {iid}: {', '.join(bad)} must be non-empty text{hint}")
            continue
        label = _norm_label(obj.get("label"))
        if label is None:
            problems.append(f"{where}: item {iid}: label {obj.get('label')!r} is not one of {list(HUMAN_LABELS)}")
            continue
        passes = {}
        for k in ("label_a", "label_b"):
            if obj.get(k) is not None:
                passes[k] = _norm_label(obj[k])
                if passes[k] is None:
                    problems.append(f"{where}: item {iid}: {k} {obj[k]!r} is not one of {list(HUMAN_LABELS)}")
        adj = obj.get("adjudicated")
        if adj is not None and not isinstance(adj, bool):
            problems.append(f"{where}: item {iid}: adjudicated must be true or false")
            continue
        if obj.get("adjudication") is not None and not isinstance(obj["adjudication"], str):
            problems.append(f"{where}: item {iid}: adjudication is the adjudicator's note (text) or null")
            continue
        who = obj.get("labelled_by")
        if who is not None and who not in LABELLERS:
            problems.append(f"{where}: item {iid}: labelled_by {who!r} is not one of {list(LABELLERS)}")
            continue
        opt = {"labelled_by": who}
        for k in ("case", "doc_id", "generator_family"):
            v = merged.get(k)
            if v is not None and (not isinstance(v, str) or not v.strip()):
                problems.append(f"{where}: item {iid}: {k} must be non-empty text when given")
            opt[k] = v
        items.append(LabelledItem(iid, merged["question"], merged["context"], merged["claim"], label,
                                  label_a=passes.get("label_a"), label_b=passes.get("label_b"), adjudicated=adj,
                                  line=n, **opt))
    if not problems and not items:
        problems.append(f"{p}: no labelled items; write one JSON object per line")
    if problems:
        more = f"\n... and {len(problems) - MAX_PROBLEMS} more" if len(problems) > MAX_PROBLEMS else ""
        raise InputError(f"{p}: {len(problems)} problem(s) in the labels; nothing was validated:\n"
                         + "\n".join(problems[:MAX_PROBLEMS]) + more)
    items.sort(key=lambda it: it.item_id)
    blob = json.dumps([{k: v for k, v in asdict(it).items() if k != "line"} for it in items],
                      sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return LabelSet(str(p), hashlib.sha256(blob.encode("utf-8")).hexdigest(), tuple(items))


def bundled_labels() -> Path | None:
    """The bundled calibration set's labels, when the package ships them."""
    from importlib.resources import files

    p = Path(str(files("ragassay") / "data" / "judge_calibration" / "labels.jsonl"))
    return p if p.is_file() else None


__all__ = ["HUMAN_LABELS", "LABELLERS", "LabelSet", "LabelledItem", "bundled_labels", "load_labels"]
