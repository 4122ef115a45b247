"""ragassay.yamlio.load_yaml: the safe YAML reader every authoring file goes through."""

from __future__ import annotations

import resource
import time

import pytest

from ragassay.errors import InputError
from ragassay.yamlio import MAX_EXPANDED_NODES, load_yaml, load_yaml_node

LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


def _write(tmp_path, data: bytes | str, name: str = "f.yaml"):
    p = tmp_path / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return p


def test_billion_laughs_is_refused_fast_without_memory_growth(tmp_path):
    p = _write(tmp_path, LAUGHS)
    assert p.stat().st_size < 1024
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    with pytest.raises(InputError) as e:
        load_yaml(p, "golden set")
    assert time.perf_counter() - t0 < 1.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 50_000  # KB
    assert str(e.value).startswith(f"{p}: YAML aliases expand ")
    assert f"(limit {MAX_EXPANDED_NODES:,}); write the golden set out without nested aliases" in str(e.value)


def test_ordinary_anchors_and_merge_keys_still_load(tmp_path):
    p = _write(tmp_path, "base: &b {k: 5, rule: any_overlap}\nrun: {<<: *b, k: 10}\nalso: *b\n")
    assert load_yaml(p, "config") == {"base": {"k": 5, "rule": "any_overlap"},
                                      "run": {"k": 10, "rule": "any_overlap"},
                                      "also": {"k": 5, "rule": "any_overlap"}}


def test_recursive_alias_is_refused(tmp_path):
    p = _write(tmp_path, "x: 1\nloop: &l [1, *l]\n")
    with pytest.raises(InputError, match=r"f.yaml:2: recursive YAML alias"):
        load_yaml(p, "config")


def test_duplicate_key_is_refused_with_both_lines(tmp_path):
    p = _write(tmp_path, "queries:\n  - query_id: q1\n    question: a\n    question: b\n")
    with pytest.raises(InputError) as e:
        load_yaml(p, "golden set")
    assert str(e.value) == f"{p}:4: key 'question' given twice (first at line 3); keep one"


def test_duplicate_top_level_key(tmp_path):
    p = _write(tmp_path, "dataset: a\nqueries: []\ndataset: b\n")
    with pytest.raises(InputError, match=r"f.yaml:3: key 'dataset' given twice \(first at line 1\)"):
        load_yaml(p, "golden set")


def test_latin1_is_refused_naming_the_byte_and_offset(tmp_path):
    p = _write(tmp_path, "question: caf\xe9\n".encode("latin-1"))
    with pytest.raises(InputError) as e:
        load_yaml(p, "golden set")
    assert str(e.value) == f"{p}: not UTF-8 text (byte 0xE9 at offset 13); re-save the golden set as UTF-8"


def test_binary_file_is_refused(tmp_path):
    p = _write(tmp_path, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(InputError, match=r"f.yaml: not UTF-8 text \(byte 0x89 at offset 0\)"):
        load_yaml(p, "golden set")


def test_nul_in_utf8_text_is_a_line_numbered_error(tmp_path):
    p = _write(tmp_path, b"a: 1\nb: x\x00y\n")
    with pytest.raises(InputError, match=r"f.yaml:2: control character U\+0000 at offset 9"):
        load_yaml(p, "config")


def test_utf8_bom_is_accepted(tmp_path):
    assert load_yaml(_write(tmp_path, b"\xef\xbb\xbfa: 1\n"), "config") == {"a": 1}


def test_empty_file_is_none_and_python_tags_are_refused(tmp_path):
    assert load_yaml(_write(tmp_path, "# only a comment\n"), "config") is None
    assert load_yaml_node(_write(tmp_path, ""), "config") == (None, None)
    with pytest.raises(InputError, match=r"f.yaml:1: invalid YAML in the config \(could not determine a "
                                         r"constructor for the tag 'tag:yaml.org,2002:python/object/apply"):
        load_yaml(_write(tmp_path, "a: !!python/object/apply:os.system [ls]\n"), "config")


def test_syntax_error_has_a_line(tmp_path):
    with pytest.raises(InputError, match=r"f.yaml:3: invalid YAML in the config"):
        load_yaml(_write(tmp_path, "a: 1\nb: [1, 2\nc: 3\n"), "config")


def test_deep_nesting_is_a_clean_error(tmp_path):
    with pytest.raises(InputError, match=r"f.yaml(:1)?: .*(nest|deep)"):
        load_yaml(_write(tmp_path, "[" * 20000 + "]" * 20000), "config")


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(InputError, match="no such file; pass the config file"):
        load_yaml(tmp_path / "nope.yaml", "config")
    with pytest.raises(InputError, match="is a folder; pass the config file"):
        load_yaml(tmp_path, "config")


def test_node_line_numbers_are_kept(tmp_path):
    data, node = load_yaml_node(_write(tmp_path, "x: 1\nqueries:\n  - a: 1\n  - a: 2\n"), "golden set")
    assert data == {"x": 1, "queries": [{"a": 1}, {"a": 2}]}
    seq = node.value[1][1]
    assert [n.start_mark.line + 1 for n in seq.value] == [3, 4]


def test_line_of_finds_the_deepest_existing_key_and_descends_sequences(tmp_path):
    from ragassay.yamlio import line_of, load_yaml_node

    p = tmp_path / "p.yaml"
    p.write_text("a: 1\nmetrics:\n  ndcg@5:\n    min_effect: 9\nlist:\n  - x: 1\n  - y: 2\n", encoding="utf-8")
    _, node = load_yaml_node(p, "policy")
    assert line_of(node, ("metrics", "ndcg@5", "min_effect")) == 4
    assert line_of(node, ("list", 1, "y")) == 7
    assert line_of(node, ("metrics", "ndcg@5", "missing")) == 4  # the enclosing mapping starts on line 4
    assert line_of(node, ()) is None and line_of(None, ("a",)) is None
