"""Parsers to compare by span survival: the table-aware HTML parser, a naive tag-stripper and a PDF path.

* ``table-aware`` (the loader's): one table row per line, cells joined by `` | `` (:mod:`.html`).
* ``naive``: delete every tag and decode entities; nothing is dropped and nothing is separated, so table
  cells run into each other ("BSD-3-ClauseYes: the …") and style sheets stay in the text. It stands for the
  regex strippers found in many ingestion scripts.
* PDF (``.pdf`` under either parser): text extraction through pypdf, pages joined by a blank line.

``.txt`` and ``.md`` pass through unchanged under every parser. A user's own parser output is read with
:func:`load_parsed` (a folder of ``.txt`` files or a JSONL file of ``{"doc_id", "text"}``).
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
