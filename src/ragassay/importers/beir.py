"""BEIR-layout datasets -> a ragassay corpus and a golden set with document-level labels.

A BEIR folder holds ``corpus.jsonl`` (``{"_id", "title", "text"}`` per line), ``queries.jsonl``
(``{"_id", "text"}``) and ``qrels/<split>.tsv`` (``query-id  corpus-id  score`` with a header line). BEIR
judges whole documents, so the golden set says so: its manifest states the ``doc`` hit rule (a retrieved unit
is relevant when it comes from a relevant document) and relevance threshold 1 (BEIR counts score >= 1 as
relevant). Each label's quote is the document's whole canonical text, which resolves exactly once.

Only queries with at least one judgement in the split are kept (BEIR evaluates no others); a query whose
judgements are all 0 is a negative query. Written with the golden builder, so the usual manifest, content
version and atomic folder swap apply.

BEIR reports nDCG as pytrec_eval computes trec_eval's ``ndcg_cut``: linear gain (a document of grade g gains
g, not 2^g - 1). The manifest records it, ``generator.gain`` = ``linear`` (:data:`BEIR_GAIN`); ragassay
scores a set whose manifest says so with linear gain (``--gain`` overrides), which gives BEIR-comparable nDCG.
"""

from __future__ import annotations

import json
from pathlib import Path

from ragassay.errors import InputError
from ragassay.fsio import atomic_write_bytes, check_output_dir, make_dir, mark_output_dir

OUTPUT_KIND = "beir-import"
STRATUM = "beir"
BEIR_GAIN = "linear"  # BEIR's nDCG: pytrec_eval's ndcg_cut, gain = grade


def _jsonl(path: Path, need: tuple[str, ...]) -> list[tuple[int, dict]]:
    if not path.is_file():
        raise InputError(f"{path}: file not found; a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/")
    out = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{n}: not valid JSON ({e.msg}); fix the line") from None
            missing = [k for k in need if not isinstance(rec, dict) or not isinstance(rec.get(k), str)]
            if missing:
                raise InputError(f"{path}:{n}: needs string field(s) {missing}; BEIR lines look like "
                                 f'{{"_id": "...", "text": "..."}}')
            out.append((n, rec))
    if not out:
        raise InputError(f"{path}: no records")
    return out


def _qrels(path: Path) -> dict[str, dict[str, int]]:
    if not path.is_file():
        raise InputError(f"{path}: qrels file not found; pick a split that exists under qrels/ (--split)")
    out: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            parts = line.rstrip("\n").split("\t")
            if not line.strip() or (n == 1 and parts[0] == "query-id"):
                continue
            if len(parts) != 3:
                raise InputError(f"{path}:{n}: expected 3 tab-separated fields (query-id, corpus-id, score), got "
                                 f"{len(parts)}")
            try:
                score = int(parts[2])
            except ValueError:
                raise InputError(f"{path}:{n}: score {parts[2]!r} is not an integer") from None
            if not 0 <= score <= 3:
                raise InputError(f"{path}:{n}: score {score} is outside ragassay's grade scale 0-3; rescale the "
                                 f"qrels")
            out.setdefault(parts[0], {})[parts[1]] = score
    return out


def import_beir(src: str | Path, out: str | Path, *, split: str = "test", name: str | None = None):
    """Convert the BEIR folder ``src`` into ``out/corpus.jsonl``, ``out/golden.jsonl`` (the authoring file)
    and the built golden set ``out/golden/``; returns ``(corpus, golden)``."""
    from ragassay.corpus import load_corpus
    from ragassay.golden import build_golden

    src, out = Path(src), Path(out)
    if not src.is_dir():
        raise InputError(f"{src}: not a folder; give the BEIR dataset folder (corpus.jsonl, queries.jsonl, qrels/)")
    check_output_dir(out, OUTPUT_KIND)
    docs = _jsonl(src / "corpus.jsonl", ("_id", "text"))
    queries = _jsonl(src / "queries.jsonl", ("_id", "text"))
    qrels = _qrels(src / "qrels" / f"{split}.tsv")
    seen: dict[str, int] = {}
    lines = []
    for n, d in docs:
        if d["_id"] in seen:
            raise InputError(f"{src / 'corpus.jsonl'}:{n}: doc {d['_id']!r} repeats line {seen[d['_id']]}")
        seen[d["_id"]] = n
        title = d.get("title") if isinstance(d.get("title"), str) else ""
        text = f"{title}\n\n{d['text']}" if title.strip() else d["text"]
        lines.append(json.dumps({"doc_id": d["_id"], "text": text}, ensure_ascii=False))
    unknown = sorted({(q, d) for q, per in qrels.items() for d in per if d not in seen})
    if unknown:
        raise InputError(f"{src / 'qrels' / (split + '.tsv')}: {len(unknown)} judged doc(s) not in corpus.jsonl, "
                         f"e.g. query {unknown[0][0]} doc {unknown[0][1]}; use the dataset's own corpus")
    make_dir(out)
    mark_output_dir(out, OUTPUT_KIND)
    atomic_write_bytes(out / "corpus.jsonl", ("\n".join(lines) + "\n").encode("utf-8"))
    corpus = load_corpus(out / "corpus.jsonl")
    meta = {"type": "meta", "dataset": name or src.name, "hit_rule": "doc", "relevance_threshold": 1,
            "description": f"BEIR {src.name} ({split} split), document-level labels; BEIR's nDCG uses "
                           f"{BEIR_GAIN} gain (score with --gain {BEIR_GAIN} to compare)",
            "generator": {"kind": "beir-import", "split": split, "gain": BEIR_GAIN}}
    authored = [json.dumps(meta, ensure_ascii=False)]
    for _, q in queries:
        judged = qrels.get(q["_id"])
        if not judged:
            continue
        answerable = any(g >= 1 for g in judged.values())
        evidence = [{"doc_id": d, "quote": corpus.docs[d].text, "grade": g}
                    for d, g in sorted(judged.items()) if answerable and corpus.docs[d].text.strip()]
        authored.append(json.dumps({"query_id": q["_id"], "question": q["text"], "stratum": STRATUM,
                                    "answerable": answerable, "evidence": evidence}, ensure_ascii=False))
    if len(authored) == 1:
        raise InputError(f"{src}: no query of queries.jsonl has judgements in qrels/{split}.tsv")
    atomic_write_bytes(out / "golden.jsonl", ("\n".join(authored) + "\n").encode("utf-8"))
    golden = build_golden(out / "golden.jsonl", corpus, out / "golden")
    return corpus, golden
