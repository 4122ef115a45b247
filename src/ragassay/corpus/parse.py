"""Parsers to compare by span survival: the table-aware HTML parser, a naive tag-stripper and a PDF path.

* ``table-aware`` (the loader's): one table row per line, cells joined by `` | `` (:mod:`.html`).
* ``naive``: delete every tag and decode entities; nothing is dropped and nothing is separated, so table
  cells run into each other ("BSD-3-ClauseYes: the …") and style sheets stay in the text. It stands for the
  regex strippers found in many ingestion scripts.
* PDF (``.pdf`` under either parser): text extraction through pypdf, pages joined by a blank line.

``.txt`` and ``.md`` pass through unchanged under every parser. A user's own parser output is read with
:func:`load_parsed` (a folder of ``.txt`` files or a JSONL file of ``{"doc_id", "text"}``), and reference texts
and tables to measure a parse against with :func:`read_references`.
"""

from __future__ import annotations

import html
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ragassay.corpus.html import html_to_text
from ragassay.corpus.loader import decode_text
from ragassay.errors import CorpusError, InputError

PARSERS = ("table-aware", "naive")
PARSED_SUFFIXES = (".txt", ".md", ".html", ".htm", ".pdf")
_TAG = re.compile(r"<[^>]*>")


@dataclass(frozen=True)
class ParsedDoc:
    doc_id: str
    text: str
    fmt: str  # txt, md, html, pdf
    n_bytes: int
    n_pages: int | None = None
    source_html: str | None = None  # markup, for table cell density


def naive_strip(markup: str) -> str:
    """Every tag deleted, entities decoded: what ``re.sub('<[^>]*>', '', page)`` ingestion gives."""
    return html.unescape(_TAG.sub("", markup))


def pdf_text(data: bytes, where: str) -> tuple[str, int]:
    """(text, page count) of a PDF via pypdf; an unreadable file is a :class:`CorpusError`."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [p.extract_text() or "" for p in reader.pages]
    except (PdfReadError, ValueError, KeyError) as e:
        raise CorpusError(f"{where}: not a readable PDF ({e}); re-export it or remove it from the folder") from e
    return "\n\n".join(pages), len(pages)


def parse_file(path: Path, doc_id: str, parser: str = "table-aware") -> ParsedDoc:
    if parser not in PARSERS:
        raise InputError(f"unknown parser {parser!r}; use one of {', '.join(PARSERS)}")
    data = path.read_bytes()
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        text, pages = pdf_text(data, str(path))
        return ParsedDoc(doc_id, text, "pdf", len(data), pages)
    raw = decode_text(data, str(path))
    if suffix in (".html", ".htm"):
        text = html_to_text(raw)[0] if parser == "table-aware" else naive_strip(raw)
        return ParsedDoc(doc_id, text, "html", len(data), None, raw)
    return ParsedDoc(doc_id, raw, suffix[1:], len(data))


def parse_dir(root: str | Path, parser: str = "table-aware") -> list[ParsedDoc]:
    """Parse every supported file under ``root`` (doc_id = relative path without the suffix)."""
    root = Path(root)
    if not root.is_dir():
        raise CorpusError(f"{root}: not a folder; pass the folder of source documents")
    out = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix.lower() in PARSED_SUFFIXES:
            rel = path.relative_to(root).as_posix()
            out.append(parse_file(path, rel[: -len(path.suffix)], parser))
    if not out:
        raise CorpusError(f"{root}: no {', '.join(PARSED_SUFFIXES)} files found")
    return out


def load_parsed(path: str | Path) -> list[ParsedDoc]:
    """Another parser's output: a folder of ``.txt`` files (doc_id = relative path without ``.txt``) or a JSONL
    file of ``{"doc_id", "text"}`` lines (optional ``"format"`` and ``"n_bytes"`` of the source)."""
    p = Path(path)
    if p.is_dir():
        docs = []
        for f in sorted(p.rglob("*.txt")):
            rel = f.relative_to(p).as_posix()[:-4]
            text = decode_text(f.read_bytes(), str(f))
            docs.append(ParsedDoc(rel, text, "txt", len(text.encode("utf-8"))))
        if not docs:
            raise CorpusError(f"{p}: no .txt files of parsed text found")
        return docs
    if not p.is_file():
        raise CorpusError(f"{p}: no such file or folder; pass a folder of .txt files or a .jsonl file")
    docs, problems = [], []
    for lineno, line in enumerate(decode_text(p.read_bytes(), str(p)).split("\n"), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(f"{p}:{lineno}: invalid JSON ({e.msg})")
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("doc_id"), str) or not isinstance(rec.get("text"), str):
            problems.append(f"{p}:{lineno}: expected an object with string doc_id and text")
            continue
        nb = rec.get("n_bytes")
        docs.append(ParsedDoc(rec["doc_id"], rec["text"], str(rec.get("format", "txt")),
                              nb if isinstance(nb, int) and nb > 0 else len(rec["text"].encode("utf-8"))))
    if problems:
        raise CorpusError(f"{len(problems)} bad line(s) in {p}; nothing loaded\n" + "\n".join(problems))
    if not docs:
        raise CorpusError(f"{p}: no documents")
    return docs


REFERENCE_KINDS = {  # kind: (file suffixes in a folder, the JSONL field, what the content must be)
    "text": ((".txt",), "text", "reference plain text"),
    "tables": ((".html", ".htm"), "html", "reference HTML tables"),
}
_TABLE_TAG = re.compile(r"<table\b", re.I)


def read_references(path: str | Path, kind: str, doc_ids) -> tuple[dict[str, str], list[str]]:
    """References for :func:`~ragassay.corpus.survival.parse_fidelity`: {doc_id: content} and every problem
    found, one line each naming ``file`` or ``file:line`` and a fix (nothing is dropped silently).

    ``kind`` is ``text`` (a folder of ``.txt`` files, or JSONL of ``{"doc_id", "text"}``) or ``tables`` (a
    folder of ``.html`` files, or JSONL of ``{"doc_id", "html"}``, each holding at least one ``<table>``).
    In a folder, doc_id is the relative path without the suffix, as for the parse; files of the other kind are
    left for it, hidden files skipped, and any other file is a problem. Empty content, a repeated doc_id, a
    doc_id not in ``doc_ids`` (the parse's documents), a bad JSON line and a tables reference without a
    ``<table>`` are problems.
    """
    import difflib

    suffixes, field, what = REFERENCE_KINDS[kind]
    known = sorted(doc_ids)
    ids = set(known)
    p = Path(path)
    shape = (f"a folder of {'/'.join(suffixes)} files or a .jsonl file of "
             f'{{"doc_id": ..., "{field}": ...}} lines')
    refs: dict[str, str] = {}
    seen: dict[str, str] = {}
    problems: list[str] = []

    def add(doc_id: str, content: str, where: str) -> None:
        if doc_id not in ids:
            near = difflib.get_close_matches(doc_id, known, n=1)
            hint = f"closest: {near[0]!r}" if near else f"ids look like {known[0]!r}" if known else "it is empty"
            problems.append(f"{where}: doc_id {doc_id!r} is not a document of the parse ({hint}); a doc_id is "
                            "the source file's relative path without its suffix")
        elif not content.strip():
            problems.append(f"{where}: empty {what} for doc {doc_id!r}; give it or leave the document out")
        elif kind == "tables" and not _TABLE_TAG.search(content):
            problems.append(f"{where}: no <table> element for doc {doc_id!r}; give the tables as HTML markup")
        elif doc_id in seen:
            problems.append(f"{where}: doc_id {doc_id!r} already given at {seen[doc_id]}; give each "
                            "document once")
        else:
            refs[doc_id], seen[doc_id] = content, where

    if p.is_dir():
        every = [f for f in sorted(p.rglob("*")) if f.is_file() and not f.name.startswith(".")]
        files = [f for f in every if f.suffix.lower() in suffixes]
        # a folder may hold both kinds (one folder for both options); any other file is named, not skipped
        any_kind = {x for sufs, _, _ in REFERENCE_KINDS.values() for x in sufs}
        problems += [f"{f}: not a reference file ({what} are {'/'.join(suffixes)} files); rename it or move it "
                     "out of the folder" for f in every if f.suffix.lower() not in any_kind]
        for f in files:
            rel = f.relative_to(p).as_posix()
            add(rel[: -len(f.suffix)], decode_text(f.read_bytes(), str(f)), str(f))
        if not files:
            problems.append(f"{p}: no {'/'.join(suffixes)} files found; pass {shape}")
        return refs, problems
    if not p.is_file():
        return refs, [f"{p}: no such file or folder; pass {shape}"]
    if p.suffix.lower() in suffixes:  # one reference file, not JSONL: one line, not one per line of it
        return refs, [f"{p}: a single {p.suffix} file; put it in a folder (its doc_id is its path there without "
                      f"the suffix) and pass the folder, or pass {shape}"]
    lines = decode_text(p.read_bytes(), str(p)).split("\n")
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(f"{p}:{lineno}: invalid JSON ({e.msg}); write one JSON object per line")
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("doc_id"), str) or not isinstance(rec.get(field), str):
            problems.append(f"{p}:{lineno}: expected an object with string doc_id and {field}, e.g. "
                            f'{{"doc_id": "{known[0] if known else "a"}", "{field}": "..."}}')
            continue
        add(rec["doc_id"], rec[field], f"{p}:{lineno}")
    if not seen and not problems:
        problems.append(f"{p}: empty file; pass {shape}")
    return refs, problems

