"""A built golden set: resolved queries plus the manifest that pins it."""

from __future__ import annotations

import hashlib
import heapq
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from itertools import chain
from operator import attrgetter, itemgetter, not_
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from ragassay.errors import InputError
from ragassay.golden.schema import GoldenQuery
from ragassay.yamlio import read_utf8

if TYPE_CHECKING:
    import numpy as np

GOLDEN_FILE = "golden.jsonl"
MANIFEST_FILE = "manifest.json"


@dataclass
class GoldenSet:
    queries: list[GoldenQuery]
    manifest: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._by_id = {q.query_id: q for q in self.queries}

    def __len__(self) -> int:
        return len(self.queries)

    def __iter__(self) -> Iterator[GoldenQuery]:
        return iter(self.queries)

    def __getitem__(self, query_id: str) -> GoldenQuery:
        return self._by_id[query_id]

    def __contains__(self, query_id: object) -> bool:
        return query_id in self._by_id

    def contains_each(self, query_ids: list[str]) -> np.ndarray:
        """Per id of ``query_ids``: whether the set holds that query (``in`` for a whole batch at once)."""
        import numpy as np  # not at module level: commands that only read a golden set start without numpy

        return np.fromiter(map(self._by_id.__contains__, query_ids), dtype=bool, count=len(query_ids))

    @property
    def query_ids(self) -> list[str]:
        return [q.query_id for q in self.queries]

    @property
    def dataset_version(self) -> str | None:
        return self.manifest.get("dataset_version")


def derived_counts(queries: list[GoldenQuery]) -> dict:
    """The manifest fields that are counts over the built queries (checked again on every load).

    Each pass maps an attribute getter over the objects (a loop in C): at 100,000 queries, a few
    hundredths of a second rather than a third of one."""
    evidence = list(chain.from_iterable(map(attrgetter("evidence"), queries)))
    positive = {g for g in set(map(attrgetter("grade"), evidence)) if g > 0}
    answerable = list(map(attrgetter("answerable"), queries))
    return {
        "n_queries": len(queries),
        "n_answerable": sum(answerable),
        "n_negative": sum(map(not_, answerable)),
        "strata": dict(sorted(Counter(map(attrgetter("stratum"), queries)).items())),
        "label_type": "graded_0_3" if len(positive) > 1 else "binary",
        "source_mix": dict(sorted(Counter(map(attrgetter("source"), queries)).items())),
        "n_evidence": len(evidence),
        "match_kinds": dict(sorted(Counter(map(attrgetter("match"), evidence)).items())),
        "n_with_nuggets": sum(map(bool, map(attrgetter("nuggets"), queries))),
    }


def content_version(label: str, golden_sha256: str, hit_rule: str, relevance_threshold: int) -> str:
    """``<label>@<12 hex>``: a hash of the built queries and of the two settings that turn spans into
    labels, so any change to a span, a grade, the hit rule or the threshold gives a new dataset version."""
    h = hashlib.sha256(f"{golden_sha256}\0{hit_rule}\0{relevance_threshold}".encode())
    return f"{label}@{h.hexdigest()[:12]}"


_REQUIRED = {
    "dataset": str, "dataset_version": str, "golden_sha256": str, "corpus_digest": str, "hit_rule": str,
    "relevance_threshold": int, "annotators": list, "built_at": str,
}


def _check_manifest(mfile: Path, manifest: object) -> dict:
    if not isinstance(manifest, dict):
        raise InputError(f"{mfile}: expected a JSON object; rebuild the set with `ragassay golden build`")
    bad = [f"{k} ({t.__name__})" for k, t in _REQUIRED.items()
           if not isinstance(manifest.get(k), t) or isinstance(manifest.get(k), bool)]
    if bad:
        raise InputError(f"{mfile}: missing or mistyped field(s) {', '.join(bad)}; "
                         "rebuild the set with `ragassay golden build`")
    return manifest


def _share_fields_sets(query: GoldenQuery, shared: dict[frozenset[str], set[str]]) -> GoldenQuery:
    """The query, its evidence and nuggets pointing at one shared copy of each distinct fields-set.

    pydantic gives every instance its own set of the field names it was given (about 730 bytes each, two
    or more per query: half of a 100,000-query set's memory). The models are frozen, so nothing adds to
    those sets after validation (``model_copy`` copies the set before it updates it): equal sets can be
    one object, and ``model_fields_set`` and ``exclude_unset`` dumps are unchanged.
    """
    for m in (query, *query.evidence, *query.nuggets):
        fs = m.__pydantic_fields_set__
        object.__setattr__(m, "__pydantic_fields_set__", shared.setdefault(frozenset(fs), fs))
    return query


def _lines(text: str) -> Iterator[str]:
    """The pieces of ``text.split("\\n")``, one at a time: a list of all 100,000 lines would hold a second copy
    of the file while the models are built, and its small strings, freed among the long-lived models, keep
    their memory pages from going back to the system."""
    start = 0
    while (end := text.find("\n", start)) >= 0:
        yield text[start:end]
        start = end + 1
    yield text[start:]


_REBUILD = "rebuild it with `ragassay golden build SRC --corpus DIR -o OUT` instead of editing it"


def load_golden(path: str | Path) -> GoldenSet:
    """Load a built golden set directory (``golden.jsonl`` + ``manifest.json``), verifying that it is
    exactly what the builder wrote.

    A set whose ``golden.jsonl`` no longer hashes to the manifest's ``golden_sha256``, or whose manifest
    counts or ``dataset_version`` do not match its queries, is refused: a hand-edited span was never
    resolved against the corpus, and results scored on it would carry a version that names other labels.

    A set of more than ``_COLUMNS_MIN_BYTES`` has its lines read as columns (:mod:`ragassay.golden._fast`);
    a line that does not pass there is validated by ``GoldenQuery.model_validate_json``, which words its
    problem. The queries, their ``model_fields_set`` and every message are those of
    :func:`_load_golden_reference`, which reads smaller sets (where pyarrow's start-up would cost more
    than it saves).
    """
    return _load_golden(path, columns=None)


# about 600 queries: below, validating each line with pydantic takes a few hundredths of a second
_COLUMNS_MIN_BYTES = 256 * 1024


def _load_golden(path: str | Path, columns: bool | None) -> GoldenSet:
    """:func:`load_golden`, reading the lines as columns when ``columns`` (None: by the file's size)."""
    gfile, mfile, manifest = _open(path)
    if columns is None:
        columns = gfile.stat().st_size >= _COLUMNS_MIN_BYTES
    if not columns:
        return _load_golden_reference(path)
    from ragassay._gc import gc_paused
    from ragassay.golden._fast import read_lines  # pyarrow's JSON reader: only for a set this large

    data = _utf8_bytes(gfile)
    sha = hashlib.sha256(data).hexdigest()
    _check_sha(gfile, manifest, sha)
    shared: dict[frozenset[str], set[str]] = {}
    with gc_paused():  # hundreds of thousands of acyclic objects: generation scans would free nothing
        linenos, fast, rest = read_lines(data, shared)
        del data
        slow, problems = [], []
        for lineno, blob in rest:
            line = blob.decode("utf-8")
            if not line.strip():
                continue
            try:
                slow.append((lineno, _share_fields_sets(GoldenQuery.model_validate_json(line), shared)))
            except ValidationError as e:
                problems.append(f"{gfile}:{lineno}: {e.errors()[0]['msg']}")
        if problems:
            raise InputError(f"{len(problems)} bad record(s) in {gfile}; {_REBUILD}\n" + "\n".join(problems))
        if slow:
            fast = [q for _, q in heapq.merge(zip(linenos, fast, strict=True), slow, key=itemgetter(0))]
        return _finish(mfile, manifest, sha, fast)


def _utf8_bytes(path: Path) -> bytes:
    """The UTF-8 bytes of the text ``read_utf8`` gives: the file's own bytes when they decode and have no
    byte-order mark (no re-encoding), else ``read_utf8``'s text encoded (or its error)."""
    try:
        data = path.read_bytes()
        if not data.startswith(b"\xef\xbb\xbf") and (data.isascii() or data.decode("utf-8")):
            return data
    except (OSError, UnicodeDecodeError):
        pass
    return read_utf8(path, "built golden set").encode("utf-8")


def _load_golden_reference(path: str | Path) -> GoldenSet:
    """:func:`load_golden` with every line validated by pydantic: the oracle the column reader is tested
    against."""
    gfile, mfile, manifest = _open(path)
    text = read_utf8(gfile, "built golden set")
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    _check_sha(gfile, manifest, sha)
    queries, problems = [], []
    shared: dict[frozenset[str], set[str]] = {}
    for lineno, line in enumerate(_lines(text), 1):
        if not line.strip():
            continue
        try:
            queries.append(_share_fields_sets(GoldenQuery.model_validate_json(line), shared))
        except ValidationError as e:
            problems.append(f"{gfile}:{lineno}: {e.errors()[0]['msg']}")
    if problems:
        raise InputError(f"{len(problems)} bad record(s) in {gfile}; {_REBUILD}\n" + "\n".join(problems))
    return _finish(mfile, manifest, sha, queries)


def _open(path: str | Path) -> tuple[Path, Path, dict]:
    p = Path(path)
    gfile, mfile = p / GOLDEN_FILE, p / MANIFEST_FILE
    if not gfile.is_file() or not mfile.is_file():
        raise InputError(f"{p}: not a built golden set (needs {GOLDEN_FILE} and {MANIFEST_FILE}); "
                         "run `ragassay golden build SRC --corpus DIR -o OUT` first")
    try:
        manifest = json.loads(read_utf8(mfile, "golden-set manifest"))
    except json.JSONDecodeError as e:
        raise InputError(f"{mfile}:{e.lineno}: invalid JSON ({e.msg}); rebuild the set") from e
    return gfile, mfile, _check_manifest(mfile, manifest)


def _check_sha(gfile: Path, manifest: dict, sha: str) -> None:
    if sha != manifest["golden_sha256"]:
        raise InputError(f"{gfile}: changed since it was built (sha256 {sha[:12]}…, manifest says "
                         f"{manifest['golden_sha256'][:12]}…); {_REBUILD}")


def _finish(mfile: Path, manifest: dict, sha: str, queries: list[GoldenQuery]) -> GoldenSet:
    counts = derived_counts(queries)
    wrong = [k for k, v in counts.items() if manifest.get(k) != v]
    if wrong:
        raise InputError(f"{mfile}: {', '.join(wrong)} do(es) not match {GOLDEN_FILE}; {_REBUILD}")
    label = manifest["dataset_version"].rpartition("@")[0]
    expected = content_version(label, sha, manifest["hit_rule"], manifest["relevance_threshold"])
    if manifest["dataset_version"] != expected:
        raise InputError(f"{mfile}: dataset_version {manifest['dataset_version']!r} is not the content "
                         f"version {expected!r} of this set; {_REBUILD}")
    return GoldenSet(queries, manifest)


def bundled_golden_source() -> Path:
    """The authoring file of the bundled license golden set."""
    return Path(str(resources.files("ragassay") / "data" / "golden" / "licenses.yaml"))
