"""Golden sets: span labels resolved from quotes, the manifest, and label derivation for any chunking."""

from ragassay.golden.builder import build_golden, read_authoring
from ragassay.golden.labels import EvidenceIndex, HitRule, derive_grades
from ragassay.golden.resolve import resolve_quote
from ragassay.golden.schema import STRATA, AuthoredQuery, Evidence, GoldenQuery, Nugget
from ragassay.golden.set import GOLDEN_FILE, MANIFEST_FILE, GoldenSet, bundled_golden_source, load_golden

__all__ = [
    "GOLDEN_FILE",
    "MANIFEST_FILE",
    "STRATA",
    "AuthoredQuery",
    "Evidence",
    "EvidenceIndex",
    "GoldenQuery",
    "GoldenSet",
    "HitRule",
    "Nugget",
    "build_golden",
    "bundled_golden_source",
    "derive_grades",
    "load_golden",
    "read_authoring",
    "resolve_quote",
]
