"""Safe output paths: never replace or overwrite what ragassay did not write, never leave a half-written file.

Every command that writes calls these before touching the disk:

- :func:`check_output_dir` — an output folder may be new, empty, or ragassay's own earlier output of the
  same kind; anything else is refused with an :class:`~ragassay.errors.InputError` that names the path,
  what is there and the fix. Earlier output is recognised by what ragassay writes into it: a golden set by
  its ``manifest.json`` (``"builder": "ragassay-golden-builder-..."``), a report by the
  ``<meta name="generator" content="ragassay ...">`` in its ``index.html``, any other kind by a
  ``.ragassay-<kind>`` marker file written with :func:`mark_output_dir`.
- :func:`check_output_file` — the same rule for a single file.
- :func:`atomic_write_bytes` / :func:`atomic_write_text` — temp file in the same folder, fsync, ``os.replace``.
- :func:`make_dir` / :func:`make_temp_dir` — folders created like ``mkdir`` would (0755 under umask 022).

Files and folders get the mode ``open()`` and ``mkdir`` would give them (0644 / 0755 under umask 022), never
the 0600 / 0700 of ``mkstemp`` / ``mkdtemp``: outputs are meant to be shared.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ragassay.errors import InputError

MARKER_PREFIX = ".ragassay-"
_FIX = "choose an empty or new folder"


@dataclass(frozen=True)
class _Kind:
    """How earlier output of one kind is recognised, and which files it may hold.

    ``files`` is set for kinds whose folder is replaced as a whole (a golden set is swapped in atomically):
    a recognised folder that also holds anything else is refused, because the swap would delete it.
    """

    recognise: Callable[[Path], bool]
    files: frozenset[str] | None = None


def _has_marker(path: Path, kind: str) -> bool:
    return (path / f"{MARKER_PREFIX}{kind}").is_file()


def _golden_manifest(path: Path) -> bool:
    try:
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and str(manifest.get("builder", "")).startswith("ragassay-golden-builder")


def _report_index(path: Path) -> bool:
    try:
        with open(path / "index.html", "rb") as f:
            head = f.read(16384)
    except OSError:
        return False
    return b'<meta name="generator" content="ragassay' in head


_KINDS = {
    # golden.jsonl + manifest.json is the layout golden/set.py reads and golden/builder.py writes.
    "golden": _Kind(_golden_manifest, frozenset({"golden.jsonl", "manifest.json"})),
    "report": _Kind(_report_index),
}


def is_output_of(path: Path, kind: str) -> bool:
    """True when folder ``path`` is ragassay's own earlier output of ``kind``."""
    spec = _KINDS.get(kind)
    return _has_marker(path, kind) or (spec is not None and spec.recognise(path))


def _describe(entries: list[str]) -> str:
    shown = ", ".join(entries[:5])
    return f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} ({shown}{', ...' if len(entries) > 5 else ''})"


def _check_parent_writable(path: Path) -> None:
    """The nearest existing ancestor of ``path`` must be a folder we can create entries in."""
    probe = path.parent
    while not probe.exists():
        if probe.is_symlink():
            raise InputError(f"{path}: {probe} is a broken symbolic link; {_FIX}")
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise InputError(f"{path}: {probe} is a file, not a folder, so nothing can be created under it; {_FIX}")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(f"{path}: no permission to write in {probe}; {_FIX} you can write to")


def check_output_dir(path: Path, kind: str) -> None:
    """Refuse to write ``kind`` output into folder ``path`` unless it is new, empty or ours of that kind.

    Raises :class:`InputError` naming the path, what is there and the fix; also when ``path`` is a file or
    cannot be created (a parent is a file, no permission).
    """
    path = Path(path)
    if path.is_symlink() and not path.exists():
        raise InputError(f"{path}: is a broken symbolic link; {_FIX}")
    if not path.exists():
        _check_parent_writable(path)
        return
    if not path.is_dir():
        raise InputError(f"{path}: is an existing file, not a folder; refusing to replace it; {_FIX}")
    try:
        entries = sorted(e.name for e in os.scandir(path))
    except OSError as e:
        raise InputError(f"{path}: cannot read the folder ({e.strerror}); {_FIX}") from e
    if not entries:
        if not os.access(path, os.W_OK | os.X_OK):
            raise InputError(f"{path}: no permission to write in this folder; {_FIX} you can write to")
        return
    if not is_output_of(path, kind):
        raise InputError(
            f"{path}: folder is not empty and is not an earlier ragassay {kind} output "
            f"(it holds {_describe(entries)}); refusing to replace it; {_FIX}"
        )
    spec = _KINDS.get(kind)
    if spec is not None and spec.files is not None:
        foreign = [e for e in entries if e not in spec.files and e != f"{MARKER_PREFIX}{kind}"]
        if foreign:
            raise InputError(
                f"{path}: earlier ragassay {kind} output, but it also holds {_describe(foreign)} that "
                f"replacing it would delete; move them out or {_FIX}"
            )
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputError(f"{path}: no permission to write in this folder; {_FIX} you can write to")


def check_output_file(path: Path, kind: str, overwrite_ok: Callable[[Path], bool] | None = None) -> None:
    """Refuse to write single-file output ``kind`` to ``path`` unless it is new or ``overwrite_ok(path)``.

    ``overwrite_ok`` recognises ragassay's own earlier file of this kind (e.g. by a header it wrote); without
    it an existing file is always refused.
    """
    path = Path(path)
    if path.is_symlink() and not path.exists():
        raise InputError(f"{path}: is a broken symbolic link; choose a new file name")
    if not path.exists():
        _check_parent_writable(path)
        return
    if path.is_dir():
        raise InputError(f"{path}: is a folder; pass a file name for the {kind} output")
    if overwrite_ok is None or not overwrite_ok(path):
        raise InputError(f"{path}: file exists and is not an earlier ragassay {kind} output; refusing to "
                         "overwrite it; choose a new file name")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise InputError(f"{path}: no permission to write in {path.parent}; choose a folder you can write to")


def _os_error(path: Path, e: OSError, what: str) -> InputError:
    reason = e.strerror or str(e)
    if e.errno == errno.ENOTDIR:
        reason = "a parent of it is a file, not a folder"
    return InputError(f"{path}: cannot {what} ({reason}); {_FIX} you can write to")


def make_dir(path: Path) -> Path:
    """``mkdir -p`` with the umask's mode; an :class:`InputError` instead of an ``OSError``."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _os_error(path, e, "create the folder") from e
    return path


def make_temp_dir(parent: Path, prefix: str, target: Path | None = None) -> Path:
    """A new uniquely named folder in ``parent``, mode from the umask (``mkdtemp`` would make it 0700).

    Errors name ``target`` (the folder the temporary one will become) when given: that is the path the user
    typed."""
    parent = make_dir(parent)
    for _ in range(100):
        tmp = parent / f"{prefix}{secrets.token_hex(6)}"
        try:
            os.mkdir(tmp, 0o777)
        except FileExistsError:
            continue
        except OSError as e:
            raise _os_error(target or tmp, e, "create the folder") from e
        return tmp
    raise InputError(f"{parent}: cannot create a temporary folder (100 names taken); clean up {prefix}* entries")


def mark_output_dir(path: Path, kind: str) -> None:
    """Write the ``.ragassay-<kind>`` marker that lets :func:`check_output_dir` recognise this folder later."""
    atomic_write_text(Path(path) / f"{MARKER_PREFIX}{kind}",
                      f"This folder was written by ragassay ({kind}); ragassay may replace what it wrote here.\n")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so a reader sees the old file or the new one, never a partial one.

    A new file gets the mode ``open()`` would give it (umask applied); a replaced file keeps its mode.
    """
    path = Path(path)
    make_dir(path.parent)
    try:
        mode = path.stat().st_mode & 0o7777
    except OSError:
        mode = None
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        except OSError as e:
            raise _os_error(path, e, "write the file") from e
        break
    else:
        raise InputError(f"{path.parent}: cannot create a temporary file (100 names taken)")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise _os_error(path, e, "write the file") from e
        raise


def atomic_write_text(path: Path, text: str, encoding: str = "utf-8") -> None:
    """:func:`atomic_write_bytes` for text."""
    atomic_write_bytes(path, text.encode(encoding))
