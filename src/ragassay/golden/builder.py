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
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from rapidfuzz import process

from ragassay import fsio
from ragassay.corpus import CANONICALIZER_NAME, Corpus
from ragassay.errors import GoldenBuildError, InputError
from ragassay.golden.labels import HitRule
from ragassay.golden.resolve import closest_match, resolve_quote
from ragassay.golden.schema import MAX_GRADE, AuthoredMeta, AuthoredQuery, Evidence, GoldenQuery
from ragassay.golden.set import GOLDEN_FILE, MANIFEST_FILE, GoldenSet, content_version, derived_counts
from ragassay.yamlio import load_yaml_node, read_utf8

BUILDER_VERSION = "ragassay-golden-builder-v1"
OUTPUT_KIND = "golden"
_META_KEYS = set(AuthoredMeta.model_fields) | {"queries"}
_SHAPE = "expected a list of queries or a mapping with a `queries:` list"


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


def _key_lines(node: yaml.Node | None) -> dict[str, int]:
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}


def _check_meta(path: Path, meta: dict, lines: dict[str, int], default_line: int) -> dict:
    """Validate the top-level keys; every problem is a ``file:line`` line of one GoldenBuildError."""
    unknown = sorted(str(k) for k in meta if k not in _META_KEYS)
    if unknown:
        line = min(lines.get(k, default_line) for k in unknown)
        raise InputError(f"{path}:{line}: unknown top-level key(s) {unknown}; allowed: {sorted(_META_KEYS)}")
    problems = []
    try:
        checked = AuthoredMeta.model_validate(meta)
    except ValidationError as e:
        for err in e.errors():
            key = str(err["loc"][0]) if err["loc"] else ""
            loc = ".".join(str(x) for x in err["loc"])
            problems.append(f"{path}:{lines.get(key, default_line)}: {loc}: {err['msg']}")
        raise GoldenBuildError(problems) from e
    try:
        HitRule.parse(checked.hit_rule)
    except InputError as e:
        raise GoldenBuildError([f"{path}:{lines.get('hit_rule', default_line)}: {e}"]) from e
    return checked.model_dump()


def _read_yaml(path: Path) -> tuple[dict, list[_Item]]:
    data, root = load_yaml_node(path, "golden set")
    if data is None:
        raise InputError(f"{path}:1: the file holds no YAML document; {_SHAPE}")
    if isinstance(data, list):
        meta, queries, qnode = {}, data, root
    elif isinstance(data, dict):
        if "queries" not in data:
            raise InputError(f"{path}:1: no `queries:` key; {_SHAPE}")
        queries = data["queries"]
        qnode = next(v for k, v in root.value if getattr(k, "value", None) == "queries")
        if not isinstance(queries, list):
            got = "nothing" if queries is None else f"a {type(queries).__name__}"
            raise InputError(f"{path}:{qnode.start_mark.line + 1}: `queries:` must be a list of queries, "
                             f"got {got}")
        meta = {k: v for k, v in data.items() if k != "queries"}
    else:
        raise InputError(f"{path}:{root.start_mark.line + 1}: got a {type(data).__name__}; {_SHAPE}")
    meta = _check_meta(path, meta, _key_lines(root), 1)
    items = []
    for q, node in zip(queries, qnode.value, strict=True):
        line, ev_lines = _node_lines(node)
        items.append(_Item(q, line, ev_lines))
    return meta, items


def _unique_pairs(path: Path, lineno: int):
    """``object_pairs_hook`` refusing a key given twice (``json`` would keep the last one silently)."""
    def hook(pairs: list[tuple[str, Any]]) -> dict:
        out: dict = {}
        for k, v in pairs:
            if k in out:
                raise InputError(f"{path}:{lineno}: key {k!r} given twice; keep one")
            out[k] = v
        return out
    return hook


def _read_jsonl(path: Path) -> tuple[dict, list[_Item]]:
    items: list[_Item] = []
    meta: dict = {}
    meta_line = None
    problems = []
    for lineno, line in enumerate(read_utf8(path, "golden set").split("\n"), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line, object_pairs_hook=_unique_pairs(path, lineno))
        except json.JSONDecodeError as e:
            problems.append(f"{path}:{lineno}: invalid JSON ({e.msg} at column {e.colno})")
            continue
        except InputError as e:
            problems.append(str(e))
            continue
        if isinstance(rec, dict) and "type" in rec:
            if rec["type"] != "meta":
                problems.append(f"{path}:{lineno}: unknown record type {rec['type']!r}; only "
                                "{\"type\": \"meta\"} lines and query objects are allowed")
            elif meta_line is not None:
                problems.append(f"{path}:{lineno}: second meta line (first at line {meta_line}); keep one")
            elif items:
                problems.append(f"{path}:{lineno}: the meta line must come before the first query")
            else:
                meta_line = lineno
                meta = {k: v for k, v in rec.items() if k != "type"}
            continue
        ev = rec.get("evidence") if isinstance(rec, dict) else None
        items.append(_Item(rec, lineno, [lineno] * len(ev) if isinstance(ev, list) else []))
    if problems:
        raise GoldenBuildError(problems)
    if "queries" in meta:
        raise InputError(f"{path}:{meta_line}: unknown top-level key(s) ['queries'] in the meta line; "
                         "write one query per line")
    meta = _check_meta(path, meta, {}, meta_line or 1)
    return meta, items


def read_authoring(path: str | Path) -> tuple[dict, list[_Item]]:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such golden-set source; pass a .yaml/.yml or .jsonl authoring file")
    if p.is_dir():
        raise InputError(f"{p}: is a folder; pass a .yaml/.yml or .jsonl authoring file")
    if p.suffix.lower() in (".yaml", ".yml"):
        return _read_yaml(p)
    if p.suffix.lower() == ".jsonl":
        return _read_jsonl(p)
    raise InputError(f"{p}: unsupported golden-set format {p.suffix!r}; use .yaml, .yml or .jsonl")


def _validation_problems(path: Path, item: _Item, err: ValidationError) -> list[str]:
    """One ``file:line: query_id: field: message`` per schema error; evidence errors point at their item."""
    qid = item.data.get("query_id", "?") if isinstance(item.data, dict) else "?"
    out = []
    for e in err.errors():
        loc = e["loc"]
        if not loc and e["type"] == "model_type":
            msg = f"each query must be a mapping (query_id, question, stratum, ...), got {type(item.data).__name__}"
        else:
            msg = f"{'.'.join(str(x) for x in loc)}: {e['msg']}" if loc else e["msg"]
        line = item.line
        if len(loc) >= 2 and loc[0] == "evidence" and isinstance(loc[1], int) and loc[1] < len(item.evidence_lines):
            line = item.evidence_lines[loc[1]]
        out.append(f"{path}:{line}: {qid}: {msg}")
    return out


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
            problems.extend(_validation_problems(path, item, q))
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
        problems.extend(f"{where}: {q.query_id}: {p}" for p in _agent_problems(q))
        evidence: list[Evidence] = []
        seen_ev: dict[tuple, int] = {}
        for j, ev in enumerate(q.evidence):
            ev_where = f"{path}:{item.evidence_lines[j] if j < len(item.evidence_lines) else item.line}"
            key = (ev.doc_id, ev.quote, ev.occurrence)
            if key in seen_ev:
                problems.append(f"{ev_where}: {q.query_id}: the same quote from doc {ev.doc_id} is given twice "
                                f"(first as evidence item {seen_ev[key] + 1}); keep one with its grade")
                continue
            seen_ev[key] = j
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
                                     quote=ev.quote, match=r.match,
                                     **({"hop": ev.hop} if ev.hop is not None else {})))
        built.append(GoldenQuery(
            query_id=q.query_id, question=q.question, stratum=q.stratum, tags=list(q.tags),
            answerable=q.answerable, evidence=evidence, reference_answer=q.reference_answer,
            nuggets=list(q.nuggets), source=q.source, created=q.created.isoformat() if q.created else None,
            **{k: list(getattr(q, k)) for k in ("subgoals", "expected_tools") if getattr(q, k)},
        ))
    return built, problems


def _agent_problems(q: AuthoredQuery) -> list[str]:
    """The agent fields' rules (spec §12): hops named on every evidence item or on none, numbered 1, 2, …
    without a gap; sub-goal ids unique."""
    out = []
    hops = [e.hop for e in q.evidence]
    given = [h for h in hops if h is not None]
    if given and len(given) != len(hops):
        missing = [j + 1 for j, h in enumerate(hops) if h is None]
        out.append(f"evidence item(s) {missing} have no `hop` while others do; give every evidence item of a "
                   "multi-hop query its hop (1, 2, ...)")
    elif given and sorted(set(given)) != list(range(1, max(given) + 1)):
        gaps = sorted(set(range(1, max(given) + 1)) - set(given))
        out.append(f"hops must be numbered 1, 2, ... without a gap; hop(s) {gaps} have no evidence "
                   f"(hops given: {sorted(set(given))})")
    ids = [g.id for g in q.subgoals]
    if len(set(ids)) != len(ids):
        out.append(f"duplicate subgoal ids {sorted(i for i, c in Counter(ids).items() if c > 1)}; give each "
                   "subgoal its own id")
    return out


def _resolve_grouped_by_doc(parsed, corpus: Corpus) -> dict:
    """Resolve every distinct (doc, quote, occurrence) once, one document at a time.

    Grouping by document keeps each document's search structures hot while its quotes are resolved.
    """
    wanted = sorted({(ev.doc_id, ev.quote, ev.occurrence or 0)
                     for q in parsed if isinstance(q, AuthoredQuery)
                     for ev in q.evidence if ev.doc_id in corpus})
    return {(d, quote, occ or None): resolve_quote(corpus[d].text, quote, occ or None)
            for d, quote, occ in wanted}


KAPPA_FIELDS = ("kappa_binary", "kappa_graded")


def computed_agreement(paths: Sequence[str | Path], queries: list[GoldenQuery], threshold: int, *,
                       skip_single: bool = False) -> dict:
    """The manifest's ``agreement`` block from annotators' label files: :func:`ragassay.golden.agree.agree`
    with its defaults (1,000 seeded bootstrap resamples, 95%) at the set's ``threshold``, so every figure equals
    what ``ragassay golden agree FILES --golden G`` prints for the same files. Kappa is Cohen's for two
    annotators and Light's (the mean over pairs) for more; an undefined figure (0/0) is None with its reason.
    Each label file is named with its sha256, so the figures can be traced to the labels they came from."""
    from ragassay.golden.agree import agree, read_labels

    ids = {q.query_id for q in queries}
    labels = read_labels(paths, query_ids=ids.__contains__)
    rep = agree(labels, threshold=threshold, skip_single=skip_single)
    overall = rep["overall"]
    return {
        "n_items": overall["n_items"], "n_labels": overall["n_labels"], "n_single": rep["n_single"],
        "threshold": threshold, "kappa_method": overall["kappa_method"],
        **{k: overall[k] for k in (*KAPPA_FIELDS, "alpha_ordinal", "alpha_nominal")},
        "n_resamples": rep["n_resamples"], "seed": rep["seed"], "confidence": rep["confidence"],
        "label_files": [{"file": Path(p).name, "annotator": a,
                         "sha256": hashlib.sha256(Path(p).read_bytes()).hexdigest()}
                        for p, a in zip(paths, labels.annotators, strict=True)],
    }


def _kappa_fields(meta: dict, agreement: dict | None) -> dict:
    """annotators, kappa_binary, kappa_graded, kappa_source and agreement of the manifest.

    With label files the kappas are the computed ones (``kappa_source: computed``) and any the authoring
    file declares are kept under ``agreement.declared``, for :func:`agreement_warnings`; without, the declared
    values are recorded as ``declared`` (typed by hand, not checked); with neither, the source is None."""
    declared = {k: meta.get(k) for k in KAPPA_FIELDS if meta.get(k) is not None}
    if agreement is None:
        return {"annotators": list(meta.get("annotators") or []), **{k: meta.get(k) for k in KAPPA_FIELDS},
                "kappa_source": "declared" if declared else None, "agreement": None}
    if declared:
        declared["annotators"] = list(meta.get("annotators") or [])
    return {"annotators": [f["annotator"] for f in agreement["label_files"]],
            **{k: agreement[k]["value"] for k in KAPPA_FIELDS}, "kappa_source": "computed",
            "agreement": {**agreement, "declared": declared or None}}


def agreement_warnings(manifest: dict) -> list[str]:
    """One line when the authoring file declared kappa values that the label files' computed ones replaced."""
    agreement = manifest.get("agreement") or {}
    declared = agreement.get("declared")
    if not declared:
        return []

    def show(fields: dict) -> str:
        return ", ".join(f"{k} {'undefined' if fields.get(k) is None else format(fields[k], '.3f')}"
                         for k in KAPPA_FIELDS)

    who = f" (annotators {', '.join(declared['annotators'])})" if declared["annotators"] else ""
    return [f"the authoring file declares {show(declared)}{who}; the manifest records the values computed from "
            f"the label files instead: {show(manifest)} (annotators {', '.join(manifest['annotators'])}); drop "
            "the declared ones from the authoring file"]


def _manifest(meta: dict, queries: list[GoldenQuery], corpus: Corpus, golden_bytes: bytes,
              src_name: str, built_at: str | None, agreement: dict | None = None) -> dict:
    sha = hashlib.sha256(golden_bytes).hexdigest()
    name = meta.get("dataset") or Path(src_name).stem
    created = sorted(q.created for q in queries if q.created)
    if built_at is None:
        built_at = (created[-1] + "T00:00:00Z") if created else "1970-01-01T00:00:00Z"
    hit_rule = str(HitRule.parse(meta.get("hit_rule") or "any_overlap"))
    threshold = int(meta.get("relevance_threshold", 2))
    counts = derived_counts(queries)
    manifest = {
        "dataset": name,
        "dataset_version": content_version(meta.get("dataset_version") or name, sha, hit_rule, threshold),
        "golden_sha256": sha,
        "corpus_digest": corpus.digest,
        "n_docs": len(corpus),
        "canonicalizer": CANONICALIZER_NAME,
        "n_queries": counts["n_queries"],
        "n_answerable": counts["n_answerable"],
        "n_negative": counts["n_negative"],
        "strata": counts["strata"],
        "label_type": counts["label_type"],
        "relevance_threshold": threshold,
        "hit_rule": hit_rule,
        **_kappa_fields(meta, agreement),
        "source_mix": counts["source_mix"],
        "n_evidence": counts["n_evidence"],
        "match_kinds": counts["match_kinds"],
        "n_with_nuggets": counts["n_with_nuggets"],
        "generator": meta.get("generator") or {"kind": "human"},
        "description": meta.get("description"),
        "source_file": src_name,
        "builder": BUILDER_VERSION,
        "built_at": built_at,
    }
    return manifest


def _dump_json(obj: Any) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=False) + "\n").encode("utf-8")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic_dir(out: Path, files: dict[str, bytes]) -> None:
    """Write all files into a sibling temp dir, then swap it into place — only where the check allows.

    ``out`` may be new, empty, or an earlier golden build holding nothing else (see
    :func:`ragassay.fsio.check_output_dir`); anything else is refused before a byte is written. The last
    file in ``files`` is the one readers look for (the manifest), so an empty folder that is filled in
    place (it cannot be swapped if it is someone's working directory) is never seen half-built.
    """
    out = Path(os.path.abspath(out))
    if out.is_symlink() and out.exists():
        out = out.resolve()
    fsio.check_output_dir(out, OUTPUT_KIND)
    tmp = fsio.make_temp_dir(out.parent, f".{out.name}.tmp-", target=out)
    try:
        for name, data in files.items():
            with open(tmp / name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        _fsync_dir(tmp)
        if out.is_dir() and not any(out.iterdir()):
            for name in files:
                os.replace(tmp / name, out / name)
            tmp.rmdir()
        elif out.exists():
            old = fsio.make_temp_dir(out.parent, f".{out.name}.old-", target=out)
            os.replace(out, old / out.name)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
        _fsync_dir(out.parent)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise InputError(f"{out}: cannot write the golden set ({e.strerror or e}); "
                             "choose an empty or new folder you can write to") from e
        raise


def build_golden(src: str | Path, corpus: Corpus, out: str | Path | None = None, *,
                 built_at: str | None = None, agreement: Sequence[str | Path] = (),
                 skip_single: bool = False) -> GoldenSet:
    """Resolve every quote of the authoring file `src` against `corpus`; write `out`/ if given.

    Raises :class:`GoldenBuildError` listing every problem; nothing is written in that case.
    ``built_at`` defaults to the newest ``created`` date so that rebuilding is byte-identical.
    ``agreement``: two or more annotators' label files (``golden agree``'s format); the manifest's
    annotators and kappas are then computed from them (:func:`computed_agreement`; ``skip_single`` as there),
    never copied, and a bad label file raises :class:`InputError` listing every problem.
    """
    src = Path(src)
    if skip_single and not agreement:
        raise InputError("--skip-single applies to label files; give them with --agreement, or drop it")
    if out is not None:
        # refuse a bad -o before the (possibly long) build, and again just before the swap
        fsio.check_output_dir(Path(os.path.abspath(out)), OUTPUT_KIND)
    meta, items = read_authoring(src)
    if not items:
        raise GoldenBuildError([f"{src}:1: no queries"])
    queries, problems = _resolve_all(src, items, corpus)
    if problems:
        raise GoldenBuildError(problems)
    computed = (computed_agreement(agreement, queries, int(meta.get("relevance_threshold", 2)),
                                   skip_single=skip_single) if agreement else None)
    lines = [json.dumps(q.model_dump(mode="json"), ensure_ascii=False, sort_keys=True) for q in queries]
    golden_bytes = ("\n".join(lines) + "\n").encode("utf-8")
    manifest = _manifest(meta, queries, corpus, golden_bytes, src.name, built_at, computed)
    if out is not None:
        _write_atomic_dir(Path(out), {GOLDEN_FILE: golden_bytes, MANIFEST_FILE: _dump_json(manifest)})
    return GoldenSet(queries, manifest)
