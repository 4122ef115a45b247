"""Corpus files that are not UTF-8 text are refused naming the file and byte; nothing unreadable is loaded."""

from __future__ import annotations

import json

import pytest

from ragassay.corpus import load_corpus
from ragassay.errors import CorpusError


def _dir(tmp_path, files: dict[str, bytes]):
    root = tmp_path / "c"
    root.mkdir()
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def test_nul_bytes_are_refused(tmp_path):
    root = _dir(tmp_path, {"ok.txt": b"fine\n", "bin.txt": b"GIF89a\x00\x01\x02"})
    with pytest.raises(CorpusError) as e:
        load_corpus(root)
    assert str(e.value).startswith(f"{root / 'bin.txt'}: contains NUL bytes (first at offset 6); a binary file, "
                                   "or UTF-16/32 text without a byte-order mark? convert it to UTF-8")


def test_utf16_without_bom_is_refused_not_read_as_garbage(tmp_path):
    root = _dir(tmp_path, {"u.txt": "GNU General Public License".encode("utf-16-le")})
    with pytest.raises(CorpusError, match=r"u.txt: contains NUL bytes \(first at offset 1\)"):
        load_corpus(root)


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be"])
def test_utf16_with_bom_is_decoded(tmp_path, codec):
    data = "Permission is hereby granted.\r\n".encode(codec)
    if codec == "utf-16-be":
        data = b"\xfe\xff" + data
    corpus = load_corpus(_dir(tmp_path, {"u.txt": data}))
    assert corpus["u"].text == "Permission is hereby granted.\n"


def test_utf32_with_bom_is_refused(tmp_path):
    with pytest.raises(CorpusError, match="contains NUL bytes"):
        load_corpus(_dir(tmp_path, {"u.txt": "abc".encode("utf-32")}))


def test_invalid_utf8_names_byte_and_offset(tmp_path):
    root = _dir(tmp_path, {"l.md": "caf\xe9 au lait".encode("latin-1")})
    with pytest.raises(CorpusError) as e:
        load_corpus(root)
    assert str(e.value) == f"{root / 'l.md'}: not UTF-8 text (byte 0xE9 at offset 3); re-encode the file as UTF-8"


def test_unsupported_files_are_counted_not_dropped_silently(tmp_path):
    corpus = load_corpus(_dir(tmp_path, {"a.txt": b"a\n", "b.pdf": b"%PDF", "sub/c.rst": b"c\n"}))
    assert corpus.doc_ids == ["a"]
    assert corpus.skipped == ["b.pdf: unsupported suffix (loaded: .txt, .md, .html, .htm)",
                              "sub/c.rst: unsupported suffix (loaded: .txt, .md, .html, .htm)"]


def test_broken_link_with_a_corpus_suffix_is_an_error(tmp_path):
    root = _dir(tmp_path, {"a.txt": b"a\n"})
    (root / "gone.txt").symlink_to(tmp_path / "nowhere.txt")
    with pytest.raises(CorpusError, match=r"gone.txt: not a regular file \(a broken link or a device\?\)"):
        load_corpus(root)


def test_a_single_text_file_is_not_a_corpus(tmp_path):
    f = tmp_path / "doc.txt"
    f.write_text("hello")
    with pytest.raises(CorpusError, match=r"doc.txt: a corpus is a folder of .txt, .md, .html, .htm files or a "
                                          r"\.jsonl file"):
        load_corpus(f)


def test_jsonl_problems_are_line_numbered(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text("\n".join([
        json.dumps({"doc_id": "a", "text": "x"}),
        '{"doc_id": "b", "doc_id": "c", "text": "y"}',
        json.dumps({"doc_id": "d", "text": "y", "format": "pdf"}),
        json.dumps({"doc_id": "e", "text": "y", "title": 5}),
        json.dumps({"doc_id": "f", "text": "a\u0000b"}),
        json.dumps({"doc_id": "a", "text": "again"}),
        json.dumps({"doc_id": "  ", "text": "blank id"}),
    ]) + "\n")
    with pytest.raises(CorpusError) as e:
        load_corpus(p)
    assert str(e.value).splitlines() == [
        f"6 bad line(s) in {p}; nothing loaded",
        f"{p}:2: key 'doc_id' given twice; keep one",
        f"{p}:3: doc 'd' has format 'pdf'; use txt, md or html",
        f"{p}:4: doc 'e' has a non-string 'title'",
        f"{p}:5: doc 'f' text contains NUL characters; it was decoded from binary or UTF-16 data; store UTF-8 text",
        f"{p}:6: doc_id 'a' already given at line 1; every document needs a unique id",
        f"{p}:7: missing or non-string 'doc_id'",
    ]


def test_jsonl_invalid_utf8_names_byte(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_bytes(b'{"doc_id": "a", "text": "caf\xe9"}\n')
    with pytest.raises(CorpusError, match=r"c.jsonl: not UTF-8 text \(byte 0xE9 at offset 28\)"):
        load_corpus(p)


def test_jsonl_lines_are_split_on_newline_only(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps({"doc_id": "a", "text": "x\u2028y"}, ensure_ascii=False) + "\n{bad\n")
    with pytest.raises(CorpusError, match=r"c.jsonl:2: invalid JSON"):
        load_corpus(p)
