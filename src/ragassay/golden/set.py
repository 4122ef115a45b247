"""A built golden set: resolved queries plus the manifest that pins it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from ragassay.errors import InputError
from ragassay.golden.schema import GoldenQuery

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

    @property
    def query_ids(self) -> list[str]:
        return [q.query_id for q in self.queries]

    @property
    def dataset_version(self) -> str | None:
        return self.manifest.get("dataset_version")


def load_golden(path: str | Path) -> GoldenSet:
    """Load a built golden set directory (``golden.jsonl`` + ``manifest.json``)."""
    p = Path(path)
    gfile, mfile = p / GOLDEN_FILE, p / MANIFEST_FILE
    if not gfile.exists() or not mfile.exists():
        raise InputError(f"{p}: not a built golden set (needs {GOLDEN_FILE} and {MANIFEST_FILE}); "
                         "run `ragassay golden build SRC --corpus DIR -o OUT` first")
    try:
        manifest = json.loads(mfile.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"{mfile}:{e.lineno}: invalid JSON ({e.msg})") from e
    queries, problems = [], []
    with gfile.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                queries.append(GoldenQuery.model_validate_json(line))
            except ValidationError as e:
                problems.append(f"{gfile}:{lineno}: {e.errors()[0]['msg']}")
    if problems:
        raise InputError(f"{len(problems)} bad record(s) in {gfile}; rebuild the set\n" + "\n".join(problems))
    return GoldenSet(queries, manifest)


def bundled_golden_source() -> Path:
    """The authoring file of the bundled license golden set."""
    return Path(str(resources.files("ragassay") / "data" / "golden" / "licenses.yaml"))
