"""load_golden reads the built file one line at a time: same queries, same line numbers in its messages, and
no list of every line held beside the models."""

from __future__ import annotations

import hashlib
import json
import tracemalloc

import pytest

from ragassay.errors import InputError
from ragassay.golden import build_golden, load_golden
from ragassay.golden.schema import GoldenQuery
from ragassay.golden.set import _lines

SRC = """
dataset: tiny
queries:
  - query_id: q1
    question: What must accompany object code?
    stratum: paraphrase
    evidence:
      - {doc_id: gpl, quote: "provided that you also convey the machine-readable Corresponding Source.", grade: 3}
  - query_id: q2
    question: Is there a warranty clause?
    stratum: negative
    answerable: false
"""


@pytest.mark.parametrize("text", ["", "\n", "a", "a\n", "a\nb", "\n\na\n\nb\n\n", "a\r\nb\r\n", "x\u2028y\nz"])
def test_lines_are_the_pieces_of_split_on_newline_alone(text):
    assert list(_lines(text)) == text.split("\n")


def _rehash(out, body: str) -> None:
    """Write ``body`` as the built file and re-pin the manifest to it, as a careful hand-editor would."""
    (out / "golden.jsonl").write_text(body, encoding="utf-8")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["golden_sha256"] = hashlib.sha256(body.encode()).hexdigest()
    (out / "manifest.json").write_text(json.dumps(manifest))


def test_a_bad_record_after_blank_lines_is_reported_at_its_own_line(corpus, write_yaml, tmp_path):
    out = tmp_path / "g"
    build_golden(write_yaml(SRC), corpus, out)
    good = (out / "golden.jsonl").read_text().splitlines()
    bad = json.loads(good[1])
    bad["answerable"] = "perhaps"
    _rehash(out, "\n".join([good[0], "", "  ", json.dumps(bad)]) + "\n")
    with pytest.raises(InputError) as e:
        load_golden(out)
    lines = str(e.value).splitlines()
    assert lines[0].startswith(f"1 bad record(s) in {out / 'golden.jsonl'}; rebuild it")
    assert lines[1] == f"{out / 'golden.jsonl'}:4: Input should be a valid boolean, unable to interpret input"


def test_loaded_queries_equal_a_per_line_parse_of_the_file(corpus, write_yaml, tmp_path):
    out = tmp_path / "g"
    build_golden(write_yaml(SRC), corpus, out)
    expected = [GoldenQuery.model_validate_json(line)
                for line in (out / "golden.jsonl").read_text().splitlines() if line.strip()]
    got = load_golden(out)
    assert got.queries == expected and [q.model_fields_set for q in got] == [q.model_fields_set for q in expected]
    assert got["q1"].evidence[0].doc_id == "gpl" and not got["q2"].answerable


def test_loading_holds_no_second_copy_of_the_lines(corpus, write_yaml, tmp_path):
    """Peak traced memory above what the loaded set keeps stays under the file's own size plus a margin: the
    text (one copy) is needed, a list of every line (a second copy) is not."""
    out = tmp_path / "g"
    build_golden(write_yaml(SRC), corpus, out)
    rec = json.loads((out / "golden.jsonl").read_text().splitlines()[0])
    n = 20_000
    body = "".join(json.dumps({**rec, "query_id": f"q{i:05d}", "question": f"{rec['question']} {'x' * 200}"})
                   + "\n" for i in range(n))
    _rehash(out, body)
    manifest = json.loads((out / "manifest.json").read_text())
    from ragassay.golden.set import content_version, derived_counts
    manifest.update(derived_counts([GoldenQuery.model_validate_json(line) for line in body.splitlines()[:1]] * n))
    label = manifest["dataset_version"].rpartition("@")[0]
    manifest["dataset_version"] = content_version(label, manifest["golden_sha256"], manifest["hit_rule"],
                                                  manifest["relevance_threshold"])
    (out / "manifest.json").write_text(json.dumps(manifest))
    tracemalloc.start()
    try:
        golden = load_golden(out)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(golden) == n
    size = len(body)
    # text (size) + its UTF-8 encoding for the hash (size, freed before parsing) bound the transient part;
    # a list of the lines would add another ~size
    assert peak - kept < 1.5 * size, (peak - kept, size)
