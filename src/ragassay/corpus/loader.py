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
        # the map is held for every document of the run: 32-bit offsets halve it, and raw_span returns ints
        if len(raw) < 2**31:
            n = len(text)
            if n == len(raw) and text == raw:
                shared_starts, shared_ends = _identity_map(n)
                if np.array_equal(starts, shared_starts) and np.array_equal(ends, shared_ends):
                    return cls(doc_id, raw, text, shared_starts, shared_ends, fmt, path, title)
            return cls(doc_id, raw, text, starts.astype(np.int32), ends.astype(np.int32), fmt, path, title)
        return cls(doc_id, raw, text, starts, ends, fmt, path, title)


# One read-only arange shared by every document that canonicalization left as it was: their maps (8 bytes
# per character, 48 MB for 2,000 documents of 3,000 characters) become views of it. Grown when a longer
# document comes; documents keep the array their views were cut from.
_IDENTITY = np.arange(1, dtype=np.int32)
_IDENTITY.flags.writeable = False


def _identity_map(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the identity map of ``n`` characters: ``arange(n)`` and ``arange(1, n + 1)``."""
    global _IDENTITY
    if len(_IDENTITY) < n + 1:
        grown = np.arange(max(n + 1, 2 * len(_IDENTITY)), dtype=np.int32)
        grown.flags.writeable = False
        _IDENTITY = grown
    return _IDENTITY[:n], _IDENTITY[1:n + 1]


class Corpus:
    """Documents keyed by doc_id (kept sorted) and the corpus digest.

    digest = sha256 over the documents sorted by doc_id, each contributing
    ``doc_id UTF-8 || 0x00 || decimal byte length || 0x00 || canonical UTF-8 bytes``.
    """

    def __init__(self, docs: list[Document], source: str | None = None, skipped: list[str] | None = None):
        ids = [d.doc_id for d in docs]
        if len(set(ids)) != len(ids):
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            raise CorpusError(f"duplicate doc_id(s) {dupes}: every document needs a unique id")
        self.docs: dict[str, Document] = {d.doc_id: d for d in sorted(docs, key=lambda d: d.doc_id)}
        self.source = source
        # files under a corpus folder that were not loaded, with the reason ("notes.pdf: unsupported suffix")
        self.skipped = list(skipped or [])
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


_UTF16_BOMS = {b"\xff\xfe": "utf-16-le", b"\xfe\xff": "utf-16-be"}


def decode_text(data: bytes, where: str) -> str:
    """Corpus bytes -> text: UTF-8 (a BOM is kept and later removed by canonicalization), or UTF-16 with a
    byte-order mark, which says unambiguously how to read it. Anything else is refused, naming the byte:
    NUL bytes mean a binary file or UTF-16 without a BOM, which UTF-8 decoding would accept as garbage."""
    if data[:4] not in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff"):
        for bom, codec in _UTF16_BOMS.items():
            if data.startswith(bom):
                try:
                    return data[2:].decode(codec)
                except UnicodeDecodeError as e:
                    raise CorpusError(f"{where}: not valid {codec.upper()} text (bytes at offset "
                                      f"{e.start + 2}); re-encode the file as UTF-8") from e
    nul = data.find(b"\x00")
    if nul >= 0:
        raise CorpusError(f"{where}: contains NUL bytes (first at offset {nul}); a binary file, or UTF-16/32 "
                          "text without a byte-order mark? convert it to UTF-8 text or remove it")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(f"{where}: not UTF-8 text (byte 0x{data[e.start]:02X} at offset {e.start}); "
                          "re-encode the file as UTF-8") from e


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise CorpusError(f"{path}: cannot read the file ({e.strerror or e}); fix its permissions or remove it "
                          "from the corpus") from e


def _load_dir(root: Path) -> tuple[list[Document], list[str]]:
    docs = []
    skipped = []
    seen: dict[str, Path] = {}
    try:
        paths = sorted(root.rglob("*"))
    except OSError as e:
        raise CorpusError(f"{root}: cannot list the corpus folder ({e.strerror or e})") from e
    for path in paths:
        rel = path.relative_to(root).as_posix()
        if path.is_dir():
            continue
        suffix = path.suffix.lower()
        if not path.is_file():
            if suffix in SUPPORTED_SUFFIXES:
                raise CorpusError(f"{path}: not a regular file (a broken link or a device?); "
                                  "fix or remove it")
            skipped.append(f"{rel}: not a regular file")
            continue
        if suffix not in SUPPORTED_SUFFIXES:
            skipped.append(f"{rel}: unsupported suffix (loaded: {', '.join(SUPPORTED_SUFFIXES)})")
            continue
        doc_id = rel[: -len(path.suffix)]
        if doc_id in seen:
            raise CorpusError(
                f"{path}: doc_id {doc_id!r} is also produced by {seen[doc_id]}; rename one of the files"
            )
        seen[doc_id] = path
        raw = decode_text(_read_bytes(path), str(path))
        if suffix in (".html", ".htm"):
            text, title = html_to_text(raw)
            docs.append(Document.from_raw(doc_id, text, fmt="html", path=str(path), title=title))
        else:
            docs.append(Document.from_raw(doc_id, raw, fmt=suffix[1:], path=str(path)))
    if not docs:
        raise CorpusError(f"{root}: no {', '.join(SUPPORTED_SUFFIXES)} files found")
    return docs, skipped


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key {k!r} given twice")
        out[k] = v
    return out


def _load_jsonl(path: Path) -> list[Document]:
    docs = []
    problems = []
    first_line: dict[str, int] = {}
    text = decode_text(_read_bytes(path), str(path))
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line, object_pairs_hook=_no_duplicate_keys)
        except json.JSONDecodeError as e:
            problems.append(f"{path}:{lineno}: invalid JSON ({e.msg} at column {e.colno})")
            continue
        except ValueError as e:
            problems.append(f"{path}:{lineno}: {e}; keep one")
            continue
        if not isinstance(rec, dict):
            problems.append(f"{path}:{lineno}: expected an object with doc_id and text")
            continue
        doc_id, body, fmt, title = rec.get("doc_id"), rec.get("text"), rec.get("format", "txt"), rec.get("title")
        if not isinstance(doc_id, str) or not doc_id.strip():
            problems.append(f"{path}:{lineno}: missing or non-string 'doc_id'")
            continue
        if doc_id in first_line:
            problems.append(f"{path}:{lineno}: doc_id {doc_id!r} already given at line {first_line[doc_id]}; "
                            "every document needs a unique id")
            continue
        first_line[doc_id] = lineno
        if not isinstance(body, str):
            problems.append(f"{path}:{lineno}: doc {doc_id!r} has missing or non-string 'text'")
            continue
        if fmt not in ("txt", "md", "html"):
            problems.append(f"{path}:{lineno}: doc {doc_id!r} has format {fmt!r}; use txt, md or html")
            continue
        if title is not None and not isinstance(title, str):
            problems.append(f"{path}:{lineno}: doc {doc_id!r} has a non-string 'title'")
            continue
        if "\x00" in body:
            problems.append(f"{path}:{lineno}: doc {doc_id!r} text contains NUL characters; "
                            "it was decoded from binary or UTF-16 data; store UTF-8 text")
            continue
        if fmt == "html":
            body, title = html_to_text(body)
            docs.append(Document.from_raw(doc_id, body, fmt="html", path=f"{path}:{lineno}", title=title))
        else:
            docs.append(Document.from_raw(doc_id, body, fmt=fmt, path=f"{path}:{lineno}", title=title))
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
    if p.is_dir():
        docs, skipped = _load_dir(p)
        return Corpus(docs, source=str(p), skipped=skipped)
    if p.suffix.lower() != ".jsonl":
        raise CorpusError(f"{p}: a corpus is a folder of {', '.join(SUPPORTED_SUFFIXES)} files or a .jsonl file "
                          "of {\"doc_id\", \"text\"} lines; put this file in a folder and pass the folder")
    return Corpus(_load_jsonl(p), source=str(p))


def bundled_corpus_dir() -> Path:
    """The license corpus shipped with ragassay."""
    return Path(str(resources.files("ragassay") / "data" / "licenses"))
