"""ragassay.fsio: an output path is new, empty, or ragassay's own earlier output; writes are atomic and get
the modes ``open()``/``mkdir`` would give them."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from ragassay import fsio
from ragassay.errors import InputError


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_atomic_write_gives_umask_modes_to_new_files_and_folders(tmp_path, umask022):
    target = tmp_path / "a" / "b" / "f.txt"
    fsio.atomic_write_text(target, "héllo")
    assert target.read_text(encoding="utf-8") == "héllo"
    assert _mode(target) == 0o644
    assert _mode(tmp_path / "a") == 0o755 and _mode(tmp_path / "a" / "b") == 0o755
    assert os.listdir(target.parent) == ["f.txt"]


def test_atomic_write_follows_a_stricter_umask(tmp_path):
    old = os.umask(0o077)
    try:
        fsio.atomic_write_bytes(tmp_path / "f", b"x")
        d = fsio.make_temp_dir(tmp_path, ".t-")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "f") == 0o600 and _mode(d) == 0o700


def test_atomic_write_keeps_the_mode_of_a_replaced_file(tmp_path, umask022):
    target = tmp_path / "f"
    target.write_text("old")
    os.chmod(target, 0o640)
    fsio.atomic_write_text(target, "new")
    assert target.read_text() == "new" and _mode(target) == 0o640


def test_temp_dir_is_not_private_like_mkdtemp(tmp_path, umask022):
    d = fsio.make_temp_dir(tmp_path / "p", ".x-")
    assert d.parent == tmp_path / "p" and d.name.startswith(".x-") and _mode(d) == 0o755


def test_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "f"
    target.write_text("old")

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(InputError, match=r"f: cannot write the file \(No space left on device\)"):
        fsio.atomic_write_text(target, "new")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["f"]


@pytest.mark.parametrize("state", ["missing", "empty"])
def test_new_or_empty_folder_is_accepted(tmp_path, state):
    out = tmp_path / "out"
    if state == "empty":
        out.mkdir()
    fsio.check_output_dir(out, "golden")
    fsio.check_output_dir(out, "report")


def test_a_users_folder_is_refused_naming_what_is_there(tmp_path):
    (tmp_path / "a.txt").write_text("mine")
    (tmp_path / "b.md").write_text("mine")
    with pytest.raises(InputError) as e:
        fsio.check_output_dir(tmp_path, "golden")
    assert str(e.value) == (f"{tmp_path}: folder is not empty and is not an earlier ragassay golden output "
                            "(it holds 2 entries (a.txt, b.md)); refusing to replace it; choose an empty or "
                            "new folder")


def test_an_existing_file_is_refused(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    with pytest.raises(InputError, match="is an existing file, not a folder; refusing to replace it"):
        fsio.check_output_dir(f, "export")


def test_a_path_under_a_file_is_refused_before_anything_is_made(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    with pytest.raises(InputError, match=r"notes.txt is a file, not a folder, so nothing can be created"):
        fsio.check_output_dir(f / "sub" / "out", "golden")
    with pytest.raises(InputError, match="a parent of it is a file, not a folder"):
        fsio.make_dir(f / "sub")


def test_an_uncreatable_folder_is_a_clean_error():
    with pytest.raises(InputError, match=r"^/proc/ragassay-x: cannot create the folder"):
        fsio.make_dir(Path("/proc/ragassay-x"))


def test_earlier_golden_output_is_recognised_by_its_manifest(tmp_path):
    (tmp_path / "golden.jsonl").write_text("{}\n")
    (tmp_path / "manifest.json").write_text(json.dumps({"builder": "ragassay-golden-builder-v1"}))
    fsio.check_output_dir(tmp_path, "golden")
    assert fsio.is_output_of(tmp_path, "golden") and not fsio.is_output_of(tmp_path, "report")
    (tmp_path / "manifest.json").write_text(json.dumps({"builder": "something-else"}))
    with pytest.raises(InputError, match="not an earlier ragassay golden output"):
        fsio.check_output_dir(tmp_path, "golden")


def test_golden_output_with_a_users_file_in_it_is_refused_because_the_swap_would_delete_it(tmp_path):
    (tmp_path / "golden.jsonl").write_text("{}\n")
    (tmp_path / "manifest.json").write_text(json.dumps({"builder": "ragassay-golden-builder-v1"}))
    (tmp_path / "golden.yaml").write_text("queries: []\n")
    with pytest.raises(InputError, match=r"also holds 1 entry \(golden.yaml\) that replacing it would delete"):
        fsio.check_output_dir(tmp_path, "golden")


def test_report_recognised_by_its_generator_meta_tag(tmp_path):
    (tmp_path / "index.html").write_text('<html><head><meta name="generator" content="ragassay 0.1"></head>')
    (tmp_path / "notes.txt").write_text("kept: a report only replaces index.html")
    fsio.check_output_dir(tmp_path, "report")
    (tmp_path / "index.html").write_text("<html><head><title>my site</title></head>")
    with pytest.raises(InputError, match="not an earlier ragassay report output"):
        fsio.check_output_dir(tmp_path, "report")


def test_marker_recognises_other_kinds_and_only_that_kind(tmp_path):
    (tmp_path / "runs.parquet").write_bytes(b"PAR1")
    with pytest.raises(InputError):
        fsio.check_output_dir(tmp_path, "export")
    fsio.mark_output_dir(tmp_path, "export")
    assert (tmp_path / ".ragassay-export").is_file()
    fsio.check_output_dir(tmp_path, "export")
    with pytest.raises(InputError, match="not an earlier ragassay traces output"):
        fsio.check_output_dir(tmp_path, "traces")


def test_check_output_file(tmp_path):
    f = tmp_path / "out.json"
    fsio.check_output_file(f, "summary")
    f.write_text("{}")
    with pytest.raises(InputError, match="file exists and is not an earlier ragassay summary output"):
        fsio.check_output_file(f, "summary")
    fsio.check_output_file(f, "summary", overwrite_ok=lambda p: p.read_text() == "{}")
    with pytest.raises(InputError, match="is a folder; pass a file name for the summary output"):
        fsio.check_output_file(tmp_path, "summary")
    with pytest.raises(InputError, match="out.json is a file, not a folder"):
        fsio.check_output_file(f / "x.json", "summary")


def test_broken_symlink_is_refused(tmp_path):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(InputError, match="is a broken symbolic link"):
        fsio.check_output_dir(link, "golden")
