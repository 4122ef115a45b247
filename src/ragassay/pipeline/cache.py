"""On-disk embedding cache keyed by (embedder name, sha256 of the exact embedded text).

Layout: ``<cache_dir>/embeddings/<embedder slug>/<namespace>/vectors.npy`` plus ``manifest.json`` listing
the text hash and the embedder's token length of every row. The namespace is the chunker-config sha for
passages and ``queries`` for questions, so a sweep that keeps the chunking (or re-chunks to partly the same
texts) embeds only what is new. Writes go to a temp file and ``os.replace`` so a crash cannot corrupt it.

The cache never replaces a file it did not write: a cache folder named in a config must be new, empty or an
earlier ragassay cache (:func:`check_cache_dir`), and each file is replaced only when what is there is
recognisably a cache file (a manifest or chunk artifact with the expected fields). A folder that cannot be
created or written is an :class:`~ragassay.errors.InputError` naming it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ragassay.errors import InputError
from ragassay.fsio import atomic_write_bytes, check_output_dir, make_dir

# What ragassay writes directly under a cache dir (embeddings here, chunk artifacts here, bm25 indexes by
# pipeline/run.py): a folder holding only these is an earlier cache.
CACHE_ENTRIES = frozenset({"embeddings", "chunks", "bm25"})


def text_sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_cache_dir(root: Path) -> None:
    """Refuse cache folder ``root`` unless it is new, empty or an earlier ragassay cache, and can be written.

    The pipeline replaces entries under a cache folder, so one that holds anything besides cache entries is
    refused rather than mixed into. A folder that does not exist yet is created and removed again, since
    permission bits alone do not tell (root may write anywhere, yet not under /proc): reading a config leaves
    nothing behind, and the folder appears with the first cache write.
    """
    root = Path(root)
    entries = {e.name for e in root.iterdir()} if root.is_dir() else set()
    if entries and entries <= CACHE_ENTRIES:
        if not os.access(root, os.W_OK | os.X_OK):
            raise InputError(f"{root}: no permission to write in this cache folder; point cache_dir at a "
                             "folder you can write to")
        return
    check_output_dir(root, "cache")
    if root.exists():
        return
    missing = [root, *(p for p in root.parents if not p.exists())]
    make_dir(root)
    for folder in missing:
        try:
            folder.rmdir()
        except OSError:
            # Something appeared in it meanwhile (rmdir never removes content): leave it be.
            break


def _refuse_foreign(path: Path, ours: Callable[[Path], bool]) -> None:
    if path.exists() and not ours(path):
        raise InputError(f"{path}: exists and is not a ragassay cache file; refusing to overwrite it; move it "
                         "away or point cache_dir at a new folder")


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _is_manifest(path: Path) -> bool:
    man = _read_json(path)
    return isinstance(man, dict) and {"hashes", "lengths", "dim"} <= set(man)


def _is_chunk_artifact(path: Path) -> bool:
    data = _read_json(path)
    return isinstance(data, dict) and {"chunks", "terms", "sentences"} <= set(data)


def _npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


class EmbeddingCache:
    """Vectors and token lengths for texts, computing only the misses.

    The store is read once, kept in memory, and written back by :meth:`flush` (the pipeline flushes after
    indexing and after a run), so per-query lookups cost a dict probe, not a disk read.
    """

    def __init__(self, root: str | Path | None, embedder_name: str, namespace: str):
        self.dir = None
        if root is not None:
            slug = re.sub(r"[^A-Za-z0-9._-]+", "_", embedder_name)
            self.dir = Path(root) / "embeddings" / slug / namespace
        self.hits = 0
        self.misses = 0
        self._index: dict[str, int] | None = None
        self._blocks: list[np.ndarray] = []
        self._vecs: np.ndarray | None = None
        self._lens: list[int] = []
        self._dirty = False

    def _load(self) -> None:
        self._index = {}
        if self.dir is None or not (self.dir / "manifest.json").is_file():
            return
        try:
            man = json.loads((self.dir / "manifest.json").read_text(encoding="utf-8"))
            vecs = np.load(self.dir / "vectors.npy")
        except (OSError, ValueError, KeyError):
            # A damaged cache is rebuilt, not trusted.
            return
        if vecs.ndim != 2 or vecs.shape[0] != len(man.get("hashes", ())) or len(man.get("lengths", ())) != vecs.shape[0]:
            return
        self._index = {h: i for i, h in enumerate(man["hashes"])}
        self._vecs = vecs
        self._lens = [int(x) for x in man["lengths"]]

    def _matrix(self) -> np.ndarray:
        if self._blocks:
            parts = ([self._vecs] if self._vecs is not None else []) + self._blocks
            self._vecs = np.vstack(parts)
            self._blocks = []
        assert self._vecs is not None
        return self._vecs

    def missing(self, texts: list[str]) -> list[str]:
        """The texts :meth:`get` would embed now, in the order it would pass them (first occurrences of
        texts not cached): what a cluster must compute to answer that call as this machine would."""
        if self._index is None:
            self._load()
        index = self._index
        assert index is not None
        return [t for t, h in dict(zip(texts, map(text_sha, texts), strict=True)).items() if h not in index]

    def get(
        self,
        texts: list[str],
        embed: Callable[[list[str]], np.ndarray],
        lengths: Callable[[list[str]], np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray]:
        """(vectors float32 (n, dim), token lengths int64 (n,)) for ``texts``, in order."""
        if self._index is None:
            self._load()
        index = self._index
        assert index is not None
        hashes = [text_sha(t) for t in texts]
        missing: list[tuple[str, int]] = []
        fresh: set[str] = set()
        for i, h in enumerate(hashes):
            if h not in index and h not in fresh:
                fresh.add(h)
                missing.append((h, i))
        self.misses += len(missing)
        self.hits += len(texts) - sum(1 for h in hashes if h in fresh)
        if missing:
            new_texts = [texts[i] for _, i in missing]
            new_vecs = np.asarray(embed(new_texts), dtype=np.float32)
            base = len(self._lens)
            self._lens.extend(int(x) for x in lengths(new_texts))
            for j, (h, _) in enumerate(missing):
                index[h] = base + j
            self._blocks.append(new_vecs)
            self._dirty = True
        if not texts:
            return np.zeros((0, 0), dtype=np.float32), np.zeros(0, dtype=np.int64)
        rows = np.fromiter((index[h] for h in hashes), dtype=np.int64, count=len(hashes))
        return self._matrix()[rows], np.asarray(self._lens, dtype=np.int64)[rows]

    def flush(self) -> None:
        """Write new vectors to disk (atomically); a no-op without a cache dir or without new vectors."""
        if self.dir is None or not self._dirty or self._index is None:
            return
        vecs = self._matrix()
        manifest, vectors = self.dir / "manifest.json", self.dir / "vectors.npy"
        _refuse_foreign(manifest, _is_manifest)
        # vectors.npy is written first, so after a crash it may stand without a manifest; it is ours when
        # the manifest beside it is, or when the folder holds nothing but cache files.
        _refuse_foreign(vectors, lambda p: _is_manifest(manifest) or _only_cache_files(self.dir))
        make_dir(self.dir)
        hashes = [h for h, _ in sorted(self._index.items(), key=lambda kv: kv[1])]
        atomic_write_bytes(vectors, _npy_bytes(vecs))
        man = {"hashes": hashes, "lengths": self._lens, "dim": int(vecs.shape[1])}
        atomic_write_bytes(manifest, json.dumps(man).encode("utf-8"))
        self._dirty = False


def _only_cache_files(folder: Path) -> bool:
    # ".<name>.<random>.tmp" is what an interrupted atomic write leaves behind.
    return all(e.name in ("vectors.npy", "manifest.json") or (e.name.startswith(".") and e.name.endswith(".tmp"))
               for e in folder.iterdir())


def load_chunk_artifact(
    path: Path, docs: dict[str, str]
) -> tuple[list, list[list[str]], list[list[str]]] | None:
    """(chunks, BM25-analyzer terms, sentences) saved by :func:`save_chunk_artifact`.

    ``sentences[i]`` lists chunk i's sentences as ``[start, end, support-analyzer terms]`` (offsets relative
    to the chunk).

    None if the file is absent or damaged. Spans are re-sliced from the canonical text, so the cached file
    can never disagree with the corpus.
    """
    from ragassay.pipeline.chunkers import Chunk

    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        chunks = [Chunk(f"{d}:{a}-{b}", d, a, b, docs[d][a:b], n) for d, a, b, n in data["chunks"]]
        terms, support = data["terms"], data["sentences"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not len(terms) == len(support) == len(chunks):
        return None
    return chunks, terms, support


def save_chunk_artifact(path: Path, chunks: list, terms: list[list[str]], sentences: list[list]) -> None:
    """Write the artifact :func:`load_chunk_artifact` reads; an :class:`InputError` if ``path`` holds a file
    that is not one, or its folder cannot be written."""
    _refuse_foreign(path, _is_chunk_artifact)
    body = json.dumps({"chunks": [[c.doc_id, c.start, c.end, c.tokens] for c in chunks], "terms": terms,
                       "sentences": sentences}, ensure_ascii=False, separators=(",", ":"))
    atomic_write_bytes(path, body.encode("utf-8"))
