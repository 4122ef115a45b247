"""Loading a corpus: a directory of .txt/.md/.html files or a JSONL file of ``{"doc_id", "text"}``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from ragassay.corpus.canonical import CANONICALIZER_NAME, canonicalize_with_map
from ragassay.corpus.html import html_to_text
from ragassay.errors import CorpusError

SUPPORTED_SUFFIXES = (".txt", ".md", ".html", ".htm")


@dataclass(frozen=True, eq=False)
class Document:
    """One document: raw text, canonical text, and the map from canonical to raw offsets.

    For HTML files the raw text is the extracted text (see :mod:`ragassay.corpus.html`), not the markup.
    """

    doc_id: str
    raw: str
    text: str
    raw_starts: np.ndarray = field(repr=False)
    raw_ends: np.ndarray = field(repr=False)
    fmt: str = "txt"
    path: str | None = None
    title: str | None = None

    def raw_span(self, start: int, end: int) -> tuple[int, int]:
        """Raw ``[start, end)`` that canonical ``[start, end)`` came from."""
        if not 0 <= start <= end <= len(self.text):
            raise ValueError(f"span [{start}, {end}) outside document {self.doc_id} of length {len(self.text)}")
        if start == end:
            pos = int(self.raw_starts[start]) if start < len(self.text) else len(self.raw)
            return pos, pos
        return int(self.raw_starts[start]), int(self.raw_ends[end - 1])

    @classmethod
    def from_raw(cls, doc_id: str, raw: str, *, fmt: str = "txt", path: str | None = None,
                 title: str | None = None) -> Document:
        text, starts, ends = canonicalize_with_map(raw)
        return cls(doc_id, raw, text, starts.astype(np.int64), ends.astype(np.int64), fmt, path, title)


class Corpus:
    """Documents keyed by doc_id (kept sorted) and the corpus digest.

    digest = sha256 over the documents sorted by doc_id, each contributing
    ``doc_id UTF-8 || 0x00 || decimal byte length || 0x00 || canonical UTF-8 bytes``.
    """

    def __init__(self, docs: list[Document], source: str | None = None):
        ids = [d.doc_id for d in docs]
        if len(set(ids)) != len(ids):
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            raise CorpusError(f"duplicate doc_id(s) {dupes}: every document needs a unique id")
        self.docs: dict[str, Document] = {d.doc_id: d for d in sorted(docs, key=lambda d: d.doc_id)}
        self.source = source
        self.canonicalizer = CANONICALIZER_NAME
        h = hashlib.sha256()
        for d in self.docs.values():
            body = d.text.encode("utf-8")
            h.update(d.doc_id.encode("utf-8") + b"\x00" + str(len(body)).encode() + b"\x00" + body)
        self.digest = "sha256:" + h.hexdigest()

    def __len__(self) -> int:
        return len(self.docs)

    def __iter__(self) -> Iterator[Document]:
        return iter(self.docs.values())

    def __getitem__(self, doc_id: str) -> Document:
        return self.docs[doc_id]

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.docs

    @property
    def doc_ids(self) -> list[str]:
        return list(self.docs)

    @property
    def n_chars(self) -> int:
        return sum(len(d.text) for d in self.docs.values())


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path}: not valid UTF-8 at byte {e.start}; re-encode the file as UTF-8") from e


def _load_dir(root: Path) -> list[Document]:
    docs = []
    seen: dict[str, Path] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        suffix = path.suffix.lower()
        if suffix not in SUPPORTED_SUFFIXES:
            continue
        rel = path.relative_to(root).as_posix()
        doc_id = rel[: -len(path.suffix)]
        if doc_id in seen:
            raise CorpusError(
                f"{path}: doc_id {doc_id!r} is also produced by {seen[doc_id]}; rename one of the files"
            )
        seen[doc_id] = path
        raw = _read_text(path)
        if suffix in (".html", ".htm"):
            text, title = html_to_text(raw)
            docs.append(Document.from_raw(doc_id, text, fmt="html", path=str(path), title=title))
        else:
            docs.append(Document.from_raw(doc_id, raw, fmt=suffix[1:], path=str(path)))
    if not docs:
        raise CorpusError(f"{root}: no {', '.join(SUPPORTED_SUFFIXES)} files found")
    return docs


def _load_jsonl(path: Path) -> list[Document]:
    docs = []
    problems = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                problems.append(f"{path}:{lineno}: invalid JSON ({e.msg} at column {e.colno})")
                continue
            if not isinstance(rec, dict):
                problems.append(f"{path}:{lineno}: expected an object with doc_id and text")
                continue
            doc_id, text = rec.get("doc_id"), rec.get("text")
            if not isinstance(doc_id, str) or not doc_id:
                problems.append(f"{path}:{lineno}: missing or non-string 'doc_id'")
                continue
            if not isinstance(text, str):
                problems.append(f"{path}:{lineno}: doc {doc_id!r} has missing or non-string 'text'")
                continue
            fmt = rec.get("format", "txt")
            if fmt == "html":
                text, title = html_to_text(text)
                docs.append(Document.from_raw(doc_id, text, fmt="html", path=f"{path}:{lineno}", title=title))
            else:
                docs.append(Document.from_raw(doc_id, text, fmt="txt", path=f"{path}:{lineno}",
                                              title=rec.get("title")))
    if problems:
        raise CorpusError(f"{len(problems)} bad line(s) in {path}; nothing loaded\n" + "\n".join(problems))
    if not docs:
        raise CorpusError(f"{path}: no documents")
    return docs


def load_corpus(path: str | Path) -> Corpus:
    """Load a directory (recursively; doc_id = relative path without the extension) or a JSONL file."""
    p = Path(path)
    if not p.exists():
        raise CorpusError(f"{p}: no such file or directory; pass a corpus directory or a .jsonl file")
    docs = _load_dir(p) if p.is_dir() else _load_jsonl(p)
    return Corpus(docs, source=str(p))


def bundled_corpus_dir() -> Path:
    """The license corpus shipped with ragassay."""
    return Path(str(resources.files("ragassay") / "data" / "licenses"))
