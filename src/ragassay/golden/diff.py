"""What changed between two built golden sets: items added, removed, relabelled or edited, per stratum.

Items are matched by ``query_id``. A matched item is *relabelled* when its labels changed: its evidence
(a span added or removed), the grade of a span both versions hold, or ``answerable``. It is *edited* when
only other fields changed (``question``, ``stratum``, ``reference_answer``, ``nuggets``, ``tags``). A span
is identified by ``(doc_id, start, end)`` when both sets were built on the same corpus (same digest), else
by ``(doc_id, quote)``: offsets into two different corpora are not comparable, quotes are. Per-stratum
counts use the new version's stratum (the old one for a removed item).
"""

from __future__ import annotations

from ragassay.golden.schema import GoldenQuery
from ragassay.golden.set import GoldenSet

LABEL_FIELDS = ("evidence", "grade", "answerable")
OTHER_FIELDS = ("question", "stratum", "reference_answer", "nuggets", "tags")
# Manifest settings that change what the labels mean even when no item changed.
PINS = ("dataset_version", "corpus_digest", "hit_rule", "relevance_threshold", "label_type")


def _spans(q: GoldenQuery, by_offsets: bool) -> dict[tuple, int]:
    """span key -> its highest grade (a span listed twice counts once, as the scorer reads it)."""
    out: dict[tuple, int] = {}
    for e in q.evidence:
        key = (e.doc_id, e.start, e.end) if by_offsets else (e.doc_id, e.quote)
        out[key] = max(out.get(key, e.grade), e.grade)
    return out


def item_changes(old: GoldenQuery, new: GoldenQuery, by_offsets: bool = True) -> list[str]:
    """The fields (of LABEL_FIELDS and OTHER_FIELDS, in that order) in which ``new`` differs from ``old``."""
    a, b = _spans(old, by_offsets), _spans(new, by_offsets)
    changed = []
    if a.keys() != b.keys():
        changed.append("evidence")
    if any(a[k] != b[k] for k in a.keys() & b.keys()):
        changed.append("grade")
    if old.answerable != new.answerable:
        changed.append("answerable")
    for f in OTHER_FIELDS:
        if getattr(old, f) != getattr(new, f):
            changed.append(f)
    return changed


def golden_diff(old: GoldenSet, new: GoldenSet) -> dict:
    """Items added, removed, relabelled and edited from ``old`` to ``new``, in total and per stratum, and
    the manifest pins that differ. See the module docstring for the rules."""
    by_offsets = old.manifest.get("corpus_digest") == new.manifest.get("corpus_digest")
    old_ids, new_ids = set(old.query_ids), set(new.query_ids)
    added = [q for q in new.query_ids if q not in old_ids]
    removed = [q for q in old.query_ids if q not in new_ids]
    relabelled, edited = [], []
    for qid in new.query_ids:
        if qid not in old_ids:
            continue
        fields = item_changes(old[qid], new[qid], by_offsets)
        if any(f in LABEL_FIELDS for f in fields):
            relabelled.append({"query_id": qid, "changes": fields})
        elif fields:
            edited.append({"query_id": qid, "changes": fields})

    strata: dict[str, dict[str, int]] = {}

    def count(stratum: str, kind: str) -> None:
        row = strata.setdefault(stratum, {"added": 0, "removed": 0, "relabelled": 0, "edited": 0,
                                          "unchanged": 0})
        row[kind] += 1

    for qid in added:
        count(new[qid].stratum, "added")
    for qid in removed:
        count(old[qid].stratum, "removed")
    touched = {c["query_id"]: kind for kind, rows in (("relabelled", relabelled), ("edited", edited))
               for c in rows}
    for qid in new.query_ids:
        if qid in old_ids:
            count(new[qid].stratum, touched.get(qid, "unchanged"))
    return {
        "old": old.dataset_version, "new": new.dataset_version,
        "span_identity": "offsets" if by_offsets else "quotes",
        "pins": {p: {"old": old.manifest.get(p), "new": new.manifest.get(p)} for p in PINS
                 if old.manifest.get(p) != new.manifest.get(p)},
        "n_old": len(old), "n_new": len(new),
        "added": added, "removed": removed, "relabelled": relabelled, "edited": edited,
        "n_unchanged": sum(row["unchanged"] for row in strata.values()),
        "strata": dict(sorted(strata.items())),
    }
