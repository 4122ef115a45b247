"""The dataset version is content-addressed, and a built set is verified against its manifest on load."""

from __future__ import annotations

import hashlib
import json

import pytest

from ragassay.errors import InputError
from ragassay.golden import build_golden, load_golden

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


def _independent_version(label: str, golden_bytes: bytes, hit_rule: str, threshold: int) -> str:
    sha = hashlib.sha256(golden_bytes).hexdigest()
    key = b"\0".join([sha.encode(), hit_rule.encode(), str(threshold).encode()])
    return label + "@" + hashlib.sha256(key).hexdigest()[:12]


def test_version_is_a_hash_of_the_built_content_with_a_readable_prefix(corpus, write_yaml, tmp_path):
    gs = build_golden(write_yaml(SRC), corpus, tmp_path / "g")
    golden_bytes = (tmp_path / "g" / "golden.jsonl").read_bytes()
    assert gs.manifest["golden_sha256"] == hashlib.sha256(golden_bytes).hexdigest()
    assert gs.dataset_version == _independent_version("tiny", golden_bytes, "any_overlap", 2)
    assert load_golden(tmp_path / "g").dataset_version == gs.dataset_version


def test_an_authored_dataset_version_is_a_prefix_not_a_pin_that_hides_edits(corpus, write_yaml, tmp_path):
    a = build_golden(write_yaml("dataset_version: v2\n" + SRC), corpus)
    b = build_golden(write_yaml("dataset_version: v2\n" + SRC.replace("grade: 3", "grade: 2")), corpus)
    assert a.dataset_version.startswith("v2@") and b.dataset_version.startswith("v2@")
    assert a.dataset_version != b.dataset_version


@pytest.mark.parametrize("edit", ["hit_rule: doc", "relevance_threshold: 3"])
def test_label_settings_change_the_version(corpus, write_yaml, edit):
    base = build_golden(write_yaml(SRC), corpus).dataset_version
    assert build_golden(write_yaml(edit + "\n" + SRC), corpus).dataset_version != base


def test_a_hand_edited_span_is_refused_on_load_and_by_golden_check(corpus, write_yaml, tmp_path, capsys):
    out = tmp_path / "g"
    build_golden(write_yaml(SRC), corpus, out)
    gfile = out / "golden.jsonl"
    lines = gfile.read_text().splitlines()
    rec = json.loads(lines[0])
    rec["evidence"][0]["start"] += 1
    lines[0] = json.dumps(rec, ensure_ascii=False, sort_keys=True)
    gfile.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as e:
        load_golden(out)
    msg = str(e.value)
    assert msg.startswith(f"{gfile}: changed since it was built (sha256 ")
    assert msg.endswith("rebuild it with `ragassay golden build SRC --corpus DIR -o OUT` instead of editing it")

    from ragassay.cli.app import main
    with pytest.raises(SystemExit) as ex:
        main(["golden", "check", str(out)])
    assert ex.value.code == 2
    assert f"error: {gfile}: changed since it was built" in capsys.readouterr().err


def test_a_manifest_whose_counts_or_version_were_edited_is_refused(corpus, write_yaml, tmp_path):
    out = tmp_path / "g"
    build_golden(write_yaml(SRC), corpus, out)
    mfile = out / "manifest.json"
    good = json.loads(mfile.read_text())
    mfile.write_text(json.dumps({**good, "n_negative": 0}))
    with pytest.raises(InputError, match=r"manifest.json: n_negative do\(es\) not match golden.jsonl"):
        load_golden(out)
    mfile.write_text(json.dumps({**good, "dataset_version": "tiny@000000000000"}))
    with pytest.raises(InputError, match=r"dataset_version 'tiny@000000000000' is not the content version"):
        load_golden(out)
    mfile.write_text(json.dumps({**good, "hit_rule": "doc"}))
    with pytest.raises(InputError, match="is not the content version"):
        load_golden(out)
    mfile.write_text(json.dumps([1, 2]))
    with pytest.raises(InputError, match="manifest.json: expected a JSON object"):
        load_golden(out)
    mfile.write_text(json.dumps({k: v for k, v in good.items() if k != "golden_sha256"}))
    with pytest.raises(InputError, match=r"missing or mistyped field\(s\) golden_sha256 \(str\)"):
        load_golden(out)
    mfile.write_bytes(b"{\"dataset\": \"caf\xe9\"}")
    with pytest.raises(InputError, match=r"not UTF-8 text \(byte 0xE9 at offset 16\)"):
        load_golden(out)
