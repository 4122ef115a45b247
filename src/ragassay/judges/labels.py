"""Human-labelled items for judge validation (``labels.jsonl``), validated at the boundary.

One JSON object per line. Every validation kind (the judgement a judge metric is built from) has its own
fields and labels; ``cannot_tell`` is a label of every kind (left out of agreement and counted):

- ``support`` (faithfulness, numeric consistency): ``question``, ``context``, ``claim`` (``answer`` may stand
  for ``claim``); ``supported``, ``partially_supported``, ``unsupported``.
- ``citation`` (citation precision/recall): ``claim``, ``passage`` (the cited unit's text); ``supported``,
  ``unsupported``.
- ``relevance`` (answer relevance): ``question``, ``answer``; ``relevant``, ``partially_relevant``,
  ``irrelevant``.
- ``criterion`` (rubric correctness, one criterion per line): ``question``, ``reference``, ``answer``,
  ``criterion`` (a name of the judge config's rubric); ``pass``, ``partial``, ``fail``.
- ``nuggets`` (nugget assignment): ``question``, ``answer``, ``nugget_id``, ``nugget_text``, optional
  ``vital`` (true/false); ``support``, ``partial_support``, ``not_support``. The lines sharing a (question,
  answer) are that answer's nuggets, judged in one call; a nugget id appears once among them.
- ``pairwise`` (pairwise preference): ``question``, ``answer_a``, ``answer_b``, optional ``context``; ``a``,
  ``tie``, ``b``. A pair repeated with its answers swapped is a copy (the judge is asked both orders anyway).

Every kind also takes ``label`` (the final, adjudicated label; spaces or hyphens for underscores accepted),
and optionally ``case``, ``doc_id``, ``generator_family``, ``label_a``/``label_b`` (or ``label_a1``/
``label_a2``: two independent annotation passes), ``adjudicated`` (the final label was settled after they
disagreed), ``adjudication`` (the adjudicator's note), ``labelled_by`` (``human`` or ``automated``: a model or
a script) and ``kind`` (when given, it must be the kind the file is read as). When a line carries only
``item_id`` and the labels, its text fields are taken from ``items.jsonl`` in the same directory (the bundled
calibration set keeps items and labels apart).

The label-set version is sha256 over the resolved items (every field, sorted by item_id): editing one label or
one context makes a new version, which a validation record pins.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import KW_ONLY, asdict, dataclass
from pathlib import Path

from ragassay.errors import InputError

# The human labels of each validation kind, cannot_tell last.
KIND_LABELS = {
    "support": ("supported", "partially_supported", "unsupported", "cannot_tell"),
    "citation": ("supported", "unsupported", "cannot_tell"),
    "relevance": ("relevant", "partially_relevant", "irrelevant", "cannot_tell"),
    "criterion": ("pass", "partial", "fail", "cannot_tell"),
    "nuggets": ("support", "partial_support", "not_support", "cannot_tell"),
    "pairwise": ("a", "tie", "b", "cannot_tell"),
}
KINDS = tuple(KIND_LABELS)
HUMAN_LABELS = KIND_LABELS["support"]
LABELLERS = ("human", "automated")
# The bundled set names its passes after its annotators.
_PASS_ALIASES = {"label_a1": "label_a", "label_a2": "label_b"}
_COMMON = ("item_id", "label", "case", "doc_id", "generator_family", "label_a", "label_b", "adjudicated",
           "adjudication", "labelled_by", "kind", *_PASS_ALIASES)
MAX_PROBLEMS = 20


@dataclass(frozen=True)
class _Labelled:
    """The fields every kind's item has besides its texts and label (keyword-only)."""

    _: KW_ONLY
    case: str | None = None
    doc_id: str | None = None
    generator_family: str | None = None
    label_a: str | None = None
    label_b: str | None = None
    adjudicated: bool | None = None
    labelled_by: str | None = None
    line: int = 0


@dataclass(frozen=True)
class LabelledItem(_Labelled):
    """A support item: is ``claim`` supported by ``context``?"""

    item_id: str
    question: str
    context: str
    claim: str
    label: str

    @property
    def judged_text(self) -> str:
        return self.claim


@dataclass(frozen=True)
class CitationItem(_Labelled):
    """A citation item: does the cited ``passage`` support ``claim``?"""

    item_id: str
    claim: str
    passage: str
    label: str

    @property
    def context(self) -> str:
        """What the support request judges the claim against: the cited passage alone."""
        return self.passage

    @property
    def judged_text(self) -> str:
        return self.claim


@dataclass(frozen=True)
class RelevanceItem(_Labelled):
    """A relevance item: does ``answer`` address ``question``?"""

    item_id: str
    question: str
    answer: str
    label: str

    @property
    def judged_text(self) -> str:
        return self.answer


@dataclass(frozen=True)
class CriterionItem(_Labelled):
    """A rubric item: does ``answer`` meet ``criterion`` against ``reference``?"""

    item_id: str
    question: str
    reference: str
    answer: str
    criterion: str
    label: str

    @property
    def judged_text(self) -> str:
        return self.answer


@dataclass(frozen=True)
class NuggetItem(_Labelled):
    """A nugget item: does ``answer`` contain nugget ``nugget_id`` (``nugget_text``)?"""

    item_id: str
    question: str
    answer: str
    nugget_id: str
    nugget_text: str
    label: str
    vital: bool | None = None

    @property
    def judged_text(self) -> str:
        return self.answer


@dataclass(frozen=True)
class PairwiseItem(_Labelled):
    """A pairwise item: which of ``answer_a`` and ``answer_b`` answers ``question`` better (``context``: what
    the judge sees beside them, if anything)?"""

    item_id: str
    question: str
    answer_a: str
    answer_b: str
    label: str
    context: str | None = None


# kind -> (item class, required text fields in the file, optional fields of the kind)
_FORMATS: dict[str, tuple[type, tuple[str, ...], tuple[str, ...]]] = {
    "support": (LabelledItem, ("question", "context", "claim"), ("answer",)),
    "citation": (CitationItem, ("claim", "passage"), ()),
    "relevance": (RelevanceItem, ("question", "answer"), ()),
    "criterion": (CriterionItem, ("question", "reference", "answer", "criterion"), ()),
    "nuggets": (NuggetItem, ("question", "answer", "nugget_id", "nugget_text"), ("vital",)),
    "pairwise": (PairwiseItem, ("question", "answer_a", "answer_b"), ("context",)),
}

Item = LabelledItem | CitationItem | RelevanceItem | CriterionItem | NuggetItem | PairwiseItem


@dataclass(frozen=True)
class LabelSet:
    path: str
    version: str
    items: tuple[Item, ...]
    kind: str = "support"

    def __len__(self) -> int:
        return len(self.items)

    def labelled_by(self) -> str:
        """Who labelled the set, from its items: ``human``, ``automated``, ``mixed`` or ``unstated``."""
        kinds = {it.labelled_by for it in self.items}
        if kinds == {"human"} or kinds == {"automated"}:
            return kinds.pop()
        return "unstated" if kinds == {None} else "mixed"

    def passes_kappa(self) -> float | None:
        """Cohen's kappa between the two annotation passes over items that carry both (None without them, as
        for pairwise labels, which have no second pass)."""
        pairs = [(it.label_a, it.label_b) for it in self.items
                 if getattr(it, "label_a", None) and getattr(it, "label_b", None)]
        if len(pairs) < 2:
            return None
        from ragassay.stats.agreement import cohen_kappa

        try:
            return cohen_kappa([a for a, _ in pairs], [b for _, b in pairs], labels=list(KIND_LABELS[self.kind]))
        except InputError:
            return math.nan


def _norm_label(v, kind: str = "support") -> str | None:
    if not isinstance(v, str):
        return None
    s = v.strip().lower().replace("-", "_").replace(" ", "_")
    return s if s in KIND_LABELS[kind] else None


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


def _item(kind: str, obj: dict, merged: dict, line: int, where: str, criteria: Sequence[str], has_side: bool,
          problems: list[str]) -> Item | None:
    """Line ``line`` (``obj``, with ``merged`` its fields joined with items.jsonl) as the kind's item, or None
    with its problems appended."""
    iid = obj["item_id"]
    cls, text, _ = _FORMATS[kind]
    if kind == "support" and "claim" in obj and "answer" in obj:
        problems.append(f"{where}: give 'claim' or 'answer', not both")
        return None
    if kind == "support" and "answer" in merged and "claim" not in merged:
        merged["claim"] = merged.pop("answer")
    bad = [f for f in text if not isinstance(merged.get(f), str) or not merged[f].strip()]
    if bad:
        hint = "" if has_side else " (or put the items in items.jsonl beside the labels)"
        problems.append(f"{where}: item {iid}: {', '.join(bad)} must be non-empty text{hint}")
        return None
    allowed = list(KIND_LABELS[kind])
    label = _norm_label(obj.get("label"), kind)
    if label is None:
        problems.append(f"{where}: item {iid}: label {obj.get('label')!r} is not one of {allowed} (kind {kind})")
        return None
    given = obj.get("kind")
    if given is not None and given != kind:
        problems.append(f"{where}: item {iid}: kind {given!r} does not match --kind {kind}, the kind the file is "
                        f"read as; read the file as --kind {given} or fix the line")
        return None
    if kind == "criterion" and merged["criterion"] not in criteria:
        problems.append(f"{where}: item {iid}: criterion {merged['criterion']!r} is not in the judge config's "
                        f"rubric {list(criteria)}; label those criteria or add it to the config's criteria")
        return None
    fields = {f: merged[f] for f in text}
    if kind == "nuggets" and merged.get("vital") is not None:
        if not isinstance(merged["vital"], bool):
            problems.append(f"{where}: item {iid}: vital must be true or false")
            return None
        fields["vital"] = merged["vital"]
    if kind == "pairwise" and merged.get("context") is not None:
        if not isinstance(merged["context"], str) or not merged["context"].strip():
            problems.append(f"{where}: item {iid}: context (when given) must be non-empty text")
            return None
        fields["context"] = merged["context"]
    passes = {}
    for k in ("label_a", "label_b"):
        if obj.get(k) is not None:
            passes[k] = _norm_label(obj[k], kind)
            if passes[k] is None:
                problems.append(f"{where}: item {iid}: {k} {obj[k]!r} is not one of {allowed}")
    adj = obj.get("adjudicated")
    if adj is not None and not isinstance(adj, bool):
        problems.append(f"{where}: item {iid}: adjudicated must be true or false")
        return None
    if obj.get("adjudication") is not None and not isinstance(obj["adjudication"], str):
        problems.append(f"{where}: item {iid}: adjudication is the adjudicator's note (text) or null")
        return None
    who = obj.get("labelled_by")
    if who is not None and who not in LABELLERS:
        problems.append(f"{where}: item {iid}: labelled_by {who!r} is not one of {list(LABELLERS)}")
        return None
    opt = {"labelled_by": who}
    for k in ("case", "doc_id", "generator_family"):
        v = merged.get(k)
        if v is not None and (not isinstance(v, str) or not v.strip()):
            problems.append(f"{where}: item {iid}: {k} must be non-empty text when given")
        opt[k] = v
    return cls(item_id=iid, label=label, label_a=passes.get("label_a"), label_b=passes.get("label_b"),
               adjudicated=adj, line=line, **fields, **opt)


def _nugget_groups(items: list[NuggetItem], path: Path, problems: list[str]) -> None:
    """A nugget id appears once per (question, answer): the call lists each nugget once."""
    seen: dict[tuple[str, str, str], int] = {}
    for it in items:
        key = (it.question, it.answer, it.nugget_id)
        if key in seen:
            problems.append(f"{path}:{it.line}: item {it.item_id}: nugget {it.nugget_id!r} is already listed for "
                            f"this question and answer (line {seen[key]}); give each nugget of an answer once")
        else:
            seen[key] = it.line


# Fields that describe an item's label or its provenance, not what the judge is shown.
_NOT_CONTENT = frozenset(("item_id", "label", "label_a", "label_b", "adjudicated", "adjudication", "labelled_by",
                          "line", "case", "generator_family"))


def _content(it) -> str:
    """What the judge is shown of an item, canonically; a pair's two answers as a set, since both orders are
    asked (a pair with its answers swapped is the same two requests)."""
    fields = {k: v for k, v in asdict(it).items() if k not in _NOT_CONTENT}
    if isinstance(it, PairwiseItem):
        fields["answers"] = sorted((fields.pop("answer_a"), fields.pop("answer_b")))
    return json.dumps(fields, sort_keys=True, ensure_ascii=False)


def refuse_copies(items: list, path: Path, problems: list[str]) -> None:
    """An item whose judged content (every field the judge is shown) repeats another's is refused: a copy
    counts one judgement twice, so a set padded with copies of two items would reach any minimum n."""
    seen: dict[str, tuple[str, int]] = {}
    for it in items:
        key = _content(it)
        if key in seen:
            first, line = seen[key]
            problems.append(f"{path}:{it.line}: item {it.item_id} repeats the content of item {first} (line {line}): "
                            "a copy counts the same judgement twice; give each item once")
        else:
            seen[key] = (it.item_id, it.line)


def load_labels(path: str | Path, kind: str = "support", *, criteria: Sequence[str] | None = None) -> LabelSet:
    """Read and check a labels file of one validation kind; every problem is one ``file:line: message`` (up
    to 20), nothing partial. ``criteria`` are the rubric's criterion names a ``criterion`` line may name
    (default: the default rubric's)."""
    if kind not in KIND_LABELS:
        raise InputError(f"kind must be one of {list(KIND_LABELS)}, got {kind!r}")
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such labels file; give a labels.jsonl (see docs/judge-validation.md)")
    if criteria is None:
        from ragassay.judges.metrics import DEFAULT_CRITERIA

        criteria = [c.name for c in DEFAULT_CRITERIA]
    known = frozenset((*_COMMON, *_FORMATS[kind][1], *_FORMATS[kind][2]))
    problems: list[str] = []
    rows = _read_jsonl(p, problems)
    side = _side_items(p, problems)
    items: list = []
    seen: dict[str, int] = {}
    for n, obj in rows:
        where = f"{p}:{n}"
        unknown = sorted(set(obj) - known)
        for alias, name in _PASS_ALIASES.items():
            if alias in obj:
                if name in obj:
                    unknown.append(f"{alias} (with {name})")
                obj = {**{k: v for k, v in obj.items() if k != alias}, name: obj[alias]}
        if unknown:
            problems.append(f"{where}: unknown field(s) {unknown}; allowed for kind {kind}: "
                            f"{sorted(known - set(_PASS_ALIASES))}")
            continue
        iid = item_id(obj, where, n, seen, problems)
        if iid is None:
            continue
        item = _item(kind, obj, {**side.get(iid, {}), **obj}, n, where, criteria, bool(side), problems)
        if item is not None:
            items.append(item)
    if kind == "nuggets":
        _nugget_groups(items, p, problems)
    items, version = settle(items, p, problems, "labels", "labelled items")
    return LabelSet(str(p), version, tuple(items), kind)


def item_id(obj: dict, where: str, line: int, seen: dict[str, int], problems: list[str]) -> str | None:
    """A line's item_id, or None with its problem: missing or empty, or repeating an earlier line's."""
    iid = obj.get("item_id")
    if not isinstance(iid, str) or not iid.strip():
        problems.append(f"{where}: item_id must be a non-empty string")
        return None
    if iid in seen:
        problems.append(f"{where}: item_id {iid!r} repeats line {seen[iid]}; give each item once")
        return None
    seen[iid] = line
    return iid


def settle(items: list, path: Path, problems: list[str], what: str, things: str) -> tuple[list, str]:
    """The end of every label loader: copies refused (:func:`refuse_copies`), every problem raised at once
    (nothing partial), then the items sorted by item_id and the label-set version, sha256 over them."""
    refuse_copies(items, path, problems)
    if not problems and not items:
        problems.append(f"{path}: no {things}; write one JSON object per line")
    if problems:
        more = f"\n... and {len(problems) - MAX_PROBLEMS} more" if len(problems) > MAX_PROBLEMS else ""
        raise InputError(f"{path}: {len(problems)} problem(s) in the {what}; nothing was validated:\n"
                         + "\n".join(problems[:MAX_PROBLEMS]) + more)
    items = sorted(items, key=lambda it: it.item_id)
    blob = json.dumps([{k: v for k, v in asdict(it).items() if k != "line"} for it in items],
                      sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return items, hashlib.sha256(blob.encode("utf-8")).hexdigest()


def bundled_labels() -> Path | None:
    """The bundled calibration set's labels, when the package ships them."""
    from importlib.resources import files

    p = Path(str(files("ragassay") / "data" / "judge_calibration" / "labels.jsonl"))
    return p if p.is_file() else None


def bundled_example(kind: str) -> Path | None:
    """The bundled example label file of a kind (``data/judge_examples/<kind>.jsonl``), when shipped."""
    from importlib.resources import files

    p = Path(str(files("ragassay") / "data" / "judge_examples" / f"{kind}.jsonl"))
    return p if p.is_file() else None


def default_labels(kind: str) -> Path | None:
    """The labels ``judge validate`` uses without ``--labels``: the calibration set for support, the bundled
    example of the kind otherwise."""
    return bundled_labels() if kind == "support" else bundled_example(kind)


__all__ = ["HUMAN_LABELS", "KINDS", "KIND_LABELS", "LABELLERS", "CitationItem", "CriterionItem", "Item",
           "LabelSet", "LabelledItem", "NuggetItem", "PairwiseItem", "RelevanceItem", "bundled_example",
           "bundled_labels", "default_labels", "load_labels"]
