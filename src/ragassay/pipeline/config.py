"""Pipeline configuration: YAML validated by pydantic; an unknown key is an error naming the key and file."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ragassay.errors import SchemaError
from ragassay.pipeline.generator import DEFAULT_ABSTAIN_FLOOR
from ragassay.pipeline.tokens import TOKEN_COUNTER_NAME


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChunkerConfig(_Section):
    kind: Literal["fixed", "recursive", "sentence"] = "recursive"
    size: int = Field(default=128, ge=1, description="tokens per chunk (at most)")
    overlap: int = Field(default=0, ge=0, description="tokens shared by consecutive fixed windows")
    token_counter: Literal["regex-wordpunct-v1"] = TOKEN_COUNTER_NAME

    @model_validator(mode="after")
    def _overlap(self) -> ChunkerConfig:
        if self.overlap >= self.size:
            raise ValueError(f"overlap ({self.overlap}) must be smaller than size ({self.size})")
        if self.overlap and self.kind != "fixed":
            raise ValueError(f"overlap applies to the fixed chunker only; set overlap: 0 for kind {self.kind}")
        return self


class BM25Config(_Section):
    enabled: bool = True
    k1: float = Field(default=1.2, ge=0)
    b: float = Field(default=0.75, ge=0, le=1)
    lowercase: bool = True
    stemmer: str | None = "english"
    stopwords: str | None = "en"
    depth: int = Field(default=50, ge=1, description="branch_depth")


class DenseConfig(_Section):
    enabled: bool = False
    embedder: str = Field(default="wordllama", description="wordllama | minilm | path to a local model")
    query_prefix: str = ""
    passage_prefix: str = ""
    max_tokens: int | None = Field(default=None, ge=1, description="limit for truncation counting")
    index: Literal["exact", "hnsw"] = "exact"
    hnsw_m: int = Field(default=32, ge=2)
    ef_construction: int = Field(default=64, ge=1)
    ef_search: int = Field(default=64, ge=1)
    depth: int = Field(default=50, ge=1, description="branch_depth")
    batch_size: int = Field(default=64, ge=1)


class FusionConfig(_Section):
    method: Literal["rrf", "weighted"] = "rrf"
    k: float = Field(default=60.0, ge=0, description="RRF constant")
    weights: dict[str, float] | None = None
    depth: int = Field(default=50, ge=1, description="fusion_depth")


class RerankerConfig(_Section):
    kind: Literal["none", "embedding", "lexical", "cross-encoder"] = "none"
    model: str | None = Field(default=None, description="embedder name/path (embedding) or CrossEncoder path")
    final_k: int = Field(default=10, ge=1, description="units offered to the packer")

    @model_validator(mode="after")
    def _model(self) -> RerankerConfig:
        if self.kind == "cross-encoder" and not self.model:
            raise ValueError("reranker kind cross-encoder needs model: <local path to a CrossEncoder>")
        return self


class PackerConfig(_Section):
    budget_tokens: int = Field(default=1000, ge=0)
    policy: Literal["stop", "skip"] = "stop"


class GeneratorConfig(_Section):
    kind: Literal["extractive"] = "extractive"
    abstain_floor: float = Field(default=DEFAULT_ABSTAIN_FLOOR, ge=0, le=1,
                                 description="least support a sentence needs to be used (see generator.py)")
    max_sentences: int = Field(default=2, ge=1)
    absent_names: bool = Field(default=True, description="abstain when the question names an unseen term")


class PipelineConfig(_Section):
    name: str = "reference"
    chunker: ChunkerConfig = Field(default_factory=ChunkerConfig)
    bm25: BM25Config = Field(default_factory=BM25Config)
    dense: DenseConfig = Field(default_factory=DenseConfig)
    fusion: FusionConfig = Field(default_factory=FusionConfig)
    reranker: RerankerConfig = Field(default_factory=RerankerConfig)
    packer: PackerConfig = Field(default_factory=PackerConfig)
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    oracle: bool = False
    cache_dir: str | None = None

    @model_validator(mode="after")
    def _branches(self) -> PipelineConfig:
        if not self.oracle and not (self.bm25.enabled or self.dense.enabled):
            raise ValueError("enable at least one retrieval branch (bm25 or dense), or set oracle: true")
        return self

    def hashed(self) -> dict[str, Any]:
        """The config as recorded in the run header (cache_dir is a location, not a setting)."""
        return self.model_dump(mode="json", exclude={"cache_dir"})


def _describe(exc: ValidationError, where: str) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            lines.append(f"{where}: unknown key '{loc}'; remove it or fix its spelling")
        else:
            lines.append(f"{where}: {loc}: {err['msg']}")
    return "\n".join(lines)


def parse_config(data: dict[str, Any] | None, where: str = "<config>") -> PipelineConfig:
    """Validate a config mapping; errors name every bad key and ``where`` it came from."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SchemaError(f"{where}: a pipeline config must be a mapping, got {type(data).__name__}")
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as exc:
        raise SchemaError(_describe(exc, where)) from None


def load_config(path: str | Path) -> PipelineConfig:
    """Read and validate a pipeline YAML file."""
    path = Path(path)
    if not path.is_file():
        raise SchemaError(f"{path}: config file not found")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise SchemaError(f"{path}{line}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    return parse_config(data, str(path))
