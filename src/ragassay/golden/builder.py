"""Building a golden set: authoring file + corpus -> resolved spans + manifest, or a list of every problem.

The build is all-or-nothing. Every problem (schema, duplicate id, unknown doc, unresolvable or
ambiguous quote, evidence rules) is collected with ``file:line`` and reported at once; nothing is written
unless there are none. Output is deterministic: the same inputs give byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from rapidfuzz import process

from ragassay.corpus import CANONICALIZER_NAME, Corpus
from ragassay.errors import GoldenBuildError, InputError
from ragassay.golden.resolve import closest_match, resolve_quote
from ragassay.golden.schema import MAX_GRADE, AuthoredQuery, Evidence, GoldenQuery
from ragassay.golden.set import GOLDEN_FILE, MANIFEST_FILE, GoldenSet

BUILDER_VERSION = "ragassay-golden-builder-v1"
_META_KEYS = {
    "dataset", "dataset_version", "description", "annotators", "kappa_binary", "kappa_graded", "hit_rule",
    "relevance_threshold", "generator", "queries",
}

try:  # the C loader is ~10x faster on large files
    _Loader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - libyaml missing
    _Loader = yaml.SafeLoader


class _Item:
    """One authored query as read from disk, with its line numbers."""

    __slots__ = ("data", "line", "evidence_lines")

    def __init__(self, data: Any, line: int, evidence_lines: list[int]):
        self.data, self.line, self.evidence_lines = data, line, evidence_lines


def _node_lines(node: yaml.Node) -> tuple[int, list[int]]:
    ev_lines: list[int] = []
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if getattr(k, "value", None) == "evidence" and isinstance(v, yaml.SequenceNode):
                ev_lines = [item.start_mark.line + 1 for item in v.value]
    return node.start_mark.line + 1, ev_lines


def _read_yaml(path: Path) -> tuple[dict, list[_Item]]:
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.load(text, Loader=_Loader)
        root = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise InputError(f"{where}: invalid YAML ({getattr(e, 'problem', e)})") from e
    if isinstance(data, list):
        meta, queries, qnode = {}, data, root
    elif isinstance(data, dict) and isinstance(data.get("queries"), list):
        meta = {k: v for k, v in data.items() if k != "queries"}
        queries = data["queries"]
        qnode = next(v for k, v in root.value if k.value == "queries")
    else:
        raise InputError(f"{path}:1: expected a list of queries or a mapping with a `queries:` list")
    unknown = sorted(set(meta) - _META_KEYS)
    if unknown:
        raise InputError(f"{path}:1: unknown top-level key(s) {unknown}; allowed: {sorted(_META_KEYS)}")
    items = []
    for q, node in zip(queries, qnode.value, strict=True):
        line, ev_lines = _node_lines(node)
        items.append(_Item(q, line, ev_lines))
    return meta, items


def _read_jsonl(path: Path) -> tuple[dict, list[_Item]]:
    items, meta = [], {}
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{lineno}: invalid JSON ({e.msg} at column {e.colno})") from e
            if isinstance(rec, dict) and rec.get("type") == "meta":
                meta = {k: v for k, v in rec.items() if k != "type"}
                continue
            ev = rec.get("evidence") if isinstance(rec, dict) else None
            items.append(_Item(rec, lineno, [lineno] * len(ev) if isinstance(ev, list) else []))
    return meta, items


def read_authoring(path: str | Path) -> tuple[dict, list[_Item]]:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such golden-set source; pass a .yaml/.yml or .jsonl authoring file")
    if p.suffix.lower() in (".yaml", ".yml"):
        return _read_yaml(p)
    if p.suffix.lower() == ".jsonl":
        return _read_jsonl(p)
    raise InputError(f"{p}: unsupported golden-set format {p.suffix!r}; use .yaml, .yml or .jsonl")


def _fmt_validation(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"])
        parts.append(f"{loc}: {e['msg']}" if loc else e["msg"])
    return "; ".join(parts)


def _resolve_all(path: Path, items: list[_Item], corpus: Corpus) -> tuple[list[GoldenQuery], list[str]]:
    problems: list[str] = []
    built: list[GoldenQuery] = []
    ids: dict[str, int] = {}
    parsed: list[AuthoredQuery | ValidationError] = []
    for item in items:
        try:
            parsed.append(AuthoredQuery.model_validate(item.data))
        except ValidationError as e:
            parsed.append(e)
    resolved = _resolve_grouped_by_doc(parsed, corpus)
    for item, q in zip(items, parsed, strict=True):
        where = f"{path}:{item.line}"
        if isinstance(q, ValidationError):
            qid = item.data.get("query_id", "?") if isinstance(item.data, dict) else "?"
            problems.append(f"{where}: {qid}: {_fmt_validation(q)}")
            continue
        if q.query_id in ids:
            problems.append(f"{where}: {q.query_id}: duplicate query_id (first defined at {path}:{ids[q.query_id]})")
            continue
        ids[q.query_id] = item.line
        relevant = [e for e in q.evidence if e.grade >= 1]
        if q.answerable and not relevant:
            problems.append(f"{where}: {q.query_id}: answerable query has no evidence with grade >= 1; "
                            "add a quote or set `answerable: false`")
        if not q.answerable and q.evidence:
            problems.append(f"{where}: {q.query_id}: negative (answerable: false) query has evidence; "
                            "remove it or set `answerable: true`")
        if q.stratum == "negative" and q.answerable:
            problems.append(f"{where}: {q.query_id}: stratum 'negative' requires `answerable: false`")
        nugget_ids = [n.id for n in q.nuggets]
        if len(set(nugget_ids)) != len(nugget_ids):
            problems.append(f"{where}: {q.query_id}: duplicate nugget ids {sorted(i for i, c in Counter(nugget_ids).items() if c > 1)}")
        evidence: list[Evidence] = []
        for j, ev in enumerate(q.evidence):
            ev_where = f"{path}:{item.evidence_lines[j] if j < len(item.evidence_lines) else item.line}"
            if not 0 <= ev.grade <= MAX_GRADE:
                problems.append(f"{ev_where}: {q.query_id}: evidence grade {ev.grade} out of range 0–{MAX_GRADE}")
                continue
            if ev.doc_id not in corpus:
                best = process.extractOne(ev.doc_id, corpus.doc_ids)
                hint = f" (closest doc id: {best[0]!r})" if best else ""
                problems.append(f"{ev_where}: {q.query_id}: unknown doc_id {ev.doc_id!r}{hint}")
                continue
            text = corpus[ev.doc_id].text
            r = resolved[(ev.doc_id, ev.quote, ev.occurrence)]
            if r.error == "not found":
                score, off, near = closest_match(text, ev.quote)
                snippet = " ".join(near.split())
                snippet = snippet if len(snippet) <= 80 else snippet[:77] + "..."
                problems.append(f"{ev_where}: {q.query_id}: quote not found in doc {ev.doc_id} "
                                f"(closest match {score:.2f} at offset {off}: {snippet!r})")
                continue
            if r.error:
                problems.append(f"{ev_where}: {q.query_id}: quote in doc {ev.doc_id} {r.error}")
                continue
            evidence.append(Evidence(doc_id=ev.doc_id, start=r.start, end=r.end, grade=ev.grade,
                                     quote=ev.quote, match=r.match))
        built.append(GoldenQuery(
            query_id=q.query_id, question=q.question, stratum=q.stratum, tags=list(q.tags),
            answerable=q.answerable, evidence=evidence, reference_answer=q.reference_answer,
            nuggets=list(q.nuggets), source=q.source, created=q.created.isoformat() if q.created else None,
        ))
    return built, problems


def _resolve_grouped_by_doc(parsed, corpus: Corpus) -> dict:
    """Resolve every distinct (doc, quote, occurrence) once, one document at a time.

    Grouping by document keeps each document's search structures hot while its quotes are resolved.
    """
    wanted = sorted({(ev.doc_id, ev.quote, ev.occurrence or 0)
                     for q in parsed if isinstance(q, AuthoredQuery)
                     for ev in q.evidence if ev.doc_id in corpus})
    return {(d, quote, occ or None): resolve_quote(corpus[d].text, quote, occ or None)
            for d, quote, occ in wanted}


def _manifest(meta: dict, queries: list[GoldenQuery], corpus: Corpus, golden_bytes: bytes,
              src_name: str, built_at: str | None) -> dict:
    positive = {e.grade for q in queries for e in q.evidence if e.grade > 0}
    label_type = "graded_0_3" if len(positive) > 1 else "binary"
    sha = hashlib.sha256(golden_bytes).hexdigest()
    name = meta.get("dataset") or Path(src_name).stem
    created = sorted(q.created for q in queries if q.created)
    if built_at is None:
        built_at = (created[-1] + "T00:00:00Z") if created else "1970-01-01T00:00:00Z"
    manifest = {
        "dataset": name,
        "dataset_version": meta.get("dataset_version") or f"{name}@{sha[:12]}",
        "golden_sha256": sha,
        "corpus_digest": corpus.digest,
        "n_docs": len(corpus),
        "canonicalizer": CANONICALIZER_NAME,
        "n_queries": len(queries),
        "n_answerable": sum(q.answerable for q in queries),
        "n_negative": sum(not q.answerable for q in queries),
        "strata": dict(sorted(Counter(q.stratum for q in queries).items())),
        "label_type": label_type,
        "relevance_threshold": int(meta.get("relevance_threshold", 2)),
        "hit_rule": str(meta.get("hit_rule", "any_overlap")),
        "annotators": list(meta.get("annotators", [])),
        "kappa_binary": meta.get("kappa_binary"),
        "kappa_graded": meta.get("kappa_graded"),
        "source_mix": dict(sorted(Counter(q.source for q in queries).items())),
        "n_evidence": sum(len(q.evidence) for q in queries),
        "match_kinds": dict(sorted(Counter(e.match for q in queries for e in q.evidence).items())),
        "n_with_nuggets": sum(bool(q.nuggets) for q in queries),
        "generator": meta.get("generator", {"kind": "human"}),
        "description": meta.get("description"),
        "source_file": src_name,
        "builder": BUILDER_VERSION,
        "built_at": built_at,
    }
    return manifest


def _dump_json(obj: Any) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=False) + "\n").encode("utf-8")


def _write_atomic_dir(out: Path, files: dict[str, bytes]) -> None:
    """Write all files into a sibling temp dir, then swap it into place."""
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        for name, data in files.items():
            with open(tmp / name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / out.name)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def build_golden(src: str | Path, corpus: Corpus, out: str | Path | None = None, *,
                 built_at: str | None = None) -> GoldenSet:
    """Resolve every quote of the authoring file `src` against `corpus`; write `out`/ if given.

    Raises :class:`GoldenBuildError` listing every problem; nothing is written in that case.
    ``built_at`` defaults to the newest ``created`` date so that rebuilding is byte-identical.
    """
    src = Path(src)
    meta, items = read_authoring(src)
    if not items:
        raise GoldenBuildError([f"{src}:1: no queries"])
    queries, problems = _resolve_all(src, items, corpus)
    if problems:
        raise GoldenBuildError(problems)
    lines = [json.dumps(q.model_dump(mode="json"), ensure_ascii=False, sort_keys=True) for q in queries]
    golden_bytes = ("\n".join(lines) + "\n").encode("utf-8")
    manifest = _manifest(meta, queries, corpus, golden_bytes, src.name, built_at)
    if out is not None:
        _write_atomic_dir(Path(out), {GOLDEN_FILE: golden_bytes, MANIFEST_FILE: _dump_json(manifest)})
    return GoldenSet(queries, manifest)
