"""Golden sets: span labels resolved from quotes, the manifest, and label derivation for any chunking.

Exports load on first use (:mod:`ragassay._lazy`): scoring reads a golden set but never builds one, so
``import ragassay.golden`` must not pay for the builder (about 0.16 s of every ``score``)."""

from ragassay._lazy import lazy_exports

_WHERE = {
    "GOLDEN_FILE": "set",
    "MANIFEST_FILE": "set",
    "STRATA": "schema",
    "AuthoredQuery": "schema",
    "Evidence": "schema",
    "EvidenceIndex": "labels",
    "GoldenQuery": "schema",
    "GoldenSet": "set",
    "HitRule": "labels",
    "Nugget": "schema",
    "build_golden": "builder",
    "bundled_golden_source": "set",
    "derive_grades": "labels",
    "load_golden": "set",
    "read_authoring": "builder",
    "resolve_quote": "resolve",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
