"""Pipeline configuration: YAML validated by pydantic, every problem one line naming the file and the key.

Every section forbids unknown keys and takes values strictly as typed (``enabled: 1`` or ``depth: "10"`` is
an error, not a silent conversion; NaN and infinity are refused). Checks that span sections — fusion weights
naming enabled branches, ``final_k`` within ``fusion.depth``, a reranker model only where one is used — run
on the whole config, so a config that validates has no setting that is silently capped or ignored at run
time. A problem reads ``config.yaml: fusion.weights.bogus (line 7): ...``.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from ragassay.errors import InputError, SchemaError
from ragassay.pipeline.analyzer import STOPWORD_LISTS, stemmers
from ragassay.pipeline.generator import DEFAULT_ABSTAIN_FLOOR
from ragassay.pipeline.tokens import TOKEN_COUNTER_NAME

BRANCHES = ("bm25", "dense")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class ChunkerConfig(_Section):
    kind: Literal["fixed", "recursive", "sentence"] = "recursive"
    size: int = Field(default=128, ge=1, description="tokens per chunk (at most)")
    overlap: int = Field(default=0, ge=0, description="tokens shared by consecutive fixed windows")
    token_counter: Literal["regex-wordpunct-v1"] = TOKEN_COUNTER_NAME


class BM25Config(_Section):
    enabled: bool = True
    k1: float = Field(default=1.2, ge=0)
    b: float = Field(default=0.75, ge=0, le=1)
    lowercase: bool = True
    stemmer: str | None = "english"
    stopwords: str | None = "en"
    depth: int = Field(default=50, ge=1, description="branch_depth")

    @field_validator("stemmer")
    @classmethod
    def _stemmer(cls, v: str | None) -> str | None:
        if v is not None and v not in stemmers():
            raise ValueError(f"unknown stemmer {v!r}; use one of {', '.join(stemmers())}, or null for none")
        return v

    @field_validator("stopwords")
    @classmethod
    def _stopwords(cls, v: str | None) -> str | None:
        if v is not None and v not in STOPWORD_LISTS:
            raise ValueError(f"unknown stopword list {v!r}; use one of {', '.join(sorted(STOPWORD_LISTS))}, "
                             "or null for none")
        return v


class DenseConfig(_Section):
    enabled: bool = False
    embedder: str = Field(default="wordllama", min_length=1,
                          description="wordllama | minilm | path to a local model")
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
    model: str | None = Field(default=None, min_length=1,
                              description="embedder name/path (embedding) or CrossEncoder path")
    final_k: int = Field(default=10, ge=1, description="units offered to the packer")


class PackerConfig(_Section):
    budget_tokens: int = Field(default=1000, ge=0)
    policy: Literal["stop", "skip"] = "stop"


_LLM_KEYS = ("provider", "model", "base_url", "max_tokens", "price_input", "price_output")


class GeneratorConfig(_Section):
    kind: Literal["extractive", "llm"] = "extractive"
    abstain_floor: float = Field(default=DEFAULT_ABSTAIN_FLOOR, ge=0, le=1,
                                 description="least support a sentence needs to be used (see generator.py)")
    max_sentences: int = Field(default=2, ge=1)
    absent_names: bool = Field(default=True, description="abstain when the question names an unseen term")
    provider: Literal["openai", "anthropic"] | None = None
    model: str | None = Field(default=None, min_length=1)
    base_url: str | None = Field(default=None, min_length=1, description="any OpenAI-compatible server")
    max_tokens: int | None = Field(default=None, ge=1)
    price_input: float | None = Field(default=None, ge=0, description="USD per million input tokens")
    price_output: float | None = Field(default=None, ge=0, description="USD per million output tokens")

    @model_validator(mode="after")
    def _llm_keys(self) -> GeneratorConfig:
        given = [k for k in _LLM_KEYS if getattr(self, k) is not None]
        if self.kind == "extractive" and given:
            raise ValueError(f"{', '.join(given)}: only the llm generator takes these (set kind: llm)")
        if self.kind == "llm":
            missing = [k for k in ("provider", "model", "price_input", "price_output") if getattr(self, k) is None]
            if missing:
                raise ValueError(f"kind llm needs {', '.join(missing)} (prices in USD per million tokens, 0 for "
                                 "a local server)")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        # An extractive config dumps exactly as before the llm keys existed, so its config sha is unchanged.
        out = handler(self)
        if self.kind == "extractive":
            for k in _LLM_KEYS:
                out.pop(k, None)
        return out


class ConfigProblems(ValueError):
    """Cross-section problems of a config, each ``(key path, message)``."""

    def __init__(self, problems: list[tuple[tuple[str, ...], str]]):
        self.problems = problems
        super().__init__("; ".join(f"{'.'.join(loc)}: {msg}" for loc, msg in problems))


class PipelineConfig(_Section):
    name: str = Field(default="reference", min_length=1)
    chunker: ChunkerConfig = Field(default_factory=ChunkerConfig)
    bm25: BM25Config = Field(default_factory=BM25Config)
    dense: DenseConfig = Field(default_factory=DenseConfig)
    fusion: FusionConfig = Field(default_factory=FusionConfig)
    reranker: RerankerConfig = Field(default_factory=RerankerConfig)
    packer: PackerConfig = Field(default_factory=PackerConfig)
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    oracle: bool = False
    cache_dir: str | None = Field(default=None, min_length=1)

    @field_validator("cache_dir")
    @classmethod
    def _home(cls, v: str | None) -> str | None:
        # "~/.cache/x" means the home folder, as in a shell, not a folder named "~" in the working directory.
        return None if v is None else str(Path(v).expanduser())

    @model_validator(mode="after")
    def _whole(self) -> PipelineConfig:
        problems = cross_section_problems(self)
        if problems:
            raise ConfigProblems(problems)
        return self

    def hashed(self) -> dict[str, Any]:
        """The config as recorded in the run header (cache_dir is a location, not a setting)."""
        return self.model_dump(mode="json", exclude={"cache_dir"})


def cross_section_problems(cfg: PipelineConfig) -> list[tuple[tuple[str, ...], str]]:
    """Settings that are valid alone but contradict each other, or would be ignored at run time."""
    out: list[tuple[tuple[str, ...], str]] = []
    c = cfg.chunker
    if c.overlap and c.overlap >= c.size:
        out.append((("chunker", "overlap"), f"overlap ({c.overlap}) must be smaller than size ({c.size})"))
    if c.overlap and c.kind != "fixed":
        out.append((("chunker", "overlap"),
                    f"overlap applies to the fixed chunker only; set overlap: 0 for kind {c.kind}"))
    enabled = [b for b in BRANCHES if getattr(cfg, b).enabled]
    if not cfg.oracle and not enabled:
        out.append((("bm25", "enabled"),
                    "enable at least one retrieval branch (bm25 or dense), or set oracle: true"))
    f = cfg.fusion
    if f.weights is not None:
        if f.method != "weighted":
            out.append((("fusion", "weights"),
                        f"weights apply to method weighted only (method is {f.method}); remove them or set "
                        "method: weighted"))
        for branch, w in f.weights.items():
            if branch not in BRANCHES:
                out.append((("fusion", "weights", branch),
                            f"no retrieval branch named {branch!r}; the branches are bm25 and dense"))
            elif not cfg.oracle and branch not in enabled:
                out.append((("fusion", "weights", branch),
                            f"the {branch} branch is not enabled; remove its weight or set "
                            f"{branch}.enabled: true"))
            if w < 0:
                out.append((("fusion", "weights", branch), f"a weight must be >= 0, got {w}"))
        if f.weights and all(w == 0 for w in f.weights.values()):
            out.append((("fusion", "weights"), "every weight is 0, so every fused score would be 0; "
                                               "give at least one branch a positive weight"))
    r = cfg.reranker
    if r.final_k > f.depth:
        out.append((("reranker", "final_k"),
                    f"{r.final_k} is more than fusion.depth ({f.depth}): only fused units can be offered, so "
                    "metrics @final_k would be capped silently; lower final_k or raise fusion.depth"))
    if r.kind == "cross-encoder" and not r.model:
        out.append((("reranker", "model"),
                    "reranker kind cross-encoder needs model: <local path to a CrossEncoder>"))
    if r.model is not None and r.kind in ("none", "lexical"):
        out.append((("reranker", "model"),
                    f"a model is not used by reranker kind {r.kind}; remove it or set kind: embedding or "
                    "cross-encoder"))
    return out


def _line_of(node, loc: tuple) -> int | None:
    """1-based line of the deepest key of ``loc`` found in the YAML node tree (None without a node)."""
    import yaml

    line = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == str(part)),
                         None)
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _section_keys(loc: tuple) -> list[str]:
    """The keys valid where ``loc`` points (for a 'did you mean' hint on an unknown key)."""
    model: type[BaseModel] = PipelineConfig
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        ann = getattr(field, "annotation", None)
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        model = ann
    return list(model.model_fields)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _problems(exc: ValidationError) -> list[tuple[tuple, str, bool]]:
    """(key path, message, is_unknown_key) for every error pydantic found, cross-section ones expanded."""
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, ConfigProblems):
            out.extend((tuple(loc + p), m, False) for p, m in cause.problems)
        elif err["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(loc[-1]), _section_keys(loc), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            out.append((loc, f"remove it or fix its spelling{hint}", True))
        elif err["type"] == "value_error":
            out.append((loc, str(cause) if cause is not None else err["msg"], False))
        else:
            got = "" if err["type"] == "missing" else f", got {_short(err['input'])}"
            out.append((loc, err["msg"] + got, False))
    return out


def _describe(exc: ValidationError, where: str, node=None) -> str:
    lines = []
    for loc, msg, unknown in _problems(exc):
        path = ".".join(str(p) for p in loc) or "(top level)"
        line = _line_of(node, loc) if node is not None else None
        at = f" (line {line})" if line is not None else ""
        lines.append(f"{where}: unknown key '{path}'{at}; {msg}" if unknown else f"{where}: {path}{at}: {msg}")
    return "\n".join(lines)


def parse_config(data: dict[str, Any] | None, where: str = "<config>", node=None) -> PipelineConfig:
    """Validate a config mapping; errors name every bad key and ``where`` it came from (``node``, the
    composed YAML document, adds line numbers)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SchemaError(f"{where}: a pipeline config must be a mapping of sections (name, chunker, bm25, "
                          f"dense, fusion, reranker, packer, generator), got {type(data).__name__}")
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as exc:
        raise SchemaError(_describe(exc, where, node)) from None


def load_config(path: str | Path) -> PipelineConfig:
    """Read and validate a pipeline YAML file, and check that its ``cache_dir`` can be used."""
    from ragassay.pipeline.cache import check_cache_dir
    from ragassay.yamlio import load_yaml_node

    path = Path(path)
    data, node = load_yaml_node(path, "pipeline config")
    if node is None:
        raise SchemaError(f"{path}: the pipeline config is empty; write at least its name and one retrieval "
                          "branch (see docs/pipeline.md)")
    cfg = parse_config(data, str(path), node)
    if cfg.cache_dir is not None:
        try:
            check_cache_dir(Path(cfg.cache_dir))
        except InputError as e:
            line = _line_of(node, ("cache_dir",))
            raise SchemaError(f"{path}: cache_dir (line {line}): {e}") from None
    return cfg
