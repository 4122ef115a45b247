"""Corpora: loading, canonical text with offset maps, and the corpus digest."""

from ragassay.corpus.canonical import (
    CANONICALIZER_NAME,
    canonicalize,
    canonicalize_fragment,
    canonicalize_with_map,
)
from ragassay.corpus.loader import Corpus, Document, bundled_corpus_dir, load_corpus

__all__ = [
    "CANONICALIZER_NAME",
    "Corpus",
    "Document",
    "bundled_corpus_dir",
    "canonicalize",
    "canonicalize_fragment",
    "canonicalize_with_map",
    "load_corpus",
]
